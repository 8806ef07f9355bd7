"""Seeds of the benchmark harness, derived from names so that no generator depends on run order."""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["derive_seed"]


def derive_seed(*parts: Any) -> int:
    """A 60-bit seed from SHA-256 of the parts joined by ``/`` (every generator is independent of run order)."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:15], 16)
