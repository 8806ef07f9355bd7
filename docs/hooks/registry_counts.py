"""mkdocs hook: component counts on the docs pages come from the registry, at build time.

A page writes ``{{ n_baselines }}`` (the baseline watermark schemes, those of the ``sketchwm_baselines``
plugin), ``{{ n_schemes }}``, ``{{ n_attacks }}``, ``{{ n_backends }}`` or ``{{ n_metrics }}``; the hook
replaces each with the number of components registered in the installed plugins. An unknown name fails
the build (``mkdocs build --strict`` runs in tests/test_docs.py).
"""

from __future__ import annotations

import re
from typing import Any

PLACEHOLDER = re.compile(r"\{\{\s*n_(\w+)\s*\}\}")


def registry_counts() -> dict[str, int]:
    """{name: count} of the registered components the pages may quote."""
    from sketchwm.registry import get_registry

    reg = get_registry()
    schemes = [reg.get("scheme", n) for n in reg.names("scheme")]
    return {
        "baselines": sum(c.__module__.startswith("sketchwm_baselines") for c in schemes),
        "schemes": len(schemes),
        "attacks": len(reg.names("attack")),
        "backends": len(reg.names("backend")),
        "metrics": len(reg.names("metric")),
    }


def fill(markdown: str, counts: dict[str, int]) -> str:
    """``markdown`` with every ``{{ n_NAME }}`` replaced by ``counts[NAME]``; ValueError for an unknown NAME."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in counts:
            raise ValueError(f"unknown count '{m.group(0)}' (known: {', '.join(sorted(counts))})")
        return str(counts[m.group(1)])

    return PLACEHOLDER.sub(one, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return fill(markdown, registry_counts()) if PLACEHOLDER.search(markdown) else markdown
