"""One conformance suite for EVERY registered watermark scheme (global sketch and the baselines).

A scheme is tested the moment it is registered: it is parametrised over
``get_registry().names("scheme")``. Sizes are small so the file runs in well under two minutes:
tiny random BERT (vocabulary 120), 8 texts × 64 tokens, 32 denoising steps, temperature 1.

Properties (seeded; tolerances stated at each assertion):
  * round trip — watermarked texts get small p-values and exceed the threshold calibrated on
    unwatermarked texts;
  * the null — p-values of unwatermarked texts are roughly uniform (Kolmogorov-Smirnov);
  * reproducibility — the same seed and key give identical output;
  * errors — ids outside the vocabulary raise ``InputError``, an unknown param ``ConfigError``;
  * configs — ``Params`` round-trip through JSON.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.errors import ConfigError, InputError
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry

SCHEMES = get_registry().names("scheme")


pytestmark = pytest.mark.usefixtures("one_thread")

#: Scheme-specific params for the tiny model; everything else uses the scheme's defaults.
TEST_PARAMS: dict[str, dict] = {
    "global-sketch": {"prior": {"source": "uniform"}},  # no packaged counts for the tiny vocabulary
    "kth-exp-edit": {"key_len": 32, "n_permutations": 99},  # p-value resolution 0.01; short key: fast DP
}
#: Bound on the median watermarked p-value (64 tokens, default strength).
MEDIAN_P: dict[str, float] = {"kth-exp-edit": 1.5 / 100}  # permutation p-values cannot go below 1/(P+1)
DEFAULT_MEDIAN_P = 1e-3

SAMPLER = {"gen_length": 64, "block_length": 64, "steps": 32, "temperature": 1.0, "remasking": "random"}
PROMPTS = ["the water", "a man said", "people like to", "one day", "time", "many new words", "the first", "we can"]
KEY = WatermarkKey(b"conformance-suite-secret-key-0001")
OTHER_KEY = WatermarkKey(b"conformance-suite-secret-key-0002")


def make(name: str, vocab_size: int, key: WatermarkKey = KEY, **overrides):
    return get_registry().create("scheme", name, {**TEST_PARAMS.get(name, {}), **overrides}, key, vocab_size)


def _all_valid(ids: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(ids, dtype=torch.bool)


@pytest.fixture(scope="module")
def null_ids(tiny) -> torch.Tensor:
    """32 unwatermarked texts (no key at all), (32, 64) int64."""
    out = MaskedDiffusionSampler(tiny, SAMPLER).generate(PROMPTS * 4, torch.Generator().manual_seed(123))
    return out.ids


@pytest.fixture(scope="module")
def null_scores(tiny, null_ids):
    """name → the scheme's SchemeScores of :func:`null_ids` (computed once per scheme)."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = make(name, tiny.vocab_size).score_ids(null_ids, _all_valid(null_ids))
        return cache[name]

    return get


@pytest.mark.parametrize("name", SCHEMES)
def test_round_trip(name, tiny, null_scores):
    scheme = make(name, tiny.vocab_size)
    out = MaskedDiffusionSampler(tiny, SAMPLER, scheme).generate(PROMPTS, torch.Generator().manual_seed(1))
    assert out.ids.shape == (len(PROMPTS), SAMPLER["gen_length"])
    s = scheme.score_ids(out.ids, _all_valid(out.ids))
    B = len(PROMPTS)
    for field in (s.score, s.z, s.p_value):
        assert field.shape == (B,) and field.dtype == torch.float64
    assert s.n_scored.shape == (B,) and s.n_scored.dtype == torch.int64
    assert bool(((s.p_value >= 0) & (s.p_value <= 1)).all())
    assert isinstance(s.p_value_method, str) and s.p_value_method
    bound = MEDIAN_P.get(name, DEFAULT_MEDIAN_P)
    assert float(s.p_value.median()) < bound, s.p_value
    # calibrated threshold: the 95% quantile of the scores of 32 unwatermarked texts
    null = null_scores(name)
    tau = float(torch.quantile(null.score, 0.95))
    assert float((s.score > tau).double().mean()) >= 0.75, (s.score, tau)
    # the analytic threshold, where a scheme has one, is consistent with its p-values
    try:
        thr = scheme.analytic_threshold(0.01, SAMPLER["gen_length"])
    except NotImplementedError:
        return
    assert float((null.score >= thr).double().mean()) <= 0.1


@pytest.mark.parametrize("name", SCHEMES)
def test_null_p_values_roughly_uniform(name, null_scores):
    """Unwatermarked texts: the 32 p-values are valid, i.e. not stochastically smaller than U(0, 1):
    the one-sided KS test (empirical CDF above the uniform one) does not reject at 0.1%. Conservative
    p-values (the sketch's background null with its margin β) pass; anti-conservative ones fail."""
    s = null_scores(name)
    p = s.p_value.numpy()
    assert np.all((p >= 0) & (p <= 1))
    assert stats.kstest(p, "uniform", alternative="greater").pvalue > 1e-3, np.sort(p)
    assert float(s.p_value.min()) > 1e-4  # no spurious detection among 32 null texts


