"""The docs home page: a quickstart that matches the README's, counts from the registry, no link out of
the site; and the decision rule stated in one place only."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "index.md"
RULE_PAGE = "pvalue-and-thresholds.md"


def _hook():
    spec = importlib.util.spec_from_file_location("registry_counts", ROOT / "docs" / "hooks" / "registry_counts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_home_counts_come_from_the_registry():
    from sketchwm.registry import get_registry

    hook, text = _hook(), INDEX.read_text(encoding="utf-8")
    assert "{{ n_baselines }} baseline watermarks and {{ n_attacks }} attacks" in text
    reg = get_registry()
    baselines = [n for n in reg.names("scheme") if reg.get("scheme", n).__module__.split(".")[0] == "sketchwm_baselines"]
    page = hook.fill(text, hook.registry_counts())
    assert f"{len(baselines)} baseline watermarks and {len(reg.names('attack'))} attacks" in page
    assert "{{" not in page
    with pytest.raises(ValueError, match="unknown count"):
        hook.fill("{{ n_nothing }}", hook.registry_counts())


def test_home_has_the_readme_quickstart_and_stays_in_the_site():
    text = INDEX.read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = _bash_blocks(text)[0]
    assert "sketchwm demo" in quickstart and "pytest" in quickstart
    assert quickstart in _bash_blocks(readme), "docs/index.md's quickstart differs from the README's two commands"
    assert "README" not in text, "the docs home sends readers to README.md, which is not in the site"


def test_the_decision_rule_is_stated_once():
    """Only docs/pvalue-and-thresholds.md states the rule; other pages link to its section."""
    statement = re.compile(r"score\s*(≥|>=)\s*max\(τ_N|score\s*>\s*τ_N\b.{0,120}?\band\s+(score\s*)?(≥|>=)\s*τ_α", re.S)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stated = [p.name for p in pages if statement.search(p.read_text(encoding="utf-8"))]
    assert stated == [RULE_PAGE], f"the decision rule is stated in {stated}"
    assert "## The one decision rule" in (ROOT / "docs" / RULE_PAGE).read_text(encoding="utf-8")


def test_every_registered_component_is_on_the_components_page():
    from sketchwm.registry import get_registry

    reg = get_registry()
    text = (ROOT / "docs" / "components.md").read_text(encoding="utf-8")
    missing = [f"{kind} {name}" for kind in ("scheme", "attack", "backend", "sketch", "score", "remasking")
               for name in reg.names(kind) if f"`{name}`" not in text]
    assert not missing, f"registered but not on docs/components.md: {missing}"


NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                      "fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one "
                                      "twenty-two twenty-three twenty-four twenty-five".split())}


def test_readme_counts_match_the_registry():
    """The README (not built by mkdocs) writes its counts in words; they are the registry's."""
    hook = _hook()
    counts = hook.registry_counts()
    m = re.search(r"([\w-]+) baseline watermarks and ([\w-]+) attacks", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert m, "the README no longer says how many baselines and attacks there are"
    assert (NUMBERS.get(m.group(1)), NUMBERS.get(m.group(2))) == (counts["baselines"], counts["attacks"]), m.group(0)
