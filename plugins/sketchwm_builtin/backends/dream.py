"""``dream``: Dream checkpoints (Ye et al. 2025, "Dream 7B: Diffusion Large Language Models").

Expected checkpoints (local directories): ``Dream-org/Dream-v0-Base-7B``, ``Dream-org/Dream-v0-Instruct-7B``,
loaded with ``AutoModel.from_pretrained(path, trust_remote_code=True, dtype=bfloat16)``.

What follows Dream's own ``diffusion_generate`` (``generation_utils.py``):

* logit alignment: Dream is adapted from an autoregressive model, its logit at position i predicts
  token i + 1; every path (full :meth:`DreamBackend.logits`, :meth:`DreamBackend.logits_at` used by
  the packed and row paths) reads the marginal of token i from row i − 1 (row 0 from itself, as
  Dream does);
* left padding: when a batch has padding, the model gets a 4-D (B, 1, L, L) bool attention mask
  (real token × real token) and position ids counting real tokens from 0 (padding gets 1), as
  Dream builds them; without padding, ``"full"`` attention and default positions;
* ids from the tokenizer: mask ``<|mask|>`` (151666), EOS ``<|endoftext|>`` (151643); the
  instruct chat turn ends with ``<|im_end|>``, which is not banned: its probability is merged into
  EOS so the text ends where the model ends its turn; padded embedding rows (vocabulary 152064 vs
  151667 tokenizer ids) are banned;
* sampler defaults of Dream's published example: one block, entropy remasking, T = 0.2, top-p 0.95.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from sketchwm.components.backend import rows_of
from sketchwm.errors import ConfigError

from .hf_masked_lm import HFBackendParams
from .llada import LLaDABackend


class DreamParams(HFBackendParams):
    """:class:`HFBackendParams` (dtype defaults to bfloat16)."""

    dtype: str = "bfloat16"  # type: ignore[assignment]


def dream_attention(attention_mask: torch.Tensor | None) -> tuple[object, torch.Tensor | None]:
    """Dream's attention inputs for a left-padded batch.

    Args:
        attention_mask: (B, L) bool/int, 1 on real tokens, or None.

    Returns:
        ``("full", None)`` when nothing is padding; else a (B, 1, L, L) bool mask (query and key
        both real) and position ids (B, L) int64 = index among the real tokens (padding: 1).
    """
    if attention_mask is None or bool(attention_mask.all()):
        return "full", None
    am = attention_mask.bool()
    pos = am.long().cumsum(-1) - 1
    pos = pos.masked_fill(~am, 1)
    return am[:, None, :, None] & am[:, None, None, :], pos


class DreamBackend(LLaDABackend):
    """Dream masked diffusion LM with its one-position logit shift (module doc)."""

    name = "dream"
    Params = DreamParams
    turn_end_tokens = ("<|im_end|>",)

    def _ids(self) -> tuple[int, int | None, list[int]]:
        tok, cfg = self.tokenizer, self.model.config
        mask = getattr(tok, "mask_token_id", None)
        mask = mask if mask is not None else getattr(cfg, "mask_token_id", None)
        if mask is None:
            raise ConfigError(f"{self.name}: neither the tokenizer nor the config names a mask token")
        eos = tok.eos_token_id if tok.eos_token_id is not None else getattr(cfg, "eos_token_id", None)
        ends = [i for t in self.turn_end_tokens if (i := tok.get_vocab().get(t)) is not None]
        return int(mask), (None if eos is None else int(eos)), [int(i) for i in ends]

    def _setup(self) -> None:
        super()._setup()
        self.max_length = int(self.params.max_length or getattr(self.model.config, "max_position_embeddings", 2048))
        self.sampler_defaults = {"remasking": "entropy", "temperature": 0.2, "top_p": 0.95}

    def _hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Dream's base model hidden states (B, L, H) with Dream's mask and position ids."""
        if input_ids.shape[1] > self.max_length:
            raise ConfigError(f"sequence of {input_ids.shape[1]} tokens exceeds the model's maximum of {self.max_length}")
        mask, pos = dream_attention(None if attention_mask is None else attention_mask.to(self.device))
        if isinstance(mask, torch.Tensor):
            return self.model.model(input_ids.to(self.device), attention_mask=mask, position_ids=pos).last_hidden_state
        return self.model.model(input_ids.to(self.device), attention_mask=mask).last_hidden_state

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32, shifted so row i is the marginal of token i (module doc)."""
        if input_ids.shape[1] > self.max_length:
            raise ConfigError(f"sequence of {input_ids.shape[1]} tokens exceeds the model's maximum of {self.max_length}")
        mask, pos = dream_attention(None if attention_mask is None else attention_mask.to(self.device))
        kwargs = {"attention_mask": mask} if pos is None else {"attention_mask": mask, "position_ids": pos}
        out = self.model(input_ids.to(self.device), **kwargs).logits.float()  # (B, L, V), row i predicts i+1
        return self.postprocess_logits(torch.cat([out[:, :1], out[:, :-1]], dim=1))

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor:
        """index (B, K) int64 → (B, K, V) float32: the LM head runs on rows ``index − 1`` only (the shift).

        Raises:
            ConfigError: the sequence is longer than the model supports.
        """
        head = getattr(self.model, "lm_head", None)
        if head is None or not hasattr(self.model, "model"):
            return super().logits_at(input_ids, attention_mask, index)  # gathers from the shifted logits()
        return self._head_rows(head, input_ids, attention_mask)(index)

    def logits_rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """See :meth:`DLMBackend.logits_rows`: the base model runs once, at the first call, (B, L, H) hidden
        states kept; each call runs the LM head on rows ``index − 1`` (the shift) → (B, K, V) float32.

        Raises:
            ConfigError: the sequence is longer than the model supports (at the first call).
        """
        if self.replaces_logits_at(DreamBackend):
            return partial(self.logits_at, input_ids, attention_mask)
        head = getattr(self.model, "lm_head", None)
        if head is None or not hasattr(self.model, "model"):
            return self.gathered_rows(input_ids, attention_mask)  # the shifted full logits()
        return self._head_rows(head, input_ids, attention_mask)

    def _head_rows(self, head: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """:meth:`logits_rows` with Dream's base model and LM head ``head``: the hidden states once."""

        def pick(h: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            src = (index.to(self.device) - 1).clamp_min(0)  # the shift: row i − 1 predicts token i
            return self.postprocess_logits(head(torch.gather(h, 1, src[..., None].expand(-1, -1, h.shape[-1]))).float())

        return rows_of(lambda: self._hidden(input_ids, attention_mask), pick)
