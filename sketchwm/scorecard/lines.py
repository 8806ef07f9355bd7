"""One scorecard line: a promise, its figure with an interval, n, and the verdict.

A line is PASS or FAIL by the promise's rule on the point figure (:attr:`Line.figure` against
:attr:`Line.threshold` in the promise's direction). In a tier that gates only on decisive lines
(``--quick``), a line whose interval straddles the threshold is printed as INFO: a small-n run
then never fails on noise, and still fails when the interval lies wholly on the wrong side.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Line", "clopper_pearson", "judge", "format_line", "line_key", "compare"]

Status = Literal["PASS", "FAIL", "INFO"]


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval of a binomial rate k/n: (lo, hi); (0, 1) when n = 0."""
    from scipy.stats import beta

    if n <= 0:
        return 0.0, 1.0
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


@dataclass
class Line:
    """One promise's outcome.

    Attributes:
        promise: short name, e.g. ``forgery: pair thief, N=1000``.
        figure: the measured value (NaN: not measurable; such a line FAILs, or is INFO where not gated).
        lo, hi: its 95% interval (NaN: none).
        n: the number of units the figure is computed on (texts, prompts, keys × texts...).
        threshold: the promise's bound on ``figure`` (NaN: reported only, always INFO).
        direction: ``"<="`` (figure must not exceed the threshold) or ``">="``.
        unit: how the figure reads (``rate``, ``ratio``, ``tokens/s``, ``texts``...).
        status: PASS, FAIL or INFO (:func:`judge`).
        gate_on_interval: the interval itself must clear the threshold (e.g. a spoof rate's upper bound).
        detail: JSON-serialisable context (n per group, the baseline compared with, notes).
    """

    promise: str
    figure: float
    lo: float = float("nan")
    hi: float = float("nan")
    n: int = 0
    threshold: float = float("nan")
    direction: Literal["<=", ">="] = "<="
    unit: str = ""
    status: Status = "INFO"
    gate_on_interval: float = float("nan")
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The line as JSON values (NaN as None)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Line":
        """The inverse of :meth:`as_dict`: None back to NaN in the float fields."""
        floats = {"figure", "lo", "hi", "threshold", "gate_on_interval"}
        return cls(**{k: float("nan") if v is None and k in floats else v for k, v in d.items()})


def _meets(x: float, t: float, direction: str) -> bool:
    return x <= t if direction == "<=" else x >= t


def judge(line: Line, decisive_only: bool) -> Line:
    """Set ``line.status`` from its figure, interval and threshold (module doc) and return it.

    The point rule: ``figure`` meets ``threshold`` in ``direction``, and where ``gate_on_interval`` is set,
    the interval's far end (``hi`` for ``<=``, ``lo`` for ``>=``) meets it too. With ``decisive_only``, a line
    is PASS only when its whole interval meets the threshold, FAIL only when its whole interval misses it,
    and INFO otherwise (a line without an interval is then INFO).
    """
    if math.isnan(line.threshold):
        line.status = "INFO"
        return line
    if math.isnan(line.figure):
        line.status = "INFO" if decisive_only else "FAIL"
        return line
    far = line.hi if line.direction == "<=" else line.lo
    point = _meets(line.figure, line.threshold, line.direction)
    if not math.isnan(line.gate_on_interval) and not math.isnan(far):
        point = point and _meets(far, line.gate_on_interval, line.direction)
    if not decisive_only:
        line.status = "PASS" if point else "FAIL"
        return line
    if math.isnan(line.lo) or math.isnan(line.hi):
        line.status = "INFO"
        return line
    near = line.lo if line.direction == "<=" else line.hi
    gate = line.gate_on_interval
    if _meets(far, line.threshold, line.direction) and (math.isnan(gate) or _meets(far, gate, line.direction)):
        line.status = "PASS"
    elif not _meets(near, line.threshold, line.direction) or (not math.isnan(gate) and not _meets(near, gate, line.direction)):
        line.status = "FAIL"
    else:
        line.status = "INFO"
    return line


def _num(x: float, unit: str) -> str:
    if math.isnan(x):
        return "n/a"
    if unit in ("tokens/s",) or abs(x) >= 1e5:
        return f"{x:.3g}"
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.2f}"


def format_line(line: Line) -> str:
    """``PASS|FAIL|INFO  <promise>  <figure> [<lo>, <hi>]  (n=…; need <direction> <threshold>)``."""
    iv = "" if math.isnan(line.lo) or math.isnan(line.hi) else f" [{_num(line.lo, line.unit)}, {_num(line.hi, line.unit)}]"
    need = "" if math.isnan(line.threshold) else f"; need {line.direction} {_num(line.threshold, line.unit)}"
    if not math.isnan(line.gate_on_interval):
        need += f", bound {line.direction} {_num(line.gate_on_interval, line.unit)}"
    unit = f" {line.unit}" if line.unit and line.unit not in ("rate",) else ""
    return f"{line.status:<4}  {line.promise}  {_num(line.figure, line.unit)}{unit}{iv}  (n={line.n}{need})"


def line_key(line: dict[str, Any]) -> str:
    """A line's identity across runs (a :meth:`Line.as_dict`): its subject (the scheme or baseline it is about)
    and its promise without the parenthesised figures (``(4.00 vs 4.00)``, ``(vs red-green-dlm 0.62 …)``)."""
    promise = re.sub(r"\s*\([^()]*\)", "", line["promise"]).strip()
    subject = (line.get("detail") or {}).get("subject")
    return f"[{subject}] {promise}" if subject else promise


def compare(current: list[dict[str, Any]], reference: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Lines of ``current`` against a reference run's (both :meth:`Line.as_dict` lists, e.g. a committed
    ``scorecard.json``'s ``lines``): (regressed, improved). Regressed: a line PASS in the reference that is FAIL
    now, or missing now; improved: FAIL in the reference, PASS now. Each entry is ``"<key>: <was> -> <now>"``."""
    now = {line_key(x): x["status"] for x in current}
    regressed, improved = [], []
    for ref in reference:
        k, was = line_key(ref), ref["status"]
        got = now.get(k, "missing")
        if was == "PASS" and got in ("FAIL", "missing"):
            regressed.append(f"{k}: {was} -> {got}")
        elif was == "FAIL" and got == "PASS":
            improved.append(f"{k}: {was} -> {got}")
    return regressed, improved
