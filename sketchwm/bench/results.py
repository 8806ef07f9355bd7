"""The one results format: long-format Parquet, one part file per finished cell.

``DIR/parts/<cell hash>.parquet`` holds every row of one cell: a row per text (``row_type`` "text",
or "null_cal" / "null_fpr" for the unwatermarked texts of a clean cell) and a row per metric
(``row_type`` "summary": ``metric``, ``value``, ``unit``, ``higher_is_better``, ``task``, ``note``).
A part is written to a temporary name and renamed with :func:`os.replace`, so a process killed at
any moment (SIGKILL included) leaves either the whole part or none: a restart skips the cells whose
part exists, loses no finished row and duplicates none.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError

__all__ = ["part_path", "write_part", "done_cells", "read_results", "git_commit", "TIMING_COLUMNS"]

#: columns measured in wall-clock time (differ between otherwise identical runs)
TIMING_COLUMNS = ("wall_time_s",)


def part_path(out: Path, cell_hash: str) -> Path:
    """Where the part of cell ``cell_hash`` lives."""
    return Path(out) / "parts" / f"{cell_hash}.parquet"


def write_part(out: Path, cell_hash: str, rows: list[dict[str, Any]]) -> Path:
    """Write one cell's rows atomically (temp file in the same folder, fsync, ``os.replace``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    final = part_path(out, cell_hash)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    table = pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)
    pq.write_table(table, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final


def remove_stale_parts(out: Path) -> list[Path]:
    """Delete the temporary part files left by a writer that was killed mid-write.

    A part is written to ``.<hash>.parquet.<pid>.tmp`` and renamed into place; a SIGKILL between the
    two leaves the temporary file. Those whose writer process no longer exists are removed (a file
    of a live process, e.g. a concurrent run into the same folder, is left alone).

    Returns:
        the paths removed.
    """
    d = Path(out) / "parts"
    removed = []
    for tmp in d.glob(".*.parquet.*.tmp") if d.is_dir() else []:
        try:
            pid = int(tmp.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)  # raises if no such process
            alive = pid != os.getpid()
        except (ValueError, ProcessLookupError):
            alive = False
        except PermissionError:  # a live process of another user
            alive = True
        if not alive:
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def done_cells(out: Path) -> set[str]:
    """Hashes of the cells whose part file exists."""
    d = Path(out) / "parts"
    return {p.stem for p in d.glob("*.parquet")} if d.is_dir() else set()


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """All rows of a results folder (or one Parquet file), sorted by cell and row order.

    Raises:
        InputError: no results there.
    """
    p = Path(path)
    files = sorted((p / "parts").glob("*.parquet")) if p.is_dir() else [p]
    if not files or not files[0].is_file():
        raise InputError(f"no benchmark results under {p} (expected {p}/parts/*.parquet from `sketchwm bench run`)")
    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return df.sort_values(["cell_hash", "row_index"], kind="stable").reset_index(drop=True)


def git_commit(root: Path | None = None) -> str:
    """The checkout's HEAD commit (with ``+dirty`` for local changes), or "" outside git."""
    root = root or Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""
