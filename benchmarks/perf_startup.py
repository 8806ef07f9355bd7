"""Start-up time of the ``sketchwm`` command, side by side with a bare Python start.

Commands (each a fresh process, wall-clock seconds):

* ``python -c pass`` — the interpreter alone, the floor;
* ``sketchwm --help`` — argument parsing only: no torch, no plugin imported;
* ``sketchwm plugins`` — the plugin listing from its cache (:mod:`sketchwm.plugin_index`);
* ``sketchwm plugins --no-cache`` — the listing with every plugin imported (what a cache miss costs).

The commands run interleaved, ``--repeats`` rounds (one of each per round, in a rotating order), so
machine load affects all of them alike; medians are reported, with their ratio to ``python -c pass``.
Targets: ``--help`` <= 1 s and ``plugins`` <= 1.5 s.

Usage: python benchmarks/perf_startup.py [--repeats 7]
Last line: one JSON object {command: {"median_s", "min_s", "ratio_to_python"}}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return dt


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="rounds of interleaved runs (default 7)")
    args = ap.parse_args(argv)
    env = _env()
    py = [sys.executable]
    sk = [sys.executable, "-m", "sketchwm.cli"]
    cmds = {
        "python -c pass": py + ["-c", "pass"],
        "sketchwm --help": sk + ["--help"],
        "sketchwm plugins": sk + ["plugins"],
        "sketchwm plugins --no-cache": sk + ["plugins", "--no-cache"],
    }
    _time(cmds["sketchwm plugins"], env)  # fill the listing cache (a first run after an install or edit)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    names = list(cmds)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate the order each round
            times[name].append(_time(cmds[name], env))
    base = statistics.median(times["python -c pass"])
    result = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3),
                  "ratio_to_python": round(statistics.median(v) / base, 2)} for k, v in times.items()}
    print(f"{'command':32s}{'median s':>10s}{'min s':>8s}{'x python':>10s}   ({args.repeats} interleaved rounds)")
    for k, v in result.items():
        print(f"{k:32s}{v['median_s']:>10.3f}{v['min_s']:>8.3f}{v['ratio_to_python']:>10.2f}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
