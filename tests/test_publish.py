"""Published benchmark sections are written by the command that measured them (sketchwm.bench.publish)."""

from __future__ import annotations

import json
import sys

import pytest

from sketchwm.bench.publish import figures, markers, regressions, run_and_publish, write_section


def test_section_replaced_and_rest_kept(tmp_path):
    p = tmp_path / "R.md"
    p.write_text("# Title\n\nhand-written intro\n", encoding="utf-8")
    write_section(p, "first", name="a")
    write_section(p, "other", name="b")
    write_section(p, "second", name="a")
    text = p.read_text(encoding="utf-8")
    start, end = markers("a")
    assert text.startswith("# Title\n\nhand-written intro\n")
    assert text.count(start) == 1 and "second" in text and "first" not in text and "other" in text
    assert text.index(start) < text.index("second") < text.index(end) < text.index(markers("b")[0])


def test_command_output_published_with_its_command(tmp_path):
    p = tmp_path / "R.md"
    p.write_text("intro\n", encoding="utf-8")
    cmd = [sys.executable, "-c", "print('tpr 0.97'); print('{\"x\": 1}')"]
    assert run_and_publish("demo", cmd, readme=p, echo=False) == 0
    text = p.read_text(encoding="utf-8")
    assert "tpr 0.97" in text and '{"x": 1}' in text and "-c" in text and "load average" in text


def test_failed_command_leaves_the_file(tmp_path):
    p = tmp_path / "R.md"
    run_and_publish("demo", [sys.executable, "-c", "print('old figure')"], readme=p, echo=False)
    before = p.read_text(encoding="utf-8")
    rc = run_and_publish("demo", [sys.executable, "-c", "print('new'); raise SystemExit(3)"], readme=p, echo=False)
    assert rc == 3 and p.read_text(encoding="utf-8") == before


def test_tail_limits_the_published_lines(tmp_path):
    p = tmp_path / "R.md"
    run_and_publish("t", [sys.executable, "-c", "print('\\n'.join(f'line{i}' for i in range(50)))"],
                    readme=p, tail=5, echo=False)
    text = p.read_text(encoding="utf-8")
    assert "line49" in text and "line44" not in text and "last 5 of 50 lines" in text


@pytest.mark.parametrize("bad", ["", "a b", "x/y", "a-->"])
def test_bad_section_name(tmp_path, bad):
    with pytest.raises(ValueError, match="section name"):
        write_section(tmp_path / "R.md", "x", name=bad)


def test_shown_command_line_is_published(tmp_path):
    p = tmp_path / "R.md"
    assert run_and_publish("s", [sys.executable, "-c", "print(1)"], readme=p, echo=False, shown="python -c 'print(1)'") == 0
    assert "`python -c 'print(1)'`" in p.read_text(encoding="utf-8")


def test_suite_names_its_sections():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("publish_script", Path(__file__).parents[1] / "benchmarks" / "publish.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = [s for s, _ in mod.SUITE]
    assert len(names) == len(set(names)) and all(markers(n) for n in names)
    readme = (Path(__file__).parents[1] / "benchmarks" / "README.md").read_text(encoding="utf-8")
    missing = [n for n in names if markers(n)[0] not in readme]
    assert not missing, f"benchmarks/README.md has no section for {missing}"
    with pytest.raises(SystemExit, match="unknown section"):
        mod.run_suite({"no-such-benchmark"}, set(), str(Path("unused.md")), 40)
    # a second name after --only, space-separated, is refused rather than dropped (nothing runs)
    assert mod.main(["--suite", "--only", "perf-generate", "perf-generate-low-confidence"]) == 2


def _bench(tokens_per_s: float, ratio: float) -> list[str]:
    """A benchmark command whose last line declares two figures, one higher-is-better, one lower."""
    line = json.dumps({"tokens_per_s": tokens_per_s, "nested": {"ratio": ratio},
                       "better": {"tokens_per_s": "higher", "nested.ratio": "lower"}})
    return [sys.executable, "-c", f"print('timing'); print({line!r})"]


def test_section_names_the_cpu_and_torch_build(tmp_path):
    from sketchwm.bench.machine import machine

    p = tmp_path / "R.md"
    assert run_and_publish("m", [sys.executable, "-c", "print(1)"], readme=p, echo=False) == 0
    text, m = p.read_text(encoding="utf-8"), machine()
    assert m["cpu"] in text and f"{m['cpus']} CPUs" in text and f"torch {m['torch']}" in text
    assert all(f in text for f in m["flags"])


def test_figure_20_percent_worse_on_the_same_cpu_is_marked(tmp_path, capsys):
    p = tmp_path / "R.md"
    assert run_and_publish("perf", _bench(1e8, 1.5), readme=p, echo=False) == 0
    assert "Regression" not in p.read_text(encoding="utf-8")
    assert run_and_publish("perf", _bench(0.9e8, 1.6), readme=p, echo=False) == 0  # 11% and 7% worse: not marked
    assert "Regression" not in p.read_text(encoding="utf-8")
    assert run_and_publish("perf", _bench(0.6e8, 2.0), readme=p, echo=False) == 0  # 1.5x and 1.25x worse
    text = p.read_text(encoding="utf-8")
    assert "Regression on this CPU" in text and "`tokens_per_s` 6e+07, 1.50x worse than 9e+07" in text
    assert "`nested.ratio` 2, 1.25x worse than 1.6" in text
    assert "| 1e+08 | 1.5 |" in text  # the previous figures stay in the section's history table
    assert "1.50x worse" in capsys.readouterr().err
    history = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [h["figures"]["tokens_per_s"] for h in history] == [1e8, 0.9e8, 0.6e8]
    assert run_and_publish("perf", _bench(0.7e8, 1.9), readme=p, echo=False) == 0  # better than the last run
    assert "Regression" not in p.read_text(encoding="utf-8")


def test_figures_of_another_cpu_are_not_compared(tmp_path):
    from sketchwm.bench.machine import machine

    other = {**machine(), "cpu": "Some Other CPU"}
    (tmp_path / "history.jsonl").write_text(json.dumps({
        "section": "perf", "date": "then", "commit": "abc", "machine": other,
        "figures": {"tokens_per_s": 1e9}, "better": {"tokens_per_s": "higher"}}) + "\n", encoding="utf-8")
    p = tmp_path / "R.md"
    assert run_and_publish("perf", _bench(1e8, 1.5), readme=p, echo=False) == 0
    text = p.read_text(encoding="utf-8")
    assert "Regression" not in text and "1e+09" not in text


def test_figures_read_only_declared_finite_numbers():
    line = json.dumps({"a": 2.0, "b": "x", "c": float("nan"), "d": 3, "better": {"a": "higher", "b": "lower",
                                                                                 "c": "lower", "d": "sideways"}})
    assert figures(["noise", line, "{not json}"]) == ({"a": 2.0}, {"a": "higher"})
    assert figures(['{"a": 1}']) == ({}, {})
    assert regressions({"a": 1.0, "r": 3.0}, {"a": 1.3, "r": 2.0}, {"a": "higher", "r": "lower"}) == {"a": 1.3, "r": 1.5}
