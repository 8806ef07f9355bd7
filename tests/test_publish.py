"""Published benchmark sections are written by the command that measured them (sketchwm.bench.publish)."""

from __future__ import annotations

import sys

import pytest

from sketchwm.bench.publish import markers, run_and_publish, write_section


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
