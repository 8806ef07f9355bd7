"""Detector scores of the global sketch watermark (seed paper §4 and Theorem 5.4).

* ``penalized``: S_k = 2⟨u_k, h⟩ − λ‖h‖², λ = γ√w (eq. 2), residual gradient u − λĥ (eq. 6),
  analytic threshold τ_α = (2/λ) log(1/α) (eq. 19).
* ``z``: the self-normalised z = ⟨u_k, h⟩ / ‖h‖, residual gradient u − (⟨u,ĥ⟩/‖ĥ‖²) ĥ (its ascent
  direction), Hoeffding threshold z_α = √(2 log(1/α)).

p-values are key-randomised: under the null, u_k is a Rademacher vector independent of h. Given
h, S_k, z and ⟨u,h⟩ are increasing functions of one another, so all share one conditional p-value
P_u{⟨u, h⟩ ≥ observed | h}. Methods:

* ``exact`` (default): closed form. For a text of N tokens, H = √N·h has integer coordinates, so
  X = Σ_j u_j H_j is a Rademacher sum with characteristic function Π_j cos(θ H_j); its pmf is
  recovered exactly by an inverse FFT (float64). Where the tail is below 1e-10 (FFT round-off),
  the Chernoff bound inf_θ e^{−θx} Π cosh(θH_j), still a valid p-value, is returned instead.
* ``bound``: the conditional Hoeffding bound of eq. (17).
* ``uniform-bound``: the uniform bound exp(−λS/2) of eq. (18) (penalised score only).
* ``normal``: 1 − Φ(z) (CLT approximation).
* ``monte-carlo``: fraction of ``n_mc`` fresh random directions that score at least as high.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field
from scipy.stats import norm

from sketchwm.components import ScoreFunction, ScoreOutput
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError
from sketchwm.hookspecs import hookimpl

__all__ = ["PenalizedScore", "ZScore", "rademacher_sum_pvalue", "chernoff_pvalue"]

_FFT_FLOOR = 1e-10
P_VALUE_METHODS = ("exact", "bound", "uniform-bound", "normal", "monte-carlo")


def _int_sketch(h: torch.Tensor, n_tokens: torch.Tensor | None) -> torch.Tensor | None:
    """H = round(√N h) as int64 if that is integral (within 1e-3), else None."""
    if n_tokens is None:
        return None
    H = h.double() * n_tokens.double().clamp_min(1).sqrt()[:, None]
    Hr = H.round()
    if float((H - Hr).abs().max()) > 1e-3:
        return None
    return Hr.long()


def chernoff_pvalue(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Chernoff upper bound on P(Σ_j u_j a_j ≥ x) for Rademacher u.

    Args:
        a: (B, D) float64 weights.
        x: (B,) float64 observed values.

    Returns:
        (B,) float64 in (0, 1]: inf over a grid of θ > 0 of exp(−θx + Σ_j log cosh(θ a_j)).
    """
    a = a.double()
    scale = a.norm(dim=1).clamp_min(1e-12)  # (B,)
    thetas = torch.logspace(-3, 2, 400, dtype=torch.float64, device=a.device)  # in units of x/‖a‖²
    theta = thetas[None, :] * (x.clamp_min(0) / scale**2)[:, None]  # (B, T)
    ta = theta[:, :, None] * a[:, None, :]  # (B, T, D)
    logcosh = (ta.abs() + torch.log1p(torch.exp(-2 * ta.abs())) - math.log(2)).sum(-1)  # (B, T)
    bound = torch.exp((logcosh - theta * x[:, None]).amin(1))
    return bound.clamp(max=1.0)


