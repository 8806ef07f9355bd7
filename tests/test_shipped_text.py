"""The shipped text speaks of the product: no internal milestones, work sessions, tracker issues or commit
hashes in the README, the docs, the packages' docstrings and comments, or the benchmark configs.

Generated outputs keep their provenance (a results folder or a published section names the commit that
produced it); those are excluded here, hand-written text is not."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: hand-written shipped text: files and folders, searched for these suffixes
SHIPPED = ["README.md", "CHANGELOG.md", "docs", "sketchwm", "plugins", "attacks", "benchmarks"]
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".c", ".txt", ".cfg"}
#: generated outputs: results tables, boards and their pages carry the commit that wrote them
GENERATED = ["benchmarks/leaderboard", "benchmarks/results", "benchmarks/stealing"]
#: a published section of a page, written by ``sketchwm bench publish`` or ``sketchwm leaderboard --readme``
#: with its provenance
PUBLISHED = re.compile(r"<!-- (sketchwm-bench:[\w.-]+|sketchwm-leaderboard):start -->.*?<!-- \1:end -->", re.S)

#: internal milestones and bookkeeping a reader cannot look up; ordinary English ("the stop token",
#: "N stops at 400", "a session of the server") does not match
MILESTONE = re.compile(
    r"\bstops?[ -]\d+\b"  # "stop 38", "stop-37", "stops 12"
    r"|\bthis stop\b"
    r"|\bsessions?\b(?!\s*[(=])"  # a work session (not a ``Session(...)`` object)
    r"|\bmilestones?\b"
    r"|\bissues? #?\d+\b"  # the internal tracker's numbers
    r"|\bissue notes\b"
    r"|\bmust-shows?\b",
    re.I,
)
_HASH = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}"
#: a commit hash named as such: "commit ed05b1a", "measured at 1a2b3c4", "rev 1a2b3c4d", "1a2b3c4+dirty"
COMMIT = re.compile(
    rf"\b(?:commits?|at|measured|rev|revision|on)\b[\s:=`(]+`?{_HASH}\b|\b{_HASH}\+dirty", re.I
)


def _shipped_files() -> list[Path]:
    out: list[Path] = []
    for entry in SHIPPED:
        p = ROOT / entry
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else []
        for f in files:
            rel = f.relative_to(ROOT).as_posix()
            if f.suffix not in SUFFIXES or any(rel.startswith(g + "/") for g in GENERATED):
                continue
            if "__pycache__" in f.parts or ".egg-info" in rel:
                continue
            out.append(f)
    return out


def _hits(pattern: re.Pattern[str]) -> list[str]:
    hits = []
    for f in _shipped_files():
        text = PUBLISHED.sub(lambda m: "\n" * m.group(0).count("\n"), f.read_text(encoding="utf-8", errors="replace"))
        for n, line in enumerate(text.splitlines(), 1):
            for m in pattern.finditer(line):
                hits.append(f"{f.relative_to(ROOT)}:{n}: {m.group(0)!r} in {line.strip()[:120]!r}")
    return hits


def test_the_scan_covers_the_shipped_text():
    """The scan reads the README, the docs, the packages and the benchmark configs (a moved folder fails here,
    not silently)."""
    rels = {f.relative_to(ROOT).as_posix() for f in _shipped_files()}
    for must in ("README.md", "docs/index.md", "sketchwm/api.py", "sketchwm/bench/configs/robust-green.yaml"):
        assert must in rels
    assert any(r.startswith("plugins/") for r in rels) and any(r.startswith("attacks/") for r in rels)
    assert not any(r.startswith(tuple(g + "/" for g in GENERATED)) for r in rels)


def test_the_patterns_catch_milestones_and_hashes_not_ordinary_english():
    for bad in ("since stop 38", "two channels (stop 37)", "the stop-37 table", "rerun at this stop",
                "the session ran out", "before the session's time", "split over sessions", "next milestone",
                "issue 24's must-show", "the issue notes"):
        assert MILESTONE.search(bad), bad
    for fine in ("the stop token", "N stops at what the machine generated", "one stop word after every word",
                 "stop words", "a stop_token id", "stop at 0.5"):
        assert not MILESTONE.search(fine), fine
    for bad in ("measured at commit ed05b1a", "(commit 09758bb, 2026-11-25)", "on f8e089f", "0842a3c+dirty"):
        assert COMMIT.search(bad), bad
    for fine in ("model default:cda2603f7974", "at 1000000 tokens", "sha256 of the key", "at decade 1234567"):
        assert not COMMIT.search(fine), fine


def test_no_internal_milestones_in_shipped_text():
    hits = _hits(MILESTONE)
    assert not hits, "internal milestone words in shipped text:\n" + "\n".join(hits)


def test_no_commit_hashes_in_shipped_text():
    hits = _hits(COMMIT)
    assert not hits, "commit hashes in shipped text (move measurements to a generated result):\n" + "\n".join(hits)
