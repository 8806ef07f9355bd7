"""Forgery: the key-family defence (``global-sketch-family``) and the thieves (``spoof-insert``, ``spoof-substitute``).

* The family p-value is valid: synthetic member p-values under the null (Bonferroni and Šidák), the
  spread test under its spoof null, and the scheme itself on key-independent random texts, key by key.
* Genuine embedding puts the evidence on the member each text was drawn for; a forger that mixes the
  members (the exact mean boost, the limit of every counting thief) is refused by the spread test,
  one that forges a single member is not.
* The thieves work against an undefended toy scheme (Unigram's green list, planted), and the adaptive
  thief separates texts of two planted members.

Tiny vocabulary and models built in code; seeded; seconds each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import ndtr, ndtri

from sketchwm.detection import pad_ids
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.errors import ConfigError, InputError
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm.testing import tiny_backend, tiny_texts
from sketchwm_attacks.forgery import ClusteredStealer, DocFrequencyStealer
from sketchwm_builtin.key_family import family_pvalues, member_key

pytestmark = pytest.mark.usefixtures("one_thread")

UNIFORM = {"member": {"prior": {"source": "uniform"}}}


@pytest.fixture(scope="module")
def tiny():
    return tiny_backend(seed=0)


def _family(V: int, key: WatermarkKey, members: int = 4, **params):
    return get_registry().create("scheme", "global-sketch-family", {**UNIFORM, "members": members, **params}, key, V)


# ============================================================================ validity
@pytest.mark.parametrize("correction", ["bonferroni", "sidak"])
@pytest.mark.parametrize("K", [2, 8])
def test_family_pvalue_is_valid_under_the_null(K, correction):
    """Independent uniform member p-values (40,000 texts): P(p ≤ α) ≤ α + 3 binomial s.d., α = .01, .05;
    Šidák is exact (≥ α − 3 s.d.), and the spread test only makes the p-value larger."""
    g = torch.Generator().manual_seed(K)
    B = 40_000
    p = torch.rand(K, B, generator=g, dtype=torch.float64)
    z = torch.from_numpy(-ndtri(p.numpy()))
    plain, _, _ = family_pvalues(p, z, correction, spread_test=False)
    for spread in ("student", "normal") if K >= 3 else ("normal",):
        both, _, _ = family_pvalues(p, z, correction, spread_test=True, spread=spread)
        assert bool((both >= plain).all())
    for alpha in (0.01, 0.05):
        sd = math.sqrt(alpha * (1 - alpha) / B)
        rate = float((plain <= alpha).double().mean())
        assert rate <= alpha + 3 * sd, (alpha, rate)
        if correction == "sidak":
            assert rate >= alpha - 3 * sd, (alpha, rate)


@pytest.mark.parametrize("spread", ["student", "normal"])
@pytest.mark.parametrize("K", [4, 16])
def test_spread_test_is_valid_under_its_spoof_null(K, spread):
    """Every member shifted by the same amount (a forger mixing them) with unit noise: the spread
    p-value is ≤ α at most α + 3 s.d. of the time, although every member's z is far in the tail."""
    g = torch.Generator().manual_seed(K)
    B = 40_000
    z = 6.0 + torch.randn(K, B, generator=g, dtype=torch.float64)
    p = torch.from_numpy(ndtr(-z.numpy()))  # each member's own p-value 1 − Φ(z)
    pv, _, d = family_pvalues(p, z, "bonferroni", spread_test=True, spread=spread)
    plain, _, _ = family_pvalues(p, z, "bonferroni", spread_test=False)
    assert float((plain <= 0.01).double().mean()) == 1.0  # the family test alone is fooled
    for alpha in (0.01, 0.05):
        assert float((pv <= alpha).double().mean()) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / B)


