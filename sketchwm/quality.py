"""Text-quality metrics computed on token ids: repetition and diversity.

Oracle perplexity alone rewards degenerate text: a model that repeats itself is easy to predict.
Watermarks that push probability mass onto a fixed token set (green lists, unigram boosts, a
context-keyed Gumbel draw whose context repeats) can lower perplexity by making text repetitive.
These metrics report that side of quality beside perplexity:

* ``distinct_n`` — distinct-n (Li et al. 2016, "A Diversity-Promoting Objective Function for Neural
  Conversation Models"): the number of distinct n-grams of a text divided by its number of n-grams;
* ``seq_rep_n`` — seq-rep-n (Welleck et al. 2020, "Neural Text Generation with Unlikelihood
  Training", §5): 1 − distinct-n, the fraction of a text's n-grams that repeat an earlier one;
* ``top_token_share`` — the fraction of a text's tokens equal to its most frequent token.

All are per text, vectorised over a right-padded batch (no Python loop over tokens).
"""

from __future__ import annotations

import torch

from .errors import InputError

__all__ = ["ngram_codes", "distinct_n", "cross_sample_distinct", "sample_repeats", "seq_rep_n", "top_token_share",
           "repetition_report"]

_INT64_MAX = torch.iinfo(torch.int64).max


def _check(ids: torch.Tensor, valid: torch.Tensor) -> None:
    if ids.dim() != 2 or valid.shape != ids.shape:
        raise InputError(f"ids and valid must both be (B, N); got {tuple(ids.shape)} and {tuple(valid.shape)}")
    if valid.dtype != torch.bool:
        raise InputError(f"valid must be a bool mask, got {valid.dtype}")
    if ids.is_floating_point() or ids.is_complex():
        raise InputError(f"ids must be integer token ids, got {ids.dtype}")
    if bool((ids[valid] < 0).any()):
        raise InputError("ids contains negative token ids at valid positions")


