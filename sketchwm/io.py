"""Reading inputs and writing outputs for the CLI, safely (atomic writes; clear errors).

Every file sketchwm writes goes through :func:`atomic_write`: the bytes go to a temporary file in
the destination's directory, are flushed and fsync'ed, and only then renamed over the destination
(``os.replace``, atomic on POSIX). An interrupted or failed write (exception, Ctrl-C, SIGKILL)
leaves the previous file untouched; at worst a stray ``.<name>.*.tmp`` file remains.
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

__all__ = [
    "read_texts", "read_records", "iter_record_chunks", "read_lines", "write_jsonl_atomic", "write_json_atomic", "write_text_atomic",
    "atomic_write", "read_json_arg", "check_output_path",
]


def _input_file(path: str) -> Path:
    """``path`` as an existing file.

    Raises:
        InputError: missing path, or a directory.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"input file not found: {p}")
    if p.is_dir():
        raise InputError(f"input {p} is a directory: pass a file (plain text or JSONL)")
    return p


def _read_source(path: str) -> str:
    """The UTF-8 text of a file, or of stdin for ``-``.

    Raises:
        InputError: missing path, a directory, unreadable file, or bytes that are not UTF-8.
    """
    if path == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        if isinstance(data, str):
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"standard input is not UTF-8 text (byte {exc.start}): convert it first, "
                             "e.g. with iconv -t UTF-8") from None
    p = _input_file(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"input file {p} is not UTF-8 text (byte {exc.start}): convert it first, "
                         "e.g. with iconv -t UTF-8") from None
    except OSError as exc:
        raise InputError(f"cannot read input file {p}: {exc.strerror or exc}") from None


def read_records(path: str) -> list[dict[str, Any]]:
    """Read JSONL records (each with a ``text`` field) or plain text (the whole input is one text).

    Args:
        path: a file path or ``-`` for stdin.

    Raises:
        InputError: missing file, empty input, a JSONL line that is not an object with a string ``text``.
    """
    raw = _read_source(path)
    if not raw.strip():
        raise InputError(f"input {path!r} is empty")
    lines = [ln for ln in raw.splitlines() if ln.strip()]
    if lines and lines[0].lstrip().startswith("{"):
        return _parse_jsonl(lines, path, ("text",))
    return [{"text": raw.strip()}]


def _parse_jsonl(lines: list[str], path: str, fields: tuple[str, ...], numbers: list[int] | None = None) -> list[dict[str, Any]]:
    """Parse JSONL lines; each must be an object with a string value in one of ``fields``
    (``numbers``: each line's number in the input, for error messages; default 1, 2, ...).

    Raises:
        InputError: naming the line that is not JSON or lacks the field.
    """
    out = []
    for i, ln in zip(numbers or range(1, len(lines) + 1), lines):
        try:
            rec = json.loads(ln)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = getattr(exc, "msg", "nested too deeply")
            raise InputError(f"{path}: line {i} is not valid JSON ({msg}); is the file truncated?") from None
        if not isinstance(rec, dict) or not any(isinstance(rec.get(f), str) for f in fields):
            raise InputError(f"{path}: line {i} has no string field {' or '.join(repr(f) for f in fields)}")
        out.append(rec)
    return out


def iter_record_chunks(path: str, chunk: int = 4096) -> Iterator[list[dict[str, Any]]]:
    """:func:`read_records` in chunks of at most ``chunk`` records, reading the input line by line, so
    a JSONL input of any size is processed in bounded memory. A plain-text input (first non-empty
    line not a JSON object) is one record, read whole.

    Raises:
        InputError: as :func:`read_records` (JSONL errors name the line number in the whole input).
    """
    import io as _io

    if path == "-":
        raw = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
        fh = _io.TextIOWrapper(raw, encoding="utf-8") if raw is not None else sys.stdin
        where = "standard input"
    else:
        p = _input_file(path)
        try:
            fh = open(p, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read input file {p}: {exc.strerror or exc}") from None
        where = f"input file {p}"
    try:
        lines: list[str] = []
        numbers: list[int] = []
        line_no, jsonl = 0, None
        try:
            for raw_line in fh:
                line_no += 1
                if not raw_line.strip():
                    continue
                if jsonl is None:
                    jsonl = raw_line.lstrip().startswith("{")
                    if not jsonl:  # plain text: the whole input is one text
                        rest = raw_line + fh.read()
                        yield [{"text": rest.strip()}]
                        return
                lines.append(raw_line)
                numbers.append(line_no)
                if len(lines) == chunk:
                    yield _parse_jsonl(lines, path, ("text",), numbers)
                    lines, numbers = [], []
        except UnicodeDecodeError as exc:
            raise InputError(f"{where} is not UTF-8 text (near line {line_no + 1}, byte {exc.start} of it): convert it "
                             "first, e.g. with iconv -t UTF-8") from None
        except OSError as exc:
            raise InputError(f"cannot read {where}: {exc.strerror or exc}") from None
        if jsonl is None:
            raise InputError(f"input {path!r} is empty")
        if lines:
            yield _parse_jsonl(lines, path, ("text",), numbers)
    finally:
        if path == "-":
            if fh is not sys.stdin:
                fh.detach()  # leave the process's stdin open
        else:
            fh.close()


def read_texts(path: str) -> list[str]:
    """The ``text`` of each record of :func:`read_records`."""
    return [r["text"] for r in read_records(path)]


def read_lines(path: str) -> list[str]:
    """Non-empty lines of a text file (or JSONL ``text``/``prompt`` fields)."""
    raw = _read_source(path)
    lines = [ln.strip() for ln in raw.splitlines() if ln.strip()]
    if lines and lines[0].startswith("{"):
        recs = _parse_jsonl(lines, path, ("prompt", "text"))
        return [r["prompt"] if isinstance(r.get("prompt"), str) else r["text"] for r in recs]
    if not lines:
        raise InputError(f"input {path!r} has no prompts")
    return lines


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Check, before any work, that ``path`` can be written: its directory exists and it is not a directory.

    Raises:
        InputError: naming the path and the fix.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {p} is a directory: pass a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"cannot write {what} {p}: directory {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {what} {p}: directory {parent} is not writable")
    return p


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, perms: int | None = None, overwrite: bool = True,
                 append: bool = False, encoding: str | None = "utf-8", newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success rename it over ``path`` (atomic), else delete it.

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
    if not overwrite and p.exists():
        raise InputError(f"refusing to overwrite existing file {p} (pass --force to replace it)")
    binary = "b" in mode
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


def read_json_arg(value: str | None, what: str) -> dict[str, Any]:
    """Parse a JSON object given inline or as ``@file.json``.

    Raises:
        InputError: not JSON, or not an object.
    """
    if not value:
        return {}
    text = value
    if value.startswith("@"):
        text = _read_source(value[1:])
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{what} is not valid JSON: {getattr(exc, 'msg', exc)}") from None
    if not isinstance(obj, dict):
        raise InputError(f"{what} must be a JSON object")
    return obj
