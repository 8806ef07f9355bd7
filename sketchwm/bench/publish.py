"""Published figures are written by the command that measured them.

``benchmarks/README.md`` holds, per benchmark, a section between two markers::

    <!-- sketchwm-bench:NAME:start -->
    ... the command, when and where it ran, and what it printed ...
    <!-- sketchwm-bench:NAME:end -->

:func:`run_and_publish` runs a benchmark command, echoes its output, and only when it exits 0
replaces that section with the command line, the date, the machine (cores, load average before and
after) and the output's last lines. Nothing is written by hand between the markers, and a failed
run leaves the file as it was. ``sketchwm leaderboard --readme`` writes its own tables through
:func:`write_section` with its own markers.

Usage (the section name is free; ``--`` separates the benchmark command)::

    python benchmarks/publish.py null-per-key -- python benchmarks/null_per_key.py --n-keys 20
"""

from __future__ import annotations

import datetime as _dt
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

__all__ = ["markers", "write_section", "run_and_publish", "DEFAULT_README"]

#: where measured results live (relative to the repository root)
DEFAULT_README = Path("benchmarks") / "README.md"


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


def run_and_publish(name: str, command: Sequence[str], *, readme: str | os.PathLike = DEFAULT_README,
                    tail: int = 40, echo: bool = True, shown: str | None = None) -> int:
    """Run ``command``; when it exits 0, write its section of ``readme``. Returns the exit code.

    The section holds the command line (as a shell would read it), the UTC date, ``os.cpu_count()``,
    the load average (1 / 5 / 15 min) before and after, the wall time in seconds, and the last ``tail``
    lines of its standard output (standard error is passed through, not published). ``shown`` is the
    command line published instead of ``command`` (e.g. ``python ...`` for an interpreter's full path).

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
    body = (f"`{shown or shlex.join(command)}`\n\n"
            f"_{when}; {os.cpu_count()} CPUs; load average {load0} before, {_load()} after; "
            f"{wall:.1f} s wall_\n\n{cut}```\n" + "\n".join(kept) + "\n```")
    write_section(readme, body, name=name)
    return 0
