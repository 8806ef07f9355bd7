"""Batching for detection at corpus scale: id lists → padded batches without a Python loop over texts,
batched fast tokenisation in bounded memory, and a background stage to overlap tokenisation with scoring.

* :func:`flatten_ids` concatenates B id lists into one flat (T,) int64 array with their (B,) lengths
  (one C-level pass over the ids, which also reads their range: :func:`flatten_ids_range`); :func:`pad_flat` pads any subset of them into a (b, N) batch by
  index arithmetic; :func:`length_groups` cuts the texts, sorted by length, into scoring groups of
  bounded padded size (b × N cells), so a long text never pads a whole chunk of short ones.
* :class:`TextEncoder` encodes texts with the fast tokenizer's Rust batch call (its own thread pool,
  no per-token Python work). A text longer than ``window`` characters is encoded in overlapping
  windows joined at a token boundary both windows agree on, so a 10 MB text costs the memory of one
  window, not of the whole text's tokenizer state; the ids are those of encoding it whole (checked
  per join; where no join is found the text is encoded whole).
* :func:`prefetch` runs an iterable in a background thread, a few items ahead: the Rust tokenizer
  releases the GIL, so reading, parsing and writing in Python overlap with it.
"""

from __future__ import annotations

import array
import itertools
import queue
import threading
from typing import Any, Iterable, Iterator, Sequence, TypeVar

import numpy as np
import torch

from .errors import InputError

try:  # the optional C extension (pyproject.toml ext-modules); the pure-Python path below gives the same arrays
    from ._fastids import flatten_into as _flatten_into
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _flatten_into = None

__all__ = ["flatten_ids", "flatten_ids_range", "pad_flat", "pad_ids", "length_groups", "TextEncoder", "prefetch"]

T = TypeVar("T")


def flatten_ids(id_lists: "Sequence[Sequence[int]]") -> tuple[np.ndarray, np.ndarray]:
    """Concatenate B id lists: flat (T,) int64 and lengths (B,) int64, T = Σ lengths
    (:func:`flatten_ids_range` without the range).

    Raises:
        InputError: an element is not a sequence of integers.
    """
    flat, lengths, _ = flatten_ids_range(id_lists)
    return flat, lengths


def flatten_ids_range(id_lists: "Sequence[Sequence[int]]") -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """Concatenate B id lists: flat (T,) int64, lengths (B,) int64, T = Σ lengths, and the smallest and
    largest id (None when T = 0), read in the same pass by the extension (else one numpy pass).

    Python lists of ints are read in one C pass into the int64 output by the optional extension
    ``sketchwm._fastids`` (built by ``pip install``; compact ints read without a call, on
    ``torch.get_num_threads()`` threads when there are at least 2^16 ids: the read is memory-bound) or, where it
    is not built, appended one list at a time to one growing int64 buffer (``array.array.fromlist``,
    a C loop per list, about half as fast); other sequences (tuples, ranges) are read in one C-level pass (``np.fromiter`` over a
    chained iterator); when some texts are numpy arrays or tensors (long texts from
    :class:`TextEncoder`), all are concatenated.

    Raises:
        InputError: an element is not a sequence of integers.
    """
    B = len(id_lists)
    if B == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    id_range: tuple[int, int] | None = None
    try:
        lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=B)  # (B,)
        kinds = set(map(type, id_lists))  # one C-level pass
        if kinds == {list} and _flatten_into is not None:
            flat = np.empty(int(lengths.sum()), np.int64)
            id_range = _flatten_into(id_lists if type(id_lists) is list else list(id_lists), flat,
                                     torch.get_num_threads())
        elif kinds == {list}:
            buf = array.array("q")
            add = buf.fromlist
            for x in id_lists:
                add(x)
            flat = np.frombuffer(buf, dtype=np.int64) if len(buf) else np.zeros(0, np.int64)
        elif any(issubclass(k, (np.ndarray, torch.Tensor)) for k in kinds):  # arrays (long texts): concatenate
            parts = [(x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.int64)).reshape(-1)
                     for x in id_lists]
            flat = (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(np.int64, copy=False)
        else:
            flat = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int64, count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"token ids must be lists of integers ({exc})") from None
    if flat.dtype.kind not in "iu":
        raise InputError(f"token ids must be integers, got {flat.dtype}")
    if id_range is None and len(flat):
        id_range = int(flat.min()), int(flat.max())
    return flat, lengths, id_range


