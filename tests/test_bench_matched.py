"""Strength sweeps, decoding regimes and the matched-quality leaderboard (one tiny grid, a real Chromium)."""

from __future__ import annotations

import importlib.metadata
import math
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from sketchwm.bench.config import REGIMES, BenchConfig, load_config, resolve_config
from sketchwm.bench.leaderboard import build_leaderboard
from sketchwm.bench.matched import Curve, Estimate, Point, at_kl, markmywords, waterbench, winners
from sketchwm.bench.results import read_results
from sketchwm.bench.inputs import Services
from sketchwm.bench.runner import bench_registry, plan, run_bench
from sketchwm.components import Strength
from sketchwm.errors import ConfigError
from sketchwm.hookspecs import hookimpl
from sketchwm.registry import Registry, get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the scheme contract
def test_every_registered_scheme_declares_a_valid_strength():
    """Each scheme's knob names a Params field, every grid value validates, the grid is ascending and
    holds the default; a scheme without a knob says why."""
    reg = bench_registry()
    for name in reg.names("scheme"):
        cls = reg.get("scheme", name)
        st = cls.strength
        assert isinstance(st, Strength), name
        if st.field is None:
            assert st.reason, f"{name}: a scheme without a knob says why"
            continue
        default = st.value_of(cls.parse_params(None))
        assert default is not None, f"{name}: {st.field} is not a Params field"
        assert list(st.grid) == sorted(st.grid) and len(st.grid) >= 3, name
        assert default in st.grid, f"{name}: the default {st.field}={default} is not in its sweep {st.grid}"
        for v in st.grid:
            params = {}
            node = params
            *path, leaf = st.field.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = v
            assert st.value_of(cls.parse_params(params)) == v


def test_strength_declaration_rejects_half_declarations():
    with pytest.raises(ValueError, match="non-empty default grid"):
        Strength("delta")
    with pytest.raises(ValueError, match="needs the Params field"):
        Strength(None, (1.0,))


class FakeOracle:
    """Stands in for the SmolLM2 oracle: perplexity grows with the share of repeated words (deterministic)."""

    model_id = "fake-oracle"

    def perplexity(self, texts, batch_size=8):
        out = []
        for t in texts:
            w = t.split()
            out.append(math.exp(3.0 + (1.0 - len(set(w)) / max(len(w), 1)) + 0.01 * (len(t) % 7)))
        return out


def _acme_registry():
    """The installed plugins plus a third-party scheme that declares its own knob (no grid in any config)."""
    from sketchwm_baselines.unigram import UnigramScheme

    class AcmeScheme(UnigramScheme):
        """A third-party scheme (a renamed unigram watermark with its own sweep)."""

        name = "acme-mark"
        strength = Strength("delta", (1.0, 2.0, 4.0))

    mod = types.ModuleType("acme_sketchwm_plugin")
    mod.sketchwm_register_schemes = hookimpl(lambda: [AcmeScheme])

    class FakeEntryPoint:
        name = "acme"

        def load(self):
            return mod

    eps = list(importlib.metadata.entry_points(group="sketchwm")) + [FakeEntryPoint()]
    return bench_registry(Registry(get_plugin_manager(eps)))


