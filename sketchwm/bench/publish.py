"""Published figures are written by the command that measured them.

``benchmarks/README.md`` holds, per benchmark, a section between two markers::

    <!-- sketchwm-bench:NAME:start -->
    ... the command, when and where it ran, and what it printed ...
    <!-- sketchwm-bench:NAME:end -->

:func:`run_and_publish` runs a benchmark command, echoes its output, and only when it exits 0
replaces that section with the command line, the date, the machine (CPU model, vector flags, core
count and torch build, :mod:`sketchwm.bench.machine`; load average before and after) and the output's
last lines. Nothing is written by hand between the markers, and a failed run leaves the file as it was.

**History and regressions.** A command whose last line is a JSON object with a ``"better"`` map
(figure → ``"higher"`` or ``"lower"``; dotted keys reach into nested objects) declares its headline
figures. Each published run appends one record (section, date, commit, machine, those figures) to
``history.jsonl`` beside the README, and the section shows a table of the figures over the last runs
on the same CPU (:func:`sketchwm.bench.machine.same_cpu`). A figure more than 20%
(:data:`REGRESSION`) worse than the previous run's on the same CPU is marked in the section and on
standard error; the previous figure stays in the history and in the table. ``sketchwm leaderboard --readme`` writes its own tables through
:func:`write_section` with its own markers.

Usage (the section name is free; ``--`` separates the benchmark command)::

    python benchmarks/publish.py null-per-key -- python benchmarks/null_per_key.py --n-keys 20
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from .machine import machine, machine_line, same_cpu

__all__ = ["markers", "write_section", "run_and_publish", "figures", "regressions", "DEFAULT_README", "REGRESSION"]

#: where measured results live (relative to the repository root)
DEFAULT_README = Path("benchmarks") / "README.md"
#: a figure this many times worse than the previous run's on the same CPU is marked (1.2: 20% worse)
REGRESSION = 1.2
#: runs of the same section on the same CPU shown in its history table
HISTORY_ROWS = 6


def markers(name: str) -> tuple[str, str]:
    """The start and end HTML comments of section ``name``.

    Raises:
        ValueError: ``name`` empty or holding characters other than letters, digits, ``-``, ``_``, ``.``.
    """
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"section name {name!r}: use letters, digits, '-', '_' or '.'")
    return f"<!-- sketchwm-bench:{name}:start -->", f"<!-- sketchwm-bench:{name}:end -->"


def write_section(readme: str | os.PathLike, body: str, *, name: str | None = None,
                  start: str | None = None, end: str | None = None) -> Path:
    """Replace the text between two markers of ``readme`` by ``body`` (append the block when absent).

    Args:
        readme: the Markdown file (created when missing); body: Markdown, without the markers;
        name: the section name (markers from :func:`markers`), or explicit ``start``/``end`` markers.

    Returns:
        the path written. The file is replaced atomically (a temporary file renamed over it), so an
        interrupted write leaves the old file.

    Raises:
        ValueError: neither ``name`` nor both markers given; a bad name; the end marker before the start.
    """
    if name is not None:
        start, end = markers(name)
    if not start or not end:
        raise ValueError("give a section name or both start and end markers")
    path = Path(readme)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{start}\n{body.strip(chr(10))}\n{end}"
    if start in old and end in old:
        i, j = old.index(start), old.index(end)
        if j < i:
            raise ValueError(f"{path}: {end!r} comes before {start!r}")
        new = old[:i] + block + old[j + len(end):]
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + block + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(new)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # not available on this platform
        return "n/a"


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def figures(lines: Sequence[str]) -> tuple[dict[str, float], dict[str, str]]:
    """The declared headline figures of a benchmark's output: ``({key: value}, {key: "higher"|"lower"})``.

    Read from the last line that is a JSON object holding a ``"better"`` map; keys whose value is not a
    finite number are left out. Both are empty when no such line exists.
    """
    for line in reversed(lines):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            res = json.loads(line)
        except ValueError:
            continue
        better = res.get("better") if isinstance(res, dict) else None
        if not isinstance(better, dict):
            continue
        better = {k: v for k, v in better.items() if v in ("higher", "lower")}
        vals = {k: float(v) for k in better if isinstance(v := _dig(res, k), (int, float)) and math.isfinite(v) and v > 0}
        return vals, {k: better[k] for k in vals}
    return {}, {}


def regressions(new: dict[str, float], old: dict[str, float], better: dict[str, str],
                threshold: float = REGRESSION) -> dict[str, float]:
    """The figures of ``new`` worse than ``old`` by more than ``threshold``: ``{key: factor}``, the
    factor being old/new for ``higher`` figures and new/old for ``lower`` ones (> 1 is worse)."""
    out = {}
    for k, v in new.items():
        if k in old and old[k] > 0 and v > 0:
            factor = old[k] / v if better.get(k) == "higher" else v / old[k]
            if factor > threshold:
                out[k] = round(factor, 3)
    return out


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+modified" if dirty.stdout.strip() else "")


def _history(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a hand-edited or truncated line is skipped, not fatal
            continue
    return out


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _history_block(name: str, record: dict[str, Any], past: list[dict[str, Any]], better: dict[str, str],
                   worse: dict[str, float], prev: dict[str, Any] | None) -> str:
    """The regression mark (if any) and the table of the figures over the runs on this CPU."""
    text = ""
    if worse:
        items = "; ".join(f"`{k}` {_fmt(record['figures'][k])}, {f:.2f}x worse than {_fmt(prev['figures'][k])}"
                          for k, f in worse.items())
        text += (f"**Regression on this CPU** (a figure more than {round(100 * (REGRESSION - 1))}% worse than the "
                 f"previous run's, {prev['date']} at {prev['commit']}): {items}. The previous figures are kept below "
                 f"and in `history.jsonl`.\n\n")
    rows = [r for r in past if r.get("section") == name and same_cpu(r.get("machine"), record["machine"])]
    rows = (rows + [record])[-HISTORY_ROWS:]
    keys = list(better)
    if len(rows) > 1 and keys:
        text += "Runs on this CPU (newest last; " + ", ".join(f"`{k}` {better[k]} is better" for k in keys) + "):\n\n"
        text += "| date | commit | " + " | ".join(f"`{k}`" for k in keys) + " |\n|" + "---|" * (len(keys) + 2) + "\n"
        for r in rows:
            cells = [_fmt(r["figures"][k]) if k in r.get("figures", {}) else "–" for k in keys]
            text += f"| {r['date']} | {r['commit']} | " + " | ".join(cells) + " |\n"
        text += "\n"
    return text


def run_and_publish(name: str, command: Sequence[str], *, readme: str | os.PathLike = DEFAULT_README,
                    tail: int = 40, echo: bool = True, shown: str | None = None) -> int:
    """Run ``command``; when it exits 0, write its section of ``readme``. Returns the exit code.

    The section holds the command line (as a shell would read it), the UTC date, the machine
    (:func:`~sketchwm.bench.machine.machine_line`: CPU model, vector flags, CPU count, torch build),
    the load average (1 / 5 / 15 min) before and after, the wall time in seconds, and the last ``tail``
    lines of its standard output (standard error is passed through, not published). ``shown`` is the
    command line published instead of ``command`` (e.g. ``python ...`` for an interpreter's full path).
    When the output declares figures (:func:`figures`), the run is appended to ``history.jsonl``
    beside ``readme`` and the section gains the history table and any regression mark (module docstring).

    Raises:
        ValueError: empty command or bad section name. FileNotFoundError: the program does not exist.
    """
    if not command:
        raise ValueError("no command to run")
    markers(name)  # fail on a bad name before running anything
    load0, t0 = _load(), time.perf_counter()
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, text=True, bufsize=1)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if echo:
            sys.stdout.write(line)
        lines.append(line.rstrip("\n"))
    rc = proc.wait()
    wall = time.perf_counter() - t0
    if rc != 0:
        print(f"publish: {name}: the command exited {rc}; {readme} left unchanged", file=sys.stderr)
        return rc
    kept = lines[-tail:] if tail > 0 else lines
    cut = f"(last {tail} of {len(lines)} lines)\n" if len(lines) > len(kept) else ""
    mach = machine()
    marks = ""
    vals, better = figures(lines)
    if vals:
        hist_path = Path(readme).parent / "history.jsonl"
        past = _history(hist_path)
        record = {"section": name, "date": when, "commit": _commit(), "machine": mach, "figures": vals, "better": better}
        prev = next((r for r in reversed(past) if r.get("section") == name and same_cpu(r.get("machine"), mach)), None)
        worse = regressions(vals, prev.get("figures", {}), better) if prev else {}
        for k, f in worse.items():
            print(f"publish: {name}: {k} = {_fmt(vals[k])} is {f:.2f}x worse than {_fmt(prev['figures'][k])} "
                  f"({prev['date']}, {prev['commit']}) on the same CPU; marked in {readme}", file=sys.stderr)
        marks = _history_block(name, record, past, better, worse, prev)
        with open(hist_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    body = (f"`{shown or shlex.join(command)}`\n\n"
            f"_{when}; {machine_line(mach)}; load average {load0} before, {_load()} after; "
            f"{wall:.1f} s wall_\n\n{marks}{cut}```\n" + "\n".join(kept) + "\n```")
    write_section(readme, body, name=name)
    return 0
