"""The component registry (and, re-exported from :mod:`sketchwm.plugin_manager`, the plugin manager factory).

``get_plugin_manager()`` builds a fresh :class:`pluggy.PluginManager` loaded from the ``sketchwm``
entry-point group (or from explicitly given entry points, for tests). :class:`Registry` collects
the classes every plugin registers, checks them (base class, duplicate names) and looks names up
with "did you mean" suggestions.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Any

import pluggy

from .components import Attack, Component, DLMBackend, ScoreFunction, Sketch, WatermarkScheme
from .bench.cellkind import CellKind
from .bench.metric import Metric
from .context import BuildContext
from .remasking import RemaskingRule
from .errors import RegistryError
from .plugin_manager import ENTRY_POINT_GROUP, broken_plugins, get_plugin_manager

__all__ = ["get_plugin_manager", "Registry", "get_registry", "KINDS", "ENTRY_POINT_GROUP"]

#: kind → (hook name, required base class)
KINDS: dict[str, tuple[str, type[Component]]] = {
    "sketch": ("sketchwm_register_sketches", Sketch),
    "score": ("sketchwm_register_scores", ScoreFunction),
    "backend": ("sketchwm_register_backends", DLMBackend),
    "scheme": ("sketchwm_register_schemes", WatermarkScheme),
    "attack": ("sketchwm_register_attacks", Attack),
    "metric": ("sketchwm_register_metrics", Metric),
    "cell-kind": ("sketchwm_register_cell_kinds", CellKind),
    "remasking": ("sketchwm_register_remasking_rules", RemaskingRule),
}


class Registry:
    """Components of every kind, collected from a plugin manager.

    Raises:
        RegistryError: at construction, if a plugin registers a class that is not a subclass of its
            kind's base, has no ``name``, or reuses a name.
    """

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self._by_kind: dict[str, dict[str, type[Component]]] = {}
        for kind, (hook, base) in KINDS.items():
            table: dict[str, type[Component]] = {}
            results = getattr(pm.hook, hook)()
            for group in results:
                for cls in group or []:
                    if not (isinstance(cls, type) and issubclass(cls, base)):
                        raise RegistryError(
                            f"{hook} returned {cls!r}, which is not a subclass of {base.__module__}.{base.__name__}"
                        )
                    if not cls.name:
                        raise RegistryError(f"{kind} class {cls.__qualname__} has no 'name'")
                    if cls.name in table and table[cls.name] is not cls:
                        raise RegistryError(
                            f"{kind} name '{cls.name}' registered twice: {table[cls.name].__module__}."
                            f"{table[cls.name].__qualname__} and {cls.__module__}.{cls.__qualname__}"
                        )
                    table[cls.name] = cls
            self._by_kind[kind] = table

    def names(self, kind: str) -> list[str]:
        """Sorted registered names of ``kind`` ("sketch", "score", "backend", "scheme", "attack", "metric",
        "cell-kind", "remasking")."""
        return sorted(self._table(kind))

    def get(self, kind: str, name: str) -> type[Component]:
        """The class registered as ``name``.

        Raises:
            RegistryError: unknown kind or name; the message suggests close matches.
        """
        table = self._table(kind)
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise RegistryError(f"unknown {kind} '{name}'{hint} (registered: {', '.join(sorted(table)) or 'none'})")
        return table[name]

    def build(self, kind: str, name: str, params: Any = None, context: BuildContext | None = None) -> Component:
        """Build the component registered as ``name``: ``cls.from_context(params, context)``.

        The one way sketchwm itself builds components: every kind receives the same
        :class:`sketchwm.context.BuildContext` (this registry filled in as ``context.registry``), and
        each kind's base class maps it onto its constructor (see :mod:`sketchwm.context`).

        Raises:
            RegistryError: unknown kind or name. ConfigError: bad params, or a context field the
                component needs is missing.
        """
        cls = self.get(kind, name)
        return cls.from_context(params, (context or BuildContext()).replace(registry=self))

    def create(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Component:
        """``get(kind, name)(*args, **kwargs)``: the class's own constructor, arguments as it takes them
        (scripts and tests that hold them all); the library builds through :meth:`build`."""
        return self.get(kind, name)(*args, **kwargs)

    @property
    def broken(self) -> dict[str, str]:
        """{entry-point name: one-line error} of the plugins that failed to load and were left out."""
        return broken_plugins(self.pm)

    def describe(self) -> dict[str, list[dict[str, str]]]:
        """``{kind: [{"name", "class", "summary"}]}`` for ``sketchwm plugins --json``, plus
        ``"broken": [{"name", "error"}]`` when a plugin failed to load."""
        out: dict[str, list[dict[str, str]]] = {}
        for kind in KINDS:
            out[kind] = [
                {"name": n, "class": f"{c.__module__}.{c.__qualname__}", "summary": c.summary()}
                for n, c in sorted(self._table(kind).items())
            ]
        if self.broken:
            out["broken"] = [{"name": n, "error": e} for n, e in sorted(self.broken.items())]
        return out

    def _table(self, kind: str) -> dict[str, type[Component]]:
        if kind not in self._by_kind:
            close = difflib.get_close_matches(kind, list(KINDS), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise RegistryError(f"unknown component kind '{kind}'{hint}")
        return self._by_kind[kind]


@lru_cache(maxsize=1)
def get_registry() -> Registry:
    """The registry of installed plugins (cached; build ``Registry(get_plugin_manager(...))`` for custom sets)."""
    return Registry(get_plugin_manager())