def test_student_spread_holds_when_the_members_spread_more_than_unit_noise():
    """A forgery whose members' z spread with σ = 3 (stolen tokens repeated through the text): the
    studentised test stays at its level (≤ α + 3 s.d., K = 16, 40,000 texts); the unit-noise test
    does not (its rate at α = .01 is several times α), which is why ``student`` is the default."""
    g = torch.Generator().manual_seed(7)
    K, B = 16, 40_000
    z = 8.0 + 3.0 * torch.randn(K, B, generator=g, dtype=torch.float64)
    p = torch.from_numpy(ndtr(-z.numpy()))
    student, _, _ = family_pvalues(p, z, "bonferroni", spread_test=True, spread="student")
    normal, _, _ = family_pvalues(p, z, "bonferroni", spread_test=True, spread="normal")
    for alpha in (0.01, 0.05):
        assert float((student <= alpha).double().mean()) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / B)
    assert float((normal <= 0.01).double().mean()) >= 0.05


def test_decoys_keep_the_level_and_cost_less_power():
    """Members' z i.i.d. N(8, 3²) and 32 decoys' N(0, 3²) (the decoys share the text's noise, not the
    lift): the pooled studentised test stays at its level (K = 16, 40,000 texts). On genuine texts
    (one member at z = 5, the rest and the decoys N(0, 1)) it flags more than the test without
    decoys, whose K − 2 degrees of freedom make the t tail heavy."""
    g = torch.Generator().manual_seed(8)
    K, M, B = 16, 32, 40_000
    z = 8.0 + 3.0 * torch.randn(K, B, generator=g, dtype=torch.float64)
    zd = 3.0 * torch.randn(M, B, generator=g, dtype=torch.float64)
    p = torch.from_numpy(ndtr(-z.numpy()))
    pv, _, _ = family_pvalues(p, z, spread="student", z_decoy=zd)
    for alpha in (0.01, 0.05):
        assert float((pv <= alpha).double().mean()) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / B)
    zg = torch.randn(K, B, generator=g, dtype=torch.float64)
    zg[0] += 5.0
    pg = torch.from_numpy(ndtr(-zg.numpy()))
    with_decoys, _, _ = family_pvalues(pg, zg, spread="student", z_decoy=torch.randn(M, B, generator=g, dtype=torch.float64))
    without, _, _ = family_pvalues(pg, zg, spread="student")
    assert float((with_decoys <= 0.01).double().mean()) > float((without <= 0.01).double().mean()) + 0.1


def test_spread_test_needs_enough_members():
    """The studentised spread test needs one degree of freedom (3 members, or 2 members and 2
    decoys), the unit-noise one 2 members: fewer is a clear error."""
    z = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(ConfigError, match="at least 3"):
        family_pvalues(torch.full_like(z, 0.5), z, spread="student")
    family_pvalues(torch.full_like(z, 0.5), z, spread="student", z_decoy=torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ConfigError, match="unknown spread"):
        family_pvalues(torch.full_like(z, 0.5), z, spread="t")
    with pytest.raises(Exception, match="members >= 3 or decoys >= 2"):
        get_registry().create("scheme", "global-sketch-family", {**UNIFORM, "members": 2, "decoys": 0},
                              WatermarkKey(b"\x01" * 32), 99)


def test_family_scheme_null_per_key_on_random_texts(tiny):
    """Texts drawn independently of the key (uniform tokens: the background null of a uniform prior),
    12 keys × 300 texts of 40 tokens: per key P(p ≤ .05) ≤ .05 + 3 s.d., and roughly uniform overall
    (mean rate ≤ .05)."""
    V = tiny.vocab_size
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, V, (300, 40), generator=g)
    valid = torch.ones_like(ids, dtype=torch.bool)
    rates = []
    for k in range(12):
        scheme = _family(V, WatermarkKey(bytes([k + 1]) * 32), members=4)
        p = scheme.score_ids(ids, valid).p_value
        assert bool(((p >= 0) & (p <= 1)).all())
        rates.append(float((p <= 0.05).double().mean()))
    assert max(rates) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300), rates
    assert float(np.mean(rates)) <= 0.05, rates


def test_member_keys_are_domain_separated_and_prefix_stable(tiny):
    """Member keys derive from the key by HMAC with their own domain, and do not depend on K: a K-member
    family is the first K members of a larger one."""
    key = WatermarkKey(b"\x07" * 32)
    assert member_key(key, 0).secret != member_key(key, 1).secret != key.secret
    assert member_key(key, 0).secret != key.subkey("k_sk").secret
    small, large = _family(tiny.vocab_size, key, members=2, spread="normal"), _family(tiny.vocab_size, key, members=5)
    for a, b in zip(small.members, large.members):
        assert torch.equal(a.token_weights(), b.token_weights())


