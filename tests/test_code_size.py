"""Contracts that fit on a screen: no module of the shipped code (``sketchwm/``, ``plugins/``,
``attacks/``) over 700 lines, no class over 250.

A class's size is from its ``class`` line to its last line (docstring and methods included); a
module's is its line count. The test prints the largest of each, so the margin is visible.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 250
#: the directories of shipped code: the core, the plugins (built-ins and baselines) and the attacks
SHIPPED = ("sketchwm", "plugins", "attacks")


def sizes(dirs: tuple[str, ...] = SHIPPED) -> tuple[dict[str, int], dict[str, int]]:
    """({module path: lines}, {"path:Class": lines}) of every ``.py`` file under ``dirs`` (relative to the root)."""
    modules, classes = {}, {}
    for path in sorted(p for d in dirs for p in (ROOT / d).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(ROOT))
        modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, ast.ClassDef):
                classes[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return modules, classes


def test_every_shipped_directory_is_measured():
    modules, _ = sizes()
    for d in SHIPPED:
        assert any(m.startswith(f"{d}/") for m in modules), f"no module measured under {d}/"


def test_modules_and_classes_fit_on_a_screen():
    modules, classes = sizes()
    for label, table in (("modules", modules), ("classes", classes)):
        print(f"largest {label}:", ", ".join(f"{k} {v}" for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:3]))
    big_modules = {k: v for k, v in modules.items() if v > MAX_MODULE_LINES}
    big_classes = {k: v for k, v in classes.items() if v > MAX_CLASS_LINES}
    assert not big_modules, f"modules over {MAX_MODULE_LINES} lines: {big_modules}"
    assert not big_classes, f"classes over {MAX_CLASS_LINES} lines: {big_classes}"


def test_the_default_scheme_reads_in_a_screen():
    """The default's definition, its params and its scheme class (channels and combination rule), is at most
    60 lines of code, docstrings, comments and blank lines left out."""
    from sketchwm.config import DEFAULT_SCHEME
    from sketchwm.registry import get_registry

    cls = get_registry().get("scheme", DEFAULT_SCHEME)
    path = Path(sys.modules[cls.__module__].__file__)
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines()
    total = 0
    for node in ast.parse(src).body:
        if isinstance(node, ast.ClassDef) and node.name in (cls.__name__, cls.Params.__name__):
            doc = set()
            for sub in ast.walk(node):
                if isinstance(sub, (ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(sub) is not None:
                    doc.update(range(sub.body[0].lineno, sub.body[0].end_lineno + 1))
            total += sum(1 for i in range(node.lineno, node.end_lineno + 1)
                         if i not in doc and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))
    assert 0 < total <= 60, f"{DEFAULT_SCHEME}'s params and scheme class are {total} lines of code"