def grid(**over) -> dict:
    cfg = {
        "name": "m", "backends": [{"name": "tiny"}], "sweep": True, "regimes": ["mdlm-random-t1", "llada-greedy"],
        "schemes": [{"name": "acme-mark"}, {"name": "aar-gumbel"}],
        "lengths": [16], "prompt_sets": [{"name": "w", "source": "tiny", "n": 6}], "keys": 2,
        "n_null_cal": 99, "n_null_fpr": 12, "attacks": [{"name": "delete-random", "strengths": [0.3]}],
        "diversity": {"prompts": 1, "samples": 4}, "oracle": True,
        "tokens_step": 4, "batch_size": 64, "sampler": {"steps": 4},
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A swept two-regime run with a third-party scheme named only by name, and its board."""
    out = tmp_path_factory.mktemp("swept")
    cfg = BenchConfig.model_validate(grid())
    mp = pytest.MonkeyPatch()
    mp.setattr("sketchwm.oracle.OracleLM", FakeOracle)
    try:
        run_bench(cfg, out, registry=_acme_registry(), progress=False)
    finally:
        mp.undo()
    build_leaderboard(out, out / "board", command="sketchwm bench run m.yaml --out runs/m")
    return out


def test_third_party_scheme_is_swept_from_its_declaration(swept):
    df = read_results(swept)
    acme = df[(df["curve"] == "acme-mark") & (df["regime"] == "mdlm-random-t1")]
    assert sorted(acme["knob_value"].unique()) == [1.0, 2.0, 4.0]
    assert set(acme["scheme"]) == {"acme-mark[delta=1]", "acme-mark[delta=2]", "acme-mark[delta=4]"}
    assert (acme["knob"] == "delta").all()
    units = plan(BenchConfig.model_validate(grid(schemes=[{"name": "global-sketch"}])), bench_registry())
    labels = {u.scheme for u, _ in units if u.regime == 0}
    assert labels == {f"global-sketch[delta={d:g}]" for d in (0.25, 0.5, 0.75, 1.0)}  # the built-in's declared sweep
    aar = df[df["curve"] == "aar-gumbel"]
    assert aar["knob_value"].isna().all() and aar["scheme"].eq("aar-gumbel").all()  # no knob: one point
    md = (swept / "board" / "leaderboard.md").read_text()
    assert "| acme-mark | delta (3 settings)" in md


def test_every_row_has_its_regime_and_greedy_runs_defaults_only(swept):
    df = read_results(swept)
    assert df["regime"].notna().all() and set(df["regime"]) == {"mdlm-random-t1", "llada-greedy"}
    greedy = df[df["regime"] == "llada-greedy"]
    assert set(greedy["scheme"]) == {"acme-mark", "aar-gumbel"}
    assert greedy["default_strength"].all()
    assert greedy["key_index"].nunique() == 2
    # the regime's sampler reached the engine: greedy decoding is deterministic, so the keyed-noise scheme
    # (whose evidence is its sampling noise) is not detected, while the tilts are
    s = greedy[(greedy["row_type"] == "text") & (greedy["cell_kind"] == "clean")]
    assert s[s["scheme"] == "aar-gumbel"]["detected"].mean() < 0.2
    assert s[s["scheme"] == "acme-mark"]["detected"].mean() > 0.5


def test_diversity_rows_record_repeats_and_the_ranking_shows_them(swept):
    """Each diversity row holds the share of distinct texts and of sample pairs opening alike; under
    greedy decoding the unwatermarked samples of a prompt are one text; the first screen shows the
    first-token match beside the unwatermarked samples'."""
    from sketchwm.quality import sample_repeats

    assert sample_repeats([[1, 2], [1, 3], [4, 2], [1, 2]]) == (0.75, 0.5)
    df = read_results(swept)
    div = df[df["row_type"].isin(["diversity", "null_diversity"])]
    assert div["distinct_texts"].between(0.25, 1).all() and div["first_token_match"].between(0, 1).all()
    null_greedy = div[(div["row_type"] == "null_diversity") & (div["regime"] == "llada-greedy")]
    assert (null_greedy["distinct_texts"] == 0.25).all() and (null_greedy["first_token_match"] == 1).all()
    md = (swept / "board" / "leaderboard.md").read_text()
    assert "first-token match across samples (unwatermarked 1.00)" in md


def test_regime_sampler_settings():
    cfg = BenchConfig.model_validate(grid(regimes=["mdlm-random-t1", "llada-blocks-t0.5", "dream-entropy-t0.2",
                                                   "llada-greedy"], lengths=[64]))
    models = Services.build(cfg).models
    got = [models.sampler_config(0, 64, i) for i in range(4)]
    assert [g["block_length"] for g in got] == [64, 32, 64, 32]
    assert [g["remasking"] for g in got] == ["random", "low_confidence", "entropy", "low_confidence"]
    assert [g["temperature"] for g in got] == [1.0, 0.5, 0.2, 0.0]
    assert got[2]["top_p"] == 0.95
    assert not REGIMES["llada-greedy"].sweep
    with pytest.raises(Exception, match="unknown regime 'llada-greedyy'; did you mean 'llada-greedy'"):
        BenchConfig.model_validate(grid(regimes=["llada-greedyy"]))
    with pytest.raises(Exception, match="unknown sampler field"):
        BenchConfig.model_validate(grid(regimes=[{"name": "x", "sampler": {"temprature": 1}}]))


def test_duplicate_label_names_the_label_field():
    with pytest.raises(Exception, match=r"give one of them its own `label:` field"):
        BenchConfig.model_validate(grid(schemes=[{"name": "unigram"}, {"name": "unigram", "params": {"gamma": 0.5}}]))
    cfg = BenchConfig.model_validate(grid(schemes=[{"name": "unigram"}, {"name": "unigram", "label": "unigram-g",
                                                                          "params": {"gamma": 0.5}}]))
    assert len(plan(cfg, bench_registry())) > 2


def test_matched_section_and_pareto_points(swept):
    md = (swept / "board" / "leaderboard.md").read_text()
    assert "## Matched quality" in md and "MarkMyWords" in md and "WaterBench" in md
    assert "MMW tokens (log-PPL ≤ +2%)" in md and "MMW tokens (log-PPL ≤ +10%)" in md and "WB KL/token" in md
    assert "### Winners per regime and budget" in md
    assert "Greedy decoding at default strengths" in md
    page = (swept / "board" / "index.html").read_text()
    assert 'id="matched-quality"' in page
    for regime in ("mdlm-random-t1", "llada-greedy"):
        assert f'id="pareto-{regime}"' in page


def test_kl_axis_is_the_sampled_distribution_where_every_point_records_it(swept):
    """Results carry both KLs per text; the tables read ``kl_sampled`` (after the temperature) where every
    tilting point of the regime has it (equal to ``kl`` at T = 1), else ``kl`` (before it), and say which."""
    from sketchwm.bench.matched import curves

    df = read_results(swept)
    clean = df[(df["row_type"] == "text") & (df["cell_kind"] == "clean") & (df["regime"] == "mdlm-random-t1")]
    tilt = clean[clean["curve"] == "acme-mark"]
    assert tilt["kl"].gt(0).all() and np.allclose(tilt["kl_sampled"].astype(float), tilt["kl"].astype(float))  # T = 1: the same distribution
    got = {c.name: c for c in curves(df) if c.regime == "mdlm-random-t1"}
    assert got["acme-mark"].kl_axis == "sampled"
    old = df.copy()
    old.loc[old.index[(old["curve"] == "acme-mark") & (old["row_type"] == "text")][:1], "kl_sampled"] = np.nan
    old.loc[old["scheme"] == "acme-mark[delta=2]", "kl_sampled"] = np.nan  # one point written before the column
    assert {c.kl_axis for c in curves(old) if c.regime == "mdlm-random-t1"} == {"model"}
    md = (swept / "board" / "leaderboard.md").read_text()
    assert "KL/token of the distribution tokens are drawn from (after the sampler's temperature)" in md


def test_kl_recorder_reads_the_tempered_distribution():
    """The recorder's sampled KL is KL(softmax(l̃/T)‖softmax(l/T)); at T = 1 it is the model's KL."""
    from sketchwm.bench.recorders import KLRecorder
    from sketchwm.components import Marginals

    g = torch.Generator().manual_seed(0)
    logits, tilt = torch.randn(2, 5, 11, generator=g) * 2, torch.randn(2, 5, 11, generator=g)
    masked = torch.ones(2, 5, dtype=torch.bool)

    def kl(a, b):
        la, lb = torch.log_softmax(a.double(), -1), torch.log_softmax(b.double(), -1)
        return (lb.exp() * (lb - la)).sum(-1).reshape(-1)

    for T in (0.5, 1.0):
        rec = KLRecorder()
        rec.on_tilt(types.SimpleNamespace(marginals=Marginals.canvas(logits.clone(), masked), temperature=T),
                    logits.clone(), logits + tilt, None)
        model, sampled = rec.kl, rec.kl_sampled
        assert torch.allclose(model[0], kl(logits, logits + tilt))
        assert torch.allclose(sampled[0], kl(logits / T, (logits + tilt) / T))
        assert (T == 1.0) == torch.allclose(sampled[0], model[0])


# ------------------------------------------------------------------ the matched rules on hand-made curves
def _pt(knob, kl, tpr, ttd=16.0, logppl=3.0, lo=None, hi=None):
    e = lambda m, a=None, b=None: Estimate(m, m if a is None else a, m if b is None else b)  # noqa: E731
    return Point(f"s[{knob}]", knob, False, {"kl": e(kl), "tpr": e(tpr, lo, hi), "ttd": e(ttd), "logppl": e(logppl)})


def test_equal_kl_interpolation_and_its_limits():
    c = Curve("r", "s", "delta", [_pt(0.5, 0.04, 0.2, lo=0.1, hi=0.3), _pt(1.0, 0.12, 0.6, lo=0.5, hi=0.7),
                                   _pt(2.0, 0.3, 0.9)])
    e = at_kl(c, "tpr", 0.1)
    assert e.mean == pytest.approx(0.2 + 0.75 * 0.4) and e.lo == pytest.approx(0.1 + 0.75 * 0.4)
    assert not at_kl(c, "tpr", 0.5).ok and at_kl(c, "tpr", 0.5).note.startswith("outside-sweep")
    free = Curve("r", "aar", "", [_pt(float("nan"), 0.0, 0.97)])
    assert at_kl(free, "tpr", 0.2).mean == 0.97 and at_kl(free, "tpr", 0.2).note == "distortion-free"


def test_markmywords_and_waterbench_rules():
    c = Curve("r", "s", "delta", [_pt(0.5, 0.04, 0.5, ttd=64, logppl=3.0), _pt(1.0, 0.12, 0.8, ttd=32, logppl=3.05),
                                   _pt(2.0, 0.3, 1.0, ttd=16, logppl=3.5)])
    ref = Estimate(3.0, 2.9, 3.1)
    assert markmywords(c, ref, 0.02) == (c.points[1].get("ttd"), "s[1.0]")  # 3.05 <= 3.06
    assert markmywords(c, ref, 0.2)[1] == "s[2.0]"
    assert markmywords(c, None, 0.02)[0].note == "no-oracle"
    s_star, vals, note = waterbench(c, ["tpr", "kl"])
    assert note == "" and s_star == pytest.approx(1.0 + 0.5 * 1.0) and vals["tpr"].mean == pytest.approx(0.9)
    assert vals["kl"].mean == pytest.approx(0.21)
    weak = Curve("r", "w", "delta", [_pt(1.0, 0.1, 0.3), _pt(2.0, 0.2, 0.5)])
    assert waterbench(weak, ["kl"])[2] == "never"


def test_winners_are_ties_when_intervals_overlap():
    a, b, c = Estimate(0.9, 0.8, 1.0), Estimate(0.85, 0.7, 0.95), Estimate(0.5, 0.4, 0.6)
    assert winners({"a": a, "b": b, "c": c}, higher=True) == ["a", "b"]
    assert winners({"a": a, "c": c}, higher=True) == ["a"]
    assert winners({"c": c, "x": Estimate(float("inf"), float("inf"), float("inf"))}, higher=False) == ["c"]


# ------------------------------------------------------------------ configs from an installed package
def test_shipped_config_resolves_by_name():
    assert resolve_config("smoke").name == "smoke.yaml"
    assert load_config("smoke").name == "smoke"
    with pytest.raises(ConfigError, match="shipped configs, by name: .*smoke"):
        resolve_config("smokee")


def test_wheel_ships_the_configs(tmp_path):
    """``pip wheel`` of a copy of the source tree ships every config (sketchwm/bench/configs/*.yaml, linked
    from benchmarks/configs) as package data, and the unpacked wheel resolves ``smoke`` by name from there."""
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name) if src.exists() else (src.mkdir(), shutil.copy2(ROOT / name, src / name))
    for d in ("sketchwm", "plugins", "attacks"):
        shutil.copytree(ROOT / d, src / d, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                          str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    whl = next((tmp_path / "dist").glob("sketchwm-*.whl"))
    names = set(zipfile.ZipFile(whl).namelist())
    shipped = {f"sketchwm/bench/configs/{p.name}" for p in (ROOT / "benchmarks" / "configs").glob("*.yaml")}
    assert shipped and shipped <= names
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    code = "from sketchwm.bench.config import resolve_config; print(resolve_config('smoke'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()) == site / "sketchwm" / "bench" / "configs" / "smoke.yaml"


# ------------------------------------------------------------------ the page in a real browser
def test_matched_board_in_chromium(swept, chromium_page):
    """One Pareto panel per regime; every swept scheme a curve with >= 3 settings and a band; the
    winners table names, per regime, the winner at each budget, ties joined."""
    page = chromium_page(swept / "board" / "index.html")
    panels = page.locator("figure.pareto").evaluate_all("fs => fs.map(f => f.dataset.regime)")
    assert sorted(panels) == ["llada-greedy", "mdlm-random-t1"]
    panel = page.locator("#pareto-mdlm-random-t1")
    assert panel.locator("svg").count() == 1 and panel.locator("svg").bounding_box()["width"] > 300
    for scheme in ("acme-mark",):
        curve = panel.locator(f'g[id="curve-tpr-kl-{scheme}"]')
        assert curve.count() == 1, scheme
        markers = curve.locator("use").count()
        assert markers >= 3, (scheme, markers)
        assert panel.locator(f'g[id="band-tpr-kl-{scheme}"] path').count() >= 1, scheme
        assert panel.locator(f'g[id="curve-ttd-kl-{scheme}"]').count() == 1
        assert panel.locator(f'g[id="curve-tpr-ppl-{scheme}"]').count() == 1
    assert panel.locator('g[id="point-tpr-kl-aar-gumbel"]').count() >= 1  # no knob: one point
    rows = page.locator("#table-winners tbody tr")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.regime)") == ["mdlm-random-t1", "llada-greedy"]
    cells = page.locator("#table-winners tbody td[data-budget]").evaluate_all(
        "ts => ts.map(t => [t.closest('tr').dataset.regime, t.dataset.budget, t.dataset.winners, t.dataset.tie, t.textContent])")
    named = [c for c in cells if c[2]]
    assert {c[0] for c in named} == {"mdlm-random-t1", "llada-greedy"}
    for regime, budget, win, tie, text in named:
        names = win.split("|")
        assert text.startswith(names[0]) and (tie == "true") == (len(names) > 1)
        if len(names) > 1:
            assert " = ".join(names) in text and "(tie)" in text
    # rows of each regime's matched table are sorted by the headline matched figure, best marked
    t = page.locator("#table-matched-mdlm-random-t1")
    assert t.locator("td.best").count() >= 1
    first = t.locator("thead th").all_text_contents().index("TPR @ KL=0.1 ↑")
    vals = t.locator("tbody tr").evaluate_all(f"rs => rs.map(r => parseFloat(r.cells[{first}].dataset.v))")
    finite = [v for v in vals if not math.isnan(v)]
    assert finite == sorted(finite, reverse=True)


