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
oracle-log-ppl         nats/token  low    quality      mean over texts of log ppl (mean oracle NLL per token)
oracle-log-ppl-null    nats/token  low    quality      the same for unwatermarked texts (same model, regime)
diversity-across       fraction    high   quality      distinct-2 across k samples of one prompt, one key
diversity-across-null  fraction    high   quality      the same for unwatermarked samples (reference)
kl-per-token           nats/token  low    quality      mean KL(p̃‖p) of the sampled marginals (Thm 5.1)
distinct-2             fraction    high   quality      mean distinct-2 of the watermarked texts
seq-rep-4              fraction    low    quality      mean seq-rep-4 (repetition) of the watermarked texts
gen-throughput         tokens/s    high   speed        watermarked generation throughput
detect-throughput      tokens/s    high   speed        detection throughput
kl-chain               nats/text   –      theory       mean Σ KL(p̃_i‖p_i) over committed rows (Thm 5.1)
kl-path                nats/text   –      theory       mean path log-likelihood ratio log dP̃/dP (same texts)
kl-chain-z             z           –      theory       Monte-Carlo z of kl-path − kl-chain (|z| ≲ 3: equal)
fisher-ratio           ratio       –      theory       Σ KL(p_η‖p) / Σ ½η²Var_p(a) at η = s·η_t (→ 1, eq. 16)
sound-max-fpr@1%       fraction    low    theory       largest per-key FPR at α = 1% on human text
sound-max-fpr@5%       fraction    low    theory       the same at α = 5%
sound-rejected         pairs       low    theory       (key, domain) pairs failing FPR ≤ α (binomial, Bonf.)
edit-bound-ratio       ratio       low    theory       max |ΔS_k| / Theorem 5.6 bound after k edits (≤ 1)
edit-bound-violations  texts       low    theory       texts whose |ΔS_k| exceeds the bound
=====================  ==========  =====  ===========  ==================================================
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ..detection import pad_ids
from ..hookspecs import hookimpl
from ..quality import distinct_n, seq_rep_n
from ..stats import decide
from .metric import CellData, Metric, MetricValue, decisions

__all__ = ["BUILTIN_METRICS", "THEORY_METRICS", "rate_above", "sketchwm_register_metrics"]


def rate_above(cell: CellData, scores: np.ndarray, alpha: float, analytic: np.ndarray,
               n_tokens: np.ndarray | None = None) -> MetricValue:
    """Fraction of ``scores`` (n,) the one decision rule flags at ``alpha`` (score > τ_N of each text's
    length bin, from the cell's calibration split, and score ≥ τ_α; :func:`sketchwm.bench.metric.decisions`;
    ``analytic`` (n,) τ_α per text, ``n_tokens`` (n,) the texts' lengths); NaN with the reason when
    the calibration split is too small."""
    hit, note = decisions(cell, scores, alpha, analytic, n_tokens)
    if note:
        return MetricValue(float("nan"), len(scores), note)
    return MetricValue(float(np.mean(hit)), len(scores))


class TPRAtFPR(Metric):
    """TPR at 1% FPR: fraction of the cell's texts with score ≥ max(τ_N, τ_α) (the one decision rule)."""

    name, unit, task, kinds = "tpr@1%fpr", "fraction", "robustness", ("clean", "attack", "scrub")
    alpha: ClassVar[float] = 0.01

    def compute(self, cell: CellData) -> MetricValue:
        return rate_above(cell, cell.scores, self.alpha, cell.analytic[self.alpha], cell.n_tokens)


class TPRAtFPR01(TPRAtFPR):
    """TPR at 0.1% FPR (needs ≥ 999 calibration texts; NaN with a note otherwise)."""

    name = "tpr@0.1%fpr"
    alpha = 0.001


class TPRAnalytic(Metric):
    """TPR with the analytic threshold τ_α alone at α = 1% (p ≤ α where the scheme has no closed form)."""

    name, unit, task, kinds = "tpr-analytic@1%", "fraction", "robustness", ("clean", "attack", "scrub")

    def compute(self, cell: CellData) -> MetricValue:
        hit = decide(cell.scores, cell.p_values, 0.01, cell.analytic[0.01]).numpy()  # τ_α, else p ≤ α
        return MetricValue(float(np.mean(hit)), len(cell.scores))


