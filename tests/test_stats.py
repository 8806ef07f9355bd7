"""sketchwm.stats: every function against scipy, a closed form or brute-force enumeration; validity of
the calibrated threshold over simulated nulls; multiple-testing corrections against hand computation;
shapes, dtypes and errors; and the one detection signature across schemes and score functions."""

from __future__ import annotations

import inspect
import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from sketchwm import stats
from sketchwm.components import SchemeScores
from sketchwm.errors import InputError
from sketchwm.registry import get_registry
from sketchwm.testing.schemes import KEY

pytestmark = pytest.mark.usefixtures("one_thread")


# ============================================================================ exact tails
def test_binomial_logsf_matches_enumeration():
    n = torch.tensor([0, 1, 5, 20, 20, 40])
    k = torch.tensor([0, 1, 3, 0, 17, 40])
    p = 0.25
    got = stats.binomial_logsf(k, n, p)
    assert got.shape == (6,) and got.dtype == torch.float64
    for i in range(6):
        ni, ki = int(n[i]), int(k[i])
        brute = sum(math.comb(ni, j) * p**j * (1 - p) ** (ni - j) for j in range(ki, ni + 1)) if ni else 1.0
        assert math.exp(float(got[i])) == pytest.approx(brute, rel=1e-10, abs=1e-300)
    assert float(got[0]) == 0.0  # n = 0: nothing scored, p = 1


def test_hypergeom_logsf_matches_enumeration():
    V, G = 30, 9
    draws = torch.tensor([0, 5, 5, 12, 12, 5])
    k = torch.tensor([0, 0, 4, 6, 9, 4])
    got = stats.hypergeom_logsf(k, V, G, draws)
    assert got.shape == (6,) and got.dtype == torch.float64
    for i in range(1, 6):
        d, ki = int(draws[i]), int(k[i])
        brute = sum(math.comb(G, j) * math.comb(V - G, d - j) for j in range(ki, min(G, d) + 1)) / math.comb(V, d)
        assert math.exp(float(got[i])) == pytest.approx(brute, rel=1e-10)
    assert float(got[0]) == 0.0 and float(got[2]) == float(got[5])  # repeated (k, draws) pairs agree


def test_gamma_logsf_matches_erlang_closed_form():
    s = torch.tensor([0.5, 3.0, 10.0, 40.0, 2.0])
    n = torch.tensor([1, 3, 4, 10, 0])
    got = stats.gamma_logsf(s, n)
    for i in range(4):
        si, ni = float(s[i]), int(n[i])
        erlang = math.exp(-si) * sum(si**j / math.factorial(j) for j in range(ni))  # P(Gamma(n,1) >= s)
        assert math.exp(float(got[i])) == pytest.approx(erlang, rel=1e-10)
    assert float(got[4]) == 0.0


def test_normal_tail_and_quantile():
    z = torch.tensor([-3.0, 0.0, 1.5, 8.0, 30.0], dtype=torch.float64)
    p = stats.normal_sf(z)
    assert p.dtype == torch.float64 and p.shape == z.shape
    assert np.allclose(p.numpy(), sps.norm.sf(z.numpy()), rtol=1e-14, atol=0)
    assert 0 < float(p[-1]) < 1e-190  # no cancellation far in the tail
    assert np.allclose(stats.normal_sf(z, 1.5).numpy(), sps.norm.sf(z.numpy(), loc=1.5), rtol=1e-14, atol=0)
    for a in (0.5, 0.05, 1e-6):
        assert float(stats.normal_sf(torch.tensor([stats.normal_isf(a)], dtype=torch.float64))[0]) == pytest.approx(a, rel=1e-10)


# ============================================================================ Rademacher sums
def _enumerate(H: torch.Tensor) -> torch.Tensor:
    """Σ_j u_j H_j for all 2^D sign vectors: (2^D, B)."""
    signs = torch.tensor(list(itertools.product([-1, 1], repeat=H.shape[1])), dtype=torch.long)
    return signs @ H.T


def test_exact_rademacher_pvalue_matches_enumeration():
    H = torch.randint(-3, 4, (4, 10), generator=torch.Generator().manual_seed(1))
    sums = _enumerate(H)  # (1024, 4)
    for x in (-40, -5, 0, 3, 7, 12, 40):
        xo = torch.full((4,), x, dtype=torch.long)
        got = stats.rademacher_sum_pvalue(H, xo)
        assert got.shape == (4,) and got.dtype == torch.float64
        assert torch.allclose(got, (sums >= x).double().mean(0), atol=1e-12), x
    # (B, K): K directions share one pmf
    xk = torch.tensor([[-5, 0, 7]] * 4)
    got = stats.rademacher_sum_pvalue(H, xk)
    assert got.shape == (4, 3)
    assert torch.allclose(got, torch.stack([(sums >= x).double().mean(0) for x in (-5, 0, 7)], 1), atol=1e-12)


