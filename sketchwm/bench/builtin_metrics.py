"""Built-in benchmark metrics, registered through the ``sketchwm_register_metrics`` hook like any plugin.

=====================  ==========  =====  ===========  ==================================================
name                   unit        best   task         what
=====================  ==========  =====  ===========  ==================================================
tpr@1%fpr              fraction    high   power/rob.   score ≥ max(τ_N, τ_α) at α = 1% (conformal τ_N)
tpr@0.1%fpr            fraction    high   power/rob.   the same at α = 0.1%
tpr-analytic@1%        fraction    high   power/rob.   score ≥ τ_α only (analytic threshold column)
fpr@1%                 fraction    =α     power        observed FPR on the disjoint null report split
roc-auc                fraction    high   power/rob.   ROC AUC, texts vs null report split (scikit-learn)
tokens-to-detect       tokens      low    power        median first prefix length with p ≤ 0.01
spoof-rate             fraction    low    stealing     spoofed unwatermarked texts detected at 1% FPR
scrub-rate             fraction    high   stealing     detected texts no longer detected after the scrub
semantic-similarity    cosine      high   quality      mean similarity of attacked to original text
oracle-ppl             ppl         low    quality      median SmolLM2-135M perplexity of the texts
oracle-ppl-ratio       ratio       low    quality      median ppl(watermarked) / median ppl(unwatermarked)
kl-per-token           nats/token  low    quality      mean KL(p̃‖p) of the sampled marginals (Thm 5.1)
distinct-2             fraction    high   quality      mean distinct-2 of the watermarked texts
seq-rep-4              fraction    low    quality      mean seq-rep-4 (repetition) of the watermarked texts
gen-throughput         tokens/s    high   speed        watermarked generation throughput
detect-throughput      tokens/s    high   speed        detection throughput
=====================  ==========  =====  ===========  ==================================================
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ..detection import pad_ids
from ..hookspecs import hookimpl
from ..quality import distinct_n, seq_rep_n
from .metric import CellData, Metric, MetricValue, threshold

__all__ = ["BUILTIN_METRICS", "sketchwm_register_metrics"]


class TPRAtFPR(Metric):
    """TPR at 1% FPR: fraction of the cell's texts with score ≥ max(τ_N, τ_α) (the one decision rule)."""

    name = "tpr@1%fpr"
    unit = "fraction"
    task = "robustness"
    kinds = ("clean", "attack", "scrub")
    alpha: ClassVar[float] = 0.01

    def compute(self, cell: CellData) -> MetricValue:
        thr, note = threshold(cell, self.alpha, cell.analytic[self.alpha])
        if note:
            return MetricValue(float("nan"), len(cell.scores), note)
        return MetricValue(float(np.mean(cell.scores >= thr)), len(cell.scores))


class TPRAtFPR01(TPRAtFPR):
    """TPR at 0.1% FPR (needs ≥ 999 calibration texts; NaN with a note otherwise)."""

    name = "tpr@0.1%fpr"
    alpha = 0.001


class TPRAnalytic(Metric):
    """TPR with the analytic threshold τ_α alone at α = 1% (p ≤ α where the scheme has no closed form)."""

    name = "tpr-analytic@1%"
    unit = "fraction"
    task = "robustness"
    kinds = ("clean", "attack", "scrub")

    def compute(self, cell: CellData) -> MetricValue:
        a = cell.analytic[0.01]
        hit = np.where(np.isfinite(a), cell.scores >= a, cell.p_values <= 0.01)
        return MetricValue(float(np.mean(hit)), len(cell.scores))


class FPRObserved(Metric):
    """Observed FPR at α = 1% on the null *report* split (disjoint from the calibration split)."""

    name = "fpr@1%"
    unit = "fraction"
    higher_is_better = None
    task = "power"
    kinds = ("clean",)

    def compute(self, cell: CellData) -> MetricValue:
        thr, note = threshold(cell, 0.01, cell.null_fpr_analytic[0.01])
        if note:
            return MetricValue(float("nan"), len(cell.null_fpr), note)
        return MetricValue(float(np.mean(cell.null_fpr >= thr)), len(cell.null_fpr))


class ROCAUC(Metric):
    """ROC AUC of the cell's texts (positives) against the null report split (negatives), scikit-learn."""

    name = "roc-auc"
    unit = "fraction"
    task = "robustness"
    kinds = ("clean", "attack", "scrub")

    def compute(self, cell: CellData) -> MetricValue:
        from sklearn.metrics import roc_auc_score

        y = np.r_[np.ones(len(cell.scores)), np.zeros(len(cell.null_fpr))]
        s = np.nan_to_num(np.r_[cell.scores, cell.null_fpr], nan=-np.inf, neginf=-1e300, posinf=1e300)
        return MetricValue(float(roc_auc_score(y, s)), len(y))


class TokensToDetect(Metric):
    """Median number of tokens after which p ≤ 0.01 first holds (prefixes; inf when most never reach it)."""

    name = "tokens-to-detect"
    unit = "tokens"
    higher_is_better = False
    task = "power"
    kinds = ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.tokens_to_detect is None:
            return None
        t = cell.tokens_to_detect
        return MetricValue(float(np.median(t)), len(t), f"{int(np.isinf(t).sum())} of {len(t)} never reach p <= 0.01")


class SpoofRate(Metric):
    """Fraction of spoofed (unwatermarked-origin) texts detected at 1% FPR (Jovanović et al. 2024)."""

    name = "spoof-rate"
    unit = "fraction"
    higher_is_better = False
    task = "stealing"
    kinds = ("spoof",)

    def compute(self, cell: CellData) -> MetricValue:
        thr, note = threshold(cell, 0.01, cell.analytic[0.01])
        if note:
            return MetricValue(float("nan"), len(cell.scores), note)
        return MetricValue(float(np.mean(cell.scores >= thr)), len(cell.scores))


