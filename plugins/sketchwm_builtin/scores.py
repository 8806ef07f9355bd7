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
  the Chernoff bound inf_θ e^{−θx} Π cosh(θH_j), still a valid p-value, is returned instead. A
  sketch without integer coordinates (no lattice) gets that Chernoff bound everywhere.
* ``bound``: the conditional Hoeffding bound of eq. (17).
* ``uniform-bound``: the uniform bound exp(−λS/2) of eq. (18) (penalised score only).
* ``normal``: 1 − Φ(z) (CLT approximation).
* ``monte-carlo``: fraction of ``n_mc`` fresh random directions that score at least as high.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from sketchwm.components import SchemeScores, ScoreFunction
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError
from sketchwm.hookspecs import hookimpl
from sketchwm.stats import chernoff_pvalue, check_alpha, hoeffding_pvalue, hoeffding_threshold, normal_sf, permutation_pvalue, rademacher_sum_pvalue

__all__ = ["PenalizedScore", "ZScore", "P_VALUE_METHODS"]

P_VALUE_METHODS = ("exact", "bound", "uniform-bound", "normal", "monte-carlo")


def _rows(u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """u as (B, D) float32 rows on h's device: u (D,) broadcast to every text, or (B, D) one per text."""
    u = u.to(h.device, torch.float32)
    return u[None, :] if u.dim() == 1 else u


def _int_sketch(h: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor | None:
    """H = round(√N h) as int64 if that is integral (within 1e-3), else None."""
    H = h.double() * n_tokens.double().clamp_min(1).sqrt()[:, None]
    Hr = H.round()
    if float((H - Hr).abs().max()) > 1e-3:
        return None
    return Hr.long()


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
        n_tokens: torch.Tensor,
        method: str = "exact",
        *,
        n_mc: int = 10000,
        generator: torch.Generator | None = None,
    ) -> SchemeScores:
        """Score, z and key-randomised p-value (the :meth:`ScoreFunction.p_values` contract).

        Args:
            u: (D,) ±1 direction.
            h: (B, D) sketches.
            n_tokens: (B,) token counts N of the sketches' normaliser (h = H/√N); ``exact`` needs
                √N·h integral and returns the Chernoff bound otherwise, saying so in ``p_value_method``.
            method: one of ``exact``, ``bound``, ``uniform-bound``, ``normal``, ``monte-carlo``.
            n_mc: Monte-Carlo directions.
            generator: randomness for ``monte-carlo``.

        Returns:
            :class:`SchemeScores` with ``n_scored`` = ``n_tokens`` (int64).

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
        n = n_tokens.long()

        def out(p: torch.Tensor, how: str) -> SchemeScores:
            return SchemeScores(s, z, p, n, how)

        if method == "exact":
            H = _int_sketch(h, n_tokens)
            if H is None:  # no integer lattice (e.g. a dense real sketch): the Chernoff bound, still a valid p-value
                p = torch.cat([chernoff_pvalue(h[i:i + 16], ip[i:i + 16]) for i in range(0, h.shape[0], 16)]) \
                    if h.shape[0] else ip.clone()
                return out(p.to(h.device), "key-randomised Chernoff bound (the sketch is not integral)")
            x = (H.double() @ u.to(h.device, torch.float64)).round().long()
            return out(rademacher_sum_pvalue(H, x),
                       "exact key-randomised (characteristic function + FFT; Chernoff below 1e-10)")
        if method == "normal":
            return out(normal_sf(z).to(h.device), "normal approximation 1-Phi(z)")
        if method == "bound":
            return out(hoeffding_pvalue(ip, hn), "Hoeffding conditional bound (paper eq. 17)")
        if method == "uniform-bound":
            return out(self._uniform_bound(s), "uniform bound (paper eq. 18)")
        # monte-carlo
        gen = generator or torch.Generator().manual_seed(0)
        U = (torch.randint(0, 2, (n_mc, h.shape[1]), generator=gen, dtype=torch.int8).double() * 2 - 1).to(h.device)
        null = h @ U.T  # (B, n_mc)
        return out(permutation_pvalue(null, ip, "greater", tol=1e-9), f"Monte-Carlo over {n_mc} fresh directions")

    def _uniform_bound(self, s: torch.Tensor) -> torch.Tensor:
        raise ConfigError(f"score '{self.name}' has no uniform bound; use method 'exact' or 'bound'")


class PenalizedParams(StrictModel):
    """Attributes: gamma: γ in λ = γ√w (paper §4.1); default 0.05 (see ``GlobalSketchParams.score``)."""

    gamma: float = Field(0.05, gt=0)


class PenalizedScore(_SketchScore):
    """Penalised score S_k = 2⟨u_k, h⟩ − λ‖h‖², λ = γ√w (seed paper eq. 2)."""

    name = "penalized"
    Params = PenalizedParams
    threshold_needs_geometry = True  # λ = γ√w and eq. 19 assume the count sketch's ‖h‖² ≈ d

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
        """r_{k,t} = u_k − λĥ_{k,t} (eq. 6): u (D,) or per text (B, D), ĥ (B, D) → (B, D) float32."""
        return _rows(u, h_hat) - self.lam * h_hat.float()

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """τ_α = (2/λ) log(1/α) (eq. 19), the same at every length ``n_tokens``. Meaningful on a sketch with
        the count sketch's geometry only (``threshold_needs_geometry``; the scheme checks it).

        Raises:
            InputError: α outside (0, 1).
        """
        return 2.0 / self.lam * math.log(1.0 / check_alpha(alpha))

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
        """Ascent direction of z at ĥ: u − (⟨u,ĥ⟩/‖ĥ‖²) ĥ, u (D,) or per text (B, D), ĥ (B, D) → (B, D)
        float32 (u where ĥ = 0)."""
        h = h_hat.float()
        uu = _rows(u, h)
        coef = (h * uu).sum(1, keepdim=True) / (h * h).sum(1, keepdim=True).clamp_min(1e-12)
        return uu - coef * h

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """z_α = √(2 log(1/α)) (Hoeffding: P(z ≥ t) ≤ exp(−t²/2)), the same at every length ``n_tokens``.

        Raises:
            InputError: α outside (0, 1).
        """
        return hoeffding_threshold(alpha)


@hookimpl
def sketchwm_register_scores() -> list[type]:
    """Register the penalised score (eq. 2) and the self-normalised z-score."""
    return [PenalizedScore, ZScore]
