"""Shared pieces of the ``perf_*`` benchmarks: flags, a built-in registry, and side-by-side timing.

Every perf script times its contenders round-robin (A, B, C, A, B, C, ...) after one untimed
warm-up each, so the slow drifts of a shared machine hit all of them alike, and reports medians.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import time
from typing import Any, Callable

import torch

from sketchwm.registry import Registry, get_plugin_manager

__all__ = ["builtin_registry", "add_common_args", "setup", "interleaved", "median_ms"]


def builtin_registry() -> Registry:
    """Registry of the ``builtin-*`` entry points only (independent of other installed plugins)."""
    eps = [e for e in importlib.metadata.entry_points(group="sketchwm") if e.name.startswith("builtin")]
    return Registry(get_plugin_manager(eps))


def add_common_args(ap: argparse.ArgumentParser, repeats: int = 7) -> None:
    """``--device`` (default cuda when available), ``--threads`` (torch intra-op threads), ``--repeats``."""
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--repeats", type=int, default=repeats, help="side-by-side repeats (medians are reported)")


def setup(args: argparse.Namespace) -> torch.device:
    """Apply ``--threads`` and check ``--device``; returns the torch device.

    Raises:
        SystemExit: ``--device cuda`` without a GPU.
    """
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    return dev


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, dev: torch.device, warmup: int = 1) -> dict[str, list[float]]:
    """Time each callable ``repeats`` times, round-robin, after ``warmup`` untimed calls each.

    Returns:
        name → list of wall-clock seconds (CUDA synchronised before and after each call).
    """
    with torch.no_grad():
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        out: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                _sync(dev)
                t = time.perf_counter()
                res = fn()
                _sync(dev)
                out[name].append(time.perf_counter() - t)
                del res
    return out


def median_ms(times: list[float]) -> float:
    """Median of seconds, in milliseconds, rounded to 0.01."""
    return round(1e3 * statistics.median(times), 2)


def interleaved_medians(fns: dict[str, Callable[[], Any]], repeats: int, dev: torch.device) -> dict[str, float]:
    """:func:`interleaved`, then :func:`median_ms` of each callable: name → median milliseconds."""
    return {k: median_ms(v) for k, v in interleaved(fns, repeats, dev).items()}


def report(lines: list[str], res: dict[str, Any]) -> None:
    """Print the human-readable ``lines``, then ``res`` as one JSON object, the last line (what the
    tests and the README read), with the machine it ran on (:func:`sketchwm.bench.machine.machine`)
    added as ``"machine"``. A ``"better"`` map in ``res`` declares the headline figures that the
    publish command tracks over runs (:mod:`sketchwm.bench.publish`)."""
    import json

    from sketchwm.bench.machine import machine

    res = {**res, "machine": machine()}
    for line in lines:
        print(line)
    print(json.dumps(res))
