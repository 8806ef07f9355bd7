"""The leaderboard page's matched-quality section: each scheme compared at equal cost.

From the strength sweep's rows (:mod:`sketchwm.bench.matched` computes the matched figures): equal-KL
interpolation, MarkMyWords' rule (smallest tokens-to-detect among settings within 2% / 10% of the
unwatermarked oracle log-perplexity) and WaterBench's rule (each scheme at the strength where clean TPR
at 1% FPR is 0.9), the winners per regime and budget with ties, one Pareto panel (inline SVG) per
regime with bootstrap bands, and one sentence per axis on what it measures and where it misleads.
Used by :mod:`sketchwm.bench.leaderboard`.
"""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


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


# ---------------------------------------------------------------------------- matched comparisons
#: one sentence per axis: what it measures and where it misleads (shown on the page)
AXES = {
    "TPR at 1% FPR": "fraction of watermarked texts scoring at or above the one decision rule's threshold "
                     "(conformal on unwatermarked texts of the same model, length and regime); it says nothing "
                     "about how much the text changed and saturates at 1 on long texts.",
    "KL/token": "mean KL(p̃‖p) in nats between the tilted and the untilted distribution at every sampled row, the "
                "distortion a tilting scheme pays; it reads 0 for keyed-noise schemes (AAR, KTH) whose cost "
                "shows instead as lost diversity across samples. Each regime says which distribution: the one "
                "tokens are drawn from, after the sampler's temperature (results that record it), or the model's "
                "marginal before it (older results). They agree at T = 1; at T = 0.5 they rank the tilts "
                "differently (benchmarks/kl_temperature.py). At T = 0 the model's marginal is used (the sampled "
                "path moves only where the tilt flips the argmax).",
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


#: the KL axis of a regime's tables, as the page states it (:attr:`sketchwm.bench.matched.Curve.kl_axis`)
KL_AXES = {"sampled": "KL/token of the distribution tokens are drawn from (after the sampler's temperature)",
           "model": "KL/token of the model's marginals (before the sampler's temperature)"}


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


def matched_section(df: pd.DataFrame, colours: dict[str, str], regime_info: dict[str, str] | None = None,
                    cs: list[Any] | None = None, refs: dict[str, Any] | None = None) -> Matched:
    """The ``matched-quality`` section (see :mod:`sketchwm.bench.matched` for the rules): in HTML the
    Pareto panels, then the rules and tables collapsed in ``<details id="matched-details">``.

    Args:
        df: every result row; colours: scheme → colour; regime_info: regime → description;
        cs, refs: :func:`sketchwm.bench.matched.curves` and :func:`~sketchwm.bench.matched.references`
            of ``df`` when the caller has them (computed here otherwise).
    """
    from . import matched as M

    df = _with_regime(df)
    cs = M.curves(df) if cs is None else cs
    refs = M.references(df) if refs is None else refs
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
        axis = KL_AXES["sampled" if all(c.kl_axis == "sampled" for c in rc) else "model"]
        ref_txt = f"{ref_txt}; {axis}" if ref_txt else axis
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
                v = "NaN" if not est.ok else ("Infinity" if np.isposinf(est.mean) else f"{float(est.mean):.6g}")
                cells_html.append(f'<td data-v="{v}"' + (' class="best"' if star else "") + f">{e(txt)}"
                                  + (f' <span class="sd">{e(lab)}</span>' if lab else "")
                                  + (f"<sup>{e(sup)}</sup>" if sup else "") + "</td>")
            md.append(f"| {c.name} | {knob} | " + " | ".join(cells_md) + " |")
            sw = f'<span class="swatch" style="background:{colours.get(c.name, "#999")}"></span>'
            trs.append(f'<tr data-scheme="{e(c.name)}"><td>{sw}{e(c.name)}</td><td>{e(knob)}</td>' + "".join(cells_html) + "</tr>")
        md.append("")
        th = "".join(f"<th>{e(k + (' ↑' if higher[k] else ' ↓'))}</th>" for k in col_names)
        hs.append(f'<div class="scroll"><table class="board matched" data-regime="{e(regime)}" id="table-matched-{_slug(regime)}">'
                  f"<thead><tr><th>scheme</th><th>knob</th>{th}</tr></thead><tbody>{''.join(trs)}</tbody></table></div>")
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
                     'schemes the 95% intervals do not separate (a tie).</p><div class="scroll"><table class="board" id="table-winners">'
                     "<thead><tr><th>regime</th>" + "".join(f"<th>{e(b)}</th>" for b in budgets)
                     + f"</tr></thead><tbody>{''.join(trs)}</tbody></table></div>")
    # the greedy regime stated plainly
    greedy = [c for c in cs if "greedy" in c.regime]
    if greedy:
        lines = []
        for c in greedy:
            p = next((q for q in c.points if q.default), c.points[0])
            lines.append(f"{c.name}: TPR at 1% FPR {_fmt_est(p.get('tpr'))}, KL/token {_fmt_est(p.get('kl'))}, "
                         f"tokens-to-detect {_fmt_est(p.get('ttd'), integer=True)}")
        g = greedy[0].regime
        txt = (f"What a user decoding with the greedy default (`{g}`) gets from each scheme at its default "
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
    figs = ['<h3 id="pareto">Pareto curves, one panel per regime</h3>']
    for regime, svg in svgs.items():
        figs.append(f'<figure class="pareto" data-regime="{e(regime)}" id="pareto-{_slug(regime)}">{_compact_svg(svg)}'
                    f"<figcaption>regime {e(regime)}: each scheme's strength sweep (line, one marker per setting) with its "
                    "95% bootstrap band; a scheme without a knob is one point with its interval</figcaption></figure>")
    page = (hs[0] + "".join(figs) + '<details id="matched-details"><summary>Matched tables: equal KL, MarkMyWords, '
            "WaterBench, winners per budget</summary>" + "".join(hs[1:]) + "</details></section>")
    return Matched("\n".join(md), page, pd.DataFrame(rows), svgs)


def _compact_svg(svg: str) -> str:
    """``svg`` with its coordinates rounded to 0.1 px and its line breaks and indentation collapsed (the
    inline copy on the page; the files keep theirs)."""
    svg = re.sub(r"(-?\d+\.\d{2,})", lambda m: f"{float(m.group(1)):.1f}", svg)
    return re.sub(r"\s*\n\s*", " ", svg)
