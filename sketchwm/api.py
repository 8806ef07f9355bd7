"""The Python API: the same verbs as the CLI (keygen, generate, detect, calibrate).

Example::

    from sketchwm import Watermarker, WatermarkKey
    key = WatermarkKey.generate()
    wm = Watermarker(key)                       # global-sketch scheme on the default DLM
    out = wm.generate(["The old house on the hill"], seed=0)
    print(wm.detect(out.texts).to_records())
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch

from .components import DLMBackend, WatermarkScheme
from .config import ComponentSpec, StrictModel, validate_params
from .detection import Calibration, DetectionResult, Detector, calibrate as _calibrate
from .engine import GenerationOutput, MaskedDiffusionSampler
from .errors import InputError
from .keys import WatermarkKey

__all__ = ["WatermarkConfig", "Watermarker", "keygen", "generate", "detect", "calibrate", "concat_outputs", "estimate_token_prior"]


class WatermarkConfig(StrictModel):
    """What to generate with and what to detect: scheme, backend and sampler settings.

    Attributes:
        scheme: registered scheme name and params (default ``global-sketch``).
        backend: registered backend name and params (default ``default``, the embedded DLM).
        sampler: :class:`sketchwm.engine.SamplerConfig` fields (unset fields use the backend's defaults).
        tokenizer: fingerprint of the tokenizer the watermark was made with; detection with another
            tokenizer raises :class:`TokenizerMismatchError` (None: not checked).
    """

    scheme: ComponentSpec = ComponentSpec(name="global-sketch")
    backend: ComponentSpec = ComponentSpec(name="default")
    sampler: dict[str, Any] = {}
    tokenizer: str | None = None


def concat_outputs(outs: Sequence[GenerationOutput]) -> GenerationOutput:
    """Concatenate batch outputs of the same generation length."""
    return GenerationOutput(
        ids=torch.cat([o.ids for o in outs]), lengths=torch.cat([o.lengths for o in outs]),
        texts=[t for o in outs for t in o.texts], prompts=[p for o in outs for p in o.prompts],
    )


class Watermarker:
    """Generate watermarked text and detect it, for one key and one configuration.

    Args:
        key: a :class:`WatermarkKey`, key-file path or hex string (required).
        config: :class:`WatermarkConfig` or dict (validated).
        backend: an already-built backend (overrides ``config.backend``).
        registry: a :class:`sketchwm.registry.Registry` (default: installed plugins).

    Raises:
        KeyError_: missing or malformed key. ConfigError: bad configuration. RegistryError: unknown names.
    """

    def __init__(self, key: Any, config: "WatermarkConfig | dict | None" = None, *, backend: DLMBackend | None = None, registry: Any = None):
        from .registry import get_registry

        self.key = WatermarkKey.load(key)
        self.config = validate_params(WatermarkConfig, config, "watermark config")
        self.registry = registry or get_registry()
        # fail fast on unknown names and bad params, before any model is loaded
        self.registry.get("scheme", self.config.scheme.name).parse_params(self.config.scheme.params)
        self.registry.get("backend", self.config.backend.name).parse_params(self.config.backend.params)
        self._backend = backend
        self._scheme: WatermarkScheme | None = None

    def __repr__(self) -> str:
        return f"Watermarker(key={self.key.fingerprint}, scheme={self.config.scheme.name}, backend={self.config.backend.name})"

    @property
    def backend(self) -> DLMBackend:
        """The DLM backend (loaded on first use)."""
        if self._backend is None:
            spec = self.config.backend
            self._backend = self.registry.create("backend", spec.name, spec.params)
        return self._backend

    @property
    def scheme(self) -> WatermarkScheme:
        """The keyed watermark scheme (built on first use, on the backend's device)."""
        if self._scheme is None:
            spec = self.config.scheme
            cls = self.registry.get("scheme", spec.name)
            names = cls.__init__.__code__.co_varnames
            kwargs = {"registry": self.registry} if "registry" in names else {}
            if "tokenizer_fingerprint" in names:  # the token prior must belong to this tokenizer
                kwargs["tokenizer_fingerprint"] = self.backend.tokenizer_fingerprint
            self._scheme = cls(spec.params, self.key, self.backend.vocab_size, device=self.backend.device, **kwargs)
        return self._scheme

    def sampler(self, watermark: bool = True, **overrides: Any) -> MaskedDiffusionSampler:
        """A sampler with this configuration (``watermark=False`` gives the base model)."""
        cfg = {**self.config.sampler, **overrides}
        merged = {**(self.backend.sampler_defaults or {}), **cfg}
        return MaskedDiffusionSampler(self.backend, merged, self.scheme if watermark else None)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        seed: int = 0,
        watermark: bool = True,
        batch_size: int = 16,
        progress: bool = False,
        **sampler_overrides: Any,
    ) -> GenerationOutput:
        """Generate one text per prompt (in batches), watermarked unless ``watermark=False``.

        Same seed, key and configuration give identical texts.

        Raises:
            InputError: no prompts. ConfigError: bad sampler settings.
        """
        if len(prompts) == 0:
            raise InputError("no prompts given")
        sampler = self.sampler(watermark, **sampler_overrides)
        gen = torch.Generator(device=self.backend.device).manual_seed(int(seed))
        outs = []
        batches = range(0, len(prompts), batch_size)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="generating" + (" (watermarked)" if watermark else ""), unit="batch")
        for i in batches:
            outs.append(sampler.generate(list(prompts[i : i + batch_size]), gen))
        return concat_outputs(outs)

    def detector(self, calibration: "Calibration | str | os.PathLike | None" = None, alpha: float = 0.01) -> Detector:
        """A :class:`Detector` for this key and scheme (calibration: object or JSON path)."""
        if calibration is not None and not isinstance(calibration, Calibration):
            calibration = Calibration.load(calibration)
        return Detector(self.scheme, self.backend.tokenizer, self.key.fingerprint, alpha=alpha, calibration=calibration,
                        expected_tokenizer=self.config.tokenizer)

    def detect(self, texts: Sequence[str], calibration: Any = None, alpha: float = 0.01) -> DetectionResult:
        """Detect the watermark in texts (see :class:`Detector`)."""
        return self.detector(calibration, alpha).detect(texts)

    def detect_ids(self, id_lists: Sequence[Sequence[int]], calibration: Any = None, alpha: float = 0.01) -> DetectionResult:
        """Detect the watermark in token-id lists."""
        return self.detector(calibration, alpha).detect_ids(id_lists)

    def calibrate(
        self,
        texts: Sequence[str] | None = None,
        *,
        id_lists: Sequence[Sequence[int]] | None = None,
        alpha: float = 0.01,
        source: str = "",
        model_id: str | None = None,
        **kwargs: Any,
    ) -> Calibration:
        """Empirical thresholds τ_N from unwatermarked texts (or ids); see :func:`sketchwm.detection.calibrate`."""
        det = self.detector(None, alpha)
        if id_lists is None:
            if texts is None:
                raise InputError("calibrate needs unwatermarked texts or id lists")
            id_lists = det.tokenize(texts)
        return _calibrate(det, id_lists, model_id or self.backend.model_id, alpha=alpha, source=source, **kwargs)


