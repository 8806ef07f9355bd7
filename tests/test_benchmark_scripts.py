"""The benchmark scripts that stay scripts: their helpers compute what they claim, and they are a thin
layer over the package (no ``sys.path`` edits, the harness's keys, the package's bootstrap).

The benchmarks written as ``benchmarks/configs/*.yaml`` are tested through ``sketchwm bench``
(tests/test_bench.py, tests/test_theory.py)."""

from __future__ import annotations

import ast
import hashlib
import hmac
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tokens_to_detect_first_detected_prefix():
    """tokens_to_detect returns the first prefix length with a detection per text, +inf where none."""
    import math

    import torch

    ttd = _load("tokens_to_detect")
    hits = torch.tensor([[False, True, False], [True, True, False], [False, True, False]])  # (L=3, B=3)
    assert ttd.tokens_to_detect(hits, [16, 24, 32]) == [24.0, 16.0, math.inf]


def test_kl_temperature_reads_the_kl_of_the_tempered_distributions():
    """kl_temperature._kl: zero for an untilted row, the plain KL at τ = 1, and KL(softmax(q/τ) ‖
    softmax(p/τ)) at τ = 0.5 (checked against a direct computation)."""
    import torch

    klt = _load("kl_temperature")
    g = torch.Generator().manual_seed(0)
    base = torch.randn((5, 30), generator=g)
    out = base.clone()
    out[:, 3] += 2.0  # one sparse shift
    assert torch.allclose(klt._kl(base, base, 0.5), torch.zeros(5, dtype=torch.float64))
    for tau in (1.0, 0.5):
        p, q = torch.softmax(base.double() / tau, -1), torch.softmax(out.double() / tau, -1)
        assert torch.allclose(klt._kl(base, out, tau), (q * (q.log() - p.log())).sum(-1))
    assert bool((klt._kl(base, out, 0.5) != klt._kl(base, out, 1.0)).all())


def test_detect_cost_two_channels_measures_both_schemes():
    """detect_cost_two_channels.measure: both schemes score the same ids; positive throughputs and their ratio."""
    r = _load("detect_cost_two_channels").measure(8, 32, 1)
    assert r["global-sketch"] > 0 and r["global-sketch-green"] > 0
    assert r["ratio"] == pytest.approx(r["global-sketch"] / r["global-sketch-green"])


def test_tilt_efficiency_ceiling_is_the_first_order_bound_of_a_tilt():
    """The ceiling tilt_efficiency.py reads against: a tilt p̃ ∝ p·exp(η·a) moves E[s] by at most
    √(2·KL(p̃‖p)·Var_p(s)) to first order in η, with equality for a = s (Cauchy–Schwarz); and
    ``efficiency`` turns a z shift into E and the KL a TPR of 0.9 at 1% FPR needs."""
    import torch

    te = _load("tilt_efficiency")
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(50, 200, generator=g, dtype=torch.float64) * 2, -1)  # (rows, V)
    s = torch.randn(200, generator=g, dtype=torch.float64)
    var = (p * s * s).sum(-1) - (p * s).sum(-1) ** 2
    for a, equal in ((s, True), (torch.randn(200, generator=g, dtype=torch.float64), False)):
        q = torch.softmax(p.log() + 1e-3 * a, -1)
        kl = (q * (q.log() - p.log())).sum(-1)
        ratio = ((q * s).sum(-1) - (p * s).sum(-1)) ** 2 / (2 * kl * var)
        assert float(ratio.max()) <= 1.0 + 1e-2
        if equal:
            assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-2)
        else:
            assert float(ratio.mean()) < 0.5
    import numpy as np

    e, need = te.efficiency(np.array([3.0, 4.0, 5.0]), np.array([-1.0, 0.0, 1.0]), 128, 0.1)
    assert e == pytest.approx(16 / (2 * 128 * 0.1))
    assert need == pytest.approx(te.Z_TPR90_FPR1 ** 2 / (2 * 128 * e))
    assert te.efficiency(np.array([0.0]), np.array([0.0]), 128, 0.1)[1] == float("inf")


def _scripts() -> list[Path]:
    return sorted((ROOT / "benchmarks").glob("*.py"))


def test_scripts_import_the_package_without_editing_sys_path():
    """Every script imports sketchwm as installed and no sibling script by name (``python -m benchmarks.NAME``
    or ``python benchmarks/NAME.py`` both work)."""
    edits = [f"{p.name}:{n}" for p in _scripts() for n, line in enumerate(p.read_text().splitlines(), 1)
             if "sys.path" in line]
    assert not edits, f"sys.path edited in {edits}"
    siblings = {p.stem for p in _scripts()}
    for p in _scripts():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert (node.module or "").split(".")[0] not in siblings, f"{p.name} imports sibling {node.module}"