def test_bounds_dominate_the_exact_tail():
    g = torch.Generator().manual_seed(2)
    H = torch.randint(-2, 3, (6, 12), generator=g)
    sums = _enumerate(H)  # (4096, 6)
    for x in (1, 3, 6, 10, 14):
        exact = (sums >= x).double().mean(0)
        xs = torch.full((6,), float(x), dtype=torch.float64)
        cher = stats.chernoff_pvalue(H.double(), xs)
        hoef = stats.hoeffding_pvalue(xs, H.double().norm(dim=1))
        assert bool((cher >= exact - 1e-12).all()), (x, cher, exact)
        assert bool((hoef >= exact - 1e-12).all()), (x, hoef, exact)
        assert bool((cher <= hoef + 1e-12).all())  # Chernoff with cosh is at least as tight as Hoeffding
    assert float(stats.hoeffding_pvalue(torch.tensor([-1.0]), torch.tensor([2.0]))[0]) == 1.0


def test_tiny_rademacher_pvalue_falls_back_to_a_valid_bound():
    H = torch.ones(1, 1024, dtype=torch.long)
    p = float(stats.rademacher_sum_pvalue(H, torch.tensor([400])))
    exact = float(sps.binom.sf(711, 1024, 0.5))  # X = 2·Bin(1024, ½) − 1024 >= 400 ⇔ Bin >= 712
    assert exact <= p < 1e-20


def test_hoeffding_threshold_inverts_the_bound():
    for a in (0.2, 0.01, 1e-8):
        t = stats.hoeffding_threshold(a)
        assert float(stats.hoeffding_pvalue(torch.tensor([t], dtype=torch.float64), torch.tensor([1.0]))[0]) == pytest.approx(a, rel=1e-12)


# ============================================================================ resampling, standardisation
def test_permutation_pvalue_by_hand_and_validity():
    null = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]])
    obs = torch.tensor([3.0, 1.0])
    assert torch.equal(stats.permutation_pvalue(null, obs, "greater"), torch.tensor([3 / 5, 1 / 5], dtype=torch.float64))
    assert torch.equal(stats.permutation_pvalue(null, obs, "less"), torch.tensor([4 / 5, 5 / 5], dtype=torch.float64))
    # valid under exchangeability: P(p <= a) <= a for 20000 simulated nulls with P = 19
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20000, 20, generator=g, dtype=torch.float64)
    p = stats.permutation_pvalue(x[:, 1:], x[:, 0])
    for a in (0.05, 0.1, 0.5):
        assert float((p <= a).double().mean()) <= a + 3 * math.sqrt(a / 20000)
    with pytest.raises(InputError, match="alternative"):
        stats.permutation_pvalue(null, obs, "two-sided")
    with pytest.raises(InputError, match="at least one null draw"):
        stats.permutation_pvalue(torch.zeros(2, 0), obs)
    with pytest.raises(InputError, match=r"\(B, P\)"):
        stats.permutation_pvalue(null, torch.zeros(3))


def test_standardise_and_log10_scores():
    z = stats.standardise(torch.tensor([5, 3]), torch.tensor([3.0, 3.0]), torch.tensor([4.0, 0.0]))
    assert z.dtype == torch.float64 and z.tolist() == [1.0, 0.0]  # var = 0 → 0
    log_p = torch.log(torch.tensor([0.5, 1e-3, 0.01], dtype=torch.float64))
    s = stats.scores_from_log_p(log_p, torch.zeros(3), torch.tensor([10, 20, 30]), "test")
    assert isinstance(s, SchemeScores) and s.n_scored.dtype == torch.int64
    thr = stats.log10_threshold(0.01)
    assert thr == pytest.approx(2.0)
    assert (s.score >= thr - 1e-12).tolist() == (s.p_value <= 0.01 + 1e-15).tolist() == [False, True, True]


# ============================================================================ calibration
def test_conformal_quantile_order_statistic():
    s = torch.arange(1.0, 100.0)  # 1..99, n = 99
    assert stats.conformal_min_size(0.01) == 99 and stats.conformal_min_size(0.1) == 9
    assert stats.conformal_quantile(s, 0.01) == 99.0  # ⌈100·0.99⌉ = 99th smallest
    assert stats.conformal_quantile(s, 0.1) == 90.0  # ⌈100·0.9⌉ = 90th
    assert stats.conformal_quantile(s[:98], 0.01) == math.inf  # 98 < ⌈1/α⌉ − 1
    assert stats.conformal_quantile(s.numpy()[::-1].copy(), 0.1) == 90.0  # numpy, unsorted
    assert stats.decision_threshold(s, 0.1, 95.0) == 95.0 and stats.decision_threshold(s, 0.1, None) == 90.0
    both = stats.decision_threshold(s, 0.1, np.array([80.0, 91.0, -np.inf]))
    assert both.tolist() == [90.0, 91.0, 90.0]