class ScrubRate(Metric):
    """Fraction of texts detected before the stolen-model scrub and not after it (1% FPR)."""

    name = "scrub-rate"
    unit = "fraction"
    higher_is_better = False
    task = "stealing"
    kinds = ("scrub",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.reference_scores is None:
            return None
        a = cell.analytic[0.01]
        thr, note = threshold(cell, 0.01, a)
        if note:
            return MetricValue(float("nan"), len(cell.scores), note)
        before = cell.reference_scores >= thr
        if not before.any():
            return MetricValue(float("nan"), 0, "no text detected before the scrub")
        return MetricValue(float(np.mean(~(cell.scores[before] >= thr[before]))), int(before.sum()))


class SemanticSimilarity(Metric):
    """Mean sentence-embedding cosine similarity of attacked to original texts (sentence-transformers)."""

    name = "semantic-similarity"
    unit = "cosine"
    task = "quality"
    kinds = ("attack", "scrub")

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.similarity is None or not np.isfinite(cell.similarity).any():
            return None
        return MetricValue(float(np.nanmean(cell.similarity)), int(np.isfinite(cell.similarity).sum()))


class OraclePPL(Metric):
    """Median oracle perplexity (SmolLM2-135M-Instruct, :mod:`sketchwm.oracle`) of the watermarked texts."""

    name = "oracle-ppl"
    unit = "ppl"
    higher_is_better = False
    task = "quality"
    kinds = ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.ppl is None:
            return None
        return MetricValue(float(np.nanmedian(cell.ppl)), int(np.isfinite(cell.ppl).sum()))


class OraclePPLRatio(Metric):
    """Median oracle perplexity of watermarked texts over that of unwatermarked texts (1 = no cost)."""

    name = "oracle-ppl-ratio"
    unit = "ratio"
    higher_is_better = False
    task = "quality"
    kinds = ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.ppl is None or cell.null_ppl is None:
            return None
        return MetricValue(float(np.nanmedian(cell.ppl) / np.nanmedian(cell.null_ppl)), int(np.isfinite(cell.ppl).sum()))


class KLPerToken(Metric):
    """Mean per-token KL(p̃‖p) (nats) of the marginals the watermarked text was sampled from (Thm 5.1's
    distortion; 0 for schemes that do not tilt the logits, e.g. the distortion-free AAR and KTH)."""

    name = "kl-per-token"
    unit = "nats/token"
    higher_is_better = False
    task = "quality"
    kinds = ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.kl is None or cell.kl.size == 0:
            return None
        return MetricValue(float(np.mean(cell.kl)), int(cell.kl.size))


class Distinct2(Metric):
    """Mean distinct-2 of the texts' tokens (Li et al. 2016; :func:`sketchwm.quality.distinct_n`)."""

    name = "distinct-2"
    unit = "fraction"
    task = "quality"
    kinds = ("clean",)
    order: ClassVar[int] = 2

    def values(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """(B,) float64 per-text values."""
        return distinct_n(ids, valid, self.order)

    def compute(self, cell: CellData) -> MetricValue | None:
        if not cell.token_ids:
            return None
        ids, valid = pad_ids(cell.token_ids)
        v = self.values(ids, valid).numpy()
        return MetricValue(float(np.nanmean(v)), int(np.isfinite(v).sum()))


class SeqRep4(Distinct2):
    """Mean seq-rep-4 (Welleck et al. 2020): repeated 4-grams; perplexity rewards repetition, this shows it."""

    name = "seq-rep-4"
    higher_is_better = False
    order = 4

    def values(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return seq_rep_n(ids, valid, self.order)


class GenThroughput(Metric):
    """Watermarked generation throughput (generated tokens per wall-clock second)."""

    name = "gen-throughput"
    unit = "tokens/s"
    task = "speed"
    kinds = ("clean",)
    deterministic = False

    def compute(self, cell: CellData) -> MetricValue | None:
        return None if cell.gen_tokens_per_s is None else MetricValue(cell.gen_tokens_per_s, len(cell.scores))


class DetectThroughput(Metric):
    """Detection throughput (scored tokens per wall-clock second, tokenisation excluded)."""

    name = "detect-throughput"
    unit = "tokens/s"
    task = "speed"
    kinds = ("clean",)
    deterministic = False

    def compute(self, cell: CellData) -> MetricValue | None:
        return None if cell.detect_tokens_per_s is None else MetricValue(cell.detect_tokens_per_s, len(cell.scores))


BUILTIN_METRICS: tuple[type[Metric], ...] = (
    TPRAtFPR, TPRAtFPR01, TPRAnalytic, FPRObserved, ROCAUC, TokensToDetect, SpoofRate, ScrubRate,
    SemanticSimilarity, OraclePPL, OraclePPLRatio, KLPerToken, Distinct2, SeqRep4, GenThroughput, DetectThroughput,
)


@hookimpl
def sketchwm_register_commands(subparsers, parents) -> None:
    """Add ``sketchwm bench`` (``run``, ``export``) and ``sketchwm leaderboard`` (:mod:`sketchwm.bench.cli`)."""
    from .cli import add_subparsers

    add_subparsers(subparsers, parents)


@hookimpl
def sketchwm_register_metrics() -> list[type]:
    """The built-in metrics (see module table)."""
    return list(BUILTIN_METRICS)
