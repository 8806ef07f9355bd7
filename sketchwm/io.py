"""Reading inputs and writing outputs for the CLI, safely (atomic writes; clear errors).

Every file sketchwm writes goes through :func:`atomic_write`: the bytes go to a temporary file in
the destination's directory, are flushed and fsync'ed, and only then renamed over the destination
(``os.replace``, atomic on POSIX). An interrupted or failed write (exception, Ctrl-C, SIGKILL)
leaves the previous file untouched; at worst a stray ``.<name>.*.tmp`` file remains. The writers
live in :mod:`sketchwm.io_write` and are importable from here too."""

from __future__ import annotations

import io
import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson

from .errors import InputError
from .io_write import (atomic_write, check_output_path, write_json_atomic, write_jsonl_atomic,  # noqa: F401
                       write_text_atomic)

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
            raise InputError(f"{path}: line {i} is not valid JSON ({_json_reason(exc)}): fix or remove that line "
                             "(a truncated file ends in such a line)") from None
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


#: ``--format`` of ``sketchwm detect``: ``auto`` tells the format by extension and content (:func:`input_format`)
INPUT_FORMATS = ("auto", "jsonl", "csv", "tsv", "parquet", "text")
#: extensions that name a format the content cannot show (a CSV/TSV file is also plain text)
_TABLE_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv"}
_BOM = b"\xef\xbb\xbf"
FORMATS_HELP = ("JSONL (one object per line with a 'text' field; other fields kept), CSV or TSV (a header row with "
                "a 'text' column, --text-column NAME for another; other columns kept), Parquet (a 'text' column; other "
                "columns kept), or plain UTF-8 text (the whole input is one text)")


def sniff_format(head: bytes, text_field: str = "text") -> str:
    """The format of an input from its first bytes (at least its first line).

    ``parquet`` (magic ``PAR1``); ``binary`` (a NUL byte in the first 64 KiB); ``jsonl``
    (the first character that is not white space, after an optional UTF-8 byte-order mark, is
    ``{``); ``tsv`` or ``csv`` (the first line, split on tabs or commas, has a column named
    ``text_field``); ``table`` (the lines read as a delimited table without that column: the format
    cannot be told); else ``text``.
    """
    if head.startswith(b"PAR1"):
        return "parquet"
    body = head.removeprefix(_BOM)
    if b"\0" in body[:1 << 16]:  # text of any 8-bit encoding has none; bytes that are not UTF-8 fail when decoded
        return "binary"
    stripped = body.lstrip()
    if stripped.startswith(b"{"):
        return "jsonl"
    lines = stripped.decode("utf-8", "replace").splitlines()[:_TABLE_SAMPLE]
    for fmt, sep in (("tsv", "\t"), ("csv", ",")):
        if lines and sep in lines[0] and text_field in _fields(lines[0], sep):
            return fmt
    if any(_looks_like_table(lines, sep) for sep in ("\t", ",")):
        return "table"
    return "text"


_TABLE_SAMPLE = 20  # lines of an input sniffed for a table's shape


def _fields(line: str, sep: str) -> list[str]:
    import csv

    try:
        return [f.strip() for f in next(csv.reader([line], delimiter=sep))]
    except (csv.Error, StopIteration):
        return []


def _looks_like_table(lines: list[str], sep: str) -> bool:
    """Whether sampled lines read as a delimited table: a header of at least two column names (non-empty,
    at most 3 words and 64 characters, not ending a sentence) and at least one more line, every
    complete line split into as many fields as the header."""
    rows = [_fields(ln, sep) for ln in (lines[:-1] if len(lines) > 2 else lines)]  # the last may be cut short
    header = rows[0] if rows else []
    names = all(0 < len(h) <= 64 and len(h.split()) <= 3 and not h.endswith((".", "!", "?")) for h in header)
    return len(header) >= 2 and names and len(rows) >= 2 and all(len(r) == len(header) for r in rows[1:])


