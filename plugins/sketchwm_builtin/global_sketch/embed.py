"""The embedding of ``global-sketch`` (Alg. 1 of the seed paper): the expected sketch, the residual
gradient and the exponential tilt of the masked marginals.

At each denoising step with η_t > 0:

1. expected sketch ĥ_{k,t} from the frozen tokens and the masked marginals (eq. 5),
2. residual gradient r_{k,t} = u_k − λĥ_{k,t} (the score's ½∇_h S at ĥ),
3. per-token score a_{k,t}(v) = ⟨r_{k,t}, φ_k(v)⟩ / √N (eq. 6),
4. exponential tilt p̃_i ∝ p_i · exp(η_t a_{k,t}) of every target marginal (eq. 7), in logit space:
   logits + η_t a (the sampler's softmax or Gumbel-max normalises).

η_t = δ·√n̂·s(τ) with a schedule s of the reverse time τ = t/T ∈ [0, 1] (:func:`schedule_weight`):
τ is the masked fraction of the positions being denoised, of the current block under
semi-autoregressive sampling (:func:`denoising_time`). The √n̂ makes δ the typical logit shift per
unit of ⟨r, φ(v)⟩, independent of the length.

**Presence counting.** ``count`` is the paper's sketch, h = Σ_j φ(y_j)/√N. ``presence`` sketches the
set of distinct tokens: h = Σ_v x_v φ(v)/√n_d with x_v = 1[v ∈ y] on the kept tokens (the sketch's
``exclude_top`` most frequent prior tokens have φ = 0) and n_d = Σ_v x_v; copies of a token already
present change nothing. Under the independent masked marginals of Def. 2.1, x_v = 1 if v is frozen
(some i ∈ F_t holds v), else P(x_v = 1) = 1 − Π_{i∈M_t}(1 − p_i(v)), so the analogue of eq. 5 is

    ŵ_v = 1[v ∈ F_t] + 1[v ∉ F_t]·(1 − exp(Σ_{i∈M_t} log(1 − p_i(v)))),   ĥ = Φᵀŵ / √n̂,   n̂ = Σ_v keep_v ŵ_v,

with the plug-in n̂ = E[n_d] (a ratio of expectations, like the paper's use of ĥ as a one-step
surrogate; its error is O(Var(n_d)/n̂²)). The residual gradient is the exact derivative of ½S(ĥ)
in p_i(v), n̂ included:

    a_i(v) = ⟨r, ∂ĥ/∂p_i(v)⟩ = (⟨r, φ(v)⟩ − ½ keep_v ⟨r, ĥ⟩/√n̂) / √n̂ · Π_{j∈M_t, j≠i}(1 − p_j(v)),

zero for tokens already frozen, r = ½∇_h S at ĥ (u_k − λĥ for eq. 2). For ``count`` this reduces
to eq. 5-7 with n̂ = N.

**Texts that stop at EOS** (backends with an ``eos_token_id``, the engine's ``stop_at_eos``). The
detector scores the text before the first EOS e, L = min{i : Y_i = e}. Under the independent
marginals position i is inside the text with probability r_i = Π_{j<i}(1 − p_j(e)), so

    count:     ŵ_v = Σ_i r_i p_i(v) (v ≠ e), ŵ_e = 0,   n̂ = E[L] = Σ_i r_i (1 − p_i(e));
    presence:  1 − ŵ_v = Σ_{L<G} A_L(v) p_L(e) + A_G(v),  A_L(v) = Π_{j<L}(1 − p_j(e) − p_j(v)),
               ŵ_e = 0,  n̂ = Σ_v keep_v ŵ_v,

and the exact content gradient is a_i(v) = ∂ŵ_v/∂p_i(v) · ∂(½S)/∂ŵ_v, with ∂ŵ_v/∂p_i(v) = r_i
(count) or (Σ_{L>i} A_L(v) p_L(e) + A_G(v)) / (1 − p_i(e) − p_i(v)) (presence)
(:meth:`sketchwm.components.Sketch.expected_weights_stopping`). EOS is not tilted as a content
token: the tilt keeps p̃_i(e) = p_i(e) and tilts the other tokens among themselves, so the
watermark does not move the model's decision to stop.

**Computation.** The column sums over M_t come from one cache-blocked softmax pass
(:func:`sketchwm.marginal_sums.masked_marginal_sums`), kept between refreshes by
:class:`sketchwm_builtin.global_sketch.running.MaskedStatistic`. With ``tail_epsilon`` ε > 0 the
tokens below ε at every masked row are linearised (log(1 − p) ≈ −p, 1/(1 − p_i) ≈ 1: a moves by at
most a relative ε/(1 − ε)) and the others computed exactly, so the tilt is one broadcast add plus a
scatter on the exact columns (:class:`TiltParts`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from sketchwm.components import DenoiseStep, Marginals, serial_on_cpu
from sketchwm.components.expected_sketch import capped_row_derivative
from sketchwm.errors import ConfigError

from .running import MaskedStatistic

__all__ = ["TiltParts", "MarginalGradient", "SketchTilt", "tilt_target_rows", "read_marginals", "committed_coverage",
           "denoising_time", "schedule_weight"]


@dataclass
class TiltParts:
    """The residual gradient a_i(v) of one step, unmultiplied (:meth:`MarginalGradient.parts`).

    a_i(v) = factor(v) ∘ rows_i(v) with ∘ = ``op`` (``add``: factor alone; ``mul``/``div``: times/over
    ``rows``), plus, for ``add`` with ``cols``, factor(v)·col_ratio_i(v) on the exact columns v ∈ cols.

    Attributes:
        factor: (B, V) float32 per-token part.
        n_hat: (B,) float32 normaliser n̂.
        op: ``add`` | ``mul`` | ``div``.
        rows: (B, K, V) or (B, K, 1) float32 per-row part for ``mul``/``div``, else None.
        cols: (C,) int64 exact columns, or None; col_ratio: (B, K, C) float32 p/(1 − p) there.
        tail_max: the largest tail probability left linear (the achieved ε), a float or a 0-dim tensor.
    """
    factor: torch.Tensor
    n_hat: torch.Tensor
    op: str
    rows: torch.Tensor | None = None
    cols: torch.Tensor | None = None
    col_ratio: torch.Tensor | None = None
    tail_max: "float | torch.Tensor" = 0.0

    def gradient(self, K: int, V: int) -> torch.Tensor:
        """a itself: (B, 1, V) float32 where it is the same at every row (``add`` without columns), else
        (B, K, V) float32 for the K target rows."""
        B = self.factor.shape[0]
        if self.op == "add" and self.cols is None:  # the same a at every row
            return self.factor[:, None, :]
        a = torch.zeros(B, K, V, dtype=torch.float32, device=self.factor.device)
        return self.apply(a, torch.ones(B, dtype=torch.float32, device=a.device))

    def apply(self, logits: torch.Tensor, eta: torch.Tensor, src: torch.Tensor | None = None) -> torch.Tensor:
        """logits = src + η a (``src`` None: logits += η a in place), one fused pass over (B, K, V)
        (plus a (B, K, C) scatter): logits, src (B, K, V) float32, eta (B,) float32. Returns ``logits``."""
        with serial_on_cpu(self.factor.device):
            f = (self.factor * eta[:, None])[:, None, :]  # (B, 1, V) η_t·factor
        src = logits if src is None else src
        if self.op == "div":
            return torch.addcdiv(src, f, self.rows, out=logits)
        if self.op == "mul":
            return torch.addcmul(src, self.rows, f, out=logits)
        torch.add(src, f, out=logits)
        if self.cols is not None and self.cols.numel():
            B, K = logits.shape[:2]
            idx = self.cols[None, None, :].expand(B, K, -1)
            logits.scatter_add_(2, idx, f[:, :, self.cols] * self.col_ratio)
        return logits


class MarginalGradient:
    """a_{k,t}(v) = ½ ∂S(ĥ)/∂p_i(v) at the target rows (eq. 6, and its presence and stopping analogues
    in the module doc), as :class:`TiltParts`.

    Args:
        sketch: the scheme's sketch φ_k; score_fn: its score (``residual``); u: (D,) float32 direction u_k
            (the attribute ``u`` may be set to (B, D), one direction per text of the batch: a key family).
        vocab_size: V; objective: ``score`` or ``statistic`` (:class:`GlobalSketchParams`).
        statistic: the column statistic over M_t of this generation.
    """

    def __init__(self, sketch: Any, score_fn: Any, u: torch.Tensor, vocab_size: int, objective: str,
                 statistic: MaskedStatistic):
        self.sketch, self.score_fn, self.u, self.vocab_size = sketch, score_fn, u, vocab_size
        self.objective, self.statistic = objective, statistic
        self._probs_buf: torch.Tensor | None = None

    def softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax(logits, -1) written into a buffer reused across steps (no fresh (B, G, V) allocation,
        whose page faults cost as much as the softmax itself on CPU). The buffer is overwritten at the
        next step; callers must not keep the result."""
        flat = self._probs_buf
        n = logits.numel()
        if flat is None or flat.numel() < n or flat.device != logits.device or flat.dtype != logits.dtype:
            flat = torch.empty(n, dtype=logits.dtype, device=logits.device)
            self._probs_buf = flat
        buf = flat[:n].view(logits.shape)  # the packed path shrinks (B, M, V) step by step: reuse the storage
        try:
            return torch.ops.aten._softmax.out(logits, -1, False, out=buf)
        except (RuntimeError, AttributeError):  # an exotic backend without the out= kernel
            return torch.softmax(logits, dim=-1)

    def parts(self, marginals: Marginals, tokens: torch.Tensor, masked: torch.Tensor, eos: int | None) -> TiltParts:
        """a_{k,t} as a per-token factor and per-row corrections: marginals holding every masked row
        (or the targets between refreshes), tokens (B, G) int64, masked (B, G) bool M_t, eos the stop
        token or None.

        Without a stop token the column sums come from :class:`MaskedStatistic` (one cache-blocked
        softmax pass; ``presence`` with ε = ``tail_epsilon``):

        * ``count``: a_i(v) = ∂(½S)/∂ŵ_v, the same at every row (eq. 6; ``op`` add, no columns).
        * ``presence``: a_i(v) = factor(v)/(1 − p_i(v)) with factor(v) = 1[v ∉ F_t]·Π_{j∈M_t}(1 − p_j(v))·∂(½S)/∂ŵ_v
          (p capped at 1 − 10⁻⁶). On the tail (p_j(v) < ε at every row) 1/(1 − p_i(v)) is replaced
          by 1 (``op`` add: the factor at every row) and the exact columns get factor·p/(1 − p) on
          top, so the relative error of a is at most ε/(1 − ε); dense (ε = 0, or too many columns
          above ε): ``op`` div with rows q_i = 1 − p_i at the targets.
        * ``capped``: ``op`` mul with rows ∂ŵ_v/∂p_i(v) = P(C_{−i}(v) ≤ k − 1 − f_v) at the targets.

        With a stop token: ``op`` mul, rows = ∂ŵ_v/∂p_i(v) at the targets ((B, K, V) or (B, K, 1)),
        factor = ∂(½S)/∂ŵ with 0 at EOS (exact).

        Raises:
            ConfigError: the ``capped`` sketch with a stop token.
            InputError: incomplete marginals before any complete step (:meth:`MaskedStatistic.state`).
        """
        N = tokens.shape[1]
        dev = marginals.logits.device  # the (B, V) ops below run serially on CPU: a thread-pool wake costs more
        presence = self.sketch.counting in ("presence", "capped")  # n̂ = Σ_v keep_v ŵ_v depends on the marginals
        capped = self.sketch.counting == "capped"
        sums = None
        if eos is not None and capped:
            raise ConfigError("the capped sketch has no expected sketch for texts that stop at an EOS yet: use "
                              "counting='presence', or a sampler with stop_at_eos off")
        if eos is not None:  # the cumulative scans need every row: the last complete step's, targets fresh
            marginals = self.statistic.all_rows(marginals, masked)
            # dw only at the targets (one batched product) unless every row is one
            probs = self.softmax(marginals.logits)  # (B, R, V), buffer
            at = None if marginals.rows_are_targets else marginals.targets
            w_hat, n_hat, dw = self.sketch.expected_weights_stopping(tokens, masked, probs, marginals.positions,
                                                                     marginals.valid, eos, rows=at)
        else:
            stat, sums = self.statistic.sums(marginals, masked)
            with serial_on_cpu(dev):
                frozen = self.sketch.counts(tokens.clamp(0, self.vocab_size - 1), ~masked)  # (B, V)
            w_hat, n_hat = self.sketch.weights_from_sums(frozen, stat, N)
        with serial_on_cpu(dev):
            root = n_hat.sqrt()[:, None]  # (B, 1)
            h_hat = self.sketch.project(w_hat) / root  # (B, D), eq. 5
            r = self.score_fn.residual(self.u, h_hat)  # (B, D), ½∇_h S at ĥ
            t = self.sketch.token_scores(r)  # (B, V) ⟨r, φ(v)⟩
            if self.objective == "statistic":  # ∂E[T]/∂ŵ_v = c_k(v), on δ's scale
                u = self.u.to(r.device, torch.float32)
                dS_dw = self.sketch.token_scores(u.expand_as(r) if u.dim() == 1 else u) / root
            elif not presence:  # n̂ (N or E[L]) does not depend on the content marginals
                dS_dw = t / root
            else:  # ĥ = Φᵀŵ/√n̂, n̂ = Σ_v keep_v ŵ_v: ∂ĥ/∂ŵ_v = (φ(v) − ½ keep_v ĥ/√n̂)/√n̂
                half_rh = 0.5 * (r * h_hat).sum(1, keepdim=True) / root  # (B, 1)
                if self.sketch.keep is not None:
                    keep = self.sketch.keep_table()[None, : self.vocab_size].to(t.device)  # (1, V)
                    dS_dw = (t - half_rh * keep) / root  # (B, V)
                else:
                    dS_dw = (t - half_rh) / root
            if eos is not None:
                dS_dw[:, eos] = 0.0  # EOS untilted
                return TiltParts(dS_dw, n_hat, "mul", rows=dw)  # (B, K, ·): at the targets, or every row being one
            if not presence:  # count: ∂ĥ/∂p_i(v) = φ(v)/√N at every masked row
                return TiltParts(dS_dw, n_hat, "add")
            if capped:  # ∂ŵ_v/∂p_i(v) = P(C_{−i}(v) ≤ k − 1 − f_v) at the targets (expected_sketch, exact)
                p_t = torch.softmax(marginals.at_target_rows(marginals.logits).float(), -1)  # (B, K, V)
                return TiltParts(dS_dw, n_hat, "mul", rows=capped_row_derivative(frozen, stat, p_t))
            # presence: Π_j(1 − p_j(v)) ∂(½S)/∂ŵ_v, 0 on frozen tokens
            factor = torch.exp(stat).mul_(dS_dw).masked_fill_(frozen > 0, 0.0)  # (B, V)
        if sums.dense:  # q_i = 1 − p_i at the targets, p = softmax of the target rows
            q = self.softmax(marginals.at_target_rows(marginals.logits))  # (B, K, V), buffer
            return TiltParts(factor, n_hat, "div", rows=q.clamp_(max=1 - 1e-6).neg_().add_(1.0))
        if sums.p_cols is None:  # no exact column: the factor alone at every row
            return TiltParts(factor, n_hat, "add", tail_max=sums.tail_max)
        p_t = marginals.at_target_rows(sums.p_cols).clamp(max=1 - 1e-6)  # (B, K, C) p_i at the exact columns
        return TiltParts(factor, n_hat, "add", cols=sums.cols, col_ratio=p_t / (1.0 - p_t), tail_max=sums.tail_max)


