"""The README and the docs site, as a reader meets them.

* Every fenced code block of ``README.md`` and ``docs/*.md`` either runs here or is preceded by the
  line ``<!-- not run -->``. Python blocks of one page run in order in one namespace, like a reader
  pasting them into one session; a block whose first line names a file (``# my_pkg/lucky.py``) is
  that file, loaded as the module ``my_pkg.lucky``, and a file named ``test_*.py`` has its
  ``test_*`` functions called. Bash blocks run with ``bash -e`` in a scratch directory that holds
  ``.venv`` and ``benchmarks`` of this checkout.
* ``mkdocs build --strict`` builds the site: a broken link, a renamed symbol in a
  ``::: sketchwm.…`` reference or a page missing from the nav fails here, not in the reader's hands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "<!-- not run -->"
RUNNABLE = {"python", "bash"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
FILE_LINE = re.compile(r"#\s*(?P<path>[\w./-]+\.py)\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    run: bool

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` with their language and whether they are marked not run."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang"), m.group("body"), before != NOT_RUN))
    return out


def test_every_code_block_runs_or_says_it_does_not():
    """A block in a language this file cannot run must carry ``<!-- not run -->``."""
    bad = [f"{b.where()} ({b.lang or 'no language'})" for p in PAGES for b in blocks(p) if b.run and b.lang not in RUNNABLE]
    assert not bad, f"code blocks that no test runs and that are not marked '{NOT_RUN}': {bad}"
    assert any(b.run for b in blocks(ROOT / "README.md")), "the README's examples are not run"


def _load_file_block(block: Block, path: str) -> types.ModuleType:
    """Load ``block`` as the module of file ``path`` (``my_pkg/lucky.py`` → ``my_pkg.lucky``)."""
    parts = Path(path).with_suffix("").parts
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            sys.modules[pkg] = types.ModuleType(pkg)
            sys.modules[pkg].__path__ = []  # a namespace for the page's files
    name = ".".join(parts)
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    if len(parts) > 1:
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], mod)
    exec(compile(block.body, f"{block.where()}:{path}", "exec"), mod.__dict__)  # noqa: S102
    if Path(path).name.startswith("test_"):
        for fname, fn in list(mod.__dict__.items()):
            if fname.startswith("test_") and callable(fn):
                fn()
    return mod


def run_page(page: Path, workdir: Path) -> dict:
    """Run the page's blocks in order; return the namespace of its plain Python blocks."""
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    (workdir / ".venv").symlink_to(Path(sys.prefix))  # the venv running the tests
    (workdir / "benchmarks").symlink_to(ROOT / "benchmarks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks"),
                                                                      os.environ.get("PYTHONPATH", "")]))}
    for block in blocks(page):
        if not block.run:
            continue
        if block.lang == "bash":
            proc = subprocess.run(["bash", "-e", "-c", block.body], cwd=workdir, env=env, capture_output=True, text=True)
            assert proc.returncode == 0, f"{block.where()} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            continue
        first = block.body.lstrip().split("\n", 1)[0]
        file = FILE_LINE.fullmatch(first.strip())
        if file:
            _load_file_block(block, file.group("path"))
        else:
            exec(compile(block.body, block.where(), "exec"), namespace)  # noqa: S102
    return namespace


@pytest.fixture
def page_env(tmp_path, monkeypatch):
    """A scratch working directory, the page's ``my_pkg`` modules removed afterwards, and a fixed key
    in place of :meth:`WatermarkKey.generate` (the examples' verdicts are then deterministic)."""
    from sketchwm.keys import WatermarkKey

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(WatermarkKey, "generate", classmethod(lambda cls: cls(b"docs-example-key-000000000000001")))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name == "my_pkg" or name.startswith("my_pkg."):
            del sys.modules[name]


def test_readme_jobs_run_as_written(page_env):
    """The README's three jobs: watermark and detect, a sketch plugin with its conformance tests, and a
    leaderboard from the quickstart config."""
    ns = run_page(ROOT / "README.md", page_env)
    # job 1: the two watermarked texts are flagged, the two unwatermarked ones are not
    assert ns["result"].is_watermarked.tolist() == [True, True, False, False]
    # job 2: the sketch module was loaded as my_pkg.my_sketch and its conformance tests ran
    assert hasattr(sys.modules["my_pkg.my_sketch"], "DenseGaussianSketch")
    # job 3: the leaderboard was written where the README says
    board = page_env / "runs" / "quickstart" / "board"
    assert (board / "leaderboard.md").read_text(encoding="utf-8").startswith("## Leaderboard")
    assert (board / "index.html").is_file()


DOC_PAGES = [p for p in PAGES[1:] if any(b.run for b in blocks(p))]


@pytest.mark.parametrize("page", DOC_PAGES, ids=[p.name for p in DOC_PAGES])
def test_docs_pages_run_as_written(page, page_env):
    run_page(page, page_env)


def test_mkdocs_build_strict(tmp_path):
    """The site builds with warnings as errors (mkdocs and mkdocstrings come with the ``docs`` extra,
    which ``.ci/setup`` installs)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks"),
                                                                      os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
