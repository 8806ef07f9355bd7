"""Stealing in the harness and on the leaderboard: text spoofers as ``spoof`` cells at several N, and
the page's stealing section (spoof rate vs N with bootstrap intervals and a plot), on the tiny model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sketchwm.bench.config import BenchConfig
from sketchwm.bench.leaderboard import build_leaderboard
from sketchwm.bench.results import read_results
from sketchwm.bench.runner import bench_registry, plan, run_bench
from sketchwm.bench.stealing_page import bootstrap_interval, stealing_rows

UNIFORM = {"prior": {"source": "uniform"}, "delta": 2.0}
STEALING = {"train_n": [4, 12], "spoof_n": 4, "text_attacks": ["spoof-insert", "spoof-substitute"],
            "human": ["tiny"], "human_n": 10, "budget": 0.5}


def _config(**over) -> dict:
    cfg = {
        "name": "steal", "backends": [{"name": "tiny"}],
        "schemes": [{"name": "global-sketch", "params": UNIFORM},
                    {"name": "global-sketch-family", "params": {"members": 4, "member": UNIFORM}}],
        "lengths": [16], "prompt_sets": [{"name": "w", "source": "tiny", "n": 4}], "keys": 2,
        "n_null_cal": 99, "n_null_fpr": 10, "attacks": [], "tokens_step": 4, "batch_size": 64,
        "sampler": {"steps": 4}, "stealing": STEALING,
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def stealing_run(tmp_path_factory):
    """One run of the tiny stealing grid and its leaderboard."""
    out = tmp_path_factory.mktemp("steal")
    cfg = BenchConfig.model_validate(_config())
    run_bench(cfg, out, progress=False)
    build_leaderboard(out, out / "board")
    return cfg, out


def test_plan_has_one_spoof_cell_per_thief_and_n():
    """Per unit: the clean cell, the generation spoofer and each text spoofer at each N (no scrub)."""
    cfg = BenchConfig.model_validate(_config())
    units = plan(cfg, bench_registry())
    assert len(units) == 4  # 2 schemes × 2 keys
    for _, cells in units:
        spoof = sorted((c.attack, c.train_n, c.n) for c in cells if c.kind == "spoof")
        assert spoof == [("spoof-insert", 4, 10), ("spoof-insert", 12, 10), ("spoof-substitute", 4, 10),
                         ("spoof-substitute", 12, 10), ("steal-spoof", 4, 4), ("steal-spoof", 12, 4)]
    quiet = BenchConfig.model_validate(_config(stealing={**STEALING, "generation": False}))
    assert all(c.attack != "steal-spoof" for _, cells in plan(quiet, bench_registry()) for c in cells)


def test_old_stealing_configs_keep_their_cell_hashes():
    """Fields the forgery cells added are left out of the hash while at their defaults."""
    old = {"train_n": [4], "spoof_n": 4}
    cfg = BenchConfig.model_validate(_config(stealing=old))
    assert cfg.stealing.identity() == {"train_n": [4], "spoof_n": 4, "delta": 4.0, "scrub_strengths": [], "scrub_n": None}


def test_unknown_human_source_is_refused():
    with pytest.raises(Exception, match="unknown human text source"):
        BenchConfig.model_validate(_config(stealing={**STEALING, "human": ["novels"]}))


def test_text_spoofers_forge_the_human_passages(stealing_run):
    """The text spoof cells score the forged tiny passages: 10 texts per key, edit fraction ≤ the budget,
    and the per-text decision is recorded for every forged text."""
    _, out = stealing_run
    df = read_results(out)
    t = df[(df["cell_kind"] == "spoof") & (df["row_type"] == "text") & (df["attack"] == "spoof-insert")]
    assert len(t) == 2 * 2 * 2 * 10  # schemes × keys × N × passages
    assert t["detected"].notna().all()
    assert (t["edit_fraction"] > 0).all() and (t["edit_fraction"] <= 0.5 + 1e-9).all()


def test_stealing_section_on_the_page(stealing_run):
    """leaderboard.md and index.html carry the section; stealing.csv has one row per scheme, thief and N,
    each rate the mean of its texts' decisions (keys pooled) inside its bootstrap interval; the plot exists."""
    _, out = stealing_run
    board = out / "board"
    md = (board / "leaderboard.md").read_text()
    assert "## Stealing: spoof rate vs N" in md and "stealing-spoof-vs-n.png" in md
    page = (board / "index.html").read_text()
    assert 'id="stealing-vs-n"' in page and 'id="plot-stealing-spoof-vs-n"' in page
    assert "| spoof rate |" in md  # the ranking's worst spoof rate at the largest N
    assert (board / "stealing-spoof-vs-n.png").stat().st_size > 1000
    rows = pd.read_csv(board / "stealing.csv")
    assert len(rows) == 2 * 3 * 2  # schemes × thieves × N
    assert set(rows["train_n"]) == {4, 12} and set(rows["keys"]) == {2}
    df = read_results(out)
    for r in rows.to_dict("records"):
        t = df[(df["cell_kind"] == "spoof") & (df["row_type"] == "text") & (df["scheme"] == r["scheme"])
               & (df["attack"] == r["thief"]) & (df["train_n"] == r["train_n"])]
        assert r["n"] == len(t)
        assert r["rate"] == pytest.approx(float(t["detected"].mean()))
        assert r["lo"] - 1e-12 <= r["rate"] <= r["hi"] + 1e-12


