"""Interrupting ``attack`` and ``generate`` mid-way (SIGINT and SIGKILL) loses nothing (issue 16, "Must show").

Each command runs in a subprocess on the tiny random BERT, writing over an existing output file
next to other existing files, with its stderr on a pseudo-terminal (as when a user presses Ctrl-C).
The signal is sent once the child shows it is mid-way, never after a fixed delay: ``attack``
streams its records to a temporary file, and is signalled once that file has grown (the write is
genuinely half done); ``generate`` writes after sampling, and is signalled once its progress bar
shows texts done (it is sampling 4,500 prompts). Every pre-existing file must be byte-for-byte
intact afterwards; after SIGINT the command exits 130 and leaves no temporary file (SIGKILL cannot
clean up, so a stray ``.NAME.*.tmp`` may remain). The 600 s deadline only bounds a broken run: a child starved
by a loaded machine still shows readiness before it, and the signal never depends on elapsed time.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
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


class _Drained(bytearray):
    """Everything read so far from a pseudo-terminal's master side (a thread keeps reading it)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: the child closed its side
                return
            if not chunk:
                return
            self.extend(chunk)

    def finish(self) -> bytes:
        self.thread.join(timeout=30)
        os.close(self.fd)
        return bytes(self)


def spawn_with_terminal_stderr(args: list[str]) -> tuple[subprocess.Popen, _Drained]:
    """Start ``args`` with stderr on a pseudo-terminal (its progress bars show) and drain it in a thread."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 0 columns: tqdm draws an empty bar
    try:
        proc = subprocess.Popen(args, env=subprocess_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=slave, preexec_fn=sigint_default)
    finally:
        os.close(slave)
    return proc, _Drained(master)


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
                       "--batch-size", "4", *[a for a in GEN_SMALL if a != "--quiet"], *tiny_args(setup["model"]))
    proc, err_bytes = spawn_with_terminal_stderr(args)
    deadline = time.monotonic() + 600
    ready = False
    while time.monotonic() < deadline and proc.poll() is None and not ready:
        if cmd == "attack":
            tmps = temp_files(tmp_path, out.name)
            ready = bool(tmps) and tmps[0].exists() and tmps[0].stat().st_size > 2000
        else:  # the progress bar shows texts done: sampling, long after start-up
            ready = re.search(rb"\| *[1-9][0-9]*/4500 ", bytes(err_bytes)) is not None
        time.sleep(0.05)
    assert proc.poll() is None, f"{cmd} finished before it could be interrupted: {bytes(err_bytes).decode()[-500:]}"
    assert ready, f"{cmd} never showed it was mid-way: {bytes(err_bytes).decode()[-500:]}"
    proc.send_signal(sig)
    proc.wait(timeout=300)  # bounds a broken run only
    err = err_bytes.finish().decode(errors="replace")
    after = {**snapshot(setup["root"]), **snapshot(tmp_path)}
    assert after == before, [p for p in before if after.get(p) != before[p]]
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
        assert temp_files(tmp_path, out.name) == []
    else:
        assert proc.returncode == -signal.SIGKILL


SPIN_MODULE = '''
import os, signal, sys, threading, types
from sketchwm.cli import main
from sketchwm.hookspecs import hookimpl

def spin(args):
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    exec("while True:\\n    pass")  # source text run by exec, as dataclasses do while a module is imported

plugin = types.ModuleType("spin_plugin")

def sketchwm_register_commands(subparsers, parents):
    subparsers.add_parser("spin", parents=parents, help="spin until interrupted").set_defaults(func=spin)

plugin.sketchwm_register_commands = hookimpl(sketchwm_register_commands)
sys.exit(main(["spin"], plugins=[plugin]))
'''


def test_ctrl_c_inside_exec_of_source_text_exits_130(tmp_path):
    """Run as ``python -m``, CPython ends a process with SIGINT (status -2) after a clean exit if a bare
    KeyboardInterrupt once crossed an ``exec`` of source text, as it does when Ctrl-C lands while an
    import builds a dataclass. The CLI's handler raises a subclass, so the status stays 130."""
    (tmp_path / "spin_cli.py").write_text(SPIN_MODULE)
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    env["SKETCHWM_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([cli_cmd()[0], "-m", "spin_cli"], env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_default)
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.strip().splitlines()[-1] == "sketchwm: interrupted; no output file was changed"
