"""A bench cell's identity: the scheme's resolved params and its ``version``, so that a changed default
or a behaviour change reruns the cells instead of reusing them, and ``sketchwm leaderboard`` never puts
two versions of a scheme on one page (older results without versions are shown as unversioned)."""

from __future__ import annotations

import types

import pandas as pd
import pytest
from pydantic import Field

from sketchwm.bench.config import BenchConfig
from sketchwm.bench.leaderboard import UNVERSIONED, build_leaderboard, scheme_versions
from sketchwm.bench.results import read_results
from sketchwm.bench.runner import bench_registry, plan, run_bench
from sketchwm.errors import InputError
from sketchwm.hookspecs import hookimpl
from sketchwm.registry import Registry
from sketchwm.testing.schemes import plugin_registry
from sketchwm_baselines.unigram import UnigramParams, UnigramScheme


class ToyParams(UnigramParams):
    """Parameters of ``toy-mark`` (those of ``unigram``)."""


class ToyScheme(UnigramScheme):
    """A test scheme registered by the test itself (a renamed unigram watermark)."""

    name = "toy-mark"
    Params = ToyParams


def _registry() -> Registry:
    """The installed plugins plus ``toy-mark``, registered directly (nothing installed)."""
    mod = types.ModuleType("toy_sketchwm_plugin")
    mod.sketchwm_register_schemes = hookimpl(lambda: [ToyScheme])
    return bench_registry(plugin_registry(mod))


def _config(**over) -> BenchConfig:
    cfg = {"name": "ident", "backends": [{"name": "tiny"}], "schemes": [{"name": "toy-mark"}, {"name": "kgw-naive"}],
           "lengths": [16], "prompt_sets": [{"name": "w", "source": "tiny", "n": 4}], "keys": 1,
           "n_null_cal": 99, "n_null_fpr": 20, "attacks": [{"name": "delete-random", "strengths": [0.2]}],
           "tokens_step": 4, "batch_size": 64, "sampler": {"steps": 4}, "metrics": ["tpr@1%fpr", "kl-per-token"]}
    cfg.update(over)
    return BenchConfig.model_validate(cfg)


def _hashes(cfg: BenchConfig, reg: Registry) -> dict[str, set[str]]:
    """{scheme name: hashes of its cells}."""
    out: dict[str, set[str]] = {}
    for unit, cells in plan(cfg, reg):
        out.setdefault(unit.scheme_name, set()).update(c.hash for c in cells)
    return out


def test_a_changed_default_invalidates_the_schemes_cells(monkeypatch):
    """The config names toy-mark without params: a new default γ (what the scheme runs) gives its
    cells new hashes and leaves the other scheme's cells as they were."""
    reg = _registry()
    before = _hashes(_config(), reg)

    class NewDefault(ToyParams):
        gamma: float = Field(0.25, gt=0, lt=1)

    monkeypatch.setattr(ToyScheme, "Params", NewDefault)
    after = _hashes(_config(), reg)
    assert not before["toy-mark"] & after["toy-mark"]
    assert before["kgw-naive"] == after["kgw-naive"]


def test_a_bumped_version_invalidates_the_schemes_cells(monkeypatch):
    reg = _registry()
    before = _hashes(_config(), reg)
    monkeypatch.setattr(ToyScheme, "version", "2")
    after = _hashes(_config(), reg)
    assert not before["toy-mark"] & after["toy-mark"]
    assert before["kgw-naive"] == after["kgw-naive"]


def test_a_default_written_out_is_the_same_cell():
    """Configs state only what differs from the defaults: spelling a default out changes no hash."""
    reg = _registry()
    short = _hashes(_config(), reg)
    spelled = _hashes(_config(schemes=[{"name": "toy-mark", "params": {"gamma": 0.5, "delta": 2.0}},
                                       {"name": "kgw-naive"}],
                              attacks=[{"name": "delete-random", "strengths": [0.2],
                                        "params": dict(reg.get("attack", "delete-random").parse_params(None))}]), reg)
    assert short == spelled


def test_a_rerun_after_a_bump_reruns_the_scheme_and_the_board_refuses_to_mix(tmp_path, monkeypatch):
    """Into the same folder: version 2 reruns toy-mark's cells (kgw-naive's are reused); the folder
    then holds both versions of toy-mark and the leaderboard refuses it, naming the versions."""
    reg = _registry()
    cfg = _config()
    first = run_bench(cfg, tmp_path, registry=reg, progress=False)
    assert first["ran"] == first["cells"] == 4  # 2 schemes × (clean + 1 attack)
    assert scheme_versions(read_results(tmp_path)) == {"kgw-naive": ["1"], "toy-mark": ["1"]}
    monkeypatch.setattr(ToyScheme, "version", "2")
    second = run_bench(cfg, tmp_path, registry=reg, progress=False)
    assert second == {"cells": 4, "skipped": 2, "ran": 2}
    with pytest.raises(InputError, match=r"toy-mark \(1, 2\)"):
        build_leaderboard(tmp_path, tmp_path / "board")


def test_results_without_versions_are_shown_as_unversioned(tmp_path):
    """Rows written before cells carried a version still build a board, which says so."""
    reg = _registry()
    run_bench(_config(schemes=[{"name": "kgw-naive"}]), tmp_path / "run", registry=reg, progress=False)
    df = read_results(tmp_path / "run").drop(columns=["scheme_version"])
    old = tmp_path / "old.parquet"
    df.to_parquet(old, index=False)
    assert scheme_versions(pd.read_parquet(old)) == {"kgw-naive": [UNVERSIONED]}
    build_leaderboard(old, tmp_path / "board")
    assert "unversioned: kgw-naive" in (tmp_path / "board" / "leaderboard.md").read_text()
    assert 'id="versions"' in (tmp_path / "board" / "index.html").read_text()


def test_every_registered_scheme_has_a_version():
    reg = bench_registry()
    for name in reg.names("scheme"):
        v = reg.get("scheme", name).version
        assert isinstance(v, str) and v, name


def test_the_board_spoof_config_reuses_the_headline_clean_cells():
    """leaderboard-stealing.yaml plans, for every scheme, a clean cell whose hash is the headline's cell
    for the same setting and key (so the folder's cell is reused and no text is counted twice), and
    spoof cells of its own."""
    from pathlib import Path

    from sketchwm.bench.config import load_config

    configs = Path(__file__).resolve().parents[1] / "benchmarks" / "configs"
    reg = bench_registry()
    head = {c.hash for _, cells in plan(load_config(configs / "leaderboard-headline.yaml"), reg)
            for c in cells if c.kind == "clean"}
    steal = plan(load_config(configs / "leaderboard-stealing.yaml"), reg)
    assert len(steal) == 10
    for unit, cells in steal:
        kinds = [c.kind for c in cells]
        assert kinds[0] == "clean" and kinds.count("spoof") == 4, (unit.scheme, kinds)
        assert cells[0].hash in head, unit.scheme
        assert not {c.hash for c in cells[1:]} & head
