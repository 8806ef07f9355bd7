"""What a new user meets: every detection explains itself, inputs are read for what they are,
a wrong key or calibration is named, and every error names a fix.

The CLI runs in-process on the tiny random BERT (:mod:`cli_tiny`), with the default scheme where the
test is about it (a combined scheme: sketch and green channels).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from cli_tiny import GEN_SMALL, cli_cmd, keyfile, model_dir, run, subprocess_env  # noqa: F401 - fixtures
from sketchwm.detection_result import DetectionResult


def backend_args(model_dir) -> list[str]:
    return ["--backend", "hf-masked-lm", "--backend-params", json.dumps({"path": str(model_dir), "device": "cpu"})]


@pytest.fixture(scope="module")
def default_gen(tmp_path_factory, model_dir, keyfile):  # noqa: F811
    """3 texts watermarked with the default scheme (the tiny model's prior is uniform: one warning)."""
    from sketchwm.cli import main

    out = tmp_path_factory.mktemp("default") / "gen.jsonl"
    code = main(["generate", "--key", str(keyfile), "--prompt", "the water", "--prompt", "one day", "--prompt", "we can",
                 "--out", str(out), *GEN_SMALL, *backend_args(model_dir)])
    assert code == 0
    return out


# ---------------------------------------------------------------- detections explain themselves
def test_detect_json_on_the_default_scheme_shows_each_channel_and_an_explanation(capsys, default_gen, model_dir, keyfile):  # noqa: F811
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", default_gen, "--json", *backend_args(model_dir))
    assert code == 0, err
    recs = [json.loads(line) for line in out.splitlines()]
    assert len(recs) == 3
    for r in recs:
        channels = {k[:-len("_p_value")] for k in r if k.endswith("_p_value")}
        assert channels == {"sketch", "green"}, sorted(r)
        for c in channels:
            assert 0.0 <= r[f"{c}_p_value"] <= 1.0 and r[f"{c}_z"] is not None
        assert r["deciding_channel"] is not None and r["deciding_channel"].replace("-", "_") in channels
        assert r["z"] == r[f"{r['deciding_channel'].replace('-', '_')}_z"]  # z belongs to the deciding channel
        assert r["explanation"], r
        verdict = "watermarked" if r["is_watermarked"] else "not watermarked"
        assert r["explanation"].startswith(verdict + ":")
        assert f"{r['threshold']:.4g}" in r["explanation"] and f"deciding channel {r['deciding_channel']}" in r["explanation"]


def test_detect_table_puts_the_threshold_next_to_the_score(capsys, default_gen, model_dir, keyfile):  # noqa: F811
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", default_gen, *backend_args(model_dir))
    assert code == 0, err
    head = out.splitlines()[0].split()
    assert head[head.index("score") + 1] == "threshold" and head[head.index("threshold") + 1] == "decision"
    assert head[-3:] == ["p-value", "channel", "z"]
    assert "z: the deciding channel's" in out


def _result(source: str, channels: bool = True, B: int = 6, seed: int = 3) -> DetectionResult:
    g = torch.Generator().manual_seed(seed)
    z1, z2 = torch.randn(B, generator=g, dtype=torch.float64) * 2, torch.randn(B, generator=g, dtype=torch.float64) * 2
    p1, p2 = torch.rand(B, generator=g, dtype=torch.float64) * 0.05, torch.rand(B, generator=g, dtype=torch.float64)
    pick = torch.rand(B, generator=g) < 0.5
    p = torch.minimum(torch.ones(B, dtype=torch.float64), 2 * torch.minimum(p1, p2))
    score = torch.randn(B, generator=g, dtype=torch.float64) * 3
    thr = torch.full((B,), 2.326, dtype=torch.float64) if source != "p-value" else torch.full((B,), float("nan"))
    flags = p <= 0.01 if source == "p-value" else score >= thr
    errors = [None] * B
    errors[2] = "text 2 is empty"
    ok = torch.tensor([e is None for e in errors])
    nan = torch.tensor(float("nan"), dtype=torch.float64)
    return DetectionResult(
        score=torch.where(ok, score, nan), z=torch.where(pick, z1, z2), p_value=torch.where(ok, p, nan), threshold=thr,
        is_watermarked=flags & ok, n_tokens=torch.arange(B) + 20, threshold_source=source, alpha=0.01,
        key_fingerprint="k", scheme="s", p_value_method="weighted Bonferroni", errors=errors,
        tau_analytic=thr if source == "analytic" else None, n_scored=torch.arange(B),
        channels={"sketch": (p1, z1), "keyed-sampling": (p2, z2)} if channels else None)


@pytest.mark.parametrize("source", ["analytic", "p-value"])
def test_records_and_columns_agree_and_every_scored_text_is_explained(source):
    res = _result(source)
    recs, cols = res.to_records(), res.columns()
    assert [set(r) - {"threshold_source", "alpha", "key_fingerprint", "scheme", "p_value_method"} for r in recs] \
        == [set(cols)] * len(res)
    for name, values in cols.items():
        assert [None if v != v else v for v in values] == [None if r[name] != r[name] else r[name] for r in recs], name
    assert {"sketch_p_value", "sketch_z", "keyed_sampling_p_value", "keyed_sampling_z"} <= set(cols)
    z1 = res.channels["sketch"][1]
    expect = ["sketch" if bool(res.z[i] == z1[i]) else "keyed-sampling" for i in range(len(res))]
    assert cols["deciding_channel"] == [None if i == 2 else c for i, c in enumerate(expect)]
    for i, r in enumerate(recs):
        if i == 2:
            assert r["status"] == "error" and r["explanation"] is None and r["sketch_p_value"] is None
            continue
        assert r["explanation"] and f"deciding channel {expect[i]}" in r["explanation"]
        assert res.explain(i)["explanation"] == r["explanation"]


def test_a_p_value_decided_scheme_shows_its_rule_not_a_nan_threshold():
    res = _result("p-value", channels=False)
    for r in res.to_records():
        if r["status"] != "ok":
            continue
        assert r["threshold"] is None and r["decided_by"] == "p-value" and "p_value <= alpha" in r["rule"]
        assert f"p-value {r['p_value']:.3g} {'<=' if r['is_watermarked'] else '>'} alpha 0.01" in r["explanation"]
    assert "nan" not in json.dumps(res.to_records()).lower()


def test_a_channel_z_above_the_threshold_is_not_mistaken_for_the_score():
    """The human-paragraph case: the deciding channel's z (2.36) exceeds Φ⁻¹(1 − α) = 2.326, the combined
    score does not; the explanation puts the threshold next to the score it applies to."""
    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    res = DetectionResult(
        score=t(1.95), z=t(2.36), p_value=t(0.0256), threshold=t(2.326), is_watermarked=torch.tensor([False]),
        n_tokens=torch.tensor([431]), threshold_source="analytic", alpha=0.01, key_fingerprint="k", scheme="s",
        p_value_method="weighted Bonferroni", tau_analytic=t(2.326), channels={"green": (t(0.0091), t(2.36)), "sketch": (t(0.4), t(0.2))})
    r = res.to_records()[0]
    assert r["deciding_channel"] == "green"
    assert r["explanation"].startswith("not watermarked: score 1.95 does not pass the threshold 2.326")
    assert "deciding channel green (its p-value 0.0091, z 2.36)" in r["explanation"]


def test_concat_keeps_the_channels():
    a, b = _result("analytic", seed=1), _result("analytic", seed=2)
    both = DetectionResult.concat([a, b])
    assert torch.equal(both.channels["sketch"][0], torch.cat([a.channels["sketch"][0], b.channels["sketch"][0]]))
    assert both.deciding_channel() == a.deciding_channel() + b.deciding_channel()


# ---------------------------------------------------------------- inputs read for what they are
def _write_csv(path, header, rows, sep=","):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, delimiter=sep)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_csv_with_a_text_column_gives_one_row_per_record_with_its_columns_kept(tmp_path, capsys, default_gen, model_dir, keyfile):  # noqa: F811
    texts = [json.loads(x)["text"] for x in default_gen.read_text().splitlines()]
    src = _write_csv(tmp_path / "texts.csv", ["id", "text", "source"], [[i + 10, t, f"s{i}"] for i, t in enumerate(texts)])
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", src, "--json", *backend_args(model_dir))
    assert code == 0, err
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2] and all(r["status"] == "ok" for r in rows)
    dst = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", src, "--out", dst, *backend_args(model_dir))
    assert code == 0, err
    recs = [json.loads(x) for x in dst.read_text().splitlines()]
    assert [(r["id"], r["text"], r["source"]) for r in recs] == [(i + 10, t, f"s{i}") for i, t in enumerate(texts)]
    assert [r["score"] for r in recs] == [r["score"] for r in rows]
    # the same table as TSV, without an extension, with the text under another name
    tsv = _write_csv(tmp_path / "texts", ["id", "body"], [[i, t] for i, t in enumerate(texts)], sep="\t")
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", tsv, "--text-column", "body", "--json",
                         *backend_args(model_dir))
    assert code == 0, err
    assert [json.loads(x)["score"] for x in out.splitlines()] == [r["score"] for r in rows]


