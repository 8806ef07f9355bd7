"""The unmasking order as a second channel of ``global-sketch`` (``order``): the residual gradient of
eq. 6 of the seed paper read as a ranking of the target positions.

Committing token v at masked row i moves p_i to the one-hot of v; to first order the expected score
½S(ĥ) changes by g_i(v) = a_i(v) − Σ_w p_i(w) a_i(w), a the residual gradient. The priority of target
i with drawn token x0_i is

    π_i = log p_i(x0_i) + η·g_i(x0_i),   η = δ·√n̂,

the model's confidence in the token (LLaDA's low-confidence order, in log form) plus the score gain
on the tilt's logit scale: to first order log p̃_i(x0_i) of the tilted marginal (eq. 7), so δ is the
strength of both channels and δ = 0 gives the low-confidence order. The tokens themselves are the
sampler's (the argmax at T = 0); detection is unchanged (the sketch does not depend on the order
the text was written in).
"""

from __future__ import annotations

import torch

from sketchwm.components import DenoiseStep, Marginals, serial_on_cpu
from sketchwm.errors import InputError

from .embed import TiltParts

__all__ = ["OrderSteering", "priority_table"]


def priority_table(marginals: Marginals, parts: TiltParts, delta: float) -> torch.Tensor:
    """π_i(v) = log p_i(v) + η·(a_i(v) − Σ_w p_i(w) a_i(w)) at the target rows: (B, K, V) float32,
    η = δ·√n̂ (module doc). Reads the untilted target rows (call before the tilt)."""
    logits = marginals.at_target_rows(marginals.logits)  # (B, K, V) untilted
    B, K, V = logits.shape
    a = parts.apply(torch.zeros_like(logits), torch.ones(B, dtype=logits.dtype, device=logits.device))  # (B, K, V)
    logp = torch.log_softmax(logits, dim=-1)  # (B, K, V)
    gain = a - (logp.exp() * a).sum(-1, keepdim=True)  # (B, K, V): first-order change of ½S on committing v
    with serial_on_cpu(logits.device):
        eta = delta * parts.n_hat.sqrt()  # (B,)
    return logp.add_(gain.mul_(eta[:, None, None]))


class OrderSteering:
    """When the order is steered, and the priority table of the current step.

    Args:
        order: ``auto`` (steer under greedy decoding, T = 0), ``steer`` (every temperature) or ``off``.
        delta: δ, the strength of the order channel (η = δ·√n̂).
    """

    def __init__(self, order: str, delta: float):
        self.order, self.delta = order, delta
        self._table: tuple[int, torch.Tensor] | None = None  # (step, (B, K, V) priority table)

    def steers(self, temperature: float) -> bool:
        """``order`` = ``steer``, or ``auto`` under greedy decoding (T = 0)."""
        return self.order == "steer" or (self.order == "auto" and temperature == 0.0)

    def reset(self) -> None:
        """Forget the table (a new generation, or a step that does not steer)."""
        self._table = None

    def record(self, step_index: int, marginals: Marginals, parts: TiltParts) -> None:
        """Build the priority table of step ``step_index`` from its untilted target rows."""
        self._table = (step_index, priority_table(marginals, parts, self.delta))

    def priority(self, step: DenoiseStep, x0: torch.Tensor) -> torch.Tensor:
        """π_i of the drawn tokens x0 (B, K) int64 at this step's targets: (B, K) float32. The table
        is used once.

        Raises:
            InputError: no table recorded for this step (``process_logits`` of the step first).
        """
        if self._table is None or self._table[0] != step.step:
            raise InputError("order_priority needs process_logits of the same step first")
        table = self._table[1]  # (B, K, V)
        self._table = None
        return table.gather(-1, x0[..., None]).squeeze(-1)  # (B, K)
