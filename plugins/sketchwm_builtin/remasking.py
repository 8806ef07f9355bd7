"""The built-in remasking rules (``random``, ``low_confidence``, ``entropy``, ``confidence_threshold``),
registered through the hook ``sketchwm_register_remasking_rules`` exactly as a third-party rule is.

Sources: LLaDA's ``generate.py`` (Nie et al. 2025, "Large Language Diffusion Models": remasking
``random`` and ``low_confidence``), Dream's sampler (Ye et al. 2025: ``entropy``) and Fast-dLLM's
confidence-aware parallel decoding (Wu et al. 2025, "Fast-dLLM: Training-free Acceleration of
Diffusion LLM by Enabling KV Cache and Parallel Decoding": ``confidence_threshold``). The base class
and the sampler that calls them: :class:`sketchwm.remasking.RemaskingRule`.
"""

from __future__ import annotations

import torch
from pydantic import Field

from sketchwm.config import StrictModel
from sketchwm.engine import RemaskingRule
from sketchwm.hookspecs import hookimpl

__all__ = ["RandomRemasking", "LowConfidenceRemasking", "EntropyRemasking", "ConfidenceThresholdRemasking"]


class RandomRemasking(RemaskingRule):
    """``random``: k positions uniformly at random, drawn before the marginals (one (B, G) ``torch.rand``)."""

    name = "random"

    def candidates(self, eligible: torch.Tensor, k: torch.Tensor, generator: torch.Generator,
                   steered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The k[b] sampled positions (B, max k) and their validity; see :meth:`RemaskingRule.candidates`.
        ``steered``: every eligible position (a scheme ranks them), no random draw."""
        if steered:
            return super().candidates(eligible, k, generator)
        conf = torch.rand(eligible.shape, generator=generator, device=eligible.device)
        conf = torch.where(eligible, conf, torch.full_like(conf, float("-inf")))
        kmax = int(k.max())
        targets = conf.topk(kmax, dim=1).indices  # (B, kmax)
        return targets, torch.arange(kmax, device=k.device)[None, :] < k[:, None]

    def confidence(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """No preference: zeros (B, K) float32 (an order-steering scheme's priority decides alone)."""
        return torch.zeros(x0.shape, dtype=torch.float32, device=x0.device)

    def choose(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor, valid: torch.Tensor,
               k: torch.Tensor, priority: torch.Tensor | None = None) -> torch.Tensor:
        """Every valid candidate (they were drawn k per text); with a scheme's ``priority``, the k[b]
        of highest priority (:meth:`RemaskingRule.choose`)."""
        if priority is not None:
            return super().choose(logits, scaled, x0, valid, k, priority)
        return valid


class LowConfidenceRemasking(RemaskingRule):
    """``low_confidence`` (LLaDA): commit the draws of highest probability under the untempered
    (nucleus-filtered) marginal."""

    name = "low_confidence"

    def confidence(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """p(x0) (B, K) float32."""
        kept = logits.masked_fill(torch.isinf(scaled), float("-inf"))  # the nucleus, as in the draw
        return torch.log_softmax(kept, dim=-1).gather(-1, x0[..., None]).squeeze(-1).exp().float()


class EntropyRemasking(RemaskingRule):
    """``entropy`` (Dream): commit the rows of lowest entropy of the tempered, filtered marginal."""

    name = "entropy"

    def confidence(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """−entropy (B, K) float32."""
        logp = torch.log_softmax(scaled, dim=-1)  # (B, K, V)
        return (logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1).float()


class ConfidenceThresholdRemasking(LowConfidenceRemasking):
    """``confidence_threshold`` (Fast-dLLM, Wu et al. 2025): commit, in parallel, every candidate of
    the block whose confidence exceeds a threshold, and at least the sampler's scheduled k of
    highest confidence (at least one).

    Confidence is ``low_confidence``'s: p(x0) under the untempered, nucleus-filtered marginal. The
    candidates are the masked positions of the current block (the engine never offers others), so
    nothing outside the block is committed. The floor of k per step (LLaDA's even split of the
    block over its steps) keeps the promise of the sampler's ``steps``: a block is finished within
    its share of the steps, and earlier when the model is confident; the engine runs no model call
    at the steps left over. With ``steps`` equal to ``gen_length`` the floor is one token a step,
    Fast-dLLM's own rule. A scheme that steers the order ranks the floor's k; the threshold adds the
    confident candidates beyond them.

    Args:
        params: ``threshold`` in [0, 1], default 0.9 (Fast-dLLM's setting for LLaDA); 1 commits no more
            than ``low_confidence`` does.
    """

    name = "confidence_threshold"

    class Params(StrictModel):
        """Parameters of ``confidence_threshold``.

        Attributes:
            threshold: commit every candidate whose p(x0) exceeds it (default 0.9, in [0, 1]).
        """

        threshold: float = Field(0.9, ge=0.0, le=1.0)

    def choose(self, logits: torch.Tensor, scaled: torch.Tensor, x0: torch.Tensor, valid: torch.Tensor,
               k: torch.Tensor, priority: torch.Tensor | None = None) -> torch.Tensor:
        """(B, K) bool: the valid candidates whose confidence exceeds the threshold, together with the
        max(k[b], 1) of highest ``priority`` (or confidence, when no scheme steers the order).

        Args:
            logits: (B, K, V) tilted logits; scaled: the tempered, filtered ones; x0: (B, K) draws;
            valid: (B, K) bool; k: (B,) int64; priority: (B, K) float32 or None.
        """
        conf = self.confidence(logits, scaled, x0)  # (B, K)
        floor = super().choose(logits, scaled, x0, valid, k.clamp(min=1), conf if priority is None else priority)
        return floor | (valid & (conf > self.params.threshold))  # (B, K)


@hookimpl
def sketchwm_register_remasking_rules() -> list[type]:
    """Register the built-in remasking rules."""
    return [RandomRemasking, LowConfidenceRemasking, EntropyRemasking, ConfidenceThresholdRemasking]
