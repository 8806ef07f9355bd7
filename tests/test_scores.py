"""Score functions and key-randomised p-values (eq. 2, 17-19)."""

import math

import pytest
import torch
from scipy.stats import kstest

from sketchwm.errors import ConfigError
from sketchwm.keys import WatermarkKey
from sketchwm.stats import rademacher_sum_pvalue
from sketchwm_builtin.scores import PenalizedScore, ZScore
from sketchwm_builtin.global_sketch import GlobalSketchScheme


def test_penalized_score_definition():
    sc = PenalizedScore({"gamma": 0.5}, dim=8, width=4)
    assert sc.lam == pytest.approx(0.5 * 2)
    u = torch.tensor([1, -1, 1, 1, -1, -1, 1, 1.0])
    h = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    expect = 2 * (h.double() @ u.double()) - sc.lam * (h.double() ** 2).sum(1)
    assert torch.allclose(sc.score(u, h), expect)
    # completing the square (eq. 3)
    alt = -sc.lam * ((h.double() - u.double() / sc.lam) ** 2).sum(1) + (u.double() ** 2).sum() / sc.lam
    assert torch.allclose(sc.score(u, h), alt)
    assert sc.analytic_threshold(0.01, 64) == pytest.approx(2 / sc.lam * math.log(100))
    assert torch.allclose(sc.residual(u, h.float()), u[None] - sc.lam * h)


def test_exact_pvalue_agrees_with_monte_carlo_and_bounds():
    sc = PenalizedScore({}, dim=256, width=64)
    g = torch.Generator().manual_seed(2)
    N = torch.tensor([100, 150])
    H = torch.randint(-2, 3, (2, 256), generator=g)
    h = H.double() / N.double().sqrt()[:, None]
    u = torch.randint(0, 2, (256,), generator=g).double() * 2 - 1
    ex = sc.p_values(u, h, method="exact", n_tokens=N)
    mc = sc.p_values(u, h, method="monte-carlo", n_tokens=N, n_mc=40000)
    assert "exact" in ex.p_value_method
    assert torch.allclose(ex.p_value, mc.p_value, atol=0.01)
    bound = sc.p_values(u, h, method="bound", n_tokens=N)
    assert bool((bound.p_value >= ex.p_value - 1e-12).all())  # Hoeffding is an upper bound
    with pytest.raises(ConfigError, match="unknown p-value method"):
        sc.p_values(u, h, N, method="magic")


def test_null_pvalues_uniform_and_analytic_fpr_over_random_keys():
    """Texts independent of the key: p-values uniform (KS) and FPR at τ_α <= α over many keys."""
    V = 300
    g = torch.Generator().manual_seed(3)
    texts = torch.randint(0, V, (1, 80), generator=g)
    valid = torch.ones_like(texts, dtype=torch.bool)
    pv, rand_pv, hits_pen, hits_z = [], [], 0, 0
    n_keys = 400
    for i in range(n_keys):
        key = WatermarkKey(i.to_bytes(4, "big") * 8)
        sch = GlobalSketchScheme({"prior": {"source": "uniform"}, "score": {"name": "penalized", "params": {"gamma": 0.25}}}, key, V)
        s = sch.score_ids(texts, valid)
        pv.append(float(s.p_value[0]))
        # randomised version of the same exact p-value: P(X > x) + U·P(X = x) is exactly U(0,1)
        H = (sch.sketch.sketch(texts) * math.sqrt(80)).round().long()
        x = int((H.double() @ sch.u.double()).round())
        p_ge = float(rademacher_sum_pvalue(H, torch.tensor([x])))
        p_gt = float(rademacher_sum_pvalue(H, torch.tensor([x + 2])))  # the lattice of X has step 2
        rand_pv.append(p_gt + float(torch.rand(1, generator=g)) * (p_ge - p_gt))
        hits_pen += int(float(s.score[0]) >= sch.analytic_threshold(0.05, 80))
        hits_z += int(float(s.z[0]) >= ZScore({}, 1, 1).analytic_threshold(0.05, 80))
    assert kstest(rand_pv, "uniform").pvalue > 0.01
    # the exact (non-randomised) p-value of a discrete statistic is valid: P(p <= a) <= a
    for a in (0.05, 0.1, 0.25, 0.5):
        assert sum(p <= a for p in pv) / n_keys <= a + 0.03
    assert hits_pen / n_keys <= 0.05 + 0.02
    assert hits_z / n_keys <= 0.05 + 0.02
