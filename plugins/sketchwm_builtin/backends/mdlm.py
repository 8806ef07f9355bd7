"""``mdlm``: MDLM checkpoints (Sahoo et al. 2024, "Simple and Effective Masked Diffusion Language Models").

Expected checkpoint: ``kuleshov-group/mdlm-owt`` (local directory), loaded with
``AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)``; forward takes
``(input_ids, timesteps)`` and returns ``.logits``. Tokenizer: GPT-2 BPE (``tokenizer_path``, a
local directory with the GPT-2 tokenizer files); the mask id is the tokenizer's vocabulary size
(50257) and the model's vocabulary is one larger (50258). No prompt conditioning beyond the
prefix; fixed-length generation, EOS = ``<|endoftext|>``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from sketchwm.errors import ModelFileError

from .hf_masked_lm import HFBackendParams, HFMaskedLMBackend, quiet_transformers


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
            tok = AutoTokenizer.from_pretrained(tok_path)
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
        self.banned_token_ids = [self.mask_token_id]
        self.max_length = int(p.max_length or getattr(self.model.config, "model_length", 1024))
        self.model_id = f"{self.name}:{os.path.basename(os.path.normpath(p.path)) or type(self.model).__name__}"
        self.sampler_defaults = {"remasking": "random", "temperature": 1.0}

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32 (MDLM-OWT is time-agnostic: timesteps = 0)."""
        ids = input_ids.to(self.device)
        t = torch.zeros(ids.shape[0], device=self.device)
        return self.model(ids, timesteps=t).logits.float()
