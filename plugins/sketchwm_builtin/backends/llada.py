"""``llada``: LLaDA checkpoints (Nie et al. 2025, "Large Language Diffusion Models").

Expected checkpoints (local directories, downloaded beforehand by the user): ``GSAI-ML/LLaDA-8B-Base``,
``GSAI-ML/LLaDA-8B-Instruct``, ``GSAI-ML/LLaDA-1.5``. Loaded with ``AutoModel.from_pretrained(path,
trust_remote_code=True, dtype=bfloat16)``; the model's forward returns ``.logits`` aligned with the
input. Mask id 126336, vocabulary 126464; generation ends at ``<|endoftext|>`` (126081) or
``<|eot_id|>`` (126348); the sampler cuts texts at the first EOS.
Sampler defaults follow LLaDA's ``generate.py``: block length 32, low-confidence remasking, T = 0.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from pydantic import Field

from sketchwm.errors import ModelFileError

from .hf_masked_lm import HFBackendParams, HFMaskedLMBackend, quiet_transformers, special_token_ids

LLADA_MASK_ID = 126336
LLADA_EOS_ID = 126081
LLADA_EOT_ID = 126348


class LLaDAParams(HFBackendParams):
    """:class:`HFBackendParams` plus LLaDA ids (override only for non-standard checkpoints)."""

    dtype: str = "bfloat16"  # type: ignore[assignment]
    mask_token_id: int = Field(LLADA_MASK_ID, ge=0)
    eos_token_id: int = Field(LLADA_EOS_ID, ge=0)
    eot_token_id: int = Field(LLADA_EOT_ID, ge=0)


class LLaDABackend(HFMaskedLMBackend):
    """LLaDA masked diffusion LM (trust_remote_code checkpoint from a local path)."""

    name = "llada"
    Params = LLaDAParams

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModel, AutoTokenizer

        if not path or not os.path.isdir(path):
            raise ModelFileError(f"{self.name}: checkpoint directory not found: {path!r}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        quiet_transformers()
        dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[self.params.dtype]
        try:
            tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
            model = AutoModel.from_pretrained(path, trust_remote_code=True, dtype=dtype)
        except Exception as exc:  # noqa: BLE001
            raise ModelFileError(f"{self.name}: cannot load checkpoint from {path}: {exc}") from exc
        return model, tok

    def _setup(self) -> None:
        p = self.params
        self.mask_token_id = int(p.mask_token_id)
        self.vocab_size = int(getattr(self.model.config, "vocab_size", 126464))
        # The sampler cuts at the first EOS; EoT is treated as EOS too (instruct models emit it).
        self.eos_token_id = int(p.eos_token_id)
        self._eot = int(p.eot_token_id)
        banned = set(special_token_ids(self.tokenizer, self.vocab_size)) - {self.eos_token_id, self._eot}
        self.banned_token_ids = sorted(banned | {self.mask_token_id})
        self.max_length = int(p.max_length or getattr(self.model.config, "max_sequence_length", 4096))
        self.model_id = f"{self.name}:{os.path.basename(os.path.normpath(p.path)) or type(self.model).__name__}"
        self.sampler_defaults = {"block_length": 32, "remasking": "low_confidence", "temperature": 0.0}

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32. EoT logits are merged into EOS so one id ends a text."""
        ids = input_ids.to(self.device)
        kwargs = {}
        if attention_mask is not None and not bool(attention_mask.all()):
            kwargs["attention_mask"] = attention_mask.to(self.device).long()
        out = self.model(ids, **kwargs).logits.float()  # (B, L, V)
        if self._eot < out.shape[-1]:
            out[..., self.eos_token_id] = torch.logaddexp(out[..., self.eos_token_id], out[..., self._eot])
            out[..., self._eot] = float("-inf")
        return out
