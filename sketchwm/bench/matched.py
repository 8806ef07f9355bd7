"""Matched comparisons of ``sketchwm leaderboard``: every scheme at the same cost, from its strength sweep.

A *curve* is one scheme entry of the config swept over its strength knob
(:class:`sketchwm.components.Strength`) in one decoding regime; its *points* are the sweep's
settings. Every figure of a point is estimated from the texts of all its keys pooled, with a 95%
percentile bootstrap interval over texts (:func:`scipy.stats.bootstrap`) and the standard
deviation of the per-key values beside it.

Three matched rules, each stated on the page:

* **Pareto / equal KL** (Gloaguen et al. 2025 plot TPR against log-perplexity over a δ sweep):
  the figure at a KL budget b is read off the curve by linear interpolation in KL/token between
  the two adjacent settings (in strength order) whose KL brackets b; the interval bounds are
  interpolated the same way. No extrapolation: a budget outside the swept KL range is n/a. A
  scheme that does not tilt (KL = 0 at every setting) has its figure at every budget.
* **MarkMyWords** (Piet et al. 2023): per scheme and regime, the smallest median tokens-to-detect
  among the swept settings whose mean oracle log-perplexity is within q (2%, 10%) of the
  unwatermarked texts' of the same model and regime (settings, not interpolated).
* **WaterBench** (Tu et al. 2024): each scheme at the strength s* where clean TPR at 1% FPR = 0.9,
  s* linearly interpolated in the knob between adjacent settings; every other figure
  interpolated at s* the same way.

The KL axis. ``kl`` of a point is the KL of the distributions tokens are drawn from,
softmax(l̃/T) against softmax(l/T) at the regime's temperature T (the ``kl_sampled`` column of the
results), when every point of every curve of the regime has it; otherwise (results written before
that column) the KL of the model's marginals, softmax(l̃) against softmax(l), before the temperature
(the ``kl`` column). The two agree at T = 1. :attr:`Curve.kl_axis` says which (``sampled`` or
``model``); both stay in ``kl_sampled`` / ``kl_model``.

A difference is a *tie* when the two 95% intervals overlap; the winner of a column is the best
point estimate together with every scheme tied with it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Estimate", "Point", "Curve", "estimate", "curves", "references", "at_kl", "markmywords", "waterbench",
           "winners", "KL_BUDGETS", "MMW_TOLERANCES", "WB_TARGET", "TTD_INF"]

#: KL/token budgets (nats) of the equal-distortion comparison
KL_BUDGETS = (0.05, 0.1, 0.2)
#: MarkMyWords quality tolerances (relative log-perplexity increase over unwatermarked)
MMW_TOLERANCES = (0.02, 0.10)
#: WaterBench's detection target (clean TPR at 1% FPR)
WB_TARGET = 0.9
#: stand-in for an infinite tokens-to-detect inside the bootstrap (mapped back to inf)
TTD_INF = 1e9
_N_RESAMPLES = 999


@dataclass
class Estimate:
    """A figure with its uncertainty: ``mean`` (the statistic on all texts), 95% bootstrap ``lo``/``hi``
    over texts, ``key_sd`` (standard deviation of the per-key statistic, NaN with one key), ``n`` texts,
    and ``note`` (a footnote key, "" when none)."""

    mean: float
    lo: float
    hi: float
    key_sd: float = float("nan")
    n: int = 0
    note: str = ""

    @property
    def ok(self) -> bool:
        """Whether there is a value (not NaN)."""
        return not (isinstance(self.mean, float) and math.isnan(self.mean))


NA = Estimate(float("nan"), float("nan"), float("nan"))


def estimate(values: np.ndarray, keys: np.ndarray | None = None, stat: str = "mean", seed: int = 0) -> Estimate:
    """The statistic of ``values`` (n,) float with a 95% percentile bootstrap interval over texts and the
    spread over ``keys`` (n,) (per-key statistic's standard deviation).

    Args:
        values: per-text values (NaN dropped; ``inf`` allowed for ``median``).
        keys: per-text key index, or None; stat: ``mean`` or ``median``; seed: bootstrap seed.

    Returns:
        :class:`Estimate` (NA when no finite-or-inf value).
    """
    from scipy.stats import bootstrap

    v = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(v)
    v = v[keep]
    if v.size == 0:
        return NA
    f = np.mean if stat == "mean" else np.median
    work = np.where(np.isinf(v), TTD_INF, v)
    back = lambda x: float(np.inf) if x >= TTD_INF / 2 else float(x)  # noqa: E731
    m = back(f(work))
    lo = hi = m
    if v.size >= 2 and np.ptp(work) > 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bootstrap((work,), f, n_resamples=_N_RESAMPLES, confidence_level=0.95, method="percentile",
                            vectorized=True, random_state=np.random.default_rng(seed))
        lo, hi = back(res.confidence_interval.low), back(res.confidence_interval.high)
    sd = float("nan")
    if keys is not None:
        k = np.asarray(keys)[keep]
        per = [f(work[k == u]) for u in np.unique(k)]
        if len(per) >= 2:
            sd = float(np.std(per, ddof=1)) if np.all(np.asarray(per) < TTD_INF / 2) else float("inf")
    return Estimate(m, lo, hi, sd, int(v.size))


@dataclass
class Point:
    """One setting of a curve: its ``label`` (the scheme column), knob value (NaN: no knob), whether it
    is the scheme's default strength, and its figures ``stats`` (name → :class:`Estimate`): ``tpr``,
    ``kl``, ``ttd``, ``logppl``, ``diversity``, ``first_token`` (first-token match across samples),
    ``distinct2``, ``tpr:<family>@<strength>``."""

    label: str
    knob_value: float
    default: bool
    stats: dict[str, Estimate] = field(default_factory=dict)

    def get(self, name: str) -> Estimate:
        """The figure ``name`` (NA when absent)."""
        return self.stats.get(name, NA)


@dataclass
class Curve:
    """A scheme entry's sweep in one regime: ``name`` (the entry's label), the scheme's ``knob`` ("" for
    none), its points from the weakest setting to the strongest (the knob's declared direction), the
    detector's minimum length ``min_tokens`` and the tokens-to-detect grid step ``tokens_step`` (None
    when the results do not say), and which KL ``kl`` is (``kl_axis``: ``sampled``, after the sampler's
    temperature, or ``model``, before it; module doc)."""

    regime: str
    name: str
    knob: str
    points: list[Point]
    min_tokens: int | None = None
    tokens_step: int | None = None
    kl_axis: str = "model"

    @property
    def swept(self) -> bool:
        """Whether the curve has more than one setting of a knob."""
        return bool(self.knob) and len(self.points) > 1

    @property
    def tilts(self) -> bool:
        """Whether any setting changes the sampling distribution (KL/token > 1e-9)."""
        return any(p.get("kl").ok and p.get("kl").mean > 1e-9 for p in self.points)


def _text_rows(df: pd.DataFrame, kind: str = "clean") -> pd.DataFrame:
    return df[(df["row_type"] == "text") & (df["cell_kind"] == kind)]


def _col(g: pd.DataFrame, c: str) -> np.ndarray:
    return pd.to_numeric(g[c], errors="coerce").to_numpy(np.float64) if c in g else np.full(len(g), np.nan)


def references(df: pd.DataFrame) -> dict[str, dict[str, Estimate]]:
    """Unwatermarked reference figures per regime: ``logppl`` (null report split), ``diversity`` and
    ``first_token`` (first-token match across samples, results that record it).

    The same null texts appear in every clean cell of a regime (shared by schemes and keys): one cell's
    copy per (backend, length, prompt set) is used.
    """
    out: dict[str, dict[str, Estimate]] = {}
    for regime, g in df[df["cell_kind"] == "clean"].groupby("regime", sort=False):
        refs: dict[str, Estimate] = {}
        for row_type, col, name in (("null_fpr", "ppl", "logppl"), ("null_diversity", "diversity", "diversity"),
                                    ("null_diversity", "first_token_match", "first_token")):
            r = g[g["row_type"] == row_type]
            if r.empty:
                continue
            first = r.groupby(["backend", "length", "prompt_set"])["cell_hash"].transform("first")
            r = r[r["cell_hash"] == first]
            v = _col(r, col)
            if name == "logppl":
                v = np.log(v)
            e = estimate(v)
            if e.ok:
                refs[name] = e
        out[str(regime)] = refs
    return out


def curves(df: pd.DataFrame) -> list[Curve]:
    """Every (regime, scheme entry) curve with its points' figures (see :class:`Point`), in result order."""
    df = df.copy()
    for c, d in (("regime", "default"), ("curve", None), ("knob", ""), ("knob_value", np.nan), ("default_strength", True)):
        if c not in df:
            df[c] = df["scheme"] if c == "curve" else d
    clean = _text_rows(df)
    attacked = _text_rows(df, "attack")
    div = df[df["row_type"] == "diversity"]
    dist = df[(df["row_type"] == "summary") & (df["metric"] == "distinct-2") & (df["cell_kind"] == "clean")]
    out: list[Curve] = []
    if "regime_index" in clean:  # regimes in config order
        rank = clean.groupby("regime")["regime_index"].min()
        clean = clean.assign(_r=clean["regime"].map(rank)).sort_values("_r", kind="stable")
    for (regime, curve), g in clean.groupby(["regime", "curve"], sort=False):
        pts = []
        for label, h in g.groupby("scheme", sort=False):
            keys = h["key_index"].to_numpy()
            st: dict[str, Estimate] = {}
            st["tpr"] = estimate(_col(h, "detected"), keys)
            st["kl_model"] = st["kl"] = estimate(_col(h, "kl"), keys)
            if "kl_sampled" in h and h["kl_sampled"].notna().any():
                st["kl_sampled"] = estimate(_col(h, "kl_sampled"), keys)
            st["ttd"] = estimate(_col(h, "tokens_to_detect"), keys, "median")
            st["logppl"] = estimate(np.log(_col(h, "ppl")), keys)
            d = div[(div["regime"] == regime) & (div["scheme"] == label)]
            st["diversity"] = estimate(_col(d, "diversity"), d["key_index"].to_numpy())
            st["first_token"] = estimate(_col(d, "first_token_match"), d["key_index"].to_numpy())
            s = dist[(dist["regime"] == regime) & (dist["scheme"] == label)]
            st["distinct2"] = estimate(_col(s, "value"))
            st["pmin"] = Estimate(float(np.nanmin(_col(h, "p_value"))), np.nan, np.nan) if len(h) else NA
            a = attacked[(attacked["regime"] == regime) & (attacked["scheme"] == label)]
            for (fam, strength), ah in a.groupby(["attack_family", "strength"]):
                st[f"tpr:{fam}@{strength:g}"] = estimate(_col(ah, "detected"), ah["key_index"].to_numpy())
            kv = float(h["knob_value"].iloc[0]) if pd.notna(h["knob_value"].iloc[0]) else float("nan")
            pts.append(Point(str(label), kv, bool(h["default_strength"].iloc[0]), st))
        lower = "knob_stronger" in g and str(g["knob_stronger"].iloc[0]) == "lower"
        pts.sort(key=lambda p: (math.isnan(p.knob_value), -p.knob_value if lower else p.knob_value))
        mt = pd.to_numeric(g["min_tokens"], errors="coerce").max() if "min_tokens" in g else np.nan
        step = pd.to_numeric(g["tokens_step"], errors="coerce").max() if "tokens_step" in g else np.nan
        out.append(Curve(str(regime), str(curve), str(g["knob"].iloc[0] or ""), pts,
                         int(mt) if pd.notna(mt) else None, int(step) if pd.notna(step) else None))
    for regime in dict.fromkeys(c.regime for c in out):  # one KL axis per regime (module doc)
        rc = [c for c in out if c.regime == regime]
        measured = [p for c in rc for p in c.points if p.get("kl_model").ok]  # points with a KL at all
        if measured and all(p.get("kl_sampled").ok for p in measured):
            for c in rc:
                c.kl_axis = "sampled"
                for p in c.points:
                    p.stats["kl"] = p.stats["kl_sampled"]
    return out


