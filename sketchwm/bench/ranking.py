"""The leaderboard's first screen: per regime one ranking table, one row per scheme, sorted by one stated rule.

**The rule** (MarkMyWords, Piet et al. 2023): a scheme's size is the fewest median tokens-to-detect
among its settings whose mean oracle log-perplexity is within 10% of the unwatermarked texts' of the
same regime (:func:`sketchwm.bench.matched.markmywords`); fewer is better. Results without the oracle's
log-perplexity, and regimes where fewer than two schemes have a setting within that bound (at low
temperature a watermark's relative log-perplexity cost is large), are ranked by TPR at 1% FPR at
KL/token 0.1 instead (equal distortion, as in Gloaguen et al. 2025; :func:`sketchwm.bench.matched.at_kl`),
higher is better; each table says which rule ranked it and why.

**Ties.** Rows are taken in order of the ranking figure; a row joins the group of the row that opened
the current group while their 95% bootstrap intervals overlap (:func:`sketchwm.bench.matched.winners`'
tie), and opens the next group otherwise. Each group of several schemes gets one sentence on what
would separate its first two: the factor of texts per setting at which intervals of the observed
widths (which shrink as 1/√n) would stop overlapping, or, when the two estimates are equal, that more
texts would not.

**The other columns** are read at the row's setting: the MarkMyWords setting, else the scheme's
default strength. TPR at 1% FPR at KL/token 0.1 (interpolated along the sweep; a regime at default
strengths shows the default's TPR); KL/token of that setting (0 for keyed-noise schemes, whose cost
shows as lost diversity instead); TPR after 30% substitution, insertion and reordering (the results'
attacks at strength 0.3); distinct-2 across samples of one prompt under one key beside the
unwatermarked samples', and, in results that record it, the share of pairs of those samples that open
with the same token; detection throughput (``Detector.detect_batch`` tokens per second, warm and side by
side on one workload, from ``benchmarks/perf_detect_board.py`` when the results folder holds its
``detect-speed.json``, else each cell's own cold timing, marked so); the worst spoof rate over the
thieves at the largest stolen-sample count, when the results hold spoof cells.

Used by :mod:`sketchwm.bench.leaderboard`; the figures come from :mod:`sketchwm.bench.matched`.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import matched as M

__all__ = ["RankRow", "Ranking", "rankings", "regime_order", "ranking_md", "ranking_html", "which_to_use", "RULE_TOL", "RULE_KL"]

#: MarkMyWords' quality tolerance of the ranking (relative log-perplexity increase)
RULE_TOL = 0.10
#: the KL/token budget of the matched TPR column (and of the ranking without an oracle)
RULE_KL = 0.1
#: the attack strength of the edit columns, and the families shown (substitution, insertion, reordering)
EDIT_STRENGTH = 0.3
EDIT_FAMILIES = ("substitution", "insertion", "reordering")
#: the detection-throughput column (warm, side by side: ``detect-speed.json``)
SPEED_COL = "detect tokens/s"


@dataclass
class RankRow:
    """One scheme of a ranking: its curve name, group number (1 = best; None: not ranked, the rule
    gives it no figure), the setting its columns are read at (a point label), ``figures`` (column →
    :class:`sketchwm.bench.matched.Estimate`) and ``note`` (why the ranking figure is inf or missing)."""

    scheme: str
    group: int | None
    setting: str
    figures: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass
class Ranking:
    """A regime's ranking: ``rule`` (the sentence stating it), ``key`` (the ranking column), whether
    higher is better, its ``rows`` best first, ``ties`` (one sentence per tie group) and the reference
    figures of the unwatermarked texts (``ref``)."""

    regime: str
    rule: str
    key: str
    higher: bool
    rows: list[RankRow]
    ties: list[str]
    ref: dict[str, Any]
    columns: list[str]


def _throughput(df: pd.DataFrame) -> dict[tuple[str, str], float]:
    """{(regime, point label): mean detection throughput (tokens/s) over keys}."""
    s = df[(df["row_type"] == "summary") & (df["metric"] == "detect-throughput")]
    return {k: float(v) for k, v in s.groupby(["regime", "scheme"])["value"].mean().items()}


def _spoof(df: pd.DataFrame) -> dict[tuple[str, str], tuple[M.Estimate, str]]:
    """{(regime, scheme): (worst spoof rate over thieves at the largest N, "thief N=…")} of the spoof cells."""
    from .stealing_page import stealing_rows

    rows = stealing_rows(df)
    out: dict[tuple[str, str], tuple[M.Estimate, str]] = {}
    if rows.empty:
        return out
    for (regime, scheme), g in rows.groupby(["regime", "scheme"]):
        g = g[g["train_n"] == g["train_n"].max()]
        r = g.loc[g["rate"].idxmax()]
        out[(str(regime), str(scheme))] = (M.Estimate(float(r["rate"]), float(r["lo"]), float(r["hi"]), n=int(r["n"])),
                                           f"{r['thief']} N={int(r['train_n']):,}")
    return out


def _separation(a: str, ea: M.Estimate, b: str, eb: M.Estimate, tokens: bool, n: int,
                floors: tuple[int | None, int | None] = (None, None)) -> str:
    """One sentence on what would separate the first two schemes of a tie group (``floors``: their
    detectors' minimum lengths, below which tokens-to-detect cannot go)."""
    diff = abs(ea.mean - eb.mean)
    what = "tokens-to-detect" if tokens else "TPR"
    if tokens and None not in floors and ea.mean <= floors[0] and eb.mean <= floors[1]:
        at = f"{floors[0]} tokens" if floors[0] == floors[1] else f"{floors[0]} and {floors[1]} tokens"
        return (f"{a} and {b} both detect at their detector's minimum of {at}, a floor rather than a "
                "measurement: more texts would not separate them, a lower minimum or the equal-KL column would")
    if diff == 0 or not (np.isfinite(ea.lo) and np.isfinite(eb.hi)):
        return (f"{a} and {b} have the same {what} ({_num(ea.mean, tokens)})"
                + (f" on the {n}-text sample: more texts would not separate them; a finer tokens-to-detect grid "
                   "or shorter texts would" if tokens else ": more texts would not separate them"))
    half = (ea.hi - ea.lo) / 2 + (eb.hi - eb.lo) / 2
    factor = (half / diff) ** 2
    if factor > 100:
        return (f"{a} and {b} differ by {_num(diff, tokens)} with intervals {half / diff:.0f}× wider than that: "
                "no practical number of texts would separate them")
    return (f"{a} and {b} would separate at about {max(factor, 1.05):.1f}× the texts per setting "
            f"(about {math.ceil(max(factor, 1.05) * n)} instead of {n}), if the difference of "
            f"{_num(diff, tokens)} holds")


def _num(x: float, tokens: bool) -> str:
    if np.isposinf(x):
        return "inf"
    return f"{x:.0f}" if tokens else f"{x:.2f}"


def _point(c: M.Curve, label: str) -> M.Point:
    return next((p for p in c.points if p.label == label), next((p for p in c.points if p.default), c.points[0]))


def regime_order(regimes: Any) -> list[str]:
    """The distinct ``regimes``: the named ones (:data:`sketchwm.bench.config.REGIMES`) in their declared
    order, then the others in the order given."""
    from .config import REGIMES

    named = list(REGIMES)
    return sorted(dict.fromkeys(map(str, regimes)), key=lambda r: named.index(r) if r in named else len(named))


def rankings(df: pd.DataFrame, cs: list[M.Curve], refs: dict[str, dict[str, M.Estimate]],
             speed: dict[str, float] | None = None) -> list[Ranking]:
    """One :class:`Ranking` per regime of ``cs`` (module doc for the rule, the ties and the columns).

    Args:
        df: every result row (for throughput and spoof cells); cs: :func:`sketchwm.bench.matched.curves`
            of it; refs: :func:`sketchwm.bench.matched.references` of it; speed: curve name → detection
            tokens/s measured side by side (``detect-speed.json``'s ``tokens_per_s``), the same in
            every regime; None: each cell's own timing (the column is then named ``detect tokens/s (cold)``).
    """
    cell_speed, spoof = _throughput(df), _spoof(df)
    speed_col = SPEED_COL if speed is not None else SPEED_COL + " (cold)"
    edits = [f"tpr:{f}@{EDIT_STRENGTH:g}" for f in EDIT_FAMILIES]
    out = []
    for regime in regime_order(c.regime for c in cs):
        rc = [c for c in cs if c.regime == regime]
        ref = refs.get(regime, {})
        swept = any(c.swept for c in rc)
        mmw = {c.name: M.markmywords(c, ref.get("logppl"), RULE_TOL) for c in rc}
        oracle = any(e.note != "no-oracle" for e, _ in mmw.values())
        tpr_col = f"TPR @ KL={RULE_KL:g}" if swept else "TPR (default strength)"
        tok_col = f"tokens to detect (log-PPL ≤ +{RULE_TOL:.0%})"
        first_token = any(p.get("first_token").ok for c in rc for p in c.points)  # results that record it
        rows = []
        for c in rc:
            est, label = mmw[c.name]
            p = _point(c, label)
            f: dict[str, Any] = {tok_col: est, tpr_col: M.at_kl(c, "tpr", RULE_KL) if swept else p.get("tpr"),
                                 "KL/token": p.get("kl")}
            have = [e for e in edits if p.get(e).ok]
            f["TPR after edits"] = [p.get(e) for e in edits] if have else None
            f["diversity"] = p.get("diversity")
            if first_token:
                f["first-token match"] = p.get("first_token")
            f[speed_col] = (float(speed.get(c.name, float("nan"))) if speed is not None
                            else cell_speed.get((regime, p.label), float("nan")))
            if spoof:
                f["spoof rate"] = spoof.get((regime, c.name), (M.NA, ""))
            pfloor = min((q.get("pmin").mean for q in c.points if q.get("pmin").ok), default=0.0) > 0.01
            why = ("no text reached p ≤ 0.01" if pfloor else "median text not detected" if est.ok and np.isposinf(est.mean)
                   else f"no setting within +{RULE_TOL:.0%} log-PPL" if est.note == "none-within" else "")
            rows.append(RankRow(c.name, 0, p.label, f, why))
        # MarkMyWords ranks where at least two schemes have a setting within the quality bound; at low
        # temperature every setting can be outside it, and equal KL ranks instead
        mmw_ok = oracle and sum(r.figures[tok_col].ok for r in rows) >= 2
        key, higher = (tok_col, False) if mmw_ok else (tpr_col, True)
        if mmw_ok:
            rule = (f"fewest median tokens to detect among the settings whose oracle log-PPL is within {RULE_TOL:.0%} "
                    "of the unwatermarked texts' (MarkMyWords)")
        else:
            why_not = ("no oracle log-PPL in these results" if not oracle else
                       f"fewer than two schemes have a setting within {RULE_TOL:.0%} of the unwatermarked log-PPL here, "
                       "so MarkMyWords' rule cannot rank them")
            rule = f"TPR at 1% FPR at KL/token {RULE_KL:g} ({why_not})"
            for r in rows:  # the note explains a missing ranking figure, now the TPR
                e = r.figures[tpr_col]
                r.note = ("" if e.ok else f"its sweep spans KL/token {e.note.split(':', 1)[1]}"
                          if e.note.startswith("outside-sweep:") else "no figure at this KL")

        def sort_key(r: RankRow) -> tuple:
            e = r.figures[key]
            v = e.mean if e.ok else np.nan
            second = r.figures[tpr_col]
            return (not e.ok, (-v if higher else v) if e.ok else 0.0, -(second.mean if second.ok else -1.0), r.scheme)
        rows.sort(key=sort_key)
        floor = {c.name: c.min_tokens for c in rc}
        ties, group, lead = [], 0, None
        members: list[RankRow] = []

        def close() -> None:
            if len(members) > 1 and np.isfinite(members[0].figures[key].mean):
                n = min(members[0].figures[key].n, members[1].figures[key].n) or 1
                ties.append(_separation(members[0].scheme, members[0].figures[key], members[1].scheme,
                                        members[1].figures[key], key == tok_col, n,
                                        (floor[members[0].scheme], floor[members[1].scheme])))
        for r in rows:  # finite figures grouped by overlapping intervals, then every inf in one group
            e = r.figures[key]
            if not e.ok:
                r.group = None
                continue
            joins = lead is not None and (M._overlap(e, lead) if np.isfinite(e.mean) and np.isfinite(lead.mean)
                                          else np.isinf(e.mean) and np.isinf(lead.mean))
            if not joins:
                close()
                group, lead, members = group + 1, e, []
            r.group = group
            members.append(r)
        close()
        cols = ["#", "scheme", key] + [k for k in rows[0].figures if k != key] if rows else []
        out.append(Ranking(regime, rule, key, higher, rows, ties, ref, cols))
    return out


def _cell(v: Any, col: str) -> str:
    """A compact figure: ``mean [lo, hi]`` (the interval dropped when it is the point)."""
    if v is None:
        return "–"
    if isinstance(v, tuple):  # spoof rate with its thief
        return _cell(v[0], col)
    if isinstance(v, list):  # the edit columns
        return " / ".join(f"{e.mean:.2f}" if e.ok else "n/a" for e in v)
    if isinstance(v, float):  # a throughput
        if math.isnan(v):
            return "n/a"
        return next((f"{v / d:.3g}{u}" for d, u in ((1e6, "M"), (1e3, "k")) if v >= d), f"{v:.3g}")
    if not v.ok:
        return "n/a"
    tokens = col.startswith("tokens")
    f = (lambda x: "inf" if np.isposinf(x) else f"{x:.0f}") if tokens else (lambda x: f"{x:.2f}" if col != "KL/token" else f"{x:.3f}")
    txt = f(v.mean)
    if np.isfinite(v.lo) and np.isfinite(v.hi) and not (v.lo == v.mean == v.hi):
        txt += f" [{f(v.lo)}, {f(v.hi)}]"
    return txt


def _value(v: Any) -> str:
    """The sort value of a cell for ``data-v``."""
    if isinstance(v, tuple):
        v = v[0]
    if isinstance(v, list):
        ok = [e.mean for e in v if e.ok]
        return f"{float(np.mean(ok)):.6g}" if ok else "NaN"
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else f"{v:.6g}"
    if v is None or not v.ok:
        return "NaN"
    return "Infinity" if np.isposinf(v.mean) else f"{float(v.mean):.6g}"


def _header(col: str, r: Ranking) -> str:
    if col == "TPR after edits":
        return f"TPR after edits ({', '.join(f[:3] + '.' for f in EDIT_FAMILIES)} {EDIT_STRENGTH:g})"
    if col in ("diversity", "first-token match"):
        ref = r.ref.get("diversity" if col == "diversity" else "first_token")
        name = "diversity across samples" if col == "diversity" else "first-token match across samples"
        return name + (f" (unwatermarked {ref.mean:.2f})" if ref is not None and ref.ok else "")
    return col


def _rows(r: Ranking) -> list[tuple[str, bool, str, str, list[tuple[str, str]]]]:
    """Per row of ``r``: (group label, whether tied, scheme, its setting suffix, [(cell text, sort value)])."""
    sizes = pd.Series([x.group for x in r.rows if x.group is not None], dtype=object).value_counts().to_dict()
    out = []
    for x in r.rows:
        tie = x.group is not None and sizes[x.group] > 1
        label = "–" if x.group is None else f"{x.group}{'=' if tie else ''}"
        suffix = x.setting[len(x.scheme):] if x.setting.startswith(x.scheme + "[") else (
            "" if x.setting == x.scheme else f" ({x.setting})")
        cells = [(_cell(x.figures[c], c) + (f" ({x.note})" if c == r.key and x.note else ""), _value(x.figures[c]))
                 for c in r.columns[2:]]
        out.append((label, tie, x.scheme, suffix, cells))
    return out


def ranking_md(rs: list[Ranking], regime_info: dict[str, str] | None = None) -> str:
    """The rankings as Markdown: per regime its rule, the table and the tie sentences."""
    out = []
    for r in rs:
        desc = (regime_info or {}).get(r.regime, "")
        out += [f"### `{r.regime}`" + (f": {desc}" if desc else ""), "", f"Ranked by {r.rule}.", ""]
        out.append("| " + " | ".join(_header(c, r) for c in r.columns) + " |")
        out.append("|" + "---|" * len(r.columns))
        for label, _, scheme, suffix, cells in _rows(r):
            out.append(f"| {label} | {scheme}{suffix} | " + " | ".join(t for t, _ in cells) + " |")
        out.append("")
        if r.ties:
            out += ["Ties: " + "; ".join(r.ties) + ".", ""]
    return "\n".join(out)


def ranking_html(rs: list[Ranking], colours: dict[str, str], regime_info: dict[str, str] | None = None) -> str:
    """The rankings as HTML tables (``table.ranking[data-regime]``, rows ``tr[data-scheme][data-group]``)."""
    e = html.escape
    parts = []
    for r in rs:
        desc = (regime_info or {}).get(r.regime, "")
        trs = []
        for label, tie, scheme, suffix, cells in _rows(r):
            sw = f'<span class="swatch" style="background:{colours.get(scheme, "#999")}"></span>'
            tds = "".join(f'<td data-v="{v}">{_split(t)}</td>' for t, v in cells)
            trs.append(f'<tr data-scheme="{e(scheme)}" data-group="{e(label)}"{" class=tie" if tie else ""}>'
                       f'<td>{e(label)}</td><td>{sw}{e(scheme)}<span class="sd">{e(suffix)}</span></td>{tds}</tr>')
        th = "".join(f"<th>{e(_header(c, r))}</th>" for c in r.columns)
        ties = f'<p class="notes">Ties: {e("; ".join(r.ties))}.</p>' if r.ties else ""
        parts.append(f'<h3 id="rank-{_slug(r.regime)}">{e(r.regime)}<span class="meta"> {e(desc)}. Ranked by '
                     f'{e(r.rule)}.</span></h3>'
                     f'<table class="board ranking" data-regime="{e(r.regime)}" id="table-rank-{_slug(r.regime)}">'
                     f"<thead><tr>{th}</tr></thead><tbody>{''.join(trs)}</tbody></table>{ties}")
    return "".join(parts)


def _split(text: str) -> str:
    """A cell's figure in HTML: the value, then its interval or note in a smaller span that may wrap."""
    i = min((k for k in (text.find(" ["), text.find(" (")) if k > 0), default=-1)
    if i < 0:
        return html.escape(text)
    return f'{html.escape(text[:i])} <span class="sd">{html.escape(text[i + 1:])}</span>'


def _slug(x: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in x.lower()).strip("-")


def which_to_use(rs: list[Ranking], default: str) -> str:
    """A paragraph generated from the rankings: per regime the first group (with the distortion its first
    scheme pays there: KL/token at its setting), the scheme that keeps the most detections after edits,
    the one whose samples stay most diverse, the hardest and easiest to forge where the results hold
    spoof cells, and where ``default`` stands."""
    lines = []
    for r in rs:
        if not r.rows:
            continue
        first = [x for x in r.rows if x.group == 1]
        what = "tokens to detect" if not r.higher else "TPR"
        if first:
            kl = first[0].figures.get("KL/token")
            cost = (f"; {first[0].setting} at KL/token {_cell(kl, 'KL/token')}"
                    if kl is not None and not isinstance(kl, (list, float, tuple)) and kl.ok else "")
            lead = (f"{' = '.join(x.scheme for x in first)} "
                    f"({_cell(first[0].figures[r.key], r.key)} {what}{', tied' if len(first) > 1 else ''}{cost})")
        else:  # rows, none ranked (e.g. no setting within the quality bound)
            lead = f"no scheme is ranked ({what} not measured within the quality bound)"
        s = f"**{r.regime}**: {lead}"
        rob = [(np.mean([e.mean for e in x.figures['TPR after edits'] if e.ok]), x.scheme) for x in r.rows
               if x.figures.get("TPR after edits") and any(e.ok for e in x.figures["TPR after edits"])]
        if rob:
            v, name = max(rob)
            s += f"; after edits, {name} keeps the most detections (mean TPR {v:.2f})"
        div = [(x.figures["diversity"].mean, x.scheme) for x in r.rows if x.figures["diversity"].ok]
        ref = r.ref.get("diversity")
        if div:
            v, name = max(div)
            s += f"; {name} keeps samples most diverse ({v:.2f}" + (f" vs {ref.mean:.2f} unwatermarked)" if ref else ")")
        spoof = [(x.figures["spoof rate"][0], x.scheme) for x in r.rows
                 if isinstance(x.figures.get("spoof rate"), tuple) and x.figures["spoof rate"][0].ok]
        if spoof:  # the stolen-sample thieves: the most and least forgeable scheme measured
            (lo, lo_name), (hi, hi_name) = min(spoof, key=lambda t: t[0].mean), max(spoof, key=lambda t: t[0].mean)
            s += (f"; against the word and pair thieves {lo_name} is the hardest to forge (spoof rate "
                  f"{_cell(lo, 'spoof rate')}) and {hi_name} the easiest ({_cell(hi, 'spoof rate')})")
        mine = next((x for x in r.rows if x.scheme == default), None)
        if mine is not None:
            s += (f"; the default {default} is in group {mine.group} ({_cell(mine.figures[r.key], r.key)})"
                  if mine.group is not None else f"; the default {default} is not ranked")
        lines.append(s + ".")
    if lines and not any(x.scheme == default for r in rs for x in r.rows):
        lines.append(f"The default, {default}, is not on this board.")
    return " ".join(lines)
