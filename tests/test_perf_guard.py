"""The speed guard's machinery (benchmarks/perf_guard.py): its verdicts, its slowed copies, and a dry run
in which a 2x slowdown of the measured function fails. The product's own ratios are measured by the
guard itself (run from .ci/run), never asserted here."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

_PATH = Path(__file__).parents[1] / "benchmarks" / "perf_guard.py"


@pytest.fixture(scope="module")
def guard():
    sys.path.insert(0, str(_PATH.parent))
    spec = importlib.util.spec_from_file_location("perf_guard", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perf_guard"] = mod  # its dataclass resolves its module by name
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("perf_guard", None)


def test_verdicts(guard):
    assert guard.verdict(1.0, 1.2) == "ok"
    assert guard.verdict(1.7, 1.2) == "over budget"  # within 1.5 x 1.2 = 1.8
    assert guard.verdict(1.9, 1.2) == "FAIL"
    assert guard.verdict(3.0, 1.5, accepted=2.9) == "over budget"  # held to its accepted level
    assert guard.verdict(4.5, 1.5, accepted=2.9) == "FAIL"


def test_slowed_copy_runs_the_path_k_times(guard):
    calls = []
    assert guard.slowed(lambda: calls.append(1) or len(calls), 3)() == 3 and len(calls) == 3


def test_dry_run_with_a_doubled_path_fails(guard, monkeypatch, capsys):
    """Subject and reference sleep alike (the ratio is 1 whatever the machine's load); the guard passes,
    then --slow doubles the subject and the guard fails (2 > 1.5 x budget 1)."""
    nap = lambda: time.sleep(0.02)  # noqa: E731
    monkeypatch.setattr(guard, "BUILDERS", {"toy": lambda reg: [guard.Check("toy", 1.0, nap, nap, "sleep / sleep")]})
    monkeypatch.setattr("sketchwm.registry.get_registry", lambda: None)
    assert guard.main(["--repeats", "5"]) == 0
    assert guard.main(["--repeats", "5", "--slow", "toy=2"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "slowed 2x" in out
    with pytest.raises(SystemExit, match="names no selected check"):
        guard.main(["--slow", "nope=2"])
