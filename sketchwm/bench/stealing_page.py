"""The leaderboard's stealing section: spoof rate against the number of stolen texts N, per scheme.

Rows come from the harness's ``spoof`` cells (``stealing`` block of a bench config; one cell per
scheme setting, key, thief and ``train_n``): the generation spoofer ``steal-spoof`` and each text
spoofer of ``stealing.text_attacks`` (e.g. ``spoof-insert``, ``spoof-substitute``, forging human
passages). A forged text counts as spoofed when the run's one decision rule
(docs/pvalue-and-thresholds.md) flags it under the victim key at 1% FPR (the ``detected`` column of
its text row). Per (regime, scheme, thief, N) the texts of every key are pooled; the figure is the
fraction flagged with a 95% percentile-bootstrap interval over texts (Efron 1979; 2,000 resamples,
seeded), and the spread over keys as ± one standard deviation. Scrub rates (``scrub`` cells) are listed beside, as
the harness's summary values averaged over keys. A thief with parameters is named with them
(``spoof-insert[clusters=16]``: the adaptive thief). Where the run scores forgeries under unrelated
keys (``stealing.unrelated_keys``), the table adds the unrelated-key rate: per forged text the
fraction of those keys that flag it at p ≤ 0.01, averaged over texts, with its bootstrap interval.

The plot draws spoof rate vs N (log axis) with the intervals as error bars, one panel per thief and
one line per scheme (the leaderboard's colours), and the 5% line.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .bootstrap import bootstrap_interval

__all__ = ["Stealing", "stealing_rows", "stealing_section", "bootstrap_interval", "thief_label"]


@dataclass
class Stealing:
    """The stealing section: ``md`` / ``html`` (empty strings when the run has no spoof cells), ``rows``
    (one per regime, scheme, thief and N: rate, lo, hi, sd_keys, n, keys) and ``png`` (base64 PNG of
    the plot, or None)."""

    md: str
    html: str
    rows: pd.DataFrame
    png: str | None


def stealing_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Spoof rates per (regime, scheme, thief, train_n) from a results table (module doc).

    Args:
        df: every row of a run (:func:`sketchwm.bench.results.read_results`), with a ``regime`` column.

    Returns:
        columns regime, scheme, thief, train_n, rate, lo, hi, sd_keys, n, keys (empty when no spoof cell).
    """
    cols = ["regime", "scheme", "thief", "train_n", "rate", "lo", "hi", "sd_keys", "n", "keys",
            "unrelated", "unrelated_lo", "unrelated_hi"]
    t = df[(df["cell_kind"] == "spoof") & (df["row_type"] == "text")]
    if t.empty or "detected" not in t:
        return pd.DataFrame(columns=cols)
    t = t[t["detected"].notna()].assign(thief=[thief_label(a, p) for a, p in zip(t["attack"], t["attack_params"])])
    out = []
    for i, ((regime, scheme, thief, n), g) in enumerate(t.groupby(["regime", "scheme", "thief", "train_n"], sort=True)):
        hits = g["detected"].to_numpy(np.float64)
        rate, lo, hi = bootstrap_interval(hits, seed=i)
        per_key = g.groupby("key_index")["detected"].mean()
        un = g["unrelated_flagged"].dropna().to_numpy(np.float64) if "unrelated_flagged" in g else np.zeros(0)
        u, u_lo, u_hi = bootstrap_interval(un, seed=i)  # per text: the fraction of unrelated keys that flag it
        out.append({"regime": regime, "scheme": scheme, "thief": thief, "train_n": int(n), "rate": rate, "lo": lo,
                    "hi": hi, "sd_keys": float(per_key.std()) if len(per_key) > 1 else float("nan"),
                    "n": int(hits.size), "keys": int(len(per_key)), "unrelated": u, "unrelated_lo": u_lo,
                    "unrelated_hi": u_hi})
    return pd.DataFrame(out, columns=cols)


def thief_label(attack: str, params_json: str | None) -> str:
    """A thief's name on the page: the attack, with its parameters when it has any
    (``spoof-insert[clusters=16]``, the adaptive thief)."""
    import json

    params = json.loads(params_json) if isinstance(params_json, str) and params_json else {}
    if attack == "steal-spoof" or not params:
        return attack
    return f"{attack}[{','.join(f'{k}={v}' for k, v in sorted(params.items()))}]"