class FPRObserved(Metric):
    """Observed FPR at α = 1% on the null *report* split (disjoint from the calibration split)."""

    name, unit, higher_is_better, task, kinds = "fpr@1%", "fraction", None, "power", ("clean",)

    def compute(self, cell: CellData) -> MetricValue:
        return rate_above(cell, cell.null_fpr, 0.01, cell.null_fpr_analytic[0.01], cell.null_fpr_tokens)


class ROCAUC(Metric):
    """ROC AUC of the cell's texts (positives) against the null report split (negatives), scikit-learn."""

    name, unit, task, kinds = "roc-auc", "fraction", "robustness", ("clean", "attack", "scrub")

    def compute(self, cell: CellData) -> MetricValue:
        from sklearn.metrics import roc_auc_score

        y = np.r_[np.ones(len(cell.scores)), np.zeros(len(cell.null_fpr))]
        s = np.nan_to_num(np.r_[cell.scores, cell.null_fpr], nan=-np.inf, neginf=-1e300, posinf=1e300)
        return MetricValue(float(roc_auc_score(y, s)), len(y))


class TokensToDetect(Metric):
    """Median number of tokens after which p ≤ 0.01 first holds (prefixes; inf when most never reach it)."""

    name, unit, higher_is_better, task, kinds = "tokens-to-detect", "tokens", False, "power", ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.tokens_to_detect is None:
            return None
        t = cell.tokens_to_detect
        return MetricValue(float(np.median(t)), len(t), f"{int(np.isinf(t).sum())} of {len(t)} never reach p <= 0.01")


class SpoofRate(Metric):
    """Fraction of spoofed (unwatermarked-origin) texts detected at 1% FPR (Jovanović et al. 2024)."""

    name, unit, higher_is_better, task, kinds = "spoof-rate", "fraction", False, "stealing", ("spoof",)

    def compute(self, cell: CellData) -> MetricValue:
        return rate_above(cell, cell.scores, 0.01, cell.analytic[0.01], cell.n_tokens)