def rademacher_sum_pvalue(H: torch.Tensor, x_obs: torch.Tensor, x_extra: torch.Tensor | None = None) -> torch.Tensor:
    """Exact P(Σ_j u_j H_j ≥ x_obs) for Rademacher u, by inverse FFT of Π_j cos(θ H_j).

    Args:
        H: (B, D) int64 integer sketch coordinates.
        x_obs: (B,) or (B, K) int64 observed values of Σ u_j H_j (K directions share one pmf).

    Returns:
        float64 tensor shaped like ``x_obs``: the exact tail where >= 1e-10, else the Chernoff bound.
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
    small = exact < _FFT_FLOOR
    if bool(small.any()):
        rows, cols = small.nonzero(as_tuple=True)
        cb = chernoff_pvalue(a[rows].double(), xo[rows, cols].double())
        exact = exact.clone()
        exact[rows, cols] = cb  # FFT round-off dominates there; the Chernoff bound is rigorous
    return exact[:, 0] if squeeze else exact


class _SketchScore(ScoreFunction):
    """Shared p-value machinery (see module doc)."""

    def inner(self, u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """⟨u, h⟩: u (D,) or (K, D), h (B, D) → (B,) or (B, K) float64."""
        u = u.to(h.device, torch.float64)
        return h.double() @ (u if u.dim() == 1 else u.T)

    def p_values(
        self,
        u: torch.Tensor,
        h: torch.Tensor,
        method: str = "exact",
        n_tokens: torch.Tensor | None = None,
        n_mc: int = 10000,
        generator: torch.Generator | None = None,
    ) -> ScoreOutput:
        """Score, z and key-randomised p-value.

        Args:
            u: (D,) ±1 direction.
            h: (B, D) sketches.
            method: one of ``exact``, ``bound``, ``uniform-bound``, ``normal``, ``monte-carlo``.
            n_tokens: (B,) int64 token counts N (needed by ``exact``; without them ``exact`` falls
                back to ``normal`` and says so in ``p_value_method``).
            n_mc: Monte-Carlo directions.
            generator: randomness for ``monte-carlo``.

        Raises:
            ConfigError: unknown method.
        """
        if method not in P_VALUE_METHODS:
            raise ConfigError(f"unknown p-value method '{method}' (choose from {', '.join(P_VALUE_METHODS)})")
        h = h.double()
        s = self.score(u, h)
        ip = self.inner(u, h)  # (B,)
        hn = h.norm(dim=1)  # (B,)
        z = torch.where(hn > 0, ip / hn.clamp_min(1e-300), torch.zeros_like(ip))
        used = method
        if method == "exact":
            H = _int_sketch(h, n_tokens)
            if H is None:
                used = "normal"
            else:
                x = (H.double() @ u.to(h.device, torch.float64)).round().long()
                p = rademacher_sum_pvalue(H, x)
                return ScoreOutput(s, z, p, "exact key-randomised (characteristic function + FFT; Chernoff below 1e-10)")
        if used == "normal":
            p = torch.from_numpy(norm.sf(z.cpu().numpy())).to(h.device)
            return ScoreOutput(s, z, p, "normal approximation 1-Phi(z)")
        if method == "bound":
            a = ip.clamp_min(0)
            p = torch.where(hn > 0, torch.exp(-(a**2) / (2 * hn.clamp_min(1e-300) ** 2)), (ip <= 0).double())
            p = torch.where(ip > 0, p, torch.ones_like(p))
            return ScoreOutput(s, z, p.clamp(max=1.0), "Hoeffding conditional bound (paper eq. 17)")
        if method == "uniform-bound":
            p = self._uniform_bound(s)
            return ScoreOutput(s, z, p, "uniform bound (paper eq. 18)")
        # monte-carlo
        gen = generator or torch.Generator().manual_seed(0)
        U = (torch.randint(0, 2, (n_mc, h.shape[1]), generator=gen, dtype=torch.int8).double() * 2 - 1).to(h.device)
        null = h @ U.T  # (B, n_mc)
        p = ((null >= ip[:, None] - 1e-9).sum(1).double() + 1) / (n_mc + 1)
        return ScoreOutput(s, z, p, f"Monte-Carlo over {n_mc} fresh directions")

    def _uniform_bound(self, s: torch.Tensor) -> torch.Tensor:
        raise ConfigError(f"score '{self.name}' has no uniform bound; use method 'exact' or 'bound'")


class PenalizedParams(StrictModel):
    """Attributes: gamma: γ in λ = γ√w (paper §4.1); default 0.05 (see ``GlobalSketchParams.score``)."""

    gamma: float = Field(0.05, gt=0)


class PenalizedScore(_SketchScore):
    """Penalised score S_k = 2⟨u_k, h⟩ − λ‖h‖², λ = γ√w (seed paper eq. 2)."""

    name = "penalized"
    Params = PenalizedParams

    @property
    def lam(self) -> float:
        """λ = γ√w."""
        return self.params.gamma * math.sqrt(self.width)

    def score(self, u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """S_k (eq. 2): u (D,) or (K, D), h (B, D) → (B,) or (B, K) float64."""
        ip = self.inner(u, h)
        sq = (h.double() ** 2).sum(1)
        return 2 * ip - self.lam * (sq if ip.dim() == 1 else sq[:, None])

    def residual(self, u: torch.Tensor, h_hat: torch.Tensor) -> torch.Tensor:
        """r_{k,t} = u_k − λĥ_{k,t} (eq. 6): (B, D) float32."""
        return u.to(h_hat.device, torch.float32)[None, :] - self.lam * h_hat.float()

    def analytic_threshold(self, alpha: float, n_tokens: int | None = None) -> float:
        """τ_α = (2/λ) log(1/α) (eq. 19)."""
        return 2.0 / self.lam * math.log(1.0 / alpha)

    def _uniform_bound(self, s: torch.Tensor) -> torch.Tensor:
        return torch.where(s > 0, torch.exp(-self.lam * s / 2), torch.ones_like(s)).clamp(max=1.0)


class ZScore(_SketchScore):
    """Self-normalised score z = ⟨u_k, h⟩ / ‖h‖ (standard normal under the key-randomised null by the CLT)."""

    name = "z"

    def score(self, u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """z: (B,) or (B, K) float64 (0 where h = 0)."""
        ip = self.inner(u, h)
        hn = h.double().norm(dim=1).clamp_min(1e-300)
        return ip / (hn if ip.dim() == 1 else hn[:, None])

    def residual(self, u: torch.Tensor, h_hat: torch.Tensor) -> torch.Tensor:
        """Ascent direction of z at ĥ: u − (⟨u,ĥ⟩/‖ĥ‖²) ĥ, (B, D) float32 (u where ĥ = 0)."""
        h = h_hat.float()
        uu = u.to(h.device, torch.float32)[None, :]
        coef = (h * uu).sum(1, keepdim=True) / (h * h).sum(1, keepdim=True).clamp_min(1e-12)
        return uu - coef * h

    def analytic_threshold(self, alpha: float, n_tokens: int | None = None) -> float:
        """z_α = √(2 log(1/α)) (Hoeffding: P(z ≥ t) ≤ exp(−t²/2))."""
        return math.sqrt(2.0 * math.log(1.0 / alpha))


@hookimpl
def sketchwm_register_scores() -> list[type]:
    """Register the penalised score (eq. 2) and the self-normalised z-score."""
    return [PenalizedScore, ZScore]
