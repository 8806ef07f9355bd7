"""Smoke runs of the perf_* benchmarks at toy sizes: they run end to end and print their JSON line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(name: str, argv: list[str], capsys) -> dict:
    spec = importlib.util.spec_from_file_location(f"perf_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.usefixtures("one_thread")
def test_perf_detect_attribution_embedding_smoke(capsys):
    d = _run("perf_detect", ["--tokens", "8192", "--length", "64", "--vocab", "2000", "--repeats", "1", "--device", "cpu",
                             "--text-mb", "0.02", "--text-repeats", "1"], capsys)
    assert d["tokens"] == 8192 and d["tokens_per_s"] > 0 and d["score_tokens_per_s"] > 0 and d["unigram_tokens_per_s"] > 0
    assert d["lists_tokens_per_s"] > 0 and d["text"]["mb"] >= 0.02
    assert set(d["text"]["ratio_to_tokenizer"]) == {"tokenizer", "encode_batch_fast", "Watermarker.detect",
                                                    "sketchwm detect jsonl", "sketchwm detect parquet"}
    assert set(d["text"]["ratio_to_tokenizer_less_startup"]) == {"sketchwm detect jsonl", "sketchwm detect parquet"}
    a = _run("perf_attribution", ["--keys", "300", "--vocab", "2000", "--repeats", "1", "--device", "cpu"], capsys)
    assert a["keys"] == 300 and a["bank_mb"] == round(300 * 1024 / 8 / 1e6, 2) and a["ms"] > 0
    e = _run("perf_embedding", ["--positions", "8", "--vocab", "2000", "--repeats", "1", "--device", "cpu"], capsys)
    assert {"ratio", "ratio_inplace", "ratio_green_every_step", "ratio_global_sketch", "ratio_count",
            "ratio_count_inplace"} <= set(e) and e["scheme"] == "global-sketch-green"


@pytest.mark.usefixtures("one_thread")
def test_perf_generate_and_tilt_error_smoke(capsys):
    """The generation benchmark and the tilt-error probe on the shipped model, 2 short prompts."""
    g = _run("perf_generate", ["--prompts", "2", "--gen-length", "64", "--repeats", "1", "--z-prompts", "2",
                               "--schemes", "global-sketch", "--refresh", "block", "--device", "cpu"], capsys)
    # the default (always timed): its sketch's rows incrementally, its green lists' neighbours fresh
    assert g["refresh"] == "once" and g["ratio"] > 0 and g["z_texts"] == 2
    assert {"global-sketch-green", "global-sketch", "global-sketch-green (refresh block)"} <= set(g["schemes"])
    assert {"z_mean_exact", "z_mean", "z_rel_diff", "z_rel_diff_se", "z_rel_diff_refresh_block"} <= set(g)
    t = _run("tilt_error", ["--prompts", "2", "--gen-length", "64", "--remasking", "random,low_confidence",
                            "--refresh", "auto,once", "--z-texts", "2", "--z-batch", "2", "--device", "cpu"], capsys)
    rnd, lc = t["regimes"]["random"], t["regimes"]["low_confidence"]
    assert rnd["auto"]["resolved"] == "once" and rnd["auto"] == rnd["once"]  # auto measured once, as what it resolves to
    assert lc["auto"]["resolved"] == 1 and lc["once"]["resolved"] == "once"  # exact under confidence remasking
    assert rnd["auto"]["used_vs_exact"]["rows"] == 2 * 64  # one sampled row per text and step
    assert lc["auto"]["used_vs_exact"]["rows"] == 2 * 2 * sum(range(1, 33))  # every masked row of the block, per step
    for res in (rnd["auto"], lc["auto"], lc["once"]):
        # the tail linearisation alone stays within its relative bound ε/(1 − ε) (plus the expected sketch's ε/2)
        assert res["linear_vs_exact"]["rel_max"] <= 2 * t["tail_epsilon"]
        u = res["used_vs_exact"]
        assert 0 <= u["rel_median"] <= u["rel_p95"] <= u["rel_max"] and len(u["block_median"]) == 2
    assert rnd["auto"]["z_texts"] == lc["auto"]["z_texts"] == 2 and "z_mean" not in lc["once"]  # z of --z-refresh auto only


@pytest.mark.usefixtures("one_thread")
def test_generate_floor_counts_the_rows_each_sampler_computes(capsys):
    """Under low-confidence remasking the unwatermarked sampler runs the LM head on the block's masked rows
    and the default's exact computation on every masked row, with one body pass per step either way."""
    r = _run("generate_floor", ["--prompts", "2", "--gen-length", "64", "--device", "cpu"], capsys)
    rows, pos = r["rows"], r["positions"]
    assert pos["unwatermarked"] == pos["global-sketch-green"] and r["forwards"]["unwatermarked"] == r["forwards"]["global-sketch-green"]
    assert rows["unwatermarked"] == 2 * 2 * sum(range(1, 33))  # two blocks of 32: the block's masked rows per step
    assert rows["global-sketch-green"] == 2 * sum(range(1, 65))  # every masked row at every step
    assert r["model_work_ratio"] > r["model_work_ratio_llada_8b_dims"] > 1.0
