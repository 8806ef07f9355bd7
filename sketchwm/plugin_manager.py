"""The plugin manager factory: pluggy, the hookspecs and the ``sketchwm`` entry points.

:func:`get_plugin_manager` needs pluggy and :mod:`sketchwm.hookspecs` only, not the components,
so the command line can load one plugin without torch. :mod:`sketchwm.registry` builds the
component registry on it and :mod:`sketchwm.plugin_index` caches what it lists.

A plugin whose entry point fails to import is left out and reported, as llm and datasette do: one
broken third-party package must not stop the commands that do not need it (``sketchwm detect``
with a built-in scheme). It is named in ``pm.broken_plugins`` ({entry-point name: one-line
error}), in a warning, and by ``sketchwm plugins``. ``on_error="raise"`` restores the hard
failure (pytest's behaviour), for callers that must have every plugin.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

__all__ = ["ENTRY_POINT_GROUP", "get_plugin_manager", "broken_plugins"]

#: The entry-point group every plugin, built-in or third-party, registers under.
ENTRY_POINT_GROUP = "sketchwm"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"


def get_plugin_manager(entry_points: Iterable[Any] | None = None, extra_plugins: Iterable[Any] = (), *,
                       on_error: Literal["skip", "raise"] = "skip") -> Any:
    """A new :class:`pluggy.PluginManager` with the sketchwm hookspecs and plugins.

    Args:
        entry_points: objects with ``.name`` and ``.load()`` (``importlib.metadata.EntryPoint`` or
            fakes). None means the installed ``sketchwm`` entry-point group.
        extra_plugins: modules or objects to register directly (after the entry points).
        on_error: ``"skip"`` (default): an entry point that fails to load is left out, recorded in
            the manager's ``broken_plugins`` ({name: one-line error}) and reported with a
            :class:`UserWarning`; ``"raise"``: it raises.

    Raises:
        RegistryError: an entry point fails to load and ``on_error="raise"``; ``on_error`` unknown.
    """
    import warnings

    import pluggy

    from . import hookspecs
    from .errors import RegistryError

    if on_error not in ("skip", "raise"):
        raise RegistryError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.broken_plugins = {}
    if entry_points is None:
        import importlib.metadata

        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    for ep in entry_points:
        try:
            plugin = ep.load()
        except Exception as exc:  # noqa: BLE001 - report which plugin broke, keep the others
            if on_error == "raise":
                raise RegistryError(f"failed to load sketchwm plugin entry point '{ep.name}': {_one_line(exc)}") from exc
            pm.broken_plugins[ep.name] = _one_line(exc)
            warnings.warn(f"plugin '{ep.name}' failed to load and is left out: {_one_line(exc)} "
                          "(`sketchwm plugins` lists it)", stacklevel=2)
            continue
        if pm.is_registered(plugin):
            continue
        pm.register(plugin, name=ep.name)
    for plugin in extra_plugins:
        if not pm.is_registered(plugin):
            pm.register(plugin)
    return pm


def broken_plugins(pm: Any) -> dict[str, str]:
    """{entry-point name: one-line error} of the plugins ``pm`` left out ({} for a foreign manager)."""
    return dict(getattr(pm, "broken_plugins", {}) or {})
