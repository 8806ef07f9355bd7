"""The row scans of the cut-text expected sketch (issue 15) against plain float64 sums.

:meth:`Sketch.expected_weights_stopping` computes, per token v, products and suffix sums over the
masked rows with in-place Brent-Kung scans (:func:`sketchwm.components.scan_rows_`). Here the same
quantities are written directly from their definitions, in float64, on random canvases with
EOS-heavy rows, near-one marginals (the factor floored at 10⁻⁶), frozen tokens before and after a
frozen EOS, a repeated frozen token, a text without a frozen EOS, on the full state and on packed
rows with padding. Tolerances: ŵ and ∂ŵ/∂p within 2e-5 absolute (|∂ŵ/∂p| ≤ 1, float32 factors
multiplied over ≤ 40 rows), n̂ within 1e-5 relative.

Reference (e the stop token; frozen rows one-hot on their token y_j): c_j(v) = max(1 − p_j(e) − p_j(v),
10⁻⁶) on masked rows, 1 − 1[y_j = e] − 1[y_j = v] on frozen ones; A_L(v) = Π_{j<L} c_j(v);
1 − ŵ_v = Σ_{L<G} A_L(v) p_L(e) + A_G(v); ∂ŵ_v/∂p_i(v) = Σ_{L>i} Π_{j<L, j≠i} c_j(v) p_L(e) + Π_{j≠i} c_j(v)
(no division); ŵ_e = 0 and ∂ŵ_e = 0; ``count`` (dw one column, the row factor): ŵ_v = Σ_i r_i P_i(v), r_i = Π_{j<i}(1 − p_j(e)),
n̂ = Σ_i r_i (1 − p_i(e)), ∂ŵ_v/∂p_i(v) = r_i.
"""

from __future__ import annotations

import pytest
import torch

from sketchwm.components import scan_rows_
from sketchwm.engine import packed_masked_positions
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry

V, G, B, EOS = 50, 40, 3, 7


@pytest.mark.parametrize("M", [0, 1, 2, 3, 5, 8, 13, 31, 32, 33, 40, 64, 100])
def test_scan_rows_equals_cumsum_and_cumprod(M):
    g = torch.Generator().manual_seed(M)
    for C in (3, 2048):
        x = torch.rand(2, M, C, generator=g, dtype=torch.float64) + 0.5
        assert torch.allclose(scan_rows_(x.clone(), "add"), x.cumsum(1))
        assert torch.allclose(scan_rows_(x.clone(), "mul"), x.cumprod(1))
        assert torch.allclose(scan_rows_(x.clone(), "add", reverse=True), x.flip(1).cumsum(1).flip(1))
        assert torch.allclose(scan_rows_(x.clone(), "mul", reverse=True), x.flip(1).cumprod(1).flip(1))


def _sketch(counting):
    sk = {"name": "count-sketch", "params": {"d": 2, "w": 8, "counting": counting, "exclude_top": 3}}
    params = {"sketch": sk, "prior": {"source": "uniform"}}
    if counting == "count":
        params["null"] = "key-randomised"
    sch = get_registry().create("scheme", "global-sketch", params, WatermarkKey(b"\x05" * 32), V)
    return sch.sketch