def _lerp(a: Estimate, b: Estimate, t: float, note: str = "") -> Estimate:
    """Estimate at fraction t ∈ [0, 1] from ``a`` to ``b`` (mean and both bounds interpolated)."""
    if not (a.ok and b.ok):
        return NA
    f = lambda x, y: x + t * (y - x) if np.isfinite(x) and np.isfinite(y) else (x if t < 0.5 else y)  # noqa: E731
    sd = f(a.key_sd, b.key_sd) if np.isfinite(a.key_sd) and np.isfinite(b.key_sd) else float("nan")
    return Estimate(f(a.mean, b.mean), f(a.lo, b.lo), f(a.hi, b.hi), sd, min(a.n, b.n), note)


def at_kl(c: Curve, stat: str, budget: float) -> Estimate:
    """``stat`` of curve ``c`` at KL/token = ``budget`` (module doc: linear in KL between adjacent
    settings, no extrapolation). Notes: ``distortion-free`` (KL 0 everywhere: the best setting's figure),
    ``outside-sweep`` (n/a: the budget lies outside the swept KL range)."""
    pts = [p for p in c.points if p.get("kl").ok and p.get(stat).ok]
    if not pts:
        return NA
    if not c.tilts:
        best = max(pts, key=lambda p: p.get(stat).mean if stat != "ttd" else -p.get(stat).mean)
        e = best.get(stat)
        return Estimate(e.mean, e.lo, e.hi, e.key_sd, e.n, "distortion-free")
    for a, b in zip(pts, pts[1:]):
        xa, xb = a.get("kl").mean, b.get("kl").mean
        if min(xa, xb) <= budget <= max(xa, xb):
            t = 0.0 if xb == xa else (budget - xa) / (xb - xa)
            return _lerp(a.get(stat), b.get(stat), t)
    if len(pts) == 1 and abs(pts[0].get("kl").mean - budget) <= 1e-9:
        return pts[0].get(stat)
    xs = [p.get("kl").mean for p in pts]
    return Estimate(float("nan"), float("nan"), float("nan"), note=f"outside-sweep:{min(xs):.3g}-{max(xs):.3g}")


