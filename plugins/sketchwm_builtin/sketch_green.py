"""``global-sketch-green``: the global sketch, a context-keyed green channel and keyed sampling, on one text.

The default scheme since 2026-11-27 (:data:`sketchwm.config.DEFAULT_SCHEME`; why: README, "Why the
default is what it is").

Why. The presence sketch reads each distinct kept token once (seed paper eq. 1 with presence
features): it is order-invariant and flood-robust, and at high entropy it leads the matched
leaderboard. At low entropy (T = 0.5, repetitive text, distinct-2 ≈ 0.2) there are few distinct
tokens to read, and the frequent tokens that low-temperature text is made of are excluded from the
sketch (their per-key offset under a domain shift breaks the per-key null; docs/statistics.md). A
context-keyed green list (Kirchenbauer et al. 2023; for DLMs Gloaguen et al. 2025, arXiv 2509.24368)
keys each token's colour on its neighbour, so a frequent token is green in some contexts and red in
others and its domain-wide rate averages out: that is where the evidence of repetitive text can be
planted. This scheme runs both channels on one text, and draws its tokens with keyed sampling noise, a
third channel ("Keyed sampling" below).

Embedding (first order in the two strengths). With a(v) the sketch's tilt direction at a target row
(seed paper eq. 7: the residual gradient of the expected sketch, scaled by η_t) and ∂J/∂p_i(v) the
gradient of the expected green score J (Gloaguen et al.'s eq. for J,
:class:`sketchwm_baselines.red_green_dlm.RedGreenDLMScheme`), each target marginal is tilted by

    p̃_i(v) ∝ p_i(v) · exp(s·η_t·a(v) + s·δ_g·∂J/∂p_i(v)),

s = ``scale`` (the strength knob), both gradients taken at the untilted marginals p (the green
gradient is read before the sketch tilts the rows). This is the exponential tilt along the gradient
of E[T_sketch]·η_t + δ_g·E[J]: each channel's share of the KL goes where its gradient is large, so at
positions where the sketch has nothing left to gain (the token already present) the green term is
all that moves the marginal. The sketch channel keeps everything of ``global-sketch`` (stop-token
handling, the greedy order and argmax tilt, the key): it is a ``global-sketch`` under the same key,
so a text this scheme marks is also scored by ``global-sketch``.

Handover (the default). With ``handover`` and the sketch's ``coverage_full`` c*, the two strengths
share one budget per text: η_t ← η_t·m and δ_g ← δ_g·(1 − m), m = min(1, c/c*), c = n̂/N the
sketch's expected coverage (distinct kept tokens per generated position, eq. 5's n̂) at the step.
With the sketch's ``marginals: sampled`` c is read from the distribution tokens are drawn from,
softmax(l/T), so a low temperature (or any low-entropy model) gives the step to the green channel
from the first step (the coverages behind c* = 0.25 are in :class:`SketchGreenParams`).

Detection (two channels, ``sampling: free``; the three-channel rule of the default is under "Keyed
sampling"). Two p-values of the same text: p_s, the sketch's fixed-key background null
(:meth:`GlobalSketchScheme.score_ids`, valid for the key held), and p_g, the exact binomial test on
the green count of distinct (context hash, token) pairs (:class:`ContextGreenListScheme`), combined
by weighted Bonferroni: p = min(1, p_s/w, p_g/(1 − w)). P(p ≤ α) ≤ P(p_s ≤ wα) + P(p_g ≤ (1 − w)α)
≤ α on text written without the key whenever each channel's own p-value is valid, whatever their
dependence.

The weight w follows the handover (``weighting: coverage``, the default). The embedding gives the
tilt to the sketch where the coverage c is high and to the green lists where it is low, so a fixed
w = ½ tests the channel that carries the evidence at α/2 in every regime (z 2.58 instead of 2.33 at
α = 1%). The detector reads the same statistic from the text: ĉ = n_d/N, the distinct kept tokens per
token (what the sketch channel scores, ``n_scored``), and sets w = f + (1 − 2f)·min(1, ĉ/c*) per text,
f = ``weight_floor`` (0.1), c* the sketch's ``coverage_full``. So diverse text (T = 1, ĉ ≈ 0.4) tests
the sketch at 0.9α and repetitive text (T = 0.5, ĉ ≈ 0.02-0.05) the green lists at about 0.9α. The
bound still holds when each p-value is valid conditionally on ĉ (the independent-filtering argument,
Bourgon, Gentleman & Huber 2010): P(p ≤ α) ≤ E[P(p_s ≤ w(ĉ)α | ĉ) + P(p_g ≤ (1 − w(ĉ))α | ĉ)] ≤ α.
Over keys (text independent of the key) this is exact: ĉ does not depend on the key, and both
channels' hashes are fresh draws given the text (``tests/test_sketch_green.py`` checks the level
over 200 keys on texts of mixed coverage). For the one key a user holds it is as approximate as each
channel's own fixed-key null. The sketch's background null is exact given the length N, not given
n_d, and T and n_d covary for a fixed key through Σ_v c_k(v) q_v(1 − q_v) over the kept tokens,
which is small for hashed weights. This is measured, not assumed: ``benchmarks/null_per_key.py``
reads the per-key rate on two held-out domains (README, "What a detection promises"). f keeps each
channel at least α/10, so a text whose coverage an adversary moves (flooding one token lowers ĉ)
is still tested by the sketch. ``weighting: fixed`` with ``weight`` w restores one weight for every
text. Reordering the tokens destroys the green
channel's contexts but not the sketch, so a reordered text is still tested at level wα by the
sketch channel, with only the evidence that channel planted: with the default handover the sketch
carries the whole tilt at T = 1, and reorder-words at s = 0.5 keeps TPR 1.000 there, as for
``global-sketch``; at T = 0.5 the green channel carries it and a reordered text keeps 0.175 of 0.425 (the robust-green board, per-text weight; the fixed split
of the first version, sketch δ 0.25, kept 0.45 at T = 1; docs/statistics.md). Flooding one token adds a new distinct (context, token) pair at every
insertion (its neighbours differ), diluting the green count, and one token to the sketch. ``score`` = Φ⁻¹(1 − p) (so
``score ≥ Φ⁻¹(1 − α)`` ⇔ ``p ≤ α``), ``z`` the z of the channel with the smaller p-value.

Keyed sampling (``sampling: keyed``, the default since stop 38). The two tilts above are read by
statistics of the text alone, so their detection per nat of distortion is bounded at first order:
a statistic g read from a tilt p̃ ∝ p·exp(δa) moves by at most δ·Σ_i Var_p(a) in z-units of
√(Σ_i Var(g)), so z ≤ √(2·n·KL) and TPR 0.9 at 1% FPR (z 3.61 over a unit-variance null) needs
KL ≥ 3.61²/(2n), 0.051 nats/token at n = 128, reached only if every text's shift is the mean one
(docs/statistics.md, "How much detection a nat buys"). The sampler's own randomness is a channel
that costs no distortion: the engine draws each token by Gumbel-max,
x = argmax_v [log p̃(v) − log(−log r_v)], and with r = PRF(k_a, h·V + v) keyed on the context hash h
of the position (Aaronson 2023; :class:`sketchwm_baselines.aar_gumbel.AARGumbelScheme`, context
{−1}, key ``key.subkey("global-sketch-green/sampling")``) x is still distributed as p̃ over keys, so
the tilted marginals, the KL the leaderboards report and the two tilt channels' evidence are
unchanged, and the detector gains a third statistic, Aaronson's S = Σ −log(1 − r_x) over distinct
(h, token) pairs, with an exact Gamma(n, 1) p-value p_k. A context hash is keyed at most once per text
(``keyed.repeats: fresh``): a position whose context was already keyed in the text draws with the
sampler's noise, so over keys the whole text (not only each token) is distributed as the tilted
sampler's, and repeated contexts of low-entropy text cannot lock into one continuation. Positions
whose context is still masked when they are drawn (about half under random-order decoding, context
{−1}) draw with the sampler's noise too. Greedy decoding (T = 0) draws no noise: the channel is
silent there and the tilt (with the sketch's order steering) carries the mark.

Detection with three channels: p = min(1, p_s/((1 − a)w), p_k/(a·w), p_g/(1 − w)), a =
``sampling_weight`` (0.2), w the per-text weight above: the keyed channel takes a part of the sketch's
share because it reads the same diverse text (it scores only pairs whose token the sketch keeps,
``keyed_scores: kept``; at T = 0.5 there are few such pairs, and the green lists keep their share).
The weighted Bonferroni bound holds as before (each channel valid given ĉ; p_k's Gamma law is exact
over keys given the text's distinct pairs, so also given ĉ). Per key it is not exact: a pair that
recurs in most texts of a domain keeps one fixed uniform for the key, and Aaronson's statistic over
every pair (``aar-gumbel``) reads a worst key of 5.36% at p ≤ 0.01 over 60 keys on the held-out
manpages (``python benchmarks/null_per_key.py --schemes default aar-gumbel --n-keys 60 --seed 2``),
which put the three-channel default at 2.18% before the keyed channel was restricted to kept tokens.
The keyed channel's evidence is destroyed by what destroys contexts (reordering words, substitutions
next to a token, paraphrase), as the green channel's is; the sketch is then tested at (1 − a)·w·α,
which costs z about 0.08 at α = 1% (2.45 against 2.37 at w = 0.9). A user's own sampling loop (:class:`sketchwm.userloop.LogitsTilter`) cannot supply the
noise: it runs the tilt alone, with a warning, and ``sampling: free`` gives the keyed share back to
the tilts.

Keys. The sketch channel uses the key itself; the green lists use the subkey
``key.subkey("global-sketch-green/green")`` and the keyed sampling ``key.subkey("global-sketch-green/sampling")``
(HMAC-SHA256, domain-separated), so they are not the green lists or uniforms of a ``red-green-dlm`` or
``aar-gumbel`` run under the same key.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, MarginalReads, SchemeScores, Strength, WatermarkScheme
from sketchwm.config import StrictModel
from sketchwm.stats import normal_isf
from sketchwm_baselines.aar_gumbel import AARGumbelParams, AARGumbelScheme
from sketchwm_baselines.red_green_dlm import RedGreenDLMParams, RedGreenDLMScheme

from .global_sketch import GlobalSketchParams, GlobalSketchScheme

__all__ = ["SketchGreenParams", "SketchGreenScheme", "GREEN_DOMAIN", "SAMPLING_DOMAIN", "combine_bonferroni",
           "combine_weighted_bonferroni"]

#: domain of the green channel's key: ``key.subkey(GREEN_DOMAIN)``
GREEN_DOMAIN = "global-sketch-green/green"
#: domain of the keyed-sampling channel's key: ``key.subkey(SAMPLING_DOMAIN)``
SAMPLING_DOMAIN = "global-sketch-green/sampling"


class SketchGreenParams(StrictModel):
    """Parameters of ``global-sketch-green``.

    Attributes:
        sketch: the sketch channel, a full :class:`GlobalSketchParams` (default: ``global-sketch``'s
            defaults with ``coverage_full`` 0.25 and ``marginals: sampled``).
        green: the green channel, :class:`RedGreenDLMParams` (context {−1}, SumHash, γ = 0.25, both
            gradient terms); its ``delta`` δ_g is the green logit shift at s = 1 (default 2).

    Default: a handover driven by the coverage of the marginals tokens are drawn from. The sketch
    channel is ``global-sketch`` at its defaults (δ 0.75) with ``coverage_full`` c* = 0.25 and
    ``marginals: sampled``, so per text it takes min(1, c/c*) of its tilt and the green channel (δ_g 2)
    the rest, c = n̂/N the expected fraction of the positions that are distinct kept tokens under
    softmax(l/T). That coverage separates the regimes from the first step (12 development prompts ×
    64 tokens, ``benchmarks/frontier_dev.py``'s split; first steps / mid / end of generation):
    T = 1 random order 0.40 / 0.45 / 0.47; T = 0.5 LLaDA blocks 0.026 / 0.024 / 0.022; T = 0.2
    entropy order 0.018 / 0.018 / 0.016. Under the model's untempered marginals the same T = 0.5 runs
    read 0.35 / 0.15 / 0.06, like T = 1 at the start, which is why the earlier coverage-scaled
    splits still spent the sketch's KL at low temperature. The criterion for c*: the sketch keeps its
    full tilt wherever at least a quarter of the positions are expected to be new distinct kept
    tokens (the regime where it leads the matched tables, c ≈ 0.4-0.47, clears it with margin) and
    hands almost all of it to the green lists where it can read a few tokens only (c ≈ 0.02); c* was
    set from these coverages, not from a TPR. Measured on the development split (24 ``human``
    passages × 64 tokens, one key; not the prompts the leaderboard reports on), TPR at 1% FPR at
    KL 0.05 / 0.1 / 0.2 nats per token: T = 0.5 0.14 [0.02, 0.27] / 0.38 [0.18, 0.57] / 0.64 [0.44,
    0.82] against ``red-green-dlm`` 0.16 / 0.37 / 0.67 and ``global-sketch`` 0.00 / 0.00 / 0.00;
    T = 1 0.58 [0.38, 0.79] at KL 0.11 and 0.80 [0.67, 0.91] at 0.2 against ``global-sketch`` 0.48 /
    0.92 and ``dmark`` 0.78 at 0.2 (the sketch channel tested at level α/2 costs it the gap; these
    figures are from the fixed w = ½). The per-text weight (``weighting: coverage``) was then
    compared with w = ½ on the same texts (``python benchmarks/combine_dev.py``: 96 ``human``
    passages × 128 tokens per regime, one key, TPR at p ≤ 0.01 and above the calibrated threshold):
    T = 1 at s = 0.4 0.792 [0.708, 0.865] → 0.844 [0.771, 0.917]; T = 0.5 at s = 0.75 0.302 [0.208,
    0.396] → 0.323 [0.229, 0.417] (floor 0.25: 0.844 and 0.312). The floor 0.1 was set by the
    criterion in ``weight_floor``, not by these figures. The
    fixed split of the first version (sketch δ 0.25, green δ 2 at every step, no handover) read
    0.18 / 0.39 / 0.76 at T = 0.5 but 0.31 / 0.54 at KL 0.1 / 0.2 at T = 1 (docs/statistics.md,
    "Two channels"); pass ``sketch: {delta: 0.25}`` for it.
        scale: s ≥ 0, the strength knob: multiplies both channels' strengths (the sketch's δ and
            δ_g), so a sweep of s moves along one ray of the two-strength plane.
        handover: when the sketch channel's ``coverage_full`` c* is set, the green channel's
            strength per text is δ_g·(1 − min(1, c/c*)) (c = n̂/N the sketch's coverage at the step,
            :attr:`GlobalSketchScheme.coverage`): the channels share one tilt, the sketch taking
            min(1, c/c*) of it and the green lists the rest. False: δ_g at every step.
        weighting: how the sketch channel's share w of α in the weighted Bonferroni p-value
            min(1, p_s/w, p_g/(1 − w)) (:func:`combine_bonferroni`) is set. ``coverage`` (default): per
            text, from the text's observed coverage ĉ = n_d/N (distinct kept tokens per token, the
            statistic the handover reads while embedding), w = f + (1 − 2f)·min(1, ĉ/c*), f =
            ``weight_floor``: the channel that carried the tilt gets most of α (module doc, "Detection",
            for why the level still holds); needs the sketch's ``coverage_full`` c* (``fixed`` without it).
            ``fixed``: w = ``weight`` for every text.
        weight: w of ``weighting: fixed``.
        weight_floor: f ∈ (0, ½], the least share of α either channel keeps under ``coverage``
            weighting (default 0.1: a text whose coverage an adversary moves, e.g. by flooding, is still
            tested by each channel at level ≥ α/10).
        sampling: ``keyed`` (default): a third channel, keyed sampling (module doc, "Keyed sampling"):
            the engine draws each token of the tilted marginal by Gumbel-max with uniforms keyed on
            the token's context (Aaronson's rule, :class:`AARGumbelScheme` under the subkey
            :data:`SAMPLING_DOMAIN`), a context hash at most once per text. It adds no distortion to
            the tilted marginals. ``free``: the sampler's own noise (two channels).
        keyed: the keyed-sampling channel's :class:`AARGumbelParams` (context {−1}, ``repeats:
            fresh``).
        keyed_scores: which (context, token) pairs the keyed channel's detector scores: ``kept``
            (default) those whose token the sketch keeps (not among its ``exclude_top`` most frequent
            prior tokens), for the reason the sketch excludes them: a frequent pair recurs in most
            texts of a domain, so for one fixed key its fixed uniform shifts every text's score and the
            Gamma(n, 1) law no longer holds per key (measured: module doc, "Keyed sampling"); ``all``
            every distinct pair, as ``aar-gumbel``.
        sampling_weight: a ∈ (0, 1), the keyed-sampling channel's part of the sketch's share w: the
            sketch is tested at (1 − a)·w·α, the keyed channel at a·w·α, the green lists at (1 − w)·α
            (w per text, ``weighting``). Both of the first two channels read diverse text (the keyed
            channel scores the sketch's kept tokens), so they share what the coverage gives to it.
            Default 0.2: the sketch keeps 0.8 of its share, so a text whose contexts are destroyed
            (e.g. by reordering) loses at most that.
        min_tokens: shortest text the detector accepts (tokens of text).
    """

    sketch: GlobalSketchParams = GlobalSketchParams(delta=0.75, coverage_full=0.25, marginals="sampled")
    green: RedGreenDLMParams = RedGreenDLMParams(delta=2.0)
    scale: float = Field(1.0, ge=0)
    handover: bool = True
    weighting: Literal["coverage", "fixed"] = "coverage"
    weight: float = Field(0.5, gt=0, lt=1)
    weight_floor: float = Field(0.1, gt=0, le=0.5)
    sampling: Literal["keyed", "free"] = "keyed"
    keyed: AARGumbelParams = AARGumbelParams(repeats="fresh")
    keyed_scores: Literal["kept", "all"] = "kept"
    sampling_weight: float = Field(0.2, gt=0, lt=1)
    min_tokens: int = Field(16, ge=1)


def combine_weighted_bonferroni(p_values: list[torch.Tensor], weights: list[float | np.ndarray]) -> torch.Tensor:
    """Weighted Bonferroni over J tests: p = min(1, min_j p_j/w_j), Σ_j w_j ≤ 1.

    P(p ≤ α) ≤ Σ_j P(p_j ≤ w_j α) ≤ α when each p-value is valid (given what the weights are
    computed from), under any dependence between them (Genovese, Roeder & Wasserman 2006; per-text
    weights: Bourgon, Gentleman & Huber 2010).

    Args:
        p_values: J tensors (B,) float64 (NaN stays NaN).
        weights: J weights, each a float or (B,) float64 array, in (0, 1), summing to at most 1 per text.

    Returns:
        (B,) float64 on the device of the first p-value.

    Raises:
        ValueError: a weight outside (0, 1), weights summing above 1, or len(p_values) != len(weights).
    """
    if len(p_values) != len(weights) or not p_values:
        raise ValueError(f"need one weight per p-value, got {len(p_values)} p-values and {len(weights)} weights")
    ws = [np.asarray(w.cpu().numpy() if torch.is_tensor(w) else w, dtype=np.float64) for w in weights]
    if not all(bool(((w > 0.0) & (w < 1.0)).all()) for w in ws):
        raise ValueError(f"weights must lie in (0, 1), got {weights}")
    if bool((sum(ws) > 1.0 + 1e-12).any()):
        raise ValueError(f"weights must sum to at most 1, got {weights}")
    ps = [x.detach().double().cpu().numpy() for x in p_values]  # numpy: see SketchGreenScheme.score_ids
    out = np.minimum(np.minimum.reduce([p / w for p, w in zip(ps, ws)]), 1.0)
    return torch.from_numpy(np.asarray(out, dtype=np.float64)).to(p_values[0].device)


def combine_bonferroni(p_sketch: torch.Tensor, p_green: torch.Tensor,
                       weight: float | torch.Tensor = 0.5) -> torch.Tensor:
    """Weighted Bonferroni over two tests: p = min(1, p_s/w, p_g/(1 − w)), w = ``weight``.

    P(p ≤ α) ≤ P(p_s ≤ wα) + P(p_g ≤ (1 − w)α) ≤ α when each p-value is valid, under any dependence
    between them (the weighted Bonferroni test, e.g. Genovese, Roeder & Wasserman 2006). w = ½ is
    the plain Bonferroni bound 2·min(p_s, p_g). A per-text w keeps the bound when each p-value is
    valid conditionally on what w is computed from (Bourgon, Gentleman & Huber 2010, independent
    filtering): E[P(p_s ≤ wα | w) + P(p_g ≤ (1 − w)α | w)] ≤ α.

    Args:
        p_sketch, p_green: (B,) float64 p-values (NaN stays NaN).
        weight: w in (0, 1), the share of α given to the sketch channel: a float, or (B,) float64 per text.

    Returns:
        (B,) float64.

    Raises:
        ValueError: a w outside (0, 1).
    """
    w = np.asarray(weight.cpu().numpy() if torch.is_tensor(weight) else weight, dtype=np.float64)
    if not bool(((w > 0.0) & (w < 1.0)).all()):
        raise ValueError(f"weight must lie in (0, 1), got {weight}")
    return combine_weighted_bonferroni([p_sketch, p_green], [w, 1.0 - w])


class SketchGreenScheme(WatermarkScheme):
    """The global sketch, a context-keyed green channel and keyed sampling on one text (module doc).

    Args:
        params: :class:`SketchGreenParams`.
        key: the :class:`sketchwm.keys.WatermarkKey`; the sketch channel uses it, the green channel
            its subkey :data:`GREEN_DOMAIN`.
        vocab_size: V.
        device: where tables live.
        registry, tokenizer_fingerprint: passed to the sketch channel (:class:`GlobalSketchScheme`).

    Attributes:
        sketch_channel: the :class:`GlobalSketchScheme` (δ = s·``sketch.delta``).
        green_channel: the :class:`RedGreenDLMScheme` (δ = s·``green.delta``).
        sampling_channel: the :class:`AARGumbelScheme` of ``sampling: keyed``, else None.
        noise: ``"keyed"`` under ``sampling: keyed`` (the engine takes the draw's uniforms from
            :meth:`sampling_uniforms`), else ``"sampler"``.
        noise_required: False: the tilt is a watermark without the keyed noise, so a user's own
            sampling loop (:class:`sketchwm.userloop.LogitsTilter`) may run the tilt alone.

    Raises:
        ConfigError: bad params (as the two channels raise them).
    """

    name = "global-sketch-green"
    Params = SketchGreenParams
    strength = Strength("scale", (0.25, 0.5, 1.0, 1.5, 2.0))  # s, both channels' strengths; default 1
    # every masked row at every step: the sketch reads them all, and the green gradient reads the
    # neighbours of each target, which incremental reads would leave stale
    reads = MarginalReads.masked()
    noise_required = False

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu", registry: Any = None,
                 tokenizer_fingerprint: str | None = None):
        super().__init__(params, key, vocab_size, device)
        p = self.params
        sketch = {**p.sketch.model_dump(mode="json"), "delta": p.scale * p.sketch.delta, "min_tokens": p.min_tokens}
        green = {**p.green.model_dump(mode="json"), "delta": p.scale * p.green.delta, "min_tokens": p.min_tokens}
        self.sketch_channel = GlobalSketchScheme(sketch, key, vocab_size, device, registry=registry,
                                                 tokenizer_fingerprint=tokenizer_fingerprint)
        self.green_channel = RedGreenDLMScheme(green, key.subkey(GREEN_DOMAIN), vocab_size, device)
        self.sampling_channel: AARGumbelScheme | None = None
        if p.sampling == "keyed":
            keyed = {**p.keyed.model_dump(mode="json"), "min_tokens": p.min_tokens}
            self.sampling_channel = AARGumbelScheme(keyed, key.subkey(SAMPLING_DOMAIN), vocab_size, device)
            self.noise = "keyed"  # the engine asks sampling_uniforms for the draw's noise
            keep = self.sketch_channel.sketch.keep
            if p.keyed_scores == "kept" and keep is not None:
                self.sampling_channel.scored_vocab = keep.bool()  # (V,): the sketch's kept tokens
        self.prior_fingerprint = self.sketch_channel.prior_fingerprint
        self.prior_desc = self.sketch_channel.prior_desc

    # ------------------------------------------------------------------ embedding
    def set_stop_token(self, token_id: int | None) -> None:
        """As :meth:`WatermarkScheme.set_stop_token`, for both channels."""
        super().set_stop_token(token_id)
        self.sketch_channel.set_stop_token(token_id)
        self.green_channel.set_stop_token(token_id)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Start both channels on a new batch."""
        self.sketch_channel.begin(batch_size, gen_length, prompt_ids, prompt_mask)
        self.green_channel.begin(batch_size, gen_length, prompt_ids, prompt_mask)
        if self.sampling_channel is not None:
            self.sampling_channel.begin(batch_size, gen_length, prompt_ids, prompt_mask)

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor | None:
        """The keyed-sampling channel's uniforms at the target rows, (B, K, V) float32
        (:meth:`AARGumbelScheme.sampling_uniforms`: keyed where the context is known and not yet keyed
        in the text, the sampler's noise elsewhere); None under ``sampling: free``."""
        return None if self.sampling_channel is None else self.sampling_channel.sampling_uniforms(step)

    def steers_order(self, temperature: float) -> bool:
        """The sketch channel's order rule (:meth:`GlobalSketchScheme.steers_order`)."""
        return self.sketch_channel.steers_order(temperature)

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """The sketch channel's priority (B, K) float32 (:meth:`GlobalSketchScheme.order_priority`)."""
        return self.sketch_channel.order_priority(step, x0, confidence)

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """The two-channel tilt of the module doc at the target rows: (B, K, V) float32.

        The green gradient ∂J/∂p (on its top-k candidates) is computed from the untilted marginals
        first; the sketch channel then tilts the target rows (in place, eq. 7 of the seed paper) and
        the green term s·δ_g·∂J/∂p is added to them.
        """
        g = self.green_channel.params
        strength = g.delta / (len(g.context) + 1) if g.normalize else g.delta
        green = None
        if strength > 0.0 and bool(step.masked.any()):
            t, grad = self.green_channel.candidate_gradient(step)  # (B, G, k) each, untilted marginals
            m = step.marginals
            green = (m.at_targets(t), strength * m.at_targets(grad))  # (B, K, k) each
        self.sketch_channel.coverage = None
        logits = self.sketch_channel.process_logits(step)  # (B, K, V)
        if green is not None:
            idx, val = green
            c, full = self.sketch_channel.coverage, self.sketch_channel.params.coverage_full
            if self.params.handover and full is not None and c is not None:  # the green share 1 − min(1, c/c*)
                val = val * (1.0 - (c / full).clamp(max=1.0)).to(val.dtype)[:, None, None]
            logits.scatter_add_(-1, idx, val.to(logits.dtype))
        return logits

    # ------------------------------------------------------------------ detection
    def channel_scores(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[SchemeScores, ...]:
        """Each channel's own scores for ids (B, N) int64 with valid (B, N) bool: (sketch, green), and
        the keyed-sampling channel's third under ``sampling: keyed``.

        Raises:
            InputError: ids outside [0, V).
        """
        out = (self.sketch_channel.score_ids(ids, valid), self.green_channel.score_ids(ids, valid))
        if self.sampling_channel is not None:
            out += (self.sampling_channel.score_ids(ids, valid),)
        return out

    def channel_weights(self, sketch: SchemeScores, valid: torch.Tensor) -> list[float | torch.Tensor]:
        """Each channel's share of α, in :meth:`channel_scores`' order: (1 − a)·w, 1 − w and a·w,
        w = :meth:`sketch_weight`, a = ``sampling_weight`` (no third share and a = 0 under
        ``sampling: free``). Floats or (B,) float64 tensors.

        Args:
            sketch: the sketch channel's scores (its ``n_scored`` n_d, (B,)).
            valid: (B, N) bool, the text's tokens.
        """
        n_tokens = torch.from_numpy(np.count_nonzero(valid.cpu().numpy(), axis=1))
        w = self.sketch_weight(sketch.n_scored.cpu(), n_tokens)
        a = self.params.sampling_weight if self.sampling_channel is not None else 0.0
        out = [(1.0 - a) * w, 1.0 - w]
        return out + [a * w] if self.sampling_channel is not None else out

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Weighted Bonferroni over the channels (module doc; :meth:`channel_weights`): p (B,) float64,
        score Φ⁻¹(1 − p), z of the channel with the smallest p_j/w_j, n_scored the sketch's.

        Raises:
            InputError: ids outside [0, V).
        """
        chans = self.channel_scores(ids, valid)
        s = chans[0]
        # (B,) arithmetic in numpy: a small torch op after the channels' threads waits on torch's pool
        ps = [c.p_value.double().cpu() for c in chans]
        weights = self.channel_weights(s, valid)
        pv = combine_weighted_bonferroni(ps, weights)
        from scipy.special import ndtri

        # Φ⁻¹(1 − p), finite at both ends: p = 1 (neither channel has evidence, e.g. a Bonferroni
        # bound above 1) reads as the largest double below 1, not −∞ (a calibrated threshold must be finite)
        score = torch.from_numpy(-ndtri(np.clip(pv.numpy(), 1e-300, np.nextafter(1.0, 0.0))))
        # z of the channel that decides: the smallest p_j / w_j
        ratios = np.stack([np.broadcast_to(p.numpy() / np.asarray(wj.numpy() if torch.is_tensor(wj) else wj), p.shape)
                           for p, wj in zip(ps, weights)])  # (J, B)
        zs = np.stack([c.z.double().cpu().numpy() for c in chans])  # (J, B)
        z = torch.from_numpy(np.take_along_axis(zs, np.argmin(np.where(np.isnan(ratios), np.inf, ratios), 0)[None], 0)[0])
        if not torch.is_tensor(weights[0]) and not isinstance(weights[0], np.ndarray):  # one w for every text
            rule = f"w = {self.params.weight:g}"
        else:
            f, c = self.params.weight_floor, self.sketch_channel.params.coverage_full
            rule = f"w = {f:g} + {1 - 2 * f:g}·min(1, coverage/{c:g}) per text"
        if len(chans) == 2:
            how = (f"weighted Bonferroni over two channels ({rule}): sketch [{chans[0].p_value_method}] and green "
                   f"[{chans[1].p_value_method}]")
        else:
            a = self.params.sampling_weight
            how = (f"weighted Bonferroni over three channels (sketch (1 − a)·w, keyed sampling a·w with a = {a:g}, "
                   f"green 1 − w; {rule}): sketch [{chans[0].p_value_method}], green [{chans[1].p_value_method}], "
                   f"keyed sampling [{chans[2].p_value_method}]")
        return SchemeScores(score, z, pv, s.n_scored.cpu(), how)

    def sketch_weight(self, n_distinct: torch.Tensor, n_tokens: torch.Tensor) -> float | torch.Tensor:
        """The sketch channel's share w of α per text (``weighting``, :class:`SketchGreenParams`).

        Args:
            n_distinct: (B,) int64, distinct kept tokens n_d of each text (the sketch's ``n_scored``).
            n_tokens: (B,) int64, tokens N of each text.

        Returns:
            the float ``weight`` under ``weighting: fixed`` (or without the sketch's ``coverage_full``);
            else (B,) float64 w = f + (1 − 2f)·min(1, (n_d/N)/c*), in [f, 1 − f].
        """
        p, full = self.params, self.sketch_channel.params.coverage_full
        if p.weighting == "fixed" or full is None:
            return float(p.weight)
        cov = n_distinct.cpu().numpy().astype(np.float64) / np.maximum(n_tokens.cpu().numpy(), 1)
        return torch.from_numpy(p.weight_floor + (1.0 - 2.0 * p.weight_floor) * np.minimum(cov / full, 1.0))

    def attribute(self, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, top: int = 5, chunk: int = 8192,
                  bank: Any = None) -> Any:
        """Rank K key-family members for each text through the sketch channel
        (:meth:`GlobalSketchScheme.attribute`: the members are the sketch channel's directions
        u^{(i)}, ``sketch: {direction_index: i}``; the green channel is the same for every member and
        carries no attribution). Returns its :class:`~sketchwm_builtin.global_sketch.Attribution`
        (indices, scores, z, p-values (B, top)).

        Raises:
            InputError: n_keys < 1, a bank with fewer than ``n_keys`` members, ids outside [0, V).
        """
        return self.sketch_channel.attribute(ids, valid, n_keys, top=top, chunk=chunk, bank=bank)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Φ⁻¹(1 − α) on ``score`` (⇔ p ≤ α)."""
        return normal_isf(alpha)

    def describe(self) -> dict[str, Any]:
        """Config plus the sketch channel's resolved prior."""
        d = super().describe()
        d["resolved_prior"] = self.sketch_channel.prior_desc
        return d