def tilt_target_rows(marginals: Marginals, parts: TiltParts, eta: torch.Tensor, eos: int | None) -> torch.Tensor:
    """The tilted target rows logits + η_t a, (B, K, V) float32 (η (B,) float32), with EOS kept:
    p̃_i(e) = p_i(e) and p̃_i(v) = (1 − p_i(e))·p_i(v)e^{η a(v)} / Σ_{z≠e} p_i(z)e^{η a(z)}.

    Tilts ``marginals.target_logits()`` in place (with ``Marginals.out`` and no stop token, writes
    logits + η a there in one pass); call after the gradient has read the rows.
    """
    if eos is None and marginals.out is not None and marginals.rows_are_targets:  # copy and tilt in one pass
        return parts.apply(marginals.out, eta, src=marginals.logits)
    logits = marginals.target_logits()  # (B, K, V)
    if eos is None:
        parts.apply(logits, eta)
        return logits  # (B, K, V)
    eos_logit = logits[..., eos].clone()  # (B, K)
    logits[..., eos] = float("-inf")
    lse_before = torch.logsumexp(logits, -1)  # (B, K) log Σ_{z≠e} exp(logit z)
    parts.apply(logits, eta)
    shift = torch.logsumexp(logits, -1) - lse_before  # log of the content tilt's normaliser
    logits[..., eos] = eos_logit + torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    return logits


