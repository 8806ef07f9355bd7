"""Sums over the masked marginals that an expected sketch needs, at about the cost of one softmax.

The expected sketch of eq. (5) of the seed paper needs the column sums Σ_{i∈M_t} p_i(v) of the
masked marginals (``count``); its presence analogue needs Σ_{i∈M_t} log(1 − p_i(v)) (the log of the
probability that v appears at no masked position; :mod:`sketchwm_builtin.global_sketch.embed`). Written
naively both cost several passes over the (B, R, V) marginals: a softmax into a buffer, then
clamp, log1p and a batched product (plus, for the tilt, a division per entry). This module does it
in one cache-blocked pass over the logits and one small gather:

1. **Cache-blocked softmax and column sums.** The rows are processed in chunks of about
   ``chunk_elements`` entries (4 MiB, so a chunk's softmax stays in the CPU cache while it is
   summed): per chunk, a softmax into a reused buffer, an ``addmm`` into the (B, V) column sums,
   the per-row log-normaliser (lse) and the running column maximum max_i p_i(v). On CUDA, and for
   inputs of at most 4 chunks (the sampled rows of one step), the whole tensor is one block.
2. **Exact where it matters, linear in the tail** (``eps`` = ε > 0, presence only). For a token
   whose probability is below ε at every row, log(1 − p) = −p − c(p) with
   0 ≤ c(p) ≤ p²/(2(1 − p)), so using −p costs at most ε/(2(1 − ε)) of the column's own
   |Σ log(1 − p)| (relative); the tokens (columns) with max_i p_i(v) ≥ ε — at most R/ε of them, a
   few per row on a real LM, none on flat logits — are gathered from the logits (p = exp(l − lse))
   and summed exactly. The same split serves the tilt: 1/(1 − p_i(v)) is 1 within ε/(1 − ε) on the
   tail. ``eps = 0`` (or more than ``max_exact_fraction`` of the vocabulary above ε) falls back to
   the exact dense computation.

Everything is vectorised over batch × rows × vocabulary; the only Python loop is over row chunks
(cache blocking), never over tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["MarginalSums", "masked_marginal_sums", "row_logsumexp", "CHUNK_ELEMENTS"]

#: entries per cache block on CPU (4 MiB of float32: one chunk's softmax stays in L2/L3 while summed)
CHUNK_ELEMENTS = 1 << 20
#: entries per block of :func:`row_logsumexp` (whole rows: 256 rows of a 30,522-token vocabulary)
LSE_CHUNK_ELEMENTS = 1 << 23
#: p is capped at 1 − P_CAP_GAP before log(1 − p), as in the dense expected sketch (no log 0)
P_CAP_GAP = 1e-6


@dataclass
class MarginalSums:
    """Column sums of the masked marginals, with the exact columns kept for the tilt.

    Attributes:
        mass: (B, V) float32, Σ_{i valid} p_i(v).
        log_absent: (B, V) float32, Σ_{i valid} log(1 − p_i(v)) (p capped at 1 − 10⁻⁶; exact on
            ``cols``, −Σ p_i(v) on the other columns), or None when not asked for.
        cols: (C,) int64, the columns computed exactly (max_i p_i(v) ≥ ε in some text); all V
            columns when the dense fallback ran (``dense`` True).
        p_cols: (B, R, C) float32, p_i(v) at ``cols`` (every row, valid or not); None with ``dense``
            or when no column is exact (C = 0).
        lse: (B, R) float32, log Σ_v exp(logit_i(v)) of each row (zeros when ``dense``).
        tail_max: float or 0-dim float32 tensor (not synchronised until read), the largest p_i(v)
            outside ``cols`` over all rows (the ε actually achieved: the linearisation errors above
            hold with ε = ``tail_max``); 0.0 with ``dense``.
        dense: True when every column is exact (ε = 0 or too many columns above ε).
    """

    mass: torch.Tensor
    log_absent: torch.Tensor | None
    cols: torch.Tensor
    p_cols: torch.Tensor | None
    lse: torch.Tensor
    tail_max: "float | torch.Tensor"
    dense: bool


def _chunk_rows(n_rows: int, vocab: int, device: torch.device, chunk_elements: int) -> int:
    """Rows per cache block: ~``chunk_elements`` entries on CPU, every row at once elsewhere."""
    if device.type != "cpu":
        return max(1, n_rows)
    return max(1, min(n_rows, chunk_elements // max(1, vocab)))


def _row_weights(row_w: torch.Tensor) -> torch.Tensor:
    """(B, R) row weights → (B, B·R) with out[b, b·R + i] = row_w[b, i]: the column sums of text b over
    a chunk of flattened rows are one ``addmm`` with the chunk's columns of this matrix."""
    B, R = row_w.shape
    weight = torch.zeros(B, B * R, dtype=row_w.dtype, device=row_w.device)
    weight.view(B, B, R).diagonal(dim1=0, dim2=1).copy_(row_w.T)
    return weight


