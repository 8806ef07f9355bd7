"""The CLI as users meet it: one error path, per-item results, keys, provenance, explanations.

Runs the CLI's ``main()`` in-process on the tiny random BERT saved to a directory (see ``cli_tiny``).
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys

import pytest
import torch

from cli_tiny import NON_DEFAULT, tiny_args
from cli_tiny import generated, keyfile, model_dir, run  # noqa: F401 - shared fixtures
from sketchwm.cli import build_parser, main

def one_line_error(code, err, needle):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "error:" in lines[0] and needle in lines[0], err
    assert "Traceback" not in err


# ---------------------------------------------------------------- one error path (issue 16, "what was seen")
@pytest.mark.parametrize("case,needle", [
    ("stdin-not-utf8", "not UTF-8"),
    ("input-dir", "is a directory"),
    ("keygen-missing-dir", "does not exist"),
    ("batch-size-0", "--batch-size"),
    ("batch-size-neg", "--batch-size"),
    ("temperature-inf", "--temperature"),
    ("temperature-nan", "--temperature"),
    ("alpha-nan", "--alpha"),
    ("alpha-1", "--alpha"),
    ("gen-length-0", "--gen-length"),
    ("seed-huge", "--seed"),
    ("hex-on-argv", "refusing a secret on the command line"),
    ("key-0644", "chmod 600"),
    ("key-dir", "is a directory"),
    ("out-missing-dir", "does not exist"),
    ("attack-batch-0", "--batch-size"),
    ("attack-strength-nan", "--strength"),
    ("truncated-jsonl", "truncated"),
    ("scheme-params-nan", "delta"),
])
def test_user_errors_are_one_line_exit_2(case, needle, tmp_path, keyfile, generated, model_dir, capsys, monkeypatch):
    bad_key = tmp_path / "open.key"
    bad_key.write_text(keyfile.read_text())
    bad_key.chmod(0o644)
    trunc = tmp_path / "trunc.jsonl"
    trunc.write_text(generated.read_text()[:-40])
    k = ["--key", keyfile]
    args = {
        "stdin-not-utf8": ["detect", *k, "--input", "-"],
        "input-dir": ["detect", *k, "--input", tmp_path],
        "keygen-missing-dir": ["keygen", "--out", tmp_path / "nope" / "k.key"],
        "batch-size-0": ["generate", *k, "--prompt", "x", "--batch-size", "0"],
        "batch-size-neg": ["generate", *k, "--prompt", "x", "--batch-size", "-1"],
        "temperature-inf": ["generate", *k, "--prompt", "x", "--temperature", "inf"],
        "temperature-nan": ["generate", *k, "--prompt", "x", "--temperature", "nan"],
        "alpha-nan": ["detect", *k, "--input", generated, "--alpha", "nan"],
        "alpha-1": ["calibrate", *k, "--out", tmp_path / "c.json", "--alpha", "1"],
        "gen-length-0": ["generate", *k, "--prompt", "x", "--gen-length", "0"],
        "seed-huge": ["generate", *k, "--prompt", "x", "--seed", str(2**70)],
        "hex-on-argv": ["detect", "--key", "00" * 32, "--input", generated],
        "key-0644": ["detect", "--key", bad_key, "--input", generated],
        "key-dir": ["detect", "--key", tmp_path, "--input", generated],
        "out-missing-dir": ["generate", *k, "--prompt", "x", "--out", tmp_path / "nope" / "o.jsonl"],
        "attack-batch-0": ["attack", "--attack", "delete-random", "--strength", "0.1", "--input", generated,
                           "--batch-size", "0"],
        "attack-strength-nan": ["attack", "--attack", "delete-random", "--strength", "nan", "--input", generated],
        "truncated-jsonl": ["detect", *k, "--input", trunc],
        "scheme-params-nan": ["generate", *k, "--prompt", "x", *tiny_args(model_dir, delta=float("nan"))],
    }[case]
    if case == "stdin-not-utf8":
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe\x00 not utf-8")))
    before = {p: p.read_bytes() for p in (keyfile, generated)}
    code, _, err = run(capsys, *args)
    one_line_error(code, err, needle)
    assert {p: p.read_bytes() for p in before} == before


def test_debug_shows_the_traceback(tmp_path, keyfile, capsys):
    code, _, err = run(capsys, "--debug", "detect", "--key", keyfile, "--input", tmp_path)
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("sketchwm: error:")


def test_a_bug_is_a_traceback_with_exit_1(monkeypatch, capsys):
    import sketchwm.cli as cli

    def boom(args):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(cli, "cmd_plugins", boom)
    code, _, err = run(capsys, "plugins")
    assert code == 1 and "Traceback" in err and "simulated bug" in err and "internal error" in err


def test_temperature_inf_refused_by_the_engine_too(tiny):
    from sketchwm.engine import MaskedDiffusionSampler
    from sketchwm.errors import ConfigError

    for bad in (float("inf"), float("nan"), -1.0):
        with pytest.raises(ConfigError, match="temperature"):
            MaskedDiffusionSampler(tiny, {"gen_length": 32, "block_length": 32, "steps": 8, "temperature": bad})


def test_every_option_has_help_and_version(capsys):
    def missing_help(parser, path):  # every option of every (nested) sub-command
        out = []
        for a in parser._actions:
            if a.help in (None, "") and a.dest != "help":
                out.append(f"{path} {' '.join(a.option_strings) or a.dest}")
            if a.__class__.__name__ == "_SubParsersAction":
                for name, p in a.choices.items():
                    out += missing_help(p, f"{path} {name}".strip())
        return out

    missing = missing_help(build_parser(), "")
    assert not missing, missing
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("sketchwm ")


# ---------------------------------------------------------------- keys
def test_key_from_env_and_insecure_override(tmp_path, keyfile, generated, capsys, monkeypatch):
    code, out_file, _ = run(capsys, "detect", "--key", keyfile, "--input", generated, "--json")
    expected = [json.loads(x)["score"] for x in out_file.splitlines()]
    monkeypatch.setenv("SKETCHWM_KEY", keyfile.read_text().strip())
    code, out_env, err = run(capsys, "detect", "--input", generated, "--json")
    assert code == 0, err
    assert [json.loads(x)["score"] for x in out_env.splitlines()] == expected
    monkeypatch.delenv("SKETCHWM_KEY")
    open_key = tmp_path / "open.key"
    open_key.write_text(keyfile.read_text())
    open_key.chmod(0o644)
    code, out_ins, err = run(capsys, "detect", "--key", open_key, "--insecure-key-permissions", "--input", generated, "--json")
    assert code == 0, err
    assert [json.loads(x)["score"] for x in out_ins.splitlines()] == expected
    monkeypatch.setenv("SKETCHWM_KEY_FILE", str(keyfile))
    code, _, err = run(capsys, "detect", "--input", generated, "--json")
    assert code == 0, err


def test_keygen_force_replaces_atomically_with_mode_0600(tmp_path, capsys):
    k = tmp_path / "k.key"
    assert main(["keygen", "--out", str(k)]) == 0
    first = k.read_text()
    assert main(["keygen", "--out", str(k), "--force"]) == 0
    assert k.read_text() != first and stat.S_IMODE(os.stat(k).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["k.key"]  # no temporary file left


# ---------------------------------------------------------------- per-item results
def test_one_short_text_does_not_abort_the_batch(tmp_path, keyfile, generated, capsys):
    recs = [json.loads(x) for x in generated.read_text().splitlines()]
    mixed = tmp_path / "mixed.jsonl"
    short = dict(recs[0], text="too short")
    mixed.write_text("".join(json.dumps(r) + "\n" for r in [recs[0], short, recs[1]]))
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", mixed, "--json")
    assert code == 0, err
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert "at least 16" in rows[1]["error"] and rows[1]["score"] is None and rows[1]["is_watermarked"] is None
    assert rows[0]["is_watermarked"] and rows[2]["is_watermarked"]
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", mixed, "--json", "--strict")
    assert code == 2 and len(out.splitlines()) == 3 and "1 of 3 texts could not be scored" in err
    code, out, _ = run(capsys, "detect", "--key", keyfile, "--input", mixed)
    assert code == 0 and "not scored" in out


def test_calibrate_leaves_out_unscorable_texts(tmp_path, keyfile, model_dir, capsys):
    from sketchwm.testing import tiny_texts

    texts = tiny_texts(12, 40, seed=3) + ["short", ""]
    inp = tmp_path / "null.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "cal.json"
    code, _, err = run(capsys, "calibrate", "--key", keyfile, "--input", inp, "--out", out, "--alpha", "0.2",
                       *tiny_args(model_dir))
    assert code == 0, err
    cal = json.loads(out.read_text())
    assert cal["n_skipped"] == 2 and "2 texts could not be scored" in err
    assert cal["provenance"]["config"]["backend"]["name"] == "hf-masked-lm"
    code, _, err = run(capsys, "calibrate", "--key", keyfile, "--input", inp, "--out", out, "--alpha", "0.2", "--strict",
                       *tiny_args(model_dir))
    assert code == 2 and ("text 12" in err or "text 13 is empty" in err)


# ---------------------------------------------------------------- provenance
def test_records_carry_provenance(generated, keyfile):
    from sketchwm.keys import WatermarkKey

    rec = json.loads(generated.read_text().splitlines()[0])
    prov = rec["provenance"]
    assert prov["config"]["scheme"]["params"]["delta"] == 1.5
    assert prov["config"]["scheme"]["params"]["sketch"]["params"]["w"] == 64
    assert prov["config"]["sampler"]["gen_length"] == 32 and prov["seeds"] == {"generate": 5}
    assert prov["key_fingerprint"] == WatermarkKey.from_file(keyfile).fingerprint
    assert keyfile.read_text().strip() not in generated.read_text()
    assert prov["sketchwm_version"] and prov["model_id"] and prov["tokenizer"]


def test_detect_uses_the_recorded_configuration(tmp_path, keyfile, generated, model_dir, capsys):
    """Must show: texts generated with a non-default configuration get the same decisions as when that
    configuration is passed by hand (and the default configuration would score them differently)."""
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", generated, "--json")
    assert code == 0, err
    from_records = [json.loads(x) for x in out.splitlines()]
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({
        "scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}, **NON_DEFAULT}},
        "backend": {"name": "hf-masked-lm", "params": {"path": str(model_dir), "device": "cpu"}}}))
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", generated, "--json", "--config", cfg)
    assert code == 0, err
    by_hand = [json.loads(x) for x in out.splitlines()]
    assert [r["is_watermarked"] for r in from_records] == [r["is_watermarked"] for r in by_hand]
    assert [r["score"] for r in from_records] == pytest.approx([r["score"] for r in by_hand], rel=1e-12)
    assert all(r["is_watermarked"] for r in from_records)
    assert from_records[0]["provenance"]["config_source"] == "records"
    assert by_hand[0]["provenance"]["config_source"] == "--config"
    default_cfg = tmp_path / "default.json"
    default_cfg.write_text(json.dumps({
        "scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}},
        "backend": {"name": "hf-masked-lm", "params": {"path": str(model_dir), "device": "cpu"}}}))
    code, out, _ = run(capsys, "detect", "--key", keyfile, "--input", generated, "--json", "--config", default_cfg)
    assert [json.loads(x)["score"] for x in out.splitlines()] != pytest.approx([r["score"] for r in by_hand])


def test_contradicting_and_mixed_configurations_are_refused(tmp_path, keyfile, generated, capsys):
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", generated, "--scheme-params", '{"delta": 0.75}')
    one_line_error(code, err, "scheme.params.delta")
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", generated, "--scheme", "kgw")
    one_line_error(code, err, "scheme.name")
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", generated, "--scheme-params", '{"delta": 1.5}')
    assert code == 0, err  # agreeing with the records is fine
    recs = [json.loads(x) for x in generated.read_text().splitlines()]
    recs[1]["provenance"]["config"]["scheme"]["params"]["delta"] = 2.0
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", mixed)
    one_line_error(code, err, "scheme.params.delta")


def test_attack_records_recount_tokens_and_keep_both_seeds(tmp_path, generated, capsys):
    out = tmp_path / "att.jsonl"
    code, _, err = run(capsys, "attack", "--attack", "delete-random", "--strength", "0.3", "--input", generated,
                       "--output", out, "--seed", "9", "--quiet")
    assert code == 0, err
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    from sketchwm.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    for r in recs:
        assert r["seed"] == 5 and r["attack_seed"] == 9
        assert r["provenance"]["seeds"] == {"generate": 5, "attack": 9}
        assert r["n_tokens"] == len(tok.encode(r["text"], add_special_tokens=False)) < r["original_n_tokens"]


# ---------------------------------------------------------------- decisions explain themselves
def test_explanation_when_p_value_and_decision_disagree():
    from sketchwm.detection import DetectionResult

    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    res = DetectionResult(
        score=t(3.0, 6.0), z=t(3.0, 6.0), p_value=t(1e-4, 1e-9), threshold=t(4.0, 4.0),
        is_watermarked=torch.tensor([False, True]), n_tokens=torch.tensor([100, 100]),
        threshold_source="max(calibrated, analytic)", alpha=0.01, key_fingerprint="0" * 16, scheme="global-sketch",
        p_value_method="normal approximation 1-Phi(z)", tau_analytic=t(2.3, 2.3), tau_calibrated=t(4.0, 4.0))
    a, b = res.to_records()
    assert a["decided_by"] == "calibrated tau_N" and "stricter" in a["explanation"] and "normal approximation" in a["explanation"]
    assert "max(tau_N, tau_alpha)" in b["rule"]
    assert b["explanation"].startswith("watermarked: score 6 passes the threshold 4 (calibrated tau_N at alpha 0.01)")
    assert "stricter" not in b["explanation"]  # p and decision agree: nothing to reconcile


# ---------------------------------------------------------------- atomic writes, plugin listing
def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    from sketchwm.io import atomic_write, write_jsonl_atomic

    p = tmp_path / "out.jsonl"
    p.write_text("precious\n")

    def records():
        yield {"text": "new"}
        raise RuntimeError("interrupted half-way")

    with pytest.raises(RuntimeError):
        write_jsonl_atomic(str(p), records())
    assert p.read_text() == "precious\n" and os.listdir(tmp_path) == ["out.jsonl"]
    write_jsonl_atomic(str(p), [{"text": "more"}], append=True)
    assert p.read_text() == 'precious\n{"text": "more"}\n'
    with pytest.raises(Exception, match="refusing to overwrite"):
        with atomic_write(p, overwrite=False) as fh:
            fh.write("x")
    assert p.read_text().startswith("precious")


def test_plugins_listing_is_cached_and_matches_the_registry(tmp_path, monkeypatch, capsys):
    from sketchwm.plugin_index import describe_plugins
    from sketchwm.registry import get_registry

    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path))
    fresh = describe_plugins()
    assert fresh == get_registry().describe() and len(list(tmp_path.glob("plugins-*.json"))) == 1
    code, out, _ = run(capsys, "plugins", "--json")
    assert code == 0 and json.loads(out) == fresh


def test_help_and_cached_plugins_do_not_import_torch(tmp_path):
    """Start-up: with their listings cached, `sketchwm --help`, `sketchwm attack --help` and `sketchwm plugins`
    import neither torch nor any plugin (the first `--help` after an install or edit imports the plugins
    once to list their sub-commands, as the first `plugins` does to list their components)."""
    import subprocess

    from cli_tiny import subprocess_env

    env = {**subprocess_env(), "SKETCHWM_CACHE_DIR": str(tmp_path)}
    probe = ("import sys, contextlib, io\nfrom sketchwm.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    main(sys.argv[1:])\n"
             "print(sorted(m for m in ('torch', 'transformers', 'pydantic', 'sketchwm_builtin') if m in sys.modules))")
    for args, heavy in ((["--help"], None), (["--help"], "[]"), (["attack", "--help"], "[]"), (["plugins"], None),
                        (["plugins"], "[]")):  # 2nd run: cache filled
        r = subprocess.run([sys.executable, "-c", probe, *args], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        if heavy is not None:
            assert r.stdout.strip().splitlines()[-1] == heavy, r.stdout


def test_demo_figures_say_how_they_were_made(tiny, key):
    from sketchwm.api import Watermarker
    from sketchwm.demo import run_demo

    wm = Watermarker(key, {"scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}}}, backend=tiny)
    res = run_demo(key=key, n_prompts=2, n_null=5, gen_length=32, alpha=0.3, seed=3, progress=False, watermarker=wm)
    prov = json.loads(json.dumps(res))["provenance"]
    assert prov["seeds"] == {"generate": 3, "calibrate": 4} and prov["config"]["sampler"]["gen_length"] == 32
    assert prov["key_fingerprint"] == key.fingerprint and prov["sketchwm_version"]