def test_scripts_take_keys_from_the_harness_derivation():
    """No script builds a WatermarkKey from its own bytes or hash: keys are ``bench_key``'s (fresh
    ``WatermarkKey.generate()`` keys aside)."""
    own = []
    for p in _scripts():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "WatermarkKey":
                own.append(f"{p.name}:{node.lineno}")
    assert not own, f"keys not from sketchwm.bench.seeds.bench_key: {own}"


def test_bench_key_is_the_harness_derivation():
    """``bench_key`` gives the harness's run keys, unrelated keys and theory keys, byte for byte."""
    from sketchwm.bench.config import load_config
    from sketchwm.bench.plan import derive_key, derive_unrelated_key
    from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key
    from sketchwm.bench.theory import theory_key

    cfg = load_config("smoke")
    assert cfg.key_seed == DEFAULT_KEY_SEED
    for i in range(3):
        assert bench_key(cfg.key_seed, "key", i).fingerprint == derive_key(cfg, i).fingerprint
        assert bench_key(cfg.key_seed, "unrelated-key", i, 1).fingerprint == derive_unrelated_key(cfg, i, 1).fingerprint
    expected = hmac.new(b"s", b"sketchwm/bench/theory-key/2", hashlib.sha256).digest()
    assert theory_key("s", 2).fingerprint == type(theory_key("s", 2))(expected).fingerprint
    assert len({bench_key("7", "key", i).fingerprint for i in range(4)} | {bench_key("8", "key", 0).fingerprint}) == 5


def test_one_bootstrap():
    """The stealing page and the scripts share :func:`sketchwm.bench.bootstrap.bootstrap_interval`."""
    from sketchwm.bench import stealing_page
    from sketchwm.bench.bootstrap import bootstrap_interval

    assert stealing_page.bootstrap_interval is bootstrap_interval
    for p in _scripts():
        tree = ast.parse(p.read_text(), str(p))
        own = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and "bootstrap" in n.name]
        assert not own, f"{p.name} defines its own bootstrap: {own}"


def test_perf_detect_board_times_every_scheme_of_a_config(tmp_path, capsys):
    """perf_detect_board: one warm throughput per curve of the config, side by side on the same ids, written
    where the leaderboard reads it, with the machine it ran on."""
    import json

    from sketchwm.bench.config import load_config
    from sketchwm.bench.leaderboard import SPEED_FILE, read_speed

    out = tmp_path / SPEED_FILE
    assert _load("perf_detect_board").main(["--config", "smoke", "--tokens", "2048", "--repeats", "1",
                                            "--threads", "1", "--out", str(out)]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    curves = {s.label or s.name for s in load_config("smoke").schemes}
    assert set(res["tokens_per_s"]) == curves and all(v > 0 for v in res["tokens_per_s"].values())
    assert res["tokens"] == 2048 // res["length"] * res["length"] and res["machine"]["cpu"]
    tps, how = read_speed(tmp_path)
    assert tps == res["tokens_per_s"] and res["machine"]["cpu"] in how


def test_board_runtime_sample_prices_every_unit_of_the_full_grid(tmp_path):
    """board_runtime_sample's two configs split the schemes in halves, at one key and default strengths;
    together they hold one unit of every (scheme, regime) of the full grid, and their cells are cells of
    the full grid (same hashes), so the sample's times are the full board's."""
    import collections

    from sketchwm.bench.config import load_config
    from sketchwm.bench.plan import bench_registry, plan

    mod = _load("board_runtime_sample")
    paths = mod.write_configs("leaderboard-headline", tmp_path)
    full = load_config("leaderboard-headline")
    reg = bench_registry()
    full_units = collections.Counter((u.curve.split("[")[0], full.regime_list[u.regime].name) for u, _ in plan(full, reg))
    full_cells = {c.hash for _, cells in plan(full, reg) for c in cells}
    seen: collections.Counter = collections.Counter()
    names = []
    for p in paths:
        cfg = load_config(p)
        assert cfg.keys == 1 and not cfg.sweep
        names += [s.name for s in cfg.schemes]
        for unit, cells in plan(cfg, reg):
            seen[(unit.curve.split("[")[0], cfg.regime_list[unit.regime].name)] += 1
            assert {c.hash for c in cells} <= full_cells
    assert sorted(names) == sorted(s.name for s in full.schemes)
    assert set(seen) == set(full_units) and set(seen.values()) == {1}
