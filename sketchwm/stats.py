"""The statistics of detection, in one module: p-values, standardisation, calibration, thresholds and
multiple-testing corrections.

Every scheme's detector and every benchmark calls these functions instead of re-deriving them.

* **Exact tails** as log survival functions (``log P(X >= k)``), from scipy where scipy is exact:
  :func:`binomial_logsf`, :func:`hypergeom_logsf`, :func:`gamma_logsf`; the normal tail
  :func:`normal_sf` / :func:`normal_isf`.
* **Rademacher sums** X = Σ_j u_j a_j, u uniform on {±1}^D (the key-randomised null of the seed
  paper, §5.2): exact :func:`rademacher_sum_pvalue` (characteristic function + inverse FFT), the
  :func:`chernoff_pvalue` bound, the Hoeffding bound :func:`hoeffding_pvalue` (eq. 17) and its
  inverse :func:`hoeffding_threshold`.
* **Weighted Bernoulli sums** X = Σ_i g_i B_i with integer g_i (the fixed-key background null of the
  presence sketch): :func:`bernoulli_sum_tail`, the exact law as a :class:`LatticeTail` (FFT of the
  characteristic function on a bounded window, error bounds added; Chernoff far in the tail).
* **Resampling**: :func:`permutation_pvalue` ((1 + #{null at least as extreme}) / (1 + P)).
* **Standardisation**: :func:`standardise` (z = (T − μ)/σ).
* **Scores and thresholds**: :func:`scores_from_log_p` (``score`` = −log10 p) with its exact
  threshold :func:`log10_threshold`; :func:`check_alpha`.
* **Calibration** (seed paper §4.3): the conformal quantile :func:`conformal_quantile` with the
  finite-sample (n+1) correction, the smallest null sample it needs :func:`conformal_min_size`, the
  one decision rule :func:`decide` (score > τ_N strictly, score >= τ_α) and its displayed threshold
  max(τ_N, τ_α) :func:`decision_threshold`.
* **Multiple testing** over K keys (attribution) or many windows: :func:`bonferroni`,
  :func:`holm`, :func:`benjamini_hochberg`; over the channels of one watermark:
  :func:`weighted_bonferroni`.

Conventions: p-value functions take and return torch tensors, float64, on the input's device and of
the input's (broadcast) shape; nothing loops over texts in Python (scipy's vectorised ufuncs do the
work on the CPU; scipy is imported on first use, keeping ``import sketchwm.detection`` light). Bad
input — NaN statistics, α outside (0, 1), empty null samples, p-values outside [0, 1] — raises
:class:`sketchwm.errors.InputError` with a one-line message naming the problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from .components import SchemeScores
from .errors import InputError
from .multiple_testing import _no_nan, benjamini_hochberg, bonferroni, holm, weighted_bonferroni  # noqa: F401 - re-exported

__all__ = [
    "check_alpha",
    "binomial_logsf",
    "hypergeom_logsf",
    "gamma_logsf",
    "normal_sf",
    "normal_isf",
    "rademacher_sum_pvalue",
    "LatticeTail",
    "bernoulli_sum_tail",
    "chernoff_pvalue",
    "hoeffding_pvalue",
    "hoeffding_threshold",
    "permutation_pvalue",
    "standardise",
    "scores_from_log_p",
    "log10_threshold",
    "conformal_min_size",
    "conformal_quantile",
    "decision_threshold",
    "decide",
    "bonferroni",
    "weighted_bonferroni",
    "holm",
    "benjamini_hochberg",
]

#: below this tail probability the FFT pmf is dominated by float64 round-off (see :func:`rademacher_sum_pvalue`)
FFT_FLOOR = 1e-10


# ============================================================================ input checks
def check_alpha(alpha: float, name: str = "alpha") -> float:
    """α as a float after checking 0 < α < 1.

    Raises:
        InputError: α is not a number in the open interval (0, 1) (NaN included).
    """
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number in (0, 1), got {alpha!r}") from None
    if not 0.0 < a < 1.0:  # False for NaN too
        raise InputError(f"{name} must be in (0, 1), got {alpha}")
    return a


def _np(x: torch.Tensor | float, name: str) -> np.ndarray:
    """A tensor (or number) as a float64 numpy array, after checking it holds no NaN."""
    a = x.detach().to(torch.float64).cpu().numpy() if torch.is_tensor(x) else np.asarray(x, dtype=np.float64)
    _no_nan(a, name)
    return a


def _log_p(logsf: np.ndarray, n: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """log p-values as a float64 tensor on ``like``'s device; 0 (p = 1) where nothing was scored (n = 0)."""
    return torch.from_numpy(np.where(n > 0, np.minimum(logsf, 0.0), 0.0)).to(like.device, torch.float64)


