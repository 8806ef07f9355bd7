"""The words of a detection's decisions, for :meth:`DetectionResult.columns` (its ``rule`` and
``explanation`` columns): the rule that decided each text with its thresholds, and why a text's
p-value points the other way than its decision when it does.

Each function takes the :class:`~sketchwm.detection_result.DetectionResult` (``res``) whose run-level
fields (α, threshold source, p-value method, channels) it reads, and per-text lists of its columns.
"""

from __future__ import annotations

from typing import Any

__all__ = ["decision_rules", "explanations", "disagreement"]


def decision_rules(res: Any, thr: list[Any], ta: list[Any], tc: list[Any], by: list[str],
                   ok: list[bool]) -> list[str | None]:
    """The decision rule of each text, with its thresholds (None where not scored); one string per
    distinct set of thresholds (texts of one length share them)."""
    if res.threshold_source == "p-value":
        rule = (f"p_value <= alpha ({res.alpha:g}); the scheme has no closed-form threshold and no calibration "
                "was given")
        return [rule if k else None for k in ok]
    cache: dict[tuple[Any, ...], str] = {}
    out: list[str | None] = []
    for t, a, c, b, k in zip(thr, ta, tc, by, ok):
        if not k:
            out.append(None)
            continue
        rule = cache.get((t, a, c, b))
        if rule is None:
            if a is not None and c is not None:
                rule = (f"score > tau_N = {c:.4g} and score >= tau_alpha = {a:.4g} (threshold = max(tau_N, "
                        f"tau_alpha) = {t:.4g})")
            else:
                rule = f"score {'>' if b.startswith('calibrated') else '>='} threshold ({b}) = {t:.4g}"
            cache[(t, a, c, b)] = rule
        out.append(rule)
    return out


def explanations(res: Any, score: list[Any], z: list[Any], p: list[Any], thr: list[Any], w: list[Any],
                 by: list[str], deciding: list[Any] | None, per_channel: dict[str, list[Any]],
                 ok: list[bool]) -> list[str | None]:
    """Each text's explanation (None where not scored): the verdict, the rule that decided it with its
    numbers, the deciding channel with its p-value and z, and, when the p-value points the other
    way, why (:func:`disagreement`)."""
    a = res.alpha
    verdict = {True: "watermarked", False: "not watermarked"}
    if res.threshold_source == "p-value":
        sign = {True: "<=", False: ">"}
        text = [f"{verdict[v]}: p-value {q:.3g} {sign[v]} alpha {a:g} (the scheme has no closed-form threshold "
                "and no calibration was given)" if k else None for q, v, k in zip(p, w, ok)]
    else:
        passes = {True: "passes", False: "does not pass"}
        text = [f"{verdict[v]}: score {s:.4g} {passes[v]} the threshold {t:.4g} ({b} at alpha {a:g}); p-value {q:.3g}"
                if k else None for s, t, b, q, v, k in zip(score, thr, by, p, w, ok)]
    if deciding is not None:
        ps = {d: per_channel[res.channel_column("p_value", d)] for d in set(deciding) if d is not None}
        zs = {d: per_channel[res.channel_column("z", d)] for d in ps}
        text = [f"{x}; deciding channel {d} (its p-value {ps[d][i]:.3g}, z {zs[d][i]:.3g})" if d is not None else x
                for i, (x, d) in enumerate(zip(text, deciding))]
    if res.threshold_source != "p-value":
        for i, (q, v, k) in enumerate(zip(p, w, ok)):
            if k and (q <= a) != v:
                text[i] += disagreement(res, score[i], z[i], q, v, by[i])
    return text


def disagreement(res: Any, s: float, z: float, p: float, w: bool, by: str) -> str:
    """Why a text's p-value points the other way than its decision (appended to its explanation)."""
    parts = [f"p = {p:.3g} {'<=' if p <= res.alpha else '>'} alpha = {res.alpha:g} and z = {z:.3g}, but the "
             "decision is the score rule"]
    if by == "calibrated tau_N":
        parts.append("the calibrated threshold, from this model's unwatermarked texts, is stricter than the "
                     "analytic null the p-value assumes")
    if "normal" in res.p_value_method.lower() or "phi" in res.p_value_method.lower():
        parts.append(f"the p-value is a normal approximation ({res.p_value_method})")
    if abs(s - z) > 1e-9 * max(1.0, abs(z)) and res.channels is None:
        parts.append("the score is not z: it includes the scheme's norm penalty (paper eq. 18), which z and "
                     "the p-value leave out")
    return ". " + "; ".join(parts)
