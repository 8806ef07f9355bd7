"""The score-function contract: S(u, h), its residual gradient and p-values (paper eq. 2, 17-19)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch

from .component import Component
from .scheme import SchemeScores

__all__ = ["ScoreFunction"]


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
    #: True when :meth:`analytic_threshold` is only meaningful on a sketch with the count sketch's geometry
    #: (:attr:`Sketch.count_geometry`); on other sketches the scheme then reports no closed form.
    threshold_needs_geometry: ClassVar[bool] = False

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
        """Ascent direction ½∇_h S at h_hat: u (D,), or (B, D) one direction per text (a key family's
        drawn members), h_hat (B, D) → (B, D) float32 (r_{k,t} of eq. 6)."""

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