def markmywords(c: Curve, ref_logppl: Estimate | None, tol: float) -> tuple[Estimate, str]:
    """MarkMyWords' size: the smallest median tokens-to-detect among settings with mean oracle log-PPL
    <= (1 + tol) × the unwatermarked mean; returns (estimate, the setting's label or "").
    Notes: ``no-oracle`` (no log-PPL measured), ``none-within`` (no setting within the tolerance)."""
    if ref_logppl is None or not ref_logppl.ok or not any(p.get("logppl").ok for p in c.points):
        return Estimate(float("nan"), float("nan"), float("nan"), note="no-oracle"), ""
    ok = [p for p in c.points if p.get("logppl").ok and p.get("logppl").mean <= (1 + tol) * ref_logppl.mean
          and p.get("ttd").ok]
    if not ok:
        return Estimate(float("nan"), float("nan"), float("nan"), note="none-within"), ""
    best = min(ok, key=lambda p: (p.get("ttd").mean, p.get("ttd").hi))
    e = best.get("ttd")
    return Estimate(e.mean, e.lo, e.hi, e.key_sd, e.n, "inf" if np.isinf(e.mean) else ""), best.label


def waterbench(c: Curve, stats: list[str], target: float = WB_TARGET) -> tuple[float, dict[str, Estimate], str]:
    """WaterBench's operating point: (s*, {stat: estimate at s*}, note). Notes: ``weakest`` (TPR >= target
    already at the weakest setting: that setting), ``never`` (TPR < target at every setting: n/a),
    ``single`` (one setting, not tuned: its figures)."""
    pts = [p for p in c.points if p.get("tpr").ok]
    if not pts:
        return float("nan"), {}, "never"
    if len(pts) == 1 or not c.knob:
        p = pts[0]
        return p.knob_value, {s: p.get(s) for s in stats}, "single"
    if pts[0].get("tpr").mean >= target:
        return pts[0].knob_value, {s: pts[0].get(s) for s in stats}, "weakest"
    for a, b in zip(pts, pts[1:]):
        ya, yb = a.get("tpr").mean, b.get("tpr").mean
        if ya < target <= yb:
            t = (target - ya) / (yb - ya)
            s_star = a.knob_value + t * (b.knob_value - a.knob_value)
            return s_star, {s: _lerp(a.get(s), b.get(s), t) for s in stats}, ""
    return float("nan"), {}, "never"