def test_tilt_efficiency_reads_every_swept_point_of_a_run(swept, capsys, monkeypatch):
    """benchmarks/tilt_efficiency.py on a run folder: one line per tilting point up to --max-kl, with the
    E of its texts' p-values (recomputed here from the results), and one pooled line per curve."""
    import importlib.util
    from pathlib import Path

    from sketchwm.bench.matched import curves

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "tilt_efficiency.py"
    spec = importlib.util.spec_from_file_location("bench_tilt_efficiency", path)
    te = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(te)
    te.from_results([str(swept)], max_kl=10.0)
    out = capsys.readouterr().out
    df = read_results(swept)
    clean = df[(df["cell_kind"] == "clean") & (df["regime"] == "mdlm-random-t1")]
    acme = next(c for c in curves(df) if c.regime == "mdlm-random-t1" and c.name == "acme-mark")
    tilting = [p for p in acme.points if p.get("kl").ok and p.get("kl").mean > 1e-9]
    assert tilting
    for p in tilting:
        g = clean[clean["scheme"] == p.label]
        zw = te._z(g[g["row_type"] == "text"]["p_value"].to_numpy(np.float64))
        zn = te._z(g[g["row_type"] == "null_cal"]["p_value"].to_numpy(np.float64))
        e, _ = te.efficiency(zw, zn, 16, p.get("kl").mean)
        line = next(x for x in out.splitlines() if x.strip().startswith(p.label + " |"))
        assert (f"| {e:.3f} [" in line) if not np.isnan(e) else ("| n/a |" in line)
    assert "= acme-mark pooled" in out
