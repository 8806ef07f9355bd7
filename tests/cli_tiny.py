"""Helpers for CLI tests on the tiny random BERT (saved once to a directory, loaded by path).

The CLI builds its backend from ``--backend hf-masked-lm --backend-params {"path": DIR}``; with the
tiny model (vocabulary 120) every command runs in well under a second, in-process or in a subprocess.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def save_tiny_model(directory: Path) -> Path:
    """Write :func:`sketchwm.testing.tiny_masked_lm` and its tokenizer to ``directory``."""
    from sketchwm.testing import tiny_masked_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_masked_lm(len(tok), seed=0).save_pretrained(str(directory))
    tok.save_pretrained(str(directory))
    return directory


def tiny_args(model_dir: Path, **scheme_params) -> list[str]:
    """CLI options selecting the tiny backend (on CPU) and a global-sketch scheme with a uniform prior."""
    params = {"prior": {"source": "uniform"}, **scheme_params}
    return ["--backend", "hf-masked-lm", "--backend-params", json.dumps({"path": str(model_dir), "device": "cpu"}),
            "--scheme", "global-sketch", "--scheme-params", json.dumps(params)]


GEN_SMALL = ["--gen-length", "32", "--steps", "8", "--block-length", "32", "--quiet"]


def subprocess_env() -> dict[str, str]:
    """Environment for ``python -m sketchwm.cli`` on this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks"),
                                          env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def sigint_default() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: restore SIGINT's default action.

    A shell without job control starts background commands (``cmd &``, ``nohup ... &``) with SIGINT
    ignored, children inherit that, and Python does not install its KeyboardInterrupt handler for a
    signal ignored at start-up: the interrupt tests would then test how CI was launched, not the CLI.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sketchwm.cli", *args]


# ---------------------------------------------------------------- shared fixtures of the in-process CLI tests
import pytest  # noqa: E402

from sketchwm.cli import main  # noqa: E402


NON_DEFAULT = {"sketch": {"name": "count-sketch", "params": {"d": 2, "w": 64, "counting": "presence"}}, "delta": 1.5}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory):
    """A key file written as ``keygen`` writes one (hex, mode 0600), with a fixed secret: the tests that
    read detections of its texts then give the same verdicts on every run (``keygen`` itself is tested
    in tests/test_cli.py)."""
    k = tmp_path_factory.mktemp("key") / "wm.key"
    k.write_text("c3" * 32 + "\n")
    k.chmod(0o600)
    return k


@pytest.fixture(scope="module")
def generated(tmp_path_factory, model_dir, keyfile):
    """4 watermarked texts generated with a NON-default scheme configuration (seed 5)."""
    out = tmp_path_factory.mktemp("gen") / "gen.jsonl"
    code = main(["generate", "--key", str(keyfile), "--prompt", "the water", "--prompt", "one day", "--prompt", "we can",
                 "--prompt", "a man said", "--seed", "5", "--out", str(out), *GEN_SMALL, *tiny_args(model_dir, **NON_DEFAULT)])
    assert code == 0
    return out


def run(capsys, *args):
    """Run the CLI in-process: (exit code, stdout, stderr)."""

    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err
