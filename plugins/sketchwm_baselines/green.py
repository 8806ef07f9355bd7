"""Keyed green lists of the context-keyed green-list schemes (``red-green-dlm``, ``kgw-naive``):
green bits G(h, v), their parameters, and the shared key and detector
(:class:`ContextGreenListScheme`). Contexts and hashes: :mod:`sketchwm_baselines.context`; the
binomial test: :mod:`sketchwm.stats`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from pydantic import Field

from sketchwm.components import SchemeScores, WatermarkScheme
from sketchwm.prf import keyed_uniform
from sketchwm.stats import binomial_logsf, log10_threshold, scores_from_log_p, standardise

try:  # the optional C extension (pyproject.toml ext-modules): the detector's counts in one pass per text
    from sketchwm._fastids import green_counts as _green_counts
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _green_counts = None

from .context import ContextParams, context_hash, first_occurrence, gather_context, over_row_slices, pair_counter

__all__ = ["green_bits", "GreenListParams", "ContextGreenListScheme"]


def green_bits(seed: int, hashes: torch.Tensor, tokens: torch.Tensor, vocab_size: int, gamma: float) -> torch.Tensor:
    """Keyed green bits G(h, v) = [PRF(seed, h·V + v) < γ], iid Bernoulli(γ) over (h, v) pairs.

    Args:
        seed: keyed seed of the green lists.
        hashes, tokens: broadcastable int64 tensors.

    Returns:
        bool tensor of the broadcast shape.
    """
    return keyed_uniform(seed, pair_counter(hashes, tokens, vocab_size), dtype=torch.float64) < gamma


class GreenListParams(ContextParams):
    """Parameters of the context-keyed green-list schemes (``red-green-dlm``, ``kgw-naive``).

    Attributes:
        context, hash: see :class:`ContextParams`.
        gamma: green ratio γ; G(h, v) ~ iid Bernoulli(γ) over (hash, token) pairs.
        delta: tilt strength δ (a logit shift, before the sampler's temperature).
        min_tokens: shortest text the detector accepts.
    """

    gamma: float = Field(0.25, gt=0, lt=1)
    delta: float = Field(2.0, ge=0)
    min_tokens: int = Field(16, ge=1)


class ContextGreenListScheme(WatermarkScheme):
    """Shared key, green lists and detector of the context-keyed green-list schemes.

    Green lists (Kirchenbauer et al. 2023, with the SumHash context of Gloaguen et al. 2025):
    G(h, v) = [PRF(k_green, h·V + v) < γ] with h the hash of the context tokens.

    Detection (Gloaguen et al. 2025, "repeated (context, token) pairs removed"): the positions
    whose whole context lies inside the text are scored once per distinct (hash, token) pair — the
    green bits of distinct pairs are iid Bernoulli(γ) under a random key, so the green count g of
    n distinct pairs is Binomial(n, γ) and the one-sided binomial p-value P(X >= g) is exact.
    (The reference code removes repeated (context tuple, token) pairs; two SumHash-colliding
    contexts share green bits, so removing repeated (hash, token) pairs is what exactness needs.)
    ``score`` = −log10 p, ``z`` = (g − γn)/√(nγ(1−γ)) (KGW's z-score).

    Args:
        params: validated ``Params``.
        key: :class:`sketchwm.keys.WatermarkKey`.
        vocab_size: V.
        device: where tables live.
    """

    Params = GreenListParams
    #: HMAC domain of the green-list seed; both KGW-family schemes share it, so one key marks both.
    seed_domain = "baselines/green-list"

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._seed = key.seed(self.seed_domain)

    def green(self, hashes: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """G(h, v) for broadcastable hashes and tokens → bool."""
        return green_bits(self._seed, hashes, tokens, self.vocab_size, self.params.gamma)

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Binomial test on the green count of distinct (hash, token) pairs; ids, valid (B, N)."""
        p = self.params
        ids, valid = self.check_ids(ids, valid)
        counted = self._green_counts_c(ids, valid)
        if counted is not None:
            g, n = counted
        else:
            ctx, ok = gather_context(ids, valid, p.context)  # (B, N, |O|), (B, N)
            h = context_hash(ctx, self.vocab_size, p.hash)  # (B, N)
            keep = first_occurrence(pair_counter(h, ids, self.vocab_size), valid & ok)  # (B, N)
            g = (self.green(h, ids) & keep).sum(1)  # (B,)
            n = keep.sum(1)  # (B,)
        z = standardise(g, p.gamma * n, n * p.gamma * (1 - p.gamma))
        return scores_from_log_p(binomial_logsf(g, n, p.gamma), z, n, "exact binomial (distinct hash-token pairs)")

    def _green_counts_c(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(g, n) (B,) int64 — green and distinct (hash, token) pair counts — in one C pass per text (the
        optional extension's ``green_counts``: the same contexts, counters, PRF and first occurrences as
        the torch path, so the same counts; ``tests/test_green_fast_path.py``; rows split over
        ``torch.get_num_threads()`` threads from 65,536 ids), or None where it does not apply: no extension, not on the CPU, or a subclass with its own green lists."""
        if _green_counts is None or ids.device.type != "cpu" or type(self).green is not ContextGreenListScheme.green:
            return None
        B, N = ids.shape
        g, n = np.zeros(B, np.int64), np.zeros(B, np.int64)
        seed = int(self._seed) & 0xFFFFFFFFFFFFFFFF
        # numpy views, no torch op: torch's parallel ops leave OpenMP workers spin-waiting on the other
        # core, which the threads below would then share (sketchwm.components.token_sums.ids_summary)
        x = np.ascontiguousarray(ids.numpy(), dtype=np.int64).reshape(-1)
        v = np.ascontiguousarray(valid.numpy()).view(np.uint8).reshape(-1)
        args = (tuple(int(o) for o in self.params.context), self.params.hash == "ordered", self.vocab_size,
                seed & 0xFFFFFFFF, seed >> 32, 0, float(self.params.gamma))

        def run(a: int, b: int) -> None:  # rows [a, b): contiguous slices, the GIL released inside
            _green_counts(x[a * N:b * N], v[a * N:b * N], b - a, N, *args, g[a:b], n[a:b])

        over_row_slices(run, B, N)
        return torch.from_numpy(g), torch.from_numpy(n)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """−log10 α: ``score`` is −log10 of an exact p-value, so this holds at every length."""
        return log10_threshold(alpha)
