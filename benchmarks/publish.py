"""Run a benchmark and write what it printed into its section of benchmarks/README.md.

    python benchmarks/publish.py SECTION [--readme PATH] [--tail N] -- COMMAND [ARGS...]
    python benchmarks/publish.py --suite [--only NAME,NAME] [--skip NAME,NAME] [--list]

The section (between ``<!-- sketchwm-bench:SECTION:start -->`` and ``...:end -->``) is replaced only
when the command exits 0; see :mod:`sketchwm.bench.publish`. ``--suite`` runs every benchmark of
:data:`SUITE` in turn, each into its own section (what benchmarks/README.md shows is what the suite
printed last). Exit code: the command's (the suite: the number of commands that failed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from sketchwm.bench.publish import DEFAULT_README, run_and_publish

PY = "python"
#: (section, command): the published benchmarks, in the order benchmarks/README.md shows them.
#: Sizes are chosen so the suite runs in about an hour on 2 cores; the docs name the larger runs.
SUITE: list[tuple[str, str]] = [
    ("demo", "sketchwm demo --json"),
    ("null-per-key", f"{PY} benchmarks/null_per_key.py --n-keys 20 --seed 1"),
    ("flood-per-key", f"{PY} benchmarks/flood_per_key.py --n-keys 4 --n-texts 20 --n-null 100 --batch-size 20 --strengths 0.5 0.3 0.2"),
    ("tokens-to-detect", f"{PY} benchmarks/tokens_to_detect.py --n-texts 100 --threads 1"),
    ("eos-length", f"{PY} benchmarks/eos_length.py"),
    ("real-dlm-llada", f"{PY} benchmarks/real_dlm_smoke.py --backend llada --standin"),
    ("real-dlm-llada-dgmark", f"{PY} benchmarks/real_dlm_smoke.py --backend llada --standin --scheme dgmark"),
    ("real-dlm-llada-red-green", f"{PY} benchmarks/real_dlm_smoke.py --backend llada --standin --scheme red-green-dlm"),
    ("real-dlm-llada-t1", f"{PY} benchmarks/real_dlm_smoke.py --backend llada --standin --temperature 1"),
    ("real-dlm-dream", f"{PY} benchmarks/real_dlm_smoke.py --backend dream --standin"),
    ("real-dlm-mdlm", f"{PY} benchmarks/real_dlm_smoke.py --backend mdlm --standin"),
    ("eval-default-model", f"{PY} benchmarks/eval_default_model.py --n-samples 100"),
    ("perf-detect", f"{PY} benchmarks/perf_detect.py --repeats 5 --text-mb 16 --text-repeats 3"),
    ("perf-attribution", f"{PY} benchmarks/perf_attribution.py"),
    ("perf-embedding", f"{PY} benchmarks/perf_embedding.py --repeats 15"),
    ("tilt-error", f"{PY} benchmarks/tilt_error.py --prompts 16"),
    ("perf-generate", f"{PY} benchmarks/perf_generate.py --schemes global-sketch-green,global-sketch --repeats 3 --z-prompts 0"),
    ("perf-generate-low-confidence", f"{PY} benchmarks/perf_generate.py --schemes global-sketch-green,global-sketch "
                                     "--remasking low_confidence --repeats 3 --z-prompts 0"),
    ("generate-floor", f"{PY} benchmarks/generate_floor.py"),
    ("perf-detect-stream", f"{PY} benchmarks/perf_detect_stream.py --size-mb 100"),
    ("perf-startup", f"{PY} benchmarks/perf_startup.py --repeats 5"),
    ("perf-guard", f"{PY} benchmarks/perf_guard.py"),
]


def run_suite(only: set[str], skip: set[str], readme: str, tail: int) -> int:
    """Run the suite's benchmarks (``only`` them if given, none of ``skip``); returns the failures."""
    unknown = (only | skip) - {s for s, _ in SUITE}
    if unknown:
        raise SystemExit(f"publish.py: unknown section(s) {sorted(unknown)}; --list shows the suite")
    failed = 0
    for section, command in SUITE:
        if (only and section not in only) or section in skip:
            continue
        print(f"== {section}: {command}", flush=True)
        argv = shlex.split(command)
        # this interpreter and its environment's sketchwm run the command; the page shows it as written
        argv[0] = {"python": sys.executable,
                   "sketchwm": os.path.join(os.path.dirname(sys.executable), "sketchwm")}.get(argv[0], argv[0])
        failed += run_and_publish(section, argv, readme=readme, tail=tail, shown=command) != 0
    return failed


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the benchmark command's exit code (the suite: its failures)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", nargs="?")
    ap.add_argument("--readme", default=str(DEFAULT_README))
    ap.add_argument("--tail", type=int, default=40, help="output lines published (0: all)")
    ap.add_argument("--suite", action="store_true", help="run every benchmark of the suite into its section")
    ap.add_argument("--only", default="", help="with --suite: comma-separated sections to run")
    ap.add_argument("--skip", default="", help="with --suite: comma-separated sections to leave out")
    ap.add_argument("--list", action="store_true", help="print the suite's sections and commands")
    a = ap.parse_args(argv[:cut])
    if a.list:
        for section, command in SUITE:
            print(f"{section:20s} {command}")
        return 0
    if a.suite:
        if a.section is not None:  # e.g. "--only a b": a second name would otherwise be dropped silently
            print(f"publish.py: --suite takes no SECTION (got '{a.section}'); give --only a,b", file=sys.stderr)
            return 2
        split = lambda s: {x for x in s.split(",") if x}  # noqa: E731
        return run_suite(split(a.only), split(a.skip), a.readme, a.tail)
    if a.section is None or cut == len(argv):
        print("usage: publish.py SECTION [--readme PATH] [--tail N] -- COMMAND [ARGS...] | --suite", file=sys.stderr)
        return 2
    return run_and_publish(a.section, argv[cut + 1:], readme=a.readme, tail=a.tail)


if __name__ == "__main__":
    sys.exit(main())
