"""``sketchwm leaderboard``: Markdown tables, CSV pivots and one offline HTML page from bench results.

Summary rows (one per cell and metric) are averaged over keys and prompt sets (the spread over keys
is shown as ± one standard deviation). Tables, one per task:

* **power** — clean watermarked texts: TPR at 1% / 0.1% FPR (one rule, conformal τ_N), analytic-only
  TPR, observed FPR on the disjoint null split, ROC AUC, tokens-to-detect;
* **robustness: <family>** — TPR at 1% FPR after each attack of the family, per strength;
* **quality** — oracle perplexity (ratio), semantic similarity after each attack family;
* **stealing** — spoof rate and scrub rate per stolen-sample count; and a section of its own
  (:mod:`sketchwm.bench.stealing_page`): spoof rate vs N per scheme and thief, with bootstrap
  intervals and a plot;
* **speed** — generation and detection throughput;
* **theory checks** — the paper's statements measured (:mod:`sketchwm.bench.theory`): KL chain rule,
  Fisher ratio per η scale, per-key soundness on human text, edit-sensitivity bound per k edits.

The page opens on the ranking per regime (:mod:`sketchwm.bench.ranking`) and a "which to use when"
paragraph generated from it; the Pareto panels follow, then the matched tables, the stealing
section, the tables above and the plots, collapsed; commits, run names and scheme versions are in a
provenance section at the bottom. The HTML page has its CSS, the few lines of JavaScript that sort
the tables and the Pareto SVGs inline, and shows the PNG plots written beside it, so the folder works
from ``file://`` with no network.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import DEFAULT_SCHEME
from . import matched as M
from .matched_page import _slug, _with_regime, matched_section
from .ranking import ranking_html, ranking_md, rankings, regime_order, which_to_use
from .publish import write_section
from .results import read_results
from .stealing_page import stealing_section

__all__ = ["Table", "aggregate", "tables", "build_leaderboard", "scheme_versions", "UNVERSIONED", "README_START", "README_END"]

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


def _row_name(r: pd.Series, multi_length: bool, multi_regime: bool) -> str:
    """A table row's name: the scheme, with the length and the regime when the results hold several."""
    name = f"{r['scheme']} (L={int(r['length'])})" if multi_length else str(r["scheme"])
    return f"{name} · {r['regime']}" if multi_regime else name


