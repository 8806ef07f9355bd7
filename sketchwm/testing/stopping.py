"""A stopping stand-in: a tiny backend whose model prefers to end its text after about k tokens.

Instruct DLMs (LLaDA-Instruct, Dream-Instruct) fill the tail of the canvas with EOS, and the text is
what comes before the first EOS. :class:`StoppingBackend` wraps any backend (by default
:func:`sketchwm.testing.tiny_backend`) and gives generation position i (0-based, counted from the
start of the canvas, which is the last ``gen_length`` columns of the input) the EOS probability
q_i = σ((i − k)/s), whatever the other tokens are: its EOS logit is set to
logsumexp(allowed content logits) + log(q_i / (1 − q_i)). The unwatermarked length L (first EOS)
then has P(L > i) = Π_{j≤i}(1 − q_j) exactly under the engine's sampler at temperature 1, and a
watermark that leaves each p_i(EOS) unchanged leaves that law unchanged.

For tests and examples only (nothing downloaded).
"""

from __future__ import annotations

from typing import Any

import torch

from sketchwm.components import DLMBackend

__all__ = ["StoppingBackend", "stopping_backend", "expected_length"]


def _eos_probability(n_pos: int, stop_after: float, softness: float, device: Any) -> torch.Tensor:
    """q_i = σ((i − k)/s) for i in [0, n_pos): (n_pos,) float32, clamped to [1e-6, 1 − 1e-6]."""
    i = torch.arange(n_pos, dtype=torch.float32, device=device)
    return torch.sigmoid((i - stop_after) / softness).clamp(1e-6, 1 - 1e-6)


def expected_length(gen_length: int, stop_after: float, softness: float) -> float:
    """E[L] = Σ_i Π_{j≤i}(1 − q_j) of the unwatermarked stand-in (tokens before the first EOS)."""
    q = _eos_probability(gen_length, stop_after, softness, "cpu").double()
    return float(torch.cumprod(1 - q, 0).sum())


class StoppingBackend(DLMBackend):
    """Wraps a backend and adds an EOS whose probability at canvas position i is σ((i − k)/s).

    Args:
        inner: the wrapped :class:`DLMBackend` (its tokenizer, mask id, vocabulary and device are used).
        eos_token_id: the id that ends a text (must be in the vocabulary; it is un-banned).
        gen_length: G, the canvas length the sampler uses (the canvas is the last G input columns).
        stop_after: k, the position where the EOS probability reaches ½.
        softness: s > 0, the width of the rise (tokens).

    Raises:
        ValueError: EOS outside the vocabulary, softness ≤ 0, gen_length < 1.
    """

    name = "stopping-standin"

    def __init__(self, inner: DLMBackend, eos_token_id: int, gen_length: int, stop_after: float = 40.0,
                 softness: float = 3.0):
        if not 0 <= int(eos_token_id) < inner.vocab_size:
            raise ValueError(f"eos_token_id {eos_token_id} is outside the vocabulary [0, {inner.vocab_size})")
        if softness <= 0 or gen_length < 1:
            raise ValueError("softness must be > 0 and gen_length >= 1")
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.mask_token_id = inner.mask_token_id
        self.vocab_size = inner.vocab_size
        self.device = inner.device
        self.max_length = inner.max_length
        self.eos_token_id = int(eos_token_id)
        self.banned_token_ids = [t for t in inner.banned_token_ids if t != self.eos_token_id]
        self.model_id = f"{inner.model_id}+stop@{stop_after:g}"
        self.sampler_defaults = dict(getattr(inner, "sampler_defaults", {}) or {})
        self.gen_length, self.stop_after, self.softness = int(gen_length), float(stop_after), float(softness)
        allowed = torch.ones(self.vocab_size, dtype=torch.bool)
        allowed[[t for t in self.banned_token_ids if t < self.vocab_size] + [self.mask_token_id, self.eos_token_id]] = False
        self._content = allowed.to(self.device)  # (V,) ids that compete with EOS

    def _with_eos(self, logits: torch.Tensor, canvas_pos: torch.Tensor) -> torch.Tensor:
        """Set the EOS column: logits (B, K, V), canvas_pos (B, K) int64 (negative: prompt) → (B, K, V)."""
        q = torch.sigmoid((canvas_pos.float() - self.stop_after) / self.softness).clamp(1e-6, 1 - 1e-6)  # (B, K)
        lse = torch.logsumexp(logits.masked_fill(~self._content, float("-inf")), -1)  # (B, K)
        out = logits.clone()
        out[..., self.eos_token_id] = torch.where(canvas_pos >= 0, lse + torch.log(q) - torch.log1p(-q),
                                                  torch.full_like(lse, -30.0))
        return out

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32: the inner model's logits with the EOS column set by position."""
        out = self.inner.logits(input_ids, attention_mask, positions).float()
        L = input_ids.shape[1]
        pos = (torch.arange(L, device=out.device) - (L - self.gen_length)).expand(out.shape[0], -1)
        return self._with_eos(out, pos)

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor:
        """index (B, K) into [0, L) → (B, K, V) float32 (the inner model's fast path, then the EOS column)."""
        out = self.inner.logits_at(input_ids, attention_mask, index).float()
        return self._with_eos(out, index.to(out.device) - (input_ids.shape[1] - self.gen_length))

    def logits_rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """:meth:`DLMBackend.logits_rows` of the inner model (one forward pass), then the EOS column of each
        call's rows: index (B, K) into [0, L) → (B, K, V) float32."""
        at = self.inner.logits_rows(input_ids, attention_mask)
        shift = input_ids.shape[1] - self.gen_length
        return lambda index: self._with_eos(at(index).float(), index.to(self.device) - shift)


def stopping_backend(gen_length: int = 64, stop_after: float = 40.0, softness: float = 3.0, seed: int = 0) -> StoppingBackend:
    """:class:`StoppingBackend` over :func:`sketchwm.testing.tiny_backend` with ``[SEP]`` as EOS."""
    from sketchwm.testing import tiny_backend

    inner = tiny_backend(seed=seed)
    eos = int(inner.tokenizer.sep_token_id)
    return StoppingBackend(inner, eos, gen_length, stop_after, softness)

