"""Fuzzing the CLI and the public API with hypothesis (issue 16, "Must show").

Properties checked on every example:
  * no traceback on stderr, and the exit status is 0 (accepted) or 2 (the user's input) — never 1;
  * a failure prints exactly one line, ``sketchwm...: error: ...``;
  * no pre-existing file (key, outputs, inputs) is modified by a failed command;
  * the public API raises only :class:`sketchwm.errors.SketchwmError` on bad input.

Inputs: random bytes and encodings (UTF-8/16/32 with and without BOM, Latin-1, CP1252), empty,
short and huge texts, directories, unreadable paths, truncated JSONL, wrong key files, and
NaN/±inf/negative/zero/huge values in every numeric option and in scheme/sampler/backend config
fields. The CLI's ``main()`` runs in-process on the tiny random BERT (vocabulary 120), so each
example takes a fraction of a second. Example counts are bounded per test (``N_*`` below; the total
is printed with ``pytest --hypothesis-show-statistics``).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_tiny import GEN_SMALL, save_tiny_model, tiny_args
from sketchwm.cli import main
from sketchwm.errors import SketchwmError

N_INPUTS, N_OPTIONS, N_CONFIG, N_KEYS, N_API = 40, 40, 30, 25, 40
FUZZ = settings(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

WEIRD_NUMBERS = ["nan", "NaN", "inf", "-inf", "Infinity", "0", "-0", "-1", "-0.5", "1e-320", "1e308", "-1e308",
                 str(2**63), str(2**64), "", "x", "0x10", "1_000", " 3", "2.5", "1", "3"]
JSON_WEIRD = [float("nan"), float("inf"), float("-inf"), 0, -1, -0.5, 0.0, 1e-320, 1e308, 2**63, "", None, [], {}]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A directory with the tiny model, a 0600 key, a generated JSONL and plain texts."""
    root = tmp_path_factory.mktemp("fuzz")
    model = save_tiny_model(root / "model")
    key = root / "wm.key"
    assert main(["keygen", "--out", str(key)]) == 0
    gen = root / "gen.jsonl"
    assert main(["generate", "--key", str(key), "--prompt", "the water", "--prompt", "one day", "--out", str(gen),
                 *GEN_SMALL, *tiny_args(model)]) == 0
    return {"root": root, "model": model, "key": key, "gen": gen}


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and os.access(p, os.R_OK):
            out[str(p)] = p.read_bytes()
    return out


