"""Contexts of the context-keyed baseline schemes: context sets, context hashes, (hash, token)
counters, per-position row caches, duplicate removal and detector input checks; and
:class:`KeyedNoiseScheme`, the base of the distortion-free (keyed-noise) baselines.

Conventions (all vectorised, no loop over tokens or the vocabulary):

* A *context set* is a tuple of non-zero offsets ``O`` (e.g. ``(-1,)`` or ``(-1, 1)``); the context
  of position i is the tuple of tokens (x_{i+o})_{o∈O}.
* A context *hash* maps that tuple to an int64: ``sum`` is Gloaguen et al.'s SumHash
  h = Σ_o x_{i+o} (range [0, |O|(V-1)]), ``ordered`` is the exact tuple id h = Σ_j x_{i+o_j} V^j.
* A *(hash, token) counter* is ``h·V + v``; every keyed table entry (green bit, Gumbel uniform) is
  :func:`sketchwm.prf.keyed_uniform` of such a counter, so distinct (hash, token) pairs get
  independent values under a random key — the property every exact p-value of the baselines
  (:mod:`sketchwm.stats`) relies on.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import field_validator

from sketchwm.components import MarginalReads, WatermarkScheme
from sketchwm.config import StrictModel

__all__ = [
    "HashKind",
    "ContextParams",
    "gather_context",
    "context_hash",
    "pair_counter",
    "first_occurrence",
    "KeyedRowCache",
    "KeyedNoiseScheme",
    "over_row_slices",
]

HashKind = Literal["sum", "ordered"]


class ContextParams(StrictModel):
    """Context set and hash shared by the context-keyed schemes.

    Attributes:
        context: offsets O of the context tokens relative to the scored position, non-zero and
            distinct, at most 2 (e.g. ``[-1]`` as in KGW, ``[-1, 1]`` as in Gloaguen et al.).
        hash: ``sum`` (SumHash, Gloaguen et al. 2025) or ``ordered`` (exact context tuple id).
    """

    context: tuple[int, ...] = (-1,)
    hash: HashKind = "sum"

    @field_validator("context")
    @classmethod
    def _check_context(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not 1 <= len(v) <= 2:
            raise ValueError("context must have 1 or 2 offsets")
        if any(o == 0 for o in v) or len(set(v)) != len(v):
            raise ValueError("context offsets must be distinct and non-zero")
        if any(abs(o) > 8 for o in v):
            raise ValueError("context offsets must lie in [-8, 8]")
        return tuple(sorted(v))


def gather_context(
    tokens: torch.Tensor,
    known: torch.Tensor,
    offsets: tuple[int, ...],
    prefix_ids: torch.Tensor | None = None,
    prefix_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Context tokens of every position and whether all of them are known.

    Position i + o < 0 reads the end of the left-padded ``prefix_ids`` (the prompt), when given;
    i + o >= N has no context.

    Args:
        tokens: (B, N) int64.
        known: (B, N) bool, True where the token is fixed (unmasked / not padding).
        offsets: the context set O.
        prefix_ids: (B, P) int64 left-padded prompt, or None.
        prefix_mask: (B, P) bool, True on real prompt tokens.

    Returns:
        ctx (B, N, |O|) int64 (0 where unknown) and ok (B, N) bool (every context token known).
    """
    B, N = tokens.shape
    L = max(0, -min(offsets))
    R = max(0, max(offsets))
    if prefix_ids is not None and L > 0 and prefix_ids.shape[1] > 0:
        P = prefix_ids.shape[1]
        take = min(L, P)
        left_t = torch.zeros((B, L), dtype=torch.long, device=tokens.device)
        left_k = torch.zeros((B, L), dtype=torch.bool, device=tokens.device)
        left_t[:, L - take:] = prefix_ids[:, P - take:]
        left_k[:, L - take:] = prefix_mask[:, P - take:] if prefix_mask is not None else True
    else:
        left_t = torch.zeros((B, L), dtype=torch.long, device=tokens.device)
        left_k = torch.zeros((B, L), dtype=torch.bool, device=tokens.device)
    right_t = torch.zeros((B, R), dtype=torch.long, device=tokens.device)
    right_k = torch.zeros((B, R), dtype=torch.bool, device=tokens.device)
    ext_t = torch.cat([left_t, tokens, right_t], 1)  # (B, L+N+R)
    ext_k = torch.cat([left_k, known, right_k], 1)  # (B, L+N+R)
    ctx = torch.stack([ext_t[:, L + o: L + o + N] for o in offsets], -1)  # (B, N, |O|), ≤2 offsets
    ok = torch.stack([ext_k[:, L + o: L + o + N] for o in offsets], -1).all(-1)  # (B, N)
    return torch.where(ok[..., None], ctx, torch.zeros_like(ctx)), ok


