"""Reading inputs and writing outputs for the CLI, safely (atomic writes; clear errors).

Every file sketchwm writes goes through :func:`atomic_write`: the bytes go to a temporary file in
the destination's directory, are flushed and fsync'ed, and only then renamed over the destination
(``os.replace``, atomic on POSIX). An interrupted or failed write (exception, Ctrl-C, SIGKILL)
leaves the previous file untouched; at worst a stray ``.<name>.*.tmp`` file remains.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import orjson

from .errors import InputError

__all__ = [
    "read_texts", "read_records", "iter_record_chunks", "INPUT_FORMATS", "sniff_format", "input_format", "RecordChunk",
    "iter_input_chunks", "read_lines", "write_jsonl_atomic", "write_json_atomic", "write_text_atomic", "atomic_write",
    "read_json_arg", "check_output_path",
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
    """The UTF-8 text of a file, or of stdin for ``-`` (a leading byte-order mark is dropped).

    Raises:
        InputError: missing path, a directory, unreadable file, or bytes that are not UTF-8.
    """
    if path == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        if isinstance(data, str):
            return data
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(f"standard input is not UTF-8 text (byte {exc.start}): convert it first, "
                             "e.g. with iconv -t UTF-8") from None
    p = _input_file(path)
    try:
        return p.read_text(encoding="utf-8-sig")
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
        fh = _io.TextIOWrapper(raw, encoding="utf-8-sig") if raw is not None else sys.stdin
        where = "standard input"
    else:
        p = _input_file(path)
        try:
            fh = open(p, encoding="utf-8-sig")
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


#: ``--format`` of ``sketchwm detect``: ``auto`` detects by content (:func:`sniff_format`)
INPUT_FORMATS = ("auto", "jsonl", "text", "parquet")
_BOM = b"\xef\xbb\xbf"


def sniff_format(head: bytes) -> str:
    """The format of an input from its first bytes: ``parquet`` (magic ``PAR1``), ``jsonl`` (the first
    character that is not white space, after an optional UTF-8 byte-order mark, is ``{``), else ``text``."""
    if head.startswith(b"PAR1"):
        return "parquet"
    return "jsonl" if head.removeprefix(_BOM).lstrip().startswith(b"{") else "text"


def input_format(path: str, fmt: str = "auto") -> str:
    """``fmt``, or for ``auto`` the format of ``path`` by content (:func:`sniff_format` of its first
    non-blank bytes; a directory: ``parquet`` when it holds ``*.parquet`` files, else ``jsonl``;
    standard input: ``auto``, sniffed when read).

    Raises:
        InputError: an unknown format; a missing or unreadable path.
    """
    if fmt not in INPUT_FORMATS:
        raise InputError(f"unknown input format {fmt!r}: use one of {', '.join(INPUT_FORMATS)}")
    if fmt != "auto" or path == "-":
        return fmt
    p = Path(path)
    if p.is_dir():
        return "parquet" if any(p.glob("*.parquet")) else "jsonl"
    p = _input_file(path)
    try:
        with open(p, "rb") as fh:
            head = b""
            while True:
                block = fh.read(1 << 16)
                head += block
                if not block or head.startswith(b"PAR1") or head.removeprefix(_BOM).strip():
                    return sniff_format(head)
    except OSError as exc:
        raise InputError(f"cannot read input file {p}: {exc.strerror or exc}") from None


@dataclass
class RecordChunk:
    """Consecutive input records, as read for detection.

    Attributes:
        texts: the ``text`` of each record (None where the record has none).
        errors: why a record cannot be detected (no string ``text``), else None, per record.
        start: index of the first record in the whole input (0-based).
        records: JSONL and text inputs: the records as dicts (every field kept).
        table: Parquet inputs: the records as a ``pyarrow.Table`` (every column kept).
    """

    texts: list[Any]
    errors: list[str | None]
    start: int = 0
    records: list[dict[str, Any]] | None = None
    table: Any = None
    _meta: list[dict[str, Any]] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.texts)

    def meta(self) -> list[dict[str, Any]]:
        """Per record, the fields that say how it was generated (``provenance``, ``config``,
        ``tokenizer``), as dicts; a JSON string ``provenance`` (a Parquet column) is parsed."""
        if self._meta is None:
            if self.records is not None:
                self._meta = self.records
            else:
                cols = {c: self.table.column(c).to_pylist() for c in ("provenance", "config", "tokenizer")
                        if c in self.table.column_names}
                rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())] if cols else [{} for _ in self.texts]
                for r in rows:
                    for k in ("provenance", "config"):
                        if isinstance(r.get(k), str):
                            try:
                                r[k] = json.loads(r[k])
                            except json.JSONDecodeError:
                                r[k] = None
                self._meta = rows
        return self._meta


def _loads(line: bytes) -> Any:
    """One JSON value: orjson, or the standard parser for what orjson refuses (NaN, huge integers).

    Raises:
        ValueError: not JSON (json.JSONDecodeError), or nested too deeply (RecursionError).
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def _parse_chunk(lines: list[bytes], numbers: list[int], start: int, path: str, strict: bool,
                 text_field: str = "text") -> RecordChunk:
    """Parse JSONL lines into a :class:`RecordChunk`; a line that is JSON but has no string ``text`` is
    marked (or, with ``strict``, refused).

    Raises:
        InputError: a line that is not UTF-8 or not JSON (names its line number); with ``strict``, a
            record without a string ``text``.
    """
    records, texts, errors = [], [], []
    for no, ln in zip(numbers, lines):
        try:
            rec = _loads(ln)
        except (ValueError, RecursionError) as exc:
            try:
                ln.decode("utf-8")
            except UnicodeDecodeError as u:
                raise InputError(f"{path}: line {no} is not UTF-8 text (byte {u.start} of it): convert it first, "
                                 "e.g. with iconv -t UTF-8") from None
            msg = getattr(exc, "msg", None) or "nested too deeply"
            raise InputError(f"{path}: line {no} is not valid JSON ({msg}); is the file truncated?") from None
        text = rec.get(text_field) if isinstance(rec, dict) else None
        err = None
        if not isinstance(text, str):
            err = (f"line {no} has no string field {text_field!r}" if isinstance(rec, dict)
                   else f"line {no} is not a JSON object")
            if strict:
                raise InputError(f"{path}: {err} (drop --strict to mark such records and detect the rest)")
            text = None
        records.append(rec if isinstance(rec, dict) else {})
        texts.append(text)
        errors.append(err)
    return RecordChunk(texts, errors, start, records=records)


def iter_input_chunks(path: str, fmt: str = "auto", chunk: int = 4096, strict: bool = False,
                      text_field: str = "text") -> Iterator[RecordChunk]:
    """The records of a detection input, ``chunk`` at a time, in bounded memory.

    Formats (``fmt``): ``jsonl`` — one JSON object per line with a string ``text`` (other fields are
    kept), read line by line and parsed with orjson; ``text`` — the whole input is one text;
    ``parquet`` — a Parquet file with a string column ``text`` (other columns are kept), read one
    row batch at a time; ``auto`` — :func:`sniff_format`. A UTF-8 byte-order mark is dropped. A JSONL
    record, or a Parquet row, without a string ``text`` is marked in :attr:`RecordChunk.errors`
    (with ``strict``: an error). Standard input (``-``) is read as a stream, except Parquet, which
    is read whole (the format needs random access).

    Raises:
        InputError: missing, unreadable, empty or non-UTF-8 input; a JSONL line that is not JSON; a
            Parquet file that cannot be read; with ``strict``, a record without a string ``text``.
    """
    if fmt not in INPUT_FORMATS:
        raise InputError(f"unknown input format {fmt!r}: use one of {', '.join(INPUT_FORMATS)}")
    if chunk < 1:
        raise InputError(f"chunk must be a positive integer, got {chunk}")
    if path == "-":
        raw = getattr(sys.stdin, "buffer", None)
        if raw is None:  # a text-mode stand-in without bytes (tests): encode it back
            import io as _io

            raw = _io.BytesIO(sys.stdin.read().encode("utf-8"))
        fh, where, close = raw, "standard input", False
    else:
        p = _input_file(path)
        try:
            fh = open(p, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise InputError(f"cannot read input file {p}: {exc.strerror or exc}") from None
        where, close = f"input file {p}", True
    try:
        try:
            lines = iter(fh)
            head_lines: list[bytes] = []
            if fmt == "auto":  # sniff from the first non-blank line (Parquet: its magic bytes)
                for ln in lines:
                    head_lines.append(ln)
                    if ln.removeprefix(_BOM).strip() or ln.startswith(b"PAR1"):
                        break
                fmt = sniff_format(b"".join(head_lines))
            if fmt == "parquet":
                yield from _parquet_chunks(fh, head_lines, path, where, chunk, strict, text_field)
                return
            if fmt == "text":
                data = b"".join(head_lines) + fh.read()
                head_lines.clear()
                try:
                    text = data.decode("utf-8-sig").strip()
                except UnicodeDecodeError as exc:
                    raise InputError(f"{where} is not UTF-8 text (byte {exc.start}): convert it first, "
                                     "e.g. with iconv -t UTF-8") from None
                del data  # the text only, while it is detected
                if not text:
                    raise InputError(f"input {path!r} is empty")
                yield RecordChunk([text], [None], 0, records=[{"text": text}])
                return
            buf: list[bytes] = []
            numbers: list[int] = []
            start = 0
            source = itertools.chain(head_lines, lines)
            del head_lines  # the chain holds the sniffed lines until it has passed them
            for no, ln in enumerate(source, 1):
                if no == 1:
                    ln = ln.removeprefix(_BOM)
                if not ln.strip():
                    continue
                buf.append(ln)
                numbers.append(no)
                if len(buf) == chunk:
                    parsed = _parse_chunk(buf, numbers, start, path, strict, text_field)
                    start += len(buf)
                    buf, numbers, ln = [], [], b""  # the raw lines are not kept while the chunk is detected
                    yield parsed
                    del parsed
            if buf:
                parsed = _parse_chunk(buf, numbers, start, path, strict, text_field)
                buf, ln = [], b""
                yield parsed
            elif start == 0:
                raise InputError(f"input {path!r} is empty")
        except OSError as exc:
            raise InputError(f"cannot read {where}: {exc.strerror or exc}") from None
    finally:
        if close:
            fh.close()


def _parquet_chunks(fh: Any, head: list[bytes], path: str, where: str, chunk: int, strict: bool,
                    text_field: str) -> Iterator[RecordChunk]:
    """Row batches of a Parquet input as :class:`RecordChunk` (see :func:`iter_input_chunks`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if head or not fh.seekable():  # standard input, or already partly read: Parquet needs random access
            import io as _io

            src: Any = _io.BytesIO(b"".join(head) + fh.read()) if not fh.seekable() else fh
            if fh.seekable():
                fh.seek(0)
        else:
            src = fh
        pf = pq.ParquetFile(src)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"{where} is not a readable Parquet file ({_first_line(exc)})") from None
    names = pf.schema_arrow.names
    if pf.metadata.num_rows == 0:
        raise InputError(f"input {path!r} is empty")
    if text_field not in names and strict:
        raise InputError(f"{path}: the Parquet file has no column {text_field!r} (columns: {', '.join(names)})")
    start = 0
    try:
        for rb in pf.iter_batches(batch_size=chunk):
            table = pa.Table.from_batches([rb])
            n = table.num_rows
            if text_field in names:
                col = table.column(text_field)
                texts = col.to_pylist() if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) else [None] * n
            else:
                texts = [None] * n
            errors: list[str | None] = [None if isinstance(t, str) else f"row {start + i + 1} has no string field {text_field!r}"
                                        for i, t in enumerate(texts)]
            if strict:
                bad = next((e for e in errors if e is not None), None)
                if bad is not None:
                    raise InputError(f"{path}: {bad} (drop --strict to mark such records and detect the rest)")
            yield RecordChunk(texts, errors, start, table=table)
            start += n
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{where}: cannot read Parquet row group ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


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
