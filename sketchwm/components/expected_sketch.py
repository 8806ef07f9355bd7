"""The expected sketch of a text cut at its first EOS: row scans over the masked marginals.

Used by :meth:`sketchwm.components.sketch.Sketch.expected_weights_stopping`; the model and its
derivation are in the module doc of ``sketchwm_builtin.global_sketch.embed``.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
import torch

from .cpu import serial_on_cpu

__all__ = ["scan_rows_", "stop_absence_", "stop_absence_at_rows", "expected_weights_stopping", "scratch_buffer",
           "capped_column_sums", "capped_expected_weights", "capped_row_derivative"]


def scan_rows_(x: torch.Tensor, op: str = "add", reverse: bool = False) -> torch.Tensor:
    """Inclusive prefix sum (``op="add"``) or product (``"mul"``) of x (B, M, ...) along dim 1, in place.

    ``reverse``: the suffix instead, x_j ← x_j ∘ x_{j+1} ∘ … ∘ x_{M−1}. A Brent-Kung scan: 2⌈log₂ M⌉
    in-place ``add_``/``mul_`` on strided views of whole rows (each row contiguous), ≈ 2M row updates
    in all. ``torch.cumsum``/``cumprod`` along a non-last dim walk every column separately with a
    stride of one row and cost ~5-8× that on CPU at (1, 256, 126464) float32. Returns x.
    Rounding: each output is a sum (product) of its inputs in a tree order, within float rounding
    of the sequential one.
    """
    M = x.shape[1]
    apply = torch.Tensor.add_ if op == "add" else torch.Tensor.mul_
    small = max(1, (1 << 20) // max(1, x[:, :1].numel()))  # levels updating fewer rows run on one thread

    def rows(first: int, n: int, step: int) -> torch.Tensor:  # rows first, first + step, … (n of them), mirrored if reverse
        lo = M - 1 - (first + step * (n - 1)) if reverse else first
        return x[:, lo: lo + step * (n - 1) + 1: step]

    up = [d for d in (1 << k for k in range(M.bit_length())) if 2 * d <= M]  # up-sweep strides
    down = [d for d in reversed(up) if M >= 3 * d]  # down-sweep strides
    levels = [(2 * d - 1, d - 1, (M - 2 * d) // (2 * d) + 1, 2 * d) for d in up]  # row 2d−1 + 2dk += the 2d rows ending there
    levels += [(3 * d - 1, 2 * d - 1, (M - 3 * d) // (2 * d) + 1, 2 * d) for d in down]  # row 3d−1 + 2dk += prefix at 2d−1 + 2dk
    for big, group in itertools.groupby(levels, key=lambda lv: lv[2] > small):
        with contextlib.nullcontext() if big else serial_on_cpu(x.device):  # a pool wake costs more than a small level
            for target, source, n, step in group:
                apply(rows(target, n, step), rows(source, n, step))
    return x


def stop_absence_(q: torch.Tensor, pe: torch.Tensor, final: torch.Tensor | None, work: torch.Tensor) -> torch.Tensor:
    """P(token v absent from the text cut at its first EOS) and its row derivatives, by two row scans.

    With A_L = Π_{j<L} q_j (exclusive product over the rows) and A_M the product of all rows:

        p0 = Σ_L A_L pe_L + final · A_M,   q_i ← (Σ_{L>i} A_L pe_L + final · A_M) / q_i   (in place),

    the second being ∂(1 − p0)/∂p_i(v) when q_j = 1 − p_j(e) − p_j(v) (the tail is the direct suffix
    sum, not p0 minus a prefix sum, so it does not cancel). Rows that do not count carry q = 1 and
    pe = 0. Used by :func:`expected_weights_stopping` (see there for the model).

    Args:
        q: (B, M, C) float factors, > 0; OVERWRITTEN with the derivatives.
        pe: (B, M, 1) or (B, M, C) p_L(e).
        final: (B, C) multiplier of A_M (1, or 0 where a frozen v is reached), or None for 1.
        work: (B, M, C) scratch of q's dtype, overwritten.

    Returns:
        p0 (B, C).
    """
    if q.shape[1] == 0:
        p0 = torch.ones(q.shape[0], q.shape[2], dtype=q.dtype, device=q.device)
        return p0 if final is None else p0 * final
    work[:, :1].fill_(1.0)
    work[:, 1:].copy_(q[:, :-1])
    scan_rows_(work, "mul")  # A_L
    with serial_on_cpu(q.device):  # (B, C)
        a_end = work[:, -1] * q[:, -1]  # A_M
        if final is not None:
            a_end.mul_(final)
    scan_rows_(work.mul_(pe), "add", reverse=True)  # Σ_{L'≥L} A_L' pe_L'
    with serial_on_cpu(q.device):
        p0 = work[:, 0] + a_end
        q[:, -1] = a_end / q[:, -1]
    tail = work[:, 1:].add_(a_end[:, None, :])  # row i < M − 1: Σ_{L>i} A_L pe_L + final A_M
    torch.div(tail, q[:, :-1], out=q[:, :-1])
    return p0


def scratch_buffer(owner: Any, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor of ``shape``, its storage kept on ``owner`` and reused across calls (a fresh
    (B, M, V) allocation's page faults cost as much as a pass over it on CPU); overwritten at the
    next call, so callers must not keep it."""
    n = int(np.prod(shape))
    flat = owner.__dict__.get("_scratch_buf")
    if flat is None or flat.numel() < n or flat.device != torch.device(device) or flat.dtype != dtype:
        flat = torch.empty(n, dtype=dtype, device=device)
        owner.__dict__["_scratch_buf"] = flat
    return flat[:n].view(shape)


