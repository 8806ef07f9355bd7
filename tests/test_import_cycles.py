"""No import cycle in the shipped code (``sketchwm/``, ``plugins/``, ``attacks/``) or the benchmark
scripts (``benchmarks/``), lazy imports included.

The graph is read from the source with :mod:`ast`: every ``import`` and ``from … import`` anywhere
in a module (at the top, inside a function, under ``if TYPE_CHECKING``) is an edge from that module
to the module it names (``from . import x`` names ``pkg.x`` when that is a module, else the
package). Importing ``__version__`` from the package is not an edge: it is a constant, not a
dependency on the package's contents. A benchmark script's flat import of a sibling script
(``from _perf import …``, as run with ``python benchmarks/x.py``) is an edge to that script. The
test prints every cycle (strongly connected component) it finds, with the edges inside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (directory whose sub-paths are import names, top-level names under it): the shipped packages,
#: the plugins and attacks (installed from ``plugins/`` and ``attacks/``) and the benchmark scripts
SOURCES: tuple[tuple[Path, tuple[str, ...]], ...] = (
    (ROOT, ("sketchwm", "benchmarks")),
    (ROOT / "plugins", ("sketchwm_builtin", "sketchwm_baselines")),
    (ROOT / "attacks", ("sketchwm_attacks",)),
)
SCRIPTS = "benchmarks"  # run as scripts: their directory is on sys.path, so siblings import by flat name


def _modules(sources) -> tuple[dict[str, tuple[Path, bool]], set[str]]:
    """({module: (path, is_package)}, C extension modules) of the ``.py`` and ``.c`` files of ``sources``."""
    modules: dict[str, tuple[Path, bool]] = {}
    leaves: set[str] = set()
    for base, tops in sources:
        for top in tops:
            for path in sorted((base / top).rglob("*.py")):
                parts = list(path.relative_to(base).with_suffix("").parts)
                is_pkg = parts[-1] == "__init__"
                modules[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
            # C extension modules (``sketchwm/_fastids.c`` → ``sketchwm._fastids``) import nothing of
            # ours: leaves of the graph, so importing one is not read as importing its package
            leaves |= {".".join(p.relative_to(base).with_suffix("").parts) for p in (base / top).rglob("*.c")}
    return modules, leaves


def import_graph(sources=SOURCES) -> dict[str, set[str]]:
    """{module: our modules it imports}, from the source files of ``sources`` (see module doc)."""
    modules, leaves = _modules(sources)
    tops = {m.split(".")[0] for m in modules}

    def resolve(name: str, importer: str) -> str | None:
        if name in leaves:
            return None
        if importer.split(".")[0] == SCRIPTS and name.split(".")[0] not in tops:
            name = f"{SCRIPTS}.{name}"  # a flat import of a sibling script
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, (path, is_pkg) in modules.items():
        here = mod.split(".") if is_pkg else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                names = [a.name for a in node.names if a.name != "__version__"]
                targets = [f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names]
            for t in targets:
                dep = resolve(t, mod)
                if dep is not None and dep != mod:
                    graph[mod].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_imports():
    """The graph is not blind: function-level, relative, cross-package and flat script imports are edges."""
    graph = import_graph()
    assert "sketchwm.api" in graph["sketchwm"]              # inside __getattr__
    assert "sketchwm.engine" in graph["sketchwm.api"]       # module level, relative
    assert "sketchwm.bench.runner" in graph["sketchwm.bench.cli"]   # inside a command handler
    assert "sketchwm_builtin.global_sketch" in graph["sketchwm_builtin.register"]   # inside a hook
    assert "sketchwm_builtin.global_sketch.embed" in graph["sketchwm_builtin.global_sketch.scheme"]  # from . import
    assert "sketchwm_builtin.backends.hf_masked_lm" in graph["sketchwm.testing.tiny"]  # another source root
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_reads_flat_script_imports(tmp_path):
    """``from _perf import x`` in a benchmark script is an edge to the sibling script."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "_perf.py").write_text("import a_script\n", encoding="utf-8")
    (tmp_path / "benchmarks" / "a_script.py").write_text("def f():\n    from _perf import x\n", encoding="utf-8")
    graph = import_graph(((tmp_path, ("benchmarks",)),))
    assert graph == {"benchmarks._perf": {"benchmarks.a_script"}, "benchmarks.a_script": {"benchmarks._perf"}}
    assert cycles(graph) == [["benchmarks._perf", "benchmarks.a_script"]]


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    for comp in found:
        print("import cycle:", " <-> ".join(comp))
        for m in comp:
            print(f"    {m} -> {', '.join(sorted(graph[m] & set(comp)))}")
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} import edges, {len(found)} cycles")
    assert not found, f"import cycles: {found}"