def estimate_token_prior(
    watermarker: "Watermarker", prompts: Sequence[str], path: str | os.PathLike, seed: int = 0, **sampler_overrides: Any
) -> dict[str, Any]:
    """Estimate π_tok from unwatermarked samples of the model and save the counts (paper eq. 4).

    See :mod:`sketchwm.token_prior` (``estimate_from_samples``, ``estimate_from_corpus``).

    Args:
        watermarker: supplies the backend and sampler settings.
        prompts: prompts to sample from (one sample each).
        path: where to write the counts (``.npz`` with provenance, or ``.npy``: V float64 raw counts).

    Returns:
        the ``prior`` spec for :class:`GlobalSketchParams`:
        ``{"source": "file", "path", "sha256", "vocab_size", "tokenizer"}``.
    """
    from .token_prior import estimate_from_samples

    prior = estimate_from_samples(watermarker, prompts, seed=seed, **sampler_overrides)
    prior.save(path)
    return prior.spec(path)


def keygen(path: str | os.PathLike, overwrite: bool = False) -> WatermarkKey:
    """Create a new random key and write it to ``path`` with mode 0600 (refuses to overwrite)."""
    key = WatermarkKey.generate()
    key.save(Path(path), overwrite=overwrite)
    return key


def generate(prompts: Sequence[str], key: Any, config: Any = None, **kwargs: Any) -> GenerationOutput:
    """``Watermarker(key, config).generate(prompts, **kwargs)``."""
    return Watermarker(key, config).generate(prompts, **kwargs)


def detect(texts: Sequence[str], key: Any, config: Any = None, calibration: Any = None, alpha: float = 0.01) -> DetectionResult:
    """``Watermarker(key, config).detect(texts, calibration, alpha)``."""
    return Watermarker(key, config).detect(texts, calibration, alpha)


def calibrate(texts: Sequence[str], key: Any, config: Any = None, alpha: float = 0.01, **kwargs: Any) -> Calibration:
    """``Watermarker(key, config).calibrate(texts, alpha=alpha)``."""
    return Watermarker(key, config).calibrate(texts, alpha=alpha, **kwargs)
