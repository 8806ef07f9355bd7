"""``global-sketch``: the global sketch watermark of the seed paper (Alg. 1 and 2).

Embedding (Alg. 1): at each denoising step with η_t > 0,
  1. expected sketch ĥ_{k,t} from the frozen tokens and the masked marginals (eq. 5),
  2. residual gradient r_{k,t} = u_k − λĥ_{k,t} (the score's ½∇_h S at ĥ),
  3. per-token score a_{k,t}(v) = ⟨r_{k,t}, φ_k(v)⟩ / √N (eq. 6),
  4. exponential tilt p̃_i ∝ p_i · exp(η_t a_{k,t}) of every masked marginal (eq. 7), done in
     logit space: logits + η_t a (the sampler's softmax/Gumbel-max normalises).
η_t = δ·√N·s(τ) with a schedule s of the paper's reverse time τ = t/T ∈ [0, 1]: ``constant`` (1),
``late`` (1 only once τ ≤ ``late_fraction``) or ``ramp`` (1 − τ + 1/T_b, from 1/T_b to 1). τ is the
masked fraction of the positions being denoised: of the canvas with one block; with
semi-autoregressive blocks, each block is its own reverse process from τ = 1 to 0 (conditioned on
the blocks before it), so ``late`` tilts the end of every block, the first included
(:meth:`GlobalSketchScheme.denoising_time`). The √N makes δ the typical logit shift per unit of
⟨r, φ(v)⟩, independent of the length.

Counting (sketch param ``counting``). ``count`` is the paper's sketch, h = Σ_j φ(y_j)/√N: additive, so
m copies of one token add m·φ(v) and a flood of one repeated token swamps it. ``presence`` sketches
the set of distinct tokens: h = Σ_v x_v φ(v)/√n_d with x_v = 1[v ∈ y] (kept tokens only: the sketch's
``exclude_top`` most frequent prior tokens have φ = 0) and n_d = Σ_v x_v. Copies of a token already
present change nothing.

Expected presence sketch (the analogue of eq. 5). Under the independent masked marginals of Def. 2.1,
x_v = 1 if v is frozen (some i ∈ F_t holds v), else P(x_v = 1) = 1 − Π_{i∈M_t}(1 − p_i(v)), so

    ŵ_v = 1[v ∈ F_t] + 1[v ∉ F_t]·(1 − exp(Σ_{i∈M_t} log(1 − p_i(v)))),   ĥ = Φᵀŵ / √n̂,   n̂ = Σ_v keep_v ŵ_v,

one batched matrix product of log(1 − p) over the masked rows (B × M × V). n_d is random; we use
the plug-in n̂ = E[n_d] (a ratio of expectations, like the paper's use of ĥ as a one-step surrogate;
its error is O(Var(n_d)/n̂²) and vanishes as positions are committed). The residual gradient is the
exact derivative of ½S(ĥ) in p_i(v), n̂ included:

    a_i(v) = ⟨r, ∂ĥ/∂p_i(v)⟩ = (⟨r, φ(v)⟩ − ½ keep_v ⟨r, ĥ⟩/√n̂) / √n̂ · Π_{j∈M_t, j≠i}(1 − p_j(v)),

zero for tokens already frozen (presence cannot grow), r = ½∇_h S at ĥ (u_k − λĥ for eq. 2). The
tilt is eq. 7 with η_t = δ·√n̂·s(t). For ``count`` this reduces to eq. 5-7 with n̂ = N.
(Tested: expectation vs Monte Carlo, gradient vs ``torch.autograd``, order and flood invariance.)

Texts that stop (EOS; backends with an ``eos_token_id``, the engine's ``stop_at_eos``). The detector
scores the text before the first EOS e, L = min{i : Y_i = e}, not the canvas. Under the independent
marginals position i is inside the text with probability r_i = Π_{j<i}(1 − p_j(e)) (frozen positions
one-hot: a frozen EOS at f cuts everything after it), independently of Y_i, so

    count:     ŵ_v = Σ_i r_i p_i(v) (v ≠ e), ŵ_e = 0,   n̂ = E[L] = Σ_i r_i (1 − p_i(e));
    presence:  1 − ŵ_v = Σ_{L<G} A_L(v) p_L(e) + A_G(v),  A_L(v) = Π_{j<L}(1 − p_j(e) − p_j(v)),
               ŵ_e = 0,  n̂ = Σ_v keep_v ŵ_v

(1 − ŵ_v: the text stops at L having drawn no v before; a frozen v at g_v makes every term with
L > g_v vanish). r and E[L] depend on the EOS marginals only and, for v ≠ e, ŵ_{v'} depends on
p_i(v) only for v' = v, so the exact content gradient is a_i(v) = ∂ŵ_v/∂p_i(v) · ∂(½S)/∂ŵ_v with
∂ŵ_v/∂p_i(v) = r_i (count) or (Σ_{L>i} A_L(v) p_L(e) + A_G(v)) / (1 − p_i(e) − p_i(v)) (presence),
n̂ included as above; no approximation beyond the paper's (independent marginals, plug-in n̂).
Both are cumulative sums in log space over the masked rows in canvas order, vectorised over batch ×
rows × vocabulary (:meth:`sketchwm.components.Sketch.expected_weights_stopping`). EOS itself is
not tilted as a content token: the tilt keeps p̃_i(e) = p_i(e) exactly and tilts the other tokens
among themselves (eq. 7 on the content tokens, renormalised to mass 1 − p_i(e)), so the watermark
does not move the model's decision to stop; the derivatives in p_i(e) (through r and n̂) are
therefore never used. Without EOS mass this is the derivation above, unchanged. (Tested:
expectation vs Monte Carlo of cut texts, gradient vs ``torch.autograd``, p̃(e) = p(e), and mean
length on a stand-in that stops after ~k tokens; ``tests/test_eos_sketch.py``.)

How the step is computed. The column sums Σ_{i∈M_t} p_i and Σ_{i∈M_t} log(1 − p_i) come
from one cache-blocked softmax pass (:func:`sketchwm.marginal_sums.masked_marginal_sums`); with
``tail_epsilon`` ε > 0 the tokens below ε at every masked row are linearised (log(1 − p) ≈ −p,
1/(1 − p_i) ≈ 1: a moves by at most a relative ε/(1 − ε)) and the others computed exactly, so the
tilt is one broadcast add plus a scatter on the exact columns. The reads are incremental
(``MarginalReads.masked(incremental=True)``): under the sampler's amortised ``marginal_refresh``
(the default) the engine passes every masked row only at refreshes and the sampled rows alone in
between, and :meth:`GlobalSketchScheme._masked_sums` keeps the sum over the other masked rows from
the rows it holds — those rows keep the marginals of the last refresh (the approximation; its
measured effect on the tilt and on detection z, per remasking rule, is in
docs/sampler-approximations.md). ``marginal_refresh = 1``
and ε = 0 give the exact computation above.

Detection (Alg. 2). Two nulls, named by ``null``:

* ``background`` (default with ``presence``): the p-value is valid for the one key the user holds.
  For a fixed key every token has a fixed weight c_k(v) = ⟨u_k, φ_k(v)⟩, so the statistic
  T = ⟨u_k, Φᵀx⟩ = Σ_v c_k(v) x_v has a key-dependent null law; it is given by a background token
  model: each kept token present independently with q_v(n) = 1 − (1 − π_v)^n for a text of n tokens,
  π the token prior. The score is z = (T − Σ c q)/(Σ c² q(1 − q))^{1/2}. The p-value is the exact
  tail of T under that model, not a normal approximation: T/g₀ (g₀ = 2, the gcd of the weights
  c_k(v) ∈ {−4, −2, 0, 2, 4} of the d = 4 count sketch) is a sum of independent integer-weighted
  Bernoulli terms, whose law is computed per length from its characteristic function by FFT on a
  window of the integer support (aliasing, series remainder and round-off bounded and added; the
  Chernoff bound where it is smaller; :func:`sketchwm.stats.bernoulli_sum_tail`), cached per
  (key, length) like the moments. The tail of T is far heavier than a normal one at short lengths
  (a sum of even integers over mostly rare tokens), so a normal approximation would be
  anti-conservative there (``benchmarks/exact_tail.py`` prints both against a direct convolution).
  The p-value is p = P(T' ≥ T − β·σ(n)) for T' under the model: the law shifted up by β standard
  deviations, β = ``null_margin`` (0.5). β is for domain shift alone (the tail itself is exact): the
  background model's mean for one key can be off on a text domain it never saw. It was set on the
  shipped ``human`` set (the test split of the corpus the prior comes from, 5 domains): across 40
  keys the per-key mean of z has standard deviation at most 0.135 within a domain (``python
  benchmarks/null_margin.py --n-keys 40``, which also prints the worst key's rate at β = 0 and
  β = 0.5), so three standard deviations are 0.41 and β = 0.5 is about 3.7. It was then checked, not tuned, on the two held-out
  domains (``benchmarks/null_per_key.py``). The detector's threshold on z at each length is the
  first lattice point whose exact p-value is ≤ α, so ``z ≥ threshold`` ⇔ ``p ≤ α``. What it does not
  promise: validity on text from a distribution far from the prior (e.g. a flood of rare tokens
  chosen by an adversary), or on text whose tokens are not independent given its length beyond what
  β covers.
* ``key-randomised`` (the paper's, Theorem 5.4): score S_k (eq. 2), exact key-randomised p-value
  (characteristic function + FFT); valid on average over random keys, not for one fixed key.

Keys (§4.1): k = (k_sk, k_dir) derived from one secret; the Rademacher direction u_k comes from
k_dir. A *key family* shares k_sk and gives member i the direction u^{(i)} = PRF(k_dir, i), so K
members are ranked for one text with a single matrix product (:meth:`GlobalSketchScheme.attribute`).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field

from sketchwm.components.expected_sketch import capped_column_sums, capped_row_derivative
from sketchwm.components import (DenoiseStep, MarginalReads, Marginals, SchemeScores, Strength, WatermarkScheme, distinct_token_sums,
                                 packed_masked_positions, row_index, serial_on_cpu)
from sketchwm.config import ComponentSpec, StrictModel
from sketchwm.context import BuildContext
from sketchwm.errors import ConfigError, InputError
from sketchwm.hookspecs import hookimpl
from sketchwm.marginal_sums import MarginalSums, masked_marginal_sums
from sketchwm.prf import keyed_signs
from sketchwm.lattice_sum import capped_sum_tail
from sketchwm.stats import LatticeTail, bernoulli_sum_tail, bonferroni, check_alpha, rademacher_sum_pvalue

from .cli import sketchwm_register_commands  # noqa: F401 - `sketchwm prior`, added through the hook

__all__ = ["GlobalSketchScheme", "GlobalSketchParams", "PriorSpec", "Attribution", "resolve_prior"]


class PriorSpec(StrictModel):
    """Where the token prior π_tok for sign balancing (eq. 4) comes from, and what it must match.

    Attributes:
        source: ``auto`` (the packaged training-corpus counts when they belong to the backend's
            vocabulary and tokenizer, else uniform with a warning), ``packaged`` (named counts shipped
            with sketchwm; an error when they do not belong to the backend), ``file`` (a prior saved
            by :class:`sketchwm_builtin.token_prior.TokenPrior`, or a ``.npy``/``.pt`` of V counts),
            ``uniform`` (no balancing; the background null then assumes uniform token frequencies).
        name: packaged counts name (``source="packaged"``).
        path: counts file (``source="file"``).
        sha256: expected SHA-256 of the counts (checked when given), so the detector rebuilds
            identical tables.
        vocab_size: V the prior was estimated for (checked when > 0).
        tokenizer: fingerprint of the tokenizer it was estimated with (checked against the file's
            record and the backend's tokenizer when given).
    """

    source: Literal["auto", "packaged", "file", "uniform"] = "auto"
    name: str = "default-train"
    path: str = ""
    sha256: str = ""
    vocab_size: int = Field(0, ge=0)
    tokenizer: str = ""


@lru_cache(maxsize=1)
def _packaged_tokenizer_fingerprint() -> str:
    """Fingerprint of the tokenizer the packaged counts were made with (the default model's), or ""."""
    try:
        from sketchwm.components import tokenizer_fingerprint
        from sketchwm.default_model import MODEL_DIR
        from sketchwm_builtin.backends.fast_start import load_tokenizer_and_config

        return tokenizer_fingerprint(load_tokenizer_and_config(str(MODEL_DIR))[0])
    except Exception:  # noqa: BLE001 - no shipped tokenizer: the vocabulary size is the only check
        return ""


def resolve_prior(spec: PriorSpec, vocab_size: int,
                  tokenizer_fingerprint: str | None = None) -> tuple[torch.Tensor | None, dict[str, Any]]:
    """Load π_tok counts for ``spec`` and check that they belong to this vocabulary and tokenizer.

    Args:
        spec: the scheme's ``prior`` params.
        vocab_size: V of the backend.
        tokenizer_fingerprint: the backend's tokenizer fingerprint, or None (not checked).

    Returns:
        (counts (V,) float64 or None for uniform, description dict with ``source``, ``sha256``,
        ``vocab_size`` and ``tokenizer`` where known).

    Raises:
        ConfigError: missing/unknown counts, wrong length, SHA-256 mismatch, or a prior made for
        another vocabulary or tokenizer.
    """
    counts: torch.Tensor | None = None
    desc: dict[str, Any] = {"source": spec.source}
    tok = tokenizer_fingerprint or ""
    if spec.vocab_size and spec.vocab_size != vocab_size:
        raise ConfigError(f"the token prior was estimated for a vocabulary of {spec.vocab_size} ids, the backend has "
                          f"{vocab_size}: estimate one for this model (`sketchwm prior estimate`)")
    if spec.tokenizer and tok and spec.tokenizer != tok:
        raise ConfigError(f"the token prior was estimated with tokenizer {spec.tokenizer}, the backend's tokenizer is "
                          f"{tok}: estimate one for this model (`sketchwm prior estimate`)")
    if spec.source in ("auto", "packaged"):
        why = ""
        try:
            from sketchwm.data import load_token_counts

            counts = torch.as_tensor(load_token_counts(spec.name), dtype=torch.float64)
            desc.update(source="packaged", name=spec.name)
        except (ImportError, ValueError, FileNotFoundError, OSError) as exc:
            if spec.source == "packaged":
                raise ConfigError(f"packaged token counts '{spec.name}' are not available: {exc}") from None
            counts, why = None, "no packaged token counts"
        if counts is not None and counts.numel() != vocab_size:
            why = f"packaged token counts '{spec.name}' have {counts.numel()} entries, vocabulary has {vocab_size}"
            counts = None
        elif counts is not None and tok and _packaged_tokenizer_fingerprint() not in ("", tok):
            why = (f"packaged token counts '{spec.name}' belong to tokenizer {_packaged_tokenizer_fingerprint()}, "
                   f"the backend's is {tok}")
            counts = None
        if counts is None:
            if spec.source == "packaged":
                raise ConfigError(why)
            warnings.warn(f"token prior: {why}; using a uniform prior (signs not balanced, no excluded tokens, and the "
                          "background null's p-values assume uniform token frequencies). Estimate one with "
                          "`sketchwm prior estimate` and pass it as the scheme's prior.", UserWarning, stacklevel=3)
            desc = {"source": "uniform", "auto": why}
        else:
            desc["tokenizer"] = _packaged_tokenizer_fingerprint()
    elif spec.source == "file":
        from .token_prior import TokenPrior

        loaded = TokenPrior.load(spec.path)
        counts = loaded.counts
        if counts.numel() != vocab_size or loaded.vocab_size != vocab_size:
            raise ConfigError(f"token prior file {spec.path} has {counts.numel()} entries, vocabulary has {vocab_size}")
        if loaded.tokenizer and (spec.tokenizer or tok) and loaded.tokenizer != (spec.tokenizer or tok):
            raise ConfigError(f"token prior file {spec.path} was estimated with tokenizer {loaded.tokenizer}, not "
                              f"{spec.tokenizer or tok}")
        desc.update(path=spec.path, tokenizer=loaded.tokenizer or spec.tokenizer)
    if counts is not None:
        from .token_prior import counts_sha256

        digest = counts_sha256(counts)
        if spec.sha256 and spec.sha256 != digest:
            raise ConfigError(f"token prior SHA-256 mismatch: config expects {spec.sha256[:12]}…, found {digest[:12]}…")
        desc.update(sha256=digest, vocab_size=vocab_size)
    return counts, desc


class GlobalSketchParams(StrictModel):
    """Parameters of the global sketch watermark.

    Attributes:
        sketch: registered sketch and its params (default Count-Sketch d=4, w=256, D=1024).
        score: registered score function and params (default penalised score, γ=0.05). The
            penalty's gradient −λĥ pushes down the tokens the text already holds many of (function
            words), which costs fluency: on the default DLM (40 prompts × 128 tokens), γ=0.05 gave
            median z 5.8 at 1.9× the unwatermarked oracle perplexity and 9.8 at 2.4× (δ=1), where
            γ=0.25 gave 4.5 at 2.3× (δ=0.3) and 7.7 at 3.4× (δ=0.5) (measured at commit ed05b1a; today ``benchmarks/configs/tune_delta_gamma.yaml``). With γ=1 the
            analytic threshold of eq. 19 is unreachable below ~100 tokens (S_k <= d(2√N − γ√w)
            when no token repeats); with γ=0.05 it is τ_α = 11.5 at α = 1%.
        delta: δ in η_t = δ·√n̂·s(t) (0 disables embedding). Default 0.75: with the presence sketch,
            on 30 prompts × 128 tokens of the default DLM, δ = 0.75 gave mean z 9.3 at 1.59× the
            unwatermarked oracle perplexity, where the paper's plain count sketch at δ = 0.5 gave
            z 6.2 at 1.69× and the presence sketch at δ = 0.5 z 6.1 at 1.20× (measured at commit ed05b1a;
            today ``sketchwm bench run benchmarks/configs/tune_delta_gamma.yaml``).
        schedule: η_t schedule ``constant`` | ``late`` | ``ramp`` on the denoising time τ of each
            block (:meth:`GlobalSketchScheme.schedule_weight`).
        late_fraction: for ``late``: η_t > 0 once τ ≤ ``late_fraction`` (the last fraction of the
            denoising of each block).
        prior: token prior π_tok for sign balancing (eq. 4).
        direction_index: which member of the key family this key's direction is (0 by default).
        null: the null hypothesis of the p-value. ``auto`` (default): ``background`` for the
            ``presence`` sketch, ``key-randomised`` for ``count`` (the paper's). ``background``: the text is drawn
            independently of the key from a background token model (each kept token present
            independently with the probability the token prior gives for the text's length); the
            p-value holds for the one key the user holds (see the module doc). Needs the
            ``presence`` sketch. ``key-randomised``: the paper's null (Theorem 5.4), exact only on
            average over random keys; the score is then S_k and ``p_value`` picks the method.
        null_margin: β ≥ 0, the robustness margin of the background null in z units: the p-value is
            the exact tail P(T' ≥ T − β·σ) of the background law shifted up by β standard deviations,
            valid whenever the background model's mean for this key is off by at most β standard
            deviations (domain shift; see the module doc for how β = 0.5 was set).
        null_dispersion: s > 0, the ``capped`` background null's burstiness: each count C_v of a
            text of n tokens is Beta-binomial(n, π_v·s, (1 − π_v)·s) (the Pólya / Dirichlet-compound
            count model of word burstiness; Church & Gale 1995, Madsen, Kauchak & Elkan 2005) instead
            of Binomial(n, π_v): same mean, variance larger by the factor 1 + (n − 1)/(s + 1), so a
            word that occurs once is likely to recur, as in human text. None (default): binomial.
            ``benchmarks/fit_dispersion.py`` fits s on the shipped ``human`` set by matching the
            key-averaged variance of the capped statistic (``presence`` ignores it).
        p_value: p-value method under ``null="key-randomised"`` (``exact``: characteristic function + FFT).
        min_tokens: shortest text the detector accepts, in tokens of text (its length, not the number
            of distinct tokens the statistic scores, ``n_scored``).
        tail_epsilon: ε of the embedding step's tail linearisation (``presence``): tokens
            whose probability is below ε at every masked row use log(1 − p) ≈ −p in the expected
            sketch and 1/(1 − p) ≈ 1 in the tilt, so a moves by at most a relative ε/(1 − ε)
            (:mod:`sketchwm.marginal_sums`); the tokens above ε somewhere are computed exactly.
            0 is the exact dense computation. Measured effect on the default model:
            ``benchmarks/tilt_error.py`` (docs/sampler-approximations.md).
        order: the unmasking order as a second channel (:meth:`GlobalSketchScheme.order_priority`).
            ``auto`` (default): under greedy decoding (T = 0) steer the order, together with the
            argmax tilt of ``greedy_tilt``; at T > 0 tilt only. ``steer``: steer at every
            temperature (at T > 0 together with the tilt of δ). ``off``: tilt only, with δ (at T = 0
            the sampler warns).
        greedy_tilt: under greedy decoding with the order steered, the marginals are also tilted
            (eq. 7) with δ·``greedy_tilt`` in place of δ: an argmax tilt, for models whose greedy text
            the order alone cannot change (on the LLaDA stand-in, one repeated token whatever the
            order). At T = 0 a tilt changes a token only where it overturns the top-1 margin, so it
            needs a larger δ than sampling does: with δ = 0.75, the tilt alone gave median z 0.81 on
            the stand-in and δ = 3 gave 6.16. Default 4 (δ·4 = 3 at the default δ), with
            ``greedy_margin`` 4: on 16 × 64 greedy tokens it overturned 64% of the stand-in's
            committed argmaxes (median z 5.24) and 25% of the default model's (median z 4.11,
            oracle perplexity 3.9× its looping greedy text's, where the unbounded tilt gave 355×);
            ``benchmarks/greedy_order.py``, docs/greedy-decoding.md. 0: steering alone, the model's
            own greedy tokens.
        greedy_margin: m, in nats: the argmax tilt may only pick a token whose log-probability is within
            m of the model's argmax (p ≥ e^{−m}·p_max), so it overturns only near-ties and each
            committed token keeps at least e^{−m} of the top token's probability. None: no bound.
        coverage_full: c* in (0, 1], or None (default: off). η_t is also multiplied by
            min(1, c/c*), c = n̂/N the expected fraction of the N generated positions that the presence
            statistic reads (distinct kept tokens, n̂ of eq. 5): below the coverage c* the sketch
            spends its tilt in proportion to how much of the text it can read, so on repetitive or
            frequent-word text it tilts less. The two-channel ``global-sketch-green`` hands the rest
            of the tilt, 1 − min(1, c/c*), to its green channel. The last step's c per text is kept
            in :attr:`GlobalSketchScheme.coverage`.
        coverage_source: how c is read. ``expected`` (default): n̂/N from the masked marginals
            (eq. 5). ``committed``: the committed text's own coverage, distinct kept tokens among
            the committed generated tokens over their number (the expected n̂/N until 8 are
            committed): what the text turns out to be rather than what the first steps' untempered
            marginals predict.
        marginals: which marginals the expected sketch (eq. 5) and its gradient (eq. 6) are taken
            at, and which one eq. 7 tilts. ``model`` (default): the model's softmax(l), tilted in
            logit space as l + η a before the sampler divides by its temperature T. ``sampled``:
            the marginals tokens are drawn from, q = softmax(l/T) (T > 0), tilted as
            q̃ ∝ q·exp(η a), i.e. l + T·η·a: at T < 1 the expected sketch then reads the sharpened
            marginals (fewer distinct tokens, the likely ones already present), so the tilt is spent
            on tokens the sampler can still add. Identical at T = 1, and at T = 0 (greedy, no
            sampled marginals) and when the caller gives no temperature. Measured on its own at
            T = 0.5 (development split, 24 ``human`` passages × 64 tokens, LLaDA blocks): δ 1 / 1.5 / 2
            gave KL 0.21 / 0.45 / 0.78 nats per token and TPR at 1% FPR 0.00 / 0.08 / 0.29, where
            ``model`` gave 0.00 / 0.12 / 0.46 at KL 0.20 / 0.48 / 0.91: no better (the sketch has few
            distinct tokens to read there either way). Its use is the coverage n̂/N it reads,
            which drives ``global-sketch-green``'s handover.
        objective: what the tilt ascends. ``score`` (default): ½S_k at the expected sketch, the
            paper's residual r = u_k − λĥ with presence's normaliser n̂ differentiated too (eq. 6
            and the module doc). ``statistic``: the expected background statistic E[T] = Σ_v c_k(v) ŵ_v,
            c_k(v) = ⟨u_k, φ_k(v)⟩, that the ``background`` detector thresholds at a fixed length:
            ∂(½S)/∂ŵ_v is replaced by c_k(v)/√n̂ (no penalty and no normaliser term, so a new
            distinct token is worth its own weight whatever the text already holds; the 1/√n̂ keeps
            δ on the scale of ``score``). Measured on the same development split: T = 1 TPR 0.26 /
            0.47 / 0.90 at KL 0.05 / 0.1 / 0.2 against ``score``'s 0.26 / 0.48 / 0.92; T = 0.5 0.00 at
            every KL ≤ 0.2 for both: no better, so not the default.
    """

    sketch: ComponentSpec = ComponentSpec(
        name="count-sketch", params={"d": 4, "w": 256, "counting": "presence", "exclude_top": 300})
    score: ComponentSpec = ComponentSpec(name="penalized", params={"gamma": 0.05})
    delta: float = Field(0.75, ge=0)
    schedule: Literal["constant", "late", "ramp"] = "constant"
    late_fraction: float = Field(0.5, gt=0, le=1)
    prior: PriorSpec = PriorSpec()
    direction_index: int = Field(0, ge=0)
    null: Literal["auto", "background", "key-randomised"] = "auto"
    null_margin: float = Field(0.5, ge=0)
    null_dispersion: Annotated[float, Field(gt=0)] | None = None
    p_value: Literal["exact", "bound", "uniform-bound", "normal", "monte-carlo"] = "exact"
    min_tokens: int = Field(16, ge=1)
    tail_epsilon: float = Field(1e-3, ge=0, lt=0.5)
    order: Literal["auto", "steer", "off"] = "auto"
    greedy_tilt: float = Field(4.0, ge=0)
    greedy_margin: Annotated[float, Field(gt=0)] | None = 4.0
    coverage_full: Annotated[float, Field(gt=0, le=1)] | None = None
    coverage_source: Literal["expected", "committed"] = "expected"
    marginals: Literal["model", "sampled"] = "model"
    objective: Literal["score", "statistic"] = "score"


@dataclass
class Attribution:
    """Multi-key attribution of texts.

    Attributes:
        indices: (B, top) int64, family indices ranked by score (best first).
        scores: (B, top) float64, their scores.
        z: (B, top) float64.
        p_value: (B, top) float64, per-key key-randomised p-values.
        p_value_fwer: (B, top) float64, Bonferroni family-wise-corrected p-values (min(1, K·p)).
        n_keys: K.
    """

    indices: torch.Tensor
    scores: torch.Tensor
    z: torch.Tensor
    p_value: torch.Tensor
    p_value_fwer: torch.Tensor
    n_keys: int


@dataclass
class _TiltParts:
    """The residual gradient a_i(v) of one step, unmultiplied (:meth:`GlobalSketchScheme._tilt_parts`).

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


@dataclass
class _RunningSums:
    """The statistic over M_t kept between refreshes (:meth:`GlobalSketchScheme._masked_sums`).

    Attributes:
        logits: (B, R0, V) float32, the rows of the last complete step (not modified).
        row_of: (B, G) int64, the row of ``logits`` of each position masked then.
        base: (B, V) float32, the statistic over the positions masked and not targets at the last
            step, from the rows of the last complete step; None until first needed (a step
            without a tilt, or a stop token, does not compute it).
        base_weights: (B, R0) float32, 1 on the rows of the complete step that were masked and not
            targets (what ``base`` sums when computed late).
        masked: (B, G) bool, M_t at the last step; targets: (B, G) bool, its (valid) targets.
        owned: whether ``logits`` is a copy this object may write (rows renewed by a partial refresh).
    """

    logits: torch.Tensor
    row_of: torch.Tensor
    base: torch.Tensor | None
    base_weights: torch.Tensor
    masked: torch.Tensor
    targets: torch.Tensor
    owned: bool = False

    @classmethod
    def start(cls, marginals: Marginals, masked: torch.Tensor, base: torch.Tensor | None = None) -> "_RunningSums":
        """From a complete step: its rows (copied when the hooks may tilt them in place), M_t (B, G)
        bool and, if computed, the statistic over its non-target masked rows (B, V)."""
        logits, owned = marginals.logits, marginals.out is None  # the engine's rows: ours after the step (Marginals doc)
        if marginals.rows_are_targets and marginals.out is None:  # target_logits() is this tensor: keep a copy
            logits = logits.clone()
        row_of = row_index(marginals.positions, masked.shape[1])
        targets = torch.zeros_like(masked).scatter_(1, marginals.target_positions, marginals.target_valid)  # (B, G)
        weights = (marginals.valid & ~marginals.target_rows).to(logits.dtype)
        return cls(logits, row_of, base, weights, masked.clone(), targets, owned)

    def replace(self, marginals: Marginals, rows: torch.Tensor) -> None:
        """Hold the fresh ``marginals.logits`` rows where ``rows`` (B, R) bool is True from now on."""
        if not self.owned:  # the complete step's tensor belongs to a caller that passed ``out``: copy before writing
            self.logits, self.owned = self.logits.clone(), True
        b, r = rows.nonzero(as_tuple=True)
        self.logits[b, self.row_of[b, marginals.positions[b, r]]] = marginals.logits[b, r]

    def rows_at(self, positions: torch.Tensor) -> torch.Tensor:
        """The last complete step's logits at positions (B, n) int64 (masked then) → (B, n, V)."""
        rows = torch.gather(self.row_of, 1, positions)
        return torch.gather(self.logits, 1, rows[..., None].expand(-1, -1, self.logits.shape[-1]))

    def complete(self, marginals: Marginals, masked: torch.Tensor) -> Marginals:
        """Every masked row: the held ones, with the fresh rows of the incomplete ``marginals`` (the
        targets, and the rows of a partial refresh, which are held from now on)."""
        renew = marginals.valid & ~marginals.target_rows
        if bool(renew.any()):
            self.replace(marginals, renew)
        positions, valid, rows = MarginalReads.masked().layout(masked, marginals.target_positions, marginals.target_valid)
        logits = self.rows_at(positions)
        row_of = row_index(positions, masked.shape[1])
        b, r = marginals.valid.nonzero(as_tuple=True)
        logits[b, row_of[b, marginals.positions[b, r]]] = marginals.logits[b, r]
        self.masked = masked.clone()
        return Marginals(logits, positions, valid, rows, marginals.target_valid, marginals.out)


class GlobalSketchScheme(WatermarkScheme):
    """Global sketch watermark for masked DLMs (seed paper Alg. 1 embedding, Alg. 2 detection).

    Args:
        params: :class:`GlobalSketchParams`.
        key: :class:`sketchwm.keys.WatermarkKey`; k_sk and k_dir are derived from it.
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
    #: Incremental: between refreshes the statistic is updated from the targets (:meth:`_masked_sums`).
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
        self._n_total: int | None = None
        #: (B,) float32 c = n̂/N of the last tilted step (``coverage_full``), None before the first
        self.coverage: torch.Tensor | None = None
        presence = getattr(self.sketch, "counting", "count") in ("presence", "capped")
        self.null = ("background" if presence else "key-randomised") if p.null == "auto" else p.null
        if self.null == "background" and not presence:
            raise ConfigError("null='background' needs the presence or capped sketch (sketch params counting='presence'): "
                              "token counts of real text are bursty and have no usable background null; use "
                              "null='key-randomised' with counting='count'")
        # background token model for the fixed-key null: log(1 − π_v), uniform π when no prior resolved
        V = self.vocab_size
        pi = torch.full((V,), 1.0 / V, dtype=torch.float64) if prior is None else prior.double() / prior.double().sum()
        pi = pi.clamp(min=0.5 / float(prior.sum()) if prior is not None else 0.0, max=1 - 1e-9)  # unseen tokens: ½ count
        self._log1m_pi = torch.log1p(-pi).to(self.device)  # (V,) float64
        self._log_pi = torch.log(pi).to(self.device)  # (V,) float64 (the capped null's binomial counts)
        self._c_u: torch.Tensor | None = None  # (V,) float64 ⟨u, φ(v)⟩, built on first detection
        self._running: _RunningSums | None = None  # the statistic over M_t between refreshes (incremental reads)
        self._priority: tuple[int, torch.Tensor] | None = None  # (step, (B, K, V) priority table) when steering

    @classmethod
    def from_context(cls, params: Any, context: BuildContext) -> "GlobalSketchScheme":
        """As :meth:`WatermarkScheme.from_context`, and the sketch and score are built through the
        context's ``registry``; the token prior is checked against its ``tokenizer_fingerprint``."""
        return cls(params, context.require("key", cls.display_name()), context.require("vocab_size", cls.display_name()),
                   device=context.device, registry=context.registry,
                   tokenizer_fingerprint=context.tokenizer_fingerprint)

    # ------------------------------------------------------------------ keys
    def directions(self, indices: torch.Tensor) -> torch.Tensor:
        """Rademacher directions u^{(i)} of key-family members: indices (K,) int64 → (K, D) float32 ±1."""
        D = self.sketch.dim
        idx = indices.to(torch.int64).to(self.device)
        counter = idx[:, None] * D + torch.arange(D, dtype=torch.int64, device=self.device)[None, :]
        return keyed_signs(self._dir_seed, counter)

    # ------------------------------------------------------------------ embedding
    def denoising_time(self, step: DenoiseStep) -> torch.Tensor:
        """The paper's reverse time as a fraction, τ = t/T ∈ [0, 1], of each text at this step: (B,) float32.

        τ is the fraction of the positions being denoised that are still masked before the step:
        the masked fraction of the canvas (τ = 1 on the all-[MASK] state S_T, 0 on S_0) when it is
        decoded as one block. A semi-autoregressive sampler is a sequence of such reverse
        processes, one per block, each conditioned on the blocks before it (LLaDA's
        semi-autoregressive remasking): every block runs through τ = 1 → 0 in its own steps, and
        τ is the masked fraction of the current block (``step.block``). So every position is
        tilted at the same point of its own denoising, and ``late`` tilts the end of every block,
        the first included (a global step counter would leave the first blocks, often all of a
        text that stops early, untilted). τ is read off the state, not a step counter, so loops
        outside the engine (other transfer schedules, user-driven samplers) get the same η_t.
        """
        b0, b1 = step.block
        return step.masked[:, b0:b1].float().mean(1)

    def schedule_weight(self, tau: torch.Tensor, block_steps: int) -> torch.Tensor:
        """s(τ) of η_t = δ·√n̂·s(τ): τ (B,) → (B,) float32 in [0, 1].

        ``constant``: 1. ``late``: 1 when τ ≤ ``late_fraction`` (the last fraction of the
        denoising of each block), else 0. ``ramp``: 1 − τ + 1/T_b (the fraction of the block
        decided once the step is done under an even transfer schedule), from 1/T_b at the first
        step of a block to 1 at its last; T_b = ``block_steps``.
        """
        p = self.params
        if p.schedule == "constant":
            return torch.ones_like(tau)
        if p.schedule == "late":
            return (tau <= p.late_fraction + 1e-6).to(tau.dtype)
        return (1.0 - tau + 1.0 / max(1, block_steps)).clamp(0.0, 1.0)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Remember N = gen_length (the canvas; with a stop token the normaliser is the expected
        length of the cut text instead, recomputed at every step)."""
        self._n_total = gen_length
        self._running = None
        self._priority = None

    def _softmax_into_buffer(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax(logits, -1) written into a buffer reused across steps (no fresh (B, G, V) allocation,
        whose page faults cost as much as the softmax itself on CPU). The buffer is overwritten at the
        next step; callers must not keep the result."""
        flat = getattr(self, "_probs_buf", None)
        n = logits.numel()
        if flat is None or flat.numel() < n or flat.device != logits.device or flat.dtype != logits.dtype:
            flat = torch.empty(n, dtype=logits.dtype, device=logits.device)
            self._probs_buf = flat
        buf = flat[:n].view(logits.shape)  # the packed path shrinks (B, M, V) step by step: reuse the storage
        try:
            return torch.ops.aten._softmax.out(logits, -1, False, out=buf)
        except (RuntimeError, AttributeError):  # an exotic backend without the out= kernel
            return torch.softmax(logits, dim=-1)

    def marginal_gradient(self, marginals: Marginals, tokens: torch.Tensor,
                          masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a_{k,t}(v) = ½ ∂S(ĥ)/∂p_i(v) at the target rows (eq. 6, and its presence analogue).

        With a stop token (:meth:`set_stop_token`) ĥ is the expected sketch of the text cut at
        its first EOS (:meth:`Sketch.expected_weights_stopping`), n̂ its expected normaliser, and
        a is zero at EOS. With ``presence`` and ``tail_epsilon`` ε > 0 the marginals' tail is
        linearised (:mod:`sketchwm.marginal_sums`): a is within a relative ε/(1 − ε) of the exact
        value on every token (:meth:`process_logits` applies the same a).

        Args:
            marginals: :class:`Marginals` holding every masked row (``logits`` (B, R, V), not
                modified) and the K target rows i.
            tokens: (B, G) int64 current tokens; masked: (B, G) bool, M_t.

        Returns:
            a: (B, 1, V) float32 for ``count`` without a stop token (the same at every row:
            ⟨r, φ(v)⟩ / √N, eq. 6), else (B, K, V) (⟨r, ∂ĥ/∂p_i(v)⟩; zero on tokens already
            present for ``presence``); and n̂ (B,) float32, the normaliser (N, E[L], or the expected
            number of distinct kept tokens).
        """
        parts = self._tilt_parts(marginals, tokens, masked)
        B, K, V = marginals.logits.shape[0], marginals.targets.shape[1], self.vocab_size
        a = torch.zeros(B, K, V, dtype=torch.float32, device=parts.factor.device)
        if parts.op == "add" and parts.cols is None:  # the same a at every row
            a = parts.factor[:, None, :]
        else:
            parts.apply(a, torch.ones(B, dtype=torch.float32, device=a.device))
        return a, parts.n_hat

    def _tilt_parts(self, marginals: Marginals, tokens: torch.Tensor, masked: torch.Tensor) -> "_TiltParts":
        """a_{k,t} of :meth:`marginal_gradient` as a per-token factor and per-row corrections (:class:`_TiltParts`).

        Without a stop token the column sums come from :func:`sketchwm.marginal_sums.masked_marginal_sums`
        (one cache-blocked softmax pass; ``presence`` with ε = ``tail_epsilon``):

        * ``count``: a_i(v) = ∂(½S)/∂ŵ_v, the same at every row (eq. 6; ``op`` add, no columns).
        * ``presence``: a_i(v) = factor(v)/(1 − p_i(v)) with factor(v) = 1[v ∉ F_t]·Π_{j∈M_t}(1 − p_j(v))·∂(½S)/∂ŵ_v
          (the module docstring's a_i(v), p capped at 1 − 10⁻⁶). On the tail (p_j(v) < ε at every
          row) 1/(1 − p_i(v)) is replaced by 1 (``op`` add: the factor at every row) and the exact
          columns get factor·p/(1 − p) on top, so the relative error of a is at most ε/(1 − ε);
          dense (ε = 0, or too many columns above ε): ``op`` div with rows q_i = 1 − p_i at the targets.

        With a stop token: ``op`` mul, rows = ∂ŵ_v/∂p_i(v) at the targets ((B, K, V) or (B, K, 1)),
        factor = ∂(½S)/∂ŵ with 0 at EOS (:meth:`Sketch.expected_weights_stopping`, exact).
        """
        N = tokens.shape[1]
        eos = self.stop_token_id
        dev = marginals.logits.device  # the (B, V) ops below run serially on CPU: a thread-pool wake costs more
        presence = self.sketch.counting in ("presence", "capped")  # n̂ = Σ_v keep_v ŵ_v depends on the marginals
        capped = self.sketch.counting == "capped"
        sums = None
        if eos is not None and capped:
            raise ConfigError("the capped sketch has no expected sketch for texts that stop at an EOS yet: use "
                              "counting='presence', or a sampler with stop_at_eos off")
        if eos is not None:
            if not marginals.complete:  # the cumulative scans need every row: the last complete step's, targets fresh
                marginals = self._running_state().complete(marginals, masked)
            else:
                self._running = _RunningSums.start(marginals, masked) if marginals.incremental_follows else None
            # dw only at the targets (one batched product) unless every row is one
            probs = self._softmax_into_buffer(marginals.logits)  # (B, R, V), buffer
            at = None if marginals.rows_are_targets else marginals.targets
            w_hat, n_hat, dw = self.sketch.expected_weights_stopping(tokens, masked, probs, marginals.positions,
                                                                     marginals.valid, eos, rows=at)
        else:
            stat, sums = self._masked_sums(marginals, masked)
            with serial_on_cpu(dev):
                frozen = self.sketch.counts(tokens.clamp(0, self.vocab_size - 1), ~masked)  # (B, V)
            w_hat, n_hat = self.sketch.weights_from_sums(frozen, stat, N)
        with serial_on_cpu(dev):
            root = n_hat.sqrt()[:, None]  # (B, 1)
            h_hat = self.sketch.project(w_hat) / root  # (B, D), eq. 5
            r = self.score_fn.residual(self.u, h_hat)  # (B, D), ½∇_h S at ĥ
            t = self.sketch.token_scores(r)  # (B, V) ⟨r, φ(v)⟩
            if self.params.objective == "statistic":  # ∂E[T]/∂ŵ_v = c_k(v), on δ's scale
                dS_dw = self.sketch.token_scores(self.u[None, :].expand_as(r)) / root
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
                return _TiltParts(dS_dw, n_hat, "mul", rows=dw)  # (B, K, ·): at the targets, or every row being one
            if not presence:  # count: ∂ĥ/∂p_i(v) = φ(v)/√N at every masked row
                return _TiltParts(dS_dw, n_hat, "add")
            if capped:  # ∂ŵ_v/∂p_i(v) = P(C_{−i}(v) ≤ k − 1 − f_v) at the targets (expected_sketch, exact)
                p_t = torch.softmax(marginals.at_target_rows(marginals.logits).float(), -1)  # (B, K, V)
                return _TiltParts(dS_dw, n_hat, "mul", rows=capped_row_derivative(frozen, stat, p_t))
            # presence: Π_j(1 − p_j(v)) ∂(½S)/∂ŵ_v, 0 on frozen tokens
            factor = torch.exp(stat).mul_(dS_dw).masked_fill_(frozen > 0, 0.0)  # (B, V)
        if sums.dense:  # q_i = 1 − p_i at the targets, p = softmax of the target rows
            q = self._softmax_into_buffer(marginals.at_target_rows(marginals.logits))  # (B, K, V), buffer
            return _TiltParts(factor, n_hat, "div", rows=q.clamp_(max=1 - 1e-6).neg_().add_(1.0))
        if sums.p_cols is None:  # no exact column: the factor alone at every row
            return _TiltParts(factor, n_hat, "add", tail_max=sums.tail_max)
        p_t = marginals.at_target_rows(sums.p_cols).clamp(max=1 - 1e-6)  # (B, K, C) p_i at the exact columns
        return _TiltParts(factor, n_hat, "add", cols=sums.cols, col_ratio=p_t / (1.0 - p_t), tail_max=sums.tail_max)

    def _masked_sums(self, marginals: Marginals, masked: torch.Tensor) -> tuple[torch.Tensor, "MarginalSums"]:
        """The statistic over M_t — Σ_{j∈M_t} log(1 − p_j) (``presence``) or Σ_{j∈M_t} p_j (``count``),
        (B, V) float32 — and the :class:`MarginalSums` of the rows passed (for the tilt's exact columns).

        A complete :class:`Marginals` is summed in full and starts the running state: ``base``, the
        sum over the masked rows that are not targets, from the rows it holds. An incomplete one
        (``MarginalReads.masked(incremental=True)`` between refreshes: the targets and, at a
        partial refresh, more rows, all fresh) gives base + the targets' fresh terms after moving
        base to this step: one signed sum over the held rows of the positions whose role changed
        (-1: now a target, or given fresh; +1: a target of the last step still masked and not a
        target now; committed positions were targets of the last step, so they leave by not
        coming back), plus the fresh non-target rows, which replace the held ones. O(K·V) per step.

        Raises:
            InputError: incomplete marginals with no complete step since :meth:`begin`.
        """
        eps, presence = self.params.tail_epsilon, self.sketch.counting == "presence"

        def stat_of(logits: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, MarginalSums | None]:
            if self.sketch.counting == "capped":  # (B, k, V) float64, dense (no tail linearisation)
                return capped_column_sums(logits, weights, self.sketch.cap), None
            sums = masked_marginal_sums(logits, weights, eps=eps, log_absent=presence)
            return (sums.log_absent if presence else sums.mass), sums

        target_row = marginals.target_rows  # (B, R)
        if marginals.complete:
            stat, sums = stat_of(marginals.logits, marginals.valid)
            self._running = None
            if marginals.incremental_follows:  # hold the rows; base = the non-target rows' terms
                base = torch.zeros_like(stat) if marginals.rows_are_targets else \
                    stat - stat_of(marginals.at_target_rows(marginals.logits), marginals.target_valid)[0]
                self._running = _RunningSums.start(marginals, masked, base=base)
            return stat, sums
        run = self._running_state()
        if run.base is None:  # started on a step without a tilt: the base of that complete step now
            run.base = stat_of(run.logits, run.base_weights)[0]
        stat, sums = stat_of(marginals.logits, marginals.valid & target_row)  # the targets' fresh terms
        is_target = torch.zeros_like(masked).scatter_(1, marginals.target_positions, marginals.target_valid)  # (B, G)
        partial = not marginals.rows_are_targets  # more fresh rows than the targets: a partial refresh
        renew_row = marginals.valid & ~target_row  # (B, R) fresh rows that are not targets: they replace the held ones
        enter = run.targets & masked & ~is_target
        moved = enter | (is_target & ~run.targets)  # the held rows leaving (-1) or entering (+1) base
        if partial:
            moved |= torch.zeros_like(masked).scatter_(1, marginals.positions, renew_row)
        pos, val = packed_masked_positions(moved)
        if pos.shape[1]:
            sign = torch.where(torch.gather(enter, 1, pos), 1.0, -1.0) * val  # (B, n): 0 on padding
            run.base.add_(stat_of(run.rows_at(pos), sign)[0])
        if partial:
            run.base.add_(stat_of(marginals.logits, renew_row)[0])
            run.replace(marginals, renew_row)
        run.targets, run.masked = is_target, masked.clone()
        return run.base + stat, sums

    def _running_state(self) -> "_RunningSums":
        """The running statistic of this generation (:meth:`_masked_sums`).

        Raises:
            InputError: no complete step since :meth:`begin`.
        """
        if self._running is None:
            raise InputError("incomplete marginals (the targets alone) before any complete step of this generation: "
                             "the first step after begin() must pass every masked row")
        return self._running

    def token_gradient(self, logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """:meth:`marginal_gradient` on a full canvas, logits (B, G, V) → a (B, 1, V) or (B, G, V)
        float32 (every masked row a target, :meth:`Marginals.canvas`)."""
        return self.marginal_gradient(Marginals.canvas(logits, masked), tokens, masked)[0]

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Exponential tilt of eq. (7) in logit space at the target rows: logits + η_t a, (B, K, V).

        η_t = δ·√n̂·s(τ) per text (τ: :meth:`denoising_time`, s: :meth:`schedule_weight`): n̂ = N
        for ``count`` (so the shift is δ·s·⟨r, φ(v)⟩, as before), the expected number of distinct
        kept tokens for ``presence`` (expected length / distinct tokens of the cut text with a
        stop token). With a stop token EOS is not tilted as a content token: its probability is
        kept exactly, p̃_i(e) = p_i(e), and the other tokens are tilted among themselves,
        p̃_i(v) = (1 − p_i(e))·p_i(v)e^{η a(v)} / Σ_{z≠e} p_i(z)e^{η a(z)}, so the watermark does
        not move the model's decision to stop at this step. Tilts ``step.marginals.target_logits()``
        in place (with ``Marginals.out``, writes logits + η_t a there in one pass).
        """
        b0, b1 = step.block
        n_blocks = max(1, step.tokens.shape[1] // max(1, b1 - b0))
        steer = step.temperature is not None and self.steers_order(step.temperature)
        read, temp = self._read_marginals(step)  # the marginals eq. 5-6 read, and the tilt's factor T
        s = self.params.delta * self.schedule_weight(self.denoising_time(step), step.total_steps // n_blocks)  # (B,)
        near_tie = None  # (B, K, V) bool: the tokens an argmax tilt may pick (greedy_margin)
        if steer and step.temperature == 0.0:  # greedy: the order and an argmax tilt of δ·greedy_tilt
            s = s * self.params.greedy_tilt
            if bool((s > 0).any()) and self.params.greedy_margin is not None:
                untilted = step.marginals.at_target_rows(step.marginals.logits)  # (B, K, V)
                near_tie = untilted >= untilted.amax(-1, keepdim=True) - self.params.greedy_margin
        self._priority = None
        if not steer and not bool((s > 0).any()):  # no tilt; the running statistic still follows the steps
            if read.complete:
                self._running = _RunningSums.start(read, step.masked) if read.incremental_follows else None
            elif self.stop_token_id is None:
                self._masked_sums(read, step.masked)
            return step.marginals.target_logits()
        parts = self._tilt_parts(read, step.tokens, step.masked)
        if steer:  # before the tilt writes the target rows
            self._priority = (step.step, self._priority_table(step.marginals, parts))
        if not bool((s > 0).any()):
            return step.marginals.target_logits()
        with serial_on_cpu(parts.factor.device):
            eta = s * parts.n_hat.sqrt() * temp  # (B,) η_t (× T on the model's logits: ``marginals='sampled'``)
            self.coverage = parts.n_hat / max(1, step.tokens.shape[1])  # (B,) c = n̂/N
            if self.params.coverage_source == "committed":
                self.coverage = self._committed_coverage(step.tokens, step.masked, self.coverage)
            if self.params.coverage_full is not None:  # × min(1, c/c*)
                eta = eta * (self.coverage / self.params.coverage_full).clamp(max=1.0)
        marginals = step.marginals
        if near_tie is not None:  # the argmax tilt within the margin: other tokens cannot win
            eos = self.stop_token_id  # the greedy decision to stop stays the model's: EOS where it is the argmax
            stops = None if eos is None else marginals.at_target_rows(marginals.logits).argmax(-1) == eos  # (B, K)
            logits = self._tilt(marginals, parts, eta).masked_fill_(~near_tie, float("-inf"))
            if stops is not None:
                logits[..., eos] = torch.where(stops, logits.amax(-1) + 1.0, float("-inf"))
            return logits
        return self._tilt(marginals, parts, eta)

    def _read_marginals(self, step: DenoiseStep) -> tuple[Marginals, float]:
        """The marginals eq. 5-6 are taken at and the factor on the tilt of the model's logits
        (``GlobalSketchParams.marginals``): ``step.marginals`` and 1, or, for ``sampled`` at a
        temperature T ∉ {0, 1}, a copy whose logits (B, R, V) are l/T (no ``out``) and T."""
        T = step.temperature
        if self.params.marginals == "model" or T is None or T == 0.0 or T == 1.0:
            return step.marginals, 1.0
        return replace(step.marginals, logits=step.marginals.logits / T, out=None), float(T)

    def _committed_coverage(self, tokens: torch.Tensor, masked: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
        """Distinct kept tokens among the committed generated tokens over their number: tokens (B, N)
        int64, masked (B, N) bool, expected (B,) float32 (used where fewer than 8 are committed) → (B,)."""
        with serial_on_cpu(tokens.device):
            frozen = self.sketch.counts(tokens.clamp(0, self.vocab_size - 1), ~masked)  # (B, V)
            keep = self.sketch.keep_table()[None, : self.vocab_size].to(frozen.device)  # (1, V)
            distinct = ((frozen > 0).float() * keep).sum(1)  # (B,)
            n = (~masked).sum(1).to(distinct.dtype)  # (B,)
            return torch.where(n >= 8, distinct / n.clamp_min(1.0), expected.to(distinct.dtype))

    def _tilt(self, marginals: Marginals, parts: "_TiltParts", eta: torch.Tensor) -> torch.Tensor:
        """The tilted target rows of :meth:`process_logits` (B, K, V) float32 (η (B,) float32), EOS kept."""
        eos = self.stop_token_id
        if eos is None and marginals.out is not None and marginals.rows_are_targets:  # copy and tilt in one pass
            return parts.apply(marginals.out, eta, src=marginals.logits)
        logits = marginals.target_logits()  # (B, K, V), after _tilt_parts read the rows
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

    # ------------------------------------------------------------------ order steering
    def steers_order(self, temperature: float) -> bool:
        """``order`` = ``steer``, or ``auto`` under greedy decoding (T = 0): see :class:`GlobalSketchParams`."""
        return self.params.order == "steer" or (self.params.order == "auto" and temperature == 0.0)

    def _priority_table(self, marginals: Marginals, parts: "_TiltParts") -> torch.Tensor:
        """π_i(v) = log p_i(v) + η·(a_i(v) − Σ_w p_i(w) a_i(w)) at the target rows: (B, K, V) float32,
        η = δ·√n̂ (:meth:`order_priority`). Reads the untilted target rows (call before the tilt)."""
        logits = marginals.at_target_rows(marginals.logits)  # (B, K, V) untilted
        B, K, V = logits.shape
        a = parts.apply(torch.zeros_like(logits), torch.ones(B, dtype=logits.dtype, device=logits.device))  # (B, K, V)
        logp = torch.log_softmax(logits, dim=-1)  # (B, K, V)
        gain = a - (logp.exp() * a).sum(-1, keepdim=True)  # (B, K, V): first-order change of ½S on committing v
        with serial_on_cpu(logits.device):
            eta = self.params.delta * parts.n_hat.sqrt()  # (B,)
        return logp.add_(gain.mul_(eta[:, None, None]))

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """Steer the unmasking order with the residual gradient of eq. 6 read as a ranking: (B, K) float32.

        Committing token v at masked row i moves p_i to the one-hot of v; to first order the expected
        score ½S(ĥ) changes by g_i(v) = a_i(v) − Σ_w p_i(w) a_i(w), a the residual gradient
        (:meth:`marginal_gradient`). The priority of target i with drawn token x0_i is

            π_i = log p_i(x0_i) + η·g_i(x0_i),   η = δ·√n̂,

        the model's confidence in the token (LLaDA's low-confidence order, in log form) plus the
        score gain on the tilt's logit scale: to first order, log p̃_i(x0_i) of the tilted marginal
        (eq. 7), so δ is the strength of both channels, δ = 0 gives the low-confidence order, and a
        large δ commits first the positions whose token most increases the expected score. The
        tokens themselves are the sampler's (the argmax at T = 0); detection is unchanged (the
        sketch does not depend on the order the text was written in). The rule's ``confidence`` is
        not used (π replaces it).
        """
        if self._priority is None or self._priority[0] != step.step:
            raise InputError("order_priority needs process_logits of the same step first")
        table = self._priority[1]  # (B, K, V)
        self._priority = None
        return table.gather(-1, x0[..., None]).squeeze(-1)  # (B, K)

    # ------------------------------------------------------------------ detection
    def token_weights(self) -> torch.Tensor:
        """c_k(v) = ⟨u_k, φ_k(v)⟩ for every token: (V,) float64 (0 on excluded tokens)."""
        if self._c_u is None:
            self._c_u = self.sketch.token_scores(self.u[None].float())[0].double()  # (V,)
        return self._c_u

    def background_moments(self, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Background-null mean and variance of T for texts of n tokens: (B,) → (B,), (B,) float64.

        μ(n) = Σ_v c_k(v) q_v(n), σ²(n) = Σ_v c_k(v)² q_v(n)(1 − q_v(n)), q_v(n) = 1 − (1 − π_v)^n.
        They depend on the length only, so they are computed once per distinct length (chunks of
        256 lengths, (256, V) float64 at a time) and cached on the scheme.
        """
        c = self.token_weights()  # (V,)
        cache = self.__dict__.setdefault("_moments", {})
        lengths, inverse = np.unique(n.to(torch.int64).cpu().numpy(), return_inverse=True)  # numpy: no thread spin
        todo = [int(k) for k in lengths.tolist() if int(k) not in cache]
        for i in range(0, len(todo), 256):  # chunks of lengths: (chunk, V) float64 at a time
            ks = torch.tensor(todo[i:i + 256], dtype=torch.float64, device=self.device)
            if self.sketch.counting == "capped":  # Y_v = min(C_v, k), C_v ~ Binomial(n, π_v)
                pmf = self._capped_pmf(ks, self._log_pi, self._log1m_pi)  # (b, V, k + 1)
                j = torch.arange(pmf.shape[-1], dtype=torch.float64, device=self.device)
                m1, m2 = pmf @ j, pmf @ (j * j)  # (b, V)
                mu, var = m1 @ c, (m2 - m1 * m1) @ (c * c)
            else:
                q = -torch.expm1(ks[:, None] * self._log1m_pi[None, :])  # (b, V)
                mu, var = q @ c, (q * (1 - q)) @ (c * c)
            cache.update({k: (float(m), float(s)) for k, m, s in zip(todo[i:i + 256], mu.tolist(), var.tolist())})
        if len(cache) > 65536:  # bound the cache (lengths are at most a few thousand in practice)
            cache.clear()
        table = np.array([cache[int(k)] for k in lengths.tolist()], dtype=np.float64).reshape(-1, 2)
        mv = torch.from_numpy(table[inverse.reshape(-1)]).to(self.device)  # (B, 2)
        return mv[:, 0], mv[:, 1]

    def _capped_pmf(self, n: torch.Tensor, log_pi: torch.Tensor, log1m_pi: torch.Tensor) -> torch.Tensor:
        """The law of Y = min(C, k), C ~ Binomial(n, π) (or Beta-binomial(n, πs, (1 − π)s) with
        ``params.null_dispersion`` = s), for lengths n (b,) and tokens (P,) given by log π and
        log(1 − π), (P,) float64 → (b, P, k + 1) float64 (``capped`` background null)."""
        k = self.sketch.cap
        j = torch.arange(k, dtype=torch.float64, device=log_pi.device)  # (k,)
        n = n.to(log_pi.device, torch.float64)[:, None, None]  # (b, 1, 1)
        log_binom = torch.lgamma(n + 1) - torch.lgamma(j + 1) - torch.lgamma((n - j).clamp_min(0) + 1)  # (b, 1, k)
        s = self.params.null_dispersion
        if s is None:
            log_pj = log_binom + j * log_pi[None, :, None] + (n - j) * log1m_pi[None, :, None]  # (b, P, k)
        else:  # log B(j + a, n − j + b) − log B(a, b), a = πs, b = (1 − π)s
            a, b = (torch.exp(log_pi) * s)[None, :, None], (torch.exp(log1m_pi) * s)[None, :, None]  # (1, P, 1)
            log_pj = (log_binom + torch.lgamma(j + a) - torch.lgamma(a) + torch.lgamma((n - j).clamp_min(0) + b)
                      - torch.lgamma(b) - torch.lgamma(n + s) + torch.lgamma(torch.tensor(s, dtype=torch.float64)))
        pj = torch.exp(log_pj)  # (b, P, k)
        pj = torch.where(j[None, None, :] <= n, pj, torch.zeros_like(pj))
        return torch.cat([pj, (1.0 - pj.sum(-1, keepdim=True)).clamp_min(0.0)], -1)  # P(C ≥ k) last

    def background_z(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Fixed-key z of the presence statistic under the background null: (B, N) → (B,) float64.

        T = ⟨u_k, Φᵀx(y)⟩ = Σ_v c_k(v) x_v with x the kept-token presence; under the null each kept
        token is present independently with q_v(n) = 1 − (1 − π_v)^n for a text of n tokens, so
        z = (T − Σ_v c_k(v) q_v) / (Σ_v c_k(v)² q_v (1 − q_v))^{1/2} (:meth:`background_moments`).
        T is a sum over the text's distinct tokens (:meth:`Sketch.sparse_weights`), O(B·N) work.
        """
        return self._background(ids.to(self.device), valid.to(self.device))[0]

    def _null_pairs(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The background null's terms, grouped: (g₀, g (P,) int64, log(1 − π) (P,) float64, counts (P,) int64).

        T = Σ_v c_k(v) x_v = g₀·X with X = Σ_v g_v x_v, g_v = c_k(v)/g₀ integral (g₀ the gcd of the
        weights: 2 for the count sketch with d = 4, whose c_k(v) ∈ {−4, −2, 0, 2, 4}); kept tokens with
        equal (g_v, π_v) share one term with a count (the prior's counts repeat), tokens with c_k(v) = 0
        (the excluded ones among them) drop out. Built once per key.

        Raises:
            ConfigError: weights c_k(v) that are not integers (a sketch whose features are not ±1 entries):
                the background null's exact law needs an integer lattice.
        """
        pairs = self.__dict__.get("_pairs")
        if pairs is None:
            c = self.token_weights().cpu().numpy()  # (V,) float64
            if not np.all(c == np.round(c)):
                raise ConfigError("null='background' needs integral token weights c_k(v) = <u_k, phi_k(v)> (the count "
                                  "sketch's +-1 features); use null='key-randomised' with this sketch")
            ci = np.round(c).astype(np.int64)
            nz = ci != 0
            g0 = int(np.gcd.reduce(np.abs(ci[nz]))) if nz.any() else 1
            key = np.stack([ci[nz] // g0, self._log1m_pi.cpu().numpy()[nz].view(np.int64)], 1)  # (P', 2) exact grouping
            uniq, counts = np.unique(key, axis=0, return_counts=True)
            pairs = self._pairs = (g0, uniq[:, 0].copy(), uniq[:, 1].copy().view(np.float64), counts.astype(np.int64))
        return pairs

    def background_law(self, n: int) -> LatticeTail:
        """The exact law of X = T/g₀ under the background null for texts of ``n`` tokens (:meth:`_null_pairs`),
        as its upper tail (:func:`sketchwm.stats.bernoulli_sum_tail`); cached per length, like
        :meth:`background_moments`.

        Raises:
            ConfigError: see :meth:`_null_pairs`.
        """
        cache = self.__dict__.setdefault("_laws", {})
        law = cache.get(n)
        if law is None:
            _, g, l1m, counts = self._null_pairs()
            if self.sketch.counting == "capped":
                l1m_t = torch.from_numpy(l1m)
                pmf = self._capped_pmf(torch.tensor([n]), torch.log(-torch.expm1(l1m_t)), l1m_t)[0].numpy()  # (P, k + 1)
                law = cache[n] = capped_sum_tail(g, pmf / pmf.sum(1, keepdims=True), counts)
            else:
                law = cache[n] = bernoulli_sum_tail(g, -np.expm1(n * l1m), counts)
            if len(cache) > 4096:  # bound the cache (a few KB a length)
                cache.clear()
                cache[n] = law
        return law

    def background_pvalue(self, T: np.ndarray, lengths: np.ndarray, var: np.ndarray) -> np.ndarray:
        """p = P(X' >= X − β·σ_X) for X' under the background null's exact law (the module doc):
        T (B,) float64 integral statistics, lengths (B,) int64, var (B,) σ²(n) of T → (B,) float64.

        Exact under the null at β = 0 (an upper bound on the exact tail where the Chernoff bound takes
        over, :func:`sketchwm.stats.bernoulli_sum_tail`); β > 0 shifts the law up by β standard
        deviations. One table look-up per text, the laws built once per distinct length.
        """
        g0 = self._null_pairs()[0]
        X = np.round(T / g0)
        shift = self.params.null_margin * np.sqrt(np.maximum(var, 0.0)) / g0
        x = np.ceil(X - shift - 1e-9).astype(np.int64)  # P(X' >= X − βσ) = P(X' >= ⌈X − βσ⌉)
        p = np.empty(T.shape, dtype=np.float64)
        ls, inverse = np.unique(lengths, return_inverse=True)
        for i, n in enumerate(ls.tolist()):  # per distinct length, not per text
            sel = inverse.reshape(-1) == i
            p[sel] = self.background_law(int(n)).sf(x[sel])
        return p

    def _background(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(z (B,) float64, n_d (B,) int64 distinct kept tokens) of the background null."""
        z, n_d, _ = self._background_stats(ids, valid, with_p=False)
        return z, n_d

    def _background_stats(self, ids: torch.Tensor, valid: torch.Tensor,
                          with_p: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(z (B,) float64, n_d (B,) int64, p (B,) float64 on the CPU or None) of the background null."""
        ids, lengths = self.sketch.check_ids(ids, valid)
        tables = self.__dict__.get("_presence_tables")
        if tables is None:  # (V + 1,) c_k and keep with 0 on the padding id V; c_k as int8 when integral
            c = self.token_weights()
            small_int = bool((c == c.round()).all()) and float(c.abs().max()) <= 127
            c_ext = torch.cat([c, torch.zeros(1, dtype=torch.float64, device=self.device)])
            tables = self._presence_tables = (c_ext.to(torch.int8) if small_int else c_ext,
                                              self.sketch.keep_table().to(torch.int8))
        if self.sketch.counting == "capped":  # T = Σ_v c_k(v) min(c_v, k) over the first k copies of each id
            tok, x = self.sketch.sparse_weights(ids, valid)  # (B, N), (B, N)
            T, n_d = (tables[0].to(torch.float64)[tok] * x.double()).sum(1).round(), x.sum(1).round().long()
        else:
            T, n_d = distinct_token_sums(ids, valid, *tables)  # (B,), (B,)
        mu, var = self.background_moments(lengths)  # all tokens: the length the background model sees
        # (B,) arithmetic in numpy: a small torch op here waits ~10 ms on the thread pool
        Tn, mun, varn = T.cpu().numpy().astype(np.float64), mu.cpu().numpy(), var.cpu().numpy()
        z = torch.from_numpy((Tn - mun) / np.sqrt(np.maximum(varn, 1e-12)))
        p = torch.from_numpy(self.background_pvalue(Tn, lengths.cpu().numpy(), varn)) if with_p else None
        if T.device.type == "cpu":
            return z, n_d, p
        return z.to(self.device), n_d.to(self.device), p

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Detection statistics for ids (B, N) with valid (B, N).

        ``null="background"``: score = z = the fixed-key background z (:meth:`background_z`),
        p-value the exact shifted tail of :meth:`background_pvalue`. ``null="key-randomised"``: score = S_k (eq. 2), z = ⟨u, h⟩/‖h‖ and the
        key-randomised p-value of ``params.p_value``. Vectorised over the batch: one row sort and
        O(B·N) gathers (no (B, V) table, nothing per text in Python).

        Raises:
            InputError: ids outside [0, V).
        """
        ids, valid = ids.to(self.device), valid.to(self.device)
        if self.null == "background":
            z, n, p = self._background_stats(ids, valid)
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

        Background null: the z of the first lattice point of T whose exact p-value (:meth:`background_pvalue`)
        is <= α, less half a lattice step, so ``z >= threshold`` ⇔ ``p <= alpha`` exactly (the half step
        absorbs float rounding of z). Key-randomised: the score function's τ_α (eq. 19), when the sketch
        declares the geometry it needs (:attr:`sketchwm.components.Sketch.count_geometry`).

        Raises:
            InputError: α outside (0, 1).
            NotImplementedError: no closed form (key-randomised null on a sketch without the geometry).
        """
        if self.null != "background":
            if getattr(self.score_fn, "threshold_needs_geometry", False) and not getattr(self.sketch, "count_geometry", False):
                raise NotImplementedError(f"score '{self.score_fn.name}' has no analytic threshold on sketch "
                                          f"'{self.sketch.name}' (it declares no count-sketch geometry)")
            return self.score_fn.analytic_threshold(alpha, n_tokens)
        check_alpha(alpha)
        g0 = self._null_pairs()[0]
        mu, var = (float(t[0]) for t in self.background_moments(torch.tensor([int(n_tokens)])))
        sd = math.sqrt(max(var, 1e-12))
        x_star = self.background_law(int(n_tokens)).isf(alpha)  # smallest x with P(X' >= x) <= α
        shift = self.params.null_margin * math.sqrt(max(var, 0.0)) / g0
        X_star = math.floor(x_star - 1 + shift + 1e-9) + 1  # smallest X with ⌈X − βσ_X − 1e-9⌉ >= x*
        return (g0 * X_star - 0.5 * g0 - mu) / sd

    def attribute(self, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, top: int = 5, chunk: int = 8192,
                  bank: Any = None) -> Attribution:
        """Rank K key-family members for each text (beyond the paper; :mod:`sketchwm.attribution`).

        The members share k_sk, hence the integer sketch H = Φᵀx of a text, and differ in their
        direction u^{(i)}; they are ranked by the exact ⟨u^{(i)}, H⟩ (the order of S_k and of z),
        computed for all K at once as AND/popcount passes over a bit-packed bank. p-values are
        exact key-randomised per member (they share the pmf of ⟨u, H⟩ given h); ``p_value_fwer``
        is Bonferroni-corrected over the K members.

        Args:
            ids, valid: (B, N) as in :meth:`score_ids`.
            n_keys: K (up to 100,000 and more; the bank is K·D/8 bytes).
            top: how many best members to return.
            chunk: members per block when the bank is built here.
            bank: a prebuilt :class:`sketchwm.attribution.DirectionBank` of this key's family with
                at least ``n_keys`` members (built here when None).

        Raises:
            InputError: n_keys < 1, or a bank with fewer than ``n_keys`` members.
        """
        from sketchwm.attribution import DirectionBank, integer_sketch

        if n_keys < 1:
            raise InputError("n_keys must be >= 1")
        bank = bank if bank is not None else DirectionBank.build(self, n_keys, chunk)
        if len(bank) < n_keys:
            raise InputError(f"the direction bank holds {len(bank)} members, fewer than n_keys = {n_keys}")
        ids, valid = ids.to(self.device), valid.to(self.device)
        H = integer_sketch(self, ids, valid)  # (B, D) int64
        n = self.sketch.sparse_weights(ids, valid)[1].sum(1).round().long()  # (B,) the normaliser
        top = min(top, n_keys)
        if len(bank) > n_keys:
            bank = DirectionBank(bank.bits[:, :n_keys], bank.plus[:n_keys], bank.dim)
        best = [bank.top(H[b], top) for b in range(H.shape[0])]  # per text: one pass over the bank
        best_i = torch.from_numpy(np.stack([i for i, _ in best])).to(self.device)  # (B, top)
        ip_int = torch.from_numpy(np.stack([v for _, v in best])).to(self.device)  # (B, top) ⟨u, H⟩
        h = H.double() / n.double().clamp_min(1).sqrt()[:, None]  # (B, D)
        U_top = self.directions(best_i.flatten()).double().view(H.shape[0], top, -1)  # (B, top, D)
        best_s = torch.stack([self.score_fn.score(U_top[b], h[b:b + 1])[0] for b in range(H.shape[0])])  # (B, top)
        z = ip_int.double() / n.double().clamp_min(1).sqrt()[:, None] / h.norm(dim=1, keepdim=True).clamp_min(1e-300)
        p = rademacher_sum_pvalue(H, ip_int)
        return Attribution(best_i, best_s, z, p, bonferroni(p, n_keys), n_keys)

    def describe(self) -> dict[str, Any]:
        """Config plus the resolved prior (source and SHA-256) and the sketch report."""
        d = super().describe()
        d["resolved_prior"] = self.prior_desc
        d["sketch_report"] = self.sketch.report()
        return d


@hookimpl
def sketchwm_register_schemes() -> list[type]:
    """Register the global sketch watermark, its key-family defence against stealing (:mod:`.key_family`)
    and its combination with a context-keyed green channel (:mod:`.sketch_green`)."""
    from .key_family import GlobalSketchFamilyScheme
    from .sketch_green import SketchGreenScheme

    return [GlobalSketchScheme, GlobalSketchFamilyScheme, SketchGreenScheme]