def _canvas(seed):
    """logits (B, G, V), tokens (B, G), masked (B, G): text 0 with a frozen EOS at 30 and frozen tokens
    before and after it, text 1 EOS-heavy with near-one marginals and no frozen EOS, text 2 mixed."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, G, V, generator=g) * 2
    tokens = torch.randint(10, V, (B, G), generator=g)
    masked = torch.rand(B, G, generator=g) < 0.7
    masked[0, [2, 9, 12, 30, 35]] = False
    tokens[0, 12] = tokens[0, 2]  # a repeated frozen token
    tokens[0, 30] = EOS  # frozen EOS: everything after it is cut
    tokens[0, 35] = 21  # frozen after the cut: does not count
    logits[0, 1:6, 21] += 6.0  # ... while masked rows before the cut favour it
    logits[1, :, EOS] += torch.linspace(-1.0, 4.0, G)  # EOS-heavy towards the end
    logits[1, 3, 15] += 40.0  # near-one marginals: the factor is floored at 1e-6
    logits[1, 17, EOS] += 40.0
    masked[1, [4, 20]] = False
    logits[2, ::3, EOS] += 2.5
    masked[2, 0] = False
    tokens[2, 0] = tokens[2, 5]
    masked[2, 5] = True
    tokens[masked] = V
    return logits, tokens, masked


def _reference(sketch, probs, tokens, masked):
    """ŵ (B, V), n̂ (B,), dw (B, G, V) in float64 on the canvas (frozen rows one-hot)."""
    keep = sketch.keep.double() if sketch.keep is not None else torch.ones(V, dtype=torch.float64)
    w_all, n_all, dw_all = [], [], []
    for b in range(B):
        onehot = torch.nn.functional.one_hot(tokens[b].clamp(max=V - 1), V).double()
        P = torch.where(masked[b, :, None], probs[b].double(), onehot)  # (G, V)
        pe = P[:, EOS]
        dw = torch.zeros(G, V, dtype=torch.float64)
        if sketch.counting == "count":
            r = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(1 - pe, 0)[:-1]])  # (G,)
            w = (r[:, None] * P).sum(0)
            n = (r * (1 - pe)).sum()
            dw[masked[b]] = r[masked[b], None]
        else:
            c = torch.where(masked[b, :, None], (1 - pe[:, None] - P).clamp(min=1e-6), 1 - pe[:, None] - P)  # (G, V)
            A = torch.cat([torch.ones(1, V, dtype=torch.float64), torch.cumprod(c, 0)])  # A_L, L = 0..G
            w = 1 - ((A[:G] * pe[:, None]).sum(0) + A[G])
            for i in range(G):
                if not masked[b, i]:
                    continue
                ci = c.clone()
                ci[i] = 1.0  # Π_{j<L, j≠i} c_j
                Ai = torch.cat([torch.ones(1, V, dtype=torch.float64), torch.cumprod(ci, 0)])
                dw[i] = (Ai[i + 1: G] * pe[i + 1:, None]).sum(0) + Ai[G]
        w = w * keep
        w[EOS] = 0.0
        if sketch.counting == "presence":  # count: dw is the row factor r_i (EOS is left untilted by the caller)
            dw[:, EOS] = 0.0
        w_all.append(w)
        n_all.append(w.sum() if sketch.counting == "presence" else n)
        dw_all.append(dw)
    return torch.stack(w_all), torch.stack(n_all), torch.stack(dw_all)


@pytest.mark.parametrize("counting", ["presence", "count"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cut_sketch_scans_equal_float64_sums(counting, seed):
    sketch = _sketch(counting)
    logits, tokens, masked = _canvas(seed)
    probs = torch.softmax(logits, -1)  # (B, G, V) float32
    w_ref, n_ref, dw_ref = _reference(sketch, probs, tokens, masked)
    # full state: every canvas row, the masked ones valid
    pos = torch.arange(G).expand(B, -1)
    w, n, dw = sketch.expected_weights_stopping(tokens, masked, probs.clone(), pos, masked, EOS)
    dw = dw.expand(B, G, V)
    assert torch.allclose(w.double(), w_ref, atol=2e-5, rtol=0)
    assert torch.allclose(n.double(), n_ref.clamp(min=1.0), rtol=1e-5, atol=0)
    assert torch.allclose(dw.double(), dw_ref, atol=2e-5, rtol=0)  # frozen rows and rows after the cut: 0
    # packed: the masked rows in order, padded rows invalid and filled with garbage
    mpos, mvalid = packed_masked_positions(masked)
    packed = torch.gather(probs, 1, mpos[..., None].expand(-1, -1, V)).clone()
    packed[~mvalid] = 0.5
    wp, n_p, dwp = sketch.expected_weights_stopping(tokens, masked, packed.clone(), mpos, mvalid, EOS)
    dwp = dwp.expand(-1, -1, V)
    assert torch.allclose(wp.double(), w_ref, atol=2e-5, rtol=0)
    assert torch.allclose(n_p, n, rtol=1e-6)
    ref_rows = torch.gather(dw_ref, 1, mpos[..., None].expand(-1, -1, V))
    assert torch.allclose(dwp[mvalid].double(), ref_rows[mvalid], atol=2e-5, rtol=0)
    assert torch.all(dwp[~mvalid] == 0)
    # dw at chosen rows only (the rows to tilt): the same values, on both layouts
    g = torch.Generator().manual_seed(seed)
    for layout_probs, layout_pos, layout_valid, full_dw in ((probs, pos, masked, dw), (packed, mpos, mvalid, dwp)):
        rows = torch.randint(0, layout_pos.shape[1], (B, 5), generator=g)
        rows[0, 0] = 0
        rows[:, -1] = layout_pos.shape[1] - 1  # the last row: its tail is A_M alone
        wr, nr, dwr = sketch.expected_weights_stopping(tokens, masked, layout_probs.clone(), layout_pos, layout_valid, EOS,
                                                       rows=rows)
        assert torch.allclose(wr, w, atol=1e-6) and torch.allclose(nr, n, rtol=1e-6)
        want = torch.gather(full_dw, 1, rows[..., None].expand(-1, -1, V))
        assert torch.allclose(dwr.expand_as(want), want, atol=2e-6, rtol=1e-5)


def test_tail_after_a_floored_factor_is_not_a_difference_of_sums():
    """At a row whose factor is floored (p(v) ≈ 1, q = 10⁻⁶) the derivative is the tail divided by 10⁻⁶:
    a tail taken as p0 minus a float32 prefix sum (the former code) loses it to cancellation (error up
    to ~0.1 of the value); the direct suffix sum keeps it to float rounding."""
    sketch = _sketch("presence")
    logits, tokens, masked = _canvas(1)
    probs = torch.softmax(logits, -1)
    _, _, dw_ref = _reference(sketch, probs, tokens, masked)
    pos = torch.arange(G).expand(B, -1)
    _, _, dw = sketch.expected_weights_stopping(tokens, masked, probs.clone(), pos, masked, EOS)
    row = dw_ref[1, 3]  # the near-one row of text 1 (token 15)
    assert float(row[15]) > 1e-3
    assert torch.allclose(dw[1, 3].double(), row, rtol=1e-4, atol=1e-6)
