"""The configuration of ``global-sketch``: :class:`GlobalSketchParams` and its token prior :class:`PriorSpec`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sketchwm.config import ComponentSpec, StrictModel

__all__ = ["GlobalSketchParams", "PriorSpec"]


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


class GlobalSketchParams(StrictModel):
    """Parameters of the global sketch watermark.

    Detection strength against distortion for ``delta`` and the score's ``gamma`` is measured by
    ``sketchwm bench run benchmarks/configs/tune_delta_gamma.yaml``; the greedy-decoding parameters
    by ``python benchmarks/greedy_order.py`` (docs/greedy-decoding.md).

    Attributes:
        sketch: registered sketch and its params (default Count-Sketch d = 4, w = 256, D = 1024,
            ``presence`` counting, the 300 most frequent prior tokens excluded).
        score: registered score function and params (default penalised score, eq. 2, γ = 0.05). The
            penalty's gradient −λĥ pushes down the tokens the text already holds many of (function
            words), which costs fluency as γ grows. With γ = 1 the analytic threshold of eq. 19 is
            unreachable below about 100 tokens (S_k ≤ d(2√N − γ√w) when no token repeats).
        delta: δ ≥ 0 in η_t = δ·√n̂·s(τ), the tilt strength (0 disables embedding; larger δ: higher
            z and a larger KL per token). Default 0.75; the benchmarks sweep 0.25 to 1
            (:attr:`GlobalSketchScheme.strength`).
        schedule: η_t schedule ``constant`` | ``late`` | ``ramp`` on the denoising time τ of each
            block (:meth:`GlobalSketchScheme.schedule_weight`). Default ``constant``.
        late_fraction: in (0, 1], for ``late``: η_t > 0 once τ ≤ ``late_fraction`` (the last
            fraction of the denoising of each block). Default 0.5.
        prior: token prior π_tok for sign balancing (eq. 4) and for the background null.
        direction_index: which member of the key family this key's direction is (default 0).
        null: the null hypothesis of the p-value. ``auto`` (default): ``background`` for the
            ``presence`` and ``capped`` sketches, ``key-randomised`` for ``count`` (the paper's).
            ``background``: the text is drawn independently of the key from a background token
            model (each kept token present independently with the probability the token prior gives
            for the text's length); the p-value holds for the one key the user holds
            (:mod:`sketchwm_builtin.global_sketch.null`). ``key-randomised``: the paper's null
            (Theorem 5.4), exact only on average over random keys; the score is then S_k and
            ``p_value`` picks the method.
        null_margin: β ≥ 0, the robustness margin of the background null in z units (default 0.5):
            the p-value is the exact tail P(T' ≥ T − β·σ) of the background law shifted up by β
            standard deviations, valid whenever the background model's mean for this key is off by
            at most β standard deviations (domain shift). ``python benchmarks/null_margin.py``
            prints the per-key spread of z on the shipped human text that β has to cover.
        null_dispersion: s > 0, the ``capped`` background null's burstiness: each count C_v of a
            text of n tokens is Beta-binomial(n, π_v·s, (1 − π_v)·s) (the Pólya / Dirichlet-compound
            count model of word burstiness; Church & Gale 1995, Madsen, Kauchak & Elkan 2005) instead
            of Binomial(n, π_v): same mean, variance larger by the factor 1 + (n − 1)/(s + 1).
            None (default): binomial. ``python benchmarks/fit_dispersion.py`` fits s on the shipped
            human text (``presence`` ignores it).
        p_value: p-value method under ``null="key-randomised"`` (default ``exact``: characteristic
            function + FFT).
        min_tokens: ≥ 1, the shortest text the detector accepts, in tokens of text (its length, not
            the number of distinct tokens the statistic scores, ``n_scored``). Default 16.
        tail_epsilon: ε in [0, 0.5) of the embedding step's tail linearisation (``presence``;
            default 10⁻³): tokens whose probability is below ε at every masked row use
            log(1 − p) ≈ −p in the expected sketch and 1/(1 − p) ≈ 1 in the tilt, so a moves by at
            most a relative ε/(1 − ε) (:mod:`sketchwm.marginal_sums`); the tokens above ε somewhere
            are computed exactly. 0 is the exact dense computation (docs/sampler-approximations.md).
        order: the unmasking order as a second channel (:meth:`GlobalSketchScheme.order_priority`).
            ``auto`` (default): under greedy decoding (T = 0) steer the order, together with the
            argmax tilt of ``greedy_tilt``; at T > 0 tilt only. ``steer``: steer at every
            temperature (at T > 0 together with the tilt of δ). ``off``: tilt only, with δ (at T = 0
            the sampler warns).
        greedy_tilt: ≥ 0, under greedy decoding with the order steered the marginals are also
            tilted (eq. 7) with δ·``greedy_tilt`` in place of δ: an argmax tilt, for models whose
            greedy text the order alone cannot change. At T = 0 a tilt changes a token only where it
            overturns the top-1 margin, so it needs a larger δ than sampling does. Default 4
            (δ·4 = 3 at the default δ); 0: steering alone, the model's own greedy tokens.
        greedy_margin: m > 0 in nats, or None: the argmax tilt may only pick a token whose
            log-probability is within m of the model's argmax (p ≥ e^{−m}·p_max), so it overturns
            only near-ties and each committed token keeps at least e^{−m} of the top token's
            probability. Default 4; None: no bound.
        coverage_full: c* in (0, 1], or None (default: off). η_t is also multiplied by
            min(1, c/c*), c = n̂/N the expected fraction of the N generated positions that the
            presence statistic reads (distinct kept tokens, n̂ of eq. 5): below the coverage c* the
            sketch spends its tilt in proportion to how much of the text it can read, so on
            repetitive or frequent-word text it tilts less. The last step's c per text is kept in
            :attr:`GlobalSketchScheme.coverage` (``global-sketch-green`` hands the rest of the tilt,
            1 − min(1, c/c*), to its green channel).
        coverage_source: how c is read. ``expected`` (default): n̂/N from the masked marginals
            (eq. 5). ``committed``: the committed text's own coverage, distinct kept tokens among
            the committed generated tokens over their number (the expected n̂/N until 8 are
            committed).
        marginals: which marginals the expected sketch (eq. 5) and its gradient (eq. 6) are taken
            at, and which one eq. 7 tilts. ``model`` (default): the model's softmax(l), tilted in
            logit space as l + η a before the sampler divides by its temperature T. ``sampled``:
            the marginals tokens are drawn from, q = softmax(l/T) (T > 0), tilted as
            q̃ ∝ q·exp(η a), i.e. l + T·η·a: at T < 1 the expected sketch then reads the sharpened
            marginals. Identical at T = 1, at T = 0 (greedy, no sampled marginals) and when the
            caller gives no temperature.
        objective: what the tilt ascends. ``score`` (default): ½S_k at the expected sketch, the
            paper's residual r = u_k − λĥ with presence's normaliser n̂ differentiated too (eq. 6,
            :mod:`sketchwm_builtin.global_sketch.embed`). ``statistic``: the expected background
            statistic E[T] = Σ_v c_k(v) ŵ_v, c_k(v) = ⟨u_k, φ_k(v)⟩, that the ``background``
            detector thresholds at a fixed length: ∂(½S)/∂ŵ_v is replaced by c_k(v)/√n̂ (no penalty
            and no normaliser term; the 1/√n̂ keeps δ on the scale of ``score``).
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
