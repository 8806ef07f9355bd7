"""The one-pass column sums of the masked marginals (sketchwm.marginal_sums) against the dense formulas,
and the linearised presence tilt against the exact one within its stated bound (issue 15)."""

from __future__ import annotations

import pytest
import torch

from sketchwm.components import DenoiseStep, Marginals
from sketchwm.keys import WatermarkKey
from sketchwm.marginal_sums import masked_marginal_sums
from sketchwm.registry import get_registry


def _peaked_logits(B: int, R: int, V: int, seed: int) -> torch.Tensor:
    """LM-like rows: a few tokens far above a flat tail, some rows almost one-hot."""
    g = torch.Generator().manual_seed(seed)
    logits = 0.5 * torch.randn(B, R, V, generator=g)
    top = torch.randint(0, V, (B, R, 4), generator=g)
    logits.scatter_add_(2, top, torch.rand(B, R, 4, generator=g) * 14.0)
    return logits


def _dense(logits: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.softmax(logits.double(), -1)
    w = valid.double()[..., None]
    return (p * w).sum(1), (torch.log1p(-p.clamp(max=1 - 1e-6)) * w).sum(1)


@pytest.mark.parametrize("chunk", [1 << 20, 700])  # one block, and many blocks straddling texts
def test_sums_match_the_dense_formulas_within_the_tail_bound(chunk):
    B, R, V, eps = 3, 17, 6000, 1e-3
    logits = _peaked_logits(B, R, V, 0)
    valid = torch.rand(B, R, generator=torch.Generator().manual_seed(1)) < 0.7
    before = logits.clone()
    s = masked_marginal_sums(logits, valid, eps=eps, chunk_elements=chunk)
    assert torch.equal(logits, before)
    mass, log_absent = _dense(logits, valid)
    assert not s.dense and 0 < s.cols.numel() < V
    torch.testing.assert_close(s.mass.double(), mass, rtol=1e-5, atol=1e-6)
    # every column holding p >= eps somewhere is exact; the tail's error is at most eps/(2(1-eps)) of |sum|
    p = torch.softmax(logits.double(), -1)
    must = (p.amax((0, 1)) >= eps).nonzero()[:, 0]
    assert set(must.tolist()) <= set(s.cols.tolist())
    assert s.tail_max < eps
    err = (s.log_absent.double() - log_absent).abs()
    bound = eps / (2 * (1 - eps)) * log_absent.abs() + 1e-6
    assert bool((err <= bound).all()), float((err - bound).max())
    exact = torch.zeros(V, dtype=torch.bool)
    exact[s.cols] = True
    torch.testing.assert_close(s.log_absent.double()[:, exact], log_absent[:, exact], rtol=1e-4, atol=1e-5)
    # the tail is really linearised (not silently dense): it differs from the exact sum somewhere
    assert float(err[:, ~exact].max()) > 0


def test_eps_zero_and_too_many_exact_columns_are_dense():
    B, R, V = 2, 5, 300
    logits = _peaked_logits(B, R, V, 2)
    valid = torch.ones(B, R, dtype=torch.bool)
    mass, log_absent = _dense(logits, valid)
    for s in (masked_marginal_sums(logits, valid, eps=0.0), masked_marginal_sums(logits, valid, eps=1e-9)):
        assert s.dense
        torch.testing.assert_close(s.log_absent.double(), log_absent, rtol=1e-5, atol=1e-6)
    count = masked_marginal_sums(logits, valid, log_absent=False)
    assert count.log_absent is None
    torch.testing.assert_close(count.mass.double(), mass, rtol=1e-5, atol=1e-6)


def test_invalid_rows_do_not_enter_the_sums():
    B, R, V = 2, 6, 500
    logits = _peaked_logits(B, R, V, 3)
    valid = torch.tensor([[True, False, True, False, True, True], [False, False, True, True, True, False]])
    other = logits.clone()
    other[~valid] = torch.randn(int((~valid).sum()), V) * 9.0
    a, b = masked_marginal_sums(logits, valid), masked_marginal_sums(other, valid)
    torch.testing.assert_close(a.mass, b.mass)
    # the exact columns may differ (invalid rows only ever add columns), the sums agree within the bound
    torch.testing.assert_close(a.log_absent, b.log_absent, rtol=1e-3, atol=1e-5)


def test_bad_shapes_and_eps_are_refused():
    with pytest.raises(ValueError, match="must be"):
        masked_marginal_sums(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="eps"):
        masked_marginal_sums(torch.zeros(1, 2, 3), torch.ones(1, 2, dtype=torch.bool), eps=-1.0)


def test_linearised_tilt_is_within_its_bound_of_the_exact_tilt():
    """process_logits with tail_epsilon ε against ε = 0 (exact), same step: |Δa| <= ε/(1 − ε)·|a|."""
    reg = get_registry()
    B, G, V, eps = 2, 24, 3000, 1e-3
    key = WatermarkKey(b"test key for the tail bound 0123")
    fast = reg.create("scheme", "global-sketch", {"tail_epsilon": eps, "prior": {"source": "uniform"}}, key, V)
    exact = reg.create("scheme", "global-sketch", {"tail_epsilon": 0.0, "prior": {"source": "uniform"}}, key, V)
    logits = _peaked_logits(B, G, V, 4)
    g = torch.Generator().manual_seed(5)
    masked = torch.rand(B, G, generator=g) < 0.6
    tokens = torch.where(masked, 0, torch.randint(1, V, (B, G), generator=g))
    outs = []
    for sch in (fast, exact):
        sch.begin(B, G, torch.zeros(B, 1, dtype=torch.long), torch.ones(B, 1, dtype=torch.bool))
        step = DenoiseStep(3, 12, tokens, masked, Marginals.canvas(logits.clone(), masked),
                           torch.zeros(B, 1, dtype=torch.long), torch.ones(B, 1, dtype=torch.bool), (0, G), 0)
        outs.append(sch.process_logits(step) - logits)  # η a
    shift_fast, shift_exact = outs
    assert float(shift_exact[masked].abs().max()) > 0.1  # the tilt is real
    err = (shift_fast - shift_exact)[masked].abs()
    # a's relative error ≤ ε/(1−ε) through the tilt, plus the expected sketch's own ε/2 relative error
    assert bool((err <= 2 * eps / (1 - eps) * shift_exact[masked].abs() + 1e-5).all())
    assert float(err.max()) > 0  # the fast path is not the exact one in disguise


def test_marginals_out_must_match_the_targets():
    logits = torch.zeros(2, 5, 7)
    masked = torch.ones(2, 5, dtype=torch.bool)
    Marginals.canvas(logits, masked, out=torch.empty(2, 5, 7))
    with pytest.raises(ValueError, match="out"):
        Marginals.canvas(logits, masked, out=torch.empty(2, 4, 7))


def test_row_logsumexp_matches_torch_in_cache_blocks():
    from sketchwm.marginal_sums import row_logsumexp

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 37, 1000, generator=g) * 4
    x[0, 3, :990] = float("-inf")  # a row with few finite entries
    for chunk in (1000, 5000, 1 << 20):  # one row per block, several, everything at once
        torch.testing.assert_close(row_logsumexp(x, chunk_elements=chunk), torch.logsumexp(x, -1), rtol=1e-6, atol=1e-5)
    # the probe entry j (the first row's largest) banned in some rows, and a row with no finite entry
    j = int(x.reshape(-1, 1000)[0].argmax())
    y = x.clone()
    y[1, 5:9, j] = float("-inf")
    y[1, 20] = float("-inf")
    got = row_logsumexp(y, chunk_elements=5000)
    assert torch.isneginf(got[1, 20]) and torch.isfinite(got[1, 5:9]).all()
    torch.testing.assert_close(got, torch.logsumexp(y, -1), rtol=1e-6, atol=1e-5)
    assert row_logsumexp(torch.empty(0, 1000)).shape == (0,)
