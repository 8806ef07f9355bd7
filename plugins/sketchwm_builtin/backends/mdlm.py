"""``mdlm``: MDLM checkpoints (Sahoo et al. 2024, "Simple and Effective Masked Diffusion Language Models").

Expected checkpoint: ``kuleshov-group/mdlm-owt`` (local directory), loaded with
``AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)``; forward takes
``(input_ids, timesteps)`` and returns ``.logits``; it has no attention mask. Tokenizer: GPT-2 BPE
(``tokenizer_path``, a local directory with the GPT-2 tokenizer files); the mask id is the
tokenizer's vocabulary size (50257) and the model's vocabulary is one larger (50258).
EOS = ``<|endoftext|>`` (OpenWebText documents are separated by it): texts are cut there.

Padding: MDLM has no attention mask and GPT-2 no pad token, so a left-padded batch cannot be fed
as is (padding with [MASK] would ask the model to denoise the padding and condition the prompt on
it). :meth:`MDLMBackend.logits` runs the rows of each prompt length on their unpadded suffix
(one forward per distinct padding width), so every prompt sees exactly what it would see alone.
Sampler defaults follow MDLM's ancestral sampler: positions unmasked in random order, tokens drawn
from the model's categorical marginals (T = 1).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from sketchwm.errors import ConfigError, ModelFileError

from .hf_masked_lm import HFBackendParams, HFMaskedLMBackend, checkpoint_name, padded_row_ids, quiet_transformers


class MDLMParams(HFBackendParams):
    """:class:`HFBackendParams` plus the GPT-2 tokenizer directory."""

    tokenizer_path: str = ""


class MDLMBackend(HFMaskedLMBackend):
    """MDLM masked diffusion LM (GPT-2 tokenizer, mask id = tokenizer vocab size)."""

    name = "mdlm"
    Params = MDLMParams

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        tok_path = self.params.tokenizer_path or path
        for p in (path, tok_path):
            if not p or not os.path.isdir(p):
                raise ModelFileError(f"{self.name}: directory not found: {p!r}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        quiet_transformers()
        try:
            tok = AutoTokenizer.from_pretrained(tok_path, trust_remote_code=True)
            model = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)
        except Exception as exc:  # noqa: BLE001
            raise ModelFileError(f"{self.name}: cannot load checkpoint from {path}: {exc}") from exc
        return model, tok

    def _setup(self) -> None:
        tok, p = self.tokenizer, self.params
        self.mask_token_id = len(tok)  # MDLM appends [MASK] after the GPT-2 vocabulary
        self.vocab_size = int(getattr(self.model.config, "vocab_size", len(tok) + 1))
        if self.vocab_size <= self.mask_token_id:
            raise ModelFileError(f"{self.name}: model vocabulary ({self.vocab_size}) has no room for mask id {self.mask_token_id}")
        self.eos_token_id = None if tok.eos_token_id is None else int(tok.eos_token_id)
        self.banned_token_ids = sorted({self.mask_token_id, *padded_row_ids(tok, self.vocab_size)})
        self.max_length = int(p.max_length or getattr(self.model.config, "model_length", 1024))
        self.model_id = f"{self.name}:{checkpoint_name(p.path, self.model)}"
        self.sampler_defaults = {"remasking": "random", "temperature": 1.0}

    def _encoder_and_head(self) -> None:
        """MDLM's output layer lives inside its backbone: the LM head runs on every position."""
        return None

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = torch.zeros(ids.shape[0], device=self.device)  # MDLM-OWT is time-agnostic: timesteps = 0
        return self.model(ids, timesteps=t).logits.float()

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32. With left padding, the rows of each padding width run on
        their unpadded suffix (module doc); padding rows of the output are 0."""
        if input_ids.shape[1] > self.max_length:
            raise ConfigError(f"sequence of {input_ids.shape[1]} tokens exceeds the model's maximum of {self.max_length}")
        ids = input_ids.to(self.device)
        if attention_mask is None or bool(attention_mask.all()):
            return self._forward(ids)
        n_pad = (~attention_mask.to(self.device).bool()).sum(1)  # (B,) left-padding widths
        out = torch.zeros(*ids.shape, self.vocab_size, dtype=torch.float32, device=self.device)
        for w in torch.unique(n_pad).tolist():  # one forward per distinct prompt length
            rows = (n_pad == w).nonzero().squeeze(1)
            out[rows, w:] = self._forward(ids[rows, w:])
        return out
