"""The committed leaderboard (``benchmarks/leaderboard/``: the shipped ``leaderboard-headline``,
``leaderboard-more`` and ``leaderboard-stealing`` configs run into one results folder) opened in a real
browser: one Pareto panel per regime, every scheme swept over at least 4 settings a curve with a
bootstrap band, every other scheme its points, what the configs plan and the board lacks named on the
page, the winners table naming per regime the winner at each budget with ties joined, and the greedy
regime stated for every scheme."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from sketchwm.bench.config import load_config
from sketchwm.bench.plan import plan
from sketchwm.bench.runner import bench_registry

ROOT = Path(__file__).resolve().parents[1]
BOARD = ROOT / "benchmarks" / "leaderboard"
#: the configs the committed board was run from, into one results folder
BOARD_CONFIGS = ("leaderboard-headline", "leaderboard-more", "leaderboard-stealing")


@pytest.fixture(scope="module")
def shipped():
    """(regimes, {scheme name: has a strength knob}, {(regime, curve): settings planned}) of the committed board."""
    reg = bench_registry()
    regimes: list[str] = []
    knob: dict[str, bool] = {}
    planned: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name in BOARD_CONFIGS:
        cfg = load_config(name)
        regimes += [r.name for r in cfg.regime_list if r.name not in regimes]
        knob.update({s.name: reg.get("scheme", s.name).strength.field is not None for s in cfg.schemes})
        for unit, _ in plan(cfg, reg):
            planned[(cfg.regime_list[unit.regime].name, unit.curve)].add(unit.scheme)
    return regimes, knob, planned


def test_board_was_built_from_the_shipped_configs(shipped):
    regimes, knob, _ = shipped
    df = pd.read_parquet(BOARD / "results.parquet", columns=["regime", "curve"])
    assert set(df["regime"].unique()) <= set(regimes) and "fastdllm-blocks-t0.5-c0.9" in set(df["regime"])
    assert sorted(df["curve"].unique()) == sorted(knob)
    default = df[df["curve"] == "global-sketch-green"]
    assert set(default["regime"]) == set(df["regime"]), "the default is in every regime of the board"


def test_committed_board_in_chromium(shipped, chromium_page):
    regimes, knob, planned = shipped
    res = pd.read_parquet(BOARD / "results.parquet", columns=["regime", "curve", "scheme"]).drop_duplicates()
    settings = res.groupby(["regime", "curve"])["scheme"].nunique().to_dict()  # strength settings run
    have = set(settings)
    shown = [r for r in regimes if r in set(res["regime"])]
    page = chromium_page(BOARD / "index.html")
    absent = [(r, s) for r in regimes for s in knob if (r, s) not in have and (r, s) in planned]
    if absent:  # a run stopped early: the page names what is missing
        note = page.locator("#missing").text_content()
        for r, s in absent:
            assert f"{s}" in note and f"· {r} (" in note, (r, s)
    assert sorted(page.locator("figure.pareto").evaluate_all("fs => fs.map(f => f.dataset.regime)")) == sorted(shown)
    for regime in shown:
        panel = page.locator(f'figure.pareto[data-regime="{regime}"]')
        assert panel.locator("svg").count() == 1
        swept = "greedy" not in regime  # the greedy regime runs each scheme at its default strength
        for scheme, has_knob in knob.items():
            if (regime, scheme) not in have:
                continue
            if swept and has_knob and settings[(regime, scheme)] >= 4:
                curve = panel.locator(f'g[id="curve-tpr-kl-{scheme}"]')
                assert curve.count() == 1, (regime, scheme)
                assert curve.locator("use").count() >= 4, (regime, scheme)
                assert panel.locator(f'g[id="band-tpr-kl-{scheme}"] path').count() >= 1, (regime, scheme)
            else:  # no knob, the greedy regime's default point, a smaller sweep, or one the run stopped in
                assert panel.locator(f'[id$="-tpr-kl-{scheme}"]').count() >= 1, (regime, scheme)
                if settings[(regime, scheme)] < len(planned[(regime, scheme)]):  # stopped: named above
                    assert f"{scheme}[" in page.locator("#missing").text_content(), (regime, scheme)
    rows = page.locator("#table-winners tbody tr").evaluate_all("rs => rs.map(r => r.dataset.regime)")
    assert sorted(rows) == sorted(shown)
    cells = page.locator("#table-winners tbody td[data-budget]").evaluate_all(
        "ts => ts.map(t => [t.closest('tr').dataset.regime, t.dataset.winners, t.dataset.tie, t.textContent])")
    named = [c for c in cells if c[1]]
    assert {c[0] for c in named} == set(shown), "every regime names a winner at some budget"
    for _, win, tie, text in named:
        names = win.split("|")
        assert text.startswith(names[0]) and (tie == "true") == (len(names) > 1)
        if len(names) > 1:
            assert " = ".join(names) in text and "(tie)" in text
    if any("greedy" in r for r in shown):
        greedy = page.locator("#greedy-text").text_content()
        for scheme in knob:
            if any("greedy" in r and s == scheme for r, s in have):
                assert f"{scheme}: TPR at 1% FPR" in greedy, scheme


def test_committed_stealing_adaptive_board_matches_its_results():
    """The committed adaptive-thief board (``benchmarks/leaderboard/stealing-adaptive``): its table is
    what :func:`stealing_rows` computes from its committed results (rates, intervals, unrelated-key
    rates), it covers both family sizes at N = 1,000 with the adaptive thief, and its cells are those
    the two shipped configs plan (by hash once its cells carry scheme versions; before that, by the
    cells' coordinates)."""
    from sketchwm.bench.leaderboard import UNVERSIONED, scheme_versions
    from sketchwm.bench.runner import plan
    from sketchwm.bench.stealing_page import stealing_rows

    board = BOARD / "stealing-adaptive"
    df = pd.read_parquet(board / "results.parquet")
    cells = [c for name in ("stealing-adaptive", "stealing-adaptive-64")
             for _, cs in plan(load_config(name), bench_registry()) for c in cs]
    if all(v != [UNVERSIONED] for v in scheme_versions(df).values()):
        assert set(df["cell_hash"]) == {c.hash for c in cells}
    else:
        coords = ["scheme", "regime_index", "key_index", "length", "cell_kind", "attack", "attack_params", "strength", "train_n"]
        have = set(df[coords].drop_duplicates().itertuples(index=False, name=None))
        assert have == {(c.unit.scheme, c.unit.regime, c.unit.key, c.unit.length, c.kind, c.attack, c.attack_params,
                         c.strength, c.train_n) for c in cells}
        assert df["cell_hash"].nunique() == len(cells)
    rows = stealing_rows(df).reset_index(drop=True)
    table = pd.read_csv(board / "stealing.csv")
    pd.testing.assert_frame_equal(table[["scheme", "thief", "train_n", "rate", "lo", "hi", "unrelated"]],
                                  rows[["scheme", "thief", "train_n", "rate", "lo", "hi", "unrelated"]].astype(table.dtypes[
                                      ["scheme", "thief", "train_n", "rate", "lo", "hi", "unrelated"]].to_dict()),
                                  check_exact=False, atol=1e-9)
    at_1000 = table[table["train_n"] == 1000]
    assert {"spoof-insert[clusters=16]", "spoof-insert[clusters=64]"} <= set(at_1000["thief"])
    assert {"global-sketch-family-16", "global-sketch-family-64"} == set(at_1000["scheme"])
    assert (table["unrelated"] <= table["unrelated_hi"] + 1e-12).all() and table["unrelated"].notna().all()