# ============================================================================ embedding and the spread test
def test_each_text_carries_its_drawn_member(tiny):
    """Generated texts (12 × 48 tokens, K = 3): several members are drawn, and the member with the
    smallest p-value is the drawn one for at least 10 of 12 texts; most texts are detected."""
    scheme = get_registry().create("scheme", "global-sketch-family",
                                   {"members": 3, "member": {"prior": {"source": "uniform"}, "delta": 2.0}},
                                   WatermarkKey(b"\x05" * 32), tiny.vocab_size)
    cfg = {"gen_length": 48, "block_length": 48, "steps": 24}
    out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(tiny_texts(12, 3, seed=2), torch.Generator().manual_seed(0))
    drawn = scheme.drawn.clone()
    assert len(set(drawn.tolist())) >= 2
    valid = torch.ones_like(out.ids, dtype=torch.bool)
    p, z, _, _ = scheme.member_scores(out.ids, valid)
    assert int((p.argmin(0) == drawn).sum()) >= 10
    assert int((scheme.score_ids(out.ids, valid).p_value <= 0.05).sum()) >= 9


def _top_tokens(score: torch.Tensor, keep: torch.Tensor, k: int) -> list[int]:
    s = torch.where(keep, score, torch.full_like(score, -1e9))
    return torch.argsort(s, descending=True)[:k].tolist()


def test_spread_test_refuses_a_mixture_forgery_but_not_a_member_forgery(tiny):
    """Random texts plus the 30 tokens of largest mean boost (1/K)Σ c_i: the family test alone flags
    most of them, the reported p-value almost none; plus member 0's 30 most boosted tokens instead:
    flagged (the adaptive thief's target)."""
    V = tiny.vocab_size
    scheme = _family(V, WatermarkKey(b"\x09" * 32), members=4)
    C = torch.stack([m.token_weights() for m in scheme.members])  # (K, V)
    keep = scheme.members[0].sketch.keep_table()[:V].bool() & (torch.arange(V) >= 5)
    g = torch.Generator().manual_seed(4)
    base = torch.randint(5, V, (200, 30), generator=g)
    results = {}
    for label, score in (("mixture", C.mean(0)), ("member", C[0])):
        add = torch.tensor(_top_tokens(score, keep, 30))
        ids = torch.cat([base, add.expand(200, -1)], 1)
        valid = torch.ones_like(ids, dtype=torch.bool)
        p, z, _, _ = scheme.member_scores(ids, valid)
        fam, _, _ = family_pvalues(p, z, "bonferroni", spread_test=False)
        rep = scheme.score_ids(ids, valid).p_value
        results[label] = (float((fam <= 0.01).double().mean()), float((rep <= 0.01).double().mean()))
    assert results["mixture"][0] >= 0.5 and results["mixture"][1] <= 0.05, results
    assert results["member"][1] >= 0.9, results


# ============================================================================ thieves
def _planted(V: int, green: torch.Tensor, n: int, seed: int, length: int = 40, boost: float = 4.0):
    """n documents whose tokens are ``boost`` times likelier on ``green`` (V,) bool, ids >= 5."""
    g = torch.Generator().manual_seed(seed)
    w = torch.ones(V, dtype=torch.float64)
    w[:5] = 0
    w[green] *= boost
    return torch.multinomial(w / w.sum(), n * length, replacement=True, generator=g).view(n, length).tolist()


