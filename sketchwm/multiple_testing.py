"""Multiple-testing corrections over a family of p-values: Bonferroni and Holm (family-wise error
rate), Benjamini–Hochberg (false discovery rate). Re-exported by :mod:`sketchwm.stats`.

Used for attribution over many keys and for key families; vectorised along any ``dim``. Bad input
(values outside [0, 1], NaN, a family size smaller than the p-values given) raises
:class:`sketchwm.errors.InputError`.
"""

from __future__ import annotations

import numpy as np
import torch

from .errors import InputError

__all__ = ["bonferroni", "holm", "benjamini_hochberg"]


def _no_nan(x: torch.Tensor | np.ndarray, name: str) -> None:
    """Raise InputError if ``x`` holds a NaN."""
    bad = bool(torch.isnan(x).any()) if torch.is_tensor(x) else bool(np.isnan(x).any())
    if bad:
        raise InputError(f"{name} contains NaN")



def _check_p(p: torch.Tensor, m: int | None, dim: int) -> tuple[torch.Tensor, int]:
    """p as float64 after checking values in [0, 1] and the family size m >= p.shape[dim]."""
    if not torch.is_tensor(p):
        p = torch.as_tensor(p, dtype=torch.float64)
    p = p.double()
    if p.dim() == 0 or p.shape[dim] == 0:
        raise InputError(f"multiple-testing correction needs a non-empty family of p-values, got shape {tuple(p.shape)}")
    _no_nan(p, "p-values")
    if bool(((p < 0) | (p > 1)).any()):
        raise InputError("p-values must lie in [0, 1]")
    k = p.shape[dim]
    m = k if m is None else int(m)
    if m < k:
        raise InputError(f"family size m = {m} is smaller than the {k} p-values given")
    return p, m


def bonferroni(p: torch.Tensor, m: int | None = None, dim: int = -1) -> torch.Tensor:
    """Bonferroni-adjusted p-values min(1, m·p), controlling the family-wise error rate.

    Source: Dunn (1961), "Multiple comparisons among means"; the union bound P(∪ {p_i <= α/m}) <= α.

    Args:
        p: p-values of any shape, the family along ``dim``.
        m: family size (default ``p.shape[dim]``; larger when only some members' p-values are given,
            e.g. the top-ranked of K keys).
        dim: the family's dimension.

    Returns:
        float64 tensor shaped like ``p``.

    Raises:
        InputError: p outside [0, 1], NaN, an empty family, or m smaller than the family given.
    """
    p, m = _check_p(p, m, dim)
    return (p * m).clamp(max=1.0)


def _sorted_adjust(p: torch.Tensor, m: int | None, dim: int, adjust) -> torch.Tensor:
    """Apply ``adjust(sorted p (..., k) ascending, m) -> adjusted (..., k)`` along ``dim`` and return
    the adjusted values in the input order (float64, shaped like ``p``)."""
    p, m = _check_p(p, m, dim)
    sp, order = torch.sort(p.movedim(dim, -1), dim=-1, stable=True)  # (..., k) ascending
    adj = adjust(sp, m)  # (..., k)
    return torch.empty_like(adj).scatter_(-1, order, adj).movedim(-1, dim)  # back to input order


def holm(p: torch.Tensor, m: int | None = None, dim: int = -1) -> torch.Tensor:
    """Holm step-down adjusted p-values, controlling the family-wise error rate (never larger than
    Bonferroni's); arguments, result and errors as :func:`bonferroni`.

    Source: Holm (1979), "A simple sequentially rejective multiple test procedure": with the
    p-values sorted p_(1) <= ... <= p_(m), the adjusted p_(i) = max_{j <= i} min(1, (m − j + 1) p_(j)).
    The adjusted value of p_(i) depends only on the i smallest p-values, so when only the k smallest
    of a family of m are given (``m`` > ``p.shape[dim]``, e.g. the best-ranked keys), their adjusted
    values are still exact.
    """
    def step_down(sp: torch.Tensor, m: int) -> torch.Tensor:
        factor = m - torch.arange(sp.shape[-1], dtype=torch.float64, device=sp.device)  # (k,) m, m−1, ...
        return torch.cummax((sp * factor).clamp(max=1.0), dim=-1).values  # max over j <= i

    return _sorted_adjust(p, m, dim, step_down)


def benjamini_hochberg(p: torch.Tensor, m: int | None = None, dim: int = -1) -> torch.Tensor:
    """Benjamini–Hochberg step-up adjusted p-values (q-values), controlling the false-discovery rate
    for independent or positively dependent tests; arguments, result and errors as :func:`bonferroni`.

    Source: Benjamini & Hochberg (1995), "Controlling the false discovery rate": with p sorted
    ascending, q_(i) = min_{j >= i} min(1, m p_(j) / j). When only the k smallest of a family of m
    are given (``m`` > ``p.shape[dim]``), the minimum runs over the given j only, which can only
    raise q: the result stays a valid (conservative) FDR adjustment.
    """
    def step_up(sp: torch.Tensor, m: int) -> torch.Tensor:
        rank = torch.arange(1, sp.shape[-1] + 1, dtype=torch.float64, device=sp.device)  # (k,)
        q = (sp * m / rank).clamp(max=1.0)  # (..., k)
        return torch.flip(torch.cummin(torch.flip(q, [-1]), dim=-1).values, [-1])  # min over j >= i

    return _sorted_adjust(p, m, dim, step_up)