def test_bootstrap_interval_and_rows_without_spoof_cells():
    """The interval brackets the rate and narrows with n; a run without spoof cells gives no rows."""
    hits = np.r_[np.ones(10), np.zeros(90)]
    rate, lo, hi = bootstrap_interval(hits)
    assert rate == 0.1 and 0.03 <= lo < 0.1 < hi <= 0.17
    _, lo4, hi4 = bootstrap_interval(np.tile(hits, 4))
    assert hi4 - lo4 < hi - lo
    assert stealing_rows(pd.DataFrame({"cell_kind": ["clean"], "row_type": ["text"]})).empty


def test_adaptive_thief_and_unrelated_keys_are_cells_and_columns(tmp_path):
    """A text spoofer with parameters (the adaptive thief) is its own spoof cell, named with its
    parameters on the page; ``unrelated_keys`` scores every forgery under that many unrelated keys
    (none of them a run key) and the page reports the rate with an interval."""
    from sketchwm.bench.plan import derive_key, derive_unrelated_key

    adaptive = {"name": "spoof-insert", "params": {"clusters": 4}}
    steal = {**STEALING, "train_n": [12], "text_attacks": ["spoof-insert", adaptive], "unrelated_keys": 3,
             "generation": False}
    cfg = BenchConfig.model_validate(_config(stealing=steal, keys=1,
                                             schemes=[{"name": "global-sketch-family", "params": {"members": 4, "member": UNIFORM}}]))
    run_keys = {derive_key(cfg, i).fingerprint for i in range(4)}
    assert not run_keys & {derive_unrelated_key(cfg, i, j).fingerprint for i in range(4) for j in range(3)}
    (_, cells), = plan(cfg, bench_registry())
    spoof = sorted((c.attack, c.attack_params) for c in cells if c.kind == "spoof")
    assert spoof == [("spoof-insert", '{"clusters": 4}'), ("spoof-insert", "{}")]
    assert len({c.hash for c in cells}) == len(cells)
    run_bench(cfg, tmp_path, progress=False)
    df = read_results(tmp_path)
    t = df[(df["cell_kind"] == "spoof") & (df["row_type"] == "text")]
    frac = t["unrelated_flagged"].to_numpy(np.float64)
    assert len(t) == 2 * 10 and np.isfinite(frac).all()
    assert np.allclose(frac * 3, np.round(frac * 3)) and ((frac >= 0) & (frac <= 1)).all()
    rows = stealing_rows(df.assign(regime="default"))
    assert set(rows["thief"]) == {"spoof-insert", "spoof-insert[clusters=4]"}
    for r in rows.to_dict("records"):
        g = t[t["attack_params"] == ("{}" if r["thief"] == "spoof-insert" else '{"clusters": 4}')]
        assert r["unrelated"] == pytest.approx(float(g["unrelated_flagged"].mean()))
        assert r["unrelated_lo"] - 1e-12 <= r["unrelated"] <= r["unrelated_hi"] + 1e-12
    build_leaderboard(tmp_path, tmp_path / "board")
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "unrelated-key rate" in md and "spoof-insert[clusters=4]" in md


def test_unrelated_rate_counts_each_unrelated_key_once():
    """The unrelated-key rate is the fraction of the J keys whose p-value is ≤ α, per text: every key at
    α = 1, none at α = 0, and it scores under J distinct keys (not the victim's)."""
    import torch

    from sketchwm.bench.inputs import Services

    steal = {**STEALING, "train_n": [4], "unrelated_keys": 3, "generation": False}
    cfg = BenchConfig.model_validate(_config(stealing=steal, keys=1, schemes=[{"name": "global-sketch", "params": UNIFORM}]))
    (unit, _), = plan(cfg, bench_registry())
    services = Services.build(cfg, bench_registry())
    ids = services.models.backend(unit.backend).encode(["the water runs down the hill and the sun is up over the town again"] * 2)
    unrelated = services.schemes.unrelated(unit)
    assert unrelated.count == 3
    assert np.array_equal(unrelated.rate(ids, alpha=1.0), np.ones(2))
    assert np.array_equal(unrelated.rate(ids, alpha=0.0), np.zeros(2))
    u = [unrelated.scheme(j).u for j in range(3)] + [services.schemes.scheme(unit).u]  # the Rademacher directions
    assert all(not torch.equal(u[a], u[b]) for a in range(4) for b in range(a + 1, 4))
