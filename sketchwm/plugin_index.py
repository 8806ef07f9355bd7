"""``sketchwm plugins`` without importing the plugins: a cached description of the registry.

Listing names and one-line summaries needs every plugin module imported (they define the
classes), and those import torch, scipy and pydantic: seconds of start-up for a table of names.
:func:`describe_plugins` keeps the last listing in a small JSON file, keyed by a fingerprint of
everything that could change it: the sketchwm version, the ``sketchwm`` entry points (name, target,
distribution and its version) and the size and modification time of every ``.py`` file of each
entry point's top-level package (found with ``importlib.util.find_spec``, which does not import
it). Any change misses the cache and rebuilds it from the real registry; nothing stale is shown.

Cache directory: ``$SKETCHWM_CACHE_DIR``, else ``$XDG_CACHE_HOME/sketchwm``, else
``~/.cache/sketchwm``. A cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["describe_plugins", "plugins_fingerprint", "cache_dir"]

ENTRY_POINT_GROUP = "sketchwm"


def cache_dir() -> Path:
    """The directory of sketchwm's caches (see module doc); may not exist yet."""
    if os.environ.get("SKETCHWM_CACHE_DIR"):
        return Path(os.environ["SKETCHWM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sketchwm"


def _package_files(module: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of the ``.py`` files of ``module``'s top-level package (not imported)."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return [(top, -1, -1)]
    if spec is None:
        return [(top, -1, -1)]
    roots = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
    out = []
    for root in roots:
        rp = Path(root)
        files = [rp] if rp.is_file() else sorted(q for q in rp.rglob("*.py") if "__pycache__" not in q.parts)
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            out.append((str(f), st.st_size, st.st_mtime_ns))
    return out


def plugins_fingerprint() -> str:
    """SHA-256 (24 hex) of the sketchwm version, the entry points and their packages' files."""
    from . import __version__

    eps = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value))
    parts: list[Any] = [__version__]
    modules = {"sketchwm"}
    for ep in eps:
        dist = getattr(ep, "dist", None)
        parts.append((ep.name, ep.value, getattr(dist, "name", None), getattr(dist, "version", None)))
        modules.add(ep.value.split(":")[0])
    for m in sorted({m.split(".")[0] for m in modules}):
        parts.append(_package_files(m))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def describe_plugins(use_cache: bool = True) -> dict[str, list[dict[str, str]]]:
    """:meth:`sketchwm.registry.Registry.describe` of the installed plugins, from the cache when valid.

    Args:
        use_cache: False always imports the plugins (and refreshes the cache).

    Raises:
        RegistryError: a plugin fails to load or registers a bad class (never cached).
    """
    fp = plugins_fingerprint()
    path = cache_dir() / f"plugins-{fp}.json"
    if use_cache:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    from .registry import get_registry

    desc = get_registry().describe()
    try:
        from .io import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        olds = sorted(path.parent.glob("plugins-*.json"), key=lambda q: q.stat().st_mtime)
        for old in olds[:-15]:  # keep the 15 newest listings (several checkouts may share the cache)
            old.unlink(missing_ok=True)
        write_json_atomic(path, desc)
    except Exception:  # noqa: BLE001 - a cache that cannot be written is only slower
        pass
    return desc