def input_format(path: str, fmt: str = "auto", text_field: str = "text") -> str:
    """``fmt``, or for ``auto`` the format of ``path``: ``csv``/``tsv`` by extension (``.csv``; ``.tsv``,
    ``.tab``), else by content (:func:`sniff_format` of its first non-blank bytes); a directory:
    ``parquet`` when it holds ``*.parquet`` files, else ``jsonl``; standard input: ``auto``, sniffed
    when read.

    Raises:
        InputError: an unknown format; a missing or unreadable path; a binary file that is none of
            the formats (:data:`FORMATS_HELP`).
    """
    if fmt not in INPUT_FORMATS:
        raise InputError(f"unknown input format {fmt!r}: use one of {', '.join(INPUT_FORMATS)}")
    if fmt != "auto" or path == "-":
        return fmt
    p = Path(path)
    if p.is_dir():
        return "parquet" if any(p.glob("*.parquet")) else "jsonl"
    p = _input_file(path)
    if p.suffix.lower() in _TABLE_EXTENSIONS:
        return _TABLE_EXTENSIONS[p.suffix.lower()]
    try:
        with open(p, "rb") as fh:
            head = b""
            while True:
                block = fh.read(1 << 16)
                head += block
                if not block or head.startswith(b"PAR1") or head.removeprefix(_BOM).strip():
                    break
            if head.removeprefix(_BOM).strip() and head.lstrip().count(b"\n") < _TABLE_SAMPLE:
                head += fh.read(1 << 16)  # the first lines, for a CSV header and a table's shape
    except OSError as exc:
        raise InputError(f"cannot read input file {p}: {exc.strerror or exc}") from None
    found = sniff_format(head, text_field)
    if found in ("binary", "table"):
        raise _unknown_input(f"input file {p}", found, text_field)
    return found


