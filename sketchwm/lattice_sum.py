"""The exact law of a weighted sum of independent small-integer variables (the capped sketch's background null).

X = Σ_i g_i Y_i with integer weights g_i and independent Y_i ∈ {0, 1, …, k} of known pmf. For k = 1
this is :func:`sketchwm.stats.bernoulli_sum_tail`; the capped-count sketch (x_v = min(c_v, k),
:class:`sketchwm_builtin.count_sketch.CountSketch`) needs k > 1, where Y_v = min(C_v, k) with C_v the
count of token v in a text of the background model.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import InputError
from .stats import _CHERNOFF_THETA, _WINDOW_MASS, LatticeTail

__all__ = ["capped_sum_tail"]


def capped_sum_tail(weights: np.ndarray, pmfs: np.ndarray, counts: np.ndarray | None = None) -> LatticeTail:
    """The exact law of X = Σ_i g_i Y_i, Y_i independent on {0, …, k} with pmf ``pmfs[i]``, as its upper tail.

    Source: X has characteristic function φ(θ) = Π_i (Σ_j P_ij e^{iθ g_i j}). The window [lo, hi] holds
    all but ε = 10⁻²² of the mass on each side (its edges are Chernoff quantiles with κ(θ) =
    Σ_i m_i log Σ_j P_ij e^{θ g_i j}); the inverse FFT of φ at θ_m = 2πm/M (M ≥ hi − lo + 1, a power
    of 2) is the pmf folded modulo M, at least the pmf on the window and above it by at most the 2ε
    outside. φ is a direct product of the P distinct factors (each raised to its multiplicity m_i).
    Every tail sum gets the aliasing mass and a float64 round-off bound added (32·ε_mach·(log2 M + 1
    + 4(k + 1)·Σ m_i)·Σ_m|φ(θ_m)|, the bound :func:`sketchwm.stats.bernoulli_sum_tail` uses for its
    direct products), so every entry is an upper bound on P(X >= x); the Chernoff bound
    min_θ exp(κ(θ) − θx) replaces it where smaller (far in the tail).

    Args:
        weights: (P,) integer weights g_i (integral floats allowed); 0 terms are ignored.
        pmfs: (P, k + 1) float64, row i the law of Y_i on {0, …, k} (rows sum to 1 within 1e-9).
        counts: (P,) non-negative integer multiplicities (terms sharing (g_i, pmf_i)), or None (1 each).

    Returns:
        :class:`sketchwm.stats.LatticeTail` of X.

    Raises:
        InputError: shapes differ, non-integral weights, a pmf row with negative entries, NaN, or
            not summing to 1.
    """
    g = np.asarray(weights, dtype=np.float64).reshape(-1)
    P = np.asarray(pmfs, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != g.shape[0]:
        raise InputError(f"pmfs must be (P, k + 1) with P = {g.shape[0]} weights, got {P.shape}")
    m = np.ones_like(g) if counts is None else np.asarray(counts, dtype=np.float64).reshape(-1)
    if m.shape != g.shape:
        raise InputError(f"counts must have the weights' shape {g.shape}, got {m.shape}")
    if np.isnan(P).any() or (P < 0).any() or np.abs(P.sum(1) - 1.0).max(initial=0.0) > 1e-9:
        raise InputError("every pmf row must be non-negative, without NaN, and sum to 1")
    if np.any(g != np.round(g)):
        raise InputError("capped_sum_tail needs integer weights")
    use = (g != 0) & (m > 0) & (P[:, 0] < 1.0)
    g, P, m = g[use], P[use], m[use]
    k = P.shape[1] - 1
    j = np.arange(k + 1, dtype=np.float64)
    mean = float((m * g * (P @ j)).sum())
    sd = math.sqrt(float((m * g * g * (P @ (j * j) - (P @ j) ** 2)).sum()))
    th = _CHERNOFF_THETA
    if g.size == 0:  # X = 0
        return LatticeTail(0, np.array([1.0]), th, np.zeros_like(th), 0.0, 0.0, "exact (constant)")

    def kappa(theta: np.ndarray) -> np.ndarray:  # Σ m log Σ_j P_j e^{θ g j}, stable: max exponent factored out
        e = theta[:, None, None] * g[None, :, None] * j[None, None, :]  # (T, P, k + 1)
        top = e.max(2)
        with np.errstate(divide="ignore"):
            return (top + np.log((P[None] * np.exp(e - top[..., None])).sum(2))) @ m

    k_up, k_down = kappa(th), kappa(-th)
    top = float(m[g > 0] @ g[g > 0]) * k
    bottom = float(m[g < 0] @ g[g < 0]) * k
    log_eps = math.log(_WINDOW_MASS)
    hi = min(top, math.ceil(float(((k_up - log_eps) / th).min())))  # P(X >= hi) <= ε
    lo = max(bottom, math.floor(float(((log_eps - k_down) / th).max())))  # P(X <= lo) <= ε
    M = 1 << max(6, int(math.ceil(math.log2(hi - lo + 1))))
    theta = 2 * math.pi * np.arange(M // 2 + 1) / M  # (M/2 + 1,)
    gvals, gidx = np.unique(g, return_inverse=True)
    w = np.exp(1j * theta[None, :] * gvals[:, None])  # (G, M/2 + 1) e^{iθg}, once per distinct weight
    phi = np.ones(theta.size, dtype=np.complex128)
    for c in range(0, g.size, 512):  # chunks of terms: (512, M/2 + 1) complex at a time
        wi = w[gidx.reshape(-1)[c:c + 512]]  # (p, M/2 + 1)
        f = np.zeros_like(wi)
        for jj in range(k, -1, -1):  # Horner in e^{iθg}: Σ_j P_j (e^{iθg})^j
            f = f * wi + P[c:c + 512, jj][:, None]
        f = f ** m[c:c + 512][:, None]
        phi *= np.prod(f, axis=0)
    phi *= np.exp(-1j * theta * lo)  # pmf of X on [lo, lo + M)
    pmf = np.fft.irfft(np.conj(phi), n=M)
    rounding = 32 * np.finfo(np.float64).eps * (math.log2(M) + 1.0 + 4.0 * (k + 1) * float(m.sum())) \
        * float(np.abs(phi).sum())
    err = 2 * _WINDOW_MASS + rounding
    tail = np.cumsum(np.clip(pmf, 0.0, None)[::-1])[::-1] + err  # tail[j] >= P(X >= lo + j)
    x = lo + np.arange(M, dtype=np.float64)
    cher = np.minimum(1.0, np.exp((k_up[None, :] - th[None, :] * x[:, None]).min(1)))
    table = np.minimum.accumulate(np.minimum(np.minimum(tail, cher), 1.0))
    return LatticeTail(int(lo), table, th, k_up, mean, sd,
                       "exact (FFT of the characteristic function; Chernoff bound where smaller)")
