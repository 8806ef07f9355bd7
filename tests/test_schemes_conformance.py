"""One conformance suite for EVERY registered watermark scheme (global sketch and the baselines).

A scheme is tested the moment it is registered: it is parametrised over
``get_registry().names("scheme")``. Sizes are small so the file runs in well under two minutes:
tiny random BERT (vocabulary 120), 8 texts × 64 tokens, 32 denoising steps, temperature 1.

The properties (round trip, the null, other key, reproducibility, errors, params through JSON) live
in :mod:`sketchwm.testing.schemes`, so a third-party plugin's tests run the very same checks; the
README's example plugin is checked that way below. The engine-path equivalences (row path, packed
path) are specific to sketchwm's sampler and stay here.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import torch

from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm.testing.schemes import KEY, PROMPTS, SAMPLER, SCHEME_CHECKS, SchemeUnderTest, check_scheme, check_sketch, plugin_registry

SCHEMES = get_registry().names("scheme")


pytestmark = pytest.mark.usefixtures("one_thread")

#: Scheme-specific params for the tiny model; everything else uses the scheme's defaults.
TEST_PARAMS: dict[str, dict] = {
    "global-sketch": {"prior": {"source": "uniform"}},  # no packaged counts for the tiny vocabulary
    "kth-exp-edit": {"key_len": 32, "n_permutations": 99},  # p-value resolution 0.01; short key: fast DP
}
#: Bound on the median watermarked p-value (64 tokens, default strength).
MEDIAN_P: dict[str, float] = {"kth-exp-edit": 1.5 / 100}  # permutation p-values cannot go below 1/(P+1)
DEFAULT_MEDIAN_P = 1e-3


def make(name: str, vocab_size: int, key: WatermarkKey = KEY, **overrides):
    return get_registry().create("scheme", name, {**TEST_PARAMS.get(name, {}), **overrides}, key, vocab_size)


@pytest.fixture(scope="module")
def under_test(tiny):
    """name → :class:`SchemeUnderTest` on the tiny backend (null scores computed once per scheme)."""
    cache: dict = {}

    def get(name: str) -> SchemeUnderTest:
        if name not in cache:
            cache[name] = SchemeUnderTest(name, TEST_PARAMS.get(name, {}), tiny, get_registry(),
                                          MEDIAN_P.get(name, DEFAULT_MEDIAN_P))
        return cache[name]

    return get


@pytest.mark.parametrize("check", list(SCHEME_CHECKS))
@pytest.mark.parametrize("name", SCHEMES)
def test_conformance(name, check, under_test):
    """The properties of :mod:`sketchwm.testing.schemes` (round trip, null, other key, reproducibility,
    errors, params through JSON) for every registered scheme."""
    SCHEME_CHECKS[check](under_test(name))


ROW_SCHEMES = [n for n in SCHEMES if not get_registry().get("scheme", n).needs_all_marginals]


@pytest.mark.parametrize("name", ROW_SCHEMES)
def test_row_path_matches_full_path(name, tiny):
    """A scheme that declares ``needs_all_marginals = False`` gets (B, K, V) rows with random
    remasking; the texts must equal those of the full (B, G, V) path, which it gets when the flag
    is forced on. Context-keyed AAR draws its unkeyable-position noise in a different shape, so it
    is compared with position keying."""
    over = {"keying": "position"} if name == "aar-gumbel" else {}
    outs = []
    for full in (False, True):
        scheme = make(name, tiny.vocab_size, **over)
        scheme.needs_all_marginals = full
        out = MaskedDiffusionSampler(tiny, SAMPLER, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(5))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


def test_baselines_take_the_row_path():
    """The four position-local baselines declare it (else the test above is vacuous)."""
    assert {"unigram", "kgw-naive", "aar-gumbel", "kth-exp-edit"} <= set(ROW_SCHEMES)
    assert "global-sketch" not in ROW_SCHEMES and "red-green-dlm" not in ROW_SCHEMES


PACKED_SCHEMES = [n for n in SCHEMES
                  if get_registry().get("scheme", n).needs_all_marginals and get_registry().get("scheme", n).packed_marginals]


@pytest.mark.parametrize("block_length", [64, 16])
@pytest.mark.parametrize("name", PACKED_SCHEMES)
def test_packed_path_matches_full_path(name, block_length, tiny):
    """A scheme with ``packed_marginals = True`` gets the masked rows packed (B, M, V) and the
    sampled rows (B, K, V) under random remasking; its texts must equal those of the full (B, G, V)
    path (flag forced off), with one block and with semi-autoregressive blocks (masked positions
    outside the current block still count in eq. 5)."""
    cfg = {**SAMPLER, "block_length": block_length}
    outs = []
    for packed in (True, False):
        scheme = make(name, tiny.vocab_size)
        scheme.packed_marginals = packed
        out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(5))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("context", [[-1], [-1, 1], [-2]])
def test_red_green_dlm_neighbour_rows_match_full_path(context, tiny):
    """red-green-dlm packs only the masked rows within ``marginal_radius`` = 2·max|o| of a sampled
    row; for every context set the texts must equal the full (B, G, V) path."""
    cfg = {**SAMPLER, "block_length": 16}
    outs = []
    for packed in (True, False):
        scheme = make("red-green-dlm", tiny.vocab_size, context=context)
        assert scheme.marginal_radius == 2 * max(abs(o) for o in context)
        scheme.packed_marginals = packed
        out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(11))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


def test_packed_path_builds_no_full_logits(tiny, monkeypatch):
    """global-sketch declares packed marginals, and on that path the engine never asks the backend
    for (B, P+G, V) logits (the zero-filled full tensor is what the path exists to avoid)."""
    assert "global-sketch" in PACKED_SCHEMES
    calls = {"logits": 0, "logits_at": 0}
    orig_logits, orig_at = tiny.logits, tiny.logits_at

    def counting_logits(*a, **k):
        calls["logits"] += 1
        return orig_logits(*a, **k)

    def counting_at(*a, **k):
        calls["logits_at"] += 1
        return orig_at(*a, **k)

    monkeypatch.setattr(tiny, "logits", counting_logits)
    monkeypatch.setattr(tiny, "logits_at", counting_at)
    MaskedDiffusionSampler(tiny, SAMPLER, make("global-sketch", tiny.vocab_size)).generate(PROMPTS[:2])
    assert calls["logits"] == 0 and calls["logits_at"] > 0


def _readme_example_plugin() -> types.ModuleType:
    """The example plugin module of the README's "Registering a plugin", executed as written."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(# my_pkg/my_sketch.py\n.*?)```", readme, re.S)
    assert code, "the README no longer shows my_pkg/my_sketch.py"
    mod = types.ModuleType("my_pkg_my_sketch")
    exec(compile(code.group(1), "README.md:my_pkg/my_sketch.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


def test_readme_example_plugin_passes_the_conformance_suite(tiny):
    """The README's third-party sketch, registered as a plugin (not installed), passes
    :func:`check_sketch`, and the global-sketch scheme built on it passes :func:`check_scheme`."""
    mod = _readme_example_plugin()
    check_sketch(mod.DenseGaussianSketch, {"D": 256})
    reg = plugin_registry(mod)
    assert "dense-gaussian" in reg.names("sketch")
    check_scheme("global-sketch", {"prior": {"source": "uniform"}, "sketch": {"name": "dense-gaussian", "params": {"D": 256}}},
                 backend=tiny, registry=reg)


def test_check_sketch_catches_a_broken_sketch():
    """The suite can fail: a sketch whose token_scores is not the adjoint of project is rejected."""
    mod = _readme_example_plugin()

    class Broken(mod.DenseGaussianSketch):
        name = "broken"

        def token_scores(self, r):
            return super().token_scores(r) + 1.0

    with pytest.raises(AssertionError, match="Phi"):
        check_sketch(Broken, {"D": 32})
