"""Wall time of ``sketchwm detect`` on one JSONL input with the local executor and with ``--executor ray``.

Builds a JSONL file of about ``--size-mb`` MB (10^6 bytes) from the shipped human passages (as
``perf_detect_stream.py``), writes a fresh test key, then runs, each as a fresh process, start-up
included, ``--repeats`` rounds in alternating order:

* local: ``sketchwm detect --key K --input FILE --out local.parquet --quiet``;
* Ray:   ``sketchwm detect --key K --input FILE --out DIR --executor ray --quiet`` (a local Ray started
  by the command on this machine's CPUs, ``--workers`` actors; default: the CPUs less one).

It checks that the two outputs hold the same rows (every detection column equal) and reports the
medians and their ratio. The temporary directory is deleted afterwards.

Usage: python benchmarks/perf_detect_ray.py [--size-mb 100] [--repeats 1] [--workers N]
Last line: {"input_mb": ..., "local_s": ..., "ray_s": ..., "ray_over_local": ..., "cpus": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sketchwm.bench.perf import build_input

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("i", "status", "error", "score", "z", "p_value", "threshold", "is_watermarked", "n_tokens")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=100.0, help="input size in MB (10^6 bytes)")
    ap.add_argument("--repeats", type=int, default=1, help="rounds (one local and one Ray run each)")
    ap.add_argument("--workers", type=int, default=None, help="sketchwm detect --workers (Ray actors)")
    args = ap.parse_args(argv)
    import pyarrow.parquet as pq

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks"),
                                                        os.environ.get("PYTHONPATH", "")]))
    tmp = Path(tempfile.mkdtemp(prefix="sketchwm-ray-"))
    try:
        data = tmp / "input.jsonl"
        records, nbytes = build_input(data, int(args.size_mb * 1e6))
        key = tmp / "test.key"
        key.write_text(os.urandom(32).hex() + "\n")
        key.chmod(0o600)
        base = [sys.executable, "-m", "sketchwm.cli", "detect", "--key", str(key), "--input", str(data), "--quiet"]
        cmds = {"local": base + ["--out", str(tmp / "local.parquet")],
                "ray": base + ["--out", str(tmp / "ray"), "--executor", "ray"]
                + (["--workers", str(args.workers)] if args.workers else [])}
        times: dict[str, list[float]] = {k: [] for k in cmds}
        notes: dict[str, str] = {}
        for r in range(args.repeats):
            for name in (["local", "ray"] if r % 2 == 0 else ["ray", "local"]):
                shutil.rmtree(tmp / "ray", ignore_errors=True)
                t0 = time.perf_counter()
                p = subprocess.run(cmds[name], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=7200)
                times[name].append(time.perf_counter() - t0)
                if p.returncode != 0:
                    raise SystemExit(f"{name} run failed ({p.returncode}): {p.stderr.decode()[-1500:]}")
                notes[name] = p.stderr.decode().strip().splitlines()[-1]
        a, b = pq.read_table(tmp / "local.parquet"), pq.read_table(tmp / "ray")
        equal = a.num_rows == b.num_rows == records and all(a.column(c).to_pylist() == b.column(c).to_pylist()
                                                             for c in COLUMNS)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in cmds:
        print(f"{k:>6}: {med[k]:8.1f} s  {nbytes / 1e6 / med[k]:6.2f} MB/s  ({notes[k]})")
    print(f"ray / local wall time: {med['ray'] / med['local']:.2f}; rows equal: {equal}")
    print(json.dumps({"input_mb": round(nbytes / 1e6, 3), "records": records, "local_s": round(med["local"], 1),
                      "ray_s": round(med["ray"], 1), "ray_over_local": round(med["ray"] / med["local"], 3),
                      "rows_equal": equal, "cpus": os.cpu_count(), "repeats": args.repeats, "ray_note": notes["ray"]}))
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
