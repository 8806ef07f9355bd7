"""Process-wide thread pools and row slicing for the detectors' C passes (which release the GIL).

Two pools, never one: a whole channel scored on the ``"channel"`` pool waits for the row slices it
hands to the ``"detect"`` pool, so one pool for both could deadlock with every thread waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

__all__ = ["shared_pool", "over_slices", "gather_rows"]

_POOLS: dict[str, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process-wide pool ``name`` with at least ``workers`` threads, created once and grown by
    replacement (thread start-up is slow on a busy machine). Threads are named ``sketchwm-<name>``.

    Args:
        name: the pool's role, e.g. ``"detect"`` (row slices) or ``"channel"`` (whole channels).
        workers: the fewest threads the caller needs (>= 1).
    """
    with _LOCK:
        pool = _POOLS.get(name)
        if pool is None or pool._max_workers < workers:
            pool = _POOLS[name] = ThreadPoolExecutor(workers, thread_name_prefix=f"sketchwm-{name}")
        return pool


def over_slices(n: int, run: Callable[[int, int], object], *, min_per_worker: int = 1,
                threads: int | None = None) -> None:
    """Call ``run(lo, hi)`` on contiguous slices covering ``range(n)``: one call when one worker
    suffices, else ``w = min(threads, n // min_per_worker)`` slices of near-equal size on the
    ``"detect"`` pool (``threads`` defaults to ``torch.get_num_threads()``). ``run`` must write
    disjoint outputs per slice; its exceptions are raised here.
    """
    workers = max(1, min(threads or torch.get_num_threads(), n // max(1, min_per_worker)))
    if workers == 1:
        run(0, n)
        return
    bounds = [round(n * j / workers) for j in range(workers + 1)]
    list(shared_pool("detect", workers).map(run, bounds[:-1], bounds[1:]))


def gather_rows(ids: torch.Tensor, valid: torch.Tensor, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``rows`` (R,) int64 of CPU ids (B, N) int64 and valid (B, N) bool, gathered by numpy
    (a torch index op would start torch's own thread pool): (R, N) int64 and (R, N) bool."""
    return torch.from_numpy(ids.numpy()[rows]), torch.from_numpy(valid.numpy()[rows])