def pad_flat(flat: np.ndarray, lengths: np.ndarray, rows: np.ndarray | None = None,
             offsets: np.ndarray | None = None, pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad texts ``rows`` of a flat concatenation into ids (b, N) int64 and valid (b, N) bool.

    Args:
        flat: (T,) int64, the texts one after another; lengths: (B,) int64.
        rows: (b,) int64 indices of the texts to take, in the batch's order (None: all B).
        offsets: (B,) int64 start of each text in ``flat`` (default: the exclusive cumulative sum).
        pad: id written in the padding (masked out by ``valid``).

    N = the longest selected text (at least 1). Index arithmetic only: the selected texts' positions
    in ``flat`` are ``offsets[row] + column`` for each valid cell, gathered in one step.
    """
    if offsets is None:
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    if rows is None:
        rows = np.arange(len(lengths))
    sel_len = lengths[rows]  # (b,)
    n = int(sel_len.max()) if len(rows) else 0
    cols = np.arange(max(n, 1))  # (N,)
    valid = cols[None, :] < sel_len[:, None]  # (b, N)
    if len(flat) == 0:
        return torch.full(valid.shape, pad, dtype=torch.long), torch.from_numpy(valid)
    b = len(rows)
    if n > 0 and int(sel_len.min()) == n and (b == 1 or np.array_equal(np.diff(rows), np.ones(b - 1, rows.dtype))):
        # equal lengths, consecutive texts (one text, or a run of the length-sorted order): a view of flat
        o = int(offsets[rows[0]])
        return torch.from_numpy(flat[o : o + b * n].reshape(b, n)), torch.from_numpy(valid)
    src = offsets[rows][:, None] + cols[None, :]  # (b, N) position in flat of each cell
    np.minimum(src, len(flat) - 1, out=src)  # padding cells read any valid position, then get ``pad``
    ids = flat.take(src)  # (b, N)
    ids[~valid] = pad
    return torch.from_numpy(ids), torch.from_numpy(valid)


def pad_ids(id_lists: "Sequence[Sequence[int]]", pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists → ids (B, N) int64 and valid (B, N) bool (:func:`flatten_ids` then :func:`pad_flat`).

    Raises:
        InputError: an element is not a sequence of integers.
    """
    flat, lengths = flatten_ids(id_lists)
    return pad_flat(flat, lengths, pad=pad)


def length_groups(lengths: np.ndarray, max_texts: int = 1024, max_cells: int = 1 << 21) -> list[np.ndarray]:
    """Cut texts into scoring groups: indices sorted by length, each group at most ``max_texts`` texts
    and, unless it is a single text, at most ``max_cells`` padded cells (texts × its longest text).

    Args:
        lengths: (B,) int64 token counts.

    Returns:
        a list of (b,) int64 index arrays covering every text once. The loop runs once per group,
        each group found by a binary search on the sorted lengths.
    """
    order = np.argsort(lengths, kind="stable")
    srt = lengths[order]
    groups, i, B = [], 0, len(order)
    while i < B:
        # largest j with (j - i) * srt[j - 1] <= max_cells: srt is sorted, so (k + 1) * srt[i + k] grows with k
        k = np.arange(min(max_texts, B - i))
        fits = (k + 1) * np.maximum(srt[i : i + len(k)], 1) <= max_cells
        j = i + max(1, int(np.searchsorted(~fits, True)))  # fits is True then False
        groups.append(order[i:j])
        i = j
    return groups


class TextEncoder:
    """Texts → token-id lists with a fast (Rust) tokenizer, in batches and in bounded memory.

    Args:
        tokenizer: a Hugging Face tokenizer. A fast one (``is_fast``) is encoded through a copy of
            its Rust ``backend_tokenizer`` with truncation and padding off, exactly as
            ``tokenizer(texts, add_special_tokens=False)`` encodes (without building the attention
            mask and type ids); any other through ``tokenizer.encode`` one text at a time.
        window: characters per window for long texts (longer texts are encoded window by window).
        overlap: characters two consecutive windows share; they are joined at a token both agree on
            in the middle of the shared span.
    """

    def __init__(self, tokenizer: Any, window: int = 1 << 16, overlap: int = 2048):
        if overlap * 4 > window:
            raise ValueError(f"overlap ({overlap}) must be at most a quarter of the window ({window})")
        self.tokenizer, self.window, self.overlap = tokenizer, int(window), int(overlap)
        backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
        self._rust = None
        if backend is not None:
            from tokenizers import Tokenizer

            self._rust = Tokenizer.from_str(backend.to_str())  # a private copy: the caller's settings stay as they are
            self._rust.no_truncation()
            self._rust.no_padding()

    @property
    def is_fast(self) -> bool:
        """True when texts go through the Rust batch encoder."""
        return self._rust is not None

    def encode(self, texts: Sequence[str]) -> "list[list[int] | np.ndarray]":
        """Encode texts without special tokens: one list of ids per text.

        Texts up to ``window`` characters go through one parallel Rust batch call; longer ones are
        encoded in windows (:meth:`encode_long`) and come back as (n,) int64 arrays (8 bytes an id,
        not a list of Python ints).
        """
        if self._rust is None:
            return [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
        texts = list(texts)
        long = [i for i, t in enumerate(texts) if len(t) > self.window]
        if not long:
            return [e.ids for e in self._rust.encode_batch_fast(texts, add_special_tokens=False)]
        out: list[list[int]] = [[] for _ in texts]
        short = [i for i in range(len(texts)) if len(texts[i]) <= self.window]
        if short:
            for i, e in zip(short, self._rust.encode_batch_fast([texts[i] for i in short], add_special_tokens=False)):
                out[i] = e.ids
        for i in long:
            out[i] = self.encode_long(texts[i])
        return out

    def _windows(self, text: str, starts: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(ids (n,) int64, token start (n,) int64 in ``text``) of each window [s, s + window)."""
        encs = self._rust.encode_batch([text[s : s + self.window] for s in starts], add_special_tokens=False)
        out = []
        for s, e in zip(starts, encs):
            off = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)  # (n, 2) character offsets in the window
            out.append((np.asarray(e.ids, dtype=np.int64), off[:, 0] + s))
        return out

    def encode_long(self, text: str, batch: int = 2) -> np.ndarray:
        """Encode one long text window by window (``batch`` windows per parallel Rust call).

        Window k covers [s_k, s_k + window) with s_{k+1} = s_k + window − overlap. At each join the
        text is cut at the first character c ≥ (end of window k) − overlap/2 where both windows start
        a token, and the tokens of the two windows over [c, end − overlap/4) must agree (ids and
        starts): window k contributes its tokens before c, window k+1 those from c on. Any
        disagreement (a tokenizer whose tokens depend on context that far away) falls back to
        encoding the text whole.

        Returns:
            (n,) int64 ids.
        """
        W, O = self.window, self.overlap
        starts = list(range(0, max(len(text) - O, 1), W - O))
        pieces: list[np.ndarray] = []
        cur_ids = cur_starts = None
        cut = 0  # the current window's tokens are taken from character ``cut`` on
        for b0 in range(0, len(starts), batch):
            for s, (ids, st) in zip(starts[b0 : b0 + batch], self._windows(text, starts[b0 : b0 + batch])):
                if cur_ids is None:
                    cur_ids, cur_starts = ids, st
                    continue
                end = s + O  # end of the previous window (its last character + 1) when it was full
                lo, hi = end - O // 2, end - O // 4
                common = np.intersect1d(cur_starts[cur_starts >= lo], st[st >= lo])
                if len(common) == 0:
                    return np.asarray(self._rust.encode(text, add_special_tokens=False).ids, dtype=np.int64)
                c = int(common[0])
                if c >= hi:  # no shared token start well inside the overlap
                    return np.asarray(self._rust.encode(text, add_special_tokens=False).ids, dtype=np.int64)
                a = (cur_starts >= c) & (cur_starts < hi)
                b = (st >= c) & (st < hi)
                if a.sum() != b.sum() or not (np.array_equal(cur_ids[a], ids[b]) and np.array_equal(cur_starts[a], st[b])):
                    return np.asarray(self._rust.encode(text, add_special_tokens=False).ids, dtype=np.int64)
                pieces.append(cur_ids[(cur_starts >= cut) & (cur_starts < c)])
                cur_ids, cur_starts, cut = ids, st, c
        pieces.append(cur_ids[cur_starts >= cut])
        return np.concatenate(pieces)


class _Raised:
    """An exception carried from the background thread to the consumer."""

    def __init__(self, exc: BaseException):
        self.exc = exc


_DONE = object()


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Iterate ``items`` in a background thread, at most ``depth`` items ahead of the consumer.

    An exception raised while producing an item is raised to the consumer at that item. Closing the
    returned generator early (``break``, an error downstream) stops the producer at its next item.
    """
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(x: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for x in items:
                if not put(x):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Raised(exc))
            return
        put(_DONE)

    th = threading.Thread(target=work, name="sketchwm-prefetch", daemon=True)
    th.start()
    try:
        while True:
            x = q.get()
            if x is _DONE:
                return
            if isinstance(x, _Raised):
                raise x.exc
            yield x
    finally:
        stop.set()
        th.join(timeout=5)