def winners(values: dict[str, Estimate], higher: bool) -> list[str]:
    """The best point estimate's name and every name whose 95% interval overlaps the best's (a tie).

    Args:
        values: name → estimate (NA entries are ignored); higher: whether larger is better.

    Returns:
        names, the best first ([] when no value).
    """
    ok = {k: v for k, v in values.items() if v.ok and np.isfinite(v.mean)}  # n/a and inf win nothing
    if not ok:
        return []
    best = max(ok, key=lambda k: ok[k].mean if higher else -ok[k].mean)
    b = ok[best]
    tied = [k for k, v in ok.items() if k != best and _overlap(v, b)]
    tied.sort(key=lambda k: -ok[k].mean if higher else ok[k].mean)
    return [best, *tied]


def _overlap(a: Estimate, b: Estimate) -> bool:
    lo_a, hi_a = (a.lo, a.hi) if np.isfinite(a.lo) or np.isinf(a.lo) else (a.mean, a.mean)
    lo_b, hi_b = (b.lo, b.hi) if np.isfinite(b.lo) or np.isinf(b.lo) else (b.mean, b.mean)
    if any(isinstance(x, float) and math.isnan(x) for x in (lo_a, hi_a, lo_b, hi_b)):
        return a.mean == b.mean
    return lo_a <= hi_b and lo_b <= hi_a


def attack_stats(cs: list[Curve]) -> list[str]:
    """The ``tpr:<family>@<strength>`` figures present, strengths 0.1 and 0.3 when swept (else all)."""
    names = sorted({k for c in cs for p in c.points for k in p.stats if k.startswith("tpr:")})
    pick = [n for n in names if n.rsplit("@", 1)[1] in ("0.1", "0.3")]
    return pick or names


def as_dict(e: Estimate) -> dict[str, Any]:
    """JSON-friendly dict of an estimate."""
    return {"mean": e.mean, "lo": e.lo, "hi": e.hi, "key_sd": e.key_sd, "n": e.n, "note": e.note}
