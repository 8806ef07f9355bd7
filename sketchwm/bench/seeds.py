"""Seeds and keys of the benchmark harness, derived from names so that no generator depends on run order.

Every benchmark, the harness's cells and the scripts under ``benchmarks/`` alike, takes its keys from
:func:`bench_key` and its generator seeds from :func:`derive_seed`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from ..keys import WatermarkKey

__all__ = ["DEFAULT_KEY_SEED", "derive_seed", "bench_key"]

#: the key seed of a run that names none (``BenchConfig.key_seed``'s default); scripts with a fixed key use it
DEFAULT_KEY_SEED = "sketchwm-bench"


def derive_seed(*parts: Any) -> int:
    """A 60-bit seed from SHA-256 of the parts joined by ``/`` (every generator is independent of run order)."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:15], 16)


def bench_key(key_seed: str, domain: str, *parts: Any) -> WatermarkKey:
    """A benchmark key: HMAC-SHA256(key_seed, "sketchwm/bench/<domain>/<parts joined by />") (never written out).

    Args:
        key_seed: the run's public seed string (a bench config's ``key_seed``; a script's ``--seed``).
        domain: what the key is for: ``key`` (the run's keys, indexed 0, 1, ...), ``unrelated-key``,
            ``theory-key``; one domain never yields another's keys.
        parts: the key's index within the domain, e.g. ``3`` or ``(3, 0)``.

    Examples:
        >>> bench_key("sketchwm-bench", "key", 0) == bench_key("sketchwm-bench", "key", 0)
        True
        >>> bench_key("sketchwm-bench", "key", 0) == bench_key("sketchwm-bench", "theory-key", 0)
        False
    """
    msg = "/".join(["sketchwm/bench", domain, *map(str, parts)]).encode()
    return WatermarkKey(hmac.new(key_seed.encode(), msg, hashlib.sha256).digest())
