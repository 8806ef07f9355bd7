"""Core time of a full leaderboard grid, from a sample of it: one key, each scheme at its default strength.

A board's units (one scheme setting, one key, one regime) cost about the same across keys and
strengths, so a sample that runs each (scheme, regime) once, at full size (the same texts, lengths,
attacks, diversity and oracle), prices every unit of the full grid. ``configs`` writes the sample as
two configs, one per half of the schemes, to run as two single-thread processes (one core each);
``estimate`` reads their results and prints, per (scheme, regime), the unit's seconds (the sum of its
cells' ``wall_time_s``) times the full grid's units of it, plus the null texts:

    python benchmarks/board_runtime_sample.py configs leaderboard-headline runs/rt
    OMP_NUM_THREADS=1 /usr/bin/time -v sketchwm bench run runs/rt/sample-A.yaml --out runs/rt/out &
    OMP_NUM_THREADS=1 /usr/bin/time -v sketchwm bench run runs/rt/sample-B.yaml --out runs/rt/out &
    wait
    OMP_NUM_THREADS=1 python benchmarks/board_runtime_sample.py estimate leaderboard-headline runs/rt

Each regime's unwatermarked null texts (``n_null_cal + n_null_fpr``, shared by schemes and keys) are
made inside the first clean cell a process runs in that regime; ``estimate`` times their generation
on its own (one thread, as the runner makes them), takes it out of those cells, and counts it once
per worker and regime of the full run (``--workers``, 2 for ``--executor ray`` on 2 cores). The
first unit a process runs also loads the models and builds tables that later units reuse, so it
overstates a unit: ``configs --keys 2`` (or a second results folder, ``--extra``, e.g. one scheme
at two keys) gives units at key index 1, and a (scheme, regime) that has them is priced at their
median instead. The per-cell times are wall seconds: run the sample with a core per process and
nothing else busy (then wall ≈ CPU; ``/usr/bin/time`` shows both). Work outside cells (start-up,
planning, writing parts) is not in the estimate.

Last line: {"core_hours": ..., "wall_hours": ..., "units": ..., "null_s": {...}, "per_unit": [...]}
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import pandas as pd

from sketchwm.bench.config import load_config
from sketchwm.bench.inputs import Services
from sketchwm.bench.machine import machine
from sketchwm.bench.plan import bench_registry, plan
from sketchwm.bench.results import read_results


def halves(cfg) -> tuple[list[str], list[str]]:
    """The config's scheme names split into two halves, in config order."""
    names = [s.name for s in cfg.schemes]
    return names[: (len(names) + 1) // 2], names[(len(names) + 1) // 2:]


def write_configs(full_name: str, out: Path, keys: int = 1) -> list[Path]:
    """Write ``sample-A.json`` and ``sample-B.json`` into ``out``: the full config at ``keys`` keys and
    default strengths, each with half of its schemes. Returns their paths."""
    cfg = load_config(full_name)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for tag, names in zip("AB", halves(cfg)):
        data = json.loads(cfg.model_dump_json())
        data.update(name=f"{cfg.name}-sample-{tag}", keys=keys, sweep=False,
                    schemes=[s for s in data["schemes"] if s["name"] in names])
        p = out / f"sample-{tag}.json"
        p.write_text(json.dumps(data, indent=2))
        paths.append(p)
    return paths


def null_seconds(full_name: str) -> dict[str, float]:
    """Wall seconds to make each regime's null texts (calibration and FPR splits) as the runner does."""
    cfg = load_config(full_name)
    svc = Services.build(cfg)
    length = cfg.lengths[0]
    out = {}
    for r, reg in enumerate(cfg.regime_list):
        t = time.perf_counter()
        for split in ("null_cal", "null_fpr"):
            svc.models.null_texts(0, length, 0, split, r)
        out[reg.name] = time.perf_counter() - t
        print(f"null texts of {reg.name}: {out[reg.name]:.1f} s", flush=True)
    return out


def cell_times(folder: Path) -> pd.DataFrame:
    """One row per cell of the results in ``folder``: its wall seconds, curve, regime, key index and scheme."""
    cells = read_results(folder).groupby("cell_hash").agg(wall=("wall_time_s", "first"), curve=("curve", "first"),
                                                          regime=("regime", "first"), key=("key_index", "first"))
    cells["scheme"] = cells["curve"].str.split("[").str[0]
    return cells


def estimate(full_name: str, folder: Path, workers: int, extra: list[Path] = ()) -> dict:
    """The estimate of the module doc from the sample's results in ``folder / "out"`` (and ``extra``
    results folders)."""
    full = load_config(full_name)
    reg = bench_registry()
    n_full = collections.Counter((u.curve.split("[")[0], full.regime_list[u.regime].name) for u, _ in plan(full, reg))
    cells = cell_times(folder / "out")
    first_units = cells[cells["key"] == 0].groupby(["scheme", "regime"])["wall"].sum()
    nulls = null_seconds(full_name)
    for names in halves(full):  # each process made each regime's nulls once, in its first unit there
        for r, s in nulls.items():
            first = next((n for n in names if (n, r) in first_units.index), None)
            if first is not None:
                first_units[(first, r)] -= s
    steady_cells = pd.concat([c[c["key"] > 0] for c in [cells, *map(cell_times, extra)]])  # units at key index >= 1
    steady = steady_cells.groupby(["scheme", "regime", "key"])["wall"].sum().groupby(["scheme", "regime"]).median()
    unit = first_units.copy()
    for k, v in steady.items():
        unit[k] = v
    cost = {k: float(t) * n_full[k] for k, t in unit.items()}  # seconds of the full grid's units of each (scheme, regime)
    per_unit = [{"scheme": s, "regime": r, "unit_s": round(float(unit[(s, r)]), 1), "units": n_full[(s, r)],
                 "hours": round(c / 3600, 3)} for (s, r), c in cost.items()]
    units_s = sum(cost.values())
    core = (units_s + workers * sum(nulls.values())) / 3600
    missing = sorted(set(n_full) - set(unit.index))
    return {"config": full.name, "core_hours": round(core, 2), "wall_hours": round(core / workers, 2), "workers": workers,
            "steady": [list(k) for k in steady.index],
            "units": sum(n_full.values()), "sample_units": len(unit), "sample_cell_s": round(float(cells["wall"].sum()), 1),
            "null_s": {k: round(v, 1) for k, v in nulls.items()}, "not_sampled": [list(m) for m in missing],
            "per_unit": sorted(per_unit, key=lambda x: -x["hours"]), "machine": machine()}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("configs", help="write the two sample configs")
    c.add_argument("config", help="the full config (name or path)")
    c.add_argument("folder")
    c.add_argument("--keys", type=int, default=1, help="keys per scheme (2: the second key's units are steady-state)")
    e = sub.add_parser("estimate", help="estimate the full grid from the sample's results in FOLDER/out")
    e.add_argument("config")
    e.add_argument("folder")
    e.add_argument("--workers", type=int, default=2, help="Ray workers (cores) of the full run")
    e.add_argument("--extra", action="append", default=[], type=Path,
                   help="another results folder whose units at key index >= 1 price their (scheme, regime)")
    a = ap.parse_args(argv)
    if a.cmd == "configs":
        for p in write_configs(a.config, Path(a.folder), a.keys):
            print(p)
        return 0
    res = estimate(a.config, Path(a.folder), a.workers, a.extra)
    for u in res["per_unit"]:
        tag = "steady" if [u["scheme"], u["regime"]] in res["steady"] else "first"
        print(f"{u['scheme']:22s} {u['regime']:20s} unit {u['unit_s']:7.1f} s ({tag}) x {u['units']:3d} = {u['hours']:.2f} h")
    print(f"{res['config']}: {res['units']} units; {res['core_hours']:.2f} core-hours, {res['wall_hours']:.2f} h on "
          f"{res['workers']} cores (null texts {res['workers']}x per regime; perfect balance)"
          + (f"; not sampled: {res['not_sampled']}" if res["not_sampled"] else ""))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