def masked_marginal_sums(logits: torch.Tensor, valid: torch.Tensor, eps: float = 1e-3, log_absent: bool = True,
                         max_exact_fraction: float = 0.25, chunk_elements: int = CHUNK_ELEMENTS) -> MarginalSums:
    """Σ_i w_i p_i(v) and Σ_i w_i log(1 − p_i(v)) over the rows, p_i = softmax(logits_i), w = ``valid`` (module doc).

    Args:
        logits: (B, R, V) float32 marginals as logits (-inf allowed, not all -inf on a row); not modified.
        valid: (B, R) bool, the rows that enter the sums (masked positions), or (B, R) float row
            weights (signed: ±1 adds or removes a row's terms from a running sum); rows of weight 0
            are ignored (their logits must be finite or -inf, as the engine's packing gives).
        eps: ε ≥ 0, the tail threshold of the linearisation; 0 computes every column exactly.
        log_absent: also compute Σ log(1 − p) (presence); False gives the column sums only (count).
        max_exact_fraction: above this fraction of the vocabulary in the exact columns, the dense
            exact computation is used instead.
        chunk_elements: entries per cache block on CPU.

    Returns:
        :class:`MarginalSums`.

    Raises:
        ValueError: logits not 3-D, or ``valid`` of another (B, R) shape, or ``eps`` < 0.
    """
    if logits.dim() != 3 or valid.shape != logits.shape[:2]:
        raise ValueError(f"logits {tuple(logits.shape)} and valid {tuple(valid.shape)} must be (B, R, V) and (B, R)")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    B, R, V = logits.shape
    dev, dt = logits.device, logits.dtype
    flat = logits.reshape(B * R, V)
    row_w = valid.to(dt)  # (B, R)
    need_max = log_absent and eps > 0
    step = _chunk_rows(B * R, V, dev, chunk_elements)
    if step >= B * R or B * R * V <= 4 * chunk_elements:  # one block (a few rows, or a GPU): plain batched ops
        p = torch.softmax(logits, -1)  # (B, R, V)
        mass = torch.bmm(row_w[:, None, :], p)[:, 0]
        if need_max:
            x_max, p_max, col_max = logits.amax(-1).reshape(-1), p.amax(-1).reshape(-1), p.reshape(-1, V).amax(0)
    else:
        weight = _row_weights(row_w)  # (B, B·R)
        mass = torch.zeros(B, V, dtype=dt, device=dev)
        if need_max:  # per row: max logit and max p (lse = max logit − log max p); per column: max p
            x_max, p_max = torch.empty(B * R, dtype=dt, device=dev), torch.empty(B * R, dtype=dt, device=dev)
            col_max, chunk_max = torch.zeros(V, dtype=dt, device=dev), torch.empty(V, dtype=dt, device=dev)
        buf = torch.empty(step, V, dtype=dt, device=dev)
        for a in range(0, B * R, step):  # cache blocks of rows (not tokens)
            x = flat[a:a + step]
            c = x.shape[0]
            p = torch.ops.aten._softmax.out(x, -1, False, out=buf[:c])  # (c, V)
            mass.addmm_(weight[:, a:a + c], p)
            if need_max:  # both maxima of a row sit at the same token; the chunk is still in cache
                torch.amax(x, -1, out=x_max[a:a + c])
                torch.amax(p, -1, out=p_max[a:a + c])
                torch.maximum(col_max, torch.amax(p, 0, out=chunk_max), out=col_max)
    if not log_absent:
        return MarginalSums(mass, None, torch.arange(V, device=dev), None, torch.zeros(B, R, dtype=dt, device=dev), 0.0, True)
    if need_max:
        cols = (col_max >= eps).nonzero()[:, 0]  # (C,)
        if cols.numel() <= max_exact_fraction * V:
            lse = x_max.sub_(p_max.log_()).view(B, R)
            out = mass.neg()  # the tail: Σ log(1 − p) ≈ −Σ p
            p_cols = None
            if cols.numel():
                p_cols = (torch.index_select(logits, 2, cols) - lse[..., None]).exp_()  # (B, R, C)
                exact = p_cols.clamp(max=1 - P_CAP_GAP).neg_().log1p_().add_(p_cols)  # log(1 − p) + p
                out.index_add_(1, cols, torch.bmm(row_w[:, None, :], exact)[:, 0])
            return MarginalSums(mass, out, cols, p_cols, lse, col_max.index_fill_(0, cols, 0.0).max(), False)
    # dense exact: log(1 − p) of every entry (the chunks again)
    out = torch.zeros(B, V, dtype=dt, device=dev)
    weight = _row_weights(row_w)
    for a in range(0, B * R, step):
        p = torch.softmax(flat[a:a + step], -1).clamp_(max=1 - P_CAP_GAP).neg_().log1p_()  # (c, V) log(1 − p)
        out.addmm_(weight[:, a:a + p.shape[0]], p)
    return MarginalSums(mass, out, torch.arange(V, device=dev), None, torch.zeros(B, R, dtype=dt, device=dev), 0.0, True)


