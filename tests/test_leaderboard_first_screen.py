"""The committed leaderboard's first screen in Chromium at 1,400 × 900: the ranking table is on it and
the page needs no horizontal scroll, with every collapsed section closed and open.

``SKETCHWM_UPDATE_SCREENSHOT=1`` also writes the first screen to ``docs/img/leaderboard-first-screen.png``
(the image the docs show).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
BOARD = ROOT / "benchmarks" / "leaderboard"
SHOT = ROOT / "docs" / "img" / "leaderboard-first-screen.png"
WIDTH, HEIGHT = 1400, 900


def _scrolls_sideways(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")


def test_first_screen_shows_the_ranking_without_horizontal_scroll(chromium_page, tmp_path):
    page = chromium_page(BOARD / "index.html")
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.evaluate("window.scrollTo(0, 0)")
    first = page.locator("table.ranking").first
    box = first.bounding_box()
    assert box is not None and box["y"] < HEIGHT and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH
    regime = first.get_attribute("data-regime")
    rows = first.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.scheme)")
    curves = pd.read_parquet(BOARD / "results.parquet", columns=["regime", "curve"]).drop_duplicates()
    assert sorted(rows) == sorted(curves.loc[curves["regime"] == regime, "curve"])
    header = page.locator("h1 + .lede").text_content()
    assert "commit" not in header and " run " not in header  # provenance is at the bottom
    assert not _scrolls_sideways(page)
    page.screenshot(path=str(tmp_path / "first-screen.png"))
    if os.environ.get("SKETCHWM_UPDATE_SCREENSHOT") == "1":
        page.screenshot(path=str(SHOT))
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert not _scrolls_sideways(page), "an opened section is wider than the window"
