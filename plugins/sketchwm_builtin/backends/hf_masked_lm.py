"""``hf-masked-lm``: any Hugging Face ``AutoModelForMaskedLM`` (BERT, RoBERTa, ModernBERT, ...) as a DLM.

A masked LM trained with a masking objective gives, for each [MASK], a marginal over the
vocabulary: exactly what a masked diffusion sampler needs (the model is time-agnostic, as in
MDLM/LLaDA). Loads only from a local directory; never downloads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, Sequence

import torch
from pydantic import Field

from sketchwm.components import DLMBackend
from sketchwm.components.backend import rows_of
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError, ModelFileError

from .fast_start import DeferredTokenizer, load_tokenizer_and_config, placeholder_ids, quiet_transformers

#: model types that compute position ids from the pad token themselves
_SELF_POSITIONED = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text", "roberta-prelayernorm"}
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str) -> torch.device:
    """"auto" → cuda if available else cpu; otherwise ``torch.device(device)``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def special_token_ids(tokenizer: Any, vocab_size: int) -> list[int]:
    """Ids of special tokens and bracketed placeholders like ``[unused12]`` / ``<extra_id_0>``
    (:func:`placeholder_ids`; read from the facts of a :class:`DeferredTokenizer`, no vocabulary scan)."""
    ids = set(int(i) for i in getattr(tokenizer, "all_special_ids", []) if i is not None)
    known = tokenizer.placeholder_ids if isinstance(tokenizer, DeferredTokenizer) else None
    ids.update(known if known is not None else placeholder_ids(tokenizer.get_vocab()))
    return sorted(i for i in ids if 0 <= i < vocab_size)


def padded_row_ids(tokenizer: Any, vocab_size: int) -> list[int]:
    """Ids in [len(tokenizer), vocab_size): embedding rows a checkpoint pads its vocabulary with
    (LLaDA 126464 vs its tokenizer's ~126349, Dream 152064 vs 151667). They decode to nothing and
    were never trained as targets, so they are banned."""
    return list(range(min(len(tokenizer), vocab_size), vocab_size))


def checkpoint_name(path: str, model: Any) -> str:
    """A readable checkpoint name for ``model_id``: the directory's last component, else the model's
    ``config._name_or_path`` (set by ``from_pretrained``), else its class name (never ``"."``)."""
    for cand in (path, getattr(getattr(model, "config", None), "_name_or_path", "") or ""):
        base = os.path.basename(os.path.normpath(cand)) if cand else ""
        if base and base not in (".", ".."):
            return base
    return type(model).__name__


