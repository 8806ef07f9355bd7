"""Shared pieces of the speed benchmarks (``benchmarks/perf_*.py``) and the scorecard's speed lines: flags,
a built-in registry, side-by-side timing, the JSON report and the text input of the detection benchmarks.

Contenders are timed round-robin (A, B, C, A, B, C, ...; or in a rotating order, B, C, A on the second
round) after untimed warm-up calls, so the slow drifts of a shared machine hit all of them alike, and
medians are reported (:func:`interleaved`, the one side-by-side timer of the package).

Importing this module does not import torch (the streaming benchmark only builds its input here).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ..registry import Registry

__all__ = ["builtin_registry", "add_common_args", "setup", "interleaved", "median_ms", "interleaved_medians",
           "report", "build_input", "zipf_workload", "HUMAN"]

#: the shipped human passages (2,569 texts of ~820 characters) that :func:`build_input` repeats
HUMAN = Path(__file__).resolve().parents[1] / "data" / "human.jsonl.gz"


def builtin_registry() -> Registry:
    """Registry of the ``builtin-*`` entry points only (independent of other installed plugins)."""
    import importlib.metadata

    from ..registry import Registry, get_plugin_manager

    eps = [e for e in importlib.metadata.entry_points(group="sketchwm") if e.name.startswith("builtin")]
    return Registry(get_plugin_manager(eps))


def add_common_args(ap: argparse.ArgumentParser, repeats: int = 7) -> None:
    """``--device`` (default cuda when available), ``--threads`` (torch intra-op threads), ``--repeats``."""
    import torch

    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--repeats", type=int, default=repeats, help="side-by-side repeats (medians are reported)")


def setup(args: argparse.Namespace) -> torch.device:
    """Apply ``--threads`` and check ``--device``; returns the torch device.

    Raises:
        SystemExit: ``--device cuda`` without a GPU.
    """
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    return dev


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, dev: torch.device | str | None = None,
                warmup: int = 1, rotate: bool = False) -> dict[str, list[float]]:
    """Time each callable ``repeats`` times, side by side, after ``warmup`` untimed rounds, under ``torch.no_grad``.

    Args:
        fns: name → callable of no argument (its result is dropped after each call).
        repeats: timed rounds; each calls every callable once.
        dev: the device the callables compute on; on a CUDA device it is synchronised before and after
            each timed call (``None``: no synchronisation).
        warmup: untimed rounds first, in ``fns`` order.
        rotate: start round ``r`` at callable ``r mod len(fns)`` (two callables alternate which runs
            first); otherwise every round runs in ``fns`` order.

    Returns:
        name → list of ``repeats`` wall-clock seconds.
    """
    import torch

    cuda = dev is not None and torch.device(dev).type == "cuda"
    names = list(fns)
    with torch.no_grad():
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        out: dict[str, list[float]] = {k: [] for k in fns}
        for r in range(repeats):
            k = r % len(names) if rotate and names else 0
            for name in names[k:] + names[:k]:
                if cuda:
                    torch.cuda.synchronize()
                t = time.perf_counter()
                res = fns[name]()
                if cuda:
                    torch.cuda.synchronize()
                out[name].append(time.perf_counter() - t)
                del res
    return out


def median_ms(times: list[float]) -> float:
    """Median of seconds, in milliseconds, rounded to 0.01."""
    return round(1e3 * statistics.median(times), 2)


def interleaved_medians(fns: dict[str, Callable[[], Any]], repeats: int, dev: torch.device | str | None) -> dict[str, float]:
    """:func:`interleaved`, then :func:`median_ms` of each callable: name → median milliseconds."""
    return {k: median_ms(v) for k, v in interleaved(fns, repeats, dev).items()}


def report(lines: list[str], res: dict[str, Any]) -> None:
    """Print the human-readable ``lines``, then ``res`` as one JSON object, the last line (what the
    tests and the README read), with the machine it ran on (:func:`sketchwm.bench.machine.machine`)
    added as ``"machine"``. A ``"better"`` map in ``res`` declares the headline figures that the
    publish command tracks over runs (:mod:`sketchwm.bench.publish`)."""
    from .machine import machine

    res = {**res, "machine": machine()}
    for line in lines:
        print(line)
    print(json.dumps(res))


def build_input(path: Path, size_bytes: int, seed: int = 0) -> tuple[int, int]:
    """Write JSONL records {"text", "i"} to ``path`` until it holds ≥ ``size_bytes`` bytes.

    Returns (records, bytes written). Cheap: the shipped passages (:data:`HUMAN`) are encoded once
    and the lines are written in shuffled passes (one ``random.shuffle`` of 2,569 items per pass), up
    to the first line that reaches the size.
    """
    with gzip.open(HUMAN, "rt", encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()]
    bodies = [json.dumps({"text": t})[:-1] for t in texts]  # '{"text": "..."' without the closing brace
    rng = random.Random(seed)
    n = written = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < size_bytes:
            rng.shuffle(bodies)
            lines = []
            for b in bodies:
                line = f'{b}, "i": {n}}}\n'  # json.dumps escapes non-ASCII: len() is the byte count
                lines.append(line)
                n += 1
                written += len(line)
                if written >= size_bytes:
                    break
            out.write("".join(lines))
    return n, written


def zipf_workload(vocab_size: int, texts: int, length: int, seed: int = 0) -> "tuple[np.ndarray, torch.Tensor]":
    """The detection benchmarks' token ids: a Zipf law (exponent 1.1) over a random permutation of the V =
    ``vocab_size`` ids, so frequent ids are spread over the vocabulary, and ``texts`` × ``length`` ids drawn
    i.i.d. from it, so texts repeat tokens as real text does. Returns the law (V,) float64 (unnormalised)
    and the ids (texts, length) int64."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed % 2**63)
    prior = 1.0 / np.arange(1, vocab_size + 1) ** 1.1
    prior = prior[rng.permutation(vocab_size)]
    ids = torch.from_numpy(rng.choice(vocab_size, size=(texts, length), p=prior / prior.sum()))
    return prior, ids
