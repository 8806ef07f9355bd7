"""The typed result of a detection (:class:`DetectionResult`): per-text score, z, p-value, threshold and
decision with the run's provenance; re-exported by :mod:`sketchwm.detection`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass
class DetectionResult:
    """Detection of a batch of B texts.

    Attributes:
        score: (B,) float64, the scheme's statistic (S_k of eq. 2 for ``global-sketch``).
        z: (B,) float64, standardised statistic.
        p_value: (B,) float64, p-value under the scheme's null (method in ``p_value_method``).
        threshold: (B,) float64, threshold applied to ``score`` (per length bin when calibrated).
        is_watermarked: (B,) bool, the one decision rule (:meth:`Detector.decide`): ``score > τ_N``
            (calibrated) and ``score >= τ_α`` (analytic), or ``p_value <= alpha`` with neither.
        n_tokens: (B,) int64, the text's length in tokens (what ``min_tokens`` and the calibration's
            length bins apply to).
        n_scored: (B,) int64, the tokens that entered the statistic (``SchemeScores.n_scored``: for
            the presence sketch the distinct kept tokens, far fewer than the length), or None.
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
    n_scored: torch.Tensor | None = None

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

        The one rule (:meth:`Detector.decide`) is ``score > τ_N`` and ``score >= τ_α``, reported as
        threshold = max(τ_N, τ_α) (or ``p_value <= alpha`` for a scheme with neither). The p-value and z are
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
        if ta is not None and tc is not None:
            rule = (f"score > tau_N = {tc:.4g} and score >= tau_alpha = {ta:.4g} (threshold = max(tau_N, tau_alpha) "
                    f"= {thr:.4g})")
        else:
            rule = f"score {'>' if by.startswith('calibrated') else '>='} threshold ({by}) = {thr:.4g}"
        s, p, z, w = float(self.score[i]), float(self.p_value[i]), float(self.z[i]), bool(self.is_watermarked[i])
        why = None
        if (p <= self.alpha) != w:
            parts = [f"p = {p:.3g} {'<=' if p <= self.alpha else '>'} alpha = {self.alpha:g} and z = {z:.3g}, but the "
                     f"decision is the score rule: score {s:.4g} {'passes' if w else 'does not pass'} {thr:.4g} ({by})"]
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
                       "n_tokens": int(self.n_tokens[i]),
                       "n_scored": None if self.n_scored is None else int(self.n_scored[i]), **base, **self.explain(i)}
            else:
                rec = {"score": None, "z": None, "p_value": None, "threshold": None, "is_watermarked": None,
                       "n_tokens": int(self.n_tokens[i]), **base, "error": self.errors[i]}
            if self.provenance:
                rec["provenance"] = self.provenance
            out.append(rec)
        return out

    def columns(self) -> dict[str, list[Any]]:
        """The per-text fields of :meth:`to_records` as columns, built from whole tensors: name → list of B values.

        Columns: ``status``, ``error``, ``score``, ``z``, ``p_value``, ``threshold``, ``is_watermarked``,
        ``n_tokens``, ``n_scored``, ``decided_by``, ``explanation`` (each row equal to the record's field,
        None where the record has none). Only the texts whose p-value and decision disagree go through
        :meth:`explain` one by one (for their explanation).
        """
        B = len(self)
        ok = self.ok.tolist() if self.errors is not None else [True] * B
        every = all(ok)

        def col(t: "torch.Tensor | None", cast: type) -> list[Any]:
            if t is None:
                return [None] * B
            vals = t.tolist()
            if cast is not float or t.dtype != torch.float64:
                vals = [cast(v) for v in vals]
            return vals if every else [v if k else None for v, k in zip(vals, ok)]

        cols: dict[str, list[Any]] = {
            "status": ["ok" if k else "error" for k in ok],
            "error": list(self.errors) if self.errors is not None else [None] * B,
            "score": col(self.score, float), "z": col(self.z, float), "p_value": col(self.p_value, float),
            "threshold": col(self.threshold, float), "is_watermarked": col(self.is_watermarked, bool),
            "n_tokens": [int(v) for v in self.n_tokens.tolist()], "n_scored": col(self.n_scored, int),
        }
        if self.threshold_source == "p-value":
            by = ["p-value"] * B
        else:
            ta, tc = self.tau_analytic, self.tau_calibrated
            if tc is None:
                cal = [False] * B
            elif ta is None:
                cal = [True] * B
            else:
                cal = (tc.double() >= ta.double()).tolist()
            by = ["calibrated tau_N" if c else "analytic tau_alpha" for c in cal]
        cols["decided_by"] = [b if k else None for b, k in zip(by, ok)]
        explanation: list[Any] = [None] * B
        if self.threshold_source != "p-value":
            disagree = (self.p_value.double() <= self.alpha) != self.is_watermarked.bool()  # (B,) bool
            for i in disagree.nonzero().flatten().tolist():  # the disagreeing texts only
                if ok[i]:
                    explanation[i] = self.explain(i)["explanation"]
        cols["explanation"] = explanation
        return cols

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
            tau_analytic=cat("tau_analytic"), tau_calibrated=cat("tau_calibrated"), provenance=first.provenance, n_scored=cat("n_scored"),
        )