@pytest.mark.parametrize("name", ["no-text.csv", "no-text-table"])
def test_a_table_without_the_text_column_is_one_error_line(tmp_path, capsys, name, keyfile):  # noqa: F811
    src = _write_csv(tmp_path / name, ["id", "body", "label"], [[1, "some words here", "a"], [2, "more words", "b"]])
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", src)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sketchwm: error: ") and "'text'" in lines[0]
    assert "--text-column" in lines[0]


def test_a_binary_file_is_one_error_line(tmp_path, capsys, keyfile):  # noqa: F811
    src = tmp_path / "blob.bin"
    src.write_bytes(bytes(range(256)) * 8)
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", src)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "binary" in lines[0] and "iconv" in lines[0]


def test_detect_help_lists_the_input_formats(capsys):
    code, out, _ = run(capsys, "detect", "--help")
    assert code == 0
    out = " ".join(out.split())
    for fmt in ("JSONL", "CSV", "TSV", "Parquet", "plain UTF-8 text", "--text-column"):
        assert fmt in out, fmt


# ---------------------------------------------------------------- a wrong key is named
@pytest.fixture(scope="module")
def other_key(tmp_path_factory):
    from sketchwm.cli import main

    k = tmp_path_factory.mktemp("other") / "other.key"
    assert main(["keygen", "--out", str(k)]) == 0
    return k


