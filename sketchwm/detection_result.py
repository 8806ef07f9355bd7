"""The typed result of a detection (:class:`DetectionResult`): per-text score, z, p-value, threshold,
decision and its explanation, each channel's test for a combined scheme, with the run's provenance;
re-exported by :mod:`sketchwm.detection`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .detection_explain import decision_rules, explanations


@dataclass
class DetectionResult:
    """Detection of a batch of B texts.

    Attributes:
        score: (B,) float64, the scheme's statistic (S_k of eq. 2 for ``global-sketch``).
        z: (B,) float64, standardised statistic (for a scheme combined from channels, the deciding
            channel's z).
        p_value: (B,) float64, p-value under the scheme's null (method in ``p_value_method``; for a
            scheme combined from channels, the combined p-value).
        threshold: (B,) float64, threshold applied to ``score`` (per length bin when calibrated); NaN
            when the decision is ``p_value <= alpha`` (``threshold_source`` ``"p-value"``).
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
        channels: for a scheme combined from channels (``SchemeScores.channels``), each channel's own
            test by name: ((B,) float64 p-value, (B,) float64 z), NaN where a text was not scored;
            None otherwise. The channel that decided is :meth:`deciding_channel`.
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
    channels: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return int(self.score.shape[0])

    @property
    def ok(self) -> torch.Tensor:
        """(B,) bool: True where the text was scored (False: see ``errors``)."""
        if self.errors is None:
            return torch.ones(len(self), dtype=torch.bool)
        return torch.tensor([e is None for e in self.errors], dtype=torch.bool)

    def deciding_channel(self) -> list[str | None] | None:
        """For a scheme combined from channels, the channel that decided each text; None otherwise.

        The combined scheme reports the z of the channel whose weighted p-value is smallest, the one its
        bound rests on (:class:`sketchwm.channels.CombinedScheme`): that channel is named. Where no
        channel's z equals ``z``, the channel of smallest p-value. Unscored texts get None.

        Returns:
            B channel names (or None), or None without ``channels``.
        """
        if not self.channels:
            return None
        names = list(self.channels)
        ps = torch.stack([p.double().cpu() for p, _ in self.channels.values()])  # (J, B)
        zs = torch.stack([z.double().cpu() for _, z in self.channels.values()])  # (J, B)
        match = zs == self.z.double().cpu()[None]  # (J, B)
        smallest = ps.nan_to_num(nan=float("inf")).argmin(0)  # (B,)
        pick = torch.where(match.any(0), match.to(torch.uint8).argmax(0), smallest).tolist()  # (B,)
        ok = self.ok.tolist()
        return [names[j] if k else None for j, k in zip(pick, ok)]

    def _decided_by(self) -> list[str]:
        """Which rule decided each text: ``p-value``, ``calibrated tau_N`` or ``analytic tau_alpha``."""
        B = len(self)
        if self.threshold_source == "p-value":
            return ["p-value"] * B
        ta, tc = self.tau_analytic, self.tau_calibrated
        if tc is None:
            cal = [False] * B
        elif ta is None:
            cal = [True] * B
        else:
            cal = (tc.double() >= ta.double()).tolist()
        return ["calibrated tau_N" if c else "analytic tau_alpha" for c in cal]

    def explain(self, i: int) -> dict[str, Any]:
        """Which rule decided text ``i``, with which numbers.

        The one rule (:meth:`Detector.decide`) is ``score > τ_N`` and ``score >= τ_α``, reported as
        threshold = max(τ_N, τ_α) (or ``p_value <= alpha`` for a scheme with neither). The p-value and z are
        reported alongside; they can point the other way when the calibrated τ_N is stricter than
        the analytic τ_α (the model's null scores are wider than the analytic null), when the score
        carries a norm penalty (paper eq. 18-19) that z does not, or when the p-value comes from a
        normal approximation; the explanation then says why. For a scheme combined from channels it
        names the deciding channel (:meth:`deciding_channel`) with its p-value and z.

        Returns:
            ``{"decided_by": ..., "rule": ..., "explanation": str}`` (None for each when text ``i`` was not scored).

        Raises:
            IndexError: ``i`` outside [0, B).
        """
        cols = self._slice(i).columns()
        return {k: cols[k][0] for k in ("decided_by", "rule", "explanation")}

    def _slice(self, i: int) -> "DetectionResult":
        if not -len(self) <= i < len(self):
            raise IndexError(f"text {i} is outside the result's {len(self)} texts")
        sl = slice(i % len(self), i % len(self) + 1)

        def cut(t: "torch.Tensor | None") -> "torch.Tensor | None":
            return None if t is None else t[sl]

        return DetectionResult(
            score=self.score[sl], z=self.z[sl], p_value=self.p_value[sl], threshold=self.threshold[sl],
            is_watermarked=self.is_watermarked[sl], n_tokens=self.n_tokens[sl], threshold_source=self.threshold_source,
            alpha=self.alpha, key_fingerprint=self.key_fingerprint, scheme=self.scheme, p_value_method=self.p_value_method,
            errors=None if self.errors is None else self.errors[sl], tau_analytic=cut(self.tau_analytic),
            tau_calibrated=cut(self.tau_calibrated), n_scored=cut(self.n_scored),
            channels=None if self.channels is None else {k: (p[sl], z[sl]) for k, (p, z) in self.channels.items()})

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per text: the fields of :meth:`columns`, then the run's.

        Every record has ``status`` (``"ok"`` or ``"error"``); an unscored text has ``error`` (the
        reason) and null statistics. The run's fields (``threshold_source``, ``alpha``,
        ``key_fingerprint``, ``scheme``, ``p_value_method``) follow, and ``provenance`` (when set).
        """
        cols = self.columns()
        base = {"threshold_source": self.threshold_source, "alpha": self.alpha, "key_fingerprint": self.key_fingerprint,
                "scheme": self.scheme, "p_value_method": self.p_value_method}
        if self.provenance:
            base["provenance"] = self.provenance
        names = list(cols)
        return [{**dict(zip(names, row)), **base} for row in zip(*cols.values())]

    @staticmethod
    def channel_column(stat: str, channel: str) -> str:
        """The column of one channel's statistic: ``green_p_value``, ``keyed_sampling_z`` (``-`` → ``_``)."""
        return f"{channel.replace('-', '_')}_{stat}"

    def columns(self) -> dict[str, list[Any]]:
        """The per-text fields as columns, built from whole tensors: name → list of B values.

        Columns, in order:

        * ``status`` (``ok``/``error``), ``is_watermarked``;
        * ``score`` and ``threshold`` (the threshold applies to the score; None for a scheme decided by
          its p-value), ``rule`` (the decision rule with its thresholds), ``decided_by`` (``analytic
          tau_alpha``, ``calibrated tau_N`` or ``p-value``);
        * ``p_value``: the scheme's p-value (for a scheme combined from channels, the combined one);
          ``deciding_channel`` (:meth:`deciding_channel`; None for a scheme without channels);
          ``z``: the standardised statistic (for a combined scheme, the deciding channel's z);
        * for each channel C of a combined scheme, ``C_p_value`` and ``C_z`` (:meth:`channel_column`);
        * ``n_tokens``, ``n_scored``, ``explanation`` (which rule decided, with which numbers), ``error``.

        Statistics of an unscored text are None.
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

        by = self._decided_by()
        score, z, p = col(self.score, float), col(self.z, float), col(self.p_value, float)
        w = col(self.is_watermarked, bool)
        thr = [None] * B if self.threshold_source == "p-value" else col(self.threshold, float)
        ta, tc = col(self.tau_analytic, float), col(self.tau_calibrated, float)
        deciding = self.deciding_channel()
        per_channel: dict[str, list[Any]] = {}
        for name, (cp, cz) in (self.channels or {}).items():
            per_channel[self.channel_column("p_value", name)] = col(cp.double().cpu(), float)
            per_channel[self.channel_column("z", name)] = col(cz.double().cpu(), float)
        cols: dict[str, list[Any]] = {
            "status": ["ok" if k else "error" for k in ok],
            "is_watermarked": w,
            "score": score,
            "threshold": thr,
            "rule": decision_rules(self, thr, ta, tc, by, ok),
            "decided_by": [b if k else None for b, k in zip(by, ok)],
            "p_value": p,
            "deciding_channel": list(deciding) if deciding is not None else [None] * B,
            "z": z,
            **per_channel,
            "n_tokens": [int(v) for v in self.n_tokens.tolist()],
            "n_scored": col(self.n_scored, int),
            "explanation": explanations(self, score, z, p, thr, w, by, deciding, per_channel, ok),
            "error": list(self.errors) if self.errors is not None else [None] * B,
        }
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
            channels=_cat_channels(parts),
        )


def _cat_channels(parts: "Sequence[DetectionResult]") -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
    """The parts' channels concatenated (None unless every part has the same channels)."""
    names = [tuple(p.channels) if p.channels else None for p in parts]
    if names[0] is None or any(n != names[0] for n in names):
        return None
    return {k: (torch.cat([p.channels[k][0] for p in parts]), torch.cat([p.channels[k][1] for p in parts]))
            for k in names[0]}
