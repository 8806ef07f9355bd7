"""``sketchwm leaderboard``: Markdown tables, CSV pivots and one offline HTML page from bench results.

Summary rows (one per cell and metric) are averaged over keys and prompt sets (the spread over keys
is shown as ± one standard deviation). Tables, one per task:

* **power** — clean watermarked texts: TPR at 1% / 0.1% FPR (one rule, conformal τ_N), analytic-only
  TPR, observed FPR on the disjoint null split, ROC AUC, tokens-to-detect;
* **robustness: <family>** — TPR at 1% FPR after each attack of the family, per strength;
* **quality** — oracle perplexity (ratio), semantic similarity after each attack family;
* **stealing** — spoof rate and scrub rate per stolen-sample count;
* **speed** — generation and detection throughput;
* **theory checks** — the paper's statements measured (:mod:`sketchwm.bench.theory`): KL chain rule,
  Fisher ratio per η scale, per-key soundness on human text, edit-sensitivity bound per k edits.

The HTML page has every asset inline (CSS, a few lines of JavaScript for sorting, plots as base64
PNG), so it works from ``file://`` with no network.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .results import read_results

__all__ = ["Table", "aggregate", "tables", "build_leaderboard", "README_START", "README_END"]

README_START = "<!-- sketchwm-leaderboard:start -->"
README_END = "<!-- sketchwm-leaderboard:end -->"
#: columns shown first (in this order); the rest keep their order
_FIRST = ("tpr@1%fpr", "tpr@0.1%fpr", "tpr-analytic@1%", "fpr@1%", "roc-auc", "tokens-to-detect", "oracle-ppl-ratio",
          "oracle-ppl", "kl-per-token")
_GROUP = ["regime", "scheme", "length", "cell_kind", "attack", "attack_family", "strength", "train_n", "metric"]


@dataclass
class Table:
    """One leaderboard table: ``mean`` / ``std`` (schemes × columns), per-column ``higher`` (True/False/None) and ``unit``."""

    task: str
    title: str
    mean: pd.DataFrame
    std: pd.DataFrame
    higher: dict[str, bool | None] = field(default_factory=dict)
    unit: dict[str, str] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """A file/HTML id for the table."""
        return "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-")


def _with_regime(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the sweep/regime columns of current results (older results: one ``default`` regime)."""
    if "regime" in df and "curve" in df:
        return df
    df = df.copy()
    for c, d in (("regime", "default"), ("knob", ""), ("knob_value", np.nan), ("default_strength", True)):
        if c not in df:
            df[c] = d
    if "curve" not in df:
        df["curve"] = df["scheme"]
    return df


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """Summary rows averaged over keys and prompt sets: one row per (regime, scheme, length, cell, metric)."""
    s = _with_regime(df)
    s = s[s["row_type"] == "summary"].copy()
    s["higher_is_better"] = s["higher_is_better"].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else bool(v))
    g = s.groupby(_GROUP, dropna=False, sort=True)
    out = g["value"].agg(mean="mean", std="std", keys="count").reset_index()
    meta = g[["unit", "higher_is_better", "task"]].first().reset_index(drop=True)
    out[["unit", "higher_is_better", "task"]] = meta.values
    notes = g["note"].agg(lambda x: "; ".join(sorted({n for n in x if n}))).reset_index(drop=True)
    out["note"] = notes.values
    return out


_MULTI_REGIME = False  # set per build: whether row names carry the regime


def _row_name(r: pd.Series, multi_length: bool) -> str:
    name = f"{r['scheme']} (L={int(r['length'])})" if multi_length else str(r["scheme"])
    return f"{name} · {r['regime']}" if _MULTI_REGIME else name


