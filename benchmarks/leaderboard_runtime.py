"""Estimate the wall time of a full benchmark grid from a scaled-down run of the same grid.

Reads the per-cell wall times of the small run (``wall_time_s`` of each results row) and scales each
cell by how many more texts the full config gives it (a clean cell by the ratio of ``prompt_sets[].n``,
an attack cell by the ratio of the attack's ``n``) and by how many more units (strength settings ×
keys) the full config plans for the same scheme entry and regime; the unwatermarked null texts,
generated once per regime inside the first clean cell of that regime, by the ratio of
``n_null_cal + n_null_fpr`` alone (shared by keys and schemes)::

    sketchwm bench run leaderboard-estimate --out runs/lbest
    python benchmarks/leaderboard_runtime.py runs/lbest leaderboard-estimate leaderboard [--cpu-share F]

A regime of the full config that the small run lacks is costed as the small run's regime with the
same ``remasking`` (random vs confidence-ordered: ``low_confidence`` and ``entropy`` both need every
masked row's marginals). ``--cpu-share F`` multiplies every wall time by F, the small run's CPU time
over its wall time (``/usr/bin/time``: (user + sys) / elapsed), to estimate the time on an unloaded
machine from a run on a shared one. Prints the small run's total, the estimate and its parts. Speed is whatever the machine gave the
small run: on a shared machine, run both under the same load.
"""

from __future__ import annotations

import argparse

import numpy as np

from sketchwm.bench.config import load_config
from sketchwm.bench.results import read_results
from sketchwm.bench.runner import bench_registry, plan


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="results folder of the small run")
    ap.add_argument("small", help="its config (name or path)")
    ap.add_argument("full", help="the full config (name or path)")
    ap.add_argument("--cpu-share", type=float, default=1.0, help="scale wall times by this CPU/wall ratio")
    a = ap.parse_args(argv)
    small, full = load_config(a.small), load_config(a.full)
    df = read_results(a.results)
    cells = df.groupby("cell_hash").agg(wall=("wall_time_s", "first"), kind=("cell_kind", "first"),
                                        attack=("attack", "first"), regime=("regime", "first"),
                                        row=("row_index", "size"))
    reg = bench_registry()
    count = lambda cfg: __import__("collections").Counter(  # noqa: E731
        (u.curve, cfg.regime_list[u.regime].name) for u, _ in plan(cfg, reg))
    n_full, n_small = count(full), count(small)
    kind = lambda r: "random" if r.sampler.get("remasking", "random") == "random" else "confidence"  # noqa: E731
    measured = {kind(r): r.name for r in small.regime_list}
    stands_for: dict[str, list[str]] = {}  # small-run regime → the full config's regimes it costs
    for r in full.regime_list:
        stands_for.setdefault(measured.get(kind(r), small.regime_list[0].name), []).append(r.name)
    cells = cells.join(df.groupby("cell_hash")["curve"].first())
    cells["wall"] *= a.cpu_share
    cells["units"] = [sum(n_full[(c, fr)] for fr in stands_for.get(r, [])) / n_small[(c, r)]
                      for c, r in zip(cells["curve"], cells["regime"])]
    n_clean = full.prompt_sets[0].n / small.prompt_sets[0].n
    null = (full.n_null_cal + full.n_null_fpr) / (small.n_null_cal + small.n_null_fpr)
    atk_n = {x.name: (x.n or full.prompt_sets[0].n) for x in full.attacks}
    atk_s = {x.name: (x.n or small.prompt_sets[0].n) for x in small.attacks}
    parts = {"clean": 0.0, "nulls": 0.0, "attack": 0.0}
    for regime, g in cells.groupby("regime"):
        clean = g[g["kind"] == "clean"]["wall"].to_numpy()
        if clean.size:
            typical = float(np.median(clean))
            first = float(clean.max())  # the cell that also generated the regime's null texts
            parts["nulls"] += max(first - typical, 0.0) * null * len(stands_for.get(regime, []))
            c = g[g["kind"] == "clean"]
            parts["clean"] += float((c["wall"] * c["units"]).sum() - max(first - typical, 0.0)) * n_clean
        att = g[g["kind"] == "attack"]
        parts["attack"] += sum(w * atk_n[k] / atk_s[k] * u for w, k, u in zip(att["wall"], att["attack"], att["units"]))
    total_small = float(cells["wall"].sum()) / a.cpu_share
    est = sum(parts.values())
    print(f"small run: {len(cells)} cells, {total_small:.0f} s of cell wall time; full plan: "
          f"{sum(n_full.values())} units against {sum(n_small.values())}; regimes costed as {stands_for}")
    print(f"estimate for {full.name}: {est:.0f} s ({est / 60:.1f} min): "
          + ", ".join(f"{k} {v:.0f} s" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
