"""One broken third-party plugin does not break sketchwm.

A package is "installed" the way pip leaves it: a ``.dist-info`` folder on ``sys.path`` whose
``entry_points.txt`` adds an entry point to the ``sketchwm`` group, and a module that fails to
import (its own dependency is missing). In a fresh process, ``sketchwm plugins`` names it in one
line and lists every working plugin, ``sketchwm detect`` with a built-in scheme works, and the
warning it prints is one line in the format of the CLI's errors (no raw ``UserWarning`` with a
source line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sketchwm.errors import RegistryError
from sketchwm.plugin_manager import get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    """A site directory holding the broken plugin ``acme`` (distribution ``acme-watermarks``)."""
    site = tmp_path_factory.mktemp("site")
    dist = site / "acme_watermarks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-watermarks\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[sketchwm]\nacme = acme_watermarks\n", encoding="utf-8")
    (site / "acme_watermarks.py").write_text("import acme_dependency_not_installed  # noqa: F401\n", encoding="utf-8")
    return site


def sketchwm_cli(args: list[str], site: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    paths = [str(site), str(ROOT), str(ROOT / "plugins"), str(ROOT / "attacks"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "SKETCHWM_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONWARNINGS": "default"}
    return subprocess.run([sys.executable, "-m", "sketchwm.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


def test_plugins_names_the_broken_plugin_in_one_line(broken_site, tmp_path):
    proc = sketchwm_cli(["plugins"], broken_site, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "acme" in ln]
    assert len(lines) == 1, proc.stdout
    assert "broken plugin 'acme'" in lines[0] and "acme_dependency_not_installed" in lines[0]
    assert "global-sketch" in proc.stdout and "delete-random" in proc.stdout  # the working plugins are listed
    # the listing is not cached while a plugin is broken: installing its dependency must show it
    assert not list((tmp_path / "cache").glob("plugins-*.json"))
    # JSON keeps the kinds and adds "broken"
    data = json.loads(sketchwm_cli(["plugins", "--json"], broken_site, tmp_path).stdout)
    assert data["broken"] == [{"name": "acme", "error": lines[0].split("left out: ", 1)[1]}]


def test_detect_with_a_builtin_scheme_still_works(broken_site, tmp_path):
    from sketchwm.data import load_prompts
    from sketchwm.keys import WatermarkKey

    WatermarkKey(b"broken-plugin-test-key-000000001").save(tmp_path / "k.key")
    (tmp_path / "text.txt").write_text(load_prompts("human", 1)[0], encoding="utf-8")
    proc = sketchwm_cli(["detect", "--key", "k.key", "--input", "text.txt", "--json"], broken_site, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["is_watermarked"] is False
    # the warning: one line, the errors' format, naming the plugin; no source line, no "UserWarning"
    warning = [ln for ln in proc.stderr.splitlines() if "acme" in ln]
    assert len(warning) == 1 and warning[0].startswith("sketchwm: warning: plugin 'acme' failed to load"), proc.stderr
    assert "UserWarning" not in proc.stderr and "warnings.warn" not in proc.stderr


def test_broken_plugin_is_reported_or_raises_on_request():
    class Broken:
        name = "broken"

        def load(self):
            raise ImportError("no module named nowhere")

    with pytest.warns(UserWarning, match="plugin 'broken' failed to load"):
        pm = get_plugin_manager([Broken()])
    assert pm.broken_plugins == {"broken": "ImportError: no module named nowhere"}
    with pytest.raises(RegistryError, match="entry point 'broken'"):
        get_plugin_manager([Broken()], on_error="raise")