def test_doc_frequency_thief_forges_an_undefended_scheme(tiny):
    """Unigram's green list planted in 100 texts (4× likelier), 100 uniform reference texts: the thief's
    top 20 tokens are mostly green, and spoof-insert / spoof-substitute at budget 0.5 make human-like
    texts flagged under the victim key (≥ 50%; the tiny vocabulary leaves few words a passage lacks)
    but not under an unrelated key (≤ 10%)."""
    V, reg = tiny.vocab_size, get_registry()
    victim = reg.create("scheme", "unigram", {}, WatermarkKey(b"\x01" * 32), V)
    other = reg.create("scheme", "unigram", {}, WatermarkKey(b"\x02" * 32), V)
    green = victim.green_mask.clone()
    green[:5] = False
    wm = _planted(V, green, 100, seed=0)
    ref = _planted(V, torch.zeros(V, dtype=torch.bool), 100, seed=1)
    st = DocFrequencyStealer(V).fit(wm, ref)
    top = st.ranked(20).tolist()
    assert sum(bool(green[t]) for t in top) >= 16
    human = tiny_texts(40, 30, seed=5)
    for name in ("spoof-insert", "spoof-substitute"):
        atk = reg.create("attack", name, {"similarity": False}, backend=tiny, stealer=st)
        out = atk.apply(human, 0.5, torch.Generator().manual_seed(0))
        assert all(0 < f <= 0.5 + 1e-9 for f in out.edit_fraction)
        ids, valid = pad_ids(tiny.encode(out.texts))
        hit = float((victim.score_ids(ids, valid).p_value <= 0.01).double().mean())
        miss = float((other.score_ids(ids, valid).p_value <= 0.01).double().mean())
        assert hit >= 0.5 and miss <= 0.1, (name, hit, miss)


def test_adaptive_thief_separates_two_members(tiny):
    """Texts of two planted members (disjoint green lists, 60 each): k-means on the boosted tokens puts
    ≥ 90% of texts with their member, and each cluster's top tokens are mostly one member's."""
    V = tiny.vocab_size
    perm = torch.randperm(V - 5, generator=torch.Generator().manual_seed(0)) + 5
    greens = []
    for part in (perm[:20], perm[20:40]):
        m = torch.zeros(V, dtype=torch.bool)
        m[part] = True
        greens.append(m)
    wm = _planted(V, greens[0], 60, seed=2, boost=6.0) + _planted(V, greens[1], 60, seed=3, boost=6.0)
    truth = np.array([0] * 60 + [1] * 60)
    ref = _planted(V, torch.zeros(V, dtype=torch.bool), 120, seed=4)
    cl = ClusteredStealer(V, 2, n_features=40, seed=0).fit(wm, ref)
    lab = cl.labels.numpy()
    purity = max((lab == truth).mean(), (lab != truth).mean())
    assert purity >= 0.9, purity
    for st in cl.stealers:
        top = st.ranked(10).tolist()
        share = max(sum(bool(g[t]) for t in top) for g in greens) / len(top)
        assert share >= 0.8, share


def test_spoofers_need_a_stealer_or_texts(tiny):
    atk = get_registry().create("attack", "spoof-insert", {"similarity": False}, backend=tiny)
    with pytest.raises(InputError, match="reference_texts"):
        atk.apply(["the man said"], 0.5, torch.Generator())


# ============================================================================ the benchmark script's helpers
def test_stealing_benchmark_bootstrap_and_plot(tmp_path):
    """``benchmarks/stealing.py``: the bootstrap interval brackets the rate (and is [0, 0] for no hits),
    and the spoof-rate-vs-N plot is written as a PNG."""
    import importlib.util
    from pathlib import Path

    import pandas as pd

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "stealing.py"
    spec = importlib.util.spec_from_file_location("bench_stealing", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rate, lo, hi = mod.bootstrap_interval(np.array([1] * 30 + [0] * 70))
    assert rate == pytest.approx(0.3) and 0.2 < lo < 0.3 < hi < 0.4
    assert mod.bootstrap_interval(np.zeros(50)) == (0.0, 0.0, 0.0)
    df = pd.DataFrame([{"scheme": s, "thief": "doc-frequency/spoof-insert", "n_stolen": n, "metric": "spoof-rate",
                        "value": v, "lo": v / 2, "hi": min(1.0, v * 1.5)}
                       for s, vals in (("a", (0.2, 0.6)), ("b", (0.0, 0.02))) for n, v in zip((50, 200), vals)])
    mod.plot_spoof_vs_n(df, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
