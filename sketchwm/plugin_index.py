"""``sketchwm plugins`` without importing the plugins: a cached description of the registry.

Listing names and one-line summaries needs every plugin module imported (they define the
classes), and those import torch, scipy and pydantic: seconds of start-up for a table of names.
:func:`describe_plugins` keeps the last listing in a small JSON file, keyed by a fingerprint of
everything that could change it: the sketchwm version, the ``sketchwm`` entry points (name, target,
distribution and its version) and the size and modification time of every ``.py`` file of each
entry point's top-level package (found with ``importlib.util.find_spec``, which does not import
it). Any change misses the cache and rebuilds it from the real registry; nothing stale is shown.

The plugins' sub-commands (hook ``sketchwm_register_commands``) are listed the same way by
:func:`describe_commands` (name, one-line help, providing entry point), so ``sketchwm --help`` shows
them and ``sketchwm NAME`` imports only the plugin that adds NAME (:func:`add_plugin_commands`). That
listing is read on every ``--help``, so its key is cheaper than :func:`plugins_fingerprint` (which
reads every installed distribution's metadata): the sketchwm version, ``sys.path`` and the
modification time of each of its directories (installing or removing a distribution changes its
directory), and the size and modification time of the plugin packages' files recorded in it.

The plugin manager itself comes from :mod:`sketchwm.plugin_manager` (re-exported here).

Cache directory: ``$SKETCHWM_CACHE_DIR``, else ``$XDG_CACHE_HOME/sketchwm``, else
``~/.cache/sketchwm``. A cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

__all__ = ["describe_plugins", "plugins_fingerprint", "cache_dir", "get_plugin_manager", "describe_commands",
           "add_plugin_commands"]

from .plugin_manager import ENTRY_POINT_GROUP, broken_plugins, get_plugin_manager


def cache_dir() -> Path:
    """The directory of sketchwm's caches (see module doc); may not exist yet."""
    if os.environ.get("SKETCHWM_CACHE_DIR"):
        return Path(os.environ["SKETCHWM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sketchwm"


def _package_files(module: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of the ``.py`` files of ``module``'s top-level package (not imported)."""
    import importlib.util

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

    import importlib.metadata

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

    A plugin that fails to load is listed under ``"broken"`` (name and one-line error) instead of
    its components; such a listing is not cached (a missing dependency installed later would not
    change the fingerprint).

    Raises:
        RegistryError: a plugin registers a bad class or a name twice (never cached).
    """
    fp = plugins_fingerprint()
    path = cache_dir() / f"plugins-{fp}.json"
    if use_cache:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    import warnings

    from .registry import get_registry

    with warnings.catch_warnings():  # the listing names broken plugins itself
        warnings.filterwarnings("ignore", message="plugin '.*' failed to load")
        desc = get_registry().describe()
    if "broken" not in desc:
        _write_cache(path, desc)
    return desc


def _write_cache(path: Path, data: Any) -> None:
    """Write one cached listing atomically, keeping the 15 newest of its prefix (several checkouts may
    share the cache); a cache that cannot be written is only slower."""
    try:
        from .io import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        prefix = path.name.split("-")[0]
        olds = sorted(path.parent.glob(f"{prefix}-*.json"), key=lambda q: q.stat().st_mtime)
        for old in olds[:-15]:
            old.unlink(missing_ok=True)
        write_json_atomic(path, data)
    except Exception:  # noqa: BLE001
        pass


# ---------------------------------------------------------------- plugin sub-commands
COMMAND_HOOK = "sketchwm_register_commands"


def _paths_key() -> str:
    """24 hex of the sketchwm version, ``sys.path`` and its directories' modification times (not the
    working directory's: writing an output there must not invalidate the listing)."""
    from . import __version__

    try:
        cwd = os.getcwd()
    except OSError:  # a removed working directory
        cwd = ""
    parts: list[Any] = [__version__]
    for entry in sys.path:
        path = os.path.abspath(entry or ".")
        if path == cwd:
            continue
        try:
            parts.append((path, os.stat(path).st_mtime_ns))
        except OSError:
            parts.append((path, None))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def _files_unchanged(files: Sequence[Sequence[Any]]) -> bool:
    for path, size, mtime in files:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime:
            return False
    return True


def _call_command_hooks(pm: Any, subparsers: Any, parents: Sequence[Any]) -> dict[str, str]:
    """Call every plugin's ``sketchwm_register_commands`` on ``subparsers``, one plugin at a time, and
    return {command: providing plugin's name}.

    Raises:
        RegistryError: a plugin adds a command whose name is already taken.
    """
    import argparse

    from .errors import RegistryError

    added: dict[str, str] = {}
    plugins = [(pm.get_name(impl.plugin), impl.plugin) for impl in getattr(pm.hook, COMMAND_HOOK).get_hookimpls()]
    for name, plugin in plugins:  # registration order, so `sketchwm --help` lists commands in it
        before = set(subparsers.choices)
        others = [p for _, p in plugins if p is not plugin]
        try:
            pm.subset_hook_caller(COMMAND_HOOK, remove_plugins=others)(subparsers=subparsers, parents=list(parents))
        except argparse.ArgumentError as exc:
            raise RegistryError(f"sketchwm plugin '{name}' adds a sub-command whose name is taken: {exc}") from None
        for cmd in set(subparsers.choices) - before:
            added[cmd] = name
    return added


def describe_commands(use_cache: bool = True) -> dict[str, dict[str, str]]:
    """The plugins' sub-commands: ``{name: {"help": one line, "plugin": entry-point name, "target": its
    module}}``, from the cache when valid (see module doc); a miss imports every plugin once.

    Raises:
        RegistryError: a plugin fails to load or adds a name already taken (never cached).
    """
    path = cache_dir() / f"commands-{_paths_key()}.json"
    if use_cache:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if _files_unchanged(data["files"]):
                return data["commands"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    import argparse

    import importlib.metadata

    eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    pm = get_plugin_manager(eps)
    targets = {ep.name: ep.value for ep in eps}
    sub = argparse.ArgumentParser(add_help=False).add_subparsers()
    for core in CORE_COMMANDS:  # a plugin may not take a core command's name
        sub.add_parser(core, add_help=False)
    owner = _call_command_hooks(pm, sub, [])
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    commands = {c: {"help": helps.get(c, ""), "plugin": owner[c], "target": targets[owner[c]]} for c in sorted(owner)}
    tops = {"sketchwm"} | {m.split(".")[0] for m in (getattr(p, "__name__", "") for p in pm.get_plugins()) if m}
    files = [f for top in sorted(tops) for f in _package_files(top) if f[1] >= 0]
    if not broken_plugins(pm):  # a plugin fixed later (a dependency installed) must be listed then
        _write_cache(path, {"files": files, "commands": commands})
    return commands


#: The sub-commands of :mod:`sketchwm.cli` itself; a plugin command may not reuse these names.
CORE_COMMANDS: tuple[str, ...] = ("keygen", "generate", "detect", "calibrate", "plugins", "demo")


def add_plugin_commands(subparsers: Any, parents: Sequence[Any], command: str | None, all_commands: bool = False,
                        plugins: Sequence[Any] = ()) -> None:
    """Add the plugins' sub-commands to the ``sketchwm`` parser.

    The plugin providing ``command`` (the sub-command about to run) is imported and adds its real
    parsers; every other listed command gets a help-only entry (shown by ``sketchwm --help``), so
    nothing else is imported. ``all_commands`` imports every command plugin (the full parser, for
    documentation and tests). ``plugins`` (modules or objects implementing the hook) are registered
    directly and always add their commands.

    Raises:
        RegistryError: a plugin fails to load, or adds a name already taken.
    """
    listing = describe_commands() if all_commands or command not in CORE_COMMANDS else {}
    wanted = set(listing) if all_commands else {command} & set(listing)
    # the listing records each entry point's target: load it without reading every distribution's metadata
    eps = list({listing[c]["plugin"]: _ListedEntryPoint(listing[c]["plugin"], listing[c]["target"])
                for c in sorted(wanted)}.values())
    if eps or plugins:
        _call_command_hooks(get_plugin_manager(eps, extra_plugins=plugins), subparsers, parents)
    for name, info in listing.items():
        if name not in subparsers.choices:  # listed only: help text, no import
            subparsers.add_parser(name, help=info["help"], add_help=False).set_defaults(func=_unloaded(name, info))


class _ListedEntryPoint:
    """An entry point as the commands listing recorded it: ``name`` and ``target`` (``module`` or
    ``module:attr``), loaded like :meth:`importlib.metadata.EntryPoint.load`."""

    def __init__(self, name: str, target: str):
        self.name, self.target = name, target

    def load(self) -> Any:
        import importlib

        module, _, attr = self.target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        return obj


def _unloaded(name: str, info: dict[str, str]) -> Any:
    def run(args: Any) -> int:
        from .errors import RegistryError

        raise RegistryError(f"sub-command '{name}' is listed for plugin '{info['plugin']}', which did not add it: "
                            "run `sketchwm plugins --no-cache` after changing plugins")
    return run
