"""The built-in watermark schemes and the ``sketchwm prior`` command, registered like third-party plugins.

This module only registers: the entry point ``builtin-schemes`` of the ``sketchwm`` group names it,
and each hook imports the classes it lists when the registry asks for them, so ``sketchwm prior``
loads the command alone. The other built-in kinds register through their own modules' hooks
(``count_sketch``, ``scores``, ``backends``, ``remasking``).
"""

from __future__ import annotations

from typing import Any

from sketchwm.hookspecs import hookimpl

__all__ = ["sketchwm_register_schemes", "sketchwm_register_commands"]


@hookimpl
def sketchwm_register_schemes() -> list[type]:
    """The built-in schemes: the global sketch watermark, its key-family defence against stealing, its
    combination with a context-keyed green channel (and optional keyed sampling), and the key family of
    any scheme."""
    from .family import KeyedFamilyScheme
    from .global_sketch import GlobalSketchScheme
    from .key_family import GlobalSketchFamilyScheme
    from .sketch_green import SketchGreenScheme

    return [GlobalSketchScheme, GlobalSketchFamilyScheme, SketchGreenScheme, KeyedFamilyScheme]


@hookimpl
def sketchwm_register_commands(subparsers: Any, parents: Any) -> None:
    """Add ``sketchwm prior`` (:mod:`sketchwm_builtin.cli`)."""
    from .cli import add_prior_command

    add_prior_command(subparsers, parents)
