"""Detection: typed, batched results, analytic and calibrated thresholds (seed paper §4.3, Alg. 2).

A :class:`Detector` wraps a :class:`WatermarkScheme` and a tokenizer. It tokenises texts (or takes
ids), checks them (empty, too short, out of vocabulary, wrong tokenizer), calls the scheme's
``score_ids`` and compares the score with a threshold:

* **analytic** τ_α — the scheme's key-randomised bound (eq. 19 for the penalised score), or
  ``p_value <= α`` for schemes without a closed-form threshold;
* **calibrated** τ_N — the empirical (1−α)-quantile of the score on unwatermarked texts of the same
  length bin (§4.3), from a :class:`Calibration` file written by :func:`calibrate`.

The quantile is the conformal order statistic ⌈(n+1)(1−α)⌉ of n null scores, so the false-positive
rate on exchangeable null texts is <= α (:func:`sketchwm.stats.conformal_quantile`; every statistic
lives in :mod:`sketchwm.stats`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from pydantic import Field

from . import __version__
from .batching import TextEncoder, flatten_ids, length_groups, pad_flat, pad_ids, prefetch
from .components import WatermarkScheme, ids_summary, tokenizer_fingerprint
from .config import StrictModel, config_hash
from .errors import CalibrationError, InputError, TokenizerMismatchError
from .stats import check_alpha, conformal_min_size, conformal_quantile

__all__ = ["DetectionResult", "Detector", "scheme_analytic_threshold", "Calibration", "LengthBin", "calibrate", "DEFAULT_BIN_EDGES",
           "pad_ids"]

DEFAULT_BIN_EDGES = (16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 1 << 30)
CALIBRATION_VERSION = 1


@dataclass
class DetectionResult:
    """Detection of a batch of B texts.

    Attributes:
        score: (B,) float64, the scheme's statistic (S_k of eq. 2 for ``global-sketch``).
        z: (B,) float64, standardised statistic.
        p_value: (B,) float64, p-value under the scheme's null (method in ``p_value_method``).
        threshold: (B,) float64, threshold applied to ``score`` (per length bin when calibrated).
        is_watermarked: (B,) bool, ``score >= threshold``.
        n_tokens: (B,) int64, tokens scored.
        threshold_source: ``"max(calibrated, analytic)"``, ``"calibrated"`` (schemes without a
            closed-form threshold), ``"analytic"``, or ``"p-value"`` (no closed form, no calibration:
            the decision is ``p_value <= alpha``); see :meth:`Detector.decide`.
        alpha: target false-positive rate.
        key_fingerprint: fingerprint of the key (never the key).
        scheme: scheme name.
        p_value_method: how ``p_value`` was computed.
    """

    score: torch.Tensor
    z: torch.Tensor
    p_value: torch.Tensor
    threshold: torch.Tensor
    is_watermarked: torch.Tensor
    n_tokens: torch.Tensor
    threshold_source: str
    alpha: float
    key_fingerprint: str
    scheme: str
    p_value_method: str
    errors: list[str | None] | None = None
    tau_analytic: torch.Tensor | None = None
    tau_calibrated: torch.Tensor | None = None
    provenance: dict[str, Any] | None = None

    def __len__(self) -> int:
        return int(self.score.shape[0])

    @property
    def ok(self) -> torch.Tensor:
        """(B,) bool: True where the text was scored (False: see ``errors``)."""
        if self.errors is None:
            return torch.ones(len(self), dtype=torch.bool)
        return torch.tensor([e is None for e in self.errors], dtype=torch.bool)

    def explain(self, i: int) -> dict[str, Any]:
        """Which rule decided text ``i`` and, when score, z and p-value seem to disagree, why.

        The one rule (:meth:`Detector.decide`) is ``score >= threshold`` with threshold =
        max(τ_N, τ_α) (or ``p_value <= alpha`` for a scheme with neither). The p-value and z are
        reported alongside; they can point the other way when the calibrated τ_N is stricter than
        the analytic τ_α (the model's null scores are wider than the analytic null), when the score
        carries a norm penalty (paper eq. 18-19) that z does not, or when the p-value comes from a
        normal approximation.

        Returns:
            ``{"decided_by": ..., "rule": ..., "explanation": str | None}``.
        """
        thr = float(self.threshold[i])
        if self.threshold_source == "p-value":
            return {"decided_by": "p-value", "rule": f"p_value <= alpha ({self.alpha:g}); the scheme has no closed-form "
                    "threshold and no calibration was given", "explanation": None}
        ta = None if self.tau_analytic is None else float(self.tau_analytic[i])
        tc = None if self.tau_calibrated is None else float(self.tau_calibrated[i])
        if tc is not None and (ta is None or tc >= ta):
            by = "calibrated tau_N"
        else:
            by = "analytic tau_alpha"
        rule = f"score >= threshold = max(tau_N, tau_alpha) = {thr:.4g}" if (ta is not None and tc is not None) \
            else f"score >= threshold ({by}) = {thr:.4g}"
        s, p, z, w = float(self.score[i]), float(self.p_value[i]), float(self.z[i]), bool(self.is_watermarked[i])
        why = None
        if (p <= self.alpha) != w:
            parts = [f"p = {p:.3g} {'<=' if p <= self.alpha else '>'} alpha = {self.alpha:g} and z = {z:.3g}, but the "
                     f"decision is the score rule: score {s:.4g} {'>=' if w else '<'} {thr:.4g} ({by})"]
            if by == "calibrated tau_N":
                parts.append("the calibrated threshold, from this model's unwatermarked texts, is stricter than the "
                             "analytic null the p-value assumes")
            if "normal" in self.p_value_method.lower() or "phi" in self.p_value_method.lower():
                parts.append(f"the p-value is a normal approximation ({self.p_value_method})")
            if abs(s - z) > 1e-9 * max(1.0, abs(z)):
                parts.append("the score is not z: it includes the scheme's norm penalty (paper eq. 18), which z and "
                             "the p-value leave out")
            why = "; ".join(parts)
        return {"decided_by": by, "rule": rule, "explanation": why}

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per text.

        Every record has ``status`` (``"ok"`` or ``"error"``); an unscored text has ``error`` (the
        reason) and null statistics. Scored texts carry ``decided_by``/``rule``/``explanation``
        (:meth:`explain`). ``provenance`` (when set) is copied into each record.
        """
        out = []
        ok = self.ok
        for i in range(len(self)):
            base = {"status": "ok" if ok[i] else "error", "threshold_source": self.threshold_source, "alpha": self.alpha,
                    "key_fingerprint": self.key_fingerprint, "scheme": self.scheme, "p_value_method": self.p_value_method}
            if ok[i]:
                rec = {"score": float(self.score[i]), "z": float(self.z[i]), "p_value": float(self.p_value[i]),
                       "threshold": float(self.threshold[i]), "is_watermarked": bool(self.is_watermarked[i]),
                       "n_tokens": int(self.n_tokens[i]), **base, **self.explain(i)}
            else:
                rec = {"score": None, "z": None, "p_value": None, "threshold": None, "is_watermarked": None,
                       "n_tokens": int(self.n_tokens[i]), **base, "error": self.errors[i]}
            if self.provenance:
                rec["provenance"] = self.provenance
            out.append(rec)
        return out

    @classmethod
    def concat(cls, parts: "Sequence[DetectionResult]") -> "DetectionResult":
        """The results of consecutive batches as one: (B_1 + ... + B_k,) fields, in order.

        The run-level fields (scheme, key, α, threshold source, provenance) are those of the first
        part; ``p_value_method`` the first non-empty one; ``errors`` is kept when any part has it.

        Raises:
            ValueError: no parts.
        """
        if not parts:
            raise ValueError("no detection results to concatenate")
        if len(parts) == 1:
            return parts[0]
        first = parts[0]

        def cat(name: str) -> torch.Tensor | None:
            vals = [getattr(p, name) for p in parts]
            return None if any(v is None for v in vals) else torch.cat(vals)

        errors = None
        if any(p.errors is not None for p in parts):
            errors = [e for p in parts for e in (p.errors if p.errors is not None else [None] * len(p))]
        return cls(
            score=cat("score"), z=cat("z"), p_value=cat("p_value"), threshold=cat("threshold"),
            is_watermarked=cat("is_watermarked"), n_tokens=cat("n_tokens"), threshold_source=first.threshold_source,
            alpha=first.alpha, key_fingerprint=first.key_fingerprint, scheme=first.scheme,
            p_value_method=next((p.p_value_method for p in parts if p.p_value_method), ""), errors=errors,
            tau_analytic=cat("tau_analytic"), tau_calibrated=cat("tau_calibrated"), provenance=first.provenance,
        )


class LengthBin(StrictModel):
    """A calibrated threshold for texts with lo <= n_tokens < hi, from n null scores."""

    lo: int = Field(ge=0)
    hi: int = Field(gt=0)
    n: int = Field(ge=1)
    tau: float


class Calibration(StrictModel):
    """Empirical thresholds τ_N per length bin, tied to a key fingerprint, scheme config and model.

    Attributes:
        version: file format version.
        key_fingerprint: the key's fingerprint.
        scheme: scheme name; scheme_config_hash: hash of its params.
        model_id: the backend's identifier (or "human" for human-text calibration).
        tokenizer: tokenizer fingerprint.
        alpha: target false-positive rate.
        source: description of the null texts (e.g. "model samples", "human passages").
        token_prior: the fingerprint of the token prior the scheme resolved (16 hex of its SHA-256,
            or "uniform"; "" for schemes without one and for files written before it was recorded).
        bins: thresholds per length bin.
        n_skipped: null texts left out because they could not be scored (too short, empty).
        provenance: how the calibration was made (scheme params, backend, sampler, seeds).
        sketchwm_version, created: provenance.
    """

    version: int = CALIBRATION_VERSION
    key_fingerprint: str
    scheme: str
    scheme_config_hash: str
    model_id: str
    tokenizer: str
    alpha: float = Field(gt=0, lt=1)
    source: str = ""
    token_prior: str = ""
    bins: list[LengthBin]
    n_skipped: int = Field(0, ge=0)
    provenance: dict[str, Any] = Field(default_factory=dict)
    sketchwm_version: str = __version__
    created: str = ""

    def threshold_for(self, n_tokens: torch.Tensor) -> torch.Tensor:
        """τ for each length: (B,) int64 → (B,) float64; lengths outside every bin use the nearest bin.

        Raises:
            CalibrationError: the calibration has no bins.
        """
        if not self.bins:
            raise CalibrationError("calibration has no length bins")
        los = torch.tensor([b.lo for b in self.bins], dtype=torch.long)
        his = torch.tensor([b.hi for b in self.bins], dtype=torch.long)
        taus = torch.tensor([b.tau for b in self.bins], dtype=torch.float64)
        n = n_tokens.long().cpu()[:, None]
        inside = (n >= los[None]) & (n < his[None])  # (B, nbins)
        mid = (los + his).double() / 2
        nearest = (n.double() - mid[None]).abs().argmin(1)
        idx = torch.where(inside.any(1), inside.float().argmax(1), nearest)
        return taus[idx]

    def save(self, path: str | os.PathLike) -> Path:
        """Write JSON atomically (temp file + rename), never leaving a half-written file."""
        from .io import write_text_atomic

        return write_text_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Calibration":
        """Read a calibration file.

        Raises:
            CalibrationError: missing, not JSON, wrong version or fields.
        """
        p = Path(path)
        if not p.exists():
            raise CalibrationError(f"calibration file not found: {p}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise CalibrationError(f"calibration file {p} is not valid JSON: {exc}") from None
        if data.get("version") != CALIBRATION_VERSION:
            raise CalibrationError(f"calibration file {p} has version {data.get('version')}, expected {CALIBRATION_VERSION}")
        try:
            return cls.model_validate(data)
        except Exception as exc:  # noqa: BLE001
            raise CalibrationError(f"malformed calibration file {p}: {exc}") from None

    def check_matches(self, key_fingerprint: str, scheme: WatermarkScheme, tokenizer_fp: str) -> None:
        """Raise :class:`CalibrationError` if this calibration belongs to another key, scheme, tokenizer or token prior."""
        if self.key_fingerprint != key_fingerprint:
            raise CalibrationError(
                f"calibration was made for key {self.key_fingerprint}, not for key {key_fingerprint}"
            )
        if self.scheme != scheme.name or self.scheme_config_hash != config_hash(scheme.params):
            raise CalibrationError(f"calibration was made for another scheme configuration ({self.scheme}/{self.scheme_config_hash})")
        if self.tokenizer != tokenizer_fp:
            raise CalibrationError("calibration was made with a different tokenizer")
        prior = getattr(scheme, "prior_fingerprint", "")
        if self.token_prior and prior and self.token_prior != prior:
            raise CalibrationError(f"calibration was made with token prior {self.token_prior}, the scheme uses token prior {prior}")


def scheme_analytic_threshold(scheme: WatermarkScheme, alpha: float, n_tokens: int) -> float | None:
    """The scheme's analytic τ_α for texts of ``n_tokens`` tokens, or None when it has no closed form
    (its ``analytic_threshold`` raises NotImplementedError).

    Raises:
        InputError: alpha outside (0, 1).
    """
    check_alpha(alpha)
    try:
        return float(scheme.analytic_threshold(alpha, n_tokens))
    except NotImplementedError:
        return None


_POOL: list[Any] = []


def _done(value: Any) -> Any:
    """A finished future holding ``value``."""
    from concurrent.futures import Future

    f: Future = Future()
    f.set_result(value)
    return f


def _score_pool() -> Any:
    """One worker thread that scores while the caller reads the next piece of ids (created on first use)."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="sketchwm-score"))
    return _POOL[0]


class Detector:
    """Detect a scheme's watermark in texts or token ids.

    Args:
        scheme: the keyed :class:`WatermarkScheme`.
        tokenizer: the generating model's tokenizer.
        key_fingerprint: fingerprint of the scheme's key (stored in results).
        alpha: target false-positive rate for decisions.
        calibration: a :class:`Calibration` (τ_N per length bin) or None for the analytic threshold.
        expected_tokenizer: tokenizer fingerprint recorded in the watermark configuration, if any.

    Raises:
        TokenizerMismatchError: ``tokenizer`` differs from ``expected_tokenizer``.
        CalibrationError: the calibration belongs to another key/scheme/tokenizer.
    """

    def __init__(
        self,
        scheme: WatermarkScheme,
        tokenizer: Any,
        key_fingerprint: str,
        alpha: float = 0.01,
        calibration: Calibration | None = None,
        expected_tokenizer: str | None = None,
    ):
        alpha = check_alpha(alpha)
        self.scheme, self.tokenizer, self.alpha = scheme, tokenizer, alpha
        self.key_fingerprint = key_fingerprint
        self.tokenizer_fp = tokenizer_fingerprint(tokenizer)
        if expected_tokenizer and expected_tokenizer != self.tokenizer_fp:
            raise TokenizerMismatchError(
                f"tokenizer {self.tokenizer_fp} does not match the watermark configuration's tokenizer {expected_tokenizer}"
            )
        if calibration is not None:
            calibration.check_matches(key_fingerprint, scheme, self.tokenizer_fp)
        self.calibration = calibration

    @property
    def encoder(self) -> TextEncoder:
        """The :class:`sketchwm.batching.TextEncoder` of this detector's tokenizer (built on first use)."""
        enc = self.__dict__.get("_encoder")
        if enc is None:
            enc = self._encoder = TextEncoder(self.tokenizer)
        return enc

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts → id lists (no special tokens); a fast Hugging Face tokenizer encodes the batch in one
        parallel Rust call, a text longer than 65,536 characters window by window in bounded memory
        (:class:`sketchwm.batching.TextEncoder`).

        Raises:
            InputError: an empty text (names its index).
        """
        if isinstance(texts, str):
            raise InputError("detect expects a list of texts, got a single string")
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise InputError(f"text {i} is empty")
        if not texts:
            return []
        return self.encoder.encode(texts)

    def _tokenize_items(self, texts: Sequence[Any], index_offset: int,
                        errors: "Sequence[str | None] | None" = None) -> tuple[list[list[int]], list[str | None]]:
        """Id lists and per-text errors of a batch: a text that is not a non-empty string (or already
        has an error in ``errors``) gets ``[]`` and its reason; the rest are encoded in one call."""
        errs: list[str | None] = list(errors) if errors is not None else [None] * len(texts)
        good = []
        for i, t in enumerate(texts):
            if errs[i] is None and not (isinstance(t, str) and t.strip()):
                errs[i] = f"text {i + index_offset} is empty"
            if errs[i] is None:
                good.append(i)
        if len(good) == len(texts):
            return self.encoder.encode(texts), errs
        lists: list[list[int]] = [[] for _ in texts]
        for i, ids in zip(good, self.encoder.encode([texts[i] for i in good]) if good else []):
            lists[i] = ids
        return lists, errs

    def decide(
        self, score: torch.Tensor, p_value: torch.Tensor, n_tokens: torch.Tensor,
        thresholds: "tuple[torch.Tensor | None, torch.Tensor | None] | None" = None,
    ) -> tuple[torch.Tensor, str, torch.Tensor]:
        """The one decision rule of sketchwm (``detect``, ``demo``, the benchmarks and the baselines).

        A text is flagged iff its score passes every test the detector holds at level α:

        * the scheme's **analytic** threshold τ_α (for ``global-sketch`` with the background null this
          is exactly p ≤ α; for the baselines ``score = −log10 p``, so again p ≤ α; for the paper's
          key-randomised penalised score, eq. 19);
        * and, when a calibration is given, the **calibrated** τ_N of the text's length bin (the
          conformal (1 − α)-quantile of the score on unwatermarked samples of the model).

        So threshold = max(τ_N, τ_α). A scheme without a closed-form τ_α (KTH, whose permutation
        p-value is resolution-limited) uses τ_N when calibrated, else p ≤ α.

        Args:
            score, p_value: (B,) float64; n_tokens: (B,) int64 lengths (for the length bins).
            thresholds: :meth:`thresholds` of ``n_tokens`` if already computed.

        Returns:
            threshold (B,) float64 (NaN when the decision is p ≤ α), its source, is_watermarked (B,) bool.
        """
        analytic, calibrated = thresholds if thresholds is not None else self.thresholds(n_tokens)
        if self.calibration is not None:
            thr = calibrated
            source = "calibrated"
            if analytic is not None:
                source = "max(calibrated, analytic)"
                thr = torch.maximum(thr, analytic)
            return thr, source, score >= thr
        if analytic is not None:
            return analytic, "analytic", score >= analytic
        return torch.full_like(score, float("nan")), "p-value", p_value <= self.alpha

    def thresholds(self, n_tokens: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The two thresholds of :meth:`decide` for lengths (B,) int64: analytic τ_α and calibrated τ_N,
        each (B,) float64 or None when the scheme has no closed form / no calibration was given."""
        analytic = self._analytic(n_tokens)
        calibrated = self.calibration.threshold_for(n_tokens) if self.calibration is not None else None
        return analytic, calibrated

    def _analytic(self, n_tokens: torch.Tensor) -> torch.Tensor | None:
        """τ_α per text, (B,) float64, evaluated once per distinct length; None without a closed form."""
        lengths, inverse = np.unique(n_tokens.long().cpu().numpy(), return_inverse=True)
        per_len = [scheme_analytic_threshold(self.scheme, self.alpha, int(k)) for k in lengths.tolist()]
        if any(t is None for t in per_len):
            return None
        return torch.from_numpy(np.array(per_len, dtype=np.float64)[inverse.reshape(-1)])

    def detect(self, texts: Sequence[str], *, per_item: bool = False, progress: bool = False,
               index_offset: int = 0, batch: int = 2048) -> DetectionResult:
        """Detect in texts (see :meth:`detect_ids`), tokenising the next ``batch`` texts in a background
        thread while the current ones are scored (:meth:`detect_stream`).

        Args:
            per_item: False raises on the first text that cannot be scored; True scores the others and
                records the reason in ``DetectionResult.errors`` (batch use: one result per text).
            progress: a tqdm bar counting texts (on stderr).
            index_offset: added to the text indices named in error messages (a chunk of a stream).
            batch: texts per tokenisation call.

        Raises:
            InputError: a single string instead of a list; without ``per_item``, a text that cannot be
                scored.
        """
        if isinstance(texts, str):
            raise InputError("detect expects a list of texts, got a single string")
        if len(texts) == 0:
            raise InputError("no texts to detect")
        if not per_item:
            for i, t in enumerate(texts):
                if not isinstance(t, str) or not t.strip():
                    raise InputError(f"text {i + index_offset} is empty")
        parts = [texts[i : i + batch] for i in range(0, len(texts), batch)]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="detecting", unit="text")
        try:
            out = []
            for res in self.detect_stream(parts, per_item=per_item, index_offset=index_offset):
                out.append(res)
                if bar is not None:
                    bar.update(len(res))
        finally:
            if bar is not None:
                bar.close()
        return DetectionResult.concat(out)

    def detect_stream(self, batches: "Iterable[Sequence[Any]]", *, per_item: bool = True, index_offset: int = 0,
                      errors: "Iterable[Sequence[str | None] | None] | None" = None) -> Iterator[DetectionResult]:
        """Detect batch after batch of texts, tokenising batch k+1 in a background thread while batch k
        is scored (the fast tokenizer releases the GIL), one :class:`DetectionResult` per batch.

        Args:
            batches: an iterable of text lists (read lazily, one ahead of tokenisation).
            per_item: as for :meth:`detect`; an item that is not a non-empty string is an error.
            index_offset: index of the first text, for error messages (counted on across batches).
            errors: per batch, reasons known before tokenisation (e.g. a record without a text), or
                None; such texts are not tokenised and are reported with that reason.

        Raises:
            InputError: without ``per_item``, the first text that cannot be scored.
        """
        errs_iter = iter(errors) if errors is not None else itertools.repeat(None)

        def tokenized() -> Iterator[tuple[int, list[list[int]], list[str | None]]]:
            off = index_offset
            for texts, errs in zip(batches, errs_iter):
                lists, errs = self._tokenize_items(texts, off, errs)
                yield off, lists, errs
                off += len(texts)

        for off, lists, errs in prefetch(tokenized(), depth=2):
            yield self.detect_ids(lists, per_item=per_item, index_offset=off, _errors=errs)

    def check_ids(self, i: int, ids: Sequence[int]) -> str | None:
        """Why text ``i`` (an id list) cannot be scored, or None if it can."""
        V = self.scheme.vocab_size
        if len(ids) == 0:
            return f"text {i} is empty"
        if len(ids) < self.scheme.min_tokens:
            return f"text {i} has {len(ids)} tokens; at least {self.scheme.min_tokens} are needed for detection"
        lo, hi = min(ids), max(ids)
        if lo < 0 or hi >= V:
            return f"text {i} has token id {hi if hi >= V else lo} outside the vocabulary [0, {V})"
        return None

    def check_flat(self, flat: np.ndarray, lengths: np.ndarray, index_offset: int = 0) -> list[str | None] | None:
        """:meth:`check_ids` of every text of a flat concatenation, vectorised: None when all can be
        scored, else one reason (or None) per text.

        Args:
            flat: (T,) int64 ids; lengths: (B,) int64 (see :func:`sketchwm.batching.flatten_ids`).
        """
        V, m = self.scheme.vocab_size, self.scheme.min_tokens
        B = len(lengths)
        lo = np.zeros(B, np.int64)
        hi = np.zeros(B, np.int64)
        nonempty = np.flatnonzero(lengths > 0)
        if len(nonempty):  # per-text min and max over consecutive segments of flat
            starts = (np.cumsum(lengths) - lengths)[nonempty]
            lo[nonempty] = np.minimum.reduceat(flat, starts)
            hi[nonempty] = np.maximum.reduceat(flat, starts)
        bad = (lengths < m) | (lengths == 0) | (lo < 0) | (hi >= V)  # (B,) bool
        if not bad.any():
            return None
        errors: list[str | None] = [None] * B
        for i in np.flatnonzero(bad).tolist():  # the bad texts only
            n, j = int(lengths[i]), i + index_offset
            if n == 0:
                errors[i] = f"text {j} is empty"
            elif n < m:
                errors[i] = f"text {j} has {n} tokens; at least {m} are needed for detection"
            else:
                errors[i] = f"text {j} has token id {int(hi[i]) if hi[i] >= V else int(lo[i])} outside the vocabulary [0, {V})"
        return errors

    def detect_ids(
        self, id_lists: "Sequence[Sequence[int]] | torch.Tensor", *, per_item: bool = False, progress: bool = False,
        chunk: int = 1024, index_offset: int = 0, _errors: list[str | None] | None = None,
    ) -> DetectionResult:
        """Detect in token-id lists.

        The lists are concatenated into one flat array (one C-level pass, no per-text tensors), checked
        vectorised, sorted by length and cut into groups of at most ``chunk`` texts and 2^21 padded
        cells, each padded by index arithmetic and scored in one vectorised call
        (:mod:`sketchwm.batching`).

        Args:
            id_lists: B lists (or arrays) of token ids; a (B, N) int64 tensor (every entry a token)
                goes to :meth:`detect_batch`.
            per_item: see :meth:`detect`; unscored texts get NaN statistics, ``is_watermarked`` False
                and their reason in ``errors``.
            progress: a tqdm bar counting texts.
            chunk: at most this many texts per vectorised scoring call (bounds memory).
            index_offset: added to the text indices named in error messages.

        Raises:
            InputError: no texts; ids that are not integers; without ``per_item``, an empty or
                too-short text (fewer than ``scheme.min_tokens`` tokens) or ids outside [0, V).
        """
        if torch.is_tensor(id_lists):  # a pre-tokenised (B, N) batch, every entry a token
            return self.detect_batch(id_lists)
        B = len(id_lists)
        if B == 0:
            raise InputError("no texts to detect")
        errors: list[str | None] = list(_errors) if _errors is not None else [None] * B
        score = torch.full((B,), float("nan"), dtype=torch.float64)
        z, p = score.clone(), score.clone()
        lengths = np.zeros(B, np.int64)
        n = torch.zeros(B, dtype=torch.long)
        ok = np.ones(B, dtype=bool)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=B, desc="detecting", unit="text")
        # pieces of the input in order: piece k+1 is read into an int64 array (holding the GIL) while
        # piece k is scored in a worker thread (numpy and torch release the GIL)
        step = max(chunk, -(-B // 4))
        futures = []
        try:
            for a in range(0, B, step):
                b = min(B, a + step)
                flat, lens = flatten_ids(id_lists[a:b])  # (T,), (b - a,)
                lengths[a:b] = lens
                n[a:b] = torch.from_numpy(lens)
                found = self.check_flat(flat, lens, index_offset + a)
                if found is not None:
                    errors[a:b] = [e if e is not None else f for e, f in zip(errors[a:b], found)]
                if found is not None or _errors is not None:
                    ok[a:b] = [e is None for e in errors[a:b]]
                if not per_item and not ok[a:b].all():
                    raise InputError(next(e for e in errors[a:b] if e is not None))
                good = np.flatnonzero(ok[a:b])  # indices within the piece
                if b - a == B:  # one piece: nothing to overlap, score here
                    futures.append(_done(self._score_piece(flat, lens, good, a, chunk, score, z, p, n)))
                else:
                    futures.append(_score_pool().submit(self._score_piece, flat, lens, good, a, chunk, score, z, p, n))
        finally:
            done = [f.result() for f in futures]  # scoring errors surface here
        method = next((m for m in reversed(done) if m), "")
        if bar is not None:
            bar.update(B)
            bar.close()
        lengths_t = torch.from_numpy(lengths)
        analytic, calibrated = self.thresholds(lengths_t)
        thr, source, decide = self.decide(score, p, lengths_t, (analytic, calibrated))
        decide = decide & torch.from_numpy(ok)
        return DetectionResult(
            score=score, z=z, p_value=p, threshold=thr, is_watermarked=decide,
            n_tokens=n, threshold_source=source, alpha=self.alpha, key_fingerprint=self.key_fingerprint,
            scheme=self.scheme.name, p_value_method=method, errors=errors if per_item else None,
            tau_analytic=analytic, tau_calibrated=calibrated,
        )

    def _score_piece(self, flat: np.ndarray, lengths: np.ndarray, good: np.ndarray, start: int, chunk: int,
                     score: torch.Tensor, z: torch.Tensor, p: torch.Tensor, n: torch.Tensor) -> str:
        """Score texts ``good`` of a flat piece (lengths (b,)) in length-sorted groups; write their
        statistics at ``start + index`` of the (B,) outputs; return the p-value method ("" if none)."""
        method = ""
        offsets = np.cumsum(lengths) - lengths
        for g in length_groups(lengths[good], max_texts=chunk):
            sel = good[g]  # (b,) text indices in the piece, similar lengths
            ids, valid = pad_flat(flat, lengths, sel, offsets)  # (b, N) int64, (b, N) bool
            s = self.scheme.score_ids(ids, valid)
            idx = torch.from_numpy(sel + start)
            score[idx], z[idx], p[idx] = s.score.cpu().double(), s.z.cpu().double(), s.p_value.cpu().double()
            n[idx] = s.n_scored.cpu().long()
            method = s.p_value_method
        return method

    def detect_batch(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> DetectionResult:
        """Detect in a padded batch: ids (B, N) int64, valid (B, N) bool (None: all valid).

        Everything is vectorised over the batch (checks, scores, p-values, thresholds, decisions).

        Raises:
            InputError: no texts, a wrongly shaped batch, an empty or too-short text (names the first
                such index), ids outside [0, V) (names the text).
        """
        if ids.dim() != 2 or ids.shape[0] == 0:
            raise InputError(f"expected a non-empty (B, N) batch of token ids, got shape {tuple(ids.shape)}")
        if ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise InputError(f"token ids must be integers, got {ids.dtype}")
        ids = ids.long()
        valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid.to(ids.device, torch.bool)
        if valid.shape != ids.shape:
            raise InputError(f"valid has shape {tuple(valid.shape)} but ids have {tuple(ids.shape)}")
        lengths, lo, hi = ids_summary(ids, valid)  # (B,) int64, valid id range
        short = lengths < self.scheme.min_tokens
        if bool(short.any()):
            i = int(short.nonzero()[0, 0])
            if int(lengths[i]) == 0:
                raise InputError(f"text {i} is empty")
            raise InputError(f"text {i} has {int(lengths[i])} tokens; at least {self.scheme.min_tokens} are needed for detection")
        V = self.scheme.vocab_size
        if lo < 0 or hi >= V:  # name the first offending text
            bad = valid & ((ids < 0) | (ids >= V))
            i, j = (int(t) for t in bad.nonzero()[0])
            raise InputError(f"text {i} has token id {int(ids[i, j])} outside the vocabulary [0, {V})")
        s = self.scheme.score_ids(ids, valid)
        n = s.n_scored.cpu()
        analytic, calibrated = self.thresholds(lengths.cpu())
        thr, source, decide = self.decide(s.score.cpu(), s.p_value.cpu(), lengths.cpu(), (analytic, calibrated))
        return DetectionResult(
            score=s.score.cpu(), z=s.z.cpu(), p_value=s.p_value.cpu(), threshold=thr, is_watermarked=decide,
            n_tokens=n, threshold_source=source, alpha=self.alpha, key_fingerprint=self.key_fingerprint,
            scheme=self.scheme.name, p_value_method=s.p_value_method, tau_analytic=analytic, tau_calibrated=calibrated,
        )


def adaptive_bins(lengths: torch.Tensor, grid: Sequence[int], min_per_bin: int) -> list[tuple[int, int]]:
    """Merge consecutive bins of ``grid`` until each holds >= ``min_per_bin`` of ``lengths``.

    Returns a list of (lo, hi) covering [0, ∞) (the first bin starts at 0, the last ends at 2**30).
    """
    edges = sorted(set([0, *grid, 1 << 30]))
    bins: list[tuple[int, int]] = []
    lo = edges[0]
    for hi in edges[1:]:
        if int(((lengths >= lo) & (lengths < hi)).sum()) >= min_per_bin:
            bins.append((lo, hi))
            lo = hi
    if not bins:
        return [(0, 1 << 30)]
    if lo < (1 << 30):  # leftover tail joins the last bin
        bins[-1] = (bins[-1][0], 1 << 30)
    bins[0] = (0, bins[0][1])
    return bins


def calibrate(
    detector: Detector,
    id_lists: Sequence[Sequence[int]],
    model_id: str,
    alpha: float = 0.01,
    bin_edges: Sequence[int] = DEFAULT_BIN_EDGES,
    source: str = "",
    min_per_bin: int | None = None,
    skip_invalid: bool = False,
    provenance: dict[str, Any] | None = None,
) -> Calibration:
    """Empirical τ_N per length bin from unwatermarked texts (§4.3).

    Bins of ``bin_edges`` are merged until each holds at least ``min_per_bin`` texts (default
    ⌈2/α⌉, e.g. 200 at α = 1%), so every threshold is a finite conformal quantile; the bins cover all
    lengths (lengths outside the calibrated range use the first or last bin).

    Args:
        detector: a detector (its scheme and key define the score).
        id_lists: null texts as token-id lists.
        model_id: identifier of the model (or "human").
        alpha: target false-positive rate.
        bin_edges: candidate bin edges (increasing).
        source: description of the null texts.
        min_per_bin: minimum texts per bin.
        skip_invalid: leave out texts that cannot be scored (counted in ``n_skipped``) instead of
            raising :class:`InputError`.
        provenance: stored as is in the calibration.

    Raises:
        CalibrationError: fewer than ⌈1/α⌉ − 1 scorable null texts in all (no finite (1−α) quantile exists).
        InputError: an unscorable text, unless ``skip_invalid``.
    """
    n_skipped = 0
    if skip_invalid:
        kept = [x for i, x in enumerate(id_lists) if detector.check_ids(i, x) is None]
        n_skipped, id_lists = len(id_lists) - len(kept), kept
    if not (0 < alpha < 1) or 1 / alpha > 1e12:
        raise CalibrationError(f"alpha must be in [1e-12, 1) to calibrate, got {alpha}")
    need = conformal_min_size(alpha)
    if len(id_lists) < need:
        raise CalibrationError(f"calibrating at alpha={alpha} needs at least {need} unwatermarked texts, got {len(id_lists)}")
    min_per_bin = min(len(id_lists), min_per_bin or math.ceil(2 / alpha))
    res = detector.detect_ids(id_lists)
    n = torch.tensor([len(x) for x in id_lists])
    bins = []
    for lo, hi in adaptive_bins(n, bin_edges, min_per_bin):
        sel = (n >= lo) & (n < hi)
        bins.append(LengthBin(lo=int(lo), hi=int(hi), n=int(sel.sum()), tau=conformal_quantile(res.score[sel], alpha)))
    return Calibration(
        key_fingerprint=detector.key_fingerprint, scheme=detector.scheme.name,
        scheme_config_hash=config_hash(detector.scheme.params), model_id=model_id, tokenizer=detector.tokenizer_fp,
        alpha=alpha, source=source, token_prior=getattr(detector.scheme, "prior_fingerprint", ""), bins=bins,
        n_skipped=n_skipped, provenance=provenance or {}, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