def ngram_codes(ids: torch.Tensor, valid: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact int64 codes of every n-gram of each text.

    An n-gram (t_0, …, t_{n-1}) maps to Σ_j t_j · V^(n−1−j) with V = 1 + the largest id in the
    batch, a bijection as long as V^n < 2^63 (checked).

    Args:
        ids: (B, N) integer token ids, right-padded.
        valid: (B, N) bool, True at real tokens (a prefix of each row).
        n: n-gram order, >= 1.

    Returns:
        codes (B, max(N − n + 1, 0)) int64 and mask (B, max(N − n + 1, 0)) bool, True where all n
        tokens of the n-gram are valid.

    Raises:
        InputError: bad shapes or dtypes, negative ids, n < 1, or V^n too large for int64 codes.
    """
    _check(ids, valid)
    if n < 1:
        raise InputError(f"n-gram order must be >= 1, got {n}")
    B, N = ids.shape
    L = N - n + 1
    if L <= 0:
        empty = ids.new_zeros((B, 0), dtype=torch.long)
        return empty, empty.bool()
    ids = ids.long()
    V = int(ids[valid].max()) + 1 if bool(valid.any()) else 1
    if n * max(V, 2).bit_length() >= 63:
        raise InputError(f"{n}-gram codes of a vocabulary of {V} ids overflow int64; use a smaller n")
    windows = ids.unfold(1, n, 1)  # (B, L, n)
    powers = torch.tensor([V ** (n - 1 - j) for j in range(n)], dtype=torch.long, device=ids.device)
    codes = (windows * powers).sum(-1)
    mask = valid.unfold(1, n, 1).all(-1)
    return codes, mask


def _distinct_counts(codes: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (number of distinct codes among masked entries, number of masked entries), both (B,) int64."""
    if codes.shape[1] == 0:
        z = torch.zeros(codes.shape[0], dtype=torch.long, device=codes.device)
        return z, z
    srt, _ = torch.where(mask, codes, torch.full_like(codes, _INT64_MAX)).sort(dim=1)
    real = srt != _INT64_MAX
    new = torch.ones_like(real)
    new[:, 1:] = srt[:, 1:] != srt[:, :-1]
    return (new & real).sum(1), mask.sum(1)


def distinct_n(ids: torch.Tensor, valid: torch.Tensor, n: int = 2) -> torch.Tensor:
    """distinct-n of each text (Li et al. 2016).

    Args:
        ids: (B, N) integer token ids, right-padded; valid: (B, N) bool; n: n-gram order.

    Returns:
        (B,) float64 in (0, 1]: distinct n-grams / n-grams; NaN for a text shorter than n tokens.

    Raises:
        InputError: as :func:`ngram_codes`.
    """
    codes, mask = ngram_codes(ids, valid, n)
    distinct, total = _distinct_counts(codes, mask)
    out = distinct.double() / total.double().clamp_min(1)
    return torch.where(total > 0, out, torch.full_like(out, float("nan")))


def sample_repeats(samples: list[list[int]]) -> tuple[float, float]:
    """How alike k samples of one prompt are as whole texts: (the fraction of distinct texts among
    them, the fraction of the k(k − 1)/2 pairs whose first tokens agree).

    A keyed-noise scheme that keys its first token on the prompt gives every sample of a prompt the
    same opening under one key (first-token match 1); free sampling gives the model's own rate.

    Args:
        samples: k token-id lists of one prompt.

    Returns:
        (distinct texts in [1/k, 1], first-token match in [0, 1]); NaN for the match when fewer than
        two samples have a token.
    """
    distinct = len({tuple(s) for s in samples}) / max(len(samples), 1)
    firsts = torch.tensor([s[0] for s in samples if len(s)], dtype=torch.long)  # (k',)
    k = firsts.numel()
    if k < 2:
        return distinct, float("nan")
    same = firsts[:, None] == firsts[None, :]  # (k', k')
    return distinct, float((same.sum() - k).item() / (k * (k - 1)))


def cross_sample_distinct(samples: list[list[int]], n: int = 2) -> float:
    """distinct-n across samples: distinct n-grams of k samples of one prompt pooled, over their n-grams.

    Each sample's n-grams are taken within that sample (none spans two samples), then pooled: 1.0
    when no n-gram recurs anywhere, 1/k when the k samples are the same text with no repeat inside.
    Diversity of the outputs for one prompt under one key (a keyed-noise scheme that is
    distortion-free per sample can repeat itself across samples).

    Args:
        samples: k token-id lists of one prompt; n: n-gram order.

    Returns:
        float in (0, 1]; NaN when no sample has n tokens.

    Raises:
        InputError: as :func:`ngram_codes`.
    """
    from .detection import pad_ids

    ids, valid = pad_ids(samples)  # (k, N)
    codes, mask = ngram_codes(ids, valid, n)  # (k, L)
    pooled, pooled_mask = codes.reshape(1, -1), mask.reshape(1, -1)  # (1, k·L): one row of every sample's n-grams
    distinct, total = _distinct_counts(pooled, pooled_mask)
    return float(distinct[0]) / float(total[0]) if int(total[0]) else float("nan")


def seq_rep_n(ids: torch.Tensor, valid: torch.Tensor, n: int = 4) -> torch.Tensor:
    """seq-rep-n of each text (Welleck et al. 2020): 1 − distinct-n, (B,) float64 in [0, 1), NaN if shorter than n.

    Raises:
        InputError: as :func:`ngram_codes`.
    """
    return 1.0 - distinct_n(ids, valid, n)


def top_token_share(ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Fraction of each text's tokens equal to its most frequent token.

    Args:
        ids: (B, N) integer token ids, right-padded; valid: (B, N) bool.

    Returns:
        (B,) float64 in (0, 1]; NaN for an empty text.

    Raises:
        InputError: as :func:`ngram_codes`.
    """
    _check(ids, valid)
    B, N = ids.shape
    if N == 0 or not bool(valid.any()):
        return torch.full((B,), float("nan"), dtype=torch.float64, device=ids.device)
    ids = ids.long()
    srt, _ = torch.where(valid, ids, torch.full_like(ids, _INT64_MAX)).sort(dim=1)
    # run lengths of equal ids: position minus the start of its run, + 1
    pos = torch.arange(N, device=ids.device).expand(B, N)
    starts = torch.ones_like(srt, dtype=torch.bool)
    starts[:, 1:] = srt[:, 1:] != srt[:, :-1]
    run_start = torch.where(starts, pos, torch.zeros_like(pos)).cummax(dim=1).values
    run_len = torch.where(srt != _INT64_MAX, pos - run_start + 1, torch.zeros_like(pos))
    total = valid.sum(1)
    out = run_len.max(1).values.double() / total.double().clamp_min(1)
    return torch.where(total > 0, out, torch.full_like(out, float("nan")))


def repetition_report(ids: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """Means over the batch (NaN texts skipped) of distinct-2, seq-rep-4 and the top-token share.

    Args:
        ids: (B, N) integer token ids, right-padded; valid: (B, N) bool.

    Returns:
        ``{"distinct_2": float, "seq_rep_4": float, "top_token_share": float}`` (fractions).

    Raises:
        InputError: as :func:`ngram_codes`.
    """
    return {
        "distinct_2": float(distinct_n(ids, valid, 2).nanmean()),
        "seq_rep_4": float(seq_rep_n(ids, valid, 4).nanmean()),
        "top_token_share": float(top_token_share(ids, valid).nanmean()),
    }
