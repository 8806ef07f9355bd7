"""The ``sketchwm`` command line: verbs, JSON output, one-line errors, nothing written is lost."""

import json
import os
import stat
import subprocess
import sys

import pytest

from sketchwm.cli import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_keygen_mode_and_no_overwrite(tmp_path, capsys):
    k = tmp_path / "wm.key"
    code, _, err = run(["keygen", "--out", str(k)], capsys)
    assert code == 0 and stat.S_IMODE(os.stat(k).st_mode) == 0o600
    secret = k.read_text().strip()
    assert secret not in err
    code, _, err = run(["keygen", "--out", str(k)], capsys)
    assert code == 2 and "refusing to overwrite" in err and k.read_text().strip() == secret


def test_generate_detect_round_trip_on_default_model(tmp_path, capsys):
    # a fixed key, so the outcome is the same on every run: a keygen'd key made this a draw from the
    # default's p-value law at 64 tokens, whose tail passes p = 0.01 for some keys (keygen: above)
    k = tmp_path / "wm.key"
    k.write_text("5a" * 32 + "\n")
    k.chmod(0o600)
    out = tmp_path / "gen.jsonl"
    code, _, err = run(["generate", "--key", str(k), "--prompt", "The old house on the hill", "--prompt", "In the beginning",
                        "--gen-length", "64", "--steps", "32", "--block-length", "64", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) == 2 and all(r["watermarked"] for r in recs)
    code, stdout, err = run(["detect", "--key", str(k), "--input", str(out), "--json"], capsys)
    assert code == 0, err
    res = [json.loads(x) for x in stdout.splitlines()]
    assert len(res) == 2 and all(r["p_value"] < 0.01 for r in res)
    assert all(r["key_fingerprint"] and len(r["key_fingerprint"]) == 16 for r in res)
    code, stdout, _ = run(["detect", "--key", str(k), "--input", str(out)], capsys)
    assert code == 0 and "p-value" in stdout and len(stdout.splitlines()) == 5  # header, 2 texts, 2 lines of rule and key


@pytest.mark.parametrize(
    "args,msg",
    [
        (["generate", "--prompt", "hello"], "a watermark key is required"),
        (["detect", "--key", "/nonexistent.key", "--input", "-"], "key file not found"),
        (["detect", "--key", "KEY", "--input", "/nonexistent.txt"], "input file not found"),
        (["detect", "--key", "KEY", "--input", "EMPTY"], "is empty"),
        (["detect", "--key", "KEY", "--input", "SHORT"], "at least 16"),
        (["generate", "--key", "KEY", "--prompt", "hi", "--scheme", "global-skech"], "did you mean 'global-sketch'"),
        (["generate", "--key", "KEY", "--prompt", "hi", "--scheme-params", '{"nope": 1}'], "unknown field 'nope'"),
        (["detect", "--key", "KEY", "--input", "BADJSONL"], "not valid JSON"),
        (["detect", "--key", "KEY", "--input", "WRONGTOK"], "generated with tokenizer"),
    ],
)
def test_bad_input_gives_one_line_error(tmp_path, capsys, args, msg):
    key = tmp_path / "k.key"
    main(["keygen", "--out", str(key)])
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "short.txt").write_text("too short")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{broken\n')
    (tmp_path / "tok.jsonl").write_text(json.dumps({"text": "a long enough text " * 5, "tokenizer": "0123456789abcdef"}) + "\n")
    subst = {"KEY": str(key), "EMPTY": str(tmp_path / "empty.txt"), "SHORT": str(tmp_path / "short.txt"),
             "BADJSONL": str(tmp_path / "bad.jsonl"), "WRONGTOK": str(tmp_path / "tok.jsonl")}
    capsys.readouterr()
    code, _, err = run([subst.get(a, a) for a in args], capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("sketchwm: error:") and msg in lines[0], err
    assert "Traceback" not in err


def test_failed_generate_does_not_clobber_existing_output(tmp_path, capsys):
    out = tmp_path / "keep.jsonl"
    out.write_text('{"text": "precious"}\n')
    code, _, _ = run(["generate", "--prompt", "x", "--out", str(out)], capsys)  # no key → error
    assert code == 2 and out.read_text() == '{"text": "precious"}\n'


def test_plugins_json_lists_every_kind(capsys):
    code, stdout, _ = run(["plugins", "--json"], capsys)
    d = json.loads(stdout)
    assert code == 0 and {"sketch", "score", "backend", "scheme", "attack"} <= set(d)
    assert "count-sketch" in [x["name"] for x in d["sketch"]]


def test_console_script_entry_point():
    r = subprocess.run([sys.executable, "-m", "sketchwm.cli", "plugins"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "global-sketch" in r.stdout
