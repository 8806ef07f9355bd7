"""Smoke runs of the benchmark scripts on the tiny backend: they run end to end and write what they claim."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.usefixtures("one_thread")
def test_attack_matrix_stealing_smoke(tmp_path):
    """Stealing only, one scheme: spoof rate, its p-value rule and the other-key control are written,
    all rates in [0, 1], and the printed table has the control column."""
    am = _load("attack_matrix")
    out = tmp_path / "m.csv"
    rc = am.main(["--backend", "tiny", "--schemes", "unigram", "--attacks", "none", "--n-texts", "8", "--n-null", "8",
                  "--steal-n", "8", "--spoof-n", "4", "--strengths", "0.5", "--no-similarity", "--gen-length", "32",
                  "--batch-size", "8", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    metrics = {(r["attack"], r["metric"]): float(r["value"]) for r in rows}
    for m in ("spoof_rate", "spoof_rate_pvalue_1pct", "spoof_rate_other_key", "spoof_rate_other_key_pvalue_1pct"):
        assert 0.0 <= metrics[("steal-spoof", m)] <= 1.0
    assert ("steal-scrub", "scrub_rate") in metrics
    table = am.format_table(am.read_csv([str(out)]))
    assert "other key" in table and "unigram" in table


def test_text_quality_on_jsonl(tmp_path, capsys):
    """text_quality reads JSONL generations, labels them from the file name and writes the table."""
    tq = _load("text_quality")
    f1 = tmp_path / "null-base-4-0123456789ab.jsonl"
    f2 = tmp_path / "eval-unigram-4-ba9876543210.jsonl"
    f1.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["the water is cold", "a man said so", "we can go", "one day"]))
    f2.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["the the the the", "a a a a", "we we we", "day day"]))
    csv_out = tmp_path / "q.csv"
    assert tq.main([str(f1), str(f2), "--backend", "tiny", "--no-oracle", "--csv", str(csv_out)]) == 0
    rows = {r["label"]: r for r in csv.DictReader(csv_out.open())}
    assert set(rows) == {"unwatermarked", "unigram"}
    assert float(rows["unigram"]["top_token_share"]) == 1.0
    assert float(rows["unwatermarked"]["distinct_2"]) == 1.0


@pytest.mark.usefixtures("one_thread")
def test_attack_matrix_tagged_scheme_names(tmp_path):
    """``NAME#TAG`` runs NAME with the tag's params on top of NAME's, and keeps the tag in the rows."""
    am = _load("attack_matrix")
    out = tmp_path / "t.csv"
    params = {"unigram": {"gamma": 0.5}, "unigram#weak": {"delta": 0.0}}
    assert am.main(["--backend", "tiny", "--schemes", "unigram", "unigram#weak", "--attacks", "delete-random",
                    "--strengths", "0.1", "--n-texts", "8", "--n-null", "8", "--steal-n", "--gen-length", "32", "--batch-size", "8", "--no-similarity",
                    "--params", json.dumps(params), "--out", str(out)]) == 0
    tpr = {r["scheme"]: float(r["value"]) for r in csv.DictReader(out.open())
           if r["attack"] == "none" and r["metric"] == "tpr_at_pvalue_1pct"}  # 8 null texts: τ is +inf
    assert set(tpr) == {"unigram", "unigram#weak"}
    assert tpr["unigram"] >= 0.75 and tpr["unigram#weak"] <= 0.25  # δ = 0: no watermark in the tagged run
    assert "unigram#weak" in am.format_table(am.read_csv([str(out)]))


def test_tokens_to_detect_first_detected_prefix(monkeypatch):
    """tokens_to_detect returns the first prefix length with a detection per text, +inf where none."""
    import math

    import torch

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    ttd = _load("tokens_to_detect")
    hits = torch.tensor([[False, True, False], [True, True, False], [False, True, False]])  # (L=3, B=3)
    assert ttd.tokens_to_detect(hits, [16, 24, 32]) == [24.0, 16.0, math.inf]
