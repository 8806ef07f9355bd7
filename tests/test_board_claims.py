"""Every board the README and the docs point to holds what the text beside the link names.

A *board reference* is a Markdown link or a code span naming a path under ``benchmarks/leaderboard/``
(outside fenced code blocks, which hold commands). Its *claim* is the sentence that holds it. Every
scheme named in that sentence (a registered scheme name, or a label one of the committed boards
uses) and every decoding regime named there must be on the board the path belongs to (the folder
with the ``results.parquet`` nearest above it):

* a label is on the board when a curve of its ``results.parquet`` has that label;
* a registered scheme name is on the board when a curve has that label, or when a curve of that
  scheme ran the scheme as shipped under another label: its rows record the scheme's current
  ``version`` and resolved params equal to the current defaults up to the strength knob that the
  curve sweeps. Rows written before cells carried versions and resolved params cannot show that:
  a board of an older setting of a scheme does not back a claim about the scheme as shipped;
* a regime is on the board when its rows have that regime.

The linked file must exist too. The README is checked by the same rule (one test per page).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOARDS = ROOT / "benchmarks" / "leaderboard"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^ *```.*?^ *```[ \t]*$", re.S | re.M)
REF = re.compile(r"\]\((?P<link>[^)\s]*benchmarks/leaderboard[^)\s]*)\)|`(?P<code>[^`\s]*benchmarks/leaderboard[^`\s]*)`")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*_`\[])")


@lru_cache(maxsize=None)
def board(path: Path) -> pd.DataFrame:
    """The curves and regimes of the board at ``path`` (one row per curve, regime and params)."""
    import pyarrow.parquet as pq

    f = path / "results.parquet"
    have = set(pq.read_schema(f).names)
    cols = ["curve", "scheme_name", "regime", "scheme_version", "scheme_params_resolved"]
    df = pd.read_parquet(f, columns=[c for c in cols if c in have])
    for c in cols[3:]:
        if c not in df:
            df[c] = None
    return df.drop_duplicates().reset_index(drop=True)


def board_of(target: Path) -> Path | None:
    """The board folder (holding ``results.parquet``) that ``target`` lies in, or None."""
    for d in [target, *target.parents] if target.is_dir() else list(target.parents):
        if (d / "results.parquet").is_file():
            return d
        if d == BOARDS:
            return None
    return None


@lru_cache(maxsize=None)
def vocabulary() -> tuple[dict[str, type], set[str], set[str]]:
    """(registered schemes by name, every curve label of the committed boards, every regime name)."""
    from sketchwm.bench.config import REGIMES
    from sketchwm.bench.runner import bench_registry

    reg = bench_registry()
    schemes = {n: reg.get("scheme", n) for n in reg.names("scheme")}
    labels, regimes = set(), set(REGIMES)
    for p in BOARDS.rglob("results.parquet"):
        b = board(p.parent)
        labels |= set(b["curve"])
        regimes |= set(b["regime"]) - {"default"}
    return schemes, labels, regimes


def _without_knob(cls: type, params: dict) -> dict:
    """``params`` resolved by ``cls`` (every default filled in), its strength knob removed."""
    out = cls.parse_params(params).model_dump(mode="json")
    field = cls.strength.field
    if field:
        *path, leaf = field.split(".")
        node = out
        for part in path:
            node = node.get(part, {})
        node.pop(leaf, None)
    return out


def runs_defaults(cls: type, rows: pd.DataFrame) -> bool:
    """Whether some curve of ``rows`` (a board's rows of scheme ``cls``) ran the scheme as shipped:
    its current version, and resolved params equal to the current defaults (the knob aside)."""
    want = _without_knob(cls, {})
    rows = rows[rows["scheme_version"].astype(str) == str(cls.version)]
    for raw in rows["scheme_params_resolved"].dropna().unique():
        try:
            if _without_knob(cls, json.loads(raw)) == want:
                return True
        except Exception:  # noqa: BLE001 - params the current Params model refuses
            continue
    return False


def on_board(name: str, b: pd.DataFrame) -> bool:
    """Whether the scheme label, registered scheme or regime ``name`` is on board ``b`` (module doc)."""
    schemes, _, regimes = vocabulary()
    if name in regimes and name not in schemes:
        return name in set(b["regime"])
    if name in set(b["curve"]):
        return True
    return name in schemes and runs_defaults(schemes[name], b[b["scheme_name"] == name])


def claims(page: Path) -> list[tuple[str, Path, list[str]]]:
    """(the sentence, the path it references, the scheme and regime names in it) of each board reference."""
    schemes, labels, regimes = vocabulary()
    names = sorted(set(schemes) | labels | regimes, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    out = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        for sentence in SENTENCE_END.split(para):
            for m in REF.finditer(sentence):
                ref = m.group("link") or m.group("code")
                target = (page.parent / ref).resolve() if m.group("link") else (ROOT / ref).resolve()
                named = list(dict.fromkeys(pattern.findall(REF.sub(" ", sentence))))
                out.append((sentence, target, named))
    return out


def _shown(p: Path) -> str:
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def problems(page: Path) -> list[str]:
    """One line per board reference of ``page`` that points nowhere or names what its board lacks."""
    out = []
    for sentence, target, named in claims(page):
        where = f"{_shown(page)}: {_shown(target)}"
        if not target.exists():
            out.append(f"{where}: the linked file does not exist")
            continue
        d = board_of(target)
        if d is None:
            continue  # a folder of boards, or a file beside them (a config, a script's output)
        missing = [n for n in named if not on_board(n, board(d))]
        if missing:
            out.append(f"{where}: names {', '.join(missing)}, which the board "
                       f"({', '.join(sorted(set(board(d)['curve'])))}) lacks, in: {sentence[:300]}")
    return out


#: pages known to name what their boards lack, with what they name: the mark goes when the page is fixed
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.xfail(reason=KNOWN[p.name], strict=True))
                                  if p.name in KNOWN else p for p in PAGES], ids=[p.name for p in PAGES])
def test_every_board_reference_names_what_the_board_holds(page):
    bad = problems(page)
    assert not bad, "board references whose board lacks what they name:\n" + "\n".join(bad)


def test_the_check_finds_a_missing_scheme_and_a_missing_board(tmp_path):
    """Naming a scheme the linked board lacks, or linking a board that does not exist, is reported;
    naming a scheme of the board is not."""
    board_md = ROOT / "benchmarks" / "leaderboard" / "stealing" / "leaderboard.md"
    page = tmp_path / "page.md"
    page.write_text(f"The board holds `kgw-naive` ([board]({board_md})).\n\n"
                    f"The board holds `dgmark` ([board]({board_md})).\n\n"
                    f"See `{board_md.parent.parent / 'no-such-board'}`.\n")
    out = problems(page)
    assert len(out) == 2 and "names dgmark" in out[0] and "does not exist" in out[1]