def context_hash(ctx: torch.Tensor, vocab_size: int, kind: HashKind) -> torch.Tensor:
    """Hash of context tuples: ctx (..., |O|) int64 → (...) int64 (see module doc)."""
    if kind == "sum":
        return ctx.sum(-1)
    weights = vocab_size ** torch.arange(ctx.shape[-1], dtype=torch.long, device=ctx.device)  # (|O|,)
    return (ctx * weights).sum(-1)


def pair_counter(hashes: torch.Tensor, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """PRF counter of (hash, token) pairs: h·V + v, broadcast over the inputs' shapes (int64)."""
    return hashes * vocab_size + tokens


def first_occurrence(keys: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """True at the first occurrence (along dim 1) of each key among the ``ok`` positions.

    Args:
        keys: (B, N) int64 (non-negative).
        ok: (B, N) bool.

    Returns:
        (B, N) bool, False wherever ``ok`` is False.
    """
    B, N = keys.shape
    if N == 0:
        return ok.clone()
    # positions that are not ok get distinct negative keys, so they never match anything
    sentinel = -1 - torch.arange(N, device=keys.device, dtype=torch.long).expand(B, -1)
    k = torch.where(ok, keys, sentinel)  # (B, N)
    sk, order = torch.sort(k, dim=1, stable=True)  # stable: equal keys keep position order
    new = torch.ones_like(sk, dtype=torch.bool)
    new[:, 1:] = sk[:, 1:] != sk[:, :-1]  # (B, N) in sorted order
    first = torch.empty_like(new).scatter_(1, order, new)  # back to position order
    return first & ok


def over_row_slices(run, B: int, N: int) -> None:
    """Call ``run(a, b)`` on contiguous row slices [a, b) covering B rows of N ids, over
    ``torch.get_num_threads()`` threads from 65,536 ids (one call below that): the C detectors release the
    GIL, so the slices run in parallel on the detector's process-wide pool
    (:func:`sketchwm.components.over_slices`)."""
    from sketchwm.components.threads import over_slices

    over_slices(B, run, min_per_worker=max(1, -(-65536 // max(1, N))))


class KeyedRowCache:
    """Per-position cache of keyed vocabulary rows (green lists, Gumbel uniforms) during a generation.

    A row is a pure function of the position's context hash, and a known context never changes
    while a text is denoised, so each position's row is computed once — O(B·G·V) PRF evaluations
    per generation instead of per step. The cache checks the hash, so it can never return a stale
    row (a new batch of the same shape simply recomputes what changed).
    """

    def __init__(self) -> None:
        self.rows: torch.Tensor | None = None  # (B, G, V)
        self.hashes: torch.Tensor | None = None  # (B, G) int64, -1 = empty

    def reset(self) -> None:
        """Drop every cached row (called from ``begin``)."""
        self.rows = self.hashes = None

    def lookup(self, hashes: torch.Tensor, want: torch.Tensor, compute, vocab_size: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows for the positions in ``want``.

        Args:
            hashes: (B, G) int64 context hashes (>= 0 where ``want``).
            want: (B, G) bool, positions whose rows are needed.
            compute: function hashes (n,) int64 → rows (n, V).
            vocab_size: V.
            dtype: dtype of the rows.

        Returns:
            (B, G, V) tensor, valid where ``want`` (other rows are stale or zero).
        """
        B, G = hashes.shape
        if self.rows is None or self.rows.shape != (B, G, vocab_size) or self.rows.dtype != dtype:
            self.rows = torch.zeros((B, G, vocab_size), dtype=dtype, device=hashes.device)
            self.hashes = torch.full((B, G), -1, dtype=torch.long, device=hashes.device)
        need = want & (self.hashes != hashes)  # (B, G)
        if bool(need.any()):
            b, i = need.nonzero(as_tuple=True)  # (n,)
            self.rows[b, i] = compute(hashes[b, i]).to(dtype)
            self.hashes[b, i] = hashes[b, i]
        return self.rows


class KeyedNoiseScheme(WatermarkScheme):
    """Base of the distortion-free baselines (Aaronson's Gumbel-max, KTH EXP-edit): keyed uniforms
    replace the sampler's Gumbel noise (``noise = "keyed"``), and only the sampled rows are read.

    Sets ``self._seed``, the scheme's PRF seed, ``key.seed(self.seed_domain())`` (HMAC-SHA256 with the
    subclass's domain, :meth:`sketchwm.keys.WatermarkKey.seed`); subclasses implement :meth:`seed_domain`.
    """

    reads = MarginalReads.sampled()  # only the sampled rows' uniforms are needed
    noise = "keyed"

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._seed = key.seed(self.seed_domain())

    def seed_domain(self) -> str:
        """The HMAC domain of the PRF seed (may depend on ``self.params``, already validated)."""
        raise NotImplementedError