def _pivot(rows: pd.DataFrame, col: pd.Series, multi_length: bool, order: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = rows.assign(_row=[_row_name(r, multi_length) for _, r in rows.iterrows()], _col=col.values)
    mean = rows.pivot_table(index="_row", columns="_col", values="mean", aggfunc="mean", dropna=False)
    std = rows.pivot_table(index="_row", columns="_col", values="std", aggfunc="mean", dropna=False)
    cols = [c for c in dict.fromkeys(rows["_col"]) if c in mean.columns]
    cols.sort(key=lambda c: next((i for i, f in enumerate(_FIRST) if str(c).startswith(f)), len(_FIRST)))
    mean, std = mean.reindex(columns=cols), std.reindex(columns=cols)
    idx = [s for s in order if s in mean.index] + [s for s in mean.index if s not in order]
    mean.index.name = std.index.name = "scheme"
    return mean.reindex(idx), std.reindex(index=idx, columns=cols)


def _sort_by_first(t: "Table") -> None:
    """Sort ``t``'s rows by its first column with a declared direction (best first, NaN last)."""
    for c in t.mean.columns:
        h = t.higher.get(c)
        if h is None:
            continue
        v = t.mean[c].astype(float)
        key = (-v if h else v).fillna(np.inf)
        idx = key.sort_values(kind="stable").index
        t.mean, t.std = t.mean.loc[idx], t.std.loc[idx]
        return


def best_rows(t: "Table", col: str) -> set[str]:
    """Rows holding the best value of ``col`` (declared direction), ties at the shown precision included."""
    h = t.higher.get(col)
    if h is None:
        return set()
    v = t.mean[col].astype(float)
    v = v[np.isfinite(v)]
    if v.empty:
        return set()
    best = v.max() if h else v.min()
    return {i for i, x in v.items() if _fmt(x, None) == _fmt(best, None)}


def tables(agg: pd.DataFrame) -> list[Table]:
    """The leaderboard tables (see module doc) from :func:`aggregate` output."""
    multi = agg["length"].nunique() > 1
    order = list(dict.fromkeys(_row_name(r, multi) for _, r in agg.iterrows()))
    out: list[Table] = []

    def make(task: str, title: str, rows: pd.DataFrame, col: pd.Series) -> None:
        if rows.empty:
            return
        mean, std = _pivot(rows, col, multi, order)
        hib = dict(zip(col.values, rows["higher_is_better"]))
        unit = dict(zip(col.values, rows["unit"]))
        t = Table(task, title, mean, std, hib, unit)
        _sort_by_first(t)
        out.append(t)

    clean = agg[agg["cell_kind"] == "clean"]
    power = clean[clean["task"].isin(["power", "robustness"])]
    make("power", "Clean power", power, power["metric"])
    att = agg[(agg["cell_kind"] == "attack") & (agg["metric"] == "tpr@1%fpr")]
    for fam in sorted(att["attack_family"].unique()):
        rows = att[att["attack_family"] == fam].sort_values(["attack", "strength"])
        make("robustness", f"Robustness: {fam}", rows, rows["attack"] + " s=" + rows["strength"].map("{:g}".format))
    q_clean = clean[clean["task"] == "quality"]
    q_att = agg[agg["cell_kind"].isin(["attack", "scrub"]) & (agg["task"] == "quality")]
    if not q_att.empty:  # one column per family and metric: mean over its attacks and strengths
        q_att = (q_att.groupby(["scheme", "length", "attack_family", "metric"], as_index=False)
                 .agg(mean=("mean", "mean"), std=("std", "mean"), unit=("unit", "first"),
                      higher_is_better=("higher_is_better", "first")))
        q_att["col"] = q_att["metric"] + ": " + q_att["attack_family"]
    q = pd.concat([q_clean.assign(col=q_clean["metric"]), q_att], ignore_index=True) if not q_att.empty else q_clean.assign(col=q_clean["metric"])
    make("quality", "Quality", q, q["col"])
    st = agg[agg["task"] == "stealing"].sort_values(["metric", "train_n", "strength"])
    if not st.empty:
        col = st["metric"] + " n=" + st["train_n"].astype(int).astype(str) + np.where(
            st["cell_kind"] == "scrub", " s=" + st["strength"].map("{:g}".format), "")
        make("stealing", "Stealing", st, col)
    sp = clean[clean["task"] == "speed"]
    make("speed", "Speed", sp, sp["metric"])
    th = agg[agg["task"] == "theory"]
    if not th.empty:  # columns: chain rule, Fisher ratio per scale (largest first), soundness, edits per k
        kind_order = {"theory-kl": 0, "theory-fisher": 1, "theory-sound": 2, "theory-edit": 3}
        th = th.assign(_k=th["cell_kind"].map(kind_order).fillna(9),
                       _s=np.where(th["cell_kind"] == "theory-fisher", -th["strength"], th["strength"]))
        th = th.sort_values(["_k", "metric", "_s"], kind="stable")
        col = th["metric"] + np.where(th["cell_kind"] == "theory-fisher", " s=" + th["strength"].map("{:g}".format),
                                      np.where(th["cell_kind"] == "theory-edit",
                                               " k=" + th["strength"].map("{:g}".format), ""))
        make("theory", "Theory checks", th, pd.Series(col, index=th.index))
    return out


def _fmt(m: float, s: float) -> str:
    if m is None or not np.isfinite(m):
        return "inf" if m is not None and np.isposinf(m) else "n/a"
    txt = f"{m:.3g}" if abs(m) >= 1000 else f"{m:.3f}"
    if s is not None and np.isfinite(s) and s > 0:
        txt += f" ± {s:.2g}"
    return txt


def _arrow(h: bool | None) -> str:
    return " ↑" if h is True else (" ↓" if h is False else "")


def to_markdown(t: Table) -> str:
    """A GitHub Markdown table (↑ higher is better, ↓ lower; ± one standard deviation over keys)."""
    cols = list(t.mean.columns)
    head = "| scheme | " + " | ".join(f"{c}{_arrow(t.higher.get(c))}" for c in cols) + " |"
    lines = [f"### {t.title}", "", head, "|" + "---|" * (len(cols) + 1)]
    best = {c: best_rows(t, c) for c in cols}
    for name in t.mean.index:
        cells = [("**" + _fmt(t.mean.at[name, c], t.std.at[name, c]) + "** ★" if name in best[c]
                  else _fmt(t.mean.at[name, c], t.std.at[name, c])) for c in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "★ best value of the column (several when tied at the shown precision)."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- plots
def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def scheme_colours(names: list[str]) -> dict[str, str]:
    """One colour per scheme entry (curve), the same on every plot: tab10, then tab20, in sorted name order."""
    import matplotlib

    cmap = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors + matplotlib.colormaps["tab20"].colors[1::2]]
    return {n: cmap[i % len(cmap)] for i, n in enumerate(sorted(set(names)))}


def _default_view(df: pd.DataFrame, agg: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Rows of the first regime at each scheme's default strength, relabelled by curve (for the
    one-line-per-scheme plots), the matching ``agg`` rows, and the regime's name."""
    df = _with_regime(df)
    regime = str(df["regime"].iloc[0])
    d = df[(df["regime"] == regime) & (df["default_strength"].astype(bool))]
    if d.empty:
        d = df[df["regime"] == regime]
    labels = dict(zip(d["scheme"], d["curve"]))
    d = d.assign(scheme=d["curve"])
    a = agg[(agg["regime"] == regime) & agg["scheme"].isin(labels)].copy()
    a["scheme"] = a["scheme"].map(labels)
    return d, a, regime


def plots(df: pd.DataFrame, agg: pd.DataFrame, colours: dict[str, str] | None = None) -> dict[str, str]:
    """``{plot id: base64 PNG}``: roc, tpr-vs-strength, tpr-vs-tokens, quality-vs-strength (those with
    data), one line per scheme at its default strength in the first regime, coloured by ``colours``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    df, agg, regime = _default_view(df, agg)
    colours = colours or scheme_colours(list(df["scheme"].unique()))
    out: dict[str, str] = {}
    clean = df[df["cell_kind"] == "clean"]
    if not clean.empty:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for scheme, g in clean.groupby("scheme", sort=False):
            pos = g[g["row_type"] == "text"]["score"].to_numpy(float)
            neg = g[g["row_type"] == "null_fpr"]["score"].to_numpy(float)
            if len(pos) and len(neg):
                y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
                fpr, tpr, _ = roc_curve(y, np.nan_to_num(np.r_[pos, neg], neginf=-1e300, posinf=1e300))
                ax.plot(np.maximum(fpr, 1e-3), tpr, label=scheme, color=colours.get(scheme), lw=1.6)
        ax.set_xscale("log")
        ax.set(xlabel="false-positive rate (null report split)", ylabel="true-positive rate",
               title=f"ROC, clean texts, default strengths ({regime})")
        ax.legend(fontsize=8, loc="lower right")
        out["roc"] = _png(fig)
        ttd = clean[(clean["row_type"] == "text") & clean["tokens_to_detect"].notna()]
        if not ttd.empty:
            fig, ax = plt.subplots(figsize=(5.5, 4))
            L = int(clean["n_tokens"].max())
            ks = np.arange(1, L + 1)
            for scheme, g in ttd.groupby("scheme", sort=False):
                t = g["tokens_to_detect"].to_numpy(float)
                ax.step(ks, (t[None, :] <= ks[:, None]).mean(1), where="post", label=scheme, color=colours.get(scheme))
            ax.set(xlabel="tokens", ylabel="fraction with p ≤ 0.01", title=f"TPR vs tokens (prefixes, clean, {regime})")
            ax.legend(fontsize=8)
            out["tpr-vs-tokens"] = _png(fig)
    tpr = agg[(agg["metric"] == "tpr@1%fpr") & agg["cell_kind"].isin(["attack"])]
    fams = sorted(tpr["attack_family"].unique())
    if fams:
        n = len(fams)
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
        base = agg[(agg["metric"] == "tpr@1%fpr") & (agg["cell_kind"] == "clean")].groupby("scheme")["mean"].mean()
        for ax, fam in zip(axes[0], fams):
            for (scheme, attack), g in tpr[tpr["attack_family"] == fam].groupby(["scheme", "attack"], sort=False):
                g = g.groupby("strength")["mean"].mean()
                xs, ys = np.r_[0.0, g.index.to_numpy(float)], np.r_[base.get(scheme, np.nan), g.to_numpy(float)]
                ax.plot(xs, ys, marker="o", label=f"{scheme} / {attack}", color=colours.get(scheme))
            ax.set(title=fam, xlabel="attack strength", ylabel="TPR at 1% FPR", ylim=(-0.02, 1.02))
            ax.legend(fontsize=7)
        fig.tight_layout()
        out["tpr-vs-strength"] = _png(fig)
    sim = agg[(agg["metric"] == "semantic-similarity") & (agg["cell_kind"] == "attack")]
    if not sim.empty and not tpr.empty:
        m = sim.merge(tpr, on=["scheme", "length", "attack", "strength", "train_n"], suffixes=("_sim", "_tpr"))
        if not m.empty:
            fig, ax = plt.subplots(figsize=(5.5, 4))
            for scheme, g in m.groupby("scheme", sort=False):
                ax.scatter(g["mean_sim"], g["mean_tpr"], label=scheme, s=18, color=colours.get(scheme))
            ax.set(xlabel="semantic similarity after attack", ylabel="TPR at 1% FPR", title="Quality vs detection under attack")
            ax.legend(fontsize=8)
            out["quality-vs-strength"] = _png(fig)
    return out


# ---------------------------------------------------------------------------- matched comparisons
#: one sentence per axis: what it measures and where it misleads (shown on the page)
AXES = {
    "TPR at 1% FPR": "fraction of watermarked texts scoring at or above the one decision rule's threshold "
                     "(conformal on unwatermarked texts of the same model, length and regime); it says nothing "
                     "about how much the text changed and saturates at 1 on long texts.",
    "KL/token": "mean KL(p̃‖p) in nats between the tilted and the model's marginal at every sampled row, the "
                "distortion a tilting scheme pays; it reads 0 for keyed-noise schemes (AAR, KTH) whose cost "
                "shows instead as lost diversity across samples, and it is measured before the sampler's "
                "temperature (at T = 0 the sampled path moves only where the tilt flips the argmax).",
    "tokens-to-detect": "median prefix length at which p <= 0.01 first holds, on a grid of `tokens_step` tokens "
                        "and never below the detector's minimum length; `inf` means most texts never reach it, and a "
                        "value equal to the minimum length is a floor, not a measurement.",
    "oracle log-PPL": "mean over texts of the SmolLM2-135M log-perplexity (nats/token); it rewards repetition "
                      "(a looping text scores low), so read it beside distinct-2 and seq-rep-4, and on a weak "
                      "generator its absolute level says little.",
    "distinct-2 / seq-rep-4": "within-text share of distinct bigrams / repeated 4-grams; it catches repetition "
                              "but not blandness or factual damage.",
    "diversity across samples": "distinct-2 of k samples of one prompt under one key pooled; it falls when "
                                "a keyed scheme makes every sample alike, and also when each sample repeats itself "
                                "(read it beside distinct-2).",
}
_NOTES = {
    "distortion-free": "does not tilt the marginals (KL/token = 0 at every setting): its figure holds at every KL budget",
    "outside-sweep": "the budget lies outside the KL range its sweep reached (no extrapolation)",
    "inf": "`inf`: the median text never reached p <= 0.01 within the generated length",
    "no-oracle": "no oracle log-perplexity in this run (`oracle: true` in the config measures it)",
    "none-within": "no swept setting keeps the oracle log-PPL within the tolerance",
    "weakest": "TPR >= 0.9 already at the weakest swept setting: figures of that setting",
    "never": "clean TPR stays below 0.9 at every swept setting",
    "single": "one setting in this regime (no strength knob, or a regime run at default strengths): its figures, "
              "not tuned to TPR 0.9",
    "pfloor": "no p-value of its texts went below 0.01 in this regime (for kth-exp-edit the permutation p-value "
              "floor 1/(P+1) forbids it when P < 99), so a tokens-to-detect cannot exist; its TPR uses the "
              "conformal threshold on the score",
}


def _fmt_est(e: Any, digits: int = 3, sd: bool = True, integer: bool = False) -> str:
    """``mean [lo, hi] ±sd`` of a :class:`sketchwm.bench.matched.Estimate` (n/a, inf handled; ``integer``:
    whole numbers without decimals, for token counts)."""
    if not e.ok:
        return "n/a"
    if np.isposinf(e.mean):
        return "inf"

    def f(x: float) -> str:
        if np.isposinf(x):
            return "inf"
        if integer and float(x).is_integer():
            return str(int(x))
        return f"{x:.{digits}g}" if abs(x) >= 100 else f"{x:.{digits}f}"
    txt = f(e.mean)
    if np.isfinite(e.lo) or np.isinf(e.hi):
        if not (e.lo == e.mean == e.hi):
            txt += f" [{f(e.lo)}, {f(e.hi)}]"
    if sd and np.isfinite(e.key_sd) and e.key_sd > 0:
        txt += f" ±{e.key_sd:.2g}"
    return txt


@dataclass
class Matched:
    """The matched-quality section: Markdown, HTML, its rows as a long table and the Pareto SVGs (regime → svg)."""

    md: str
    html: str
    rows: pd.DataFrame
    svgs: dict[str, str]


def _slug(x: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in x.lower()).strip("-")


def pareto_svgs(cs: list[Any], refs: dict[str, dict[str, Any]], colours: dict[str, str]) -> dict[str, str]:
    """One inline SVG per regime with three panels: TPR at 1% FPR vs KL/token, median tokens-to-detect vs
    KL/token, TPR vs oracle log-PPL (when measured). Each swept scheme is a line through its settings
    (``<g id="curve-<panel>-<scheme>">``, one marker per setting) with its 95% bootstrap band
    (``<g id="band-<panel>-<scheme>">``); a scheme without a knob is one point with error bars
    (``<g id="point-<panel>-<scheme>">``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    for regime in dict.fromkeys(c.regime for c in cs):
        rc = [c for c in cs if c.regime == regime]
        has_ppl = any(p.get("logppl").ok for c in rc for p in c.points)
        panels = [("tpr-kl", "kl", "tpr", "KL/token (nats)", "TPR at 1% FPR"),
                  ("ttd-kl", "kl", "ttd", "KL/token (nats)", "median tokens-to-detect")]
        if has_ppl:
            panels.append(("tpr-ppl", "logppl", "tpr", "oracle log-PPL (nats/token)", "TPR at 1% FPR"))
        ttd_cap = max([p.get("ttd").mean for c in rc for p in c.points if p.get("ttd").ok and np.isfinite(p.get("ttd").mean)]
                      + [1.0]) * 1.15
        with plt.rc_context({"svg.hashsalt": f"sketchwm-{regime}", "svg.fonttype": "none", "font.size": 10}):
            fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False)
            for ax, (pid, xs, ys, xl, yl) in zip(axes[0], panels):
                for c in rc:
                    pts = [p for p in c.points if p.get(xs).ok and p.get(ys).ok]
                    if not pts:
                        continue
                    col = colours.get(c.name)
                    cap = lambda v: min(v, ttd_cap) if ys == "ttd" else v  # noqa: E731
                    x = np.array([p.get(xs).mean for p in pts])
                    y = np.array([cap(p.get(ys).mean) for p in pts])
                    bound = lambda v, m: cap(m if np.isnan(v) else v)  # noqa: E731  (no interval: the point)
                    lo = np.array([bound(p.get(ys).lo, p.get(ys).mean) for p in pts])
                    hi = np.array([bound(p.get(ys).hi, p.get(ys).mean) for p in pts])
                    sid = _slug(c.name)
                    if len(pts) > 1:
                        ax.fill_between(x, lo, hi, color=col, alpha=0.18, lw=0, gid=f"band-{pid}-{sid}")
                        ax.plot(x, y, marker="o", ms=5, lw=1.8, color=col, label=c.name, gid=f"curve-{pid}-{sid}")
                    else:
                        ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="D", ms=7, color=col, capsize=3, label=c.name,
                                    gid=f"point-{pid}-{sid}")
                if xs == "logppl" and refs.get(regime, {}).get("logppl") is not None:
                    ax.axvline(refs[regime]["logppl"].mean, color="#666", ls=":", lw=1)
                    ax.annotate("unwatermarked", (refs[regime]["logppl"].mean, 0.02), fontsize=8, color="#666", rotation=90)
                ax.set_xlabel(xl)
                ax.set_ylabel(yl + (" (top: not detected)" if ys == "ttd" else ""))
                if ys == "tpr":
                    ax.set_ylim(-0.03, 1.03)
                ax.grid(alpha=0.3)
                ax.set_title(f"{yl} vs {xl.split(' (')[0]}", fontsize=10)
            handles, labels = axes[0][0].get_legend_handles_labels()
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=10, frameon=False,
                       bbox_to_anchor=(0.5, -0.02))
            fig.suptitle(f"Pareto curves: regime {regime} (bands: 95% bootstrap over texts)", fontsize=11)
            fig.tight_layout(rect=(0, 0.08, 1, 1))
            buf = io.StringIO()
            fig.savefig(buf, format="svg", bbox_inches="tight")
            plt.close(fig)
        svg = buf.getvalue()
        svg = svg[svg.index("<svg"):]
        # inline in HTML5: the namespace declarations and the RDF metadata are not needed (and name URLs)
        svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg, count=2)
        out[regime] = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    return out


