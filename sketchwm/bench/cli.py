"""Subcommands ``sketchwm bench run|export`` and ``sketchwm leaderboard``, added through the hook
``sketchwm_register_commands`` (implemented in :mod:`sketchwm.bench.builtin_metrics`, the harness's plugin module)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["add_subparsers"]


def cmd_bench_run(args: argparse.Namespace) -> int:
    """Run (or resume) a benchmark grid."""
    from .config import load_config
    from .runner import run_bench

    cfg = load_config(args.config)
    t0 = time.time()
    res = run_bench(cfg, args.out, executor=args.executor, progress=None if not args.quiet else False)
    print(f"bench {cfg.name}: {res['ran']} cells run, {res['skipped']} already done, {res['cells']} in all "
          f"({time.time() - t0:.1f}s) → {args.out}/parts", file=sys.stderr)
    return 0


def cmd_bench_export(args: argparse.Namespace) -> int:
    """Write all rows of a results folder as one CSV (atomically)."""
    from .results import read_results

    from ..io import atomic_write

    df = read_results(args.results)
    out = Path(args.csv)
    with atomic_write(out, newline="") as f:
        df.to_csv(f, index=False)
    print(f"wrote {len(df)} rows to {out}", file=sys.stderr)
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """Markdown tables, CSV pivots and index.html from a results folder."""
    from .leaderboard import build_leaderboard

    paths = build_leaderboard(args.results, args.out, readme=args.readme, command=args.command_line)
    print(f"leaderboard: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def add_subparsers(sub: "argparse._SubParsersAction", parents: "list[argparse.ArgumentParser] | tuple" = ()) -> None:
    """Add ``bench`` (``run``, ``export``) and ``leaderboard`` to the ``sketchwm`` subparsers.

    Args:
        sub: the main parser's subparsers action.
        parents: options every sub-command shares (``--debug``).
    """
    parents = list(parents)
    b = sub.add_parser("bench", parents=parents, help="run a benchmark grid (YAML/JSON config) → Parquet results")
    bsub = b.add_subparsers(dest="bench_command", required=True, help="run: run or resume a grid; export: rows as CSV")
    r = bsub.add_parser("run", parents=parents, help="run or resume a grid; finished cells are skipped")
    r.add_argument("config", help="benchmark config (.yaml, .yml or .json)")
    r.add_argument("--out", required=True, help="results folder (parts/<cell hash>.parquet)")
    r.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local (this process) or ray (one Ray task per unit; pip install 'sketchwm[ray]')")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_bench_run)
    e = bsub.add_parser("export", parents=parents, help="write all result rows as CSV")
    e.add_argument("results", help="results folder")
    e.add_argument("--csv", required=True, help="output CSV file")
    e.set_defaults(func=cmd_bench_export)
    lb = sub.add_parser("leaderboard", parents=parents, help="Markdown, CSV pivots and an offline index.html from bench results")
    lb.add_argument("results", help="results folder written by `sketchwm bench run`")
    lb.add_argument("--out", required=True, help="output folder")
    lb.add_argument("--readme", nargs="?", const="benchmarks/README.md",
                    help="also replace the leaderboard section of this Markdown file, between markers "
                         "(default benchmarks/README.md, where measured results live)")
    lb.add_argument("--command-line", dest="command_line", default="",
                    help="the command that produced the results (shown with the tables)")
    lb.set_defaults(func=cmd_leaderboard)
