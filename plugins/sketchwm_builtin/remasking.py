"""The built-in remasking rules (``random``, ``low_confidence``, ``entropy``), registered through the
hook ``sketchwm_register_remasking_rules`` exactly as a third-party rule is.

Sources: LLaDA's ``generate.py`` (Nie et al. 2025, "Large Language Diffusion Models": remasking
``random`` and ``low_confidence``) and Dream's sampler (Ye et al. 2025: ``entropy``). The base class
and the sampler that calls them: :class:`sketchwm.remasking.RemaskingRule`.
"""

from __future__ import annotations

import torch

from sketchwm.engine import RemaskingRule
from sketchwm.hookspecs import hookimpl

__all__ = ["RandomRemasking", "LowConfidenceRemasking", "EntropyRemasking"]


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


@hookimpl
def sketchwm_register_remasking_rules() -> list[type]:
    """Register the built-in remasking rules."""
    return [RandomRemasking, LowConfidenceRemasking, EntropyRemasking]
