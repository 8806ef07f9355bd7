"""Chunked JSONL reading for ``sketchwm detect`` (bounded memory on large inputs)."""

from __future__ import annotations

import json

import pytest

from sketchwm.errors import InputError
from sketchwm.io import iter_record_chunks, read_records


def test_chunks_concatenate_to_read_records(tmp_path):
    p = tmp_path / "in.jsonl"
    recs = [{"text": f"text number {i}", "i": i} for i in range(11)]
    p.write_text("\n".join(json.dumps(r) for r in recs[:5]) + "\n\n  \n" + "\n".join(json.dumps(r) for r in recs[5:]) + "\n")
    chunks = list(iter_record_chunks(str(p), chunk=4))
    assert [len(c) for c in chunks] == [4, 4, 3]
    assert [r for c in chunks for r in c] == read_records(str(p)) == recs


def test_plain_text_is_one_record_and_errors_name_the_line(tmp_path):
    p = tmp_path / "in.txt"
    p.write_text("\n  first line of a plain text\nsecond line\n")
    assert list(iter_record_chunks(str(p), chunk=1)) == [[{"text": "first line of a plain text\nsecond line"}]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([json.dumps({"text": "a"})] * 6 + ["", "{broken"]) + "\n")
    it = iter_record_chunks(str(bad), chunk=2)
    assert len(next(it)) == 2
    with pytest.raises(InputError, match="line 8 is not valid JSON"):
        list(it)
    (tmp_path / "empty.jsonl").write_text(" \n\n")
    with pytest.raises(InputError, match="is empty"):
        list(iter_record_chunks(str(tmp_path / "empty.jsonl")))
    with pytest.raises(InputError, match="not found"):
        list(iter_record_chunks(str(tmp_path / "missing.jsonl")))