def _swept_columns(rc: list[Any], ref: dict[str, Any], atk: list[str], cols: dict[str, dict[str, Any]],
                   higher: dict[str, bool], settings: dict[tuple[str, str], str]) -> tuple[str, str, list[str], dict]:
    """Fill the matched columns of a swept regime (equal KL, MarkMyWords, WaterBench) into ``cols``/``higher``/
    ``settings``; returns (ranking column, tokens column, winner columns, WaterBench operating points)."""
    from . import matched as M

    for b in M.KL_BUDGETS:
        cols[f"TPR @ KL={b:g}"] = {c.name: M.at_kl(c, "tpr", b) for c in rc}
        higher[f"TPR @ KL={b:g}"] = True
    b0 = M.KL_BUDGETS[len(M.KL_BUDGETS) // 2]
    tok = f"tokens @ KL={b0:g}"
    cols[tok] = {c.name: M.at_kl(c, "ttd", b0) for c in rc}
    higher[tok] = False
    mmw = []
    for tol in M.MMW_TOLERANCES:
        name = f"MMW tokens (log-PPL ≤ +{tol:.0%})"
        mmw.append(name)
        cols[name] = {}
        for c in rc:
            est, lab = M.markmywords(c, ref.get("logppl"), tol)
            cols[name][c.name] = est
            settings[(name, c.name)] = lab
        higher[name] = False
    wb = {c.name: M.waterbench(c, ["tpr", "kl", "logppl", "distinct2", "diversity", *atk]) for c in rc}
    for st, label, hi in [("kl", "WB KL/token", False), ("logppl", "WB log-PPL", False), ("distinct2", "WB distinct-2", True),
                          ("diversity", "WB diversity", True)] + [
            (a, "WB TPR " + a[4:].replace("@", " s="), True) for a in atk]:
        cols[label] = {}
        for c in rc:
            _, vals, nt = wb[c.name]
            est = vals.get(st, M.NA)
            cols[label][c.name] = (M.Estimate(est.mean, est.lo, est.hi, est.key_sd, est.n, nt) if est.ok
                                   else M.Estimate(float("nan"), float("nan"), float("nan"), note=nt))
        higher[label] = hi
    head = f"TPR @ KL={b0:g}"  # rank by the middle KL budget's TPR (the headline matched figure), then tokens
    return head, tok, [f"TPR @ KL={b:g}" for b in M.KL_BUDGETS] + mmw, wb


def matched_section(df: pd.DataFrame, colours: dict[str, str], regime_info: dict[str, str] | None = None) -> Matched:
    """The ``matched-quality`` section (see :mod:`sketchwm.bench.matched` for the rules)."""
    from . import matched as M

    df = _with_regime(df)
    cs = M.curves(df)
    refs = M.references(df)
    atk = M.attack_stats(cs)
    e = html.escape
    md: list[str] = ["## Matched quality", ""]
    hs: list[str] = ['<section id="matched-quality"><h2>Matched quality</h2>']
    rules = ("**Rules.** Equal KL: each figure is read off the scheme's strength sweep by linear interpolation "
             "in KL/token between the two adjacent settings that bracket the budget (interval bounds interpolated "
             "the same way; no extrapolation). MarkMyWords: the smallest median tokens-to-detect among swept settings "
             "whose mean oracle log-PPL is within 2% (10%) of the unwatermarked texts' (settings, not interpolated). "
             "WaterBench: the strength s* where clean TPR at 1% FPR = 0.9, linear in the knob between adjacent "
             "settings; every figure interpolated at s*. Figures: mean [95% bootstrap interval over texts, keys pooled] "
             "±standard deviation over keys. ★ marks the best value of a column and every value whose interval "
             "overlaps it (a tie).")
    md += [rules, ""]
    hs.append(f"<p>{e(rules.replace('**', ''))}</p>")
    rows: list[dict[str, Any]] = []
    notes_used: dict[str, str] = {}

    def note(key: str) -> str:
        k = key.split(":", 1)[0]
        if k not in _NOTES:
            return ""
        if k not in notes_used:
            notes_used[k] = chr(ord("a") + len(notes_used))
        return notes_used[k]

    win_rows: list[tuple[str, dict[str, list[str]]]] = []
    for regime in dict.fromkeys(c.regime for c in cs):
        rc = [c for c in cs if c.regime == regime]
        ref = refs.get(regime, {})
        cols: dict[str, dict[str, Any]] = {}  # column → {curve: Estimate}
        higher: dict[str, bool] = {}
        settings: dict[tuple[str, str], str] = {}
        if not any(c.swept for c in rc):  # a regime run at default strengths only: the default points side by side
            for st, label, hi in [("tpr", "TPR (default strength)", True), ("kl", "KL/token", False), ("ttd", "tokens-to-detect", False),
                                  ("logppl", "log-PPL", False), ("distinct2", "distinct-2", True),
                                  ("diversity", "diversity", True)] + [
                    (a, "TPR " + a[4:].replace("@", " s="), True) for a in atk]:
                cols[label] = {c.name: c.points[0].get(st) for c in rc}
                higher[label] = hi
            wb = {c.name: (c.points[0].knob_value, {}, "single") for c in rc}
            head, tok = "TPR (default strength)", "tokens-to-detect"
            win_cols = [head]
        else:
            head, tok, win_cols, wb = _swept_columns(rc, ref, atk, cols, higher, settings)
        order = sorted(rc, key=lambda c: (-(cols[head][c.name].mean if cols[head][c.name].ok else -1),
                                          cols[tok][c.name].mean if cols[tok][c.name].ok else np.inf))
        best = {k: set(M.winners(v, higher[k])) for k, v in cols.items()}
        win_rows.append((regime, {k: M.winners(cols[k], higher[k]) for k in win_cols}))
        for c in rc:
            pmin = min((p.get("pmin").mean for p in c.points if p.get("pmin").ok), default=0.0)
            for k in cols:
                est = cols[k][c.name]
                rows.append({"regime": regime, "scheme": c.name, "column": k, **M.as_dict(est),
                             "setting": settings.get((k, c.name), ""), "best": c.name in best[k],
                             "wb_strength": wb[c.name][0] if k.startswith("WB") else np.nan,
                             "p_floor": pmin > 0.01})
        # Markdown and HTML tables of the regime
        desc = (regime_info or {}).get(regime, "")
        title = f"Regime `{regime}`" + (f": {desc}" if desc else "")
        ref_txt = ", ".join(f"unwatermarked {k} {_fmt_est(v, sd=False)}" for k, v in ref.items())
        md += [f"### {title}", ""] + ([f"_{ref_txt}_", ""] if ref_txt else [])
        hs.append(f'<h3 id="matched-{_slug(regime)}">{e(title.replace("`", ""))}</h3>'
                  + (f'<p class="meta">{e(ref_txt)}</p>' if ref_txt else ""))
        col_names = list(cols)
        md.append("| scheme | knob | " + " | ".join(f"{k}{' ↑' if higher[k] else ' ↓'}" for k in col_names) + " |")
        md.append("|" + "---|" * (len(col_names) + 2))
        trs = []
        for c in order:
            pmin = min((p.get("pmin").mean for p in c.points if p.get("pmin").ok), default=0.0)
            n_set = f"{len(c.points)} setting{'s' if len(c.points) > 1 else ''}"
            knob = f"{c.knob} ({n_set})" if c.knob else "none (1 setting)"
            if wb[c.name][2] == "" and np.isfinite(wb[c.name][0]):
                knob += f"; s*={wb[c.name][0]:.3g}"
            if c.min_tokens is not None:
                knob += f"; detector min {c.min_tokens} tokens" + (f", grid step {c.tokens_step}" if c.tokens_step else "")
            cells_md, cells_html = [], []
            for k in col_names:
                est = cols[k][c.name]
                txt = _fmt_est(est, integer="tokens" in k)
                marks = [m for m in (note(est.note) if est.note else "",
                                     note("pfloor") if pmin > 0.01 and ("tokens" in k) else "",
                                     note("inf") if est.ok and np.isposinf(est.mean) else "") if m]
                sup = "".join(f"[{m}]" for m in dict.fromkeys(marks))
                lab = settings.get((k, c.name), "")
                star = c.name in best[k]
                cells_md.append(("**" + txt + "** ★" if star else txt) + (f" ({lab})" if lab else "") + (f" {sup}" if sup else ""))
                v = "NaN" if not est.ok else ("Infinity" if np.isposinf(est.mean) else repr(float(est.mean)))
                cells_html.append(f'<td data-v="{v}"' + (' class="best"' if star else "") + f">{e(txt)}"
                                  + (f' <span class="sd">{e(lab)}</span>' if lab else "")
                                  + (f"<sup>{e(sup)}</sup>" if sup else "") + "</td>")
            md.append(f"| {c.name} | {knob} | " + " | ".join(cells_md) + " |")
            sw = f'<span class="swatch" style="background:{colours.get(c.name, "#999")}"></span>'
            trs.append(f'<tr data-scheme="{e(c.name)}"><td>{sw}{e(c.name)}</td><td>{e(knob)}</td>' + "".join(cells_html) + "</tr>")
        md.append("")
        th = "".join(f"<th>{e(k + (' ↑' if higher[k] else ' ↓'))}</th>" for k in col_names)
        hs.append(f'<table class="board matched" data-regime="{e(regime)}" id="table-matched-{_slug(regime)}">'
                  f"<thead><tr><th>scheme</th><th>knob</th>{th}</tr></thead><tbody>{''.join(trs)}</tbody></table>")
    # winners per regime and budget
    if win_rows:
        budgets = list(dict.fromkeys(k for _, w in win_rows for k in w))
        md += ["### Winners per regime and budget", "",
               "Best point estimate first; `=` joins schemes the 95% intervals do not separate (a tie).", "",
               "| regime | " + " | ".join(budgets) + " |", "|" + "---|" * (len(budgets) + 1)]
        trs = []
        for regime, win in win_rows:
            cells = [("—" if b not in win else (" = ".join(win[b]) + (" (tie)" if len(win[b]) > 1 else "")) if win[b]
                      else "n/a") for b in budgets]
            md.append(f"| {regime} | " + " | ".join(cells) + " |")
            tds = "".join(f'<td data-budget="{e(b)}" data-winners="{e("|".join(win.get(b, [])))}" '
                          f'data-tie="{str(len(win.get(b, [])) > 1).lower()}">{e(t)}</td>' for b, t in zip(budgets, cells))
            trs.append(f'<tr data-regime="{e(regime)}"><td>{e(regime)}</td>{tds}</tr>')
        md.append("")
        hs.insert(2, '<h3 id="winners">Winners per regime and budget</h3><p>Best point estimate first; "=" joins '
                     'schemes the 95% intervals do not separate (a tie).</p><table class="board" id="table-winners">'
                     "<thead><tr><th>regime</th>" + "".join(f"<th>{e(b)}</th>" for b in budgets)
                     + f"</tr></thead><tbody>{''.join(trs)}</tbody></table>")
    # the greedy regime stated plainly
    greedy = [c for c in cs if "greedy" in c.regime and c.tilts]
    if greedy:
        lines = []
        for c in greedy:
            p = next((q for q in c.points if q.default), c.points[0])
            lines.append(f"{c.name}: TPR at 1% FPR {_fmt_est(p.get('tpr'))}, KL/token {_fmt_est(p.get('kl'))}, "
                         f"tokens-to-detect {_fmt_est(p.get('ttd'), integer=True)}")
        g = greedy[0].regime
        txt = (f"What a user decoding with the greedy default (`{g}`) gets from each tilting scheme at its default "
               f"strength: " + "; ".join(lines) + ".")
        md += ["### Greedy decoding at default strengths", "", txt, ""]
        hs.append(f'<h3 id="greedy">Greedy decoding at default strengths</h3><p id="greedy-text">{e(txt.replace("`", ""))}</p>')
    # footnotes and axes
    if notes_used:
        md += ["Notes: " + " ".join(f"[{m}] {_NOTES[k]}." for k, m in notes_used.items()), ""]
        hs.append('<p class="notes">' + "<br>".join(f"[{m}] {e(_NOTES[k])}." for k, m in notes_used.items()) + "</p>")
    md += ["### What each axis measures and where it misleads", ""] + [f"* **{k}**: {v}" for k, v in AXES.items()] + [""]
    hs.append('<h3 id="axes">What each axis measures and where it misleads</h3><ul>'
              + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in AXES.items()) + "</ul>")
    svgs = pareto_svgs(cs, refs, colours)
    hs.append('<h3 id="pareto">Pareto curves, one panel per regime</h3>')
    for regime, svg in svgs.items():
        hs.append(f'<figure class="pareto" data-regime="{e(regime)}" id="pareto-{_slug(regime)}">{svg}'
                  f"<figcaption>regime {e(regime)}: each scheme's strength sweep (line, one marker per setting) with its "
                  "95% bootstrap band; a scheme without a knob is one point with its interval</figcaption></figure>")
    hs.append("</section>")
    return Matched("\n".join(md), "".join(hs), pd.DataFrame(rows), svgs)