def stop_absence_at_rows(
    q: torch.Tensor, p_e: torch.Tensor, inside: torch.Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stop_absence_` with the derivatives at K rows only: (p0 (B, V), dw (B, K, V)).

    q (B, M, V) factors (1 on rows outside), OVERWRITTEN with the running products
    C_L = Π_{j≤L} q_j; p_e (B, M) (0 outside); inside (B, M) bool; rows (B, K) int64. With
    A_L = C_{L−1}: tail_i = Σ_{L>i} A_L p_L(e) + A_M = Σ_{i≤L<M−1} C_L p_{L+1}(e) + C_{M−1} and
    p0 = p_0(e) + tail_{−1}, so the K tails and p0 are one batched product of the weights
    p_{L+1}(e)·1[L ≥ i] (1 at L = M − 1) with C; dw_i = tail_i / q_i.
    """
    B, M, V = q.shape
    dev = q.device
    if M == 0:
        return torch.ones(B, V, dtype=q.dtype, device=dev), torch.zeros(B, rows.shape[1], V, dtype=q.dtype, device=dev)
    q_rows = torch.gather(q, 1, rows[..., None].expand(-1, -1, V))  # (B, K, V)
    scan_rows_(q, "mul")  # C_L
    with serial_on_cpu(dev):
        nxt = torch.cat([p_e[:, 1:], torch.ones(B, 1, dtype=q.dtype, device=dev)], 1)  # (B, M) weight of C_L
        start = torch.cat([rows, torch.zeros(B, 1, dtype=rows.dtype, device=dev)], 1)  # (B, K + 1); last: p0
        wt = nxt[:, None, :] * (torch.arange(M, device=dev)[None, None, :] >= start[..., None]).to(q.dtype)
    out = torch.bmm(wt, q)  # (B, K + 1, V)
    with serial_on_cpu(dev):
        p0 = out[:, -1] + p_e[:, :1]
    dw = torch.div(out[:, :-1], q_rows, out=q_rows)  # (B, K, V) contiguous
    with serial_on_cpu(dev):
        dw.masked_fill_(~torch.gather(inside, 1, rows)[..., None], 0.0)
    return p0, dw


def expected_weights_stopping(
    sketch: Any, tokens: torch.Tensor, masked: torch.Tensor, probs: torch.Tensor,
    positions: torch.Tensor, valid: torch.Tensor, eos: int, rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """E[x(Y_{<L})] of the text cut at its first EOS, under independent marginals, and its derivative.

    The text is the canvas before the first EOS, L = min{i : Y_i = EOS} (G if none): what
    detection scores (:mod:`sketchwm.engine` cuts there). Position i is inside the text with
    probability r_i = Π_{j<i}(1 − p_j(e)) (frozen positions one-hot, e = EOS), independently of
    Y_i. With A_L(v) = Π_{j<L}(1 − p_j(e) − p_j(v)) (no EOS and no v before L):

    * ``count``: E[x_v] = Σ_i r_i p_i(v) (v ≠ e), E[x_e] = 0; n̂ = E[L] = Σ_i r_i (1 − p_i(e));
      ∂E[x_v]/∂p_i(v) = r_i (r and n̂ depend on the EOS marginals only).
    * ``presence``: P(x_v = 0) = Σ_L P(L) P(no v before L | no EOS before L)
      = Σ_{L<G} A_L(v) p_L(e) + A_G(v); E[x_e] = 0; n̂ = Σ_v keep_v E[x_v];
      ∂E[x_v]/∂p_i(v) = (Σ_{L>i} A_L(v) p_L(e) + A_G(v)) / (1 − p_i(e) − p_i(v)), zero once a
      frozen v or a frozen EOS precedes i. For v ≠ e, E[x_{v'}] does not depend on p_i(v)
      for v' ≠ v, so this diagonal is the whole Jacobian in the content tokens.

    Frozen positions enter through f, the first frozen EOS (everything after it is cut), and
    g_v, the first frozen position holding v (x_v = 1 if no EOS is drawn before it). Without
    EOS mass (p(e) = 0 everywhere) this is :meth:`Sketch.expected_weights` exactly. Vectorised over
    batch × masked rows × vocabulary; ``presence`` costs two in-place row scans over (B, M, V)
    (:func:`stop_absence_`: the product A_L, then the suffix sum of A_L p_L(e), so the tail is
    not a difference of cumulative sums) and a reused scratch buffer; the ≤ G columns per text
    of tokens frozen before the first frozen EOS are redone apart on (n, M) with their cut at g_v.

    Args:
        tokens: (B, G) int64 current tokens; masked: (B, G) bool, M_t.
        probs: (B, M, V) float32 marginals of the masked rows, in increasing position order
            (packed, or the full (B, G, V) state); OVERWRITTEN (``presence``: it becomes dw).
        positions: (B, M) int64 canvas position of each row of ``probs`` (increasing per text on
            the valid rows); valid: (B, M) bool, which rows are masked positions.
        eos: the EOS id e, in [0, V).
        rows: (B, K) int64 rows of ``probs`` at which dw is wanted (the rows to tilt), or None for
            every row. With ``presence`` this skips the suffix scan and the scratch buffer: the
            tails at K rows are one (B, K + 1, M) × (B, M, V) product with the running products
            (cheaper while K ≪ M).

    Returns:
        w_hat (B, V) float32 (0 at e and on excluded tokens), n_hat (B,) float32 (≥ 1), and
        dw (B, M, 1) for ``count`` (r_i) or (B, M, V) for ``presence`` (the storage of ``probs``),
        (B, K, ·) at ``rows`` if given (a fresh tensor): ∂ŵ_v/∂p_i(v) at each row (0 on invalid
        rows, at e, after a frozen EOS and, in column v, from v's first frozen position on).
        Source: eq. (5) extended to the text cut at its first EOS (the paper has no EOS; derivation in
        the module doc of ``sketchwm_builtin.global_sketch.embed``).
    
    ``sketch``: the :class:`~sketchwm.components.sketch.Sketch` (its ``counting``, ``keep`` and
    scratch buffer). :meth:`Sketch.expected_weights_stopping` is this function.
    """
    B, G = tokens.shape
    V = probs.shape[-1]
    dev = probs.device
    with serial_on_cpu(dev):  # (B, G) and (B, V) bookkeeping on one thread (see serial_on_cpu)
        vmask = valid.to(probs.dtype)  # (B, M)
        frozen = ~masked
        is_eos = frozen & (tokens == eos)
        f = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full((B,), G, device=dev))  # (B,) first frozen EOS
        inside = (positions < f[:, None]) & valid  # (B, M) masked rows before the first frozen EOS
        p_e = probs[..., eos] * inside.to(probs.dtype)  # (B, M)
        keep = None if sketch.keep is None else sketch.keep_table()[None, :V].to(dev)  # (1, V) float32, cached
    if sketch.counting == "count":
        with serial_on_cpu(dev):
            # log survival per canvas position: log(1 − p_i(e)); frozen EOS −inf, other frozen 0
            ls = torch.zeros(B, G, dtype=torch.float32, device=dev)
            ls = ls.scatter(1, positions, torch.log1p(-p_e.clamp(max=1 - 1e-6)) * vmask)
            ls = ls.masked_fill(is_eos, float("-inf"))
            incl = torch.cumsum(ls, 1)  # (B, G) log P(no EOS at ≤ i)
            r = torch.exp(torch.cat([torch.zeros(B, 1, device=dev), incl[:, :-1]], 1))  # (B, G) r_i
            n_hat = torch.exp(incl).sum(1).clamp_min(1.0)  # E[L]
            r_rows = torch.gather(r, 1, positions) * inside.to(probs.dtype)  # (B, M)
        w = torch.bmm(r_rows[:, None, :], probs)[:, 0]  # (B, V)
        with serial_on_cpu(dev):
            fr = torch.zeros(B, V, dtype=torch.float32, device=dev).scatter_add_(
                1, tokens.clamp(0, V - 1), torch.where(frozen, r, torch.zeros_like(r)))
            w = w + fr
            w[:, eos] = 0.0
            if keep is not None:
                w = w * keep
            if rows is not None:
                r_rows = torch.gather(r_rows, 1, rows)  # (B, K)
            return w, n_hat, r_rows[..., None]
    # presence. The (B, G), (B, V) and (n, M) bookkeeping runs on one thread (see serial_on_cpu)
    M = probs.shape[1]
    with serial_on_cpu(dev):
        # g_v: first frozen position of v (G if none)
        tok = tokens.clamp(0, V - 1)
        idx = torch.where(frozen, tok, torch.full_like(tokens, V))
        g = torch.full((B, V + 1), G, dtype=torch.long, device=dev)
        g = g.scatter_reduce(1, idx, torch.arange(G, device=dev).expand(B, -1), reduce="amin")[:, :V]  # (B, V)
        # tokens frozen before the first frozen EOS (≤ G per text): x_v = 1 once g_v is reached, so their
        # columns are cut at g_v; computed apart on their (n, M) columns, gathered before probs is overwritten
        early = frozen & (torch.arange(G, device=dev)[None, :] < f[:, None]) & (tokens != eos)  # (B, G)
        pair = torch.unique(torch.arange(B, device=dev)[:, None].expand(B, G)[early] * V + tok[early])  # (n,) b·V + v
        bj, vj = pair // V, pair % V
        flat = (bj * M * V + vj)[:, None] + torch.arange(M, device=dev)[None, :] * V  # (n, M) offsets in probs
        cols = probs.reshape(-1)[flat]  # (n, M) p_j(v) of the early tokens' columns
        out_b, out_m = (~inside).nonzero(as_tuple=True)  # rows outside: integer indices touch those rows only
    # q_j(v) = max(1 − p_j(e) − p_j(v), 10⁻⁶) on rows inside, 1 elsewhere (in place in probs)
    torch.sub((1.0 - p_e)[..., None], probs, out=probs).clamp_(min=1e-6)
    probs[out_b, out_m] = 1.0
    if rows is None:
        p0 = stop_absence_(probs, p_e[..., None], None, scratch_buffer(sketch, probs.shape, probs.dtype, dev))  # (B, V) P(x_v = 0)
        dw = probs  # now ∂ŵ_v/∂p_i(v)
        dw[out_b, out_m] = 0.0
    else:
        p0, dw = stop_absence_at_rows(probs, p_e, inside, rows)
    with serial_on_cpu(dev):
        if pair.numel():
            before_g = (positions[bj] < g[bj, vj][:, None]) & inside[bj]  # (n, M) rows that count in column v
            q_c = torch.where(before_g, (1.0 - p_e[bj]) - cols, 1.0).clamp_(min=1e-6)[..., None]  # (n, M, 1)
            zero = torch.zeros(len(pair), 1, dtype=probs.dtype, device=dev)  # no A_M term: v is reached at g_v
            p0[bj, vj] = stop_absence_(q_c, (p_e[bj] * before_g)[..., None], zero, torch.empty_like(q_c))[:, 0]
            dw_c = q_c[..., 0].masked_fill_(~before_g, 0.0)  # (n, M); rows outside, or from g_v on: 0
            if rows is None:
                dw.view(-1)[flat] = dw_c
            else:
                K = rows.shape[1]
                at = (bj * K * V + vj)[:, None] + torch.arange(K, device=dev)[None, :] * V  # (n, K) offsets in dw
                dw.view(-1)[at] = torch.gather(dw_c, 1, rows[bj])
        dw[..., eos] = 0.0
        w = (1.0 - p0).clamp_(0.0, 1.0)
        w[:, eos] = 0.0
        if keep is not None:
            w = w * keep
        return w, w.sum(1).clamp_min(1.0), dw


# ---------------------------------------------------------------------------- capped counts
# x_v = min(c_v, k). Under independent masked marginals the masked count C_v = Σ_{i∈M} Bernoulli(p_i(v))
# is Poisson-binomial: P(C = j) = A·e_j(r) with A = Π_i (1 − p_i), r_i = p_i / (1 − p_i) and e_j the
# elementary symmetric polynomials of the r_i, obtained from the power sums S_m = Σ_i r_i^m by
# Newton's identities (j·e_j = Σ_{m=1}^{j} (−1)^{m−1} e_{j−m} S_m). With f_v frozen copies,
#   E[min(f + C, k)] = min(f, k) + Σ_{m=1}^{k−f} P(C ≥ m),
#   ∂E[min(f + C, k)]/∂p_i = P(C_{−i} ≤ k − 1 − f)   (0 when f ≥ k),
# C_{−i} the count over the other rows (A_{−i} = A(1 + r_i), e_j(r_{−i}) = e_j − r_i e_{j−1}(r_{−i})).
# Everything in float64: Newton's identities cancel when one r_i dominates.


def capped_column_sums(logits: torch.Tensor, weights: torch.Tensor, cap: int, chunk: int = 16) -> torch.Tensor:
    """The column statistics of the capped count: (B, R, V) logits, (B, R) float row weights → (B, cap, V) float64.

    Row 0: Σ_i w_i log(1 − p_i(v)); row m (1 ≤ m < cap): Σ_i w_i r_i(v)^m, r = p/(1 − p), p = softmax of
    the logits capped at 1 − 10⁻⁶. Linear in the weights (signed weights move rows in and out of a
    running sum). Rows in chunks of ``chunk``, float64.
    """
    B, R, V = logits.shape
    out = torch.zeros(B, cap, V, dtype=torch.float64, device=logits.device)
    w = weights.to(logits.device, torch.float64)
    for c in range(0, R, chunk):  # chunks of rows, not tokens: (B, chunk, V) float64 at a time
        p = torch.softmax(logits[:, c:c + chunk].double(), -1).clamp_(max=1 - 1e-6)  # (B, r, V)
        wc = w[:, None, c:c + chunk]  # (B, 1, r)
        out[:, 0] += torch.bmm(wc, torch.log1p(-p))[:, 0]
        ratio = p.div_(1.0 - p)  # (B, r, V) r_i(v), in place
        power = ratio.clone()
        for m in range(1, cap):
            out[:, m] += torch.bmm(wc, power)[:, 0]
            if m + 1 < cap:
                power.mul_(ratio)
    return out


def _elementary(sums: torch.Tensor) -> torch.Tensor:
    """e_0 … e_{k−1} of the r_i from the power sums: sums (B, k, V) (row 0 unused) → (B, k, V) float64."""
    k = sums.shape[1]
    e = [torch.ones_like(sums[:, 0])]
    for j in range(1, k):
        acc = torch.zeros_like(e[0])
        for m in range(1, j + 1):
            acc = acc + (-1) ** (m - 1) * e[j - m] * sums[:, m]
        e.append(acc / j)
    return torch.stack(e, 1)


def capped_expected_weights(frozen_counts: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
    """E[min(f_v + C_v, k)] for every token: frozen counts (B, V), sums (B, k, V) of
    :func:`capped_column_sums` → (B, V) float64 (the module section above)."""
    k = sums.shape[1]
    A = torch.exp(sums[:, 0])  # (B, V) P(C = 0)
    cdf = torch.cumsum(A[:, None] * _elementary(sums), 1).clamp_(0.0, 1.0)  # (B, k, V) P(C ≤ j), j < k
    gains = torch.cat([torch.zeros_like(A)[:, None], torch.cumsum(1.0 - cdf, 1)], 1)  # (B, k + 1, V): Σ_{m≤s} P(C ≥ m)
    f = frozen_counts.to(sums.device).round().long().clamp(0, k)  # (B, V)
    return f.double() + torch.gather(gains, 1, (k - f)[:, None])[:, 0]


def capped_row_derivative(frozen_counts: torch.Tensor, sums: torch.Tensor, p_rows: torch.Tensor) -> torch.Tensor:
    """∂E[min(f_v + C_v, k)]/∂p_i(v) = P(C_{−i} ≤ k − 1 − f_v) at K rows: frozen (B, V), sums (B, k, V),
    p_rows (B, K, V) the marginals of those (masked) rows → (B, K, V) float32 (0 where f_v ≥ k)."""
    k = sums.shape[1]
    p = p_rows.double().clamp(max=1 - 1e-6)
    r = p / (1.0 - p)  # (B, K, V)
    A = torch.exp(sums[:, 0])[:, None] * (1.0 + r)  # (B, K, V) A_{−i}
    e = _elementary(sums)  # (B, k, V)
    f = frozen_counts.to(sums.device).round().long()[:, None]  # (B, 1, V)
    prev = torch.ones_like(r)  # e_0(r_{−i})
    cdf = prev.clone()  # Σ_{j ≤ s} e_j(r_{−i})
    out = torch.where(f == k - 1, cdf, torch.zeros_like(r))
    for s in range(1, k):
        prev = e[:, s][:, None] - r * prev  # e_s(r_{−i})
        cdf = cdf + prev
        out = torch.where(f == k - 1 - s, cdf, out)
    return (A * out).clamp_(0.0, 1.0).float()