def _plot(rows: pd.DataFrame, colours: dict[str, str]) -> str:
    """Spoof rate vs N per thief (panels) and scheme (lines), as a base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thieves = list(dict.fromkeys(rows["thief"]))
    fig, axes = plt.subplots(1, len(thieves), figsize=(4.3 * len(thieves), 3.6), squeeze=False, sharey=True)
    multi_regime = rows["regime"].nunique() > 1
    for ax, thief in zip(axes[0], thieves):
        for (regime, scheme), g in rows[rows["thief"] == thief].groupby(["regime", "scheme"], sort=False):
            g = g.sort_values("train_n")
            ax.errorbar(g["train_n"], g["rate"], yerr=[g["rate"] - g["lo"], g["hi"] - g["rate"]], marker="o", capsize=3,
                        color=colours.get(scheme), label=f"{scheme} · {regime}" if multi_regime else scheme)
        ax.set_xscale("log")
        ax.axhline(0.05, color="grey", lw=0.8, ls="--")
        ax.set(title=thief, xlabel="stolen texts N", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("spoof rate (flagged at 1% FPR, victim key)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _scrub(df: pd.DataFrame) -> pd.DataFrame:
    s = df[(df["row_type"] == "summary") & (df["metric"] == "scrub-rate")]
    if s.empty:
        return s
    return (s.groupby(["regime", "scheme", "attack", "strength", "train_n"], sort=True)["value"]
            .agg(rate="mean", sd_keys="std", keys="count").reset_index())


def stealing_section(df: pd.DataFrame, colours: dict[str, str] | None = None) -> Stealing:
    """The stealing section of the leaderboard page (module doc) from every row of a run."""
    rows = stealing_rows(df)
    if rows.empty:
        return Stealing("", "", rows, None)
    colours = colours or {}
    e = html.escape
    intro = ("Spoof rate: forged texts flagged under the victim key at 1% FPR (the run's one decision rule), "
             "keys pooled; [95% percentile-bootstrap interval over texts] ± standard deviation over keys. "
             "Thieves: `steal-spoof` generates with stolen logit boosts; text spoofers write stolen words into "
             "human passages. The thief fits on N watermarked texts and N unwatermarked samples of the same model.")
    has_un = bool(np.isfinite(rows["unrelated"].astype(float)).any())
    if has_un:
        intro += (" Unrelated-key rate: per forged text, the fraction of keys unrelated to the victim's that flag it "
                  "at p ≤ 0.01 (a sound p-value keeps it ≤ 1% whatever the text), averaged over texts [95% bootstrap].")
    un_head = " unrelated-key rate |" if has_un else ""
    md = ["## Stealing: spoof rate vs N", "", intro, "", f"| scheme | thief | N | spoof rate ↓ | n |{un_head}",
          "|---|---|---|---|---|" + ("---|" if has_un else "")]
    multi_regime = rows["regime"].nunique() > 1
    body = []
    for r in rows.to_dict("records"):
        name = f"{r['scheme']} · {r['regime']}" if multi_regime else r["scheme"]
        sd = f" ± {r['sd_keys']:.2g}" if np.isfinite(r["sd_keys"]) else ""
        cell = f"{r['rate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]{sd}"
        un = (f"{r['unrelated']:.3f} [{r['unrelated_lo']:.3f}, {r['unrelated_hi']:.3f}]"
              if np.isfinite(float(r["unrelated"])) else "n/a")
        md.append(f"| {name} | {r['thief']} | {r['train_n']} | {cell} | {r['n']} |" + (f" {un} |" if has_un else ""))
        body.append(f'<tr><td>{e(name)}</td><td>{e(r["thief"])}</td><td data-v="{r["train_n"]}">{r["train_n"]}</td>'
                    f'<td data-v="{r["rate"]!r}">{e(cell)}</td><td data-v="{r["n"]}">{r["n"]}</td>'
                    + (f'<td data-v="{float(r["unrelated"])!r}">{e(un)}</td>' if has_un else "") + "</tr>")
    sc = _scrub(df)
    scrub_md, scrub_html = [], ""
    if not sc.empty:
        scrub_md = ["", "| scheme | scrub | N | scrub rate ↓ (mean over keys) |", "|---|---|---|---|"]
        trs = []
        for r in sc.to_dict("records"):
            name = f"{r['scheme']} · {r['regime']}" if multi_regime else r["scheme"]
            scrub_md.append(f"| {name} | {r['attack']} s={r['strength']:g} | {int(r['train_n'])} | {r['rate']:.3f} |")
            trs.append(f"<tr><td>{e(name)}</td><td>{e(r['attack'])} s={r['strength']:g}</td><td>{int(r['train_n'])}</td>"
                       f"<td data-v=\"{r['rate']!r}\">{r['rate']:.3f}</td></tr>")
        scrub_html = ("<table class=\"board\" id=\"table-scrub\"><thead><tr><th>scheme</th><th>scrub</th><th>N</th>"
                      f"<th>scrub rate ↓</th></tr></thead><tbody>{''.join(trs)}</tbody></table>")
    png = _plot(rows, colours)
    md += scrub_md + ["", "![spoof rate vs N](stealing-spoof-vs-n.png)"]
    page = (f'<section id="stealing-vs-n"><h2>Stealing: spoof rate vs N</h2><p>{e(intro)}</p>'
            '<table class="board" data-task="stealing" id="table-stealing"><thead><tr><th>scheme</th><th>thief</th>'
            f"<th>N</th><th>spoof rate ↓</th><th>n</th>{'<th>unrelated-key rate</th>' if has_un else ''}</tr></thead><tbody>{''.join(body)}</tbody></table>{scrub_html}"
            f'<figure><img id="plot-stealing-spoof-vs-n" alt="spoof rate vs N" src="data:image/png;base64,{png}">'
            "<figcaption>spoof rate vs stolen texts N (95% bootstrap intervals; dashed: 5%)</figcaption></figure></section>")
    return Stealing("\n".join(md), page, rows, png)
