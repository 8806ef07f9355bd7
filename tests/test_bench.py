"""`sketchwm bench` / `sketchwm leaderboard`: resume after SIGKILL, third-party schemes, Ray, a real Chromium."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import pytest

from cli_tiny import sigint_default
from sketchwm.bench.config import BenchConfig, load_config
from sketchwm.bench.leaderboard import build_leaderboard
from sketchwm.bench.results import TIMING_COLUMNS, done_cells, read_results
from sketchwm.bench.runner import bench_registry, plan, run_bench
from sketchwm.errors import ConfigError
from sketchwm.hookspecs import hookimpl
from sketchwm.registry import Registry, get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]


def tiny_config(**over) -> dict:
    cfg = {
        "name": "t", "backends": [{"name": "tiny"}], "schemes": [{"name": "global-sketch"}, {"name": "unigram"}],
        "lengths": [16], "prompt_sets": [{"name": "w", "source": "tiny", "n": 6}], "keys": 2,
        "n_null_cal": 99, "n_null_fpr": 20, "attacks": [{"name": "delete-random", "strengths": [0.2, 0.5]}],
        "tokens_step": 4, "batch_size": 64, "sampler": {"steps": 4},
    }
    cfg.update(over)
    return cfg


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without wall-clock columns; values of wall-clock metrics (throughput) blanked."""
    df = df.drop(columns=[c for c in TIMING_COLUMNS if c in df]).copy()
    timed = df["deterministic"].eq(False)
    df.loc[timed, "value"] = float("nan")
    return df.sort_values(["cell_hash", "row_index"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """One uninterrupted local run of the tiny grid (shared by the comparisons and the page tests)."""
    out = tmp_path_factory.mktemp("local")
    cfg = BenchConfig.model_validate(tiny_config())
    res = run_bench(cfg, out, progress=False)
    assert res == {"cells": 12, "skipped": 0, "ran": 12}
    return cfg, out


def test_metrics_registered_through_the_hook(builtin_registry):
    reg = bench_registry(builtin_registry)
    names = reg.names("metric")
    assert {"tpr@1%fpr", "tpr@0.1%fpr", "roc-auc", "tokens-to-detect", "oracle-ppl-ratio", "spoof-rate"} <= set(names)
    for n in names:
        cls = reg.get("metric", n)
        assert cls.unit and cls.task and cls.higher_is_better in (True, False, None)


def test_config_rejects_unknown_fields_and_names(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nschemes: [{name: unigram}]\nprompt_sets: [{name: a, n: 4}]\nbogus: 1\n")
    with pytest.raises(ConfigError, match="unknown field 'bogus'"):
        load_config(p)
    cfg = BenchConfig.model_validate(tiny_config(schemes=[{"name": "unigramm"}]))
    with pytest.raises(Exception, match="did you mean 'unigram'"):
        plan(cfg, bench_registry())


def test_results_rows_and_threshold_split(local_run):
    cfg, out = local_run
    df = read_results(out)
    assert len(done_cells(out)) == 12
    assert set(df["key_fingerprint"].unique()) and df["key_fingerprint"].nunique() == 2
    for col in ("package_version", "git_commit", "model_id", "seed", "wall_time_s"):
        assert col in df and df[col].notna().all()
    clean = df[(df["cell_kind"] == "clean")]
    assert (clean["row_type"] == "null_cal").groupby(clean["cell_hash"]).sum().eq(99).all()
    assert (clean["row_type"] == "null_fpr").groupby(clean["cell_hash"]).sum().eq(20).all()
    s = df[df["row_type"] == "summary"].set_index(["scheme", "key_index", "attack", "strength", "metric"])["value"]
    assert 0 <= s[("unigram", 0, "none", 0.0, "tpr@1%fpr")] <= 1
    # 0.1% FPR needs >= 999 null texts: flagged, not a number
    notes = df[(df["metric"] == "tpr@0.1%fpr")]["note"]
    assert notes.str.contains("needs >= 999").all()
    assert df[(df["metric"] == "tpr@0.1%fpr")]["value"].isna().all()


def _start_grid(cfg_path, out, min_parts):
    """Start ``sketchwm bench run`` in a subprocess and return (env, cmd, proc) once ``out`` holds at
    least ``min_parts`` finished parts, the grid still running."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks")])}
    cmd = [sys.executable, "-m", "sketchwm.cli", "bench", "run", str(cfg_path), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=sigint_default)
    deadline = time.time() + 600  # generous: a loaded machine can take minutes to import and start
    while time.time() < deadline and proc.poll() is None and len(done_cells(out)) < min_parts:
        time.sleep(0.02)
    assert proc.poll() is None, "the grid finished before it could be interrupted: " + proc.stderr.read().decode()[-500:]
    return env, cmd, proc


def test_sigkill_and_restart_equals_uninterrupted_run(local_run, tmp_path):
    cfg, ref_out = local_run
    cfg_path = tmp_path / "grid.json"
    cfg_path.write_text(json.dumps(tiny_config()))
    out = tmp_path / "killed"
    env, cmd, proc = _start_grid(cfg_path, out, min_parts=2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_killed = len(done_cells(out))
    assert 2 <= n_killed < 12
    read_results(out)  # every part left behind is a whole Parquet file
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1000:]
    assert f"{12 - n_killed} cells run, {n_killed} already done" in done.stderr
    assert not list((out / "parts").glob(".*tmp"))
    pd.testing.assert_frame_equal(comparable(read_results(out)), comparable(read_results(ref_out)))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_interrupted_bench_keeps_every_existing_file(local_run, tmp_path, sig):
    """Interrupting ``bench run`` mid-grid leaves every file that was there before byte for byte
    (finished parts of an earlier run, the recorded configuration, a user's file), and every part it
    wrote is a whole Parquet file."""
    cfg, ref_out = local_run
    cfg_path = tmp_path / "grid.json"
    cfg_path.write_text(json.dumps(tiny_config()))
    out = tmp_path / "resumed"
    (out / "parts").mkdir(parents=True)
    for part in sorted((ref_out / "parts").glob("*.parquet"))[:2]:  # two cells finished earlier
        shutil.copy2(part, out / "parts" / part.name)
    shutil.copy2(ref_out / "config.json", out / "config.json")
    (out / "notes.txt").write_text("my notes on this run")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    _, _, proc = _start_grid(cfg_path, out, min_parts=4)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    for p, content in before.items():
        assert p.read_bytes() == content, f"{p} changed"
    assert 4 <= len(done_cells(out)) < 12
    read_results(out)  # every part is a whole Parquet file


def _third_party_registry():
    from sketchwm_baselines.unigram import UnigramScheme

    class AcmeScheme(UnigramScheme):
        """A third-party scheme (here a renamed unigram watermark), installed through an entry point."""

        name = "acme-mark"

    mod = types.ModuleType("acme_sketchwm_plugin")

    def sketchwm_register_schemes():
        return [AcmeScheme]

    mod.sketchwm_register_schemes = hookimpl(sketchwm_register_schemes)

    class FakeEntryPoint:
        name = "acme"

        def load(self):
            return mod

    eps = list(importlib.metadata.entry_points(group="sketchwm")) + [FakeEntryPoint()]
    return bench_registry(Registry(get_plugin_manager(eps)))


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A leaderboard of the tiny grid plus a third-party scheme named only in the config."""
    out = tmp_path_factory.mktemp("third")
    cfg = BenchConfig.model_validate(tiny_config(
        schemes=[{"name": "global-sketch"}, {"name": "acme-mark"}, {"name": "kgw-naive"}], keys=2, attacks=[
            {"name": "delete-random", "strengths": [0.2, 0.5]}]))
    run_bench(cfg, out, registry=_third_party_registry(), progress=False)
    build_leaderboard(out, out / "board", command="sketchwm bench run grid.json --out runs/x")
    return out / "board"


def test_third_party_scheme_on_the_leaderboard(board):
    md = (board / "leaderboard.md").read_text()
    assert "| acme-mark |" in md and "### Clean power" in md and "### Robustness: deletion" in md
    page = (board / "index.html").read_text()
    assert 'data-scheme="acme-mark"' in page
    assert "http://" not in page and "https://" not in page  # offline: nothing fetched
    # the board ships every row in one Parquet file, from which the same tables are rebuilt
    rows = read_results(board.parent)
    shipped = read_results(board / "results.parquet")
    assert list(shipped.columns) == list(rows.columns) and len(shipped) == len(rows)
    keys = ["cell_hash", "row_index", "row_type", "scheme", "metric", "key_fingerprint"]
    pd.testing.assert_frame_equal(shipped[keys], rows[keys])
    for c in ("score", "p_value", "value", "similarity", "tokens_to_detect"):  # None and NaN both read as NaN
        np.testing.assert_array_equal(shipped[c].to_numpy(float), rows[c].to_numpy(float))
    build_leaderboard(board / "results.parquet", board.parent / "again", command="sketchwm bench run grid.json --out runs/x")
    assert (board.parent / "again" / "leaderboard.md").read_text() == md


def test_export_csv(local_run, tmp_path):
    from sketchwm.cli import main

    _, out = local_run
    assert main(["bench", "export", str(out), "--csv", str(tmp_path / "all.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "all.csv")) == len(read_results(out))


def test_ray_executor_matches_local(local_run, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray not installed (pip install 'sketchwm[ray]')")
    cfg, ref_out = local_run
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks")])}})
    try:
        res = run_bench(cfg, tmp_path / "ray", executor="ray", progress=False)
    finally:
        ray.shutdown()
    assert res["ran"] == 12
    pd.testing.assert_frame_equal(comparable(read_results(tmp_path / "ray")), comparable(read_results(ref_out)))


def test_a_ray_worker_builds_its_grids_services_once(local_run, monkeypatch):
    """The Ray task body builds the run's services (models, oracle, each regime's null texts) once per
    worker process and grid, not once per unit: two units of one grid share them, another grid's units
    get their own; the rows are those of the local run."""
    from sketchwm.bench import runner

    cfg, ref_out = local_run
    built = []
    real = runner.Services.build
    monkeypatch.setattr(runner.Services, "build", classmethod(lambda cls, c, *a: built.append(c.name) or real(c, *a)))
    monkeypatch.setattr(runner, "_WORKER_SERVICES", {})
    units = runner.plan(cfg, bench_registry())[:2]
    rows = [r for u, cells in units for r in runner._ray_unit(cfg.model_dump_json(), [asdict(c) for c in cells])]
    assert built == [cfg.name] and len(rows) == sum(len(cells) for _, cells in units)
    other = cfg.model_copy(update={"name": "other"})
    runner._ray_unit(other.model_dump_json(), [asdict(c) for c in units[0][1]])
    assert built == [cfg.name, "other"] and list(runner._WORKER_SERVICES) == [other.model_dump_json()]
    ref = comparable(read_results(ref_out))
    got = {h: r for h, r in rows}
    assert set(got) <= set(ref["cell_hash"])


def test_ray_missing_says_how_to_install(local_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'sketchwm\[ray\]'"):
        run_bench(local_run[0], tmp_path / "r", executor="ray", progress=False)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_leaderboard_page_in_chromium(board):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install playwright)")
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium binary on PATH (Debian: apt-get install -y chromium)")
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((board / "index.html").resolve().as_uri())
        page.locator("#detailed > summary").click()  # the detailed tables start collapsed
        table = page.locator("#table-clean-power")
        rows = table.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.scheme)")
        assert sorted(rows) == ["acme-mark", "global-sketch", "kgw-naive"]
        headers = table.locator("thead th").all_text_contents()
        col = next(i for i, h in enumerate(headers) if h.startswith("roc-auc"))
        th = table.locator("thead th").nth(col)
        values = lambda: table.locator("tbody tr").evaluate_all(  # noqa: E731
            f"rs => rs.map(r => parseFloat(r.cells[{col}].dataset.v))")
        th.click()
        asc = values()
        assert asc == sorted(asc)
        th.click()
        desc = values()
        assert desc == sorted(desc, reverse=True)
        imgs = page.locator("img").evaluate_all("is => is.map(i => [i.id, i.complete && i.naturalWidth > 0])")
        assert {i for i, _ in imgs} >= {"plot-roc", "plot-tpr-vs-strength", "plot-tpr-vs-tokens"}
        assert all(ok for _, ok in imgs)
        browser.close()
    assert errors == []


def test_kl_recorder_leaves_texts_unchanged():
    from sketchwm.bench.inputs import Services
    from sketchwm.bench.recorders import KLRecorder
    from sketchwm.bench.runner import Unit

    services = Services.build(BenchConfig.model_validate(tiny_config()))
    prompts, models = services.prompts.split(0)["eval"], services.models
    for name, tilts in (("global-sketch", True), ("aar-gumbel", False)):
        scheme = services.schemes.scheme(Unit(name, name, "{}", 0, 0, 16, 0))
        rec = KLRecorder()
        with_kl, _ = models.generate(0, 16, prompts, scheme, seed=3, observers=[rec])
        plain, _ = models.generate(0, 16, prompts, scheme, seed=3)
        assert with_kl == plain
        kl_all = torch.cat(rec.kl)
        assert kl_all.numel() >= len(prompts) * 16 and (kl_all >= -1e-9).all()
        assert (float(kl_all.mean()) > 1e-4) == tilts  # AAR samples with keyed uniforms, it does not tilt


def test_stale_temporary_parts_are_removed(tmp_path):
    """A part left half-written by a killed writer (``.<hash>.parquet.<pid>.tmp``, pid gone) is
    deleted at the next run's start; one of a live process is kept."""
    from sketchwm.bench.results import remove_stale_parts

    parts = tmp_path / "parts"
    parts.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid no longer names a process
    stale = parts / f".abc.parquet.{dead.pid}.tmp"
    live = parts / f".def.parquet.{os.getppid()}.tmp"
    stale.write_bytes(b"half")
    live.write_bytes(b"busy")
    assert remove_stale_parts(tmp_path) == [stale]
    assert not stale.exists() and live.exists()


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "configs").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_validate_and_plan(path):
    """Every config under benchmarks/configs loads, names registered components and plans its grid."""
    cfg = load_config(path)
    units = plan(cfg, bench_registry())
    assert units and all(cells for _, cells in units)
