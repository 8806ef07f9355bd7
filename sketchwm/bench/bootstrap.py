"""The one percentile bootstrap of the benchmarks: a rate over texts with its 95% interval (Efron 1979).

The harness's stealing section and the scripts under ``benchmarks/`` call :func:`bootstrap_interval`;
curves with a median or a spread over keys use :func:`sketchwm.bench.matched.estimate`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["N_BOOT", "bootstrap_interval"]

#: resamples of the percentile bootstrap
N_BOOT = 2000


def bootstrap_interval(hits: np.ndarray, seed: int = 0, n_boot: int = N_BOOT) -> tuple[float, float, float]:
    """Mean of ``hits`` (n,) (a 0/1 or float array over texts) and its 95% percentile-bootstrap interval.

    Args:
        hits: per-text values; seed: the resampling generator's seed (``numpy.random.default_rng``);
        n_boot: resamples (default 2,000).

    Returns:
        (mean, lo, hi); three NaNs when ``hits`` is empty.

    Examples:
        >>> bootstrap_interval(np.zeros(50))
        (0.0, 0.0, 0.0)
    """
    hits = np.asarray(hits, dtype=np.float64)
    if hits.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    boots = hits[rng.integers(0, hits.size, (n_boot, hits.size))].mean(1)  # (n_boot,)
    return float(hits.mean()), float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))
