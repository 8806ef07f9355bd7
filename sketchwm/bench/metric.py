"""The metric plugin contract of ``sketchwm bench`` and the one threshold definition.

A :class:`Metric` turns the evidence of one benchmark *cell* (:class:`CellData`: the detection
scores of its texts, the unwatermarked null scores of the same model, length and key, quality
side data, timings) into one number. Metrics are components registered through the
``sketchwm_register_metrics`` hook, built-ins exactly like third-party ones.

Decisions (:func:`decisions`) are sketchwm's one decision rule, exactly as :class:`sketchwm.detection.Detector`
applies it (:func:`sketchwm.stats.decide`): score > τ_N and score ≥ τ_α, where τ_N is the conformal
⌈(n+1)(1−α)⌉-th order statistic of the null scores of the *calibration* split in the text's length
bin (the bins of :func:`sketchwm.detection.calibrated_bins`, as ``sketchwm calibrate`` makes them)
and τ_α the scheme's analytic threshold at the text's length; the false-positive rate is reported on
the disjoint *report* split. With fewer than ⌈1/α⌉−1 calibration texts no finite τ_N exists:
metrics that need it return NaN with a note instead of a number.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ..components import Component

from ..detection import bin_thresholds, calibrated_bins
from ..stats import conformal_min_size as min_null_size  # re-exported: ⌈1/α⌉ − 1
from ..stats import conformal_quantile, decide

__all__ = ["Metric", "MetricValue", "CellData", "threshold", "decisions", "calibrated", "min_null_size", "CELL_KINDS", "TASKS"]

#: the built-in cell kinds whose cells hold texts (:mod:`sketchwm.bench.builtin_kinds`): clean watermarked
#: texts, attacked ones, spoofed (unwatermarked-origin) ones or watermarked texts scrubbed with a stolen
#: model; the kinds a metric applies to unless it says otherwise (the theory checks' metrics list theirs)
CELL_KINDS = ("clean", "attack", "spoof", "scrub")
#: leaderboard tables a metric can belong to
TASKS = ("power", "robustness", "quality", "stealing", "speed", "theory")


@dataclass
class MetricValue:
    """One metric value of a cell: ``value`` (float, NaN when undefined), ``n`` texts it rests on, ``note``."""

    value: float
    n: int
    note: str = ""


@dataclass
class CellData:
    """Everything a metric may read about one cell (numpy arrays; n texts, m null texts).

    Attributes:
        kind: the cell's kind (a registered :class:`sketchwm.bench.cellkind.CellKind`, e.g. one of
            :data:`CELL_KINDS`); attack, strength, train_n: what was done to the texts.
        scores, p_values: (n,) float64 detection score and p-value of the cell's texts.
        n_tokens: (n,) int64 tokens scored per text.
        analytic: {α: (n,) float64} the scheme's analytic τ_α per text (−inf where the scheme has none).
        null_cal, null_cal_tokens: (m_cal,) scores / lengths of the calibration split of unwatermarked texts
            (lengths None: one length bin).
        null_fpr, null_fpr_analytic: (m_fpr,) scores of the disjoint report split and {α: (m_fpr,) τ_α};
            null_fpr_tokens: (m_fpr,) their lengths (None: the calibration's single bin).
        reference_scores: (n,) scores of the same texts before the attack (scrub cells), or None;
            reference_tokens, reference_analytic: their lengths and {α: (n,) τ_α} (None: as the cell's texts).
        tokens_to_detect: (n,) float64 first prefix length with p ≤ 0.01 (inf: never), or None.
        similarity: (n,) semantic similarity to the unattacked text, or None.
        ppl, null_ppl: (n,) / (m,) oracle perplexities of the texts and of unwatermarked texts, or None.
        token_ids: the texts' token ids (the generating model's tokenizer), or None.
        kl: per sampled row, KL(p̃‖p) in nats of the tilted vs the model's marginal during generation, or None.
        gen_tokens_per_s, detect_tokens_per_s: throughput of this cell's generation / detection, or None.
        diversity, null_diversity: (m,) float64 distinct-2 across k samples of each of m prompts,
            watermarked under the cell's key / unwatermarked (:func:`sketchwm.quality.cross_sample_distinct`), or None.
    """

    kind: str
    attack: str
    strength: float
    scores: np.ndarray
    p_values: np.ndarray
    n_tokens: np.ndarray
    analytic: dict[float, np.ndarray]
    null_cal: np.ndarray
    null_fpr: np.ndarray
    null_fpr_analytic: dict[float, np.ndarray]
    train_n: int = 0
    reference_scores: np.ndarray | None = None
    tokens_to_detect: np.ndarray | None = None
    similarity: np.ndarray | None = None
    ppl: np.ndarray | None = None
    null_ppl: np.ndarray | None = None
    token_ids: list[list[int]] | None = None
    kl: np.ndarray | None = None
    gen_tokens_per_s: float | None = None
    detect_tokens_per_s: float | None = None
    diversity: np.ndarray | None = None
    null_diversity: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    null_cal_tokens: np.ndarray | None = None
    null_fpr_tokens: np.ndarray | None = None
    reference_tokens: np.ndarray | None = None
    reference_analytic: dict[float, np.ndarray] | None = None


def calibrated(cell: CellData, alpha: float, n_tokens: np.ndarray | None) -> tuple[np.ndarray, str]:
    """τ_N of each text's length bin from the cell's calibration split, as ``Detector`` applies a
    calibration: (k,) float64 (NaN when the split is too small for α) and a note saying so ("" otherwise).

    Args:
        cell: supplies ``null_cal`` and ``null_cal_tokens``; alpha: false-positive rate;
        n_tokens: (k,) lengths of the texts to decide (None, or no calibration lengths: one bin).
    """
    k = cell.null_cal.size if n_tokens is None else len(n_tokens)
    need = min_null_size(alpha)
    if cell.null_cal.size < need:
        return np.full(k, np.nan), f"null calibration split has {cell.null_cal.size} texts; alpha={alpha:g} needs >= {need}"
    if cell.null_cal_tokens is None or n_tokens is None:
        return np.full(k, conformal_quantile(cell.null_cal, alpha)), ""
    bins = calibrated_bins(cell.null_cal, cell.null_cal_tokens, alpha)
    return bin_thresholds(bins, torch.as_tensor(np.asarray(n_tokens, dtype=np.int64))).numpy(), ""


def threshold(cell: CellData, alpha: float, analytic: np.ndarray, n_tokens: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """The one decision rule's per-text threshold max(τ_N, τ_α) for display, and a note.

    Args:
        cell: supplies the calibration split; alpha: false-positive rate; analytic: (k,) float64 τ_α
        of the texts; n_tokens: (k,) their lengths (τ_N per length bin; None: one bin).

    Returns:
        (k,) float64 thresholds (NaN when the calibration split is too small for α) and a note
        saying so ("" otherwise).
    """
    tau, note = calibrated(cell, alpha, n_tokens if n_tokens is not None else None)
    a = np.asarray(analytic, dtype=np.float64)
    return (np.maximum(tau, a) if tau.shape == a.shape else tau), note


def decisions(cell: CellData, scores: np.ndarray, alpha: float, analytic: np.ndarray,
              n_tokens: np.ndarray | None) -> tuple[np.ndarray | None, str]:
    """Which of ``scores`` (k,) the one decision rule flags: :func:`sketchwm.stats.decide` with τ_N of each
    text's length bin (:func:`calibrated`) and ``analytic`` (k,) τ_α (−inf where none). Returns (k,) bool,
    or None with a note when the calibration split is too small for α."""
    tau, note = calibrated(cell, alpha, n_tokens)
    if note:
        return None, note
    p = np.ones_like(np.asarray(scores, dtype=np.float64))  # unused: a calibration is always given here
    return decide(scores, p, alpha, np.asarray(analytic, dtype=np.float64), tau).numpy(), ""


class Metric(Component):
    """A benchmark metric: one number per cell (see module doc).

    Subclasses set ``name``, ``unit`` (e.g. "fraction", "tokens", "tokens/s"), ``higher_is_better``
    (True, False, or None when neither, e.g. an observed FPR that should sit at α), ``task`` (the
    leaderboard table, one of :data:`TASKS`) and ``kinds`` (the names of the cell kinds it applies to).
    """

    kind = "metric"
    unit: ClassVar[str] = ""
    higher_is_better: ClassVar[bool | None] = True
    task: ClassVar[str] = "power"
    kinds: ClassVar[tuple[str, ...]] = CELL_KINDS
    #: False for metrics measured in wall time (excluded when comparing reruns row for row)
    deterministic: ClassVar[bool] = True

    def __init__(self, params: Any = None):
        self.params = self.parse_params(params)

    @abstractmethod
    def compute(self, cell: CellData) -> MetricValue | None:
        """The value for ``cell``, or None when the metric has no data for it (e.g. no oracle run)."""
