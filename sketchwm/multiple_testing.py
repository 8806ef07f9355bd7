"""Multiple-testing corrections over a family of p-values: Bonferroni and Holm (family-wise error
rate), Benjamini–Hochberg (false discovery rate), and the weighted Bonferroni bound that combines the
channels of one watermark. Re-exported by :mod:`sketchwm.stats`.

Used for attribution over many keys, for key families and for combined schemes
(:class:`sketchwm.components.channel.CombinedScheme`); vectorised along any ``dim``. Bad input
(values outside [0, 1], NaN, a family size smaller than the p-values given, weights outside (0, 1))
raises :class:`sketchwm.errors.InputError`.
"""

from __future__ import annotations

import numpy as np
import torch

from .errors import InputError

__all__ = ["bonferroni", "weighted_bonferroni", "holm", "benjamini_hochberg"]


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


def weighted_bonferroni(p_values: list[torch.Tensor], weights: list[float | np.ndarray | torch.Tensor]) -> torch.Tensor:
    """The weighted Bonferroni bound over J tests of the same texts: p = min(1, min_j p_j / w_j).

    P(p ≤ α) ≤ Σ_j P(p_j ≤ w_j·α) ≤ α on texts under the null whenever each p_j is valid and
    Σ_j w_j ≤ 1, whatever the dependence between the tests (the weighted Bonferroni test; Genovese,
    Roeder & Wasserman 2006, "False discovery control with p-value weighting"). Weights may differ
    per text: the bound still holds when each p_j is valid conditionally on what the weights are
    computed from (independent filtering; Bourgon, Gentleman & Huber 2010). Equal weights 1/J give
    plain Bonferroni, J·min_j p_j.

    Args:
        p_values: J tensors (B,) float64 (a NaN p-value stays NaN in the result).
        weights: J weights, each a float or a (B,) float64 array or tensor (one per text), in (0, 1),
            summing to at most 1 for every text.

    Returns:
        (B,) float64 on the device of the first p-value.

    Raises:
        InputError: no p-values, len(p_values) != len(weights), a weight outside (0, 1), or weights
            summing above 1.
    """
    if len(p_values) != len(weights) or not p_values:
        raise InputError(f"need one weight per p-value, got {len(p_values)} p-values and {len(weights)} weights")
    ws = [np.asarray(w.cpu().numpy() if torch.is_tensor(w) else w, dtype=np.float64) for w in weights]
    if not all(bool(((w > 0.0) & (w < 1.0)).all()) for w in ws):
        raise InputError(f"weights must lie in (0, 1), got {weights}")
    if bool((sum(ws) > 1.0 + 1e-12).any()):
        raise InputError(f"weights must sum to at most 1, got {weights}")
    # (B,) arithmetic in numpy: a small torch op right after the channels' detector threads waits on torch's pool
    ps = [x.detach().double().cpu().numpy() for x in p_values]
    out = np.minimum(np.minimum.reduce([p / w for p, w in zip(ps, ws)]), 1.0)  # (B,)
    return torch.from_numpy(np.asarray(out, dtype=np.float64)).to(p_values[0].device)


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