def _pivot(rows: pd.DataFrame, col: pd.Series, multi: tuple[bool, bool], order: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = rows.assign(_row=[_row_name(r, *multi) for _, r in rows.iterrows()], _col=col.values)
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
    multi = (agg["length"].nunique() > 1, "regime" in agg and agg["regime"].nunique() > 1)  # (lengths, regimes)
    order = list(dict.fromkeys(_row_name(r, *multi) for _, r in agg.iterrows()))
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


# ---------------------------------------------------------------------------- HTML
_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}td:first-child,th:first-child{text-align:left}
th{background:#eef;cursor:pointer;user-select:none}th.asc:after{content:" ▲"}th.desc:after{content:" ▼"}
.sd{color:#888;font-size:11px}img{max-width:100%;border:1px solid #ddd;margin:4px}.meta{color:#555;font-size:12px}
td.best{font-weight:bold;background:#fff4c2}td.best:after{content:" ★"}.swatch{display:inline-block;width:10px;height:10px;
margin-right:5px;border-radius:2px}figure.pareto svg{max-width:100%;height:auto}.notes{font-size:12px;color:#444}
body{max-width:1360px}h1{margin:.2em 0}.lede{font-size:13px;color:#333;margin:.2em 0 .6em}.lede nav{display:inline}
.scroll{overflow-x:auto;max-width:100%}table.ranking{width:100%}table.ranking td:nth-child(2){text-align:left;white-space:nowrap}
tr.tie td:first-child{color:#a60}details{margin:.6em 0}summary{cursor:pointer;font-weight:bold;font-size:15px}
h3 .meta{font-weight:normal;margin-left:.5em}"""
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
            v = "NaN" if m is None or np.isnan(m) else ("Infinity" if np.isposinf(m) else f"{float(m):.6g}")
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


def _missing(results: str | os.PathLike, df: pd.DataFrame) -> list[str]:
    """Settings that the grids recorded in the results folder plan (``config.json`` and the
    ``config-*.json`` of other grids run into it) and that have no rows in ``df`` (a run stopped early).

    Returns one ``"scheme · regime (n of m cells)"`` line per incomplete setting, sorted (a cell that
    two grids share is counted once); empty when no config can be read (the board then shows what it
    has, and says nothing). A config naming plugins not installed here is skipped."""
    from .config import BenchConfig
    from .runner import bench_registry, plan

    registry = bench_registry()
    have = set(df["cell_hash"].astype(str))
    # rows without a version were hashed under an older cell identity: their cells cannot be matched here
    old = {k for k, v in scheme_versions(df).items() if UNVERSIONED in v}
    todo: dict[tuple[str, str], dict[str, bool]] = {}
    for f in sorted(Path(results).glob("config*.json")):
        try:
            cfg = BenchConfig.model_validate_json(f.read_text(encoding="utf-8"))
            units = plan(cfg, registry)
        except Exception:  # noqa: BLE001 - unreadable, or naming plugins not installed here
            continue
        for u, cells in units:
            if u.scheme_name in old:
                continue
            seen = todo.setdefault((u.scheme, cfg.regime_list[u.regime].name), {})
            seen.update({c.hash: c.hash not in have for c in cells})
    return [f"{s} · {r} ({sum(v.values())} of {len(v)} cells)" for (s, r), v in sorted(todo.items()) if any(v.values())]


#: the version shown for rows written before schemes carried one (no ``scheme_version`` column)
UNVERSIONED = "unversioned"


def scheme_versions(df: pd.DataFrame) -> dict[str, list[str]]:
    """{scheme name: the versions its rows were run at, sorted}; rows without a recorded version read
    :data:`UNVERSIONED`.

    Raises:
        InputError: a scheme's rows come from two versions (or from one version and rows without
            one): a page would compare the older code's cells with the newer's as one scheme. The
            message names the versions; remove the older parts or rerun them into a fresh folder.
    """
    from ..errors import InputError

    name = df["scheme_name"] if "scheme_name" in df else df["scheme"]
    ver = df["scheme_version"] if "scheme_version" in df else pd.Series(UNVERSIONED, index=df.index)
    ver = ver.astype(object).where(ver.notna() & (ver.astype(str) != ""), UNVERSIONED).astype(str)
    out = {str(k): sorted(set(v)) for k, v in ver.groupby(name.astype(str), sort=True)}
    mixed = {k: v for k, v in out.items() if len(v) > 1}
    if mixed:
        raise InputError("these results mix cells of two versions of a scheme: "
                         + "; ".join(f"{k} ({', '.join(v)})" for k, v in mixed.items())
                         + ". Rows of different versions come from different code; rerun the grid into a fresh "
                           "folder, or remove the older version's parts (column `scheme_version`) before "
                           "building the board")
    return out


#: the first screen's opening sentence (the rule in full: :mod:`sketchwm.bench.ranking`)
RANK_INTRO = ("One table per decoding regime, one row per scheme, best first. Schemes whose 95% intervals of the "
              "ranking figure overlap share a group number (ties, with what would separate them below the table). "
              "Columns after the ranking figure are read at the row's setting (shown beside its name): TPR at 1% FPR "
              "at equal distortion, KL/token (0 for keyed-noise schemes, whose cost shows as lower diversity), TPR "
              "after 30% of the words substituted / inserted / reordered, distinct-2 across samples of one prompt, "
              "detection throughput.")


#: the file of ``benchmarks/perf_detect_board.py`` in a results folder: the ranking's detection-speed column
SPEED_FILE = "detect-speed.json"


def read_speed(results: str | os.PathLike) -> tuple[dict[str, float] | None, str]:
    """The detection throughput of ``results``/:data:`SPEED_FILE` (curve → tokens/s) and one sentence
    saying how and where it was measured; (None, a sentence on the fallback) without the file.

    Raises:
        InputError: the file exists but is not the benchmark's JSON.
    """
    import json

    from ..errors import InputError

    p = Path(results) / SPEED_FILE
    if not p.is_file():
        return None, ("Detection throughput: each cell's own timing of one cold call on its texts (no "
                      f"{SPEED_FILE} in the results folder; benchmarks/perf_detect_board.py writes one).")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        tps = {str(k): float(v) for k, v in data["tokens_per_s"].items()}
        m = data.get("machine", {})
        how = (f"Detection throughput: Detector.detect_batch, warm, {int(data['tokens']):,} tokens of human text in "
               f"texts of {int(data['length'])} tokens, the schemes timed side by side ({int(data['repeats'])} "
               f"interleaved rounds, medians) on {m.get('cpu', 'an unnamed CPU')} ({m.get('cpus', '?')} CPUs, "
               f"{int(data['threads'])} torch threads, torch {m.get('torch', '?')}) by benchmarks/perf_detect_board.py; "
               "tokenisation excluded.")
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{p}: not the JSON of benchmarks/perf_detect_board.py ({exc})") from exc
    return tps, how


def _lede(df: pd.DataFrame) -> str:
    """One line on what the board holds: schemes, regimes, texts per setting, keys, lengths, models."""
    t = df[(df["row_type"] == "text") & (df["cell_kind"] == "clean")]
    per = t.groupby(["regime", "scheme"]).size() if not t.empty else pd.Series([0])
    n = f"{per.min()}" if per.min() == per.max() else f"{per.min()}-{per.max()}"
    regimes = ", ".join(regime_order(df["regime"]))
    lengths = ", ".join(str(int(x)) for x in sorted(df["length"].dropna().unique()))
    return (f"{df['curve'].nunique()} schemes in {df['regime'].nunique()} regimes ({regimes}); {n} texts per setting "
            f"over {df['key_fingerprint'].nunique()} keys, {lengths} tokens, model "
            f"{', '.join(sorted(df['model_id'].astype(str).unique()))}")


def _bold(text: str) -> str:
    """``**x**`` → ``<b>x</b>`` in already escaped text."""
    import re

    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


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
            replaced by the tables (appended when the markers are absent); command: shown in the
            provenance section.

    Returns:
        the paths written.

    Raises:
        InputError: no results, or results that hold two versions of one scheme (:func:`scheme_versions`).
    """
    df = _with_regime(read_results(results))
    versions = scheme_versions(df)  # refuses two versions of one scheme
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(df)
    tabs = tables(agg)
    colours = scheme_colours(list(df["curve"].astype(str).unique()))
    figs = plots(df, agg, colours)
    regime_info = _regime_descriptions(results)
    cs, refs = M.curves(df), M.references(df)
    speed, speed_how = read_speed(results)
    ranks = rankings(df, cs, refs, speed)
    mt = matched_section(df, colours, regime_info, cs, refs)
    steal = stealing_section(df, colours)
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
    if speed is not None:  # the board ships the measurement its speed column shows
        p = out / SPEED_FILE
        _atomic_write(p, (Path(results) / SPEED_FILE).read_text(encoding="utf-8"))
        written.append(p)
    if steal.png:
        for p, data in ((out / "stealing.csv", steal.rows.to_csv(index=False)),
                        (out / "stealing-spoof-vs-n.png", base64.b64decode(steal.png))):
            _atomic_write(p, data)
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
    lede = _lede(df)
    unversioned = [k for k, v in versions.items() if v == [UNVERSIONED]]
    ver_note = ("Scheme versions: " + ", ".join(f"{k} {v[0]}" for k, v in versions.items() if v != [UNVERSIONED])
                if len(unversioned) < len(versions) else "")
    if unversioned:
        ver_note += ("; " if ver_note else "") + (
            f"unversioned: {', '.join(unversioned)} (cells run before a scheme's version and resolved params were part "
            "of a cell's identity: this board cannot show that they match the installed code)")
    missing = _missing(results, df)
    note = ("Not in this board: the run's config plans these settings, which have no results yet (the run "
            "stopped before them; re-running the same `sketchwm bench run` resumes): ")
    advice = which_to_use(ranks, DEFAULT_SCHEME)
    md = ["## Leaderboard", "", lede + ".", ""]
    if missing:
        md += [note + "; ".join(missing) + ".", ""]
    md += ["## Ranking per regime", "", RANK_INTRO, "", ranking_md(ranks, regime_info), speed_how, "", "### Which to use when", "",
           advice, "", mt.md, ""] + ([steal.md, ""] if steal.md else []) + ["## Detailed tables", "",
           "Every setting of every sweep; rows sorted by the first column, ★ the best value of each column. ↑ higher is "
           "better, ↓ lower; ± one standard deviation over keys; TPR at a FPR uses the one decision rule score ≥ "
           "max(τ_N, τ_α), τ_N conformal from a calibration split of unwatermarked texts of the same model, length and "
           "key, the FPR measured on a disjoint split.", "",
           *(to_markdown(t) + "\n" for t in tabs)]
    md += ["## Provenance", "", f"_{meta}_", "", ver_note + "."]
    if command:
        md += ["", "Made with:", "", "```", command, "```"]
    md_text = "\n".join(md) + "\n"
    p = out / "leaderboard.md"
    _atomic_write(p, md_text)
    written.append(p)
    e = html.escape
    nav = " · ".join(['<a href="#ranking">Ranking</a>', '<a href="#which">Which to use when</a>',
                      '<a href="#matched-quality">Matched quality</a>']
                     + (['<a href="#stealing-vs-n">Stealing vs N</a>'] if steal.html else [])
                     + ['<a href="#detailed">Detailed tables</a>', '<a href="#plots">Plots</a>',
                        '<a href="#provenance">Provenance</a>'])
    imgs = "".join(f'<figure><img id="plot-{k}" alt="{k}" src="{k}.png"><figcaption>{k}</figcaption></figure>'
                   for k in figs)
    detailed = "".join(f'<div class="scroll">{to_html_table(t)}</div>' for t in tabs)
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>sketchwm leaderboard</title>'
            f'<meta name="viewport" content="width=device-width"><style>{_CSS}</style></head><body>'
            f'<h1>sketchwm leaderboard</h1><div class="lede">{e(lede)}. <nav>{nav}</nav></div>'
            + (f'<details id="missing" class="notes"><summary>Not in this board: {len(missing)} setting'
               f'{"s" if len(missing) != 1 else ""} that the configs plan have no results yet</summary>'
               f'{e(note.replace("`", "") + "; ".join(missing))}.</details>' if missing else "")
            + f'<section id="ranking"><h2>Ranking per regime</h2><p class="notes">{e(RANK_INTRO)}</p>'
            + ranking_html(ranks, colours, regime_info) + f'<p class="notes" id="speed-source">{e(speed_how)}</p></section>'
            + f'<section id="which"><h2>Which to use when</h2><p>{_bold(e(advice))}</p></section>'
            + mt.html
            + (f'<details id="stealing-details"><summary>Stealing: spoof rate vs N</summary>{steal.html}</details>'
               if steal.html else "")
            + f'<details id="detailed"><summary>Detailed tables (every setting of every sweep)</summary>'
              f'<p class="notes">Rows sorted by the first column, ★ the best value of each column; click a header to '
              f"sort. ± one standard deviation over keys.</p>{detailed}</details>"
            + f'<details id="plots"><summary>Plots</summary>{imgs}</details>'
            + f'<section id="provenance"><h2>Provenance</h2><p class="meta">{e(meta)}</p>'
            + (f"<pre>{e(command)}</pre>" if command else "")
            + f'<p id="versions" class="notes">{e(ver_note)}.</p></section>'
            f"<script>{_JS}</script></body></html>")
    p = out / "index.html"
    _atomic_write(p, page)
    written.append(p)
    if readme:
        written.append(write_section(readme, md_text, start=README_START, end=README_END))
    return written