class ScrubRate(Metric):
    """Fraction of texts detected before the stolen-model scrub and not after it (1% FPR)."""

    name, unit, higher_is_better, task, kinds = "scrub-rate", "fraction", False, "stealing", ("scrub",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.reference_scores is None:
            return None
        ref_a = cell.reference_analytic[0.01] if cell.reference_analytic is not None else cell.analytic[0.01]
        ref_n = cell.reference_tokens if cell.reference_tokens is not None else cell.n_tokens
        before, note = decisions(cell, cell.reference_scores, 0.01, ref_a, ref_n)
        after, _ = decisions(cell, cell.scores, 0.01, cell.analytic[0.01], cell.n_tokens)
        if note:
            return MetricValue(float("nan"), len(cell.scores), note)
        if not before.any():
            return MetricValue(float("nan"), 0, "no text detected before the scrub")
        return MetricValue(float(np.mean(~after[before])), int(before.sum()))


class SemanticSimilarity(Metric):
    """Mean sentence-embedding cosine similarity of attacked to original texts (sentence-transformers)."""

    name, unit, task, kinds = "semantic-similarity", "cosine", "quality", ("attack", "scrub")

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.similarity is None or not np.isfinite(cell.similarity).any():
            return None
        return MetricValue(float(np.nanmean(cell.similarity)), int(np.isfinite(cell.similarity).sum()))


class OraclePPL(Metric):
    """Median oracle perplexity (SmolLM2-135M-Instruct, :mod:`sketchwm.oracle`) of the watermarked texts."""

    name, unit, higher_is_better, task, kinds = "oracle-ppl", "ppl", False, "quality", ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.ppl is None:
            return None
        return MetricValue(float(np.nanmedian(cell.ppl)), int(np.isfinite(cell.ppl).sum()))


class OraclePPLRatio(Metric):
    """Median oracle perplexity of watermarked texts over that of unwatermarked texts (1 = no cost)."""

    name, unit, higher_is_better, task, kinds = "oracle-ppl-ratio", "ratio", False, "quality", ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.ppl is None or cell.null_ppl is None:
            return None
        return MetricValue(float(np.nanmedian(cell.ppl) / np.nanmedian(cell.null_ppl)), int(np.isfinite(cell.ppl).sum()))


class OracleLogPPL(Metric):
    """Mean over texts of the oracle log-perplexity (mean negative log-likelihood per oracle token, nats)."""

    name, unit, higher_is_better, task, kinds = "oracle-log-ppl", "nats/token", False, "quality", ("clean",)

    def values(self, cell: CellData) -> np.ndarray | None:
        """(n,) per-text log-perplexities, or None."""
        return None if cell.ppl is None else np.log(cell.ppl)

    def compute(self, cell: CellData) -> MetricValue | None:
        v = self.values(cell)
        if v is None or not np.isfinite(v).any():
            return None
        return MetricValue(float(np.nanmean(v)), int(np.isfinite(v).sum()))


class OracleLogPPLNull(OracleLogPPL):
    """Mean oracle log-perplexity of the unwatermarked texts of the same model, length and regime."""

    name = "oracle-log-ppl-null"

    def values(self, cell: CellData) -> np.ndarray | None:
        return None if cell.null_ppl is None else np.log(cell.null_ppl)


class DiversityAcross(Metric):
    """Diversity across samples: mean over prompts of distinct-2 of k samples of one prompt under one key
    (:func:`sketchwm.quality.cross_sample_distinct`); config ``diversity``."""

    name, unit, task, kinds = "diversity-across", "fraction", "quality", ("clean",)

    def values(self, cell: CellData) -> np.ndarray | None:
        """(m,) per-prompt values, or None."""
        return cell.diversity

    def compute(self, cell: CellData) -> MetricValue | None:
        v = self.values(cell)
        if v is None or not np.isfinite(v).any():
            return None
        return MetricValue(float(np.nanmean(v)), int(np.isfinite(v).sum()))


class DiversityAcrossNull(DiversityAcross):
    """Diversity across unwatermarked samples of the same prompts (the reference)."""

    name = "diversity-across-null"

    def values(self, cell: CellData) -> np.ndarray | None:
        return cell.null_diversity


class KLPerToken(Metric):
    """Mean per-token KL(p̃‖p) (nats) of the marginals the watermarked text was sampled from (Thm 5.1's
    distortion; 0 for schemes that do not tilt the logits, e.g. the distortion-free AAR and KTH)."""

    name, unit, higher_is_better, task, kinds = "kl-per-token", "nats/token", False, "quality", ("clean",)

    def compute(self, cell: CellData) -> MetricValue | None:
        if cell.kl is None or cell.kl.size == 0:
            return None
        return MetricValue(float(np.mean(cell.kl)), int(cell.kl.size))


class Distinct2(Metric):
    """Mean distinct-2 of the texts' tokens (Li et al. 2016; :func:`sketchwm.quality.distinct_n`)."""

    name, unit, task, kinds = "distinct-2", "fraction", "quality", ("clean",)
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

    name, higher_is_better = "seq-rep-4", False
    order = 4

    def values(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return seq_rep_n(ids, valid, self.order)


class GenThroughput(Metric):
    """Watermarked generation throughput (generated tokens per wall-clock second)."""

    name, unit, task, kinds = "gen-throughput", "tokens/s", "speed", ("clean",)
    deterministic = False

    def compute(self, cell: CellData) -> MetricValue | None:
        return None if cell.gen_tokens_per_s is None else MetricValue(cell.gen_tokens_per_s, len(cell.scores))


class DetectThroughput(Metric):
    """Detection throughput (scored tokens per wall-clock second, tokenisation excluded)."""

    name, unit, task, kinds = "detect-throughput", "tokens/s", "speed", ("clean",)
    deterministic = False

    def compute(self, cell: CellData) -> MetricValue | None:
        return None if cell.detect_tokens_per_s is None else MetricValue(cell.detect_tokens_per_s, len(cell.scores))


class _Theory(Metric):
    """Base of the theory-check metrics: read ``cell.extra[field]``; NaN with the cell's note when absent."""

    task, higher_is_better = "theory", None
    field: ClassVar[str] = ""

    def value(self, ev: object, cell: CellData) -> MetricValue:
        """The metric from the theory evidence ``ev`` (subclasses)."""
        raise NotImplementedError

    def compute(self, cell: CellData) -> MetricValue:
        ev = cell.extra.get(self.field)
        if ev is None:
            return MetricValue(float("nan"), 0, cell.extra.get("note", "") or "no evidence for this scheme")
        return self.value(ev, cell)


class KLChain(_Theory):
    """Chain-rule KL of the sampling path: mean over texts of Σ KL(p̃_i‖p_i) over the committed rows (Thm 5.1)."""

    name, unit, kinds, field = "kl-chain", "nats/text", ("theory-kl",), "chain"

    def value(self, ev: dict, cell: CellData) -> MetricValue:
        return MetricValue(ev["kl_chain"], ev["n"], cell.extra.get("note", ""))


class KLPath(KLChain):
    """Monte-Carlo path KL: mean over texts of the trajectory log-likelihood ratio log dP̃/dP."""

    name = "kl-path"

    def value(self, ev: dict, cell: CellData) -> MetricValue:
        return MetricValue(ev["kl_path"], ev["n"], cell.extra.get("note", ""))


class KLChainZ(KLChain):
    """z of (kl-path − kl-chain) over texts: the chain rule holds if |z| stays within Monte-Carlo noise."""

    name, unit = "kl-chain-z", "z"

    def value(self, ev: dict, cell: CellData) -> MetricValue:
        return MetricValue(ev["z"], ev["n"], cell.extra.get("note", ""))


class FisherRatio(_Theory):
    """KL(p_η‖p) / (½η²Var_p a) summed over the tilted rows, η = s·η_t with s the cell's strength (eq. 16)."""

    name, unit, kinds, field = "fisher-ratio", "ratio", ("theory-fisher",), "fisher"

    def value(self, ev: tuple, cell: CellData) -> MetricValue:
        kl, half = ev
        return MetricValue(kl / half if half > 0 else float("nan"), 0, "" if half > 0 else "no tilt (Var_p a = 0)")


class SoundMaxFPR(_Theory):
    """Largest false-positive rate at α = 1% over the soundness keys and human domains."""

    name, unit, higher_is_better, kinds, field = "sound-max-fpr@1%", "fraction", False, ("theory-sound",), "sound"
    alpha: ClassVar[float] = 0.01

    def value(self, ev: dict, cell: CellData) -> MetricValue:
        r = ev[self.alpha]
        return MetricValue(r["max_fpr"], r["n"], f"{r['pairs']} (key, domain) pairs")


class SoundMaxFPR5(SoundMaxFPR):
    """Largest false-positive rate at α = 5% over the soundness keys and human domains."""

    name, alpha = "sound-max-fpr@5%", 0.05


class SoundRejected(SoundMaxFPR):
    """(key, domain) pairs whose FPR at 1% or 5% is significantly above α (one-sided binomial, Bonferroni 0.01)."""

    name, unit = "sound-rejected", "pairs"

    def value(self, ev: dict, cell: CellData) -> MetricValue:
        return MetricValue(float(sum(r["rejected"] for r in ev.values())), next(iter(ev.values()))["n"])


class EditBoundRatio(_Theory):
    """Largest |S_k(y) − S_k(y')| / bound over the edited texts (k = the cell's strength; ≤ 1 by Thm 5.6)."""

    name, unit, higher_is_better, kinds, field = "edit-bound-ratio", "ratio", False, ("theory-edit",), "edit"

    def value(self, ev: np.ndarray, cell: CellData) -> MetricValue:
        return MetricValue(float(np.max(ev)) if len(ev) else float("nan"), len(ev))


class EditBoundViolations(EditBoundRatio):
    """Edited texts whose score change exceeds Theorem 5.6's bound (0 when the theorem holds)."""

    name, unit = "edit-bound-violations", "texts"

    def value(self, ev: np.ndarray, cell: CellData) -> MetricValue:
        return MetricValue(float(np.sum(ev > 1.0 + 1e-9)), len(ev))


THEORY_METRICS: tuple[type[Metric], ...] = (KLChain, KLPath, KLChainZ, FisherRatio, SoundMaxFPR, SoundMaxFPR5,
                                            SoundRejected, EditBoundRatio, EditBoundViolations)

BUILTIN_METRICS: tuple[type[Metric], ...] = (
    TPRAtFPR, TPRAtFPR01, TPRAnalytic, FPRObserved, ROCAUC, TokensToDetect, SpoofRate, ScrubRate,
    SemanticSimilarity, OraclePPL, OraclePPLRatio, OracleLogPPL, OracleLogPPLNull, KLPerToken, DiversityAcross,
    DiversityAcrossNull, Distinct2, SeqRep4, GenThroughput, DetectThroughput,
) + THEORY_METRICS


@hookimpl
def sketchwm_register_commands(subparsers, parents) -> None:
    """Add ``sketchwm bench`` (``run``, ``export``), ``sketchwm leaderboard`` (:mod:`sketchwm.bench.cli`) and
    ``sketchwm scorecard`` (:mod:`sketchwm.scorecard.cli`)."""
    from ..scorecard.cli import add_scorecard_command
    from .cli import add_subparsers

    add_subparsers(subparsers, parents)
    add_scorecard_command(subparsers, parents)


@hookimpl
def sketchwm_register_metrics() -> list[type]:
    """The built-in metrics (see module table)."""
    return list(BUILTIN_METRICS)
