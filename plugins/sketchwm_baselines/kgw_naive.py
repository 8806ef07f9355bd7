"""``kgw-naive``: KGW applied to a DLM only where the context is already decoded.

Kirchenbauer et al. 2023, "A Watermark for Large Language Models" (ICML), Alg. 2 (soft red list):
a green list G(h, ·) of ratio γ is seeded by the hash h of the context, and every green logit is
raised by δ: l̃_v = l_v + δ·G(h, v). In a masked DLM the context of a masked position may itself be
masked; the naive port (the "KGW" baseline of Gloaguen et al. 2025, §5) tilts a masked position
only when every context token is known — unmasked, or in the prompt — and leaves it untouched
otherwise. Detection is shared with ``red-green-dlm``
(:class:`~sketchwm_baselines.common.ContextGreenListScheme`).
"""

from __future__ import annotations

import torch

from sketchwm.components import DenoiseStep

from .common import ContextGreenListScheme, GreenListParams, context_hash, gather_context

__all__ = ["KGWNaiveScheme", "KGWNaiveParams"]


class KGWNaiveParams(GreenListParams):
    """Parameters of ``kgw-naive``: context, hash, γ, δ, min_tokens (see :class:`GreenListParams`)."""


class KGWNaiveScheme(ContextGreenListScheme):
    """KGW soft red list on masked positions whose context is known (Kirchenbauer et al. 2023)."""

    name = "kgw-naive"
    Params = KGWNaiveParams

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """l + δ·G(h_i, ·) at masked positions i whose context is fully known; (B, G, V) float32."""
        p = self.params
        if p.delta == 0.0:
            return step.logits
        ctx, ok = gather_context(step.tokens, ~step.masked, p.context, step.prompt_ids, step.prompt_mask)  # (B, G, |O|)
        sel = step.masked & ok  # (B, G)
        if not bool(sel.any()):
            return step.logits
        b, i = sel.nonzero(as_tuple=True)  # (n,), (n,)
        h = context_hash(ctx[b, i], self.vocab_size, p.hash)  # (n,)
        vocab = torch.arange(self.vocab_size, device=step.logits.device)  # (V,)
        boost = self.green(h[:, None], vocab[None, :]).to(step.logits.dtype) * p.delta  # (n, V)
        out = step.logits.clone()
        out[b, i] += boost  # (B, G, V)
        return out
