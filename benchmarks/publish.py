"""Run a benchmark and write what it printed into its section of benchmarks/README.md.

    python benchmarks/publish.py SECTION [--readme PATH] [--tail N] -- COMMAND [ARGS...]

The section (between ``<!-- sketchwm-bench:SECTION:start -->`` and ``...:end -->``) is replaced only
when the command exits 0; see :mod:`sketchwm.bench.publish`. Exit code: the command's.
"""

from __future__ import annotations

import argparse
import sys

from sketchwm.bench.publish import DEFAULT_README, run_and_publish


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the benchmark command's exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: publish.py SECTION [--readme PATH] [--tail N] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section")
    ap.add_argument("--readme", default=str(DEFAULT_README))
    ap.add_argument("--tail", type=int, default=40, help="output lines published (0: all)")
    a = ap.parse_args(argv[:cut])
    return run_and_publish(a.section, argv[cut + 1:], readme=a.readme, tail=a.tail)


if __name__ == "__main__":
    sys.exit(main())