def test_records_of_another_key_print_one_warning_naming_both_fingerprints(capsys, default_gen, model_dir, keyfile,  # noqa: F811
                                                                            other_key):
    from sketchwm.keys import WatermarkKey

    mine, theirs = WatermarkKey.from_file(other_key), WatermarkKey.from_file(keyfile)
    code, out, err = run(capsys, "detect", "--key", other_key, "--input", default_gen, *backend_args(model_dir))
    assert code == 0, err
    warned = [ln for ln in err.splitlines() if ln.startswith("sketchwm: warning:") and "key" in ln and "--key" in ln]
    assert len(warned) == 1, err
    assert theirs.fingerprint in warned[0] and mine.fingerprint in warned[0]
    assert mine.secret.hex() not in err and theirs.secret.hex() not in err
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", default_gen, *backend_args(model_dir))
    assert code == 0 and "generated with key" not in err  # the right key: no warning


def test_strict_makes_another_key_an_error(capsys, default_gen, model_dir, other_key):
    code, out, err = run(capsys, "detect", "--key", other_key, "--input", default_gen, "--strict", *backend_args(model_dir))
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and lines[-1].startswith("sketchwm: error: the input records were generated with key")
    assert "--key" in lines[-1]


# ---------------------------------------------------------------- the demo
def test_the_demo_draws_a_fresh_key_per_run_unless_given_a_key_or_seed():
    from sketchwm.demo import DEMO_KEY, demo_key
    from sketchwm.keys import WatermarkKey

    (a, how_a), (b, _) = demo_key(None, None), demo_key(None, None)
    assert a.fingerprint != b.fingerprint and how_a == "a fresh random key"
    assert demo_key(None, 7) == (DEMO_KEY, "the public demo key")
    mine = WatermarkKey.generate()
    assert demo_key(mine, 7) == (mine, "the given key")