def check_run(args, capsys, root: Path, may_write: tuple[Path, ...] = ()):
    """Run main(args); assert the error-path properties; return the exit status."""
    before = snapshot(root)
    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    assert code in (0, 2), (code, cap.err)
    if code == 2:
        lines = [ln for ln in cap.err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("sketchwm") and ": error: " in lines[0], cap.err
    after = snapshot(root)
    writable = {str(p) for p in may_write} if code == 0 else set()
    changed = [p for p in before if p not in writable and after.get(p) != before[p]]
    assert not changed, (changed, cap.err)
    return code


ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252"]


@st.composite
def input_bytes(draw):
    kind = draw(st.sampled_from(["bytes", "encoded", "jsonl", "truncated", "empty", "huge"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "empty":
        return draw(st.sampled_from([b"", b"\n", b"   \n\t", b"\x00"]))
    text = draw(st.text(max_size=300))
    if kind == "encoded":
        return text.encode(draw(st.sampled_from(ENCODINGS)), errors="replace")
    if kind == "huge":
        from sketchwm.testing import tiny_texts

        return (" ".join(tiny_texts(1, 40, seed=draw(st.integers(0, 9)))) * draw(st.integers(50, 400))).encode()
    recs = [{"text": draw(st.one_of(st.text(max_size=200), st.integers(), st.none()))} for _ in range(draw(st.integers(1, 4)))]
    raw = "".join(json.dumps(r) + "\n" for r in recs).encode()
    if kind == "truncated":
        raw = raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    return raw


@settings(FUZZ, max_examples=N_INPUTS)
@given(data=input_bytes(), how=st.sampled_from(["file", "stdin", "dir", "missing", "unreadable", "under-a-file"]),
       cmd=st.sampled_from(["detect", "calibrate", "attack", "generate"]))
def test_fuzz_inputs(env, capsys, monkeypatch, data, how, cmd):
    root = env["root"]
    with tempfile.TemporaryDirectory(dir=root) as d:
        d = Path(d)
        path: Path | str = d / "input.txt"
        if how == "dir":
            path = d
        elif how != "missing":
            (d / "input.txt").write_bytes(data)
            if how == "unreadable":
                (d / "input.txt").chmod(0)
        if how == "under-a-file":  # unreadable even for root: a path through a regular file
            path = d / "input.txt" / "x"
        if how == "stdin":
            path = "-"
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        out = d / "existing.out"
        out.write_text("precious\n")
        k = ["--key", env["key"]]
        args = {
            "detect": ["detect", *k, "--input", path, *tiny_args(env["model"])],
            "calibrate": ["calibrate", *k, "--input", path, "--out", out, "--alpha", "0.4", *tiny_args(env["model"])],
            "attack": ["attack", "--attack", "delete-random", "--strength", "0.2", "--input", path, "--output", out,
                       "--quiet"],
            "generate": ["generate", *k, "--prompts", path, "--out", out, *GEN_SMALL, *tiny_args(env["model"])],
        }[cmd]
        # (as root, "unreadable" files are readable after all, hence "under-a-file" too)
        check_run(args, capsys, root, may_write=(out,))
        if how == "unreadable":
            (d / "input.txt").chmod(0o600)


NUMERIC = {
    "generate": ["--seed", "--gen-length", "--steps", "--block-length", "--temperature", "--batch-size"],
    "detect": ["--alpha"],
    "calibrate": ["--alpha", "--batch-size", "--seed", "--prompt-offset", "--n-samples", "--gen-length"],
    "attack": ["--strength", "--seed", "--batch-size"],
    "demo": ["--n-prompts", "--n-null", "--gen-length", "--alpha", "--seed"],
}


@settings(FUZZ, max_examples=N_OPTIONS)
@given(cmd=st.sampled_from(sorted(NUMERIC)), data=st.data())
def test_fuzz_numeric_options(env, capsys, cmd, data):
    opt = data.draw(st.sampled_from(NUMERIC[cmd]))
    value = data.draw(st.sampled_from(WEIRD_NUMBERS))
    root, k = env["root"], ["--key", env["key"]]
    with tempfile.TemporaryDirectory(dir=root) as d:
        out = Path(d) / "existing.out"
        out.write_text("precious\n")
        texts = Path(d) / "texts.jsonl"
        from sketchwm.testing import tiny_texts

        texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in tiny_texts(4, 30, seed=1)))
        base = {
            "generate": ["generate", *k, "--prompt", "the water", "--out", out, *GEN_SMALL, *tiny_args(env["model"])],
            "detect": ["detect", *k, "--input", env["gen"]],
            "calibrate": ["calibrate", *k, "--input", texts, "--out", out, "--alpha", "0.4", *tiny_args(env["model"])],
            "attack": ["attack", "--attack", "delete-random", "--strength", "0.2", "--input", env["gen"], "--output", out,
                       "--quiet"],
            # demo would run the default model for minutes: only its option parsing is fuzzed (a valid
            # value goes with an invalid --alpha, so the run stops at argument parsing)
            "demo": ["demo", "--alpha", "0", "--quiet"],
        }[cmd]
        if cmd == "generate" and opt in ("--gen-length", "--steps", "--block-length") and value.strip().lstrip("+").isdigit() \
                and int(value) > 64:
            value = "-1"  # a valid huge length would take long on CPU; huge lengths are refused by max_length anyway
        code = check_run([*base, opt, value], capsys, root, may_write=(out,))
        if cmd == "demo":
            assert code == 2


CONFIG_FIELDS = [
    ("scheme", "delta"), ("scheme", "null_margin"), ("scheme", "late_fraction"), ("scheme", "min_tokens"),
    ("scheme", "direction_index"), ("sketch", "d"), ("sketch", "w"), ("sketch", "exclude_top"), ("score", "gamma"),
    ("sampler", "gen_length"), ("sampler", "steps"), ("sampler", "block_length"), ("sampler", "temperature"),
    ("sampler", "top_p"), ("backend", "max_length"),
]


@settings(FUZZ, max_examples=N_CONFIG)
@given(field=st.sampled_from(CONFIG_FIELDS), value=st.sampled_from(JSON_WEIRD), cmd=st.sampled_from(["generate", "detect"]))
def test_fuzz_config_fields(env, capsys, field, value, cmd):
    where, name = field
    if where in ("sketch", "scheme") and name in ("d", "w", "exclude_top", "min_tokens", "direction_index") \
            and isinstance(value, (int, float)) and value > 10**6:
        value = -1  # a valid huge table size is a memory request, not an input error
    scheme = {"prior": {"source": "uniform"}}
    sampler = {"gen_length": 32, "steps": 8, "block_length": 32}
    backend = {"path": str(env["model"]), "device": "cpu"}
    if where == "scheme":
        scheme[name] = value
    elif where == "sketch":
        scheme["sketch"] = {"name": "count-sketch", "params": {"d": 2, "w": 64, "counting": "presence", name: value}}
    elif where == "score":
        scheme["score"] = {"name": "penalized", "params": {name: value}}
    elif where == "sampler":
        sampler[name] = value
    else:
        backend[name] = value
    cfg = {"scheme": {"name": "global-sketch", "params": scheme}, "backend": {"name": "hf-masked-lm", "params": backend},
           "sampler": sampler}
    root = env["root"]
    with tempfile.TemporaryDirectory(dir=root) as d:
        cfg_path = Path(d) / "cfg.json"
        cfg_path.write_text(json.dumps(cfg))  # NaN/Infinity as JSON extensions, as a user's tool may write them
        out = Path(d) / "existing.out"
        out.write_text("precious\n")
        args = (["generate", "--key", env["key"], "--prompt", "one day", "--out", out, "--quiet", "--config", cfg_path]
                if cmd == "generate" else ["detect", "--key", env["key"], "--input", env["gen"], "--config", cfg_path])
        check_run(args, capsys, root, may_write=(out,))


@settings(FUZZ, max_examples=N_KEYS)
@given(content=st.one_of(st.binary(max_size=80), st.text(alphabet="0123456789abcdefXYZ \n", max_size=80)),
       mode=st.sampled_from([0o600, 0o400, 0o640, 0o644, 0o666]), kind=st.sampled_from(["file", "dir", "missing", "env"]))
def test_fuzz_key_files(env, capsys, monkeypatch, content, mode, kind):
    root = env["root"]
    with tempfile.TemporaryDirectory(dir=root) as d:
        kp = Path(d) / "k.key"
        if kind == "dir":
            kp = Path(d)
        elif kind != "missing":
            kp.write_bytes(content if isinstance(content, bytes) else content.encode())
            kp.chmod(mode)
        if kind == "env":
            text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
            monkeypatch.setenv("SKETCHWM_KEY", text.replace("\x00", "") or "x")
            args = ["detect", "--input", env["gen"]]
        else:
            args = ["detect", "--key", kp, "--input", env["gen"]]
        check_run(args, capsys, root)
        monkeypatch.delenv("SKETCHWM_KEY", raising=False)


@settings(FUZZ, max_examples=N_API)
@given(texts=st.lists(st.one_of(st.text(max_size=120), st.just(""), st.integers()), min_size=0, max_size=5),
       alpha=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.01, 0.5])),
       hexkey=st.text(alphabet="0123456789abcdefg", max_size=70), per_item=st.booleans())
def test_fuzz_public_api(tiny, texts, alpha, hexkey, per_item):
    from sketchwm import Watermarker, WatermarkKey

    try:
        key = WatermarkKey.from_hex(hexkey)
    except SketchwmError:
        key = WatermarkKey(b"fuzz-key-0123456789abcdef")
    wm = Watermarker(key, {"scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}}}, backend=tiny)
    try:
        res = wm.detect(texts, alpha=alpha, per_item=per_item)
    except SketchwmError:
        return
    assert len(res) == len(texts)
    for r in res.to_records():
        json.dumps(r, allow_nan=False)  # records are strict JSON (no NaN for unscored texts)
