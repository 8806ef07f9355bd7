"""``dream``: Dream checkpoints (Ye et al. 2025, "Dream 7B: Diffusion Large Language Models").

Expected checkpoints (local directories): ``Dream-org/Dream-v0-Base-7B``, ``Dream-org/Dream-v0-Instruct-7B``,
loaded with ``AutoModel.from_pretrained(path, trust_remote_code=True, dtype=bfloat16)``. Dream is
adapted from an autoregressive model: its logit at position i predicts token i+1, so the backend
shifts by one position (``logits = cat([logits[:, :1], logits[:, :-1]])``) to align position i with
token i. Mask id and EOS come from the tokenizer (``<|mask|>`` = 151666, ``<|endoftext|>``).
Sampler defaults follow Dream's ``diffusion_generate``: one block, entropy remasking, T = 0.2.
"""

from __future__ import annotations

import os

import torch

from .hf_masked_lm import HFBackendParams, special_token_ids
from .llada import LLaDABackend


class DreamParams(HFBackendParams):
    """:class:`HFBackendParams` (dtype defaults to bfloat16)."""

    dtype: str = "bfloat16"  # type: ignore[assignment]


class DreamBackend(LLaDABackend):
    """Dream masked diffusion LM with its one-position logit shift."""

    name = "dream"
    Params = DreamParams

    def _setup(self) -> None:
        tok, p = self.tokenizer, self.params
        self.mask_token_id = int(tok.mask_token_id)
        self.vocab_size = int(getattr(self.model.config, "vocab_size", len(tok)))
        self.eos_token_id = None if tok.eos_token_id is None else int(tok.eos_token_id)
        banned = set(special_token_ids(tok, self.vocab_size)) - ({self.eos_token_id} if self.eos_token_id is not None else set())
        self.banned_token_ids = sorted(banned | {self.mask_token_id})
        self.max_length = int(p.max_length or getattr(self.model.config, "max_position_embeddings", 2048))
        self.model_id = f"{self.name}:{os.path.basename(os.path.normpath(p.path)) or type(self.model).__name__}"
        self.sampler_defaults = {"remasking": "entropy", "temperature": 0.2}

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32, shifted so position i is the marginal of token i."""
        ids = input_ids.to(self.device)
        kwargs = {}
        if attention_mask is not None and not bool(attention_mask.all()):
            kwargs["attention_mask"] = attention_mask.to(self.device).long()
        out = self.model(ids, **kwargs).logits.float()  # (B, L, V), position i predicts i+1
        return torch.cat([out[:, :1], out[:, :-1]], dim=1)
