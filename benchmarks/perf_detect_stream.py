"""Peak memory and throughput of streaming ``sketchwm detect`` over a large JSONL input.

Builds a JSONL file of about ``--size-mb`` MB (10^6 bytes) in a temporary directory from the shipped
human passages (``sketchwm/data/human.jsonl.gz``, 2,569 texts of ~820 characters, shuffled and
repeated; each record also carries its index), writes a fresh test key (mode 0600), runs
``sketchwm detect --key K --input FILE --json --quiet --chunk-size C`` on it as a child process with
its stdout read line by line and counted (no result is kept), polls the child's peak resident set
size (``VmHWM`` of ``/proc/PID/status``, Linux) every ``--poll`` seconds and reads the kernel's
high-water mark of waited children (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``) when it exits. The temporary directory
(input and key) is deleted afterwards.

Detection is with the default configuration (scheme ``global-sketch`` with the default backend's
tokenizer, analytic threshold), as a user with no calibration file runs it.

Usage: python benchmarks/perf_detect_stream.py [--size-mb 1024] [--chunk-size 4096]
Last line: {"input_mb": ..., "peak_rss_mb": ..., "records": ..., "records_per_s": ..., ...}
(MB = 10^6 bytes; ``peak_rss_mb`` is the larger of ru_maxrss and the polled maximum; ru_maxrss covers
every child this process has waited for, which run as a script is the detect child alone.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sketchwm.bench.perf import build_input


def _poll_rss(pid: int, period: float, peak: list[int], stop: threading.Event) -> None:
    """Keep peak[0] = the largest VmHWM/VmRSS (bytes) of process ``pid`` seen until ``stop`` is set or
    it exits (no-op where ``/proc`` is absent)."""
    status = Path(f"/proc/{pid}/status")
    while not stop.is_set():
        try:
            for line in status.read_text().splitlines():
                if line.startswith(("VmHWM:", "VmRSS:")):
                    peak[0] = max(peak[0], int(line.split()[1]) * 1024)  # kB
        except (OSError, ValueError, IndexError):
            return
        stop.wait(period)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024.0, help="input size in MB (10^6 bytes)")
    ap.add_argument("--chunk-size", type=int, default=None, help="sketchwm detect --chunk-size (default: its own)")
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between RSS polls of the child")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the child")
    ap.add_argument("--keep-dir", default=None, help="build the input here and keep it (default: a temporary directory, deleted)")
    args = ap.parse_args(argv)
    if args.size_mb <= 0:
        raise SystemExit("--size-mb must be positive")
    tmp = Path(args.keep_dir or tempfile.mkdtemp(prefix="sketchwm-stream-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        data = tmp / "input.jsonl"
        t0 = time.perf_counter()
        records, nbytes = build_input(data, int(args.size_mb * 1e6))
        build_s = time.perf_counter() - t0
        key = tmp / "test.key"
        key.write_text(os.urandom(32).hex() + "\n")
        key.chmod(0o600)
        cmd = [sys.executable, "-m", "sketchwm.cli", "detect", "--key", str(key), "--input", str(data), "--json", "--quiet"]
        if args.chunk_size:
            cmd += ["--chunk-size", str(args.chunk_size)]
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        peak, stop = [0], threading.Event()
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        poller = threading.Thread(target=_poll_rss, args=(child.pid, args.poll, peak, stop), daemon=True)
        poller.start()
        err: list[bytes] = []
        reader = threading.Thread(target=lambda: err.append(child.stderr.read()), daemon=True)
        reader.start()
        results = ok = 0
        for line in child.stdout:  # count results as they stream, keep none
            results += 1
            ok += b'"status":"ok"' in line or b'"status": "ok"' in line
        rc = child.wait()
        wall = time.perf_counter() - t0
        stop.set()
        poller.join()
        reader.join()
        if rc != 0:
            sys.stderr.write(b"".join(err).decode("utf-8", "replace")[-4000:])
            raise SystemExit(f"sketchwm detect exited with status {rc}")
        maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
    finally:
        if not args.keep_dir:
            shutil.rmtree(tmp, ignore_errors=True)
    res = {"input_mb": round(nbytes / 1e6, 3), "peak_rss_mb": round(max(maxrss, peak[0]) / 1e6, 1),
           "records": records, "records_per_s": round(records / wall, 1), "results": results, "scored": ok,
           "wall_s": round(wall, 1), "build_s": round(build_s, 1), "polled_peak_rss_mb": round(peak[0] / 1e6, 1),
           "ru_maxrss_mb": round(maxrss / 1e6, 1), "chunk_size": args.chunk_size, "threads": args.threads}
    print(json.dumps(res))
    return 0 if results == records else 1


if __name__ == "__main__":
    raise SystemExit(main())
