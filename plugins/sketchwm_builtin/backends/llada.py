"""``llada``: LLaDA checkpoints (Nie et al. 2025, "Large Language Diffusion Models").

Expected checkpoints (local directories, downloaded beforehand by the user): ``GSAI-ML/LLaDA-8B-Base``,
``GSAI-ML/LLaDA-8B-Instruct``, ``GSAI-ML/LLaDA-1.5``. Loaded with ``AutoModel.from_pretrained(path,
trust_remote_code=True, dtype=bfloat16)``; the model's forward takes ``(input_ids, attention_mask)``
(2-D, 1 on real tokens; left padding) and returns ``.logits`` aligned with the input. Mask id
126336, vocabulary 126464 (the tokenizer has fewer ids: the padded embedding rows are banned);
texts end at ``<|endoftext|>`` (126081); instruct checkpoints close their turn with ``<|eot_id|>``
(126348), whose logit is merged into EOS (see :meth:`LLaDABackend.postprocess_logits`). Ids are read
from the checkpoint's config and tokenizer when present, else these defaults.
Sampler defaults follow LLaDA's ``generate.py``: block length 32, low-confidence remasking, T = 0.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from pydantic import Field

from sketchwm.errors import ConfigError, ModelFileError

from .hf_masked_lm import (HFBackendParams, HFMaskedLMBackend, checkpoint_name, padded_row_ids, quiet_transformers,
                           special_token_ids)

LLADA_MASK_ID = 126336
LLADA_EOS_ID = 126081
LLADA_EOT_ID = 126348


class LLaDAParams(HFBackendParams):
    """:class:`HFBackendParams` plus LLaDA ids (None: from the checkpoint's config/tokenizer, else LLaDA's)."""

    dtype: str = "bfloat16"  # type: ignore[assignment]
    mask_token_id: int | None = Field(None, ge=0)
    eos_token_id: int | None = Field(None, ge=0)
    eot_token_id: int | None = Field(None, ge=0)


def _token_id(tokenizer: Any, token: str) -> int | None:
    """The id of ``token`` if the tokenizer has it as a whole token, else None."""
    vocab = tokenizer.get_vocab()
    return int(vocab[token]) if token in vocab else None


def merge_into(logits: torch.Tensor, target: int, sources: list[int]) -> torch.Tensor:
    """Move the probability of ``sources`` ids onto ``target`` (log-sum-exp), in place: (..., V) → same.

    The probability that the text ends is unchanged; only the id that ends it is unified.
    """
    src = [s for s in sources if s < logits.shape[-1] and s != target]
    if src:
        idx = torch.tensor([target] + src, device=logits.device)
        logits[..., target] = torch.logsumexp(logits[..., idx], dim=-1)
        logits[..., idx[1:]] = float("-inf")
    return logits


class LLaDABackend(HFMaskedLMBackend):
    """LLaDA masked diffusion LM (trust_remote_code checkpoint from a local path)."""

    name = "llada"
    Params = LLaDAParams
    #: tokens of the chat format that end a turn: merged into EOS (the text ends there)
    turn_end_tokens: tuple[str, ...] = ("<|eot_id|>",)

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

    def _ids(self) -> tuple[int, int | None, list[int]]:
        """(mask, eos, turn-end ids) from params, else the checkpoint's config/tokenizer, else LLaDA's."""
        p, cfg, tok = self.params, self.model.config, self.tokenizer
        mask = p.mask_token_id if p.mask_token_id is not None else getattr(cfg, "mask_token_id", None)
        mask = mask if mask is not None else _token_id(tok, "<|mdm_mask|>")
        eos = p.eos_token_id if p.eos_token_id is not None else tok.eos_token_id
        eot = [p.eot_token_id] if p.eot_token_id is not None else [i for t in self.turn_end_tokens
                                                                  if (i := _token_id(tok, t)) is not None]
        return (LLADA_MASK_ID if mask is None else int(mask)), (LLADA_EOS_ID if eos is None else int(eos)), eot

    def _setup(self) -> None:
        p, tok = self.params, self.tokenizer
        self.vocab_size = int(getattr(self.model.config, "vocab_size", 126464))
        self.mask_token_id, self.eos_token_id, self.turn_end_ids = self._ids()
        for what, i in (("mask", self.mask_token_id), ("eos", self.eos_token_id)):
            if i is not None and not 0 <= i < self.vocab_size:
                raise ConfigError(f"{self.name}: {what} id {i} is outside the model's vocabulary [0, {self.vocab_size})")
        keep = {self.eos_token_id, *self.turn_end_ids}
        banned = (set(special_token_ids(tok, self.vocab_size)) | set(padded_row_ids(tok, self.vocab_size))) - keep
        self.banned_token_ids = sorted(banned | {self.mask_token_id})
        self.max_length = int(p.max_length or getattr(self.model.config, "max_sequence_length", 4096))
        self.model_id = f"{self.name}:{checkpoint_name(p.path, self.model)}"
        self.sampler_defaults = {"block_length": 32, "remasking": "low_confidence", "temperature": 0.0}

    def _encoder_and_head(self) -> None:
        """LLaDA's head lives inside its base model: the LM head always runs on every position."""
        return None

    def postprocess_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Merge the end-of-turn logit (``<|eot_id|>``) into EOS, in place: (B, L, V) → same.

        LLaDA-Instruct ends its answer with ``<|eot_id|>`` followed by ``<|endoftext|>`` padding; the
        sampler stops at one id, so the end-of-turn probability is moved onto EOS (log-sum-exp).
        """
        return logits if self.eos_token_id is None else merge_into(logits, self.eos_token_id, self.turn_end_ids)

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32 with the 2-D attention mask LLaDA's forward takes (only
        when some position is padding, as ``generate.py`` does); see :meth:`postprocess_logits`."""
        if input_ids.shape[1] > self.max_length:
            raise ConfigError(f"sequence of {input_ids.shape[1]} tokens exceeds the model's maximum of {self.max_length}")
        ids = input_ids.to(self.device)
        kwargs = {}
        if attention_mask is not None and not bool(attention_mask.all()):
            kwargs["attention_mask"] = attention_mask.to(self.device).long()
        return self.postprocess_logits(self.model(ids, **kwargs).logits.float())  # (B, L, V)
