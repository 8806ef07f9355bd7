"""The optional C extension (``sketchwm._fastids``) is built wherever a C compiler is: its build is
``optional`` in pyproject.toml, so a compile error would otherwise pass unnoticed and leave every
detection on the slower numpy and torch paths (the same results, so no other test would see it)."""

from __future__ import annotations

import importlib
import shutil
import sysconfig

import pytest


def test_the_c_extension_is_built_where_a_compiler_is():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) here: the extension is optional")
    mod = importlib.import_module("sketchwm._fastids")  # ImportError: the build failed at install
    for name in ("flatten_into", "keyed_bits_into", "green_counts", "gumbel_scores", "distinct_sums"):
        assert callable(getattr(mod, name)), name