def read_marginals(step: DenoiseStep, mode: str) -> tuple[Marginals, float]:
    """The marginals eq. 5-6 are taken at and the factor on the tilt of the model's logits
    (``GlobalSketchParams.marginals`` = ``mode``): ``step.marginals`` and 1, or, for ``sampled`` at a
    temperature T ∉ {0, 1}, a copy whose logits (B, R, V) are l/T (no ``out``) and T."""
    T = step.temperature
    if mode == "model" or T is None or T == 0.0 or T == 1.0:
        return step.marginals, 1.0
    return replace(step.marginals, logits=step.marginals.logits / T, out=None, widen=None), float(T)


def committed_coverage(sketch: Any, vocab_size: int, tokens: torch.Tensor, masked: torch.Tensor,
                       expected: torch.Tensor) -> torch.Tensor:
    """Distinct kept tokens among the committed generated tokens over their number: tokens (B, N)
    int64, masked (B, N) bool, expected (B,) float32 (used where fewer than 8 are committed) → (B,)."""
    with serial_on_cpu(tokens.device):
        frozen = sketch.counts(tokens.clamp(0, vocab_size - 1), ~masked)  # (B, V)
        keep = sketch.keep_table()[None, : vocab_size].to(frozen.device)  # (1, V)
        distinct = ((frozen > 0).float() * keep).sum(1)  # (B,)
        n = (~masked).sum(1).to(distinct.dtype)  # (B,)
        return torch.where(n >= 8, distinct / n.clamp_min(1.0), expected.to(distinct.dtype))


