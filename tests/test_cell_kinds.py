"""Cell kinds are registered components (sketchwm.bench.cellkind): the planner and the runner look a kind up
by name and hand it exactly the inputs it names; a third-party kind plans and runs like a built-in."""

from __future__ import annotations

import re
import types
from pathlib import Path

import numpy as np
import pytest

from sketchwm.bench.cellkind import INPUTS, CellEvidence, CellKind, CellSpec, cell_data
from sketchwm.bench.config import BenchConfig
from sketchwm.bench.metric import CELL_KINDS, Metric, MetricValue
from sketchwm.bench.results import read_results
from sketchwm.bench.inputs import Services
from sketchwm.bench.runner import bench_registry, plan, run_bench, unit_inputs
from sketchwm.errors import ConfigError, RegistryError
from sketchwm.hookspecs import hookimpl
from sketchwm.testing.schemes import plugin_registry

ROOT = Path(__file__).resolve().parents[1]
THEORY = ("theory-kl", "theory-fisher", "theory-sound", "theory-edit")


class Truncated(CellKind):
    """The unit's watermarked texts cut to the first ``strength`` of their tokens."""

    name, needs = "truncated", ("texts", "nulls", "scorer")

    def plan(self, scope):
        return [CellSpec("none", 0.5, {}, scope.prompt_set.n)]

    def run(self, cell, texts, nulls, scorer):
        sc = scorer.score([], ids=[x[: max(1, int(len(x) * cell.strength))] for x in texts.scored.ids])
        return CellEvidence(cell_data(cell, sc, nulls), sc, {"n_full": None})


class MedianScore(Metric):
    """Median detection score of a truncated cell's texts."""

    name, unit, task, kinds = "truncated-median", "score", "power", ("truncated",)

    def compute(self, cell):
        return MetricValue(float(np.median(cell.scores)), int(cell.scores.size))


def _plugin(*, metric: bool) -> types.ModuleType:
    mod = types.ModuleType(f"truncated_plugin_{metric}")
    mod.sketchwm_register_cell_kinds = hookimpl(lambda: [Truncated])
    if metric:
        mod.sketchwm_register_metrics = hookimpl(lambda: [MedianScore])
    return mod


def _config(**over) -> BenchConfig:
    cfg = {"name": "kinds", "backends": [{"name": "tiny"}], "schemes": [{"name": "unigram"}], "lengths": [16],
           "prompt_sets": [{"name": "w", "source": "tiny", "n": 4}], "keys": 1, "n_null_cal": 99, "n_null_fpr": 10,
           "attacks": [{"name": "delete-random", "strengths": [0.2]}], "tokens_step": 4, "batch_size": 64,
           "sampler": {"steps": 4}}
    cfg.update(over)
    return BenchConfig.model_validate(cfg)


def test_the_builtin_kinds_are_registered():
    reg = bench_registry()
    assert set(reg.names("cell-kind")) >= {*CELL_KINDS, *THEORY}
    kinds = {n: reg.get("cell-kind", n) for n in reg.names("cell-kind")}
    assert {n for n in CELL_KINDS if kinds[n].evidence == "texts"} == set(CELL_KINDS)  # Metric.kinds' default
    assert all(kinds[n].evidence == "theory" for n in THEORY)
    assert all(set(k.needs) <= set(INPUTS) for k in kinds.values())
    with pytest.raises(RegistryError, match="did you mean 'clean'"):
        reg.get("cell-kind", "claen")


def test_every_input_is_built_for_a_kind_that_names_it():
    """A kind naming every input of cellkind.INPUTS gets each, built for its unit."""
    from sketchwm.bench import inputs as I

    class Everything(Truncated):
        name, needs = "everything", tuple(INPUTS)

    steal = {"train_n": [2], "spoof_n": 2, "text_attacks": ["spoof-insert"], "human": ["tiny"], "human_n": 2}
    theory = {"n_texts": 2, "fisher_scales": [1.0], "domains": ["tiny"], "n_human": 4, "n_keys": 1, "edit_counts": [1],
              "n_edit": 2}
    cfg = _config(stealing=steal, theory=theory, n_null_cal=4, n_null_fpr=2, prompt_sets=[{"name": "w", "source": "tiny",
                                                                                           "n": 2}])
    (unit, _), = plan(cfg, bench_registry())
    got = unit_inputs(Services.build(cfg), Everything(), unit)
    types_of = {"texts": I.UnitTexts, "nulls": I.NullSplits, "scorer": I.UnitScorer, "quality": I.CleanQuality,
                "attacks": I.Attacks, "theft": I.Theft, "human": tuple, "unrelated": I.UnrelatedKeys,
                "spoofing": I.SpoofSetting, "vocab": np.ndarray, "path": dict, "soundness": np.ndarray}
    assert set(got) == set(INPUTS)
    for name, t in types_of.items():
        assert isinstance(got[name], t), name
    assert got["scheme"] is got["scorer"].scheme


def test_a_kind_naming_an_unknown_input_is_refused():
    class Greedy(Truncated):
        name, needs = "greedy", ("texts", "everything-else")

    (unit, _), = plan(_config(), bench_registry())
    with pytest.raises(ConfigError, match="needs unknown inputs \\['everything-else'\\]"):
        unit_inputs(Services.build(_config()), Greedy(), unit)


def test_a_third_party_kind_is_planned_and_run_like_a_builtin(tmp_path):
    """Registering a kind adds its cells and leaves every other cell's hash as it was; its cells run,
    their texts get the one rule's decision, and a metric that lists the kind computes on it."""
    before = {c.hash for _, cells in plan(_config(), bench_registry()) for c in cells}
    with_kind = [c for _, cells in plan(_config(), bench_registry(plugin_registry(_plugin(metric=False)))) for c in cells]
    assert {c.hash for c in with_kind if c.kind != "truncated"} == before
    assert [c.kind for c in with_kind] == ["clean", "attack", "truncated"]  # after the built-ins (order 100)

    reg = bench_registry(plugin_registry(_plugin(metric=True)))
    cfg = _config(metrics=["tpr@1%fpr", "truncated-median"])
    assert run_bench(cfg, tmp_path, registry=reg, progress=False)["ran"] == 3
    df = read_results(tmp_path)
    t = df[df["cell_kind"] == "truncated"]
    text = t[t["row_type"] == "text"]
    clean = df[(df["cell_kind"] == "clean") & (df["row_type"] == "text")]
    assert len(text) == 4 and text["detected"].notna().all()
    assert (text["min_tokens"].to_numpy() == clean["min_tokens"].to_numpy()).all()  # the unit's scheme's
    assert (text["n_tokens"].to_numpy() < clean["n_tokens"].to_numpy()).all()
    summary = t[t["row_type"] == "summary"]
    assert list(summary["metric"]) == ["truncated-median"]  # tpr@1%fpr does not list the kind
    assert summary["value"].iloc[0] == pytest.approx(float(np.median(text["score"])))


def test_the_planner_and_the_runner_do_not_branch_on_kind_names():
    """No ``kind == "clean"`` or ``kind in (...)`` test of a kind name, nor a list of kind names, in the
    modules that plan and run cells: they look a kind up by name."""
    branch = re.compile(r"""kind\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[{]?\s*["']|CELL_KINDS|THEORY_KINDS""")
    for path in ("sketchwm/bench/plan.py", "sketchwm/bench/runner.py", "sketchwm/bench/inputs.py"):
        lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
        hits = [f"{path}:{i}: {ln.strip()}" for i, ln in enumerate(lines, 1) if branch.search(ln)]
        assert not hits, hits
