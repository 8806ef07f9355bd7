"""Token-id checks and the presence sums: Σ over the *distinct* tokens of each text, without a (B, V) table."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np
import torch

from ..errors import InputError
from .threads import gather_rows, over_slices

try:  # the optional C extension (pyproject.toml ext-modules): K columns summed in one pass per text
    from sketchwm._fastids import distinct_sums as _distinct_sums
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _distinct_sums = None

__all__ = ["sort_rows", "ids_summary", "one_batch", "check_token_ids", "distinct_token_sums"]


def sort_rows(ids: torch.Tensor) -> torch.Tensor:
    """Each row sorted ascending: (B, N) int64 → (B, N) int64.

    On CPU through numpy's vectorised int32 sort (an order of magnitude faster than ``torch.sort``
    on short rows) when the ids fit in int32; ``torch.sort`` elsewhere.
    """
    if ids.device.type == "cpu" and ids.numel():
        a = ids.numpy()
        if 0 <= int(a.min()) and int(a.max()) < 2**31 - 1:
            return torch.from_numpy(np.sort(a.astype(np.int32), axis=1).astype(np.int64))
    return torch.sort(ids, dim=1).values


#: the batch being detected (:func:`one_batch`): (ids, valid, V, summary, entry range), or None
_BATCH: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("sketchwm_batch", default=None)


@contextlib.contextmanager
def one_batch(ids: torch.Tensor, valid: torch.Tensor, vocab_size: int,
              known: tuple[torch.Tensor, int, int] | None = None) -> Iterator[tuple[torch.Tensor, int, int] | None]:
    """Summarise a batch once for a whole detection: inside the block, :func:`ids_summary` and
    :func:`check_token_ids` of these very tensors (the same objects, as the detector hands them to
    each channel of a combined scheme) reuse the summary instead of scanning the ids again. Only
    inside the block, where nothing writes to the batch; nested blocks on the same batch share it.

    Args:
        ids: (B, N) int64; valid: (B, N) bool; vocab_size: V.
        known: the summary when the caller has it already: lengths (B,) int64 (valid tokens per row)
            and a range [lo, hi] holding every entry of ``ids``, padding included (the detector's
            list path reads it while it copies the lists); no pass over the batch is made. A wrong
            summary gives wrong checks: only for callers that computed it from these very ids.

    Yields:
        :func:`ids_summary` ``(ids, valid, vocab_size)``: lengths (B,) int64, smallest and largest id;
        None (and nothing shared) unless ids is (B, N) int64 and valid (B, N) bool.
    """
    if not (torch.is_tensor(ids) and torch.is_tensor(valid) and ids.dim() == 2 and valid.shape == ids.shape
            and ids.dtype == torch.int64 and valid.dtype == torch.bool):
        yield None  # not a batch the checks would pass as it is: each check runs (and raises) itself
        return
    shared = _shared_summary(ids, valid, vocab_size)
    if shared is not None:
        yield shared
        return
    if known is not None:
        rng = known[1], known[2]
    else:
        rng = _scan_range(ids) if ids.device.type == "cpu" and ids.numel() else None
    token = _BATCH.set((ids, valid, vocab_size, None, rng))  # the range first: the summary reads it
    try:
        summary = known if known is not None else ids_summary(ids, valid, vocab_size)
        _BATCH.set((ids, valid, vocab_size, (summary[0].clone(), summary[1], summary[2]), rng))
        yield summary
    finally:
        _BATCH.reset(token)


def _shared_summary(ids: torch.Tensor, valid: torch.Tensor | None,
                    vocab_size: int | None) -> tuple[torch.Tensor, int, int] | None:
    """The enclosing :func:`one_batch`'s summary when it is of these very tensors and V (lengths
    copied), else None."""
    outer = _BATCH.get()
    if outer is None or outer[0] is not ids or outer[1] is not valid or outer[2] != vocab_size or not outer[3]:
        return None
    return outer[3][0].clone(), outer[3][1], outer[3][2]


def _entry_range(ids: torch.Tensor) -> tuple[int, int]:
    """Smallest and largest entry of a non-empty CPU ids tensor, padding included (numpy)."""
    outer = _BATCH.get()
    if outer is not None and outer[0] is ids and outer[4] is not None:
        return outer[4]
    return _scan_range(ids)


def _scan_range(ids: torch.Tensor) -> tuple[int, int]:
    """One numpy pass over a non-empty CPU ids tensor: its smallest and largest entry."""
    a = ids.numpy()
    return int(a.min()), int(a.max())


def ids_summary(ids: torch.Tensor, valid: torch.Tensor | None = None,
                vocab_size: int | None = None) -> tuple[torch.Tensor, int, int]:
    """Lengths and id range of a padded batch: ids (B, N) int64, valid (B, N) bool or None →
    (lengths (B,) int64, smallest valid id, largest valid id) (0, 0 for an empty batch).

    With ``vocab_size`` V, when every entry (padding included) lies in [0, V) the whole batch's
    range is returned instead: every valid id lies in it too, so a range check against [0, V)
    passes without the masked pass over the valid entries.

    On CPU through numpy: torch's multi-threaded reductions spin-wait and slow down by 10-100x on an
    oversubscribed machine, numpy's single-threaded ones do not; the masked range is a ``where=``
    reduction (no copy of the valid entries). Inside :func:`one_batch` of the same tensors, its summary.
    """
    B, N = ids.shape
    if ids.numel() == 0:
        return torch.zeros(B, dtype=torch.int64), 0, 0
    if ids.device.type == "cpu":
        shared = _shared_summary(ids, valid, vocab_size)
        return shared if shared is not None else _ids_summary_cpu(ids, valid, vocab_size)
    valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid
    lengths = valid.sum(1)
    if not bool(valid.any()):
        return lengths, 0, 0
    return lengths, int(ids[valid].min()), int(ids[valid].max())


def _ids_summary_cpu(ids: torch.Tensor, valid: torch.Tensor | None,
                     vocab_size: int | None) -> tuple[torch.Tensor, int, int]:
    """:func:`ids_summary` of a non-empty CPU batch, computed."""
    B, N = ids.shape
    ids_np = ids.numpy()
    lo, hi = _entry_range(ids)
    if valid is None:
        return torch.full((B,), N, dtype=torch.int64), lo, hi
    valid_np = valid.numpy()
    lengths = valid_np.sum(1, dtype=np.int64)
    if int(lengths.sum()) == B * N or (vocab_size is not None and lo >= 0 and hi < vocab_size):
        return torch.from_numpy(lengths), lo, hi
    if not lengths.any():
        return torch.from_numpy(lengths), 0, 0
    info = np.iinfo(ids_np.dtype) if ids_np.dtype.kind in "iu" else np.finfo(ids_np.dtype)
    return (torch.from_numpy(lengths), int(ids_np.min(where=valid_np, initial=info.max)),
            int(ids_np.max(where=valid_np, initial=info.min)))


def check_token_ids(ids: torch.Tensor, valid: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate detector input (every scheme's ``score_ids`` starts here; see
    :meth:`WatermarkScheme.check_ids`).

    Args:
        ids: (B, N) integer token ids.
        valid: (B, N) bool, False on padding.
        vocab_size: V.

    Returns:
        ids (B, N) int64 with every entry in [0, V) (padding clamped; the input tensor itself when it
        needed no clamping and was int64 already: read it, do not write to it) and valid (B, N) bool.

    Raises:
        InputError: wrong rank or shapes, or a valid id outside [0, V).
    """
    if not torch.is_tensor(ids) or ids.dim() != 2:
        raise InputError(f"ids must be a (batch, length) tensor, got shape {tuple(getattr(ids, 'shape', ()))}")
    if not torch.is_tensor(valid) or valid.shape != ids.shape:
        raise InputError(f"valid must have the shape of ids {tuple(ids.shape)}, got {tuple(getattr(valid, 'shape', ()))}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise InputError(f"ids must be integers, got {ids.dtype}")
    ids, valid = ids.long(), valid.bool()
    if ids.numel() == 0:
        return ids, valid
    # numpy on CPU: no copy of the valid entries, no spin-waiting torch reductions. Every entry in
    # [0, V) (the common case) settles it in one pass; otherwise the valid entries' range decides.
    inside = False
    if ids.device.type == "cpu":
        lo, hi = _entry_range(ids)
        inside = lo >= 0 and hi < vocab_size
    if not inside:
        _, lo, hi = ids_summary(ids, valid, vocab_size)
        if lo < 0 or hi >= vocab_size:
            bad = hi if hi >= vocab_size else lo
            raise InputError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    return (ids if inside else ids.clamp(0, vocab_size - 1)), valid


def distinct_token_sums(ids: torch.Tensor, valid: torch.Tensor, values: torch.Tensor, keep: torch.Tensor,
                        chunk: int = 256, rows: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, Σ values[v] and Σ keep[v] over the row's *distinct* valid token ids v (``values`` may
    hold K columns, one table per key of a family, summed in the same pass).

    The presence statistic T = Σ_v c(v)·x_v and n_d = Σ_v keep_v·x_v (x_v = 1[v in the row]) without
    a (B, V) table. On CPU: rows are processed in chunks of ``chunk`` with reused int32 buffers
    (cache-resident, no page faults): sort each row (numpy's vectorised sort), mark the first copy of
    each id, gather both tables, sum; chunks are shared among ``torch.get_num_threads()`` threads
    (numpy releases the GIL). Elsewhere: ``torch.sort`` and the same steps.

    Args:
        ids: (B, N) int64 in [0, V) where valid (not checked here).
        valid: (B, N) bool.
        values: (V + 1,) or (V + 1, K) table, row V = 0 (padding); an integer dtype gives exact int64
            sums, a float dtype float64 sums.
        keep: (V + 1,) int8/bool table, entry V = 0.
        rows: (R,) int64 indices in [0, B) of the rows to sum, in the order wanted (None: every row).
            The C pass reads them in place; the other paths gather them first.

    Returns:
        (R,) or (R, K) sums of ``values`` (int64 or float64) and (R,) int64 sums of ``keep`` (R = B
        without ``rows``).
    """
    V = values.shape[0] - 1
    integral = not values.dtype.is_floating_point
    if values.dim() == 2 and values.dtype == torch.int8 and _distinct_sums is not None and ids.device.type == "cpu":
        return _distinct_table_sums_c(ids, valid, values, keep, rows)
    if rows is not None:
        ids, valid = gather_rows(ids, valid, rows)
    B, N = ids.shape
    if ids.device.type != "cpu":
        return _distinct_token_sums_torch(ids, valid, values, keep)
    ids_np, valid_np = ids.numpy(), valid.numpy()
    vals_np, keep_np = values.numpy(), keep.to(torch.int8).numpy()
    all_valid = bool(valid_np.all())  # numpy: no torch thread spin-wait (see ids_summary)
    cols = vals_np.shape[1:]  # () or (K,)
    T = np.empty((B, *cols), dtype=np.int64 if integral else np.float64)
    n = np.empty(B, dtype=np.int64)
    acc = np.int64 if integral else np.float64
    # row sums of int8 entries fit int16 when |entry| * N does (numpy's int16 reduction is 2-3x faster)
    vmax = int(np.abs(vals_np).max()) if integral and vals_np.size else 0
    acc_c = np.int16 if integral and vmax * N <= 32767 else acc
    acc_k = np.int16 if N <= 32767 else np.int64

    def run(lo: int, hi: int) -> None:
        width = N * (cols[0] if cols else 1)
        step = max(1, min(chunk, hi - lo, (1 << 20) // max(width, 1)))  # rows per buffer: no more than needed, ~1M cells
        buf = np.empty((step, N), np.int32)  # reused per chunk: stays in cache; int32 sorts faster
        idx = np.empty((step, N), np.intp)  # the sorted ids as np.take's native index type (no conversion in take)
        first = np.ones((step, N), bool)
        cv = np.empty((step, N, *cols), vals_np.dtype)
        kv = np.empty((step, N), np.int8)
        for i in range(lo, hi, step):
            r = min(step, hi - i)
            b, ix, f, c, k = buf[:r], idx[:r], first[:r], cv[:r], kv[:r]
            np.copyto(b, ids_np[i:i + r], casting="unsafe")
            if not all_valid:
                np.putmask(b, ~valid_np[i:i + r], V)
            b.sort(axis=1)
            np.not_equal(b[:, 1:], b[:, :-1], out=f[:, 1:])
            np.copyto(ix, b)
            np.take(vals_np, ix, axis=0, out=c)
            np.take(keep_np, ix, out=k)
            np.multiply(c, f[..., None] if cols else f, out=c)
            np.multiply(k, f, out=k)
            T[i:i + r] = c.sum(1, dtype=acc_c)
            n[i:i + r] = k.sum(1, dtype=acc_k)

    over_slices(B, run, min_per_worker=chunk)
    return torch.from_numpy(T), torch.from_numpy(n)


def _distinct_table_sums_c(ids: torch.Tensor, valid: torch.Tensor, values: torch.Tensor, keep: torch.Tensor,
                           rows: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`distinct_token_sums` of an int8 (V + 1, K) table on CPU in the C extension: one pass per
    text, first copies marked by a per-id stamp (no sort); ``rows`` (R,) read in place. Returns (R, K)
    int64 and (R,) int64."""
    B, N = ids.shape
    V1, K = values.shape
    ids_c = ids.contiguous().numpy().astype(np.int64, copy=False)
    valid_c = np.ascontiguousarray(valid.numpy()).view(np.uint8)  # bool as uint8, no copy
    sel = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
    R = B if sel is None else len(sel)
    T, n = np.empty((R, K), np.int64), np.empty(R, np.int64)
    tab, kp = values.contiguous().numpy(), np.ascontiguousarray(keep.to(torch.int8).numpy())

    def run(lo: int, hi: int) -> None:  # the extension releases the GIL: slices of the outputs run on threads
        if sel is None:
            _distinct_sums(ids_c[lo:hi], valid_c[lo:hi], hi - lo, N, V1 - 1, tab, K, kp, T[lo:hi], n[lo:hi])
        elif hi > lo:
            _distinct_sums(ids_c, valid_c, B, N, V1 - 1, tab, K, kp, T[lo:hi], n[lo:hi], sel[lo:hi])

    over_slices(R, run, min_per_worker=256)
    return torch.from_numpy(T), torch.from_numpy(n)


def _distinct_token_sums_torch(ids: torch.Tensor, valid: torch.Tensor, values: torch.Tensor,
                               keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`distinct_token_sums` in plain torch ops (any device; used off the CPU)."""
    V = values.shape[0] - 1
    tok = torch.sort(torch.where(valid, ids, V), dim=1).values
    first = torch.ones_like(tok, dtype=torch.bool)
    first[:, 1:] = tok[:, 1:] != tok[:, :-1]
    acc = torch.float64 if values.dtype.is_floating_point else torch.int64
    mask = first[..., None] if values.dim() == 2 else first
    return (values[tok].to(acc) * mask).sum(1), (keep[tok].to(torch.int64) * first).sum(1)


