"""CPU threading helper shared by the components' hot paths."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["serial_on_cpu"]


@contextmanager
def serial_on_cpu(device: torch.device | str) -> Iterator[None]:
    """Run the torch ops inside on one intra-op thread when ``device`` is the CPU (else do nothing).

    For the small (B, V) bookkeeping of a denoising step (B·V ≈ 10⁵ entries, ~0.1 ms of work per
    op): torch splits any op over 32,768 entries across its thread pool, and on a busy CPU each
    such split waits for a sleeping pool thread to be scheduled (~8 ms measured on the 2-core
    machine, ``benchmarks/perf_embedding.py``), 50× the op itself. The setting is process-wide and
    restored on exit, so torch ops of other Python threads during the block run on one thread too.
    """
    n = torch.get_num_threads()
    if torch.device(device).type != "cpu" or n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