# ============================================================================ exact tails
def binomial_logsf(k: torch.Tensor, n: torch.Tensor, p: float) -> torch.Tensor:
    """Exact log P(X >= k) for X ~ Binomial(n, p) (the one-sided binomial test of a green count;
    Kirchenbauer et al. 2023 use its normal approximation, the z-score).

    Source: the binomial survival function P(X > k − 1), ``scipy.special.bdtrc`` (``binom.sf``).

    Args:
        k: observed successes, int or float tensor of any shape (B,).
        n: trials, same shape as ``k`` (0 gives p = 1).
        p: success probability in (0, 1).

    Returns:
        log p-values, float64, shape of ``k``, <= 0 (0 where n = 0).

    Raises:
        InputError: NaN in k or n, or p outside (0, 1).
    """
    check_alpha(p, "p")
    nn = _np(n, "n")
    from scipy.special import bdtrc  # P(X > j): scipy.stats' binom.sf, without importing scipy.stats

    kk = _np(k, "k")
    with np.errstate(divide="ignore"):
        j = np.maximum(np.ceil(kk) - 1.0, 0.0).astype(np.int64)  # P(X >= k) = P(X > ⌈k⌉ − 1), integer args
        logsf = np.where(kk <= 0, 0.0, np.log(bdtrc(j, np.rint(nn).astype(np.int64), p)))
    return _log_p(logsf, nn, k)


def hypergeom_logsf(k: torch.Tensor, population: int, successes: int, draws: torch.Tensor) -> torch.Tensor:
    """Exact log P(X >= k) for X ~ Hypergeometric(population, successes, draws): the green count of
    ``draws`` distinct tokens when ``successes`` of the ``population`` tokens are green (Zhao et al.
    2024, Unigram watermark with repeated tokens removed).

    Source: ``scipy.stats.hypergeom.logsf(k − 1, population, successes, draws)``, evaluated once per
    distinct (k, draws) pair (scipy's hypergeometric tail loops in Python per element; a batch of
    texts has far fewer distinct pairs than texts).

    Args:
        k: (B,) green counts; draws: (B,) distinct tokens (0 gives p = 1).
        population, successes: V and |G|.

    Returns:
        (B,) float64 log p-values <= 0.

    Raises:
        InputError: NaN in k or draws.
    """
    nn, kk = _np(draws, "draws"), _np(k, "k")
    flat = np.stack([kk.reshape(-1), nn.reshape(-1)], 1)  # (B, 2)
    pairs, inverse = np.unique(flat, axis=0, return_inverse=True)
    from scipy import stats

    lp = stats.hypergeom.logsf(pairs[:, 0] - 1.0, population, successes, pairs[:, 1])
    return _log_p(lp[inverse.reshape(-1)].reshape(nn.shape), nn, k)