def test_clopper_pearson_matches_the_beta_quantiles():
    from scipy.stats import binomtest

    from sketchwm.demo import clopper_pearson

    for k, n in [(0, 20), (1, 20), (19, 20), (20, 20), (7, 13)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert clopper_pearson(1, 20)[1] > 0.2  # one false flag in 20 cannot rule out a rate of 20%


def test_the_demo_table_names_the_model_the_key_and_what_20_texts_show():
    from sketchwm.demo import SHIPPED_MODEL, clopper_pearson, format_table

    res = {"alpha": 0.01, "n_prompts": 20, "n_null": 200, "gen_length": 128, "scheme": "s", "backend": "default:x",
           "shipped_model": True, "key_fingerprint": "ab" * 8, "key_source": "a fresh random key",
           "median_tokens_watermarked": 120, "n_detected_watermarked": 19, "n_detected_unwatermarked": 1,
           "tpr_interval": clopper_pearson(19, 20), "fpr_interval": clopper_pearson(1, 20), "tpr_analytic": 0.95,
           "fpr_analytic": 0.0, "median_z_watermarked": 6.0, "median_z_unwatermarked": 0.1, "median_p_watermarked": 1e-9,
           "median_p_unwatermarked": 0.4, "example_watermarked": "x"}
    table = format_table(res)
    assert SHIPPED_MODEL in table and "4.8 M-parameter" in table and "a fresh random key" in table
    assert "1 of 20" in table and "[0.00, 0.25]" in table and "20 texts per side cannot measure" in table
    assert SHIPPED_MODEL not in format_table({**res, "shipped_model": False})


def test_the_shipped_model_has_the_parameter_count_the_demo_states():
    import math
    from pathlib import Path

    from safetensors import safe_open

    from sketchwm.default_model import MODEL_DIR

    with safe_open(str(Path(MODEL_DIR) / "model.safetensors"), "pt") as f:
        n = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    assert round(n / 1e6, 1) == 4.8


# ---------------------------------------------------------------- every error names a fix
def one_error_line(code, err) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("sketchwm: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_gen_length_not_a_multiple_of_the_default_block_length_names_the_fix(capsys, keyfile):  # noqa: F811
    code, _, err = run(capsys, "generate", "--key", keyfile, "--prompt", "hi", "--gen-length", "48", "--quiet")
    line = one_error_line(code, err)
    assert "gen_length (48) must be a multiple of block_length (32)" in line
    assert "use a multiple of 32, or set block_length (--block-length)" in line


def test_gen_length_on_the_hf_masked_lm_backend_names_the_fix(capsys, keyfile, model_dir):  # noqa: F811
    code, _, err = run(capsys, "generate", "--key", keyfile, "--prompt", "hi", "--gen-length", "48", "--quiet",
                       *backend_args(model_dir))
    line = one_error_line(code, err)
    assert "multiple of block_length (128)" in line and "use a multiple of 128, or set block_length (--block-length)" in line


def test_calibrate_on_too_few_texts_says_how_many_to_give_and_how_to_get_them(tmp_path, capsys, keyfile, model_dir):  # noqa: F811
    src = tmp_path / "human.jsonl"
    src.write_text("".join(json.dumps({"text": f"the water {i} was cold and the river ran past the old mill near the "
                                               "town where we had lived for years"}) + "\n" for i in range(30)))
    code, _, err = run(capsys, "calibrate", "--key", keyfile, "--input", src, "--out", tmp_path / "cal.json",
                       "--alpha", "0.01", *backend_args(model_dir))
    line = one_error_line(code, err)
    assert "needs at least 99 unwatermarked texts, got 30" in line
    assert "give at least 99 texts" in line and "--n-samples" in line and "alpha >= 0.0323" in line
    assert not (tmp_path / "cal.json").exists()


@pytest.mark.parametrize("args,needle", [
    (["detect", "--alpha", "2", "--input", "x"], "see `sketchwm detect --help`"),
    (["generate", "--batch-size", "0"], "see `sketchwm generate --help`"),
    (["no-such-command"], "see `sketchwm --help`"),
])
def test_argparse_errors_read_sketchwm_error(capsys, args, needle):
    code, out, err = run(capsys, *args)
    line = one_error_line(code, err)
    assert err.strip() == line and line.endswith(needle)


def test_invalid_json_input_quotes_the_line_column_and_full_reason(tmp_path, capsys, keyfile):  # noqa: F811
    src = tmp_path / "bad.jsonl"
    src.write_text('{"text": "fine"}\n{"text": "a\tb"}\n')
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", src)
    line = one_error_line(code, err)
    assert "line 2 is not valid JSON (Invalid control character at column 12)" in line
    assert "fix or remove that line" in line


# ---------------------------------------------------------------- a calibration's alpha
def test_a_calibration_made_at_another_alpha_is_refused_unless_overridden(tmp_path, capsys, default_gen, keyfile,  # noqa: F811
                                                                          model_dir):
    src = tmp_path / "null.jsonl"
    words = "the water was cold and the river ran past the old mill near the town where we lived".split()
    src.write_text("".join(json.dumps({"text": " ".join(words[i % 7:] + words[:i % 7]) + f" {i}"}) + "\n"
                           for i in range(30)))
    cal = tmp_path / "cal.json"
    code, _, err = run(capsys, "calibrate", "--key", keyfile, "--input", src, "--out", cal, "--alpha", "0.05",
                       *backend_args(model_dir))
    assert code == 0, err
    base = ["detect", "--key", keyfile, "--input", default_gen, "--calibration", cal, "--json", *backend_args(model_dir)]
    code, out, err = run(capsys, *base, "--alpha", "0.01")
    line = one_error_line(code, err)
    assert "made at alpha=0.05" in line and "--alpha 0.01" in line and "drop --alpha" in line and out == ""
    code, out, err = run(capsys, *base)  # no --alpha: the calibration's
    assert code == 0, err
    assert {json.loads(x)["alpha"] for x in out.splitlines()} == {0.05}
    code, out, err = run(capsys, *base, "--alpha", "0.01", "--any-calibration-alpha")
    assert code == 0, err
    assert {json.loads(x)["alpha"] for x in out.splitlines()} == {0.01}
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", default_gen, "--json", *backend_args(model_dir))
    assert code == 0 and {json.loads(x)["alpha"] for x in out.splitlines()} == {0.01}  # no calibration: 0.01


# ---------------------------------------------------------------- no third-party bars in a log

BARS_MODULE = '''
import sys, types
from sketchwm.cli import main
from sketchwm.hookspecs import hookimpl

def bars(args):
    from transformers.utils.logging import tqdm as hf_tqdm  # the bar of "Loading weights"
    from tqdm import tqdm

    for _ in hf_tqdm(range(103), desc="Loading weights"):
        pass
    for _ in tqdm(range(10), desc="third-party work"):
        pass
    return 0

plugin = types.ModuleType("bars_plugin")

def sketchwm_register_commands(subparsers, parents):
    subparsers.add_parser("bars", parents=parents, help="draw third-party bars").set_defaults(func=bars)

plugin.sketchwm_register_commands = hookimpl(sketchwm_register_commands)
if sys.argv[1:] == ["direct"]:
    sys.exit(bars(None))
sys.argv = ["sketchwm", "bars"]
sys.exit(main(plugins=[plugin]))
'''


def test_third_party_progress_bars_are_silent_when_stderr_is_not_a_terminal(tmp_path):
    """Hugging Face's ``Loading weights`` bar (and any tqdm bar) on a piped stderr: drawn when the same code
    runs outside the CLI, silent under it."""
    (tmp_path / "bars_cli.py").write_text(BARS_MODULE)
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    env["SKETCHWM_CACHE_DIR"] = str(tmp_path / "cache")
    for var in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
        env.pop(var, None)
    direct = subprocess.run([cli_cmd()[0], "-m", "bars_cli", "direct"], env=env, capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0 and "Loading weights" in direct.stderr and "third-party work" in direct.stderr
    proc = subprocess.run([cli_cmd()[0], "-m", "bars_cli"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Loading weights" not in proc.stderr and "%|" not in proc.stderr, proc.stderr[-2000:]


# ---------------------------------------------------------------- outputs to a device or a pipe
def test_an_output_that_is_a_pipe_is_written_in_place_never_replaced(tmp_path):
    """``--out /dev/null`` or a FIFO: renaming a temporary file over it would replace the device with a
    regular file (for root, /dev/null itself). A FIFO stands in for the device here."""
    import stat
    import threading

    from sketchwm.io import write_jsonl_atomic

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)  # blocks if never opened
    reader.start()
    write_jsonl_atomic(str(fifo), [{"text": "a"}, {"text": "b"}])
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [json.loads(x) for x in got[0].decode().splitlines()] == [{"text": "a"}, {"text": "b"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo"]  # no temporary file left