def denoising_time(step: DenoiseStep) -> torch.Tensor:
    """The paper's reverse time as a fraction, τ = t/T ∈ [0, 1], of each text at this step: (B,) float32.

    τ is the fraction of the positions being denoised that are still masked before the step:
    the masked fraction of the canvas (τ = 1 on the all-[MASK] state S_T, 0 on S_0) when it is
    decoded as one block. A semi-autoregressive sampler is a sequence of such reverse processes,
    one per block, each conditioned on the blocks before it (LLaDA's semi-autoregressive
    remasking): every block runs through τ = 1 → 0 in its own steps, and τ is the masked fraction
    of the current block (``step.block``). So every position is tilted at the same point of its own
    denoising, and ``late`` tilts the end of every block, the first included. τ is read off the
    state, not a step counter, so loops outside the engine get the same η_t.
    """
    b0, b1 = step.block
    return step.masked[:, b0:b1].float().mean(1)


def schedule_weight(tau: torch.Tensor, block_steps: int, schedule: str, late_fraction: float) -> torch.Tensor:
    """s(τ) of η_t = δ·√n̂·s(τ): τ (B,) → (B,) float32 in [0, 1].

    ``constant``: 1. ``late``: 1 when τ ≤ ``late_fraction`` (the last fraction of the denoising of
    each block), else 0. ``ramp``: 1 − τ + 1/T_b (the fraction of the block decided once the step
    is done under an even transfer schedule), from 1/T_b at the first step of a block to 1 at its
    last; T_b = ``block_steps``.
    """
    if schedule == "constant":
        return torch.ones_like(tau)
    if schedule == "late":
        return (tau <= late_fraction + 1e-6).to(tau.dtype)
    return (1.0 - tau + 1.0 / max(1, block_steps)).clamp(0.0, 1.0)


