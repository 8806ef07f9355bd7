"""Reading inputs and writing outputs for the CLI, safely (atomic writes; clear errors)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import InputError

__all__ = ["read_texts", "read_records", "iter_record_chunks", "write_jsonl_atomic", "read_json_arg"]


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise InputError(f"input file not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"input file is not UTF-8 text: {p}") from None


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
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {i} is not valid JSON: {exc.msg}") from None
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
    if path == "-":
        fh = sys.stdin
    else:
        p = Path(path)
        if not p.exists():
            raise InputError(f"input file not found: {p}")
        fh = open(p, encoding="utf-8")
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
        except UnicodeDecodeError:
            raise InputError(f"input file is not UTF-8 text: {path}") from None
        if jsonl is None:
            raise InputError(f"input {path!r} is empty")
        if lines:
            yield _parse_jsonl(lines, path, ("text",), numbers)
    finally:
        if fh is not sys.stdin:
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


def write_jsonl_atomic(path: str, records: Iterable[dict[str, Any]]) -> None:
    """Write JSONL to ``path`` (``-`` = stdout) via a temporary file and rename, so an error never
    leaves a truncated file or clobbers an existing one half-way."""
    if path == "-":
        for r in records:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, p)


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
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise InputError(f"{what} must be a JSON object")
    return obj