@pytest.mark.parametrize("name", SCHEMES)
def test_other_key_does_not_detect(name, tiny):
    """Text watermarked with one key is not detected with another (median p > 0.05)."""
    cfg = {**SAMPLER, "gen_length": 32, "block_length": 32, "steps": 16}
    out = MaskedDiffusionSampler(tiny, cfg, make(name, tiny.vocab_size)).generate(PROMPTS, torch.Generator().manual_seed(2))
    s = make(name, tiny.vocab_size, OTHER_KEY).score_ids(out.ids, _all_valid(out.ids))
    assert float(s.p_value.median()) > 0.05, s.p_value


@pytest.mark.parametrize("name", SCHEMES)
def test_same_seed_and_key_reproduce(name, tiny):
    cfg = {**SAMPLER, "gen_length": 16, "block_length": 16, "steps": 8}
    runs = [
        MaskedDiffusionSampler(tiny, cfg, make(name, tiny.vocab_size)).generate(PROMPTS[:2], torch.Generator().manual_seed(5)).ids
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("name", SCHEMES)
def test_out_of_vocabulary_ids_raise(name, tiny):
    scheme = make(name, tiny.vocab_size)
    ids = torch.randint(5, tiny.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    for bad in (tiny.vocab_size, -1):
        broken = ids.clone()
        broken[1, 3] = bad
        with pytest.raises(InputError):
            scheme.score_ids(broken, _all_valid(broken))


@pytest.mark.parametrize("name", SCHEMES)
def test_unknown_param_raises(name, tiny):
    with pytest.raises(ConfigError):
        make(name, tiny.vocab_size, no_such_param=1)


@pytest.mark.parametrize("name", SCHEMES)
def test_params_round_trip_json(name, tiny):
    scheme = make(name, tiny.vocab_size)
    d = scheme.describe()
    assert d["name"] == name
    again = type(scheme).parse_params(json.loads(json.dumps(d["params"])))
    assert again == scheme.params


ROW_SCHEMES = [n for n in SCHEMES if not get_registry().get("scheme", n).needs_all_marginals]


@pytest.mark.parametrize("name", ROW_SCHEMES)
def test_row_path_matches_full_path(name, tiny):
    """A scheme that declares ``needs_all_marginals = False`` gets (B, K, V) rows with random
    remasking; the texts must equal those of the full (B, G, V) path, which it gets when the flag
    is forced on. Context-keyed AAR draws its unkeyable-position noise in a different shape, so it
    is compared with position keying."""
    over = {"keying": "position"} if name == "aar-gumbel" else {}
    outs = []
    for full in (False, True):
        scheme = make(name, tiny.vocab_size, **over)
        scheme.needs_all_marginals = full
        out = MaskedDiffusionSampler(tiny, SAMPLER, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(5))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


def test_baselines_take_the_row_path():
    """The four position-local baselines declare it (else the test above is vacuous)."""
    assert {"unigram", "kgw-naive", "aar-gumbel", "kth-exp-edit"} <= set(ROW_SCHEMES)
    assert "global-sketch" not in ROW_SCHEMES and "red-green-dlm" not in ROW_SCHEMES


PACKED_SCHEMES = [n for n in SCHEMES
                  if get_registry().get("scheme", n).needs_all_marginals and get_registry().get("scheme", n).packed_marginals]


@pytest.mark.parametrize("block_length", [64, 16])
@pytest.mark.parametrize("name", PACKED_SCHEMES)
def test_packed_path_matches_full_path(name, block_length, tiny):
    """A scheme with ``packed_marginals = True`` gets the masked rows packed (B, M, V) and the
    sampled rows (B, K, V) under random remasking; its texts must equal those of the full (B, G, V)
    path (flag forced off), with one block and with semi-autoregressive blocks (masked positions
    outside the current block still count in eq. 5)."""
    cfg = {**SAMPLER, "block_length": block_length}
    outs = []
    for packed in (True, False):
        scheme = make(name, tiny.vocab_size)
        scheme.packed_marginals = packed
        out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(5))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("context", [[-1], [-1, 1], [-2]])
def test_red_green_dlm_neighbour_rows_match_full_path(context, tiny):
    """red-green-dlm packs only the masked rows within ``marginal_radius`` = 2·max|o| of a sampled
    row; for every context set the texts must equal the full (B, G, V) path."""
    cfg = {**SAMPLER, "block_length": 16}
    outs = []
    for packed in (True, False):
        scheme = make("red-green-dlm", tiny.vocab_size, context=context)
        assert scheme.marginal_radius == 2 * max(abs(o) for o in context)
        scheme.packed_marginals = packed
        out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(11))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


def test_packed_path_builds_no_full_logits(tiny, monkeypatch):
    """global-sketch declares packed marginals, and on that path the engine never asks the backend
    for (B, P+G, V) logits (the zero-filled full tensor is what the path exists to avoid)."""
    assert "global-sketch" in PACKED_SCHEMES
    calls = {"logits": 0, "logits_at": 0}
    orig_logits, orig_at = tiny.logits, tiny.logits_at

    def counting_logits(*a, **k):
        calls["logits"] += 1
        return orig_logits(*a, **k)

    def counting_at(*a, **k):
        calls["logits_at"] += 1
        return orig_at(*a, **k)

    monkeypatch.setattr(tiny, "logits", counting_logits)
    monkeypatch.setattr(tiny, "logits_at", counting_at)
    MaskedDiffusionSampler(tiny, SAMPLER, make("global-sketch", tiny.vocab_size)).generate(PROMPTS[:2])
    assert calls["logits"] == 0 and calls["logits_at"] > 0