class SketchTilt:
    """One step of Alg. 1 at the target rows: η_t, the residual gradient and the tilt of eq. 7.

    η_t = δ·√n̂·s(τ) per text (τ: :func:`denoising_time`, s: :func:`schedule_weight`), times
    min(1, c/c*) with ``coverage_full`` c* (c = n̂/N, or the committed text's coverage): n̂ = N for
    ``count``, the expected number of distinct kept tokens for ``presence`` (expected length /
    distinct tokens of the cut text with a stop token, whose probability is kept exactly:
    :func:`tilt_target_rows`). Under greedy decoding with the order steered, δ·``greedy_tilt``
    replaces δ and only tokens within ``greedy_margin`` of the argmax may win.

    Args:
        params: the scheme's :class:`GlobalSketchParams`.
        gradient: the marginal gradient a_{k,t} of this scheme.
        order: the scheme's :class:`sketchwm_builtin.global_sketch.order.OrderSteering` (its
            ``steers``, ``reset`` and ``record`` are called).
    """

    def __init__(self, params: Any, gradient: MarginalGradient, order: Any):
        self.params, self.gradient, self.order = params, gradient, order

    def step(self, step: DenoiseStep, eos: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the tilted target rows (B, K, V) float32, c (B,) float32 or None where nothing was tilted).

        Tilts ``step.marginals.target_logits()`` in place (with ``Marginals.out``, writes
        logits + η_t a there in one pass); records the order's priority table when it steers.
        """
        p = self.params
        b0, b1 = step.block
        n_blocks = max(1, step.tokens.shape[1] // max(1, b1 - b0))
        steer = step.temperature is not None and self.order.steers(step.temperature)
        read, temp = read_marginals(step, p.marginals)  # the marginals eq. 5-6 read, and the tilt's factor T
        tau = denoising_time(step)
        s = p.delta * schedule_weight(tau, step.total_steps // n_blocks, p.schedule, p.late_fraction)  # (B,)
        near_tie = None  # (B, K, V) bool: the tokens an argmax tilt may pick (greedy_margin)
        if steer and step.temperature == 0.0:  # greedy: the order and an argmax tilt of δ·greedy_tilt
            s = s * p.greedy_tilt
            if bool((s > 0).any()) and p.greedy_margin is not None:
                untilted = step.marginals.at_target_rows(step.marginals.logits)  # (B, K, V)
                near_tie = untilted >= untilted.amax(-1, keepdim=True) - p.greedy_margin
        self.order.reset()
        statistic = self.gradient.statistic
        if not steer and not bool((s > 0).any()):  # no tilt; the running statistic still follows the steps
            if read.complete:
                statistic.observe(read, step.masked)
            elif eos is None:
                statistic.sums(read, step.masked)
            return step.marginals.target_logits(), None
        parts = self.gradient.parts(read, step.tokens, step.masked, eos)
        if steer:  # before the tilt writes the target rows
            self.order.record(step.step, step.marginals, parts)
        if not bool((s > 0).any()):
            return step.marginals.target_logits(), None
        with serial_on_cpu(parts.factor.device):
            eta = s * parts.n_hat.sqrt() * temp  # (B,) η_t (× T on the model's logits: ``marginals='sampled'``)
            coverage = parts.n_hat / max(1, step.tokens.shape[1])  # (B,) c = n̂/N
            if p.coverage_source == "committed":
                g = self.gradient
                coverage = committed_coverage(g.sketch, g.vocab_size, step.tokens, step.masked, coverage)
            if p.coverage_full is not None:  # × min(1, c/c*)
                eta = eta * (coverage / p.coverage_full).clamp(max=1.0)
        marginals = step.marginals
        if near_tie is None:
            return tilt_target_rows(marginals, parts, eta, eos), coverage
        # the argmax tilt within the margin: other tokens cannot win; the greedy decision to stop stays
        # the model's (EOS where it is the untilted argmax, read before the tilt writes the rows)
        stops = None if eos is None else marginals.at_target_rows(marginals.logits).argmax(-1) == eos  # (B, K)
        logits = tilt_target_rows(marginals, parts, eta, eos).masked_fill_(~near_tie, float("-inf"))
        if stops is not None:
            logits[..., eos] = torch.where(stops, logits.amax(-1) + 1.0, float("-inf"))
        return logits, coverage
