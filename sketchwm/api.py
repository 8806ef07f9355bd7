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
from typing import Any, Callable, Sequence

import torch

from .components import DLMBackend, WatermarkScheme
from .config import DEFAULT_SCHEME, ComponentSpec, StrictModel, validate_params
from .context import BuildContext
from .detection import Calibration, DetectionResult, Detector, calibrate as _calibrate
from .engine import GenerationOutput, MaskedDiffusionSampler
from .errors import ConfigError, InputError
from .keys import WatermarkKey

__all__ = ["WatermarkConfig", "Watermarker", "keygen", "generate", "detect", "calibrate", "concat_outputs"]


class WatermarkConfig(StrictModel):
    """What to generate with and what to detect: scheme, backend and sampler settings.

    Attributes:
        scheme: registered scheme name and params (default :data:`sketchwm.config.DEFAULT_SCHEME`,
            ``global-sketch-green``).
        backend: registered backend name and params (default ``default``, the embedded DLM).
        sampler: :class:`sketchwm.engine.SamplerConfig` fields (unset fields use the backend's defaults).
        tokenizer: fingerprint of the tokenizer the watermark was made with; detection with another
            tokenizer raises :class:`TokenizerMismatchError` (None: not checked).
    """

    scheme: ComponentSpec = ComponentSpec(name=DEFAULT_SCHEME)
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
        backend: an already-built :class:`DLMBackend` (overrides ``config.backend``). To bring a loaded
            ``transformers`` model and tokenizer instead, use :meth:`from_model`.
        registry: a :class:`sketchwm.registry.Registry` (default: installed plugins).

    Raises:
        KeyError_: missing or malformed key. ConfigError: bad configuration, or ``backend`` is not a
        DLMBackend. RegistryError: unknown names.
    """

    def __init__(self, key: Any, config: "WatermarkConfig | dict | None" = None, *, backend: DLMBackend | None = None, registry: Any = None):
        from .registry import get_registry

        if backend is not None and not isinstance(backend, DLMBackend):
            raise ConfigError(
                f"backend= takes a sketchwm DLMBackend, got {type(backend).__module__}.{type(backend).__name__}; "
                "for a loaded transformers model use Watermarker.from_model(key, model, tokenizer, kind=...)"
            )
        self.key = WatermarkKey.load(key)
        self.config = validate_params(WatermarkConfig, config, "watermark config")
        self.registry = registry or get_registry()
        # fail fast on unknown names and bad params, before any model is loaded
        self.registry.get("scheme", self.config.scheme.name).parse_params(self.config.scheme.params)
        if backend is None:
            self.registry.get("backend", self.config.backend.name).parse_params(self.config.backend.params)
        elif backend.name in self.registry.names("backend"):  # record what actually generates
            self.config = self.config.model_copy(update={"backend": ComponentSpec(name=backend.name)})
        self._backend = backend
        self._scheme: WatermarkScheme | None = None

    #: ``kind`` aliases of :meth:`from_model` → registered backend names
    MODEL_KINDS = {"masked-lm": "hf-masked-lm", "hf-masked-lm": "hf-masked-lm", "llada": "llada", "dream": "dream",
                   "mdlm": "mdlm", "default": "default"}

    @classmethod
    def from_model(
        cls,
        key: Any,
        model: Any,
        tokenizer: Any,
        kind: str = "masked-lm",
        config: "WatermarkConfig | dict | None" = None,
        *,
        registry: Any = None,
        **backend_params: Any,
    ) -> "Watermarker":
        """A Watermarker over a model and tokenizer the caller already loaded (no path, nothing re-read).

        Same behaviour as the named backend loading the same checkpoint: ``kind`` picks the backend
        class, which wraps the objects (ids, banned tokens, shift, attention format, chat template).

        Args:
            key: as for :class:`Watermarker`.
            model: a ``transformers`` model: ``AutoModelForMaskedLM`` (BERT, RoBERTa, ModernBERT; kind
                "masked-lm"), or a LLaDA / Dream / MDLM model loaded with ``trust_remote_code=True``.
            tokenizer: its tokenizer.
            kind: "masked-lm" (alias "hf-masked-lm"), "llada", "dream", "mdlm", or any registered backend
                name whose constructor accepts ``model=`` and ``tokenizer=``.
            config: scheme and sampler settings (its ``backend`` entry is replaced by ``kind``).
            registry: as for :class:`Watermarker`.
            **backend_params: the backend's params (``device``, ``chat_template``, ids, ...).

        Returns:
            a :class:`Watermarker` whose ``backend.model_id`` names the model (``config._name_or_path``).

        Raises:
            ConfigError: ``model`` or ``tokenizer`` is missing, or bad params. RegistryError: unknown kind.
        """
        from .registry import get_registry

        if model is None or tokenizer is None or not callable(model):
            raise ConfigError("from_model needs a loaded model (callable) and its tokenizer")
        registry = registry or get_registry()
        name = cls.MODEL_KINDS.get(kind, kind)
        backend = registry.build("backend", name, backend_params,
                                 BuildContext(resources={"model": model, "tokenizer": tokenizer}))
        cfg = validate_params(WatermarkConfig, config, "watermark config")
        cfg = cfg.model_copy(update={"backend": ComponentSpec(name=name, params=backend_params)})
        return cls(key, cfg, backend=backend, registry=registry)

    def __repr__(self) -> str:
        return f"Watermarker(key={self.key.fingerprint}, scheme={self.config.scheme.name}, backend={self.config.backend.name})"

    @property
    def backend(self) -> DLMBackend:
        """The DLM backend (loaded on first use)."""
        if self._backend is None:
            spec = self.config.backend
            self._backend = self.registry.build("backend", spec.name, spec.params)
        return self._backend

    @property
    def scheme(self) -> WatermarkScheme:
        """The keyed watermark scheme (built on first use, on the backend's device)."""
        if self._scheme is None:
            spec = self.config.scheme
            # the scheme's key, V, device and tokenizer (a token prior must belong to it) come from the backend
            self._scheme = self.registry.build("scheme", spec.name, spec.params,
                                               BuildContext.for_backend(self.backend, key=self.key))
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
        progress: bool | Callable[[int], None] = False,
        **sampler_overrides: Any,
    ) -> GenerationOutput:
        """Generate one text per prompt (in batches), watermarked unless ``watermark=False``.

        Same seed, key and configuration give identical texts. ``progress``: True shows a tqdm bar
        over texts that moves at every denoising step, with the time left; a callable is called after each denoising step with the texts of the batch (so
        the calls sum to texts × steps).

        Raises:
            InputError: no prompts. ConfigError: bad sampler settings.
        """
        if len(prompts) == 0:
            raise InputError("no prompts given")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        sampler = self.sampler(watermark, **sampler_overrides)
        gen = torch.Generator(device=self.backend.device).manual_seed(int(seed))
        outs = []
        bar = None
        if progress is True:  # texts done, moved on by each denoising step (a batch's share of a text per step)
            from tqdm.auto import tqdm

            bar = tqdm(total=len(prompts), desc="generating" + (" (watermarked)" if watermark else ""),
                       bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total_fmt} texts [{elapsed}<{remaining}]")
            steps = sampler.config.steps
            progress = lambda k: bar.update(k / steps)  # noqa: E731 - k: texts × steps
        try:
            for i in range(0, len(prompts), batch_size):
                batch = list(prompts[i : i + batch_size])
                if callable(progress):
                    outs.append(sampler.generate(batch, gen, progress=lambda k, n=len(batch): progress(k * n)))
                else:
                    outs.append(sampler.generate(batch, gen))
        finally:
            if bar is not None:
                bar.close()
        return concat_outputs(outs)

    def provenance(self, *, watermark: bool = True, seeds: dict[str, Any] | None = None, **sampler_overrides: Any) -> dict[str, Any]:
        """How outputs of this watermarker are made: everything needed to reproduce or detect them.

        Returns:
            ``{"config": {"scheme": {name, params}, "backend": {name, params}, "sampler": {...}},
            "order_steering" (whether the scheme steers the unmasking order at these settings),
            "warnings" (one-line problems of the settings, e.g. a tilting scheme under greedy
            decoding: :func:`sketchwm.engine.greedy_decoding_problem`), "model_id", "tokenizer",
            "key_fingerprint" (HMAC-derived, never the key), "watermarked", "sketchwm_version",
            "seeds": {stage: seed}}``. Scheme params are the full validated params (defaults filled
            in), the sampler the effective settings.
        """
        from . import __version__

        scheme_params = self.scheme.params.model_dump(mode="json") if hasattr(self.scheme.params, "model_dump") \
            else dict(self.config.scheme.params)
        sampler = self.sampler(watermark, **sampler_overrides)
        return {
            "config": {
                "scheme": {"name": self.config.scheme.name, "params": scheme_params},
                "backend": {"name": self.config.backend.name, "params": dict(self.config.backend.params)},
                "sampler": sampler.config.model_dump(mode="json"),
            },
            "order_steering": sampler.steering,
            "warnings": list(sampler.warnings),
            "model_id": getattr(self.backend, "model_id", None),
            "tokenizer": self.backend.tokenizer_fingerprint,
            "key_fingerprint": self.key.fingerprint,
            "watermarked": watermark,
            "sketchwm_version": __version__,
            "seeds": dict(seeds or {}),
        }

    def detector(self, calibration: "Calibration | str | os.PathLike | None" = None, alpha: float = 0.01) -> Detector:
        """A :class:`Detector` for this key and scheme (calibration: object or JSON path)."""
        if calibration is not None and not isinstance(calibration, Calibration):
            calibration = Calibration.load(calibration)
        return Detector(self.scheme, self.backend.tokenizer, self.key.fingerprint, alpha=alpha, calibration=calibration,
                        expected_tokenizer=self.config.tokenizer)

    def detect(self, texts: Sequence[str], calibration: Any = None, alpha: float = 0.01, *, per_item: bool = False,
               progress: bool = False, index_offset: int = 0) -> DetectionResult:
        """Detect the watermark in texts (see :class:`Detector`; ``per_item`` and ``progress`` as in
        :meth:`Detector.detect`; ``index_offset`` shifts the text indices in error messages). The result's
        ``provenance`` is :meth:`detection_provenance`. Tokenisation of the next batch of texts overlaps
        with the scoring of the current one (:meth:`Detector.detect_stream`)."""
        res = self.detector(calibration, alpha).detect(texts, per_item=per_item, progress=progress, index_offset=index_offset)
        res.provenance = self.detection_provenance()
        return res

    def detection_provenance(self) -> dict[str, Any]:
        """What a detection result records about how it was made: the scheme and its validated params,
        the backend and model, the tokenizer fingerprint and the package version."""
        from . import __version__

        params = self.scheme.params.model_dump(mode="json") if hasattr(self.scheme.params, "model_dump") else {}
        return {
            "scheme": {"name": self.config.scheme.name, "params": params},
            "backend": {"name": self.config.backend.name, "model_id": getattr(self.backend, "model_id", None)},
            "tokenizer": self.backend.tokenizer_fingerprint, "sketchwm_version": __version__,
        }

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
            if kwargs.get("skip_invalid"):  # empty texts become empty id lists, skipped by calibrate
                id_lists = det._tokenize_items(list(texts), 0)[0]
            else:
                id_lists = det.tokenize(texts)
        return _calibrate(det, id_lists, model_id or self.backend.model_id, alpha=alpha, source=source, **kwargs)


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
