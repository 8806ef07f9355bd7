"""Writing outputs safely: every file sketchwm writes goes through :func:`atomic_write`.

The bytes go to a temporary file in the destination's directory, are flushed and fsync'ed, and only
then renamed over the destination (``os.replace``, atomic on POSIX). An interrupted or failed write
(exception, Ctrl-C, SIGKILL) leaves the previous file untouched; at worst a stray ``.<name>.*.tmp``
file remains. A destination that is a device or a pipe (``/dev/null``, ``/dev/stdout``, a FIFO) is
written in place. :mod:`sketchwm.io` re-exports these names.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from .errors import InputError

__all__ = ["check_output_path", "atomic_write", "write_text_atomic", "write_json_atomic", "write_jsonl_atomic"]


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Check, before any work, that ``path`` can be written: its directory exists and it is not a directory.

    Raises:
        InputError: naming the path and the fix.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {p} is a directory: pass a file name")
    if _special(p):  # a device or a pipe (/dev/null, /dev/stdout, a FIFO) is written in place
        if not os.access(p, os.W_OK):
            raise InputError(f"cannot write {what} {p}: it is not writable")
        return p
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"cannot write {what} {p}: directory {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {what} {p}: directory {parent} is not writable")
    return p


def _special(p: Path) -> bool:
    """Whether ``p`` exists and is neither a regular file nor a directory (a device, FIFO or socket)."""
    try:
        return p.exists() and not p.is_file() and not p.is_dir()
    except OSError:
        return False


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, perms: int | None = None, overwrite: bool = True,
                 append: bool = False, encoding: str | None = "utf-8", newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success rename it over ``path`` (atomic), else delete it.

    A ``path`` that exists and is not a regular file (a device such as ``/dev/null`` or
    ``/dev/stdout``, a FIFO) is opened and written in place: renaming over it would replace the device
    or pipe with a regular file.

    Args:
        path: destination file; its directory must exist.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        perms: file mode of the result (e.g. 0o600 for keys); default: that of an existing file, else 0o644
            masked by the umask.
        overwrite: False refuses to replace an existing file (checked again at the rename, with a
            hard link, so two writers cannot both win).
        append: start from a copy of the existing file's content (explicit append mode; the
            destination still changes in one step).
        encoding, newline: as for :func:`open` in text mode (ignored for ``"wb"``; ``newline=""`` for csv).

    Raises:
        InputError: the directory does not exist or is not writable; ``path`` is a directory; or
            ``overwrite`` is False and ``path`` exists.
    """
    p = check_output_path(path)
    binary = "b" in mode
    if _special(p):
        with open(p, "wb" if binary else "w", **({} if binary else {"encoding": encoding, "newline": newline})) as fh:
            yield fh
        return
    if not overwrite and p.exists():
        raise InputError(f"refusing to overwrite existing file {p} (pass --force to replace it)")
    fd, tmp = tempfile.mkstemp(dir=str(p.parent), prefix=f".{p.name}.", suffix=".tmp")
    try:
        if perms is None:
            if p.exists():
                perms = p.stat().st_mode & 0o777
            else:
                umask = os.umask(0)
                os.umask(umask)
                perms = 0o666 & ~umask
        os.chmod(tmp, perms)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": encoding, "newline": newline})) as fh:
            if append and p.exists():
                fh.write(p.read_bytes() if binary else p.read_text(encoding=encoding))
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)  # fails if p appeared meanwhile: never clobber
            except FileExistsError:
                raise InputError(f"refusing to overwrite existing file {p} (pass --force to replace it)") from None
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str, **kwargs: Any) -> Path:
    """Write ``text`` to ``path`` through :func:`atomic_write`; returns the path."""
    with atomic_write(path, **kwargs) as fh:
        fh.write(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2, **kwargs: Any) -> Path:
    """Write one JSON document to ``path`` through :func:`atomic_write` (benchmark results, calibrations)."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n", **kwargs)


def write_jsonl_atomic(path: str, records: Iterable[dict[str, Any]], append: bool = False) -> None:
    """Write JSONL to ``path`` (``-`` = stdout) through :func:`atomic_write`, so an error or an interrupt
    never leaves a truncated file or clobbers an existing one half-way.

    Args:
        append: keep the existing lines and add these after them (still one atomic rename).
    """
    if path == "-":
        for r in records:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return
    with atomic_write(path, append=append) as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