def row_logsumexp(logits: torch.Tensor, chunk_elements: int = LSE_CHUNK_ELEMENTS, ref: int | None = None) -> torch.Tensor:
    """log Σ_v exp(logits[..., v]) of every row, (..., V) → (...), equal to ``torch.logsumexp(logits, -1)``
    up to float rounding (a few ulps of the result).

    On the CPU, blocks of about ``chunk_elements`` entries (whole rows) go through the fused log-softmax
    kernel into one reused buffer, and the row's normaliser is read back at one entry j:
    lse = logits[j] − log_softmax(logits)[j]. j is the largest entry of the first row (a token that
    no row bans, in practice); a row whose entry j is not finite is computed by ``torch.logsumexp``.
    One fused pass per block: ``torch.logsumexp`` writes two temporaries of the input's size, and a
    loop of small reductions per block pays the thread pool's start-up on every op, which a loaded
    machine multiplies. Elsewhere ``torch.logsumexp``. ``ref``: j given by the caller (a subset of a
    larger tensor's rows then gets the values the whole tensor's call gives them).
    """
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    n = flat.shape[0]
    if n == 0 or logits.device.type != "cpu":
        return torch.logsumexp(logits, -1)
    step = max(1, min(n, chunk_elements // max(1, V)))
    j = int(flat[0].argmax()) if ref is None else ref
    out = torch.empty(n, dtype=logits.dtype, device=logits.device)
    buf = torch.empty(step, V, dtype=logits.dtype, device=logits.device)
    for a in range(0, n, step):  # blocks of whole rows
        blk = flat[a:a + step]
        c = blk.shape[0]
        ls = torch.ops.aten._log_softmax.out(blk, -1, False, out=buf[:c])  # (c, V) log-softmax
        torch.sub(blk[:, j], ls[:, j], out=out[a:a + c])
    bad = ~torch.isfinite(out)  # entry j banned (−inf) in that row, or a non-finite row
    if bool(bad.any()):
        out[bad] = torch.logsumexp(flat[bad], -1)
    return out.view(logits.shape[:-1])