def gamma_logsf(s: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Exact log P(S >= s) for S ~ Gamma(n, 1), the sum of n iid Exp(1) (Aaronson's Gumbel watermark
    statistic Σ −log(1 − r_x); Fernandez et al. 2023, "Three bricks", Prop. 1).

    Source: the regularised upper incomplete gamma function Q(n, s), ``scipy.special.gammaincc``.

    Args:
        s: (B,) observed sums; n: (B,) number of terms (0 gives p = 1).

    Returns:
        (B,) float64 log p-values <= 0.

    Raises:
        InputError: NaN in s or n.
    """
    nn = _np(n, "n")
    from scipy.special import gammaincc  # Q(n, s) = P(S >= s): scipy.stats' gamma.sf, without scipy.stats

    with np.errstate(divide="ignore"):
        logsf = np.log(gammaincc(np.maximum(nn, 1.0), np.maximum(_np(s, "s"), 0.0)))
    return _log_p(logsf, nn, s)


def normal_sf(z: torch.Tensor, loc: float = 0.0) -> torch.Tensor:
    """P(Z >= z) for Z ~ N(loc, 1): 1 − Φ(z − loc) = Φ(loc − z), accurate far in the upper tail (no
    cancellation).

    Source: the standard normal cdf Φ, ``scipy.special.ndtr`` on the CPU (numpy: no torch thread-pool
    wake-up for a (B,) op), ``torch.special.ndtr`` elsewhere (the same Cephes algorithm).

    Args:
        z: float tensor of any shape; loc: the null mean (e.g. the background null's margin β).

    Returns:
        float64 tensor of the same shape and device.

    Raises:
        InputError: z contains NaN.
    """
    if z.device.type == "cpu":
        from scipy import special

        x = loc - z.detach().to(torch.float64).numpy()
        _no_nan(x, "z")
        return torch.from_numpy(np.asarray(special.ndtr(x), dtype=np.float64))
    _no_nan(z, "z")
    return torch.special.ndtr(loc - z.double())


def normal_isf(alpha: float) -> float:
    """Φ⁻¹(1 − α), the upper α-quantile of N(0, 1): −``scipy.special.ndtri``(α) (``scipy.stats.norm.isf``).

    Raises:
        InputError: α outside (0, 1).
    """
    from scipy.special import ndtri

    return float(-ndtri(check_alpha(alpha)))


# ============================================================================ Rademacher sums
def chernoff_pvalue(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Chernoff upper bound on P(Σ_j u_j a_j >= x) for Rademacher u.

    Source: Chernoff's bound P(X >= x) <= inf_θ>0 e^{−θx} E e^{θX}, with E e^{θ u_j a_j} = cosh(θ a_j)
    (Boucheron, Lugosi & Massart, *Concentration Inequalities*, 2013, §2.2). The infimum is taken over
    a log-spaced grid of 400 θ in [10⁻³, 10²]·x/‖a‖² (a grid point is a valid bound; θ* ≈ x/‖a‖² for
    moderate x).

    Args:
        a: (B, D) float weights.
        x: (B,) float observed values.

    Returns:
        (B,) float64 in (0, 1].
    """
    a = a.double()
    x = x.double()
    scale = a.norm(dim=1).clamp_min(1e-12)  # (B,)
    thetas = torch.logspace(-3, 2, 400, dtype=torch.float64, device=a.device)  # in units of x/‖a‖²
    theta = thetas[None, :] * (x.clamp_min(0) / scale**2)[:, None]  # (B, T)
    ta = theta[:, :, None] * a[:, None, :]  # (B, T, D)
    logcosh = (ta.abs() + torch.log1p(torch.exp(-2 * ta.abs())) - math.log(2)).sum(-1)  # (B, T)
    bound = torch.exp((logcosh - theta * x[:, None]).amin(1))
    return bound.clamp(max=1.0)


def rademacher_sum_pvalue(H: torch.Tensor, x_obs: torch.Tensor) -> torch.Tensor:
    """Exact P(Σ_j u_j H_j >= x_obs) for Rademacher u and integer H (the key-randomised p-value of
    the seed paper, §5.2, for a text of N tokens: H = √N·h is integral).

    Source: X = Σ_j u_j H_j has characteristic function φ(θ) = Π_j cos(θ H_j); its pmf on the
    lattice [−A, A], A = Σ|H_j|, is recovered exactly by an inverse FFT of φ at M >= 2A + 2 points
    (float64). Where the tail is below ``FFT_FLOOR`` = 1e-10 (round-off), the Chernoff bound
    (:func:`chernoff_pvalue`), still a valid p-value, is returned instead.

    Args:
        H: (B, D) int64 integer sketch coordinates.
        x_obs: (B,) or (B, K) int64 observed values of Σ u_j H_j (K directions share one pmf).

    Returns:
        float64 tensor shaped like ``x_obs``.
    """
    a = H.abs()  # (B, D)
    B = a.shape[0]
    squeeze = x_obs.dim() == 1
    xo = x_obs[:, None] if squeeze else x_obs  # (B, K)
    A = a.sum(1)  # (B,) support is [-A, A]
    amax = int(a.max()) if a.numel() else 0
    if amax == 0:
        out = torch.where(xo <= 0, 1.0, 0.0).double()
        return out[:, 0] if squeeze else out
    M = 1 << int(math.ceil(math.log2(2 * int(A.max()) + 2)))
    mult = torch.zeros(B, amax + 1, dtype=torch.float64, device=a.device).scatter_add_(
        1, a, torch.ones_like(a, dtype=torch.float64)
    )[:, 1:]  # (B, amax): how many coordinates have |H_j| = value
    theta = 2 * math.pi * torch.arange(M, dtype=torch.float64, device=a.device) / M  # (M,)
    cos = torch.cos(theta[None, :] * torch.arange(1, amax + 1, dtype=torch.float64, device=a.device)[:, None])  # (amax, M)
    log_abs = mult @ torch.log(cos.abs().clamp_min(1e-300))  # (B, M)
    neg = mult @ (cos < 0).double()  # (B, M) number of negative factors
    phi = torch.exp(log_abs) * (1 - 2 * torch.remainder(neg, 2))  # (B, M) characteristic function
    pmf = torch.fft.ifft(phi.to(torch.complex128), dim=1).real  # (B, M): pmf[x mod M]
    # re-index to x = -M/2 .. M/2-1 and form upper tails
    pmf = torch.roll(pmf, shifts=M // 2, dims=1).clamp_min(0)  # index i ↔ x = i - M/2
    tail = torch.flip(torch.cumsum(torch.flip(pmf, [1]), 1), [1])  # tail[i] = P(X >= i - M/2)
    idx = (xo + M // 2).clamp(0, M - 1)
    exact = torch.gather(tail, 1, idx)
    exact = torch.where(xo > A[:, None], torch.zeros_like(exact), exact)
    exact = torch.where(xo <= -A[:, None], torch.ones_like(exact), exact).clamp(max=1.0)
    small = exact < FFT_FLOOR
    if bool(small.any()):
        rows, cols = small.nonzero(as_tuple=True)
        cb = chernoff_pvalue(a[rows].double(), xo[rows, cols].double())
        exact = exact.clone()
        exact[rows, cols] = cb  # FFT round-off dominates there; the Chernoff bound is rigorous
    return exact[:, 0] if squeeze else exact


# ============================================================================ weighted Bernoulli sums
#: θ grid of the Chernoff bounds of :func:`bernoulli_sum_tail` (in units of 1/lattice step): a grid point is a valid bound
_CHERNOFF_THETA = np.geomspace(1e-3, 30.0, 64)
#: the window of the FFT holds all but ≤ this much mass on each side (Chernoff), which bounds the aliasing
_WINDOW_MASS = 1e-22
#: terms of the power series of log(1 + q(w − 1)) for the terms with q <= 1/4 (remainder bounded in the result)
_SERIES_TERMS = 64


@dataclass(frozen=True)
class LatticeTail:
    """The upper tail P(X >= x) of an integer-valued random variable X, for every integer x.

    Inside the window [lo, lo + M) the tail is tabulated (``table``, exact up to the error bound
    already added to it); above the window it is the Chernoff bound min_θ exp(κ(θ) − θx) over the
    grid ``theta`` with the cumulant generating function ``log_mgf`` = κ(θ) = log E e^{θX}; below
    it, 1. :meth:`sf` is non-increasing in x and is an upper bound on P(X >= x) at every x.

    Attributes:
        lo: the window's first lattice point.
        table: (M,) float64, table[j] >= P(X >= lo + j), non-increasing, in [0, 1].
        theta, log_mgf: (G,) float64 Chernoff grid (θ > 0) and κ(θ) there.
        mean, sd: E X and its standard deviation.
        method: how ``table`` was computed (for ``p_value_method``).
    """

    lo: int
    table: np.ndarray
    theta: np.ndarray
    log_mgf: np.ndarray
    mean: float
    sd: float
    method: str

    def chernoff(self, x: np.ndarray) -> np.ndarray:
        """min_θ exp(κ(θ) − θx) over the grid: x (B,) float64 → (B,) float64 in [0, 1]."""
        x = np.asarray(x, dtype=np.float64)
        e = (self.log_mgf[None, :] - self.theta[None, :] * x[:, None]).min(1) if x.size else x
        return np.minimum(1.0, np.exp(e))

    def sf(self, x: np.ndarray) -> np.ndarray:
        """Upper bound on P(X >= x), exact inside the window: x (B,) int64 → (B,) float64."""
        x = np.asarray(x, dtype=np.int64)
        M = self.table.size
        j = x - self.lo
        out = self.table[np.clip(j, 0, M - 1)]
        out = np.where(j < 0, 1.0, out)
        above = j >= M
        if above.any():
            out[above] = np.minimum(self.table[-1], self.chernoff(x[above].astype(np.float64)))
        return out

    def isf(self, alpha: float) -> int:
        """The smallest integer x with :meth:`sf` (x) <= α.

        Raises:
            InputError: α outside (0, 1).
        """
        alpha = check_alpha(alpha)
        M = self.table.size
        if M and self.table[-1] <= alpha:  # in the window: the first table entry <= α (table non-increasing)
            return self.lo + int(np.argmax(self.table <= alpha))
        # above it: sf(x) <= α ⇔ some θ has κ(θ) − θx <= log α ⇔ x >= min_θ (κ(θ) − log α)/θ
        x = float(((self.log_mgf - math.log(alpha)) / self.theta).min())
        return max(self.lo + M, math.ceil(x - 1e-9 * max(1.0, abs(x))))


def bernoulli_sum_tail(weights: np.ndarray, probs: np.ndarray, counts: np.ndarray | None = None) -> LatticeTail:
    """The exact law of X = Σ_i g_i B_i for independent B_i ~ Bernoulli(q_i) and integer weights g_i,
    as its upper tail (:class:`LatticeTail`).

    Source: X has characteristic function φ(θ) = Π_i (1 − q_i + q_i e^{iθg_i}); on a window of M
    lattice points that holds all but ε = 10⁻²² of the mass on each side (the window's edges are
    Chernoff quantiles; a term with q_i > 1/2 is written g_i − g_i(1 − B_i), so every q <= 1/2), the inverse FFT of φ at θ_m = 2πm/M is the pmf folded modulo M, which is
    at least the pmf on the window and exceeds it by at most the 2ε outside. φ is a direct
    product over the terms with q_i > 1/4 and, for the others, from the power sums S_k = Σ q_i^k of
    each weight: Σ_i log(1 + q_i(w − 1)) = Σ_k (−1)^{k+1} (w − 1)^k S_k / k (|q(w − 1)| <= 1/2;
    64 terms, the remainder bound Σ_i (2q_i)^{65}/(65·(1 − 2q_i)) is added). The tail sums of the
    pmf get the aliasing mass, that remainder and a float64 round-off bound (32·ε_mach·(log2 M + 1 +
    E)·Σ_m|φ(θ_m)|, E bounding the relative round-off of φ) added, so each entry is an upper bound on P(X >= x); where the Chernoff bound
    min_θ exp(κ(θ) − θx) (Boucheron, Lugosi & Massart 2013, §2.2; κ the cumulant generating
    function, on a grid of θ) is smaller — far in the tail, where the round-off bound dominates — it
    is used instead. This is the dynamic programme over the integer support done by convolution
    theorem; ``benchmarks/exact_tail.py`` checks it against a direct convolution.

    Args:
        weights: (P,) integer weights g_i (any integer dtype or integral floats); 0 terms are ignored.
        probs: (P,) float64 success probabilities q_i in [0, 1].
        counts: (P,) non-negative integer multiplicities (how many terms share (g_i, q_i)), or None (1 each).

    Returns:
        :class:`LatticeTail` of X.

    Raises:
        InputError: shapes differ, non-integral weights, probabilities outside [0, 1] or NaN.
    """
    g = np.asarray(weights, dtype=np.float64).reshape(-1)
    q = np.asarray(probs, dtype=np.float64).reshape(-1)
    m = np.ones_like(q) if counts is None else np.asarray(counts, dtype=np.float64).reshape(-1)
    if not (g.shape == q.shape == m.shape):
        raise InputError(f"weights, probs and counts must have one shape, got {g.shape}, {q.shape}, {m.shape}")
    _no_nan(q, "probabilities")
    if np.any((q < 0) | (q > 1)):
        raise InputError("probabilities must lie in [0, 1]")
    if np.any(g != np.round(g)):
        raise InputError("bernoulli_sum_tail needs integer weights")
    use = (g != 0) & (q > 0) & (m > 0)
    g, q, m = g[use], q[use], m[use]
    # a likely term is a sure one less its absence: g·B = g − g·(1 − B), 1 − B ~ Bernoulli(1 − q); so every q <= 1/2
    flip = q > 0.5
    shift = int((m[flip] * g[flip]).sum())
    g, q = np.where(flip, -g, g), np.where(flip, 1.0 - q, q)
    use = q > 0
    g, q, m = g[use], q[use], m[use]
    mean = shift + float((m * g * q).sum())
    sd = math.sqrt(float((m * g * g * q * (1 - q)).sum()))
    # κ(θ) = Σ m log(1 + q(e^{θg} − 1)), for θ > 0 (upper tail) and θ < 0 (lower tail); e^{θg} − 1 once per distinct g
    gvals_all, g_col = np.unique(g, return_inverse=True)
    g_col = g_col.reshape(-1)

    def kappa(theta: np.ndarray) -> np.ndarray:
        em1 = np.expm1(theta[:, None] * gvals_all[None, :])[:, g_col]  # (G, P)
        return shift * theta + np.log1p(q[None, :] * em1) @ m

    th = _CHERNOFF_THETA
    k_up, k_down = kappa(th), kappa(-th)
    if g.size == 0:  # X is the constant shift
        return LatticeTail(shift, np.array([1.0]), th, shift * th, float(shift), 0.0, "exact (constant)")
    top = shift + float(m[g > 0] @ g[g > 0])
    bottom = shift + float(m[g < 0] @ g[g < 0])
    log_eps = math.log(_WINDOW_MASS)
    hi = min(top, math.ceil(float(((k_up - log_eps) / th).min())))  # P(X >= hi) <= ε
    lo = max(bottom, math.floor(float(((log_eps - k_down) / th).max())))  # P(X <= lo) <= ε
    M = 1 << max(6, int(math.ceil(math.log2(hi - lo + 1))))
    theta = 2 * math.pi * np.arange(M // 2 + 1) / M  # (M/2 + 1,)
    big = q > 0.25
    log_phi = np.zeros(theta.size, dtype=np.complex128)
    abs_terms = 0.0
    direct = np.ones(theta.size, dtype=np.complex128)
    if big.any():  # direct product of the factors 1 − q + q·w^g: (P_big, M/2 + 1), e^{iθg} once per distinct g
        gvals, gidx = np.unique(g[big], return_inverse=True)
        w = np.exp(1j * theta[None, :] * gvals[:, None])[gidx.reshape(-1)]  # (P_big, M/2 + 1)
        factors = 1 + q[big][:, None] * (w - 1)
        rep = m[big] > 1
        if rep.any():
            factors[rep] = factors[rep] ** m[big][rep][:, None]
        direct = np.prod(factors, axis=0)
        abs_terms += float(4 * m[big].sum())  # relative round-off of a product of these factors
    small = ~big
    remainder = 0.0
    if small.any():  # power series per distinct weight
        K = _SERIES_TERMS
        qs, ms, gs = q[small], m[small], g[small]
        remainder = float((ms * (2 * qs) ** (K + 1) / ((K + 1) * (1 - 2 * qs))).sum())
        for gv in np.unique(gs):
            sel = gs == gv
            pw = np.cumprod(np.broadcast_to(qs[sel], (K, int(sel.sum()))), axis=0)  # (K, P_g): q^k
            S = pw @ ms[sel]  # (K,) power sums
            coef = S * ((-1.0) ** np.arange(K)) / np.arange(1, K + 1)  # (−1)^{k+1} S_k / k, k = 1..K
            z = np.exp(1j * theta * gv) - 1
            acc = np.zeros_like(z)
            for c in coef[::-1]:  # Horner: Σ_k coef_k z^k
                acc = (acc + c) * z
            log_phi += acc
            abs_terms += float(2 * S[0] * 1.5)
    # pmf of X on [lo, lo + M): irfft of conj(φ e^{−iθ lo}) (X real, φ(−θ) = conj φ(θ))
    log_phi += 1j * theta * shift - 1j * theta * lo
    phi = np.exp(log_phi) * direct  # (M/2 + 1,)
    pmf = np.fft.irfft(np.conj(phi), n=M)
    # error of a tail sum: aliasing, series remainder, and round-off (φ_m carries a relative error
    # <= ε·(Σ|series terms| + 4·#factors); the FFT adds ε·log2 M; a tail sums <= M entries of (1/M)Σ_m|δφ_m|)
    rounding = 32 * np.finfo(np.float64).eps * (math.log2(M) + 1.0 + abs_terms) * float(np.abs(phi).sum())
    err = 2 * _WINDOW_MASS + remainder + rounding
    tail = np.cumsum(np.clip(pmf, 0.0, None)[::-1])[::-1] + err  # tail[j] >= P(X >= lo + j)
    x = lo + np.arange(M, dtype=np.float64)
    cher = np.minimum(1.0, np.exp((k_up[None, :] - th[None, :] * x[:, None]).min(1)))
    table = np.minimum.accumulate(np.minimum(np.minimum(tail, cher), 1.0))
    return LatticeTail(int(lo), table, th, k_up, mean, sd,
                       "exact (FFT of the characteristic function; Chernoff bound where smaller)")


def hoeffding_pvalue(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Hoeffding's bound P(Σ_j u_j a_j >= x) <= exp(−x² / (2‖a‖²)) for x > 0 (1 otherwise), u Rademacher.

    Source: Hoeffding (1963), Thm. 2; the conditional bound of the seed paper, eq. (17), with
    x = ⟨u, h⟩ and ‖a‖ = ‖h‖.

    Args:
        x: (B,) float observed values; scale: (B,) float ‖a‖ (0: the sum is 0, so p = 1[x <= 0]).

    Returns:
        (B,) float64 in [0, 1].
    """
    x, scale = x.double(), scale.double()
    a = x.clamp_min(0)
    p = torch.where(scale > 0, torch.exp(-(a**2) / (2 * scale.clamp_min(1e-300) ** 2)), (x <= 0).double())
    p = torch.where(x > 0, p, torch.ones_like(p))
    return p.clamp(max=1.0)


def hoeffding_threshold(alpha: float) -> float:
    """t_α = √(2 log(1/α)), so that exp(−t_α²/2) = α: the threshold on a standardised Rademacher sum
    z = X/‖a‖ whose Hoeffding tail (:func:`hoeffding_pvalue`) is α.

    Raises:
        InputError: α outside (0, 1).
    """
    return math.sqrt(2.0 * math.log(1.0 / check_alpha(alpha)))


# ============================================================================ resampling
def permutation_pvalue(
    null: torch.Tensor, observed: torch.Tensor, alternative: Literal["greater", "less"] = "greater", tol: float = 0.0,
) -> torch.Tensor:
    """Monte-Carlo / permutation p-value (1 + #{null at least as extreme as observed}) / (1 + P).

    Source: Phipson & Smyth (2010), "Permutation p-values should never be zero", eq. (2): with P
    null draws exchangeable with the observation under H0, this p-value is valid (P(p <= α) <= α);
    its resolution is 1/(P + 1).

    Args:
        null: (B, P) float statistics under P null draws (keys, permutations, directions).
        observed: (B,) the observed statistic.
        alternative: ``greater`` — large values are extreme (count null >= observed − tol);
            ``less`` — small values are extreme (count null <= observed + tol).
        tol: ties within ``tol`` count as at least as extreme (float round-off of equal statistics).

    Returns:
        (B,) float64 in [1/(P+1), 1].

    Raises:
        InputError: wrong shapes, P = 0, NaN, or an unknown ``alternative``.
    """
    if null.dim() != 2 or observed.shape != null.shape[:1]:
        raise InputError(f"null must be (B, P) and observed (B,), got {tuple(null.shape)} and {tuple(observed.shape)}")
    if null.shape[1] == 0:
        raise InputError("permutation p-value needs at least one null draw")
    _no_nan(observed, "observed statistic")
    if alternative == "greater":
        hits = null >= observed[:, None] - tol  # (B, P)
    elif alternative == "less":
        hits = null <= observed[:, None] + tol  # (B, P)
    else:
        raise InputError(f"alternative must be 'greater' or 'less', got {alternative!r}")
    return (1.0 + hits.sum(1).double()) / (1.0 + null.shape[1])


# ============================================================================ standardisation, scores
def standardise(stat: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """z = (T − μ)/√σ² in float64, 0 where σ² = 0 (nothing to standardise).

    Args:
        stat, mean, var: broadcastable tensors (typically (B,)).

    Returns:
        float64 tensor of the broadcast shape.
    """
    if all(not torch.is_tensor(x) or x.device.type == "cpu" for x in (stat, mean, var)):
        # numpy on the CPU: a small torch op after a parallel one waits on torch's thread pool (~ms)
        st, mu, va = (np.asarray(x.detach().numpy() if torch.is_tensor(x) else x, dtype=np.float64)
                      for x in (stat, mean, var))
        z = np.where(va > 0, (st - mu) / np.sqrt(np.maximum(va, 1e-300)), 0.0)
        return torch.from_numpy(np.asarray(z, dtype=np.float64))  # np.where broadcasts into a new array
    stat, mean, var = torch.as_tensor(stat).double(), torch.as_tensor(mean).double(), torch.as_tensor(var).double()
    return torch.where(var > 0, (stat - mean) / var.clamp_min(1e-300).sqrt(), torch.zeros_like(stat))


def scores_from_log_p(log_p: torch.Tensor, z: torch.Tensor, n: torch.Tensor, method: str) -> SchemeScores:
    """:class:`SchemeScores` whose ``score`` is −log10 p, so that ``score >= −log10 α`` is exactly
    ``p <= α`` (:func:`log10_threshold`).

    Args:
        log_p: (B,) float64 natural-log p-values; z: (B,) z-scores; n: (B,) tokens scored.
        method: how the p-value was computed.
    """
    if log_p.device.type == "cpu":  # numpy: see standardise
        lp = log_p.detach().numpy().astype(np.float64, copy=False)
        return SchemeScores(score=torch.from_numpy(-lp / math.log(10.0)), z=z.double(), p_value=torch.from_numpy(np.exp(lp)),
                            n_scored=n.long(), p_value_method=method)
    return SchemeScores(
        score=(-log_p / math.log(10.0)).double(), z=z.double(), p_value=log_p.exp().double(),
        n_scored=n.long(), p_value_method=method,
    )


def log10_threshold(alpha: float) -> float:
    """−log10 α: the threshold on a ``score`` defined as −log10 p (exact at every length).

    Raises:
        InputError: α outside (0, 1).
    """
    return -math.log10(check_alpha(alpha))


# ============================================================================ calibration
def conformal_min_size(alpha: float) -> int:
    """⌈1/α⌉ − 1: the fewest null scores n for which the conformal (1−α) quantile is finite
    ((n+1)(1−α) <= n ⇔ n >= 1/α − 1).

    Raises:
        InputError: α outside (0, 1).
    """
    return math.ceil(1 / check_alpha(alpha)) - 1


def conformal_quantile(scores: torch.Tensor | np.ndarray, alpha: float) -> float:
    """The ⌈(n+1)(1−α)⌉-th smallest of n null scores (+inf when n < :func:`conformal_min_size`).

    Source: split conformal prediction (Vovk, Gammerman & Shafer 2005; Angelopoulos & Bates 2021,
    "A gentle introduction to conformal prediction", Thm. 1): for a new score exchangeable with the
    n null scores, P(score > τ) <= α — the seed paper's calibrated τ_N (§4.3). The inequality is
    strict: with tied scores P(score >= τ) can exceed α, so decisions use :func:`decide`.

    Args:
        scores: (n,) null scores (any float dtype; torch or numpy), flattened.
        alpha: target false-positive rate.

    Returns:
        τ as a float.

    Raises:
        InputError: no scores, a NaN score, or α outside (0, 1).
    """
    alpha = check_alpha(alpha)
    s = np.sort(_np(scores, "null scores").reshape(-1))
    n = s.size
    if n == 0:
        raise InputError("conformal quantile needs at least one null score, got none")
    k = math.ceil((n + 1) * (1 - alpha))
    return float("inf") if k > n else float(s[k - 1])


def decision_threshold(
    null_scores: torch.Tensor | np.ndarray, alpha: float, analytic: "float | np.ndarray | None" = None,
) -> "float | np.ndarray":
    """The one decision rule's threshold for display: max(τ_N, τ_α) — the conformal quantile of the null
    scores (:func:`conformal_quantile`) and the scheme's analytic threshold, when it has one.

    Decisions are made by :func:`decide` (``score > τ_N`` and ``score >= τ_α``), never by comparing
    with this number.

    Args:
        null_scores: (n,) scores of unwatermarked texts (one length bin).
        alpha: target false-positive rate.
        analytic: τ_α, a float or an array (per text), or None (no closed form).

    Returns:
        a float (or an array shaped like ``analytic``); +inf when n is too small for α.

    Raises:
        InputError: see :func:`conformal_quantile`.
    """
    tau = conformal_quantile(null_scores, alpha)
    if analytic is None:
        return tau
    if np.ndim(analytic) == 0:
        return max(tau, float(analytic))
    return np.maximum(tau, np.asarray(analytic, dtype=np.float64))


def decide(
    score: "torch.Tensor | np.ndarray", p_value: "torch.Tensor | np.ndarray", alpha: float,
    analytic: "torch.Tensor | np.ndarray | None" = None, calibrated: "torch.Tensor | np.ndarray | None" = None,
) -> torch.Tensor:
    """sketchwm's one decision rule: flag a text iff it passes every test held at level α.

    * analytic τ_α (a proven bound, P(score >= τ_α) <= α under the scheme's null): ``score >= τ_α``;
      a NaN or −inf entry means the scheme has no closed form for that text;
    * calibrated τ_N (:func:`conformal_quantile` of null scores of the text's length bin):
      ``score > τ_N``, strictly. The conformal guarantee covers P(score > τ_N) <= α only (Angelopoulos
      & Bates 2021, Thm. 1): with discrete scores, ties at τ_N would add false positives;
    * neither (no closed form and no calibration): ``p_value <= α``.

    Args:
        score, p_value: (B,) scores and p-values (torch or numpy, any float dtype).
        alpha: the level.
        analytic: (B,) τ_α per text or None; calibrated: (B,) τ_N per text or None.

    Returns:
        (B,) bool tensor on the CPU.

    Raises:
        InputError: α outside (0, 1).
    """
    alpha = check_alpha(alpha)
    s = torch.as_tensor(score).detach().cpu().double()
    flags = torch.ones_like(s, dtype=torch.bool)
    has_analytic = torch.zeros_like(flags)
    if analytic is not None:
        a = torch.as_tensor(analytic).detach().cpu().double().expand_as(s)
        has_analytic = torch.isfinite(a) | (a == float("inf"))
        flags &= torch.where(has_analytic, s >= a, torch.ones_like(flags))
    if calibrated is not None:
        flags &= s > torch.as_tensor(calibrated).detach().cpu().double().expand_as(s)
    else:  # no calibration: texts without a closed form are decided by their p-value
        p = torch.as_tensor(p_value).detach().cpu().double().expand_as(s)
        flags &= torch.where(has_analytic, torch.ones_like(flags), p <= alpha)
    return flags
