"""``global-sketch-green``: the global sketch and a context-keyed green list on one text.

The default scheme (:data:`sketchwm.config.DEFAULT_SCHEME`): a :class:`~sketchwm.channels.CombinedScheme`
of two channels (a third, keyed sampling, under ``sampling: keyed``), each a registered scheme under
its own key.

* ``sketch``: the global sketch of the seed paper as a key family with shared hashes
  (:class:`~sketchwm_builtin.key_family.GlobalSketchFamilyScheme`, ``hashes: shared``, K = 16 members
  by default; ``family: {members: 1}`` gives the single-key :class:`GlobalSketchScheme`
  under the key itself): each text is tilted along one member's direction u^{(i)}, drawn at random
  per text (Aremu et al. 2025, arXiv 2507.07871), by the exponential tilt of eq. 7 along the residual
  gradient of the expected sketch (eq. 5-6), its step size η_t scaled by min(1, c/c*), c = n̂/N the
  expected coverage (distinct kept tokens per generated position, eq. 5's n̂) of the marginals tokens
  are drawn from and c* its ``coverage_full``. Tested by each member's fixed-key background null,
  Bonferroni over the members and the spread test (the evidence must favour one member, as a genuine
  text's does and a thief's count over many texts does not). It also steers the order under greedy
  decoding.
* ``green``: a context-keyed green list (Kirchenbauer et al. 2023, "A Watermark for Large Language
  Models"; for masked diffusion LMs Gloaguen et al. 2025, arXiv 2509.24368: :class:`RedGreenDLMScheme`
  under ``key.subkey(GREEN_DOMAIN)``): the logit increment δ_g·∂J/∂p along the gradient of the
  expected green score J, read at the untilted marginals, times the handover share 1 − min(1, c/c*).
  Tested by the exact binomial tail of the green count over distinct (context, token) pairs.
* ``keyed-sampling`` (``sampling: keyed`` only): Gumbel-max sampling with uniforms keyed on each
  token's context (Aaronson 2022; Kuditipudi et al. 2023, arXiv 2307.15593: :class:`AARGumbelScheme` under
  ``key.subkey(SAMPLING_DOMAIN)``, each context hash keyed at most once per text), which leaves the
  tilted marginals unchanged over keys. Tested by the exact Gamma(n, 1) tail of Aaronson's score over
  the distinct pairs whose token the sketch keeps.

Embedding: p̃_i(v) ∝ p_i(v)·exp(s·η_t·m·a(v) + s·δ_g·(1 − m)·∂J/∂p_i(v)), m = min(1, c/c*),
s = ``scale``: the two tilts share one budget per text, the sketch taking it where the sampled
marginals leave many distinct kept tokens to read, the green lists where they leave few (low
temperature, repetitive text). Tokens are drawn from p̃ with the sampler's noise (``sampling: free``)
or the keyed noise (``sampling: keyed``).

Detection: p = min(1, p_s/((1 − a)·w), p_g/(1 − w), p_k/(a·w)), the weighted Bonferroni bound
(:func:`sketchwm.multiple_testing.weighted_bonferroni`), a = ``sampling_weight`` (a = 0 and no p_k
term without keyed sampling), w = f + (1 − 2f)·
min(1, ĉ/c*) per text from its observed coverage ĉ = n_d/N (distinct kept tokens per token),
f = ``weight_floor``. P(p ≤ α) ≤ α on text written without the key whenever each channel's p-value is
valid given ĉ, under any dependence between the channels (per-text weights: Bourgon, Gentleman & Huber
2010). ``score`` = Φ⁻¹(1 − p). What each channel's null promises for one fixed key, and the
measurements behind the defaults, are in docs/statistics.md ("The p-value of the default").

Examples:
    >>> from sketchwm.keys import WatermarkKey
    >>> from sketchwm.registry import get_registry
    >>> scheme = get_registry().create("scheme", "global-sketch-green", {"sketch": {"prior": {"source": "uniform"}}},
    ...                                WatermarkKey(bytes(32)), 1000)
    >>> [c.name for c in scheme.channels]
    ['sketch', 'green']
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from sketchwm.channels import Channel, CombinedScheme, Tilt
from sketchwm.components import SchemeScores, Strength
from sketchwm.config import StrictModel
from sketchwm_baselines.aar_gumbel import AARGumbelParams, AARGumbelScheme
from sketchwm_baselines.red_green_dlm import RedGreenDLMParams, RedGreenDLMScheme

from .global_sketch import GlobalSketchParams, GlobalSketchScheme
from .key_family import FamilyTestParams, GlobalSketchFamilyScheme

__all__ = ["SketchGreenParams", "SketchGreenScheme", "GREEN_DOMAIN", "SAMPLING_DOMAIN"]

#: domain of the green channel's key: ``key.subkey(GREEN_DOMAIN)``
GREEN_DOMAIN = "global-sketch-green/green"
#: domain of the keyed-sampling channel's key: ``key.subkey(SAMPLING_DOMAIN)``
SAMPLING_DOMAIN = "global-sketch-green/sampling"


def channel_params(model: StrictModel, min_tokens: int, **over: Any) -> dict:
    """A channel's params as a dict: ``model`` dumped, the scheme's ``min_tokens`` and the ``over`` fields."""
    return {**model.model_dump(mode="json"), "min_tokens": min_tokens, **over}


def sketch_channel(family: FamilyTestParams, sketch: dict, key: Any, vocab_size: int, device: Any = "cpu",
                   **build: Any) -> GlobalSketchScheme | GlobalSketchFamilyScheme:
    """The default's sketch channel: the global sketch with params ``sketch`` (a dict of
    :class:`GlobalSketchParams`) under ``key`` itself when ``family.members`` is 1, else the shared-hash
    key family of :mod:`sketchwm_builtin.key_family` with ``family``'s members and tests; ``build``:
    ``registry`` and ``tokenizer_fingerprint``.

    Raises:
        ConfigError: bad params (as the schemes raise them).
    """
    if family.members == 1:
        return GlobalSketchScheme(sketch, key, vocab_size, device, **build)
    return GlobalSketchFamilyScheme({**family.model_dump(), "member": sketch, "hashes": "shared",
                                     "min_tokens": sketch.get("min_tokens", 16)}, key, vocab_size, device, **build)


class SketchGreenParams(StrictModel):
    """Parameters of ``global-sketch-green``.

    Attributes:
        sketch: the sketch channel's :class:`GlobalSketchParams`. Default: ``global-sketch``'s defaults
            (δ 0.75) with ``coverage_full`` c* = 0.25 (the sketch keeps its full tilt where at least a
            quarter of the positions are expected to be new distinct kept tokens) and ``marginals:
            sampled`` (c read from softmax(l/T), the distribution tokens are drawn from).
        family: the sketch channel's key family (:class:`FamilyTestParams`; default ``global-sketch-family``'s
            test: K = 16 members, Bonferroni over them and the studentised spread test with M = 32 decoy
            keys, scored only on texts whose family p-value can be below 1); ``spread: normal`` (the
            unit-noise test) has more power on texts of 32 tokens and lets a generation spoofer through
            (docs/forgery.md); ``members: 1`` is the single-key sketch, which a thief who counts words
            in 50 texts forges.
        green: the green channel's :class:`RedGreenDLMParams` (context {−1}, SumHash, γ = 0.25, both
            gradient terms); ``delta`` δ_g ≥ 0 is its logit shift at s = 1 (default 2).
        scale: s ≥ 0, the strength knob (default 1): multiplies the sketch's δ and δ_g, so a sweep of s
            moves along one ray of the two-strength plane; s = 0 leaves keyed sampling alone.
        handover: the green channel's tilt per text is δ_g·(1 − min(1, c/c*)) (default True; needs the
            sketch's ``coverage_full``): the two tilts share one budget. False: δ_g at every step.
        weighting: how the sketch's share w of α is set. ``coverage`` (default): per text,
            w = f + (1 − 2f)·min(1, ĉ/c*) (module doc; needs ``coverage_full``, else ``fixed``).
            ``fixed``: w = ``weight`` for every text.
        weight: w ∈ (0, 1) under ``weighting: fixed`` (default 0.5).
        weight_floor: f ∈ (0, 0.5], the least share of α the green channel, and the sketch and keyed
            channels together, keep under ``coverage`` weighting (default 0.1: a text whose coverage an
            adversary moves, e.g. by flooding one token, is still tested by each at level ≥ α/10).
        sampling: ``free`` (default): the sampler's own noise draws the tokens (two channels, ``sketch``
            and ``green``); ``keyed``: a third channel, keyed sampling, draws them. Keyed noise under one
            fixed key is the same for every sample of a prompt, so samples of one prompt share tokens
            where the context repeats (the first generated token above all) and a thief who counts
            (context, token) pairs learns it; the default leaves it off.
        keyed: the keyed-sampling channel's :class:`AARGumbelParams` (default context {−1},
            ``repeats: fresh``: a context hash is keyed at most once per text).
        keyed_scores: the pairs the keyed channel's test scores: ``kept`` (default) those whose token
            the sketch keeps (not among its ``exclude_top`` most frequent prior tokens, whose pairs recur
            across a domain's texts and shift one fixed key's score); ``all``: every distinct pair.
        sampling_weight: a ∈ (0, 1), the keyed channel's part of the sketch's share w (default 0.2): the
            sketch is tested at (1 − a)·w·α, the keyed channel at a·w·α, the green lists at (1 − w)·α.
        min_tokens: shortest text the detector accepts, in tokens (default 16, ≥ 1).
    """

    sketch: GlobalSketchParams = GlobalSketchParams(delta=0.75, coverage_full=0.25, marginals="sampled")
    family: FamilyTestParams = FamilyTestParams()
    green: RedGreenDLMParams = RedGreenDLMParams(delta=2.0)
    scale: float = Field(1.0, ge=0)
    handover: bool = True
    weighting: Literal["coverage", "fixed"] = "coverage"
    weight: float = Field(0.5, gt=0, lt=1)
    weight_floor: float = Field(0.1, gt=0, le=0.5)
    sampling: Literal["keyed", "free"] = "free"
    keyed: AARGumbelParams = AARGumbelParams(repeats="fresh")
    keyed_scores: Literal["kept", "all"] = "kept"
    sampling_weight: float = Field(0.2, gt=0, lt=1)
    min_tokens: int = Field(16, ge=1)
    over_defaults = ("sketch", "green", "keyed")  # {"sketch": {"prior": ...}} keeps δ 0.75, c* 0.25, sampled marginals


class SketchGreenScheme(CombinedScheme):
    """The global sketch and a context-keyed green list on one text, optionally keyed sampling (module doc).

    Args:
        params: :class:`SketchGreenParams`.
        key: the :class:`sketchwm.keys.WatermarkKey`; the sketch channel uses it, the green and
            keyed-sampling channels its subkeys :data:`GREEN_DOMAIN` and :data:`SAMPLING_DOMAIN`.
        vocab_size: V.
        device: where tables live.
        registry, tokenizer_fingerprint: passed to the sketch channel (:class:`GlobalSketchScheme`).

    Attributes:
        channels: ``sketch``, ``green`` and, under ``sampling: keyed``, ``keyed-sampling``.
        sketch_channel, green_channel, sampling_channel: their schemes (``sampling_channel`` None
            under ``sampling: free``).
        noise_required: False: the tilt is a watermark without the keyed noise, so a user's own
            sampling loop (:class:`sketchwm.userloop.LogitsTilter`) may run the tilt alone.

    Raises:
        ConfigError: bad params (as the channels raise them).
    """

    name = "global-sketch-green"
    version = "4"  # bumped by every change of what a setting generates or detects
    Params = SketchGreenParams
    strength = Strength("scale", (0.25, 0.5, 1.0, 1.5, 2.0))  # s, both tilts' strengths; default 1
    noise_required = False

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu", registry: Any = None,
                 tokenizer_fingerprint: str | None = None):
        super().__init__(params, key, vocab_size, device)
        p = self.params
        cfg = partial(channel_params, min_tokens=p.min_tokens)
        self.sketch_channel = sketch_channel(p.family, cfg(p.sketch, delta=p.scale * p.sketch.delta), key, vocab_size,
                                             device, registry=registry, tokenizer_fingerprint=tokenizer_fingerprint)
        self.green_channel = RedGreenDLMScheme(cfg(p.green, delta=p.scale * p.green.delta), key.subkey(GREEN_DOMAIN),
                                               vocab_size, device)
        keep = self.sketch_channel.sketch.keep if p.keyed_scores == "kept" else None  # (V,) the sketch's kept tokens
        self.sampling_channel = None if p.sampling == "free" else AARGumbelScheme(
            cfg(p.keyed), key.subkey(SAMPLING_DOMAIN), vocab_size, device, scored_vocab=keep)
        self.fixed_weight = p.weighting == "fixed" or p.sketch.coverage_full is None  # one w for every text
        a = 0.0 if self.sampling_channel is None else p.sampling_weight
        w = self.sketch_weight  # the sketch's share of α per text, split with the keyed channel
        self.combine(Channel("sketch", self.sketch_channel, "rows", lambda s, n: (1.0 - a) * w(s, n), steers_order=True),
                     Channel("green", self.green_channel, "increment", lambda s, n: 1.0 - w(s, n), share=self.green_share),
                     Channel("keyed-sampling", self.sampling_channel, "noise", lambda s, n: a * w(s, n))
                     if self.sampling_channel is not None else None)
        self.prior_fingerprint, self.prior_desc = self.sketch_channel.prior_fingerprint, self.sketch_channel.prior_desc

    def green_share(self, sketch: Tilt) -> torch.Tensor | None:
        """The green channel's share of its tilt per text: 1 − min(1, c/c*) (B,) under ``handover``, c the
        sketch's coverage at the step; None (all of it) without the handover or a sketch tilt."""
        c, full = sketch.coverage, self.params.sketch.coverage_full
        handover = self.params.handover and full is not None and c is not None
        return 1.0 - (c / full).clamp(max=1.0) if handover else None

    def sketch_weight(self, scores: dict[str, SchemeScores], n_tokens: torch.Tensor) -> float | torch.Tensor:
        """The sketch's share w of α per text: the float ``weight`` under ``weighting: fixed`` (or without
        ``coverage_full``), else (B,) float64 f + (1 − 2f)·min(1, (n_d/N)/c*) ∈ [f, 1 − f], n_d the sketch's
        ``n_scored`` (distinct kept tokens) and N = ``n_tokens`` (B,) int64."""
        p, full = self.params, self.params.sketch.coverage_full
        if self.fixed_weight:
            return float(p.weight)
        cov = scores["sketch"].n_scored.cpu().numpy().astype(np.float64) / np.maximum(n_tokens.cpu().numpy(), 1)
        return torch.from_numpy(p.weight_floor + (1.0 - 2.0 * p.weight_floor) * np.minimum(cov / full, 1.0))

    def weight_rule(self) -> str:
        """The shares of α, for the p-value method."""
        p, c = self.params, self.params.sketch.coverage_full
        f, a = p.weight_floor, p.sampling_weight if self.sampling_channel is not None else 0.0
        w = f"{p.weight:g}" if self.fixed_weight else f"{f:g} + {1 - 2 * f:g}·min(1, coverage/{c:g}) per text"
        return f"sketch (1 − a)·w, green 1 − w, keyed sampling a·w; a = {a:g}, w = {w}"

    def attribute(self, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, **kw: Any) -> Any:
        """Rank K key-family members for each text through the sketch channel: ids (B, N) int64, valid
        (B, N) bool, and ``top``, ``chunk``, ``bank`` as :meth:`GlobalSketchScheme.attribute` (the green
        and keyed channels are the same for every member; with the sketch's own family, its members are
        direction indices 0..K − 1 of the family's shared key). Returns its
        :class:`~sketchwm_builtin.global_sketch.Attribution`.

        Raises:
            InputError: n_keys < 1, a bank with fewer than ``n_keys`` members, ids outside [0, V).
        """
        return self.sketch_channel.attribute(ids, valid, n_keys, **kw)

    def describe(self) -> dict[str, Any]:
        """Config plus the sketch channel's resolved prior."""
        return {**super().describe(), "resolved_prior": self.sketch_channel.prior_desc}