def apply_chat_template(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text as one user turn through ``tokenizer.apply_chat_template`` (with the generation
    prompt), tokenised without adding special tokens again (the template writes its own BOS)."""
    out = []
    for t in texts:
        s = tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
        out.append(list(tokenizer.encode(s, add_special_tokens=False)))
    return out


class HFBackendParams(StrictModel):
    """Parameters shared by Hugging Face backends.

    Attributes:
        path: local directory of the checkpoint (``from_pretrained``; never downloaded).
        device: "auto", "cpu", "cuda", "cuda:1", ...
        dtype: weight dtype.
        max_length: override of the model's maximum sequence length.
        chat_template: "auto" wraps string prompts in the tokenizer's chat template when it has one
            (instruct checkpoints), "on" requires one, "off" never applies it (base checkpoints whose
            tokenizer ships a template anyway, or prompts already formatted).
    """

    path: str = ""
    device: str = "auto"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    max_length: int | None = Field(None, ge=8)
    chat_template: Literal["auto", "on", "off"] = "auto"


class HFMaskedLMBackend(DLMBackend):
    """Any local Hugging Face masked LM (BERT/RoBERTa/ModernBERT) used as a masked diffusion denoiser.

    Args:
        params: :class:`HFBackendParams` (``path`` required).
        model, tokenizer: already-built objects (tests, in-memory models); then ``path`` is ignored.

    Raises:
        ModelFileError: ``path`` missing or not loadable.
        ConfigError: the tokenizer has no mask token.
    """

    name = "hf-masked-lm"
    Params = HFBackendParams

    def __init__(self, params: Any = None, *, model: Any = None, tokenizer: Any = None):
        self.params = params if isinstance(params, HFBackendParams) else self.parse_params(params)
        self.device = resolve_device(self.params.device)
        self._weights = (self.params.path, getattr(self.params, "dtype", "float32"))  # read by the first use of .model
        if model is None or tokenizer is None:
            model, tokenizer = self._load(self.params.path)
        self._model = model.to(self.device).eval() if model is not None else None
        self.tokenizer = tokenizer
        self._setup()

    @property
    def model(self) -> Any:
        """The ``transformers`` model, its weights read on first use: detection, which needs only the
        tokenizer and the vocabulary size, never loads them.

        Raises:
            ModelFileError: the weights cannot be loaded.
        """
        if self._model is None:
            self._model = self._load_model(*self._weights).to(self.device).eval()
        return self._model

    @model.setter
    def model(self, value: Any) -> None:
        self._model = value

    def _load(self, path: str) -> tuple[Any, Any]:
        """(None, tokenizer) from the checkpoint directory ``path``; the weights wait for :attr:`model`.

        Raises:
            ModelFileError: no such directory, or the tokenizer or configuration cannot be read.
        """
        if not path or not os.path.isdir(path):
            raise ModelFileError(f"{self.name}: model directory not found: {path!r} (params.path must be a local directory)")
        try:
            tok, self._config = load_tokenizer_and_config(path)  # without transformers when it can (fast_start)
        except ModelFileError as exc:
            raise ModelFileError(f"{self.name}: {exc}") from exc.__cause__
        return None, tok

    def _load_model(self, path: str, dtype: str) -> Any:
        """The masked LM's weights from ``path`` in ``dtype`` (see :attr:`model`)."""
        from transformers import AutoModelForMaskedLM

        quiet_transformers()
        try:
            return AutoModelForMaskedLM.from_pretrained(path, dtype=_DTYPES[dtype])
        except Exception as exc:  # noqa: BLE001
            raise ModelFileError(f"{self.name}: cannot load model from {path}: {exc}") from exc

    def _setup(self) -> None:
        tok = self.tokenizer
        cfg = self._model.config if self._model is not None else self._config
        if getattr(tok, "mask_token_id", None) is None:
            raise ConfigError(f"{self.name}: tokenizer has no mask token")
        self.mask_token_id = int(tok.mask_token_id)
        self.vocab_size = int(cfg.vocab_size)
        self.eos_token_id = None  # masked LMs have no end-of-text token: fixed-length generation
        self.banned_token_ids = sorted(set(special_token_ids(tok, self.vocab_size)) | set(padded_row_ids(tok, self.vocab_size)))
        self.max_length = int(self.params.max_length or getattr(cfg, "max_position_embeddings", 512))
        self.model_id = f"{self.name}:{checkpoint_name(self.params.path, self._model)}"
        self.sampler_defaults = {}

    @property
    def uses_chat_template(self) -> bool:
        """True if string prompts go through the tokenizer's chat template (``params.chat_template``).

        Raises:
            ConfigError: ``chat_template="on"`` and the tokenizer has no template.
        """
        has = bool(getattr(self.tokenizer, "chat_template", None))
        mode = getattr(self.params, "chat_template", "auto")
        if mode == "on" and not has:
            raise ConfigError(f"{self.name}: chat_template='on' but the tokenizer has no chat template")
        return has and mode != "off"

    def encode_prompts(self, texts: Sequence[str]) -> list[list[int]]:
        """Prompt strings → id lists: through the chat template for instruct checkpoints (see
        :attr:`uses_chat_template`), else as :meth:`encode`."""
        return apply_chat_template(self.tokenizer, texts) if self.uses_chat_template else self.encode(texts)

    def _position_kwargs(self, attention_mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """``position_ids`` for a left-padded batch: (B, L) int64 counting real tokens from 0 (padding 0).

        Models with absolute position embeddings (BERT) would otherwise give a prompt different
        positions in a batch than alone. Models that derive positions from the pad token themselves
        (RoBERTa family) or take none get nothing.
        """
        if attention_mask is None or bool(attention_mask.all()):
            return {}
        if getattr(self.model.config, "model_type", "") in _SELF_POSITIONED or not self._takes_position_ids:
            return {}
        am = attention_mask.to(self.device).long()
        return {"position_ids": (am.cumsum(-1) - 1).clamp_min(0)}

    @property
    def _takes_position_ids(self) -> bool:
        """Whether the model's forward accepts ``position_ids`` (inspected once)."""
        cached = self.__dict__.get("_takes_pos")
        if cached is None:
            import inspect

            try:
                cached = "position_ids" in inspect.signature(self.model.forward).parameters
            except (TypeError, ValueError):
                cached = False
            self.__dict__["_takes_pos"] = cached
        return cached

    def _encoder_and_head(self) -> tuple[Any, Any] | None:
        """(encoder, LM head) of BERT- and RoBERTa-style masked LMs, or None if unknown."""
        m = self.model
        enc = getattr(m, "base_model", None)
        for head_name in ("cls", "lm_head"):
            head = getattr(m, head_name, None)
            if enc is not None and enc is not m and head is not None:
                return enc, head
        return None

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor:
        """(B, L) int64, index (B, K) → (B, K, V) float32: the LM head runs on the K positions only.

        Raises:
            ConfigError: the sequence is longer than the model supports.
        """
        split = self._encoder_and_head()
        if split is None:
            return super().logits_at(input_ids, attention_mask, index)
        return self._head_rows(split, input_ids, attention_mask)(index)

    def logits_rows(self, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
        """See :meth:`DLMBackend.logits_rows`: the encoder runs once, at the first call, (B, L, H) hidden
        states kept; each call runs the LM head on index (B, K) → (B, K, V) float32 only.

        Raises:
            ConfigError: the sequence is longer than the model supports (at the first call).
        """
        if self.replaces_logits_at(HFMaskedLMBackend):
            return partial(self.logits_at, input_ids, attention_mask)
        split = self._encoder_and_head()
        if split is None:  # the head runs on every position (LLaDA)
            return self.gathered_rows(input_ids, attention_mask)
        return self._head_rows(split, input_ids, attention_mask)

    def _head_rows(self, split: tuple[Any, Any], input_ids: torch.Tensor,
                   attention_mask: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
        """:meth:`logits_rows` of (encoder, LM head) ``split``: the (B, L, H) hidden states once."""
        enc, head = split

        def hidden() -> torch.Tensor:
            if input_ids.shape[1] > self.max_length:
                raise ConfigError(f"sequence of {input_ids.shape[1]} tokens exceeds the model's maximum of "
                                  f"{self.max_length}")
            am = None if attention_mask is None else attention_mask.to(self.device).long()
            return enc(input_ids=input_ids.to(self.device), attention_mask=am,
                       **self._position_kwargs(attention_mask)).last_hidden_state

        return rows_of(hidden, lambda h, index: head(
            torch.gather(h, 1, index.to(self.device)[..., None].expand(-1, -1, h.shape[-1]))).float())

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) int64 → (B, L, V) float32; see :meth:`DLMBackend.logits`.

        With ``positions``, the LM head runs only on those positions (zeros elsewhere).

        Raises:
            ConfigError: the sequence is longer than the model supports.
        """
        if input_ids.shape[1] > self.max_length:
            raise ConfigError(f"sequence of {input_ids.shape[1]} tokens exceeds the model's maximum of {self.max_length}")
        ids = input_ids.to(self.device)
        am = None if attention_mask is None else attention_mask.to(self.device).long()
        split = self._encoder_and_head() if positions is not None else None
        pkw = self._position_kwargs(attention_mask)
        if split is None:
            return self.model(input_ids=ids, attention_mask=am, **pkw).logits.float()
        enc, head = split
        hidden = enc(input_ids=ids, attention_mask=am, **pkw).last_hidden_state  # (B, L, H)
        pos = positions.to(self.device)
        out = torch.zeros(ids.shape[0], ids.shape[1], self.vocab_size, dtype=torch.float32, device=self.device)
        out[pos] = head(hidden[pos]).float()  # (M, V) only where needed
        return out
