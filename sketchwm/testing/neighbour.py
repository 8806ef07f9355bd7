"""A tiny DLM whose argmax depends on its decoded neighbours, so the unmasking order changes its greedy text.

A random BERT (:func:`sketchwm.testing.tiny_backend`) or the random stand-ins write the same greedy
text whatever the order (their argmax hardly reads the context): no order-steering watermark can
mark them, and no test could see one work. :class:`NeighbourBackend` is built for that: its
marginal at position i is

    logits_i = A[x_{i−1}] + B[x_{i+1}] + C[i]

with seeded N(0, 1) tables A, B (the [MASK] rows zero) and C (scale 0.5), over the tiny tokenizer's
vocabulary. Used by ``tests/test_greedy_order.py`` and ``benchmarks/greedy_order.py``.
"""

from __future__ import annotations

import torch

from ..components import DLMBackend

__all__ = ["NeighbourBackend"]


class NeighbourBackend(DLMBackend):
    """The neighbour-driven tiny DLM of the module doc (CPU, vocabulary of :func:`sketchwm.testing.tiny_tokenizer`).

    Args:
        seed: seed of the tables.
    """

    name = "neighbour-test"

    def __init__(self, seed: int = 0):
        from . import tiny_tokenizer

        self.tokenizer = tiny_tokenizer()
        self.vocab_size = len(self.tokenizer)
        self.mask_token_id = self.tokenizer.mask_token_id
        self.banned_token_ids = list(self.tokenizer.all_special_ids)
        self.device = torch.device("cpu")
        self.max_length = 512
        self.model_id = f"neighbour-test-seed{seed}"
        g = torch.Generator().manual_seed(seed)
        V = self.vocab_size
        self.left, self.right = torch.randn(V, V, generator=g), torch.randn(V, V, generator=g)  # (V, V)
        self.left[self.mask_token_id] = 0.0
        self.right[self.mask_token_id] = 0.0
        self.pos = 0.5 * torch.randn(self.max_length, V, generator=g)  # (512, V)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32: A[x_{i−1}] + B[x_{i+1}] + C[i] (a [MASK] outside the input)."""
        B, L = input_ids.shape
        pad = torch.full((B, 1), self.mask_token_id, dtype=torch.long, device=input_ids.device)
        prev = torch.cat([pad, input_ids[:, :-1]], 1)  # (B, L)
        nxt = torch.cat([input_ids[:, 1:], pad], 1)
        return self.left[prev] + self.right[nxt] + self.pos[:L][None]  # (B, L, V)
