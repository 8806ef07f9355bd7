"""``global-sketch-green`` (plugins/sketchwm_builtin/sketch_green.py): the two-channel tilt is the sum
of the channels' own tilts at the untilted marginals, the p-value is Bonferroni over the channels'
own p-values, each channel is the scheme it names (the sketch under the key, the green lists under
the domain-separated subkey), and the combined p-value holds its level over many keys on text
written without them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sketchwm.components import DenoiseStep, Marginals
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm_builtin.sketch_green import GREEN_DOMAIN, SAMPLING_DOMAIN

V = 120
MASK = 4
SKETCH = {"prior": {"source": "uniform"}, "sketch": {"name": "count-sketch", "params": {"d": 4, "w": 64, "counting": "presence"}}}
#: the sketch channel without the coverage handover (fixed shares of α and of the tilt), as ``global-sketch``
#: itself: a partial ``sketch`` dict otherwise keeps the default's c* = 0.25 and sampled marginals
FIXED = {"coverage_full": None, "marginals": "model"}

pytestmark = pytest.mark.usefixtures("one_thread")


#: the sketch channel as the plain global sketch under the key itself (its key family:
#: tests/test_shared_family.py), so each channel can be compared with the scheme it is
ONE = {"members": 1}


def _key(i: int) -> WatermarkKey:
    return WatermarkKey(i.to_bytes(4, "big") * 8)


def _state(B: int, G: int, seed: int) -> DenoiseStep:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn((B, G, V), generator=g) * 1.5
    logits[..., :5] = float("-inf")  # special tokens, as the engine bans them
    masked = torch.rand((B, G), generator=g) < 0.6
    sampled = torch.distributions.Categorical(logits=logits).sample()
    tokens = torch.where(masked, torch.full_like(sampled, MASK), sampled)
    return DenoiseStep(step=0, total_steps=4, tokens=tokens, masked=masked, marginals=Marginals.canvas(logits, masked),
                       prompt_ids=torch.tensor([[9, 17]] * B), prompt_mask=torch.ones(B, 2, dtype=torch.bool),
                       block=(0, G), mask_token_id=MASK, generator=torch.Generator().manual_seed(seed))


def _schemes(scale: float, key: WatermarkKey):
    reg = get_registry()
    both = reg.create("scheme", "global-sketch-green", {"sketch": {**SKETCH, **FIXED, "delta": 0.75}, "green": {"delta": 1.5},
                                                        "scale": scale, "sampling": "free", "family": ONE}, key, V)
    sketch = reg.create("scheme", "global-sketch", {**SKETCH, "delta": 0.75 * scale}, key, V)
    green = reg.create("scheme", "red-green-dlm", {"delta": 1.5 * scale}, key.subkey(GREEN_DOMAIN), V)
    return both, sketch, green


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_tilt_is_the_sum_of_the_channels_tilts(scale):
    """At every target row: combined logits − l = (sketch's tilted logits − l) + (red-green-dlm's − l),
    both channels at the same untilted marginals, each at s times its own strength."""
    both, sketch, green = _schemes(scale, _key(1))
    step = _state(2, 10, seed=3)
    raw = step.marginals.logits.clone()

    def fresh() -> DenoiseStep:
        return dataclasses.replace(step, marginals=Marginals.canvas(raw.clone(), step.masked))

    for s in (both, sketch, green):
        s.begin(2, 10, step.prompt_ids, step.prompt_mask)
    got = both.process_logits(fresh())
    d_sketch = sketch.process_logits(fresh()) - raw
    d_green = green.process_logits(fresh()) - raw
    live = torch.isfinite(raw) & step.masked[..., None]
    assert bool((d_sketch[live].abs() > 1e-4).any()) and bool((d_green[live].abs() > 1e-4).any())  # both tilt
    assert torch.allclose((got - raw)[live], (d_sketch + d_green)[live], atol=1e-5)


def test_pvalue_is_bonferroni_over_the_channels_and_the_green_key_is_separate():
    """p = min(1, 2·min(p_sketch, p_green)) with each channel scored as the scheme it names; the
    green channel's lists are not red-green-dlm's under the same key."""
    key = _key(2)
    both, sketch, green = _schemes(1.0, key)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (64, 48), generator=g)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[:8, 40:] = False
    out = both.score_ids(ids, valid)
    ps, pg = sketch.score_ids(ids, valid).p_value.double(), green.score_ids(ids, valid).p_value.double()
    assert torch.allclose(out.p_value, torch.clamp(2 * torch.minimum(ps, pg), max=1.0), rtol=1e-12, atol=0)
    w8 = get_registry().create("scheme", "global-sketch-green", {"sketch": {**SKETCH, **FIXED, "delta": 0.75}, "green": {"delta": 1.5},
                                                                 "weight": 0.8, "sampling": "free", "family": ONE}, key,
                                V).score_ids(ids, valid).p_value
    assert torch.allclose(w8, torch.clamp(torch.minimum(ps / 0.8, pg / 0.2), max=1.0), rtol=1e-12, atol=0)
    plain = get_registry().create("scheme", "red-green-dlm", {}, key, V).score_ids(ids, valid).p_value.double()
    assert not torch.allclose(plain, pg)
    thr = both.analytic_threshold(0.01, 48)
    assert torch.equal(out.score >= thr, out.p_value <= 0.01)
    assert bool(torch.isfinite(out.score).all())  # p = 1 (bound above 1) still a finite score


def test_score_is_finite_when_the_bonferroni_bound_reaches_one():
    """A text whose combined p-value is 1 gets a finite score (calibration needs finite thresholds)."""
    both = _schemes(1.0, _key(4))[0]
    ids = torch.arange(5, 45)[:, None].expand(40, 40).contiguous()  # each row one token repeated: little evidence
    out = both.score_ids(ids, torch.ones_like(ids, dtype=torch.bool))
    one = out.p_value == 1.0  # a red pair and a sketch p-value above ½
    assert bool(one.any())
    assert bool(torch.isfinite(out.score).all()) and float(out.score[one].max()) < -5


def test_combined_pvalue_holds_its_level_over_keys():
    """Text independent of the key: over 200 keys × 40 texts the combined p-value's rate at α = 0.05
    is within binomial noise of at most α (the Bonferroni bound of two valid tests), and at least
    one channel is not trivially conservative (the rate is not zero)."""
    g = torch.Generator().manual_seed(5)
    mean = _rate_over_keys(torch.randint(5, V, (40, 64), generator=g), SKETCH, first_key=1000)
    assert 0.0 < mean <= 0.05 + 3 * (0.05 * 0.95 / (200 * 40)) ** 0.5, mean


def _rate_over_keys(ids: torch.Tensor, sketch: dict, first_key: int, n_keys: int = 200, alpha: float = 0.05,
                    sampling: str = "free") -> float:
    """Mean over ``n_keys`` keys of the fraction of ``ids`` (B, N) whose combined p-value is ≤ α."""
    valid = torch.ones_like(ids, dtype=torch.bool)
    rates = []
    for i in range(n_keys):
        both = get_registry().create("scheme", "global-sketch-green", {"sketch": sketch, "sampling": sampling},
                                     _key(first_key + i), V)
        rates.append(float((both.score_ids(ids, valid).p_value <= alpha).double().mean()))
    return sum(rates) / len(rates)


def test_generated_text_is_detected_and_reordering_keeps_the_sketch_channel(tiny):
    """On the tiny model: watermarked texts get small combined p-values; shuffling each text's tokens
    destroys the green contexts but the sketch channel still scores the same (order-invariant)."""
    from sketchwm.engine import MaskedDiffusionSampler

    reg = get_registry()
    both = reg.create("scheme", "global-sketch-green", {"sketch": {"prior": {"source": "uniform"}}}, _key(3),
                      tiny.vocab_size)
    sampler = MaskedDiffusionSampler(tiny, {"gen_length": 64, "block_length": 64, "steps": 32, "temperature": 1.0,
                                            "stop_at_eos": False}, both)
    out = sampler.generate(["the water", "a man said", "many new words", "we"] * 2, torch.Generator().manual_seed(0))
    ids = out.ids
    valid = torch.ones_like(ids, dtype=torch.bool)
    s, *_ = both.channel_scores(ids, valid)
    res = both.score_ids(ids, valid)
    assert float(res.p_value.median()) < 1e-3
    perm = torch.argsort(torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) + (~valid) * 2.0, dim=1)
    shuffled, vs = torch.gather(ids, 1, perm), torch.gather(valid, 1, perm)
    s2, *_ = both.channel_scores(shuffled, vs)
    assert torch.allclose(s2.p_value, s.p_value)


def test_coverage_scaled_tilt_is_the_plain_tilt_times_the_read_fraction():
    """``coverage_full`` c*: η_t × min(1, c/c*) with c = n̂/N, so the tilt (logit shift) is the plain
    one times that factor, n̂ the expected number of distinct kept tokens of eq. 5 (:meth:`_tilt_parts`)."""
    reg = get_registry()
    plain = reg.create("scheme", "global-sketch", SKETCH, _key(4), V)
    cov = reg.create("scheme", "global-sketch", {**SKETCH, "coverage_full": 1.0}, _key(4), V)
    step = _state(3, 16, seed=11)
    raw = step.marginals.logits.clone()
    outs = []
    for s in (plain, cov):
        s.begin(3, 16, step.prompt_ids, step.prompt_mask)
        outs.append(s.process_logits(dataclasses.replace(step, marginals=Marginals.canvas(raw.clone(), step.masked))) - raw)
    n_hat = plain._tilt_parts(Marginals.canvas(raw.clone(), step.masked), step.tokens, step.masked).n_hat  # (B,)
    c = (n_hat / 16 / 1.0).clamp(max=1.0)
    live = torch.isfinite(raw) & step.masked[..., None]
    assert bool((c < 0.99).all()) and bool((outs[0][live].abs() > 1e-4).any())
    assert torch.allclose(outs[1][live], (outs[0] * c[:, None, None])[live], atol=1e-5)


def test_handover_gives_the_green_channel_the_rest_of_the_tilt():
    """With the sketch's ``coverage_full`` c* set: combined − l = (sketch's tilt, × min(1, c/c*)) +
    (1 − min(1, c/c*)) × (red-green-dlm's tilt), per text, c = n̂/N of the step."""
    reg = get_registry()
    key = _key(6)
    sk = {**SKETCH, "delta": 0.75, "coverage_full": 1.0}
    both = reg.create("scheme", "global-sketch-green", {"sketch": sk, "green": {"delta": 1.5}, "family": ONE}, key, V)
    sketch = reg.create("scheme", "global-sketch", sk, key, V)
    green = reg.create("scheme", "red-green-dlm", {"delta": 1.5}, key.subkey(GREEN_DOMAIN), V)
    step = _state(3, 12, seed=8)
    raw = step.marginals.logits.clone()
    outs = []
    for s in (both, sketch, green):
        s.begin(3, 12, step.prompt_ids, step.prompt_mask)
        outs.append(s.process_logits(dataclasses.replace(step, marginals=Marginals.canvas(raw.clone(), step.masked))) - raw)
    c = (sketch.coverage / 1.0).clamp(max=1.0)  # (B,)
    assert bool((c < 0.99).all()) and bool((c > 0.01).all())
    live = torch.isfinite(raw) & step.masked[..., None]
    want = outs[1] + (1.0 - c)[:, None, None] * outs[2]
    assert torch.allclose(outs[0][live], want[live], atol=1e-5)


def test_committed_coverage_counts_distinct_kept_committed_tokens():
    """``coverage_source: committed``: c = distinct kept tokens among the committed generated tokens
    over their number, per text; the expected n̂/N where fewer than 8 are committed."""
    sk = get_registry().create("scheme", "global-sketch", {**SKETCH, "coverage_full": 0.5, "coverage_source": "committed"},
                               _key(7), V)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(5, 40, (4, 20), generator=g)  # repeats: few distinct
    masked = torch.rand((4, 20), generator=g) < 0.4
    masked[3, 5:] = True  # text 3: 5 committed tokens, below 8
    expected = torch.tensor([0.11, 0.22, 0.33, 0.44])
    got = sk._committed_coverage(tokens, masked, expected)
    for b in range(3):
        committed = tokens[b][~masked[b]].tolist()
        assert abs(float(got[b]) - len(set(committed)) / len(committed)) < 1e-6
    assert abs(float(got[3]) - 0.44) < 1e-6


def _mixed_coverage_ids(seed: int) -> torch.Tensor:
    """(40, 64) ids: 20 diverse rows (uniform over the vocabulary) and 20 repetitive ones (3 tokens)."""
    g = torch.Generator().manual_seed(seed)
    diverse = torch.randint(5, V, (20, 64), generator=g)
    few = torch.randint(5, V, (20, 3), generator=g)
    repetitive = torch.gather(few, 1, torch.randint(0, 3, (20, 64), generator=g))
    return torch.cat([diverse, repetitive])


def test_coverage_weight_is_set_per_text_from_its_observed_coverage():
    """``weighting: coverage``: p = min(1, p_s/w, p_g/(1 − w)) with w = f + (1 − 2f)·min(1, (n_d/N)/c*) per
    text, n_d the sketch's distinct kept tokens; a repetitive text gives the green channel most of α, a
    diverse one the sketch; ``weighting: fixed`` keeps the one weight."""
    key = _key(8)
    sk = {**SKETCH, "delta": 0.75, "coverage_full": 0.25}
    reg = get_registry()
    both = reg.create("scheme", "global-sketch-green", {"sketch": sk, "weight_floor": 0.1, "sampling": "free"}, key, V)
    fixed = reg.create("scheme", "global-sketch-green", {"sketch": sk, "weighting": "fixed", "weight": 0.5,
                                                         "sampling": "free"}, key, V)
    ids = _mixed_coverage_ids(3)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[:4, 50:] = False
    s, g = both.channel_scores(ids, valid)
    cov = s.n_scored.double() / valid.sum(1).double()
    w = 0.1 + 0.8 * (cov / 0.25).clamp(max=1.0)
    assert float(w[:20].min()) > 0.7 and float(w[20:].max()) < 0.3  # diverse → sketch, repetitive → green
    ps, pg = s.p_value.double(), g.p_value.double()
    want = torch.clamp(torch.minimum(ps / w, pg / (1.0 - w)), max=1.0)
    assert torch.allclose(both.score_ids(ids, valid).p_value, want, rtol=1e-12, atol=0)
    assert torch.allclose(fixed.score_ids(ids, valid).p_value, torch.clamp(2 * torch.minimum(ps, pg), max=1.0),
                          rtol=1e-12, atol=0)
    assert "coverage" in both.score_ids(ids, valid).p_value_method


def test_coverage_weighted_pvalue_holds_its_level_over_keys():
    """Text independent of the key, half diverse and half repetitive (the weights differ per text): over
    200 keys × 40 texts the rate at α = 0.05 is within binomial noise of at most α, and not zero."""
    mean = _rate_over_keys(_mixed_coverage_ids(5), {**SKETCH, "coverage_full": 0.25}, first_key=3000)
    assert 0.0 < mean <= 0.05 + 3 * (0.05 * 0.95 / (200 * 40)) ** 0.5, mean


def test_weighted_bonferroni_rejects_weights_outside_the_open_interval():
    from sketchwm.multiple_testing import weighted_bonferroni

    p = torch.tensor([0.01, 0.2], dtype=torch.float64)
    w = torch.tensor([0.5, 1.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="weight"):
        weighted_bonferroni([p, p], [w, 1.0 - w])
    with pytest.raises(ValueError, match="weight"):
        weighted_bonferroni([p, p], [0.0, 1.0])
    half = torch.tensor([0.5, 0.5], dtype=torch.float64)
    w = torch.tensor([0.25, 0.5])
    got = weighted_bonferroni([p, half], [w, 1.0 - w])  # per text: min(p_s/w, p_g/(1 − w))
    assert torch.allclose(got, torch.tensor([0.04, 0.4], dtype=torch.float64))


def test_weighted_bonferroni_checks_its_weights():
    """J tests: p = min(1, min_j p_j/w_j); weights outside (0, 1), summing above 1, or one per p-value
    missing are refused."""
    from sketchwm.multiple_testing import weighted_bonferroni

    p = [torch.tensor([0.01, 0.3], dtype=torch.float64), torch.tensor([0.02, 0.3], dtype=torch.float64),
         torch.tensor([0.004, 0.3], dtype=torch.float64)]
    got = weighted_bonferroni(p, [0.4, 0.4, 0.2])
    assert torch.allclose(got, torch.tensor([0.02, 0.75], dtype=torch.float64))
    with pytest.raises(ValueError, match="sum to at most 1"):
        weighted_bonferroni(p, [0.5, 0.4, 0.2])
    with pytest.raises(ValueError, match="one weight per p-value"):
        weighted_bonferroni(p, [0.5, 0.5])
    with pytest.raises(ValueError, match="must lie in"):
        weighted_bonferroni(p[:2], [1.0, 0.5])


def test_keyed_sampling_channel_is_a_third_bonferroni_share():
    """``sampling: keyed``: p = min(1, p_s/((1 − a)w), p_g/(1 − w), p_k/(a·w)), p_k the
    aar-gumbel p-value under the domain-separated subkey; ``sampling: free`` (the default) has two channels."""
    key = _key(9)
    sk = {**SKETCH, "delta": 0.75, "coverage_full": 0.25}
    reg = get_registry()
    both = reg.create("scheme", "global-sketch-green", {"sketch": sk, "sampling_weight": 0.3, "sampling": "keyed"},
                      key, V)
    assert both.noise == "keyed" and both.sampling_channel is not None
    free = reg.create("scheme", "global-sketch-green", {"sketch": sk}, key, V)
    assert free.noise == "sampler" and free.sampling_channel is None and len(free.channel_scores(
        torch.randint(5, V, (2, 30)), torch.ones(2, 30, dtype=torch.bool))) == 2
    gumbel = reg.create("scheme", "aar-gumbel", {"repeats": "fresh"}, key.subkey(SAMPLING_DOMAIN), V)
    ids = _mixed_coverage_ids(4)
    valid = torch.ones_like(ids, dtype=torch.bool)
    s, g, k = both.channel_scores(ids, valid)
    assert torch.allclose(k.p_value.double(), gumbel.score_ids(ids, valid).p_value.double(), rtol=1e-12, atol=0)
    plain = reg.create("scheme", "aar-gumbel", {}, key, V).score_ids(ids, valid).p_value.double()
    assert not torch.allclose(plain, k.p_value.double())  # the subkey, not the key itself
    w = 0.1 + 0.8 * (s.n_scored.double() / 64 / 0.25).clamp(max=1.0)
    want = torch.stack([s.p_value.double() / (0.7 * w), g.p_value.double() / (1 - w),
                        k.p_value.double() / (0.3 * w)]).min(0).values.clamp(max=1.0)
    out = both.score_ids(ids, valid)
    assert torch.allclose(out.p_value, want, rtol=1e-12, atol=0)
    assert "three channels" in out.p_value_method


def test_three_channel_pvalue_holds_its_level_over_keys():
    """The three channels of ``sampling: keyed`` on text independent of the key (half diverse, half
    repetitive): over 200 keys × 40 texts the rate at α = 0.05 is within binomial noise of at most α,
    and not zero."""
    mean = _rate_over_keys(_mixed_coverage_ids(6), {**SKETCH, "coverage_full": 0.25}, first_key=5000, sampling="keyed")
    assert 0.0 < mean <= 0.05 + 3 * (0.05 * 0.95 / (200 * 40)) ** 0.5, mean


def _keyed_generation(tiny, params: dict, seed: int = 0):
    from sketchwm.engine import MaskedDiffusionSampler

    scheme = get_registry().create("scheme", "global-sketch-green",
                                   {"sketch": {"prior": {"source": "uniform"}}, "sampling": "keyed", **params},
                                   _key(10), tiny.vocab_size)
    sampler = MaskedDiffusionSampler(tiny, {"gen_length": 48, "block_length": 48, "steps": 24, "temperature": 1.0,
                                            "stop_at_eos": False}, scheme)
    out = sampler.generate(["the water", "a man said", "many new words", "we"] * 3, torch.Generator().manual_seed(seed))
    return scheme, out.ids


def test_keyed_sampling_marks_generated_text_and_keys_each_context_once(tiny):
    """On the tiny model at scale 0 (no tilt): the keyed-sampling channel alone detects the text (its
    p-value is small), the same generation with the sampler's noise is not detected by it; with
    ``repeats: fresh`` no two committed positions of a text were keyed with the same context hash,
    while ``repeats: keyed`` reuses rows (the tiny model's text repeats contexts)."""
    scheme, ids = _keyed_generation(tiny, {"scale": 0.0})
    valid = torch.ones_like(ids, dtype=torch.bool)
    k = scheme.channel_scores(ids, valid)[2]
    assert float(k.p_value.median()) < 1e-3
    record = scheme.sampling_channel._keyed  # (B, G): hash each committed position was keyed with, −1 = fresh noise
    for row in record:
        used = row[row >= 0]
        assert used.numel() > 5 and used.unique().numel() == used.numel()
    free, ids_free = _keyed_generation(tiny, {"scale": 0.0, "sampling": "free"})
    assert float(scheme.channel_scores(ids_free, valid)[2].p_value.median()) > 0.05
    again, _ = _keyed_generation(tiny, {"scale": 0.0, "keyed": {"repeats": "keyed"}})
    assert again.sampling_channel._keyed is None  # the record is kept only for repeats: fresh
    ctx = ids[:, :-1]  # context {−1}: the previous token
    assert any(r.unique().numel() < r.numel() for r in ctx)  # repeated contexts exist, so the test above can fail


def test_user_loop_runs_the_default_tilt_alone_with_a_warning(tiny):
    """A logits hook cannot supply keyed noise: the default (the sampler's noise) is accepted silently,
    ``sampling: keyed`` with a warning (it tilts as the engine would); a scheme that is nothing without
    its noise (aar-gumbel) is refused."""
    import warnings

    from sketchwm.errors import ConfigError
    from sketchwm.userloop import LogitsTilter

    def make(**over):
        return get_registry().create("scheme", "global-sketch-green", {"sketch": {"prior": {"source": "uniform"}}, **over},
                                     _key(11), tiny.vocab_size)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LogitsTilter(make(), tiny, steps=8)
    with pytest.warns(UserWarning, match="keyed sampling noise"):
        LogitsTilter(make(sampling="keyed"), tiny, steps=8)
    with pytest.raises(ConfigError, match="replaces the sampling noise"):
        LogitsTilter(get_registry().create("scheme", "aar-gumbel", {}, _key(11), tiny.vocab_size), tiny, steps=8)


def test_keyed_channel_scores_the_sketchs_kept_tokens_only(tmp_path):
    """``keyed_scores: kept`` (default): the keyed channel scores the distinct (context, token) pairs whose
    token the sketch keeps (not among its ``exclude_top`` most frequent prior tokens); ``all`` scores
    every pair, as aar-gumbel does."""
    import numpy as np

    counts = np.ones(V)
    counts[5:25] = 1e4  # 20 frequent tokens: the sketch's exclude_top 20 drops them
    np.save(tmp_path / "prior.npy", counts)
    sk = {"prior": {"source": "file", "path": str(tmp_path / "prior.npy")},
          "sketch": {"name": "count-sketch", "params": {"d": 4, "w": 64, "counting": "presence", "exclude_top": 20}}}
    key = _key(12)
    reg = get_registry()
    kept = reg.create("scheme", "global-sketch-green", {"sketch": sk, "sampling": "keyed"}, key, V)
    every = reg.create("scheme", "global-sketch-green", {"sketch": sk, "keyed_scores": "all", "sampling": "keyed"}, key, V)
    assert int(kept.sketch_channel.sketch.keep[5:25].sum()) == 0 and bool(kept.sketch_channel.sketch.keep[25:].all())
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, V, (30, 40), generator=g)
    ids[0] = torch.randint(5, 25, (40,), generator=g)  # only excluded tokens: nothing to score
    valid = torch.ones_like(ids, dtype=torch.bool)
    k_kept, k_all = kept.channel_scores(ids, valid)[2], every.channel_scores(ids, valid)[2]
    plain = reg.create("scheme", "aar-gumbel", {"repeats": "fresh"}, key.subkey(SAMPLING_DOMAIN), V).score_ids(ids, valid)
    assert torch.equal(k_all.n_scored, plain.n_scored)
    for b in range(ids.shape[0]):
        pairs = {(int(ids[b, i - 1]), int(ids[b, i])) for i in range(1, ids.shape[1]) if int(ids[b, i]) >= 25}
        assert int(k_kept.n_scored[b]) == len(pairs)
    assert int(k_kept.n_scored[0]) == 0 and int(k_all.n_scored[0]) > 0


def test_user_loop_draws_its_members_from_a_given_generator(tiny):
    """``LogitsTilter(generator=...)``: the default's key-family member of each text is drawn from it, so
    two loops seeded alike tilt alike and draw the same members; without one the draw is fresh."""
    from sketchwm.userloop import LogitsTilter

    def tilted(seed):
        scheme = get_registry().create("scheme", "global-sketch-green", {"sketch": {"prior": {"source": "uniform"}}},
                                       _key(13), tiny.vocab_size)
        tilt = LogitsTilter(scheme, tiny, steps=4, generator=None if seed is None else torch.Generator().manual_seed(seed))
        g = torch.Generator().manual_seed(0)
        x = torch.cat([torch.randint(5, tiny.vocab_size, (6, 3), generator=g),
                       torch.full((6, 8), tiny.mask_token_id)], 1)  # (B, P + G): 6 texts, 8 masked positions
        logits = torch.randn(6, 11, tiny.vocab_size, generator=g)
        return tilt(logits, x), scheme.sketch_channel.drawn.clone()

    (a, da), (b, db), (_, dc) = tilted(5), tilted(5), tilted(6)
    assert torch.equal(a, b) and torch.equal(da, db)
    assert not torch.equal(da, dc)  # another seed draws other members (16 members, 6 texts)


def test_a_partial_channel_dict_keeps_the_defaults_other_fields():
    """{"sketch": {"prior": ...}} changes the prior only: δ 0.75, c* = 0.25 and sampled marginals stay (the
    scheme keeps its coverage handover and weighting); a field given explicitly, None included, wins."""
    from sketchwm_builtin.sketch_green import SketchGreenParams

    default = SketchGreenParams()
    p = SketchGreenParams.model_validate({"sketch": {"prior": {"source": "uniform"}}, "green": {"gamma": 0.5}})
    assert (p.sketch.delta, p.sketch.coverage_full, p.sketch.marginals) == (0.75, 0.25, "sampled")
    assert p.sketch.prior.source == "uniform" and p.green.delta == default.green.delta == 2.0 and p.green.gamma == 0.5
    fixed = SketchGreenParams.model_validate({"sketch": {"coverage_full": None, "delta": 0.5}})
    assert (fixed.sketch.coverage_full, fixed.sketch.delta, fixed.sketch.marginals) == (None, 0.5, "sampled")
    scheme = get_registry().create("scheme", "global-sketch-green", {"sketch": {"prior": {"source": "uniform"}}}, _key(5), V)
    assert not scheme.fixed_weight and "min(1, coverage/0.25)" in scheme.weight_rule()
    assert SketchGreenParams.model_validate(default.model_dump(mode="json")) == default  # a dump reads back the same


@pytest.mark.parametrize("coverage_full", [0.25, 1.0])
def test_logits_tilter_writes_through_an_owned_output_as_it_tilted_a_copy(tiny, coverage_full, monkeypatch):
    """LogitsTilter gives the scheme the rows' copy to read and its own buffer to write (Marginals.out), so
    the default skips its green candidates where they take no share: the tilted logits equal those of
    tilting the copy in place (no output buffer), with the green lists taking no share (c* = 0.25 on
    flat logits) and a share (c* = 1), with and without a prompt."""
    from sketchwm.userloop import LogitsTilter

    params = {"sketch": {"prior": {"source": "uniform"}, "coverage_full": coverage_full}}
    for P in (0, 3):
        outs = []
        for owned in (True, False):
            scheme = get_registry().create("scheme", "global-sketch-green", params, _key(6), tiny.vocab_size)
            tilter = LogitsTilter(scheme, tiny, steps=4, generator=torch.Generator().manual_seed(0))
            x = torch.full((2, P + 12), tiny.mask_token_id)
            x[:, :P], x[:, P + 3] = 5, 9
            logits = 3 * torch.randn(2, P + 12, tiny.vocab_size, generator=torch.Generator().manual_seed(1))
            with monkeypatch.context() as m:
                if not owned:  # the canvas without an output buffer: the scheme tilts the copy in place
                    canvas = Marginals.canvas
                    m.setattr(Marginals, "canvas", classmethod(lambda cls, lg, mk, out=None: canvas.__func__(cls, lg, mk)))
                outs.append([tilter(logits, x, step=s) for s in range(2)])
        assert all(torch.equal(a, b) for a, b in zip(*outs)), P
        assert not torch.equal(outs[0][0], logits)  # it tilted
