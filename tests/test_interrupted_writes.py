"""Interrupting ``attack`` and ``generate`` mid-way (SIGINT and SIGKILL) loses nothing (issue 16, "Must show").

Each command runs in a subprocess on the tiny random BERT, writing over an existing output file
next to other existing files. ``attack`` streams its records to a temporary file: the signal is
sent once that file has grown (so the write is genuinely half done). ``generate`` writes after
sampling: the signal is sent 15 s after the start, while it samples 4,500 prompts. Every
pre-existing file must be byte-for-byte intact afterwards; after SIGINT the command exits 130 and
leaves no temporary file (SIGKILL cannot clean up, so a stray ``.NAME.*.tmp`` may remain).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_tiny import GEN_SMALL, cli_cmd, save_tiny_model, sigint_default, subprocess_env, tiny_args
from sketchwm.cli import main


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupt")
    model = save_tiny_model(root / "model")
    key = root / "wm.key"
    assert main(["keygen", "--out", str(key)]) == 0
    gen = root / "gen.jsonl"
    assert main(["generate", "--key", str(key), "--prompt", "the water", "--prompt", "one day", "--out", str(gen),
                 *GEN_SMALL, *tiny_args(model)]) == 0
    recs = [json.loads(x) for x in gen.read_text().splitlines()]
    many = root / "many.jsonl"
    many.write_text("".join(json.dumps(recs[i % 2]) + "\n" for i in range(20000)))
    return {"root": root, "model": model, "key": key, "many": many}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.name.endswith(".tmp")}


def temp_files(d: Path, name: str) -> list[Path]:
    return sorted(d.glob(f".{name}.*.tmp"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("cmd", ["attack", "generate"])
def test_interrupted_write_keeps_every_existing_file(setup, tmp_path, cmd, sig):
    out = tmp_path / "out.jsonl"
    out.write_text('{"text": "precious previous results"}\n' * 300)
    (tmp_path / "neighbour.txt").write_text("untouched")
    before = {**snapshot(setup["root"]), **snapshot(tmp_path)}
    if cmd == "attack":
        args = cli_cmd("attack", "--attack", "delete-random", "--strength", "0.3", "--input", str(setup["many"]),
                       "--output", str(out), "--batch-size", "1", "--quiet")
    else:
        prompts = tmp_path / "prompts.txt"
        prompts.write_text("the water\none day\nwe can\n" * 1500)
        before[str(prompts)] = prompts.read_bytes()
        args = cli_cmd("generate", "--key", str(setup["key"]), "--prompts", str(prompts), "--out", str(out),
                       "--batch-size", "4", *GEN_SMALL, *tiny_args(setup["model"]))
    proc = subprocess.Popen(args, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=sigint_default)
    deadline = time.monotonic() + 240
    mid_write = False
    while time.monotonic() < deadline and proc.poll() is None:
        tmps = temp_files(tmp_path, out.name)
        if tmps and tmps[0].exists() and tmps[0].stat().st_size > 2000:
            mid_write = True
            break
        if cmd == "generate" and time.monotonic() > deadline - 225:  # 15 s in: imports done, sampling
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"{cmd} finished before it could be interrupted: {proc.stderr.read().decode()[-500:]}"
    if cmd == "attack":
        assert mid_write, "the attack never started writing"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    after = {**snapshot(setup["root"]), **snapshot(tmp_path)}
    assert after == before, [p for p in before if after.get(p) != before[p]]
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
        assert temp_files(tmp_path, out.name) == []
    else:
        assert proc.returncode == -signal.SIGKILL