def _unknown_input(where: str, found: str, text_field: str) -> InputError:
    """The error for an input of no format sketchwm reads (``found``: ``binary`` or ``table``)."""
    if found == "table":
        return InputError(f"{where} looks like a CSV or TSV table without a column {text_field!r}: name the text column "
                          f"with --text-column NAME (and --format csv or tsv), or pass --format text to read it as one text")
    return InputError(f"{where} is binary data, or text that is not UTF-8 (it holds NUL bytes): convert text first, "
                      f"e.g. with iconv -t UTF-8; sketchwm reads {FORMATS_HELP}")


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
        ``tokenizer``, ``key_fingerprint``, ``watermarked``), as dicts; a JSON string ``provenance`` (a Parquet column) is parsed."""
        if self._meta is None:
            if self.records is not None:
                self._meta = self.records
            else:
                cols = {c: self.table.column(c).to_pylist()
                        for c in ("provenance", "config", "tokenizer", "key_fingerprint", "watermarked")
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


def _json_reason(exc: BaseException) -> str:
    """Why a line is not JSON, with the column: ``Invalid control character at column 12``."""
    if isinstance(exc, json.JSONDecodeError):
        where = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno} of it"
        return f"{exc.msg.removesuffix(' at')} at {where}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return _first_line(exc)


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
            raise InputError(f"{path}: line {no} is not valid JSON ({_json_reason(exc)}): fix or remove that line "
                             "(a truncated file ends in such a line)") from None
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
    row batch at a time; ``csv``/``tsv`` — a header row naming a column ``text`` (other columns are
    kept), read with pandas ``chunk`` rows at a time; ``auto`` — :func:`sniff_format`. ``text_field``
    names the text column or field instead of ``text``. A UTF-8 byte-order mark is dropped. A JSONL
    record, or a Parquet row, without a string ``text`` is marked in :attr:`RecordChunk.errors`
    (with ``strict``: an error). Standard input (``-``) is read as a stream, except Parquet, which
    is read whole (the format needs random access).

    Raises:
        InputError: missing, unreadable, empty or non-UTF-8 input; binary data (with ``auto``); a JSONL
            line that is not JSON; a Parquet, CSV or TSV file that cannot be read; a CSV or TSV file
            without the text column; with ``strict``, a record without a string ``text``.
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
                if head_lines and not head_lines[-1].startswith(b"PAR1") \
                        and not head_lines[-1].removeprefix(_BOM).lstrip().startswith(b"{"):
                    head_lines += itertools.islice(lines, _TABLE_SAMPLE - 1)  # a CSV header and a table's shape
                fmt = sniff_format(b"".join(head_lines), text_field)
                if fmt in ("binary", "table"):
                    raise _unknown_input(where, fmt, text_field)
            if fmt == "parquet":
                yield from _parquet_chunks(fh, head_lines, path, where, chunk, strict, text_field)
                return
            if fmt in ("csv", "tsv"):
                yield from _table_chunks(fh, head_lines, path, where, fmt, chunk, strict, text_field)
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


def _table_chunks(fh: Any, head: list[bytes], path: str, where: str, fmt: str, chunk: int, strict: bool,
                  text_field: str) -> Iterator[RecordChunk]:
    """``chunk`` rows at a time of a CSV or TSV input (header row first) as :class:`RecordChunk` tables
    (see :func:`iter_input_chunks`): every column kept, the text column as strings."""
    import io as _io

    import pandas as pd
    import pyarrow as pa

    src: Any = fh
    if head:  # the sniffed lines come first
        src = _io.BufferedReader(_ChainedReader(b"".join(head), fh))  # type: ignore[arg-type]
    name = "CSV" if fmt == "csv" else "TSV"
    try:
        reader = pd.read_csv(src, sep="," if fmt == "csv" else "\t", chunksize=chunk, dtype={text_field: object},
                             keep_default_na=False, na_values={text_field: []}, encoding="utf-8-sig")
        start = 0
        for df in reader:
            if text_field not in df.columns:
                cols = ", ".join(repr(str(c)) for c in df.columns)
                raise InputError(f"{where} is {name} with columns {cols} but no column {text_field!r}: name the text "
                                 f"column with --text-column NAME, or add a header row with {text_field!r}")
            texts = [t if isinstance(t, str) else None for t in df[text_field].tolist()]
            errors: list[str | None] = [None if t is not None else f"row {start + i + 1} has no string field {text_field!r}"
                                        for i, t in enumerate(texts)]
            if strict:
                bad = next((e for e in errors if e is not None), None)
                if bad is not None:
                    raise InputError(f"{path}: {bad} (drop --strict to mark such records and detect the rest)")
            yield RecordChunk(texts, errors, start, table=pa.Table.from_pandas(df, preserve_index=False))
            start += len(df)
        if start == 0:
            raise InputError(f"input {path!r} has a header row but no records")
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError(f"input {path!r} is empty") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where} is not UTF-8 text (byte {exc.start}): convert it first, e.g. with iconv -t UTF-8") from None
    except (pd.errors.ParserError, ValueError, pa.ArrowException) as exc:
        raise InputError(f"{where} is not readable as {name} ({_first_line(exc)}): check its quoting and delimiter, "
                         f"or pass --format") from None


class _ChainedReader(io.RawIOBase):
    """A raw byte stream: ``first``, then the rest of ``fh`` (lines already read while sniffing)."""

    def __init__(self, first: bytes, fh: Any) -> None:
        self._first, self._fh = first, fh

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._first:
            n = min(len(b), len(self._first))
            b[:n], self._first = self._first[:n], self._first[n:]
            return n
        data = self._fh.read(len(b))
        b[:len(data)] = data
        return len(data)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def read_texts(path: str) -> list[str]:
    """The ``text`` of each record: of :func:`read_records` for JSONL and plain text, of
    :func:`iter_input_chunks` for CSV, TSV and Parquet (:func:`input_format` tells which).

    Raises:
        InputError: as :func:`read_records` and :func:`input_format`; a record without a string ``text``.
    """
    fmt = input_format(path)
    if fmt not in ("csv", "tsv", "parquet"):
        return [r["text"] for r in read_records(path)]
    texts: list[str] = []
    for chunk in iter_input_chunks(path, fmt):
        bad = next((e for e in chunk.errors if e is not None), None)
        if bad is not None:
            raise InputError(f"{path}: {bad}: give every record a text")
        texts += chunk.texts
    return texts


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
        reason = _json_reason(exc)
        if isinstance(exc, json.JSONDecodeError):  # a file or a multi-line value: the line too
            reason = f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"
        raise InputError(f"{what} is not valid JSON ({reason}): fix it there (a JSON object, e.g. "
                         "'{\"delta\": 2.0}')") from None
    if not isinstance(obj, dict):
        raise InputError(f"{what} must be a JSON object, e.g. '{{\"delta\": 2.0}}'")
    return obj
