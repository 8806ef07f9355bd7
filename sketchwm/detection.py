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

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from pydantic import Field

from . import __version__
from .batching import TextEncoder, pad_ids
from .components import SchemeScores, WatermarkScheme, one_batch, tokenizer_fingerprint
from .config import StrictModel, config_hash
from .detection_paths import InputPaths
from .detection_result import DetectionResult
from .errors import CalibrationError, InputError, TokenizerMismatchError
from .stats import check_alpha, conformal_min_size, conformal_quantile, decide

__all__ = ["DetectionResult", "Detector", "scheme_analytic_threshold", "Calibration", "LengthBin", "calibrate", "DEFAULT_BIN_EDGES",
           "pad_ids", "calibrated_bins", "bin_thresholds"]

DEFAULT_BIN_EDGES = (16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 1 << 30)
CALIBRATION_VERSION = 1


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
        return bin_thresholds(self.bins, n_tokens)

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




class Detector(InputPaths):
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

        The tests are :func:`sketchwm.stats.decide`: ``score >= τ_α`` (a proven bound) and
        ``score > τ_N`` (strict: the conformal guarantee covers P(score > τ_N) only, and discrete
        scores tie). The reported threshold is max(τ_N, τ_α). A scheme without a closed-form τ_α
        (KTH, whose permutation p-value is resolution-limited; the key-randomised null on a sketch
        that declares no count-sketch geometry) uses τ_N when calibrated, else p ≤ α.

        Args:
            score, p_value: (B,) float64; n_tokens: (B,) int64 lengths (for the length bins).
            thresholds: :meth:`thresholds` of ``n_tokens`` if already computed.

        Returns:
            threshold (B,) float64 (NaN when the decision is p ≤ α), its source, is_watermarked (B,) bool.
        """
        analytic, calibrated = thresholds if thresholds is not None else self.thresholds(n_tokens)
        flags = decide(score, p_value, self.alpha, analytic, calibrated)
        if self.calibration is not None:
            if analytic is None:
                return calibrated, "calibrated", flags
            return torch.maximum(calibrated, analytic), "max(calibrated, analytic)", flags
        if analytic is not None:
            return analytic, "analytic", flags
        return torch.full_like(score, float("nan")), "p-value", flags

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


    def _checked_scores(self, ids: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor, lo: int,
                        hi: int) -> SchemeScores:
        """The scheme's scores of a batch after the detector's checks (:meth:`detect_batch`).

        Raises:
            InputError: an empty or too-short text, or ids outside [0, V) (names the text).
        """
        V = self.scheme.vocab_size
        short = lengths < self.scheme.min_tokens
        if bool(short.any()):
            i = int(short.nonzero()[0, 0])
            if int(lengths[i]) == 0:
                raise InputError(f"text {i} is empty")
            raise InputError(f"text {i} has {int(lengths[i])} tokens; at least {self.scheme.min_tokens} are needed for detection")
        if lo < 0 or hi >= V:  # name the first offending text
            bad = valid & ((ids < 0) | (ids >= V))
            i, j = (int(t) for t in bad.nonzero()[0])
            raise InputError(f"text {i} has token id {int(ids[i, j])} outside the vocabulary [0, {V})")
        return self.scheme.score_ids(ids, valid)

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
        V = self.scheme.vocab_size
        with one_batch(ids, valid, V) as (lengths, lo, hi):  # (B,) int64, a range holding every valid id; the channels reuse it
            s = self._checked_scores(ids, valid, lengths, lo, hi)
        analytic, calibrated = self.thresholds(lengths.cpu())
        thr, source, decide = self.decide(s.score.cpu(), s.p_value.cpu(), lengths.cpu(), (analytic, calibrated))
        return DetectionResult(
            score=s.score.cpu(), z=s.z.cpu(), p_value=s.p_value.cpu(), threshold=thr, is_watermarked=decide,
            n_tokens=lengths.cpu(), threshold_source=source, alpha=self.alpha, key_fingerprint=self.key_fingerprint,
            scheme=self.scheme.name, p_value_method=s.p_value_method, tau_analytic=analytic, tau_calibrated=calibrated,
            n_scored=s.n_scored.cpu().long(),
            channels=None if s.channels is None else {k: (cp.cpu().double(), cz.cpu().double())
                                                      for k, (cp, cz) in s.channels.items()},
        )


def bin_thresholds(bins: Sequence[LengthBin], n_tokens: torch.Tensor) -> torch.Tensor:
    """τ_N of the length bin of each text: n_tokens (B,) int64 text lengths → (B,) float64; lengths
    outside every bin use the nearest bin (:meth:`Calibration.threshold_for`; the bench uses it too).

    Raises:
        CalibrationError: no bins.
    """
    if not bins:
        raise CalibrationError("calibration has no length bins")
    los = torch.tensor([b.lo for b in bins], dtype=torch.long)
    his = torch.tensor([b.hi for b in bins], dtype=torch.long)
    taus = torch.tensor([b.tau for b in bins], dtype=torch.float64)
    n = torch.as_tensor(n_tokens).long().cpu().reshape(-1)[:, None]
    inside = (n >= los[None]) & (n < his[None])  # (B, nbins)
    mid = (los + his).double() / 2
    nearest = (n.double() - mid[None]).abs().argmin(1)
    idx = torch.where(inside.any(1), inside.float().argmax(1), nearest)
    return taus[idx]


def calibrated_bins(scores: "torch.Tensor | np.ndarray", lengths: "torch.Tensor | np.ndarray", alpha: float,
                    bin_edges: Sequence[int] = DEFAULT_BIN_EDGES, min_per_bin: int | None = None) -> list[LengthBin]:
    """Length bins with their conformal τ_N from n null scores and the null texts' lengths (§4.3).

    Bins of ``bin_edges`` are merged until each holds at least ``min_per_bin`` texts (default
    ⌈2/α⌉, at most n) (:func:`adaptive_bins`); each bin's τ_N is :func:`sketchwm.stats.conformal_quantile`
    of its scores (+inf where a bin is too small for α). :func:`calibrate` and the bench's metrics
    (:func:`sketchwm.bench.metric.decisions`) both call this, so both apply the same thresholds.

    Args:
        scores: (n,) null scores; lengths: (n,) their texts' lengths in tokens.
        alpha: target false-positive rate.
        bin_edges: candidate bin edges (increasing); min_per_bin: minimum texts per bin.

    Raises:
        InputError: no scores, NaN scores, α outside (0, 1).
    """
    scores = torch.as_tensor(scores).double().reshape(-1)
    n = torch.as_tensor(lengths).long().reshape(-1)
    if scores.numel() == 0:
        raise InputError("calibration needs at least one null score, got none")
    if n.shape != scores.shape:
        raise InputError(f"{scores.numel()} null scores but {n.numel()} lengths")
    min_per_bin = min(scores.numel(), min_per_bin or math.ceil(2 / check_alpha(alpha)))
    bins = []
    for lo, hi in adaptive_bins(n, bin_edges, min_per_bin):
        sel = (n >= lo) & (n < hi)
        bins.append(LengthBin(lo=int(lo), hi=int(hi), n=int(sel.sum()), tau=conformal_quantile(scores[sel], alpha)))
    return bins


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
        have = len(id_lists)
        raise CalibrationError(
            f"calibrating at alpha={alpha:g} needs at least {need} unwatermarked texts, got {have}"
            + (f" ({n_skipped} more could not be scored)" if n_skipped else "")
            + f": give at least {need} texts (sketchwm calibrate --input FILE), or leave out --input to sample them from "
            f"the model (--n-samples {max(need, 200)})"
            + (f", or calibrate at alpha >= {1 / (have + 1):.3g}" if have else ""))
    res = detector.detect_ids(id_lists)
    bins = calibrated_bins(res.score, torch.tensor([len(x) for x in id_lists]), alpha, bin_edges, min_per_bin)
    return Calibration(
        key_fingerprint=detector.key_fingerprint, scheme=detector.scheme.name,
        scheme_config_hash=config_hash(detector.scheme.params), model_id=model_id, tokenizer=detector.tokenizer_fp,
        alpha=alpha, source=source, token_prior=getattr(detector.scheme, "prior_fingerprint", ""), bins=bins,
        n_skipped=n_skipped, provenance=provenance or {}, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
