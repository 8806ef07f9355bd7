"""CHANGELOG.md (Keep a Changelog) and the package version move together."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import sketchwm

ROOT = Path(__file__).resolve().parents[1]
#: a release heading: ``## [0.4.0] - 2026-11-28``
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def _releases() -> list[tuple[str, str]]:
    return RELEASE.findall((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))


def test_the_version_is_the_latest_changelog_entry():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    releases = _releases()
    assert releases, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' entry"
    assert releases[0][0] == version == sketchwm.__version__


def test_changelog_entries_are_ordered_newest_first_with_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.index("## [Unreleased]") < text.index("## [" + _releases()[0][0] + "]")
    versions = [tuple(int(x) for x in v.split(".")) for v, _ in _releases()]
    dates = [d for _, d in _releases()]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    assert dates == sorted(dates, reverse=True)
