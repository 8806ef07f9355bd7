"""The remasking-rule contract: which masked positions a denoising step commits (LLaDA's remasking
strategies). A registered plugin kind (``remasking``); the engine (:mod:`sketchwm.engine`) calls it, the
registry (:mod:`sketchwm.registry`) checks plugins against it, so it lives apart from both.
"""

from __future__ import annotations

from typing import Any

import torch

from .components import Component, packed_masked_positions

__all__ = ["RemaskingRule"]


class RemaskingRule(Component):
    """Which masked positions of the block are committed at a step (LLaDA's remasking strategies):
    a registered plugin kind (``remasking``, hook ``sketchwm_register_remasking_rules``); the
    built-in ``random``, ``low_confidence`` and ``entropy`` are registered like any other.

    :meth:`candidates` picks the target rows before the marginals are computed; :meth:`choose`
    keeps ``k`` of them per text once the tokens are drawn, ranking them by :meth:`confidence`, or
    by the priority of a scheme that steers the order (:meth:`WatermarkScheme.steers_order`).

    Args:
        params: the rule's ``Params`` (none for the built-in rules).
    """

    kind = "remasking"

    def __init__(self, params: Any = None, **resources: Any):
        self.params = self.parse_params(params)

    def candidates(self, eligible: torch.Tensor, k: torch.Tensor, generator: torch.Generator,
                   steered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """eligible (B, G) bool (masked positions of the block), k (B,) int64 tokens to commit →
        targets (B, K) int64 distinct positions and valid (B, K) bool; K = 0 when nothing is committed.

        ``steered``: a scheme ranks the candidates (:meth:`choose` gets its priority), so every
        eligible position must be a candidate. Default (confidence rules): every eligible position,
        in increasing order."""
        if int(k.max()) == 0:
            return torch.zeros((eligible.shape[0], 0), dtype=torch.long, device=eligible.device), torch.zeros(
                (eligible.shape[0], 0), dtype=torch.bool, device=eligible.device)
        return packed_masked_positions(eligible)

    def confidence(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """(B, K) float32 score of each candidate: the k highest are committed (logits (B, K, V) tilted,
        scaled (B, K, V) tempered and filtered, x0 (B, K) int64 draws).

        Raises:
            NotImplementedError: the base class (a rule implements it, or overrides :meth:`choose`).
        """
        raise NotImplementedError

    def choose(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor, valid: torch.Tensor,
               k: torch.Tensor, priority: torch.Tensor | None = None) -> torch.Tensor:
        """(B, K) bool, the candidates committed: the k[b] valid ones of highest ``priority``, or of
        highest :meth:`confidence` when no scheme steers the order (``priority`` None).

        Args:
            logits: (B, K, V) tilted logits; scaled: the tempered, filtered ones; x0: (B, K) draws;
            valid: (B, K) bool; k: (B,) int64; priority: (B, K) float32 or None.
        """
        score = priority if priority is not None else self.confidence(logits, scaled, x0)
        conf = torch.where(valid, score, float("-inf"))
        order = torch.argsort(conf, dim=1, descending=True)  # (B, K)
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
        return (rank < k[:, None]) & valid