def test_conformal_threshold_fpr_at_most_alpha_on_disjoint_nulls():
    """5000 calibrations of n = 50 null scores, each judged on 20 disjoint null scores: FPR <= α = 0.1.

    The (n+1) correction matters here: the plain ⌈n(1−α)⌉-th order statistic has FPR 6/51 ≈ 0.118."""
    g = torch.Generator().manual_seed(4)
    alpha, n, T, E = 0.1, 50, 5000, 20
    cal = torch.randn(T, n, generator=g, dtype=torch.float64).numpy()
    ev = torch.randn(T, E, generator=g, dtype=torch.float64).numpy()
    tau = np.array([stats.conformal_quantile(c, alpha) for c in cal])  # (T,)
    fpr = float((ev >= tau[:, None]).mean())
    assert fpr <= alpha + 0.003, fpr  # theory: 5/51 ≈ 0.098; sd ≈ 0.0006
    naive = np.sort(cal, 1)[:, math.ceil(n * (1 - alpha)) - 1]
    assert float((ev >= naive[:, None]).mean()) > alpha + 0.01  # the test can tell a wrong quantile


def test_calibrated_decision_is_tie_proof_on_discrete_scores():
    """Discrete scores tie at τ_N: the one rule (:func:`stats.decide`) flags ``score > τ_N`` and keeps FPR <= α.

    Scores are −log10 of the exact binomial p-value of K ~ Binomial(20, ½) (21 possible values), as a
    baseline's exact p-value would give; 400 calibrations of 200 null texts at α = 1%, each judged on
    500 fresh null texts (seeded). FPR must be <= α + one binomial standard error of the estimate
    (√(α(1 − α)/200000) ≈ 0.00022); ``score >= τ_N`` gives ≈ 1.9% here."""
    from scipy import stats as st

    rng = np.random.default_rng(22)
    alpha, n, R, E, m = 0.01, 200, 400, 500, 20
    k = rng.binomial(m, 0.5, (R, n + E))
    scores = -np.log10(st.binom.sf(k - 1, m, 0.5))  # P(K >= k): ties everywhere
    p_values = 10.0 ** -scores
    flagged = 0
    for cal, ev, pv in zip(scores[:, :n], scores[:, n:], p_values[:, n:]):
        tau = stats.conformal_quantile(cal, alpha)
        flagged += int(stats.decide(ev, pv, alpha, calibrated=np.full(E, tau)).sum())
    fpr = flagged / (R * E)
    assert fpr <= alpha + math.sqrt(alpha * (1 - alpha) / (R * E)), fpr
    # an analytic bound is non-strict (P(score >= τ_α) <= α), and no threshold at all means p <= α
    s = np.array([1.0, 2.0, 3.0])
    assert stats.decide(s, np.array([0.5, 0.01, 1e-3]), alpha, analytic=np.full(3, 2.0)).tolist() == [False, True, True]
    assert stats.decide(s, np.array([0.5, 0.01, 1e-3]), alpha, analytic=np.full(3, -np.inf)).tolist() == [False, True, True]
    assert stats.decide(s, np.array([0.5, 0.01, 1e-3]), alpha, analytic=np.full(3, 1.0),
                        calibrated=np.full(3, 2.0)).tolist() == [False, False, True]


# ============================================================================ multiple testing
def _holm_by_hand(p: list[float], m: int) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, run = [0.0] * len(p), 0.0
    for j, i in enumerate(order):
        run = max(run, min(1.0, (m - j) * p[i]))
        out[i] = run
    return out


def _bh_by_hand(p: list[float], m: int) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, run = [0.0] * len(p), 1.0
    for j in reversed(range(len(p))):
        i = order[j]
        run = min(run, min(1.0, m * p[i] / (j + 1)))
        out[i] = run
    return out


def test_bonferroni_holm_bh_match_hand_computation():
    g = torch.Generator().manual_seed(5)
    p = torch.rand(3, 8, generator=g, dtype=torch.float64) ** 3  # (3, 8): small p-values
    for m in (8, 100):
        bon, hol, bh = stats.bonferroni(p, m), stats.holm(p, m), stats.benjamini_hochberg(p, m)
        for t in (bon, hol, bh):
            assert t.shape == (3, 8) and t.dtype == torch.float64
        assert torch.allclose(bon, (p * m).clamp(max=1))
        for r in range(3):
            assert np.allclose(hol[r].numpy(), _holm_by_hand(p[r].tolist(), m), rtol=1e-14)
            assert np.allclose(bh[r].numpy(), _bh_by_hand(p[r].tolist(), m), rtol=1e-14)
        assert bool((hol <= bon + 1e-15).all()) and bool((bh <= hol + 1e-15).all())
    # the family along another dim
    assert torch.allclose(stats.holm(p.T, dim=0), stats.holm(p).T)


