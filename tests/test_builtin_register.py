"""The built-in schemes and the ``sketchwm prior`` command register through one module that only
registers (``sketchwm_builtin.register``, entry point ``builtin-schemes``), like datasette's list of
default plugins: it defines hooks and nothing else, and loading it imports no scheme."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pluggy

import sketchwm_builtin.register as register
from sketchwm.components import Component
from sketchwm.hookspecs import PROJECT
from sketchwm.registry import get_registry


def test_the_entry_point_names_the_register_module():
    eps = {e.name: e.value for e in importlib.metadata.entry_points(group="sketchwm")}
    assert eps["builtin-schemes"] == "sketchwm_builtin.register"


def test_the_register_module_defines_hooks_only():
    marker = pluggy.HookimplMarker(PROJECT)
    public = {n: getattr(register, n) for n in dir(register) if n.startswith("sketchwm_")}
    assert set(public) == set(register.__all__)
    for name, fn in public.items():
        assert getattr(fn, marker.project_name + "_impl", None) is not None, f"{name} is not a hook implementation"
    held = [n for n, v in vars(register).items() if isinstance(v, type) and issubclass(v, Component)]
    assert not held, f"the register module holds components: {held}"


def test_every_listed_scheme_is_registered_under_its_name():
    listed = register.sketchwm_register_schemes()
    reg = get_registry()
    assert listed, "no built-in scheme listed"
    for cls in listed:
        assert reg.get("scheme", cls.name) is cls


def test_loading_the_register_module_imports_no_scheme():
    """The hooks import what they list when called: loading the plugin (``sketchwm prior``) stays cheap."""
    code = ("import sys, sketchwm_builtin.register; "
            "print(sorted(m for m in sys.modules if m.startswith('sketchwm_builtin.') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['sketchwm_builtin.register']", out
