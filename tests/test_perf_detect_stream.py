"""Smoke run of benchmarks/perf_detect_stream.py at a toy size: it builds its input, runs
``sketchwm detect`` as a child, counts one result per record, reports the child's peak RSS and
deletes its temporary directory."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_perf_detect_stream_smoke(capsys, tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("perf_detect_stream", ROOT / "benchmarks" / "perf_detect_stream.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    n, size = mod.build_input(tmp_path / "x.jsonl", 30_000)
    lines = (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == n and size == (tmp_path / "x.jsonl").stat().st_size >= 30_000
    assert [json.loads(ln)["i"] for ln in lines] == list(range(n)) and all(json.loads(ln)["text"] for ln in lines)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the benchmark's own temporary directory lands here
    assert mod.main(["--size-mb", "0.05", "--chunk-size", "16", "--threads", "1"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["records"] == res["results"] == res["scored"] > 16  # several chunks, every text scored
    assert 0.05 <= res["input_mb"] < 0.06 and res["peak_rss_mb"] > 50 and res["records_per_s"] > 0
    assert not list(tmp_path.glob("sketchwm-stream-*"))  # input and key deleted
