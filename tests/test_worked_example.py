"""The docs' worked example — a new watermark scheme in one file — run as written.

The block ``# my_pkg/lucky.py`` of ``docs/plugins.md`` is executed as a module,
registered through a fake ``sketchwm`` entry point (as an installed package would be), then used
through the public API exactly as a user would: generate on the tiny test model, detect, compare
with unwatermarked text, and pass the conformance suite every scheme passes.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from sketchwm.api import Watermarker
from sketchwm.keys import WatermarkKey
from sketchwm.registry import Registry, get_plugin_manager
from sketchwm.testing.schemes import check_scheme

PAGE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def _readme_module() -> types.ModuleType:
    code = re.search(r"```python\n(# my_pkg/lucky.py\n.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert code, "docs/plugins.md no longer shows my_pkg/lucky.py"
    mod = types.ModuleType("my_pkg_lucky")
    exec(compile(code.group(1), "docs/plugins.md:my_pkg/lucky.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


@pytest.fixture(scope="module")
def registry():
    """The installed plugins plus the docs' module behind a fake entry point ``lucky``."""
    mod = _readme_module()

    class FakeEntryPoint:
        name, group, value = "lucky", "sketchwm", "my_pkg.lucky"

        def load(self):
            return mod

    sys.modules["my_pkg_lucky"] = mod
    eps = list(importlib.metadata.entry_points(group="sketchwm")) + [FakeEntryPoint()]
    yield Registry(get_plugin_manager(eps))
    sys.modules.pop("my_pkg_lucky", None)


SAMPLER = {"gen_length": 64, "block_length": 64, "steps": 32, "temperature": 1.0}


def test_worked_example_generates_and_detects(registry, tiny):
    assert "lucky" in registry.names("scheme")
    wm = Watermarker(WatermarkKey(b"worked-example-key-0000000000001"),
                     {"scheme": {"name": "lucky", "params": {"delta": 3.0}}, "sampler": SAMPLER},
                     backend=tiny, registry=registry)
    prompts = ["the water", "a man said", "people like to", "one day"] * 2
    marked = wm.generate(prompts, seed=1)
    plain = wm.generate(prompts, seed=1, watermark=False)
    got, null = wm.detect_ids(marked.token_lists()), wm.detect_ids(plain.token_lists())
    assert got.p_value.median() < 1e-3 < null.p_value.median()
    assert bool(got.is_watermarked.all()) and not bool(null.is_watermarked.any())
    # the scheme declared it reads only the sampled rows: the engine ran the LM head on those alone
    assert wm.scheme.reads.kind == "sampled"


def test_worked_example_passes_the_conformance_suite(registry, tiny):
    check_scheme("lucky", backend=tiny, registry=registry)


def test_worked_example_rejects_out_of_vocabulary_ids(registry, tiny):
    from sketchwm.errors import InputError

    scheme = registry.create("scheme", "lucky", {}, WatermarkKey(b"k" * 32), tiny.vocab_size)
    ids = torch.tensor([[1, 2, tiny.vocab_size]])
    with pytest.raises(InputError, match="outside the vocabulary"):
        scheme.score_ids(ids, torch.ones_like(ids, dtype=torch.bool))
