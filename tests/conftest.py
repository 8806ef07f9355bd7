"""Shared fixtures: tiny models built in code, keys, a registry of the built-in plugins only."""

from __future__ import annotations

import importlib.metadata
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def builtin_registry():
    """Registry of the ``builtin-*`` entry points only (independent of other installed plugins)."""
    from sketchwm.registry import Registry, get_plugin_manager

    eps = [e for e in importlib.metadata.entry_points(group="sketchwm") if e.name.startswith("builtin")]
    return Registry(get_plugin_manager(eps))


@pytest.fixture(scope="session")
def tiny():
    """A tiny random BERT masked LM backend over a ~100-word vocabulary."""
    from sketchwm.testing import tiny_backend

    return tiny_backend(seed=0)


@pytest.fixture()
def key():
    from sketchwm.keys import WatermarkKey

    return WatermarkKey(bytes(range(32)))


@pytest.fixture()
def uniform_sketch_params():
    return {"prior": {"source": "uniform"}}


@pytest.fixture(scope="module")
def one_thread():
    """Run a module on one intra-op thread: on a shared, oversubscribed CPU the small int64 PRF ops of
    the schemes run ~30x slower with 2 threads (spin-waiting). Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def default_tokenizer():
    """The shipped default model's tokenizer (offline; no weights loaded)."""
    from transformers import AutoTokenizer

    from sketchwm.default_model import MODEL_DIR

    return AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)


@pytest.fixture()
def chromium_page():
    """A real browser page (playwright driving Debian's Chromium): ``open(path) -> page``.

    Skips when playwright or a Chromium binary is missing. Page errors (uncaught JavaScript
    exceptions) are collected and must be none when the test ends."""
    import shutil

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install playwright)")
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        pytest.skip("no Chromium binary on PATH (Debian: apt-get install -y chromium)")
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))

        def open_(path):
            page.goto(path.resolve().as_uri())
            return page

        yield open_
        browser.close()
    assert errors == []
