"""``GlobalSketchScheme``: the ``global-sketch`` watermark, composed of its parts (package doc)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sketchwm.channels import Tilt
from sketchwm.components import DenoiseStep, MarginalReads, Marginals, SchemeScores, Strength, WatermarkScheme
from sketchwm.context import BuildContext
from sketchwm.prf import keyed_signs

from . import embed
from .attribution import Attribution, attribute
from .embed import MarginalGradient, SketchTilt, TiltParts
from .null import BackgroundNull, capped_pmf, resolve_null
from .order import OrderSteering
from .params import GlobalSketchParams
from .prior import background_token_model, resolve_prior
from .running import MaskedStatistic

__all__ = ["GlobalSketchScheme"]


class GlobalSketchScheme(WatermarkScheme):
    """Global sketch watermark for masked DLMs (seed paper Alg. 1 embedding, Alg. 2 detection).

    Args:
        params: :class:`GlobalSketchParams`.
        key: :class:`sketchwm.keys.WatermarkKey`; k_sk and k_dir are derived from it (§4.1).
        vocab_size: V.
        device: where tables live.
        registry: registry to resolve the sketch/score names (default: installed plugins).
        tokenizer_fingerprint: the backend's tokenizer fingerprint; the token prior must belong to it
            (None: only V is checked).

    Raises:
        ConfigError: bad params, unknown sketch/score, prior that does not match V or the tokenizer.
    """

    name = "global-sketch"
    Params = GlobalSketchParams
    strength = Strength("delta", (0.25, 0.5, 0.75, 1.0))  # δ of η_t = δ·√n̂·s(t); default 0.75
    #: eq. 5 reads every masked row (Σ_{i∈M_t} p_i; with a stop token, cumulative sums over the rows
    #: in canvas order, which the packing keeps); the tilt is applied to the target rows only.
    #: Incremental: between refreshes the statistic is updated from the targets (:class:`MaskedStatistic`).
    reads = MarginalReads.masked(incremental=True)

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu", registry: Any = None,
                 tokenizer_fingerprint: str | None = None):
        super().__init__(params, key, vocab_size, device)
        from sketchwm.registry import get_registry

        reg = registry or get_registry()
        p = self.params
        prior, self.prior_desc = resolve_prior(p.prior, self.vocab_size, tokenizer_fingerprint)
        #: the resolved prior's identity, stored in calibrations: 16 hex of its SHA-256, or "uniform"
        self.prior_fingerprint = self.prior_desc.get("sha256", "uniform")[:16]
        k_sk, k_dir = key.subkey("k_sk"), key.subkey("k_dir")
        self._dir_seed = k_dir.seed("direction")
        ctx = BuildContext(key=k_sk, vocab_size=self.vocab_size, device=self.device, token_prior=prior)
        self.sketch = reg.build("sketch", p.sketch.name, p.sketch.params, ctx)
        self.score_fn = reg.build("score", p.score.name, p.score.params, ctx.replace(sketch=self.sketch))
        self.u = self.directions(torch.tensor([p.direction_index]))[0]  # (D,)
        #: (B,) float32 c = n̂/N of the last tilted step (``coverage_full``), None before the first
        self.coverage: torch.Tensor | None = None
        self.null = resolve_null(p.null, self.sketch)  # ``background`` or ``key-randomised``
        #: (V,) float64 log π and log(1 − π) of the background token model (uniform without a prior)
        self._log_pi, self._log1m_pi = background_token_model(prior, self.vocab_size, self.device)
        self._c_u: torch.Tensor | None = None  # (V,) float64 ⟨u, φ(v)⟩, built on first detection
        self._null_model: BackgroundNull | None = None  # built on first detection
        self._statistic = MaskedStatistic(self.sketch, p.tail_epsilon)  # the statistic over M_t between refreshes
        self._gradient = MarginalGradient(self.sketch, self.score_fn, self.u, self.vocab_size, p.objective,
                                          self._statistic)
        self._order = OrderSteering(p.order, p.delta)
        self._embedding = SketchTilt(p, self._gradient, self._order)

    @classmethod
    def from_context(cls, params: Any, context: BuildContext) -> "GlobalSketchScheme":
        """As :meth:`WatermarkScheme.from_context`, and the sketch and score are built through the
        context's ``registry``; the token prior is checked against its ``tokenizer_fingerprint``."""
        return cls(params, context.require("key", cls.display_name()), context.require("vocab_size", cls.display_name()),
                   device=context.device, registry=context.registry,
                   tokenizer_fingerprint=context.tokenizer_fingerprint)

    def directions(self, indices: torch.Tensor) -> torch.Tensor:
        """Rademacher directions u^{(i)} of key-family members: indices (K,) int64 → (K, D) float32 ±1."""
        D = self.sketch.dim
        idx = indices.to(torch.int64).to(self.device)
        counter = idx[:, None] * D + torch.arange(D, dtype=torch.int64, device=self.device)[None, :]
        return keyed_signs(self._dir_seed, counter)

    def use_directions(self, u: torch.Tensor | None) -> None:
        """Tilt each text of the batch along its own direction from now on: u (B, D) float32 ±1, one
        key-family member's u^{(i)} per text (:meth:`directions`; a shared-hash key family,
        :mod:`sketchwm_builtin.key_family`), or None for this key's own u_k at every text. Detection
        (:meth:`score_ids`) is unchanged: it tests u_k."""
        self._gradient.u = self.u if u is None else u.to(self.device, torch.float32)

    # ------------------------------------------------------------------ embedding (:mod:`.embed`)
    def denoising_time(self, step: DenoiseStep) -> torch.Tensor:
        """τ = t/T ∈ [0, 1] of each text at this step, (B,) float32 (:func:`embed.denoising_time`)."""
        return embed.denoising_time(step)

    def schedule_weight(self, tau: torch.Tensor, block_steps: int) -> torch.Tensor:
        """s(τ) of η_t = δ·√n̂·s(τ), (B,) → (B,) float32, for ``schedule`` (:func:`embed.schedule_weight`)."""
        return embed.schedule_weight(tau, block_steps, self.params.schedule, self.params.late_fraction)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Start a generation: forget the running statistic and the order table (the normaliser is
        recomputed at every step from the canvas of N = ``gen_length`` positions)."""
        self._statistic.reset()
        self._order.reset()

    def marginal_gradient(self, marginals: Marginals, tokens: torch.Tensor,
                          masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a_{k,t}(v) = ½ ∂S(ĥ)/∂p_i(v) at the target rows (eq. 6, and its presence analogue; :mod:`.embed`).

        Args:
            marginals: :class:`Marginals` holding every masked row (``logits`` (B, R, V), not
                modified) and the K target rows i.
            tokens: (B, G) int64 current tokens; masked: (B, G) bool, M_t.

        Returns:
            a: (B, 1, V) float32 where it is the same at every row (``count`` without a stop token:
            ⟨r, φ(v)⟩ / √N, eq. 6), else (B, K, V); and n̂ (B,) float32, the normaliser (N, E[L], or the
            expected number of distinct kept tokens). :meth:`process_logits` applies the same a.
        """
        parts = self._tilt_parts(marginals, tokens, masked)
        return parts.gradient(marginals.targets.shape[1], self.vocab_size), parts.n_hat

    def _tilt_parts(self, marginals: Marginals, tokens: torch.Tensor, masked: torch.Tensor) -> TiltParts:
        """a_{k,t} of :meth:`marginal_gradient` as :class:`TiltParts` (:meth:`MarginalGradient.parts`)."""
        return self._gradient.parts(marginals, tokens, masked, self.stop_token_id)

    def token_gradient(self, logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """:meth:`marginal_gradient` on a full canvas, logits (B, G, V) → a (B, 1, V) or (B, G, V)
        float32 (every masked row a target, :meth:`Marginals.canvas`)."""
        return self.marginal_gradient(Marginals.canvas(logits, masked), tokens, masked)[0]

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Exponential tilt of eq. (7) in logit space at the target rows: logits + η_t a, (B, K, V).

        η_t = δ·√n̂·s(τ) per text (τ: :meth:`denoising_time`, s: :meth:`schedule_weight`), times
        min(1, c/c*) with ``coverage_full`` c*: n̂ = N for ``count``, the expected number of distinct
        kept tokens for ``presence`` (expected length / distinct tokens of the cut text with a stop
        token, whose probability is kept exactly: :func:`embed.tilt_target_rows`). Under greedy
        decoding with the order steered, δ·``greedy_tilt`` and the ``greedy_margin`` bound apply.
        Tilts ``step.marginals.target_logits()`` in place (with ``Marginals.out``, writes
        logits + η_t a there in one pass).
        """
        return self.tilt(step).logits

    def tilt(self, step: DenoiseStep) -> Tilt:
        """:meth:`process_logits` as a value, for a combined scheme's ``rows`` channel
        (:class:`sketchwm.channels.Tilt`): the tilted target rows (B, K, V) float32 and the coverage
        c = n̂/N (B,) float32 of the step (None at a step without a tilt)."""
        logits, coverage = self._embedding.step(step, self.stop_token_id)
        if coverage is not None:
            self.coverage = coverage
        return Tilt(logits=logits, coverage=coverage)

    def _committed_coverage(self, tokens: torch.Tensor, masked: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
        """The committed text's coverage (B,) (:func:`embed.committed_coverage`)."""
        return embed.committed_coverage(self.sketch, self.vocab_size, tokens, masked, expected)

    # ------------------------------------------------------------------ order steering (:mod:`.order`)
    def steers_order(self, temperature: float) -> bool:
        """``order`` = ``steer``, or ``auto`` under greedy decoding (T = 0): see :class:`GlobalSketchParams`."""
        return self._order.steers(temperature)

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """Priority π_i = log p_i(x0_i) + δ·√n̂·g_i(x0_i) of the targets, (B, K) float32: the residual
        gradient of eq. 6 read as a ranking (:mod:`.order`). The rule's ``confidence`` is not used.

        Raises:
            InputError: :meth:`process_logits` of the same step has not run.
        """
        return self._order.priority(step, x0)

    # ------------------------------------------------------------------ detection (:mod:`.null`)
    def token_weights(self) -> torch.Tensor:
        """c_k(v) = ⟨u_k, φ_k(v)⟩ for every token: (V,) float64 (0 on excluded tokens)."""
        if self._c_u is None:
            self._c_u = self.sketch.token_scores(self.u[None].float())[0].double()  # (V,)
        return self._c_u

    @property
    def background(self) -> BackgroundNull:
        """The fixed-key background null of this key (:class:`BackgroundNull`), built on first use."""
        if self._null_model is None:
            self._null_model = BackgroundNull(self.sketch, self.token_weights(), self._log_pi, self._log1m_pi,
                                              self.params.null_dispersion, self.device)
        return self._null_model

    def background_moments(self, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Background-null mean and variance of T for texts of n tokens: (B,) → (B,), (B,) float64."""
        return self.background.moments(n)

    def _capped_pmf(self, n: torch.Tensor, log_pi: torch.Tensor, log1m_pi: torch.Tensor) -> torch.Tensor:
        """The law of min(C, k) (b, P, k + 1) float64 (:func:`sketchwm_builtin.global_sketch.null.capped_pmf`)."""
        return capped_pmf(n, log_pi, log1m_pi, self.sketch.cap, self.params.null_dispersion)

    def background_pvalue(self, T: np.ndarray, lengths: np.ndarray, var: np.ndarray) -> np.ndarray:
        """p = P(X' ≥ X − β·σ_X), β = ``null_margin``: T, lengths, var (B,) → (B,) float64 (:meth:`BackgroundNull.pvalue`)."""
        return self.background.pvalue(T, lengths, var, self.params.null_margin)

    def background_z(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Fixed-key z of the presence statistic under the background null: (B, N) → (B,) float64."""
        return self.background.stats(ids.to(self.device), valid.to(self.device), self.params.null_margin, False)[0]

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Detection statistics for ids (B, N) int64 with valid (B, N) bool.

        ``null="background"``: score = z = the fixed-key background z, p-value the exact shifted tail
        (:mod:`.null`). ``null="key-randomised"``: score = S_k (eq. 2), z = ⟨u, h⟩/‖h‖ and the
        key-randomised p-value of ``params.p_value``. Vectorised over the batch: one row sort and
        O(B·N) gathers (no (B, V) table, nothing per text in Python).

        Raises:
            InputError: ids outside [0, V).
        """
        ids, valid = ids.to(self.device), valid.to(self.device)
        if self.null == "background":
            z, n, p = self.background.stats(ids, valid, self.params.null_margin)
            return SchemeScores(z, z, p.to(z.device), n,
                                f"fixed-key background null, exact tail P(T' >= T - {self.params.null_margin:g} sd) "
                                f"(FFT of the characteristic function, Chernoff bound where smaller; token prior: "
                                f"{self.prior_desc.get('source')})")
        h, n = self.sketch_ids(ids, valid)
        out = self.score_fn.p_values(self.u, h, n, self.params.p_value)
        return SchemeScores(out.score.double(), out.z.double(), out.p_value.double(), out.n_scored,
                            "key-randomised (valid on average over keys, not for one fixed key): " + out.p_value_method)

    def sketch_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h_k(y) and its normaliser n without a (B, V) table: (B, N) → (B, D) float32, (B,) float32.

        Equal to ``sketch.sketch(ids, valid)`` and ``weights(counts(...))[1]``.
        """
        tok, x = self.sketch.sparse_weights(ids.to(self.device), valid.to(self.device))
        n = x.sum(1)
        return self.sketch.project_sparse(tok, x) / n.clamp_min(1.0).sqrt()[:, None], n

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """The threshold on ``score`` at level α for texts of ``n_tokens`` tokens.

        Background null: ``z ≥ threshold`` ⇔ ``p ≤ alpha`` exactly (:meth:`BackgroundNull.threshold`).
        Key-randomised: the score function's τ_α (eq. 19), when the sketch declares the geometry it
        needs (:attr:`sketchwm.components.Sketch.count_geometry`).

        Raises:
            InputError: α outside (0, 1).
            NotImplementedError: no closed form (key-randomised null on a sketch without the geometry).
        """
        if self.null != "background":
            if getattr(self.score_fn, "threshold_needs_geometry", False) and not getattr(self.sketch, "count_geometry", False):
                raise NotImplementedError(f"score '{self.score_fn.name}' has no analytic threshold on sketch "
                                          f"'{self.sketch.name}' (it declares no count-sketch geometry)")
            return self.score_fn.analytic_threshold(alpha, n_tokens)
        return self.background.threshold(alpha, n_tokens, self.params.null_margin)

    def attribute(self, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, top: int = 5, chunk: int = 8192,
                  bank: Any = None) -> Attribution:
        """Rank K key-family members for each text, ids and valid (B, N) (beyond the paper; arguments and
        errors: :func:`sketchwm_builtin.global_sketch.attribution.attribute`)."""
        return attribute(self, ids, valid, n_keys, top=top, chunk=chunk, bank=bank)

    def describe(self) -> dict[str, Any]:
        """Config plus the resolved prior (source and SHA-256) and the sketch report."""
        d = super().describe()
        d["resolved_prior"] = self.prior_desc
        d["sketch_report"] = self.sketch.report()
        return d
