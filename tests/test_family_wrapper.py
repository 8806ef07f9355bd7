"""``keyed-family`` (plugins/sketchwm_builtin/family.py): any scheme under one of K member keys per text.

* The p-value holds its level for every key on text written without it (many keys, null texts of
  the tiny model): the rate at p ≤ α stays at α within its sampling error, pooled and per key.
* Genuine text under the wrapper is detected, and the member that scores best is the one each text
  was embedded under (each member tilts, keys the noise and steers the order of its own rows only).
* The member of each text is a keyed, deterministic function of the generator (and the prompt):
  the same seed and key give the same members, another key other members, and the draws are
  uniform over the members.
* A text that raises every member about equally (one genuine text of each member, concatenated:
  what a thief who mixes the members writes) fools the family test alone, not the spread test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.testing.schemes import KEY, OTHER_KEY, PROMPTS, SAMPLER
from sketchwm_builtin.family import MEMBER_DOMAIN, KeyedFamilyScheme

pytestmark = pytest.mark.usefixtures("one_thread")

#: the default's channels on the tiny vocabulary (uniform prior: no packaged counts for it), its sketch
#: a single key (the wrapper is the family), with keyed sampling (GREEN) and without (FREE)
GREEN = {"name": "global-sketch-green", "params": {"sketch": {"prior": {"source": "uniform"}, "delta": 0.75,
                                                              "coverage_full": 0.25, "marginals": "sampled"},
                                                   "family": {"members": 1}, "sampling": "keyed"}}
FREE = {"name": "global-sketch-green", "params": {**GREEN["params"], "sampling": "free"}}
SKETCH = {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}}


def _family(key: WatermarkKey, inner: dict = FREE, members: int = 4, decoys: int = 8, V: int = 120,
            **params) -> KeyedFamilyScheme:
    return KeyedFamilyScheme({"inner": inner, "members": members, "decoys": decoys, **params}, key, V)


def _generate(tiny, scheme, prompts, seed: int, **sampler):
    return MaskedDiffusionSampler(tiny, {**SAMPLER, **sampler}, scheme).generate(prompts, torch.Generator().manual_seed(seed))


def _all(ids: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(ids, dtype=torch.bool)


@pytest.fixture(scope="module")
def null_ids(tiny):
    """64 unwatermarked texts of the tiny model, (64, 64) int64."""
    return _generate(tiny, None, PROMPTS * 8, 321).ids


def test_pvalue_holds_its_level_per_key_on_text_without_the_key(null_ids):
    """30 keys × 64 null texts: the pooled rate at p ≤ 0.1 is at most 0.1 + 3 standard errors (of
    the 30 per-key rates), no key's rate exceeds 0.1 by more than 4 binomial standard errors, and the
    pooled p-values are not stochastically smaller than U(0, 1) (one-sided KS, 0.1%)."""
    from scipy import stats

    valid = _all(null_ids)
    rates, pooled = [], []
    for i in range(30):
        pv = _family(WatermarkKey(b"null-key-%03d" % i + b"." * 20)).score_ids(null_ids, valid).p_value.numpy()
        assert pv.dtype == np.float64 and pv.shape == (64,) and ((pv >= 0) & (pv <= 1)).all()
        rates.append(float((pv <= 0.1).mean()))
        pooled.append(pv)
    rates = np.array(rates)
    se = rates.std(ddof=1) / math.sqrt(rates.size)
    assert rates.mean() <= 0.1 + 3 * se + 1e-9, (rates.mean(), se)
    assert rates.max() <= 0.1 + 4 * math.sqrt(0.1 * 0.9 / 64), rates
    assert stats.kstest(np.concatenate(pooled), "uniform", alternative="greater").pvalue > 1e-3


@pytest.mark.parametrize("inner,temperature", [(FREE, 1.0), (GREEN, 1.0), (SKETCH, 0.0)],
                         ids=["tilts", "keyed-noise", "order-steering"])
def test_genuine_text_is_detected_and_its_own_member_scores_best(tiny, inner, temperature):
    """16 texts (64 tokens) under a 4-member family: the family p-value is small (median ≤ 0.01,
    none above 0.1), the best member is the drawn one for every text, more than one member was drawn
    in the batch, and an unrelated key does not detect them (median p > 0.05)."""
    scheme = _family(KEY, inner)
    out = _generate(tiny, scheme, PROMPTS * 2, 1, temperature=temperature)
    drawn = scheme.drawn.clone()
    assert drawn.shape == (16,) and len(torch.unique(drawn)) > 1
    valid = _all(out.ids)
    s = scheme.score_ids(out.ids, valid)
    assert float(s.p_value.median()) <= 0.01 and float(s.p_value.max()) <= 0.1, s.p_value
    assert set(s.channels) == {"family", "spread"} and bool((s.channels["family"][0] <= s.p_value).all())
    p, _, _, _ = scheme.member_scores(out.ids, valid)
    assert torch.equal(p.argmin(0), drawn)
    assert float(_family(OTHER_KEY, inner).score_ids(out.ids, valid).p_value.median()) > 0.05


def test_each_member_is_the_inner_scheme_under_its_member_key(tiny):
    """Member i scores like the inner scheme built under ``key.subkey("keyed-family/member=i")``."""
    from sketchwm.registry import get_registry

    scheme = _family(KEY)
    ids = _generate(tiny, scheme, PROMPTS, 2).ids
    own = get_registry().create("scheme", FREE["name"], FREE["params"], KEY.subkey(MEMBER_DOMAIN.format(i=2)), 120)
    torch.testing.assert_close(scheme.members[2].score_ids(ids, _all(ids)).p_value, own.score_ids(ids, _all(ids)).p_value)


def test_member_draw_is_a_keyed_deterministic_function_of_the_generator():
    """``draw_members``: the same generator seed, prompts and key give the same members; another seed
    or another key others; over 4,000 texts the 8 members are drawn uniformly (chi-square, 0.1%)."""
    from scipy import stats

    prompts = torch.randint(5, 120, (4000, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompts, dtype=torch.bool)
    a, b = _family(KEY, members=8), _family(OTHER_KEY, members=8)

    def draw(scheme, seed):
        return scheme.draw_members(torch.Generator().manual_seed(seed), prompts, mask)

    first = draw(a, 7)
    assert first.dtype == torch.int64 and first.shape == (4000,) and int(first.min()) >= 0 and int(first.max()) < 8
    assert torch.equal(first, draw(a, 7))
    assert float((first == draw(a, 8)).double().mean()) < 0.2  # chance: 1/8
    assert float((first == draw(b, 7)).double().mean()) < 0.2
    counts = torch.bincount(first, minlength=8).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3, counts
    # the prompt enters too: one seed, the same prompt at every row, still spreads over the members
    same = a.draw_members(torch.Generator().manual_seed(7), prompts[:1].expand(4000, -1), mask)
    assert len(torch.unique(same)) == 8


def test_text_raising_every_member_equally_fools_the_family_test_not_the_spread_test(tiny):
    """One genuine text of each of 4 members, concatenated (256 tokens): every member's p-value is
    small, so the family test alone flags the mix; the spread test sees no member stand out and the
    reported p-value does not flag it, while a genuine 256-token text of one member is flagged."""
    scheme = _family(KEY, SKETCH, members=4, decoys=8)
    out = _generate(tiny, scheme, PROMPTS * 6, 5)
    by = {m: out.ids[(scheme.drawn == m).nonzero(as_tuple=True)[0]] for m in range(4)}
    assert all(len(v) >= 6 for v in by.values()), {m: len(v) for m, v in by.items()}
    mixes = torch.stack([torch.cat([by[m][j] for m in range(4)]) for j in range(2)])  # (2, 256): every member
    genuine = torch.stack([by[m][2:6].reshape(-1) for m in range(2)])  # (2, 256): four texts of one member
    s_mix, s_gen = scheme.score_ids(mixes, _all(mixes)), scheme.score_ids(genuine, _all(genuine))
    p_fam = s_mix.channels["family"][0]
    assert bool((p_fam <= 0.01).all()), p_fam  # the family test alone is fooled
    assert bool((s_mix.p_value > 0.01).all()), s_mix.p_value  # the spread test is not
    assert bool((s_gen.p_value <= 0.01).all()), s_gen.p_value


def test_params_are_checked():
    """Bad params raise ConfigError: the family as its own inner scheme, a spread test on one member."""
    from sketchwm.errors import ConfigError

    with pytest.raises(ConfigError):
        _family(KEY, {"name": "keyed-family", "params": {}})
    with pytest.raises(ConfigError):
        _family(KEY, members=1)
    assert _family(KEY, members=1, spread_test=False, decoys=0).decoys == []