# ---------------------------------------------------------------------------- HTML
_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}td:first-child,th:first-child{text-align:left}
th{background:#eef;cursor:pointer;user-select:none}th.asc:after{content:" ▲"}th.desc:after{content:" ▼"}
.sd{color:#888;font-size:11px}img{max-width:100%;border:1px solid #ddd;margin:4px}.meta{color:#555;font-size:12px}
td.best{font-weight:bold;background:#fff4c2}td.best:after{content:" ★"}.swatch{display:inline-block;width:10px;height:10px;
margin-right:5px;border-radius:2px}figure.pareto svg{max-width:100%;height:auto}.notes{font-size:12px;color:#444}"""
_JS = """function sortTable(th){const t=th.closest('table'),i=[...th.parentNode.children].indexOf(th);
const asc=!th.classList.contains('asc');t.querySelectorAll('th').forEach(h=>h.classList.remove('asc','desc'));
th.classList.add(asc?'asc':'desc');const b=t.tBodies[0],rows=[...b.rows];
const key=r=>{const c=r.cells[i];const v=c.dataset.v;return v===undefined?c.textContent:parseFloat(v)};
rows.sort((x,y)=>{let a=key(x),c=key(y);if(typeof a==='string')return asc?a.localeCompare(c):c.localeCompare(a);
const na=isNaN(a),nc=isNaN(c);if(na||nc)return na-nc;return asc?a-c:c-a});rows.forEach(r=>b.appendChild(r))}
document.querySelectorAll('th').forEach(th=>th.addEventListener('click',()=>sortTable(th)));"""


def to_html_table(t: Table) -> str:
    """A sortable HTML table (click a header; NaN sorts last); each cell carries its value in ``data-v``."""
    cols = list(t.mean.columns)
    e = html.escape
    head = "<tr><th>scheme</th>" + "".join(
        f'<th title="{e(t.unit.get(c, "") or "")}">{e(str(c) + _arrow(t.higher.get(c)))}</th>' for c in cols) + "</tr>"
    body = []
    best = {c: best_rows(t, c) for c in cols}
    for name in t.mean.index:
        tds = []
        for c in cols:
            m, s = t.mean.at[name, c], t.std.at[name, c]
            v = "NaN" if m is None or np.isnan(m) else ("Infinity" if np.isposinf(m) else repr(float(m)))
            sd = f' <span class="sd">± {s:.2g}</span>' if s is not None and np.isfinite(s) and s > 0 else ""
            cls = ' class="best" title="best value of the column"' if name in best[c] else ""
            tds.append(f'<td data-v="{v}"{cls}>{e(_fmt(m, None))}{sd}</td>')
        body.append(f'<tr data-scheme="{e(str(name))}"><td>{e(str(name))}</td>' + "".join(tds) + "</tr>")
    return (f'<h2 id="{t.slug}">{e(t.title)}</h2>\n<table class="board" data-task="{e(t.task)}" id="table-{t.slug}">'
            f"<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>")


def _regime_descriptions(results: str | os.PathLike) -> dict[str, str]:
    """{regime: description} from the run's recorded config(s), with the named regimes' descriptions."""
    import json

    from .config import REGIMES

    info = {k: r.description for k, r in REGIMES.items()}
    d = Path(results)
    for f in sorted(d.glob("config*.json")) if d.is_dir() else []:
        try:
            for r in json.loads(f.read_text()).get("regimes") or []:
                if r.get("description"):
                    info[r["name"]] = r["description"]
        except (OSError, ValueError):
            continue
    return info


def _atomic_write(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def build_leaderboard(results: str | os.PathLike, out: str | os.PathLike, readme: str | os.PathLike | None = None,
                      command: str = "") -> list[Path]:
    """Write ``leaderboard.md``, ``summary.csv``, ``results.parquet`` (every row of ``results``, zstd), one
    CSV pivot per table, PNG plots and ``index.html`` to ``out``.

    Args:
        results: a results folder of ``sketchwm bench run``; out: output folder;
        readme: a README whose section between :data:`README_START` and :data:`README_END` is
            replaced by the tables (appended when the markers are absent); command: shown above the tables.

    Returns:
        the paths written. Raises InputError: no results.
    """
    global _MULTI_REGIME
    df = _with_regime(read_results(results))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _MULTI_REGIME = df["regime"].nunique() > 1
    agg = aggregate(df)
    tabs = tables(agg)
    colours = scheme_colours(list(df["curve"].astype(str).unique()))
    figs = plots(df, agg, colours)
    regime_info = _regime_descriptions(results)
    mt = matched_section(df, colours, regime_info)
    written = []
    p = out / "summary.csv"
    _atomic_write(p, agg.to_csv(index=False))
    written.append(p)
    buf = io.BytesIO()  # every row in one file, so the leaderboard ships with the data it was built from
    df.to_parquet(buf, engine="pyarrow", compression="zstd", index=False)
    p = out / "results.parquet"
    _atomic_write(p, buf.getvalue())
    written.append(p)
    for t in tabs:
        p = out / f"{t.slug}.csv"
        _atomic_write(p, t.mean.to_csv())
        written.append(p)
    p = out / "matched-quality.csv"
    _atomic_write(p, mt.rows.to_csv(index=False))
    written.append(p)
    for regime, svg in mt.svgs.items():  # a standalone file needs the namespaces the inline copy drops
        p = out / f"pareto-{_slug(regime)}.svg"
        _atomic_write(p, svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" '
                                              'xmlns:xlink="http://www.w3.org/1999/xlink" ', 1))
        written.append(p)
    for name, b64 in figs.items():
        p = out / f"{name}.png"
        _atomic_write(p, base64.b64decode(b64))
        written.append(p)
    runs = ", ".join(sorted(df["run"].astype(str).unique()))
    meta = (f"run {runs}; sketchwm {', '.join(sorted(df['package_version'].astype(str).unique()))}; "
            f"commit {', '.join(sorted(c for c in df['git_commit'].astype(str).unique() if c)) or 'n/a'}; "
            f"models {', '.join(sorted(df['model_id'].astype(str).unique()))}; keys {df['key_fingerprint'].nunique()}; "
            f"{int((df['row_type'] == 'text').sum())} text rows in {df['cell_hash'].nunique()} cells")
    md = ["## Leaderboard", "", f"_{meta}_", ""]
    if command:
        md += ["Made with:", "", "```", command, "```", ""]
    md.append("↑ higher is better, ↓ lower; ± one standard deviation over keys; TPR at a FPR uses the one decision "
              "rule score ≥ max(τ_N, τ_α), τ_N conformal from a calibration split of unwatermarked texts of the same "
              "model, length and key, the FPR measured on a disjoint split.")
    md += ["", mt.md, "", "## Detailed tables", "",
           "Every setting of every sweep; rows sorted by the first column, ★ the best value of each column.", "",
           *(to_markdown(t) + "\n" for t in tabs)]
    md_text = "\n".join(md)
    p = out / "leaderboard.md"
    _atomic_write(p, md_text)
    written.append(p)
    e = html.escape
    nav = " · ".join([f'<a href="#matched-quality">Matched quality</a>'] + [f'<a href="#{t.slug}">{e(t.title)}</a>' for t in tabs])
    imgs = "".join(f'<figure><img id="plot-{k}" alt="{k}" src="data:image/png;base64,{v}"><figcaption>{k}</figcaption></figure>'
                   for k, v in figs.items())
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>sketchwm leaderboard</title>'
            f"<style>{_CSS}</style></head><body><h1>sketchwm leaderboard</h1><p class=\"meta\">{e(meta)}</p>"
            + (f"<pre>{e(command)}</pre>" if command else "")
            + f"<nav>{nav}</nav>{mt.html}<h2 id=\"detailed\">Detailed tables</h2>{''.join(to_html_table(t) for t in tabs)}"
            f"<h2 id=\"plots\">Plots</h2>{imgs}"
            f"<script>{_JS}</script></body></html>")
    p = out / "index.html"
    _atomic_write(p, page)
    written.append(p)
    if readme:
        rp = Path(readme)
        old = rp.read_text(encoding="utf-8") if rp.exists() else ""
        block = f"{README_START}\n{md_text}\n{README_END}"
        if README_START in old and README_END in old:
            new = old[: old.index(README_START)] + block + old[old.index(README_END) + len(README_END):]
        else:
            new = old.rstrip("\n") + "\n\n" + block + "\n"
        _atomic_write(rp, new)
        written.append(rp)
    return written
