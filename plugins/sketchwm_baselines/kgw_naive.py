"""``kgw-naive``: KGW applied to a DLM only where the context is already decoded.

Kirchenbauer et al. 2023, "A Watermark for Large Language Models" (ICML), Alg. 2 (soft red list):
a green list G(h, ·) of ratio γ is seeded by the hash h of the context, and every green logit is
raised by δ: l̃_v = l_v + δ·G(h, v). In a masked DLM the context of a masked position may itself be
masked; the naive port (the "KGW" baseline of Gloaguen et al. 2025) tilts a masked position
only when every context token is known — unmasked, or in the prompt — and leaves it untouched
otherwise. Green rows are cached per position (:class:`~sketchwm_baselines.context.KeyedRowCache`). Detection is shared with ``red-green-dlm``
(:class:`~sketchwm_baselines.green.ContextGreenListScheme`).
"""

from __future__ import annotations

import torch

from sketchwm.components import DenoiseStep, MarginalReads, Strength

from .context import KeyedRowCache, context_hash, gather_context
from .green import ContextGreenListScheme, GreenListParams

__all__ = ["KGWNaiveScheme", "KGWNaiveParams"]


class KGWNaiveParams(GreenListParams):
    """Parameters of ``kgw-naive``: context, hash, γ, δ, min_tokens (see :class:`GreenListParams`)."""


class KGWNaiveScheme(ContextGreenListScheme):
    """KGW soft red list on masked positions whose context is known (Kirchenbauer et al. 2023)."""

    name = "kgw-naive"
    Params = KGWNaiveParams
    strength = Strength("delta", (0.5, 1.0, 2.0, 3.0))  # green-logit shift δ; default 2
    reads = MarginalReads.sampled()  # a row's tilt depends on that row and the known tokens only

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._rows = KeyedRowCache()

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Drop the green rows cached for the previous batch."""
        self._rows.reset()

    def green_rows(self, h: torch.Tensor) -> torch.Tensor:
        """G(h, ·) for hashes (n,) → (n, V) bool."""
        return self.green(h[:, None], torch.arange(self.vocab_size, device=h.device)[None, :])

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """l + δ·G(h_i, ·) at the target rows i that are masked and whose context is fully known;
        (B, K, V) float32."""
        p = self.params
        m = step.marginals
        logits = m.target_logits()  # (B, K, V)
        if p.delta == 0.0:
            return logits
        ctx, ok = gather_context(step.tokens, ~step.masked, p.context, step.prompt_ids, step.prompt_mask)  # (B, G, |O|)
        sel = m.at_targets(step.masked & ok)  # (B, K)
        if not bool(sel.any()):
            return logits
        h = m.at_targets(context_hash(ctx, self.vocab_size, p.hash))  # (B, K)
        green = self._rows.lookup(h, sel, self.green_rows, self.vocab_size, torch.bool)  # rows valid on sel
        return logits + p.delta * (green & sel[..., None]).to(logits.dtype)  # (B, K, V)
