"""Base classes of every pluggable component.

A plugin subclasses one of these, declares ``name`` (the registry key) and a nested ``Params``
(:class:`sketchwm.config.StrictModel`), and returns the class from the matching hook in
:mod:`sketchwm.hookspecs`. The core holds the mechanism; the algorithms live in plugins.

Kinds:
    * :class:`Sketch`          — a linear text sketch h(y) = Φᵀ counts(y) / √N (paper Def. 2.3).
    * :class:`ScoreFunction`   — a detector score of (u, h) with p-values (paper eq. 2, 17-19).
    * :class:`DLMBackend`      — a masked diffusion LM that returns logits for masked positions.
    * :class:`WatermarkScheme` — generation hooks for the engine + a detector.
    * :class:`Attack`          — a text transformation with a strength in [0, 1].
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Sequence

import numpy as np
import torch

from .config import StrictModel, validate_params
from .errors import InputError

__all__ = [
    "Component",
    "Sketch",
    "ScoreFunction",
    "DLMBackend",
    "DenoiseStep",
    "MarginalReads",
    "Marginals",
    "packed_masked_positions",
    "row_index",
    "check_token_ids",
    "WatermarkScheme",
    "SchemeScores",
    "Attack",
    "AttackOutput",
    "tokenizer_fingerprint",
    "serial_on_cpu",
]


@contextmanager
def serial_on_cpu(device: torch.device | str) -> Iterator[None]:
    """Run the torch ops inside on one intra-op thread when ``device`` is the CPU (else do nothing).

    For the small (B, V) bookkeeping of a denoising step (B·V ≈ 10⁵ entries, ~0.1 ms of work per
    op): torch splits any op over 32,768 entries across its thread pool, and on a busy CPU each
    such split waits for a sleeping pool thread to be scheduled (~8 ms measured on the 2-core
    machine, ``benchmarks/perf_embedding.py``), 50× the op itself. The setting is process-wide and
    restored on exit, so torch ops of other Python threads during the block run on one thread too.
    """
    n = torch.get_num_threads()
    if torch.device(device).type != "cpu" or n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


class Component(ABC):
    """Common base: a registry ``name``, a ``Params`` model and a one-line ``summary``."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""

    class Params(StrictModel):
        """No parameters."""

    @classmethod
    def parse_params(cls, params: "dict[str, Any] | StrictModel | None") -> StrictModel:
        """Validate ``params`` against ``cls.Params`` (raises :class:`ConfigError`)."""
        return validate_params(cls.Params, params, f"{cls.kind} '{cls.name}'")

    @classmethod
    def summary(cls) -> str:
        """First line of the class docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Component":
        """Build the component from its params and a :class:`sketchwm.context.BuildContext`.

        :meth:`sketchwm.registry.Registry.build` calls this for every kind; each kind's base maps the
        context onto its constructor (here: ``cls(params, **context.resources)``). Override it to
        read more of the context.

        Raises:
            ConfigError: bad params, or a context field the kind needs is missing.
        """
        return cls(params, **dict(context.resources))

    @classmethod
    def display_name(cls) -> str:
        """``"<kind> '<name>'"`` (e.g. ``scheme 'global-sketch'``), for messages."""
        return f"{cls.kind} '{cls.name}'"

    # ---------------------------------------------- shared by the keyed kinds (Sketch, WatermarkScheme)
    def _init_table_owner(self, params: Any, vocab_size: int, device: Any) -> None:
        """Set ``params`` (validated, :class:`ConfigError` if bad), ``vocab_size`` (V, int) and ``device``."""
        self.params = self.parse_params(params)
        self.vocab_size = int(vocab_size)
        self.device = torch.device(device)

    @classmethod
    def _key_and_vocab(cls, context: Any) -> tuple[Any, int]:
        """``(key, V)`` of a build context, both required (:class:`ConfigError` naming the component if missing)."""
        return context.require("key", cls.display_name()), context.require("vocab_size", cls.display_name())


# ============================================================================ sketches
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


def ids_summary(ids: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, int, int]:
    """Lengths and id range of a padded batch: ids (B, N) int64, valid (B, N) bool or None →
    (lengths (B,) int64, smallest valid id, largest valid id) (0, 0 for an empty batch).

    On CPU through numpy: torch's multi-threaded reductions spin-wait and slow down by 10-100x on an
    oversubscribed machine, numpy's single-threaded ones do not.
    """
    B, N = ids.shape
    if ids.numel() == 0:
        return torch.zeros(B, dtype=torch.int64), 0, 0
    if ids.device.type == "cpu":
        ids_np = ids.numpy()
        if valid is None:
            return torch.full((B,), N, dtype=torch.int64), int(ids_np.min()), int(ids_np.max())
        valid_np = valid.numpy()
        lengths = valid_np.sum(1, dtype=np.int64)
        if int(lengths.sum()) == B * N:
            return torch.from_numpy(lengths), int(ids_np.min()), int(ids_np.max())
        if not lengths.any():
            return torch.from_numpy(lengths), 0, 0
        return torch.from_numpy(lengths), int(ids_np[valid_np].min()), int(ids_np[valid_np].max())
    valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid
    lengths = valid.sum(1)
    if not bool(valid.any()):
        return lengths, 0, 0
    return lengths, int(ids[valid].min()), int(ids[valid].max())


def check_token_ids(ids: torch.Tensor, valid: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate detector input (every scheme's ``score_ids`` starts here; see
    :meth:`WatermarkScheme.check_ids`).

    Args:
        ids: (B, N) integer token ids.
        valid: (B, N) bool, False on padding.
        vocab_size: V.

    Returns:
        ids (B, N) int64 and valid (B, N) bool.

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
    v_ids = ids[valid]
    if v_ids.numel():
        lo, hi = int(v_ids.min()), int(v_ids.max())
        if lo < 0 or hi >= vocab_size:
            bad = hi if hi >= vocab_size else lo
            raise InputError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    return ids.clamp(0, vocab_size - 1), valid


def distinct_token_sums(ids: torch.Tensor, valid: torch.Tensor, values: torch.Tensor, keep: torch.Tensor,
                        chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, Σ values[v] and Σ keep[v] over the row's *distinct* valid token ids v.

    The presence statistic T = Σ_v c(v)·x_v and n_d = Σ_v keep_v·x_v (x_v = 1[v in the row]) without
    a (B, V) table. On CPU: rows are processed in chunks of ``chunk`` with reused int32 buffers
    (cache-resident, no page faults): sort each row (numpy's vectorised sort), mark the first copy of
    each id, gather both tables, sum; chunks are shared among ``torch.get_num_threads()`` threads
    (numpy releases the GIL). Elsewhere: ``torch.sort`` and the same steps.

    Args:
        ids: (B, N) int64 in [0, V) where valid (not checked here).
        valid: (B, N) bool.
        values: (V + 1,) table, entry V = 0 (padding); an integer dtype gives exact int64 sums, a float
            dtype float64 sums.
        keep: (V + 1,) int8/bool table, entry V = 0.

    Returns:
        (B,) sums of ``values`` (int64 or float64) and (B,) int64 sums of ``keep``.
    """
    V = values.shape[0] - 1
    B, N = ids.shape
    integral = not values.dtype.is_floating_point
    if ids.device.type != "cpu":
        return _distinct_token_sums_torch(ids, valid, values, keep)
    ids_np, valid_np = ids.numpy(), valid.numpy()
    vals_np, keep_np = values.numpy(), keep.to(torch.int8).numpy()
    all_valid = bool(valid_np.all())  # numpy: no torch thread spin-wait (see ids_summary)
    T = np.empty(B, dtype=np.int64 if integral else np.float64)
    n = np.empty(B, dtype=np.int64)
    acc = np.int64 if integral else np.float64

    def run(lo: int, hi: int) -> None:
        step = max(1, min(chunk, hi - lo, (1 << 20) // max(N, 1)))  # rows per buffer: no more than needed, ~1M cells
        buf = np.empty((step, N), np.int32)  # reused per chunk: stays in cache
        first = np.ones((step, N), bool)
        cv = np.empty((step, N), vals_np.dtype)
        kv = np.empty((step, N), np.int8)
        for i in range(lo, hi, step):
            r = min(step, hi - i)
            b, f, c, k = buf[:r], first[:r], cv[:r], kv[:r]
            np.copyto(b, ids_np[i:i + r], casting="unsafe")
            if not all_valid:
                np.putmask(b, ~valid_np[i:i + r], V)
            b.sort(axis=1)
            np.not_equal(b[:, 1:], b[:, :-1], out=f[:, 1:])
            np.take(vals_np, b, out=c)
            np.take(keep_np, b, out=k)
            np.multiply(c, f, out=c)
            np.multiply(k, f, out=k)
            T[i:i + r] = c.sum(1, dtype=acc)
            n[i:i + r] = k.sum(1, dtype=np.int64)

    workers = max(1, min(torch.get_num_threads(), B // chunk))
    if workers == 1:
        run(0, B)
    else:
        bounds = [round(B * j / workers) for j in range(workers + 1)]
        list(_thread_pool(workers).map(run, bounds[:-1], bounds[1:]))
    return torch.from_numpy(T), torch.from_numpy(n)


def _distinct_token_sums_torch(ids: torch.Tensor, valid: torch.Tensor, values: torch.Tensor,
                               keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`distinct_token_sums` in plain torch ops (any device; used off the CPU)."""
    V = values.shape[0] - 1
    tok = torch.sort(torch.where(valid, ids, V), dim=1).values
    first = torch.ones_like(tok, dtype=torch.bool)
    first[:, 1:] = tok[:, 1:] != tok[:, :-1]
    acc = torch.float64 if values.dtype.is_floating_point else torch.int64
    return (values[tok].to(acc) * first).sum(1), (keep[tok].to(torch.int64) * first).sum(1)


_POOL: ThreadPoolExecutor | None = None


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
    pe = 0. Used by :meth:`Sketch.expected_weights_stopping` (see there for the model).

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


def _thread_pool(workers: int) -> ThreadPoolExecutor:
    """A process-wide pool of at least ``workers`` threads (created once: thread start-up is slow on a busy machine)."""
    global _POOL
    if _POOL is None or _POOL._max_workers < workers:
        _POOL = ThreadPoolExecutor(workers, thread_name_prefix="sketchwm-detect")
    return _POOL


class Sketch(Component):
    """A keyed linear sketch of a token sequence (paper Def. 2.3 and §4.1).

    The sketch is defined by a token feature map φ: V → R^D, seen as a matrix Φ (V, D). For a text
    y of N tokens, ``h(y) = Φᵀ c(y) / √N`` where c(y) ∈ N^V counts the tokens. Subclasses implement
    the two linear maps :meth:`project` (Φᵀ) and :meth:`token_scores` (Φ); everything else (sketch
    of ids, expected sketch of eq. 5) is built on them.

    Args:
        params: validated ``Params``.
        key_seed_source: the sketch key k_sk (a :class:`sketchwm.keys.WatermarkKey`).
        vocab_size: V, number of token ids (the model's logit dimension).
        token_prior: π_tok as non-negative float64 counts or probabilities, shape (V,), or None.
        device: where tables live.
    """

    kind = "sketch"

    def __init__(self, params, key, vocab_size: int, token_prior: torch.Tensor | None = None, device="cpu"):
        self._init_table_owner(params, vocab_size, device)

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Sketch":
        """``cls(params, key, vocab_size, token_prior, device)`` from the context (key and V required)."""
        return cls(params, *cls._key_and_vocab(context), context.token_prior, context.device, **dict(context.resources))

    @property
    @abstractmethod
    def dim(self) -> int:
        """D, the sketch dimension."""

    @property
    def width(self) -> int:
        """w, the bucket count used to scale λ = γ√w (paper §4.1). Defaults to D."""
        return self.dim

    @abstractmethod
    def project(self, weights: torch.Tensor) -> torch.Tensor:
        """Φᵀ weights: (B, V) float → (B, D) float32 (unnormalised, Σ_v weights_v φ(v))."""

    @abstractmethod
    def token_scores(self, r: torch.Tensor) -> torch.Tensor:
        """Φ r: (B, D) float → (B, V) float32, the per-token inner products ⟨r, φ(v)⟩ (eq. 6 without 1/√N)."""

    def report(self) -> dict[str, Any]:
        """Diagnostics of the built tables (e.g. sign imbalance); JSON-serialisable."""
        return {}

    # ---------------------------------------------------------------- derived operations
    def counts(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Token counts c(y): ids (B, N) int64 (+ valid (B, N) bool) → (B, V) float32.

        Raises:
            InputError: ids outside [0, V).
        """
        ids = ids.to(self.device)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            bad = int(ids.max()) if int(ids.max()) >= self.vocab_size else int(ids.min())
            raise InputError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        w = torch.ones(ids.shape, dtype=torch.float32, device=self.device)
        if valid is not None:
            w = w * valid.to(self.device, torch.float32)
        out = torch.zeros(ids.shape[0], self.vocab_size, dtype=torch.float32, device=self.device)
        return out.scatter_add_(1, ids, w)

    #: ``count`` (the paper's sketch of token counts) or ``presence`` (of the set of distinct tokens).
    counting: str = "count"
    #: (V,) bool, False for tokens whose feature φ(v) is zero, or None (every token counts).
    keep: torch.Tensor | None = None

    def weights(self, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the sketch sums and its normaliser: counts (B, V) → x (B, V) float32, n (B,) float32.

        ``count``: x = c(y) (kept tokens), n = Σ_v x_v = N. ``presence``: x_v = 1[c_v(y) > 0] (kept
        tokens), n = number of distinct kept tokens. h(y) = Φᵀx / √n.
        """
        x = (counts > 0).float() if self.counting == "presence" else counts.float()
        if self.keep is not None:
            x = x * self.keep.to(x.device, x.dtype)[None, :]
        return x, x.sum(1)

    def sparse_weights(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`weights` without the (B, V) table: x(y) as weights on the text's own positions.

        Returns tok (B, N) int64 in [0, V] (V on padding) and x (B, N) float32 such that
        Σ_j x[b, j]·e_{tok[b, j]} equals row b of ``weights(counts(ids, valid))[0]`` and
        x.sum(1) its n. ``count``: tok = ids, x = keep. ``presence``: each row is sorted
        (:func:`sort_rows`) and only the first copy of every kept token gets weight 1. Costs O(B·N)
        memory and one row sort, not O(B·V).

        Raises:
            InputError: ids outside [0, V).
        """
        ids = self.check_ids(ids, valid)[0]
        V = self.vocab_size
        tok = ids if valid is None else torch.where(valid.to(self.device), ids, V)  # (B, N), V = padding
        keep_ext = self.keep_table()  # (V + 1,) float32, 0 on the padding id V
        if self.counting != "presence":
            return tok, keep_ext[tok]
        tok = sort_rows(tok)
        first = torch.ones(tok.shape, dtype=torch.bool, device=tok.device)
        first[:, 1:] = tok[:, 1:] != tok[:, :-1]
        return tok, torch.where(first, keep_ext[tok], 0.0)

    def check_ids(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, N) on the sketch's device, after checking the valid ones lie in [0, V), and the
        lengths (B,) int64 (valid tokens per row; see :func:`ids_summary`).

        Raises:
            InputError: a valid id outside [0, V) (names it).
        """
        ids = ids.to(self.device)
        lengths, lo, hi = ids_summary(ids, None if valid is None else valid.to(self.device))
        if lo < 0 or hi >= self.vocab_size:
            raise InputError(f"token id {hi if hi >= self.vocab_size else lo} is outside the vocabulary [0, {self.vocab_size})")
        return ids, lengths

    def keep_table(self) -> torch.Tensor:
        """(V + 1,) float32: 1 on kept tokens, 0 on excluded ones and on the padding id V (cached)."""
        t = self.__dict__.get("_keep_ext")
        if t is None or t.device != self.device:
            t = torch.ones(self.vocab_size + 1, dtype=torch.float32, device=self.device)
            if self.keep is not None:
                t[: self.vocab_size] = self.keep.to(self.device, torch.float32)
            t[self.vocab_size] = 0.0
            self.__dict__["_keep_ext"] = t
        return t

    def _scratch(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised tensor of ``shape``, its storage kept and reused across calls (a fresh
        (B, M, V) allocation's page faults cost as much as a pass over it on CPU); overwritten at the
        next call, so callers must not keep it."""
        n = int(np.prod(shape))
        flat = self.__dict__.get("_scratch_buf")
        if flat is None or flat.numel() < n or flat.device != torch.device(device) or flat.dtype != dtype:
            flat = torch.empty(n, dtype=dtype, device=device)
            self.__dict__["_scratch_buf"] = flat
        return flat[:n].view(shape)

    @staticmethod
    def _stop_absence_at_rows(
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

    def project_sparse(self, tok: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Φᵀx from :meth:`sparse_weights`' (tok, x), both (B, N) → (B, D) float32.

        Default: through a dense (B, V) scatter and :meth:`project`; sketches with per-token
        tables override it with an O(B·N) scatter.
        """
        dense = torch.zeros(tok.shape[0], self.vocab_size + 1, dtype=torch.float32, device=tok.device)
        dense.scatter_add_(1, tok, x.float())
        return self.project(dense[:, : self.vocab_size])

    def sketch(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """h_k(y) = Φᵀ x(y) / √n (paper §4.1; x, n from :meth:`weights`): ids (B, N) int64 → (B, D) float32.

        Rows with n = 0 give a zero sketch. Exactly invariant to permutations of the tokens of a
        row; with ``presence`` also to adding copies of tokens already present.

        Raises:
            InputError: ids outside [0, V).
        """
        x, n = self.weights(self.counts(ids, valid))  # (B, V), (B,)
        return self.project(x) / n.clamp_min(1.0).sqrt()[:, None]

    def expected_sketch(
        self, frozen_counts: torch.Tensor, marginal_mass: torch.Tensor, n_tokens: torch.Tensor | float
    ) -> torch.Tensor:
        """Expected sketch ĥ_{k,t} of eq. (5) for ``count``: Φᵀ(c_F + Σ_{i∈M_t} p_i) / √N.

        Args:
            frozen_counts: (B, V) float, counts of the unmasked tokens (F_t).
            marginal_mass: (B, V) float, Σ_{i∈M_t} p_i^{(t)}(v).
            n_tokens: N, the final text length, scalar or (B,) tensor.

        Returns:
            (B, D) float32.
        """
        n = torch.as_tensor(n_tokens, dtype=torch.float32, device=self.device).reshape(-1, 1)
        return self.project(frozen_counts + marginal_mass) / n.sqrt()

    def expected_weights(
        self, frozen_counts: torch.Tensor, probs: torch.Tensor, valid: torch.Tensor, n_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """E[x(Y)] under the independent masked marginals (eq. 5 and its presence analogue).

        ``count``: E[x] = c_F + Σ_{i∈M} p_i (eq. 5), n̂ = N. ``presence``: E[x_v] = 1 if v is frozen,
        else 1 − Π_{i∈M}(1 − p_i(v)) (independent positions), n̂ = Σ_v E[x_v] (a plug-in for the
        random number of distinct tokens, see :mod:`sketchwm_builtin.global_sketch`).

        Args:
            frozen_counts: (B, V) float32 counts of the unmasked tokens.
            probs: (B, M, V) float32 masked marginals; OVERWRITTEN for ``presence`` (log(1 − p)).
            valid: (B, M) bool, which rows of ``probs`` are masked positions.
            n_tokens: N (the generation length).

        Returns:
            w_hat (B, V) float32, n_hat (B,) float32, and for ``presence`` log_absent (B, V) float32 =
            Σ_{i∈M} log(1 − p_i(v)) (None for ``count``).
        """
        if self.counting == "count":
            mass = torch.bmm(valid.to(probs.dtype)[:, None, :], probs)[:, 0]  # (B, V) Σ_{i∈M} p_i
            return (*self.weights_from_sums(frozen_counts, mass, n_tokens), None)
        log1m = probs.clamp_(max=1 - 1e-6).neg_().log1p_()  # (B, M, V) log(1 − p_i(v)), in place
        log_absent = torch.bmm(valid.to(probs.dtype)[:, None, :], log1m)[:, 0]  # (B, V)
        return (*self.weights_from_sums(frozen_counts, log_absent, n_tokens), log_absent)

    def weights_from_sums(self, frozen_counts: torch.Tensor, sums: torch.Tensor,
                          n_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """E[x(Y)] and n̂ from the column sums of the masked marginals (eq. 5 and its presence analogue).

        Args:
            frozen_counts: (B, V) float32 counts of the unmasked tokens.
            sums: (B, V) float32, Σ_{i∈M} p_i(v) for ``count``, Σ_{i∈M} log(1 − p_i(v)) for
                ``presence`` (:func:`sketchwm.marginal_sums.masked_marginal_sums` computes both);
                not modified.
            n_tokens: N (the generation length).

        Returns:
            w_hat (B, V) float32 (0 on excluded tokens) and n_hat (B,) float32: N for ``count``,
            Σ_v E[x_v] (at least 1) for ``presence``.
        """
        keep = None if self.keep is None else self.keep_table()[None, : self.vocab_size].to(sums.device)  # (1, V)
        with serial_on_cpu(sums.device):  # (B, V) ops only
            if self.counting == "count":
                w = sums.add(frozen_counts)
                if keep is not None:
                    w.mul_(keep)
                return w, torch.full((w.shape[0],), float(n_tokens), device=w.device)
            w = torch.expm1(sums).neg_().masked_fill_(frozen_counts > 0, 1.0)  # (B, V)
            if keep is not None:
                w.mul_(keep)
            return w, w.sum(1).clamp_min(1.0)

    def expected_weights_stopping(
        self, tokens: torch.Tensor, masked: torch.Tensor, probs: torch.Tensor, positions: torch.Tensor,
        valid: torch.Tensor, eos: int, rows: torch.Tensor | None = None,
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
        EOS mass (p(e) = 0 everywhere) this is :meth:`expected_weights` exactly. Vectorised over
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
            Source: eq. (5) extended to the text cut at its first EOS (issue 13; the paper has no EOS).
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
            keep = None if self.keep is None else self.keep_table()[None, :V].to(dev)  # (1, V) float32, cached
        if self.counting == "count":
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
            p0 = stop_absence_(probs, p_e[..., None], None, self._scratch(probs.shape, probs.dtype, dev))  # (B, V) P(x_v = 0)
            dw = probs  # now ∂ŵ_v/∂p_i(v)
            dw[out_b, out_m] = 0.0
        else:
            p0, dw = self._stop_absence_at_rows(probs, p_e, inside, rows)
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


# ============================================================================ scores
class ScoreFunction(Component):
    """A detector score S(u, h) with its residual gradient and p-values (paper §4, §5.2).

    Detection contract (shared with :class:`WatermarkScheme`): :meth:`p_values` returns the same
    :class:`SchemeScores` as :meth:`WatermarkScheme.score_ids` (score, z, p-value, tokens scored,
    method), and :meth:`analytic_threshold` has the scheme's signature ``(alpha, n_tokens) -> float``
    (raising NotImplementedError when there is no closed form). The statistics themselves (exact
    Rademacher tails, bounds, normal tails) live in :mod:`sketchwm.stats`.

    Args:
        params: validated ``Params``.
        dim: D.
        width: w, for the scale λ = γ√w.
    """

    kind = "score"
    #: True if larger scores mean "watermarked".
    higher_is_watermarked: ClassVar[bool] = True

    def __init__(self, params, dim: int, width: int):
        self.params = self.parse_params(params)
        self.dim = int(dim)
        self.width = int(width)

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "ScoreFunction":
        """``cls(params, D, w)`` with D and w read from the context's ``sketch`` (required)."""
        sketch = context.require("sketch", cls.display_name())
        return cls(params, sketch.dim, sketch.width, **dict(context.resources))

    @abstractmethod
    def score(self, u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Statistic for direction u (D,) and sketches h (B, D) → (B,) float64."""

    @abstractmethod
    def residual(self, u: torch.Tensor, h_hat: torch.Tensor) -> torch.Tensor:
        """Ascent direction ½∇_h S at h_hat: u (D,), h_hat (B, D) → (B, D) float32 (r_{k,t} of eq. 6)."""

    @abstractmethod
    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """A threshold on ``score`` whose key-randomised false-positive probability is <= alpha for texts
        of ``n_tokens`` tokens (eq. 19 or analogue); same signature as :meth:`WatermarkScheme.analytic_threshold`.

        Raises:
            InputError: alpha outside (0, 1).
            NotImplementedError: no closed form.
        """

    @abstractmethod
    def p_values(self, u: torch.Tensor, h: torch.Tensor, n_tokens: torch.Tensor, method: str = "exact") -> "SchemeScores":
        """Score, z and key-randomised p-value of sketches h (B, D) against direction u (D,).

        Args:
            u: (D,) direction; h: (B, D) sketches; n_tokens: (B,) the sketches' normaliser N
                (``n_scored`` of the result); method: how to compute the p-value (score-specific;
                implementations may take further keyword-only options).

        Returns:
            :class:`SchemeScores`, every field (B,) (float64, ``n_scored`` int64).
        """


# ============================================================================ backends
def tokenizer_fingerprint(tokenizer: Any) -> str:
    """16-hex SHA-256 of a tokenizer's vocabulary (token → id), used to refuse a wrong tokenizer.

    Computed once per tokenizer object and vocabulary size (a vocabulary of 10^5 tokens takes a
    noticeable part of a command's start-up; adding tokens changes the size and recomputes it).
    """
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    try:
        cached = _FINGERPRINTS.get(tokenizer)
    except TypeError:  # not weak-referenceable
        cached = None
    if cached is not None and cached[0] == size:
        return cached[1]
    vocab = tokenizer.get_vocab()
    blob = "\n".join(f"{t}\t{i}" for t, i in sorted(vocab.items(), key=lambda kv: kv[1]))
    fp = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    try:
        _FINGERPRINTS[tokenizer] = (size, fp)
    except TypeError:
        pass
    return fp


_FINGERPRINTS: "weakref.WeakKeyDictionary[Any, tuple[int | None, str]]" = weakref.WeakKeyDictionary()


class DLMBackend(Component):
    """A masked diffusion language model as the engine sees it.

    Subclasses set the attributes below in ``__init__`` and implement :meth:`logits`.

    Attributes:
        model_id: a stable identifier of the checkpoint (recorded in calibration files).
        tokenizer: a Hugging Face tokenizer (``encode``/``decode``/``get_vocab``).
        mask_token_id: id of [MASK].
        vocab_size: V, the logit dimension.
        eos_token_id: id ending a text, or None.
        banned_token_ids: ids never sampled (special tokens), list[int].
        max_length: longest supported input (prompt + generation), tokens.
        device: torch.device of the model.
        sampler_defaults: dict of :class:`sketchwm.engine.SamplerConfig` fields this model works best with.
    """

    kind = "backend"
    model_id: str
    tokenizer: Any
    mask_token_id: int
    vocab_size: int
    eos_token_id: int | None = None
    banned_token_ids: list[int]
    max_length: int = 4096
    device: torch.device
    sampler_defaults: dict[str, Any] = {}

    @abstractmethod
    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Denoiser logits aligned with the input: (B, L) int64 → (B, L, V) float32.

        Position i of the output is the model's marginal (as logits) for token i. Backends whose
        model predicts the next position (Dream) shift internally.

        Args:
            input_ids: (B, L) int64.
            attention_mask: (B, L) bool/int, 1 on real tokens, or None.
            positions: (B, L) bool, the positions whose logits are needed, or None for all. A backend
                may compute only those (the LM head dominates the cost of small models) and leave
                finite placeholder values elsewhere.
        """

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor:
        """Logits at selected positions only: index (B, K) int64 into [0, L) → (B, K, V) float32.

        Default: gathers from :meth:`logits`; backends override it to skip the LM head elsewhere.
        """
        full = self.logits(input_ids, attention_mask)  # (B, L, V)
        return torch.gather(full, 1, index[..., None].expand(-1, -1, full.shape[-1]))

    def postprocess_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The backend's fixed edits of the model's aligned logits (B, L, V) float32 → same, applied
        by :meth:`logits` and by the user-loop adapters of :mod:`sketchwm.userloop` (e.g. LLaDA merges
        its end-of-turn logit into EOS). Default: unchanged."""
        return logits

    # ---------------------------------------------------------------- text helpers
    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenise texts without special tokens → list of id lists."""
        return [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]

    def encode_prompts(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenise prompt strings for generation (instruct backends apply the chat template). Default: :meth:`encode`."""
        return self.encode(texts)

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenise ids, skipping special tokens."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=True)

    @property
    def tokenizer_fingerprint(self) -> str:
        """See :func:`tokenizer_fingerprint`."""
        return tokenizer_fingerprint(self.tokenizer)


# ============================================================================ schemes
def packed_masked_positions(masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the True positions of each row, packed to the left.

    Args:
        masked: (B, G) bool, e.g. M_t.

    Returns:
        positions (B, M) int64 with M = the largest count of a row: row b lists its True positions
        in increasing order, then (padding) some of its False positions; valid (B, M) bool, True on
        the former. Indices within a row are distinct.
    """
    counts = masked.sum(1)  # (B,)
    M = int(counts.max()) if masked.numel() else 0
    order = torch.argsort((~masked).to(torch.uint8), dim=1, stable=True)[:, :M]  # True first, in order
    valid = torch.arange(M, device=masked.device)[None, :] < counts[:, None]
    return order, valid


def row_index(positions: torch.Tensor, gen_length: int) -> torch.Tensor:
    """The row of each position in a packed layout: positions (B, R) int64 (distinct per text) →
    (B, G) int64 with out[b, positions[b, r]] = r (0 at positions not listed)."""
    B, R = positions.shape
    return torch.zeros(B, gen_length, dtype=torch.long, device=positions.device).scatter_(
        1, positions, torch.arange(R, device=positions.device).expand(B, R))


@dataclass(frozen=True)
class MarginalReads:
    """What a scheme's hooks read of the marginals at a denoising step: its declaration.

    The engine computes the LM head on these rows only and derives its fast path from this alone
    (:class:`Marginals` says what it passes). Build one with:

    * :meth:`sampled` — only the rows about to be sampled (the targets): the hooks transform each
      target row from that row alone (Unigram, KGW, AAR, KTH).
    * :meth:`masked` — every masked row (default): the hooks read a statistic over M_t, such as the
      global sketch's Σ_{i∈M_t} p_i of eq. 5 of the seed paper.
    * :meth:`near` — the masked rows within ``radius`` positions of a target (red-green-dlm's
      neighbour marginals, Gloaguen et al. 2025).

    Attributes:
        kind: ``sampled``, ``masked`` or ``near``.
        radius: r >= 0 for ``near`` (0 otherwise).
        incremental: ``masked`` only. The hooks keep a running statistic over M_t across the steps
            of one generation (reset by :meth:`WatermarkScheme.begin`), so between refreshes
            (``SamplerConfig.marginal_refresh``) the engine computes and passes the target rows
            only (:attr:`Marginals.complete` False): the other masked rows keep the marginals of
            the last complete step, an approximation whose effect the scheme must measure.

    Raises:
        ValueError: an unknown kind, a negative radius, or ``incremental`` with another kind.
    """

    kind: Literal["sampled", "masked", "near"] = "masked"
    radius: int = 0
    incremental: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("sampled", "masked", "near"):
            raise ValueError(f"unknown marginal reads kind {self.kind!r}")
        if self.radius < 0 or (self.radius and self.kind != "near"):
            raise ValueError(f"radius must be >= 0 and only given with kind 'near', got {self.radius} with {self.kind!r}")
        if self.incremental and self.kind != "masked":
            raise ValueError(f"incremental reads need kind 'masked', got {self.kind!r}")

    @classmethod
    def sampled(cls) -> "MarginalReads":
        """Only the target rows."""
        return cls("sampled")

    @classmethod
    def masked(cls, incremental: bool = False) -> "MarginalReads":
        """Every masked row of the canvas (all blocks); ``incremental``: see the class doc."""
        return cls("masked", 0, incremental)

    @classmethod
    def near(cls, radius: int) -> "MarginalReads":
        """The masked rows within ``radius`` positions of a target (and the targets)."""
        return cls("near", int(radius))

    def layout(self, masked: torch.Tensor, targets: torch.Tensor,
               target_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows to compute for a step and where the targets sit among them.

        Args:
            masked: (B, G) bool, M_t.
            targets: (B, K) int64 distinct generation-region positions about to be sampled.
            target_valid: (B, K) bool, False on padding entries (ignored by the engine).

        Returns:
            positions (B, R) int64 and valid (B, R) bool of the rows (``sampled``: the targets
            themselves, in their order; else the declared masked rows in increasing position order,
            padding after), and rows (B, K) int64, the row of each target.
        """
        B, K = targets.shape
        if self.kind == "sampled":
            return targets, target_valid, torch.arange(K, device=targets.device).expand(B, K)
        need = masked
        if self.kind == "near":  # masked rows within r of a target: a max-pool of the targets' indicator
            chosen = torch.zeros_like(masked).scatter(1, targets, target_valid)
            near = torch.nn.functional.max_pool1d(chosen[:, None, :].float(), kernel_size=2 * self.radius + 1,
                                                  stride=1, padding=self.radius)[:, 0]
            need = masked & (near > 0)
        positions, valid = packed_masked_positions(need)  # (B, R)
        return positions, valid, torch.gather(row_index(positions, masked.shape[1]), 1, targets)


@dataclass
class Marginals:
    """The model's marginals (as logits) of some rows of the generation region, packed: the one
    shape in which every scheme sees them (see :class:`MarginalReads`).

    Attributes:
        logits: (B, R, V) float32, the marginals p_i as logits, banned ids at -inf; rows with
            ``valid`` False hold unspecified values. Hooks must not modify it (use
            :meth:`target_logits`).
        positions: (B, R) int64 generation-region index i of each row; the valid rows of a text are
            distinct (in increasing order unless the scheme reads only the sampled rows).
        valid: (B, R) bool, True on rows of masked positions.
        targets: (B, K) int64, the rows about to be tilted and sampled: indices into ``logits``.
        target_valid: (B, K) bool, False on padding targets (a text that commits fewer than K
            tokens); the engine ignores what the hooks return for them.
        out: optional (B, K, V) float32 tensor the tilted target logits must be written to (a caller
            that keeps ``logits`` intact and owns the output buffer: a benchmark, a user's loop);
            then :meth:`target_logits` copies the targets into it and hooks may write it directly
            (``torch.add(..., out=out)``: one pass instead of a copy and a tilt). None (the engine):
            the hooks may tilt ``logits`` itself.
        complete: True when the rows are every row the scheme declared. False only for
            ``MarginalReads.masked(incremental=True)`` between refreshes: the rows are then the
            targets alone (rows = targets, positions = their positions) or, at a partial
            refresh, the targets and more masked rows, all fresh; every other masked row keeps
            the marginals the scheme last saw for it. A scheme with incremental reads may keep
            ``logits`` of a complete step and overwrite its rows at later steps of the same
            generation when ``out`` is None (the engine never reuses them); callers that pass
            ``out`` keep their ``logits`` intact.
        incremental_follows: True on a complete step of the engine's incremental strategy
            (:class:`sketchwm.engine.IncrementalMarginals`): the next steps pass fresh rows only
            until the next complete one, so an incremental scheme should hold these rows. False
            (exact strategies, benchmarks, user loops): nothing needs holding.

    Raises:
        ValueError: shapes that disagree (``out`` included).
    """

    logits: torch.Tensor
    positions: torch.Tensor
    valid: torch.Tensor
    targets: torch.Tensor
    target_valid: torch.Tensor
    out: torch.Tensor | None = None
    complete: bool = True
    incremental_follows: bool = False

    def __post_init__(self) -> None:
        if self.logits.dim() != 3 or self.positions.shape != self.logits.shape[:2] or self.valid.shape != self.positions.shape:
            raise ValueError(f"marginals: logits {tuple(self.logits.shape)}, positions {tuple(self.positions.shape)} and "
                             f"valid {tuple(self.valid.shape)} must be (B, R, V), (B, R), (B, R)")
        if self.targets.dim() != 2 or self.targets.shape != self.target_valid.shape or self.targets.shape[0] != self.logits.shape[0]:
            raise ValueError(f"marginals: targets {tuple(self.targets.shape)} and target_valid "
                             f"{tuple(self.target_valid.shape)} must both be (B, K) with B = {self.logits.shape[0]}")
        R, K = self.logits.shape[1], self.targets.shape[1]
        if self.out is not None and self.out.shape != (self.logits.shape[0], K, self.logits.shape[2]):
            raise ValueError(f"marginals: out {tuple(self.out.shape)} must be (B, K, V) = "
                             f"{(self.logits.shape[0], K, self.logits.shape[2])}")
        #: the targets are exactly the rows, in order (then :meth:`target_logits` is ``logits`` itself)
        self.rows_are_targets = R == K and bool(
            (self.targets == torch.arange(K, device=self.targets.device)).all())

    @classmethod
    def canvas(cls, logits: torch.Tensor, masked: torch.Tensor, out: torch.Tensor | None = None) -> "Marginals":
        """Every position of the generation region as a row, every masked one a target.

        For code holding the full canvas (user sampling loops, tests): logits (B, G, V) float32,
        masked (B, G) bool; unmasked rows are padding. The hooks then return (B, G, V), written to
        ``out`` (B, G, V) when given (``logits`` then stays as it was).
        """
        B, G = masked.shape
        rows = torch.arange(G, device=masked.device).expand(B, G)
        return cls(logits, rows, masked, rows, masked, out)

    @classmethod
    def select(cls, logits: torch.Tensor, masked: torch.Tensor, targets: torch.Tensor, target_valid: torch.Tensor,
               reads: MarginalReads | None = None) -> "Marginals":
        """What the engine passes for ``reads`` (default: every masked row), picked from full-canvas
        logits (B, G, V): masked (B, G) bool, targets (B, K) int64 positions, target_valid (B, K) bool."""
        positions, valid, rows = (reads or MarginalReads.masked()).layout(masked, targets, target_valid)
        return cls(torch.gather(logits, 1, positions[..., None].expand(-1, -1, logits.shape[-1])), positions, valid,
                   rows, target_valid)

    @property
    def target_rows(self) -> torch.Tensor:
        """(B, R) bool, True on the rows that are (valid) targets."""
        return torch.zeros_like(self.valid).scatter_(1, self.targets, self.target_valid)

    @property
    def target_positions(self) -> torch.Tensor:
        """(B, K) int64, the generation-region position of each target."""
        return torch.gather(self.positions, 1, self.targets)

    def at_target_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Per-row values (B, R, ...) at the targets: (B, K, ...) (``x`` itself when the rows are the targets)."""
        if self.rows_are_targets:
            return x
        idx = self.targets.reshape(self.targets.shape + (1,) * (x.dim() - 2)).expand(-1, -1, *x.shape[2:])
        return torch.gather(x, 1, idx)

    def at_targets(self, x: torch.Tensor) -> torch.Tensor:
        """Per-position values (B, G, ...) of the generation region at the targets: (B, K, ...)."""
        pos = self.target_positions
        return torch.gather(x, 1, pos.reshape(pos.shape + (1,) * (x.dim() - 2)).expand(-1, -1, *x.shape[2:]))

    def target_logits(self) -> torch.Tensor:
        """(B, K, V) float32, the targets' logits, a tensor the caller may modify in place: ``out``
        holding a copy of them when given, else ``logits`` itself when the rows are the targets (read
        what you need from ``logits`` first), else a copy."""
        if self.out is not None:
            return self.out.copy_(self.at_target_rows(self.logits))
        return self.at_target_rows(self.logits)


@dataclass
class DenoiseStep:
    """What a watermark scheme sees at one denoising step (generation region only).

    Attributes:
        step: 0-based index of this step; ``total_steps`` steps in all (the paper's t = T - step).
        total_steps: T.
        tokens: (B, G) int64, current generation-region tokens (``mask_token_id`` where masked).
        masked: (B, G) bool, M_t restricted to the generation region.
        marginals: the :class:`Marginals` of the rows the scheme declared it reads
            (:attr:`WatermarkScheme.reads`) and the target rows about to be sampled.
        prompt_ids: (B, P) int64, left-padded prompts.
        prompt_mask: (B, P) bool, True on real prompt tokens.
        block: (start, end) of the block being decoded, in generation-region coordinates.
        mask_token_id: id of [MASK].
        generator: the sampler's torch.Generator (schemes should prefer keyed randomness).
    """

    step: int
    total_steps: int
    tokens: torch.Tensor
    masked: torch.Tensor
    marginals: Marginals
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    block: tuple[int, int]
    mask_token_id: int
    generator: torch.Generator | None = None


@dataclass
class SchemeScores:
    """Per-text detection statistics returned by :meth:`WatermarkScheme.score_ids`.

    Attributes:
        score: (B,) float64, the scheme's statistic (thresholds are on this).
        z: (B,) float64, a z-score (standardised statistic) for display and ranking.
        p_value: (B,) float64, p-value under the scheme's null.
        n_scored: (B,) int64, tokens that entered the statistic.
        p_value_method: e.g. "exact key-randomised (FFT)", "binomial", "gamma".
    """

    score: torch.Tensor
    z: torch.Tensor
    p_value: torch.Tensor
    n_scored: torch.Tensor
    p_value_method: str


class WatermarkScheme(Component):
    """A watermark: hooks the engine calls during denoising, and a detector.

    With no scheme the engine samples the base model. At each step the engine picks the target
    rows (the positions it may commit), computes the marginals of the rows the scheme declares in
    :attr:`reads`, and calls
      * :meth:`process_logits` — the tilted logits of the target rows (B, K, V),
      * :meth:`sampling_uniforms` — keyed uniforms replacing the sampling noise, when :attr:`noise`
        is ``"keyed"`` (distortion-free schemes).

    Which positions are committed is the sampler's remasking rule alone
    (:class:`sketchwm.engine.RemaskingRule`); no scheme changes it, so random remasking can pick
    the targets before any marginal is computed.

    Args:
        params: validated ``Params``.
        key: the :class:`sketchwm.keys.WatermarkKey`.
        vocab_size: V.
        device: where tables live.
    """

    kind = "scheme"
    #: Minimum number of tokens for a meaningful detection; shorter texts raise InputError. Set from
    #: ``params.min_tokens`` by :meth:`__init__` when the scheme's ``Params`` have that field.
    min_tokens: int = 16
    #: Which rows of the marginals the hooks read (:class:`MarginalReads`); the engine runs the LM
    #: head on those rows only. A scheme whose reads depend on its params makes this a property.
    #: ``MarginalReads.masked(incremental=True)`` promises that the hooks also run on the sampled
    #: rows alone between refreshes (``Marginals.complete`` False; the global sketch).
    reads: MarginalReads = MarginalReads.masked()
    #: ``"sampler"``: tokens are drawn with the sampler's Gumbel noise (from its generator);
    #: ``"keyed"``: the scheme's :meth:`sampling_uniforms` supplies it (the engine calls that hook
    #: only then; user sampling loops cannot run such a scheme, :class:`sketchwm.userloop.LogitsTilter`).
    noise: Literal["sampler", "keyed"] = "sampler"

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        self._init_table_owner(params, vocab_size, device)
        if "min_tokens" in type(self.params).model_fields:  # a scheme whose params carry the detector's minimum
            self.min_tokens = self.params.min_tokens

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "WatermarkScheme":
        """``cls(params, key, vocab_size, device=device)`` from the context (key and V required)."""
        return cls(params, *cls._key_and_vocab(context), device=context.device, **dict(context.resources))

    #: The id that ends a text (the backend's EOS when the sampler cuts texts there), or None: set
    #: by the engine through :meth:`set_stop_token` before :meth:`begin`.
    stop_token_id: int | None = None

    # -------------------------------------------------------------- generation hooks
    def set_stop_token(self, token_id: int | None) -> None:
        """Tell the scheme which id ends a text (texts are scored up to its first occurrence), or None.

        Called by the engine before each :meth:`begin` with the backend's ``eos_token_id`` when
        ``stop_at_eos`` is on. Code driving its own sampling loop calls it the same way.

        Raises:
            ConfigError: an id outside [0, V).
        """
        if token_id is not None and not 0 <= int(token_id) < self.vocab_size:
            from .errors import ConfigError

            raise ConfigError(f"stop token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
        self.stop_token_id = None if token_id is None else int(token_id)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Called once before a batch is denoised (reset per-generation state). Default: nothing."""

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Tilted marginals of the target rows as logits: (B, K, V) float32 (K = the targets of
        ``step.marginals``); what is returned for padding targets is ignored.

        A scheme may modify ``step.marginals.target_logits()`` in place and return it. Default:
        the targets' logits unchanged.
        """
        return step.marginals.target_logits()

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor | None:
        """Keyed uniforms in (0, 1) replacing the Gumbel noise of the target rows: (B, K, V) float32,
        or None (default). Called only when :attr:`noise` is ``"keyed"``, after :meth:`process_logits`."""
        return None

    # -------------------------------------------------------------- detection
    # The one detection contract (shared with ScoreFunction.p_values / analytic_threshold):
    #   score_ids(ids (B, N) int64, valid (B, N) bool) -> SchemeScores, every field (B,)
    #   analytic_threshold(alpha: float, n_tokens: int) -> float  (NotImplementedError: no closed form)
    # Build p-values from sketchwm.stats (exact tails, bounds, permutation p-values, scores_from_log_p).
    def check_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Detector input on the scheme's device, checked: ids (B, N) int64 (valid ones in [0, V), the
        rest clamped there) and valid (B, N) bool. See :func:`check_token_ids`.

        Raises:
            InputError: wrong rank or shapes, non-integer ids, or a valid id outside [0, V) (named).
        """
        return check_token_ids(ids.to(self.device), valid.to(self.device), self.vocab_size)

    @abstractmethod
    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Detection statistics for ids (B, N) int64 with valid (B, N) bool (padding False).

        Returns:
            :class:`SchemeScores`: ``score`` (thresholds apply to it; larger = more watermarked), ``z``,
            ``p_value`` under the scheme's null, ``n_scored`` and ``p_value_method``, each (B,).

        Raises:
            InputError: wrong shapes or ids outside [0, V).
        """

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Threshold on ``score`` with false-positive probability <= alpha for a text of ``n_tokens``
        tokens, without calibration.

        Default: the score that corresponds to p-value alpha is unknown, so schemes override; the
        detector falls back to ``p_value <= alpha`` when this raises NotImplementedError.

        Raises:
            InputError: alpha outside (0, 1) (overrides).
            NotImplementedError: no closed form (the default).
        """
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """JSON-serialisable ``{"name", "params"}`` (no secrets)."""
        return {"name": self.name, "params": self.params.model_dump(mode="json")}


# ============================================================================ attacks
@dataclass
class AttackOutput:
    """Result of an attack on a batch of texts.

    Attributes:
        texts: edited texts, same order and length as the input.
        edit_fraction: per text, fraction of words (or tokens) the attack changed, in [0, 1+].
        levenshtein: per text, token-level Levenshtein distance to the input (int).
        similarity: per text, cosine similarity of sentence embeddings to the input, or NaN if not computed.
        meta: free-form extra metadata (JSON-serialisable).
    """

    texts: list[str]
    edit_fraction: list[float]
    levenshtein: list[int]
    similarity: list[float]
    meta: dict[str, Any] = field(default_factory=dict)


class Attack(Component):
    """An edit applied to texts to remove (or forge) a watermark.

    ``strength`` in [0, 1] has an attack-specific, documented meaning (usually the fraction of
    words edited). Randomness only through the given ``torch.Generator``.
    """

    kind = "attack"

    def __init__(self, params=None, **resources: Any):
        self.params = self.parse_params(params)
        self.resources = resources

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Attack":
        """``cls(params, **resources)``; the context's ``backend`` becomes the ``backend`` resource unless given."""
        resources = dict(context.resources)
        if context.backend is not None:
            resources.setdefault("backend", context.backend)
        return cls(params, **resources)

    @abstractmethod
    def apply(
        self,
        texts: Sequence[str],
        strength: float,
        generator: torch.Generator,
        *,
        token_ids: Sequence[Sequence[int]] | None = None,
        prompts: Sequence[str] | None = None,
    ) -> AttackOutput:
        """Edit ``texts`` (see class doc).

        Args:
            texts: B input texts, a list (not one string).
            strength: in [0, 1]; meaning documented by each attack.
            generator: the only source of randomness (a seeded ``torch.Generator``).
            token_ids: optional B token-id lists of the texts (model tokens), used by token-level attacks.
            prompts: optional B prompts that produced the texts (used by paraphrasers if given).

        Returns:
            :class:`AttackOutput`, one entry per text in each list.

        Raises:
            ConfigError: strength outside [0, 1]. InputError: bad texts or extras (as each attack documents).
        """