def test_holm_of_the_smallest_members_is_exact():
    """Given only the k smallest of m p-values, Holm's adjusted values equal the full family's."""
    g = torch.Generator().manual_seed(6)
    full = torch.rand(200, generator=g, dtype=torch.float64) ** 4  # (m,)
    smallest = torch.sort(full).values[:5]
    assert torch.allclose(stats.holm(smallest, m=200), torch.sort(stats.holm(full)).values[:5])
    assert bool((stats.benjamini_hochberg(smallest, m=200) >= torch.sort(stats.benjamini_hochberg(full)).values[:5] - 1e-15).all())


# ============================================================================ bad input
@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, float("nan"), "x"])
def test_alpha_outside_unit_interval_is_refused(alpha):
    for fn in (stats.check_alpha, stats.log10_threshold, stats.normal_isf, stats.hoeffding_threshold, stats.conformal_min_size):
        with pytest.raises(InputError, match="alpha must"):
            fn(alpha)
    with pytest.raises(InputError, match="alpha must"):
        stats.conformal_quantile(torch.ones(10), alpha)


def test_bad_samples_are_refused_with_clear_messages():
    with pytest.raises(InputError, match="at least one null score"):
        stats.conformal_quantile(torch.zeros(0), 0.1)
    with pytest.raises(InputError, match="null scores contains NaN"):
        stats.conformal_quantile(torch.tensor([0.0, float("nan")]), 0.1)
    with pytest.raises(InputError, match="k contains NaN"):
        stats.binomial_logsf(torch.tensor([float("nan")]), torch.tensor([3]), 0.5)
    with pytest.raises(InputError, match="p must be in"):
        stats.binomial_logsf(torch.tensor([1]), torch.tensor([3]), 1.5)
    with pytest.raises(InputError, match="z contains NaN"):
        stats.normal_sf(torch.tensor([float("nan")]))
    with pytest.raises(InputError, match=r"lie in \[0, 1\]"):
        stats.holm(torch.tensor([0.5, 1.2]))
    with pytest.raises(InputError, match="p-values contains NaN"):
        stats.bonferroni(torch.tensor([float("nan")]))
    with pytest.raises(InputError, match="non-empty family"):
        stats.benjamini_hochberg(torch.zeros(0))
    with pytest.raises(InputError, match="smaller than"):
        stats.holm(torch.tensor([0.1, 0.2, 0.3]), m=2)


# ============================================================================ one detection signature
def test_one_detection_signature_across_schemes_and_score_functions():
    """Every registered scheme and score function: analytic_threshold(alpha, n_tokens) -> float (same
    parameters), refusing α outside (0, 1); score_ids / p_values return SchemeScores of (B,) fields."""
    reg = get_registry()
    want = ["self", "alpha", "n_tokens"]
    for kind in ("scheme", "score"):
        for name in reg.names(kind):
            sig = inspect.signature(reg.get(kind, name).analytic_threshold).parameters.values()
            params = [(p.name, p.default is inspect.Parameter.empty) for p in sig]
            assert params == [(w, True) for w in want], (kind, name, params)  # n_tokens required everywhere
    V = 64
    ids = torch.randint(0, V, (3, 24), generator=torch.Generator().manual_seed(7))
    valid = torch.ones_like(ids, dtype=torch.bool)
    small = {"global-sketch": {"prior": {"source": "uniform"}}, "kth-exp-edit": {"key_len": 16, "n_permutations": 9},
             "global-sketch-family": {"member": {"prior": {"source": "uniform"}}},
             "keyed-family": {"inner": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}},
                              "members": 4, "decoys": 4}}
    for name in reg.names("scheme"):
        scheme = reg.create("scheme", name, small.get(name, {}), KEY, V)
        s = scheme.score_ids(ids, valid)
        assert isinstance(s, SchemeScores)
        assert all(f.shape == (3,) for f in (s.score, s.z, s.p_value, s.n_scored)), name
        try:
            scheme.analytic_threshold(0.01, 24)
        except NotImplementedError:
            continue
        with pytest.raises(InputError, match="alpha must"):
            scheme.analytic_threshold(1.5, 24)
    h = torch.randint(-2, 3, (3, 32), generator=torch.Generator().manual_seed(8)).double() / math.sqrt(24)
    u = torch.ones(32, dtype=torch.float64)
    n = torch.full((3,), 24)
    for name in reg.names("score"):
        sc = reg.create("score", name, {}, 32, 16)
        out = sc.p_values(u, h, n)
        assert isinstance(out, SchemeScores) and out.n_scored.tolist() == [24, 24, 24] and out.p_value.shape == (3,)
        with pytest.raises(InputError, match="alpha must"):
            sc.analytic_threshold(0.0, 24)
