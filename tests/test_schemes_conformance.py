"""One conformance suite for EVERY registered watermark scheme (global sketch and the baselines).

A scheme is tested the moment it is registered: it is parametrised over
``get_registry().names("scheme")``. Sizes are small so the file runs in well under two minutes:
tiny random BERT (vocabulary 120), 8 texts × 64 tokens, 32 denoising steps, temperature 1.

The properties (round trip, the null, other key, reproducibility, errors, params through JSON) live
in :mod:`sketchwm.testing.schemes`, so a third-party plugin's tests run the very same checks; the
README's example plugin is checked that way below. The engine equivalences (declared reads vs every
masked row, exact vs full-canvas marginals) are specific to sketchwm's sampler and stay here.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import torch

from sketchwm.components import MarginalReads
from sketchwm.engine import FullCanvasMarginals, MaskedDiffusionSampler
from sketchwm.hookspecs import hookimpl
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm.testing.schemes import KEY, PROMPTS, SAMPLER, SCHEME_CHECKS, SchemeUnderTest, check_scheme, check_sketch, plugin_registry

SCHEMES = get_registry().names("scheme")


pytestmark = pytest.mark.usefixtures("one_thread")

#: Scheme-specific params for the tiny model; everything else uses the scheme's defaults.
TEST_PARAMS: dict[str, dict] = {
    "global-sketch": {"prior": {"source": "uniform"}},  # no packaged counts for the tiny vocabulary
    "global-sketch-family": {"member": {"prior": {"source": "uniform"}}},
    "global-sketch-green": {"sketch": {"prior": {"source": "uniform"}, "delta": 0.75, "coverage_full": 0.25,
                                       "marginals": "sampled"}},  # its default sketch channel, uniform prior
    "kth-exp-edit": {"key_len": 32, "n_permutations": 99},  # p-value resolution 0.01; short key: fast DP
    "keyed-family": {"inner": {"name": "global-sketch-green", "params": {
        "sketch": {"prior": {"source": "uniform"}, "delta": 0.75, "coverage_full": 0.25, "marginals": "sampled"},
        "sampling": "free", "family": {"members": 1}}}, "members": 4, "decoys": 8},  # a small family of the default's tilts (its inner default: one sketch key per member)
}
#: Bound on the median watermarked p-value (64 tokens, default strength).
MEDIAN_P: dict[str, float] = {"kth-exp-edit": 1.5 / 100,  # permutation p-values cannot go below 1/(P+1)
                               "keyed-family": 1e-2}  # the spread test's Student tail (9 degrees of freedom)
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


READS = {n: get_registry().get("scheme", n) for n in SCHEMES}
ROW_SCHEMES = [n for n in SCHEMES if isinstance(READS[n].reads, MarginalReads) and READS[n].reads.kind == "sampled"]


def _reading_every_masked_row(scheme):
    """The same scheme object, re-typed to declare ``MarginalReads.masked()`` (a superset of any reads)."""
    scheme.__class__ = type(f"{type(scheme).__name__}ReadsMasked", (type(scheme),), {"reads": MarginalReads.masked()})
    return scheme


@pytest.mark.parametrize("remasking", ["random", "low_confidence"])
@pytest.mark.parametrize("name", SCHEMES)
def test_declared_reads_match_reading_every_masked_row(name, remasking, tiny):
    """Whatever a scheme declares it reads (only the sampled rows, every masked row, the rows near a
    sampled one), its texts equal those of the same scheme forced to read every masked row: the
    declaration only saves work. With semi-autoregressive blocks (masked rows outside the current
    block still count in eq. 5) and both kinds of candidate choice (random remasking: the sampled
    rows; low-confidence: every masked row of the block)."""
    cfg = {**SAMPLER, "block_length": 16, "remasking": remasking}
    outs = []
    for forced in (False, True):
        scheme = make(name, tiny.vocab_size)
        if forced:
            _reading_every_masked_row(scheme)
        out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(5))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


def test_baselines_declare_their_reads():
    """The four position-local baselines read only the sampled rows (else the engine computes more
    than they need); the global sketch every masked row (incrementally); red-green-dlm its neighbours."""
    assert {"unigram", "kgw-naive", "aar-gumbel", "kth-exp-edit"} <= set(ROW_SCHEMES)
    assert READS["global-sketch"].reads == MarginalReads.masked(incremental=True)
    for context in ([-1], [-1, 1], [-2]):
        assert make("red-green-dlm", 120, context=context).reads == MarginalReads.near(2 * max(abs(o) for o in context))


@pytest.mark.parametrize("remasking", ["random", "entropy"])
@pytest.mark.parametrize("name", SCHEMES)
def test_exact_marginals_match_the_full_canvas_reference(name, remasking, tiny):
    """The exact :class:`MarginalSource` (LM head on the declared rows only, packed) gives the texts
    of :class:`FullCanvasMarginals` (LM head on all P+G positions, then the rows picked)."""
    cfg = {**SAMPLER, "block_length": 16, "remasking": remasking}
    outs = []
    for source in (None, FullCanvasMarginals):
        scheme = make(name, tiny.vocab_size)
        out = MaskedDiffusionSampler(tiny, cfg, scheme, marginal_source=source).generate(
            PROMPTS[:4], torch.Generator().manual_seed(11))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("context", [[-1], [-1, 1], [-2]])
def test_red_green_dlm_neighbour_rows_match_every_masked_row(context, tiny):
    """red-green-dlm reads only the masked rows within 2·max|o| of a sampled row; for every context
    set its texts equal those of the scheme reading every masked row."""
    cfg = {**SAMPLER, "block_length": 16}
    outs = []
    for forced in (False, True):
        scheme = make("red-green-dlm", tiny.vocab_size, context=context)
        if forced:
            _reading_every_masked_row(scheme)
        out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(PROMPTS[:4], torch.Generator().manual_seed(11))
        outs.append(out.ids)
    assert torch.equal(outs[0], outs[1])


def test_engine_computes_only_the_declared_rows(tiny, monkeypatch):
    """The LM head runs on exactly the declared rows: with random remasking, K rows per step for a
    scheme reading the sampled rows (as without a scheme), every masked row for the global sketch
    (at every step when exact, at refreshes only by default); the full (B, P+G, V) logits are never
    asked for."""
    calls = {"logits": 0, "rows": []}
    orig_logits, orig_at = tiny.logits, tiny.logits_at

    def counting_logits(*a, **k):
        calls["logits"] += 1
        return orig_logits(*a, **k)

    def counting_at(x, attn, index):
        calls["rows"].append(index.shape[1])
        return orig_at(x, attn, index)

    monkeypatch.setattr(tiny, "logits", counting_logits)
    monkeypatch.setattr(tiny, "logits_at", counting_at)
    cfg = {**SAMPLER, "gen_length": 32, "block_length": 32, "steps": 16}  # 2 tokens per step
    rows = {}
    for name, refresh in ((None, "auto"), ("unigram", "auto"), ("global-sketch", 1), ("global-sketch", "auto")):
        calls["rows"] = []
        scheme = None if name is None else make(name, tiny.vocab_size)
        MaskedDiffusionSampler(tiny, {**cfg, "marginal_refresh": refresh}, scheme).generate(PROMPTS[:2])
        rows[name, refresh] = list(calls["rows"])
    assert calls["logits"] == 0
    assert rows[None, "auto"] == rows["unigram", "auto"] == [2] * 16
    assert rows["global-sketch", 1] == list(range(32, 0, -2))  # exact: every masked row, 32, 30, ..., 2
    # incremental reads, refreshed once per block (one block here): every masked row at the first step,
    # then the two targets alone
    assert rows["global-sketch", "auto"] == [32] + [2] * 15


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


def test_round_trip_fails_a_threshold_that_rejects_every_watermarked_text(tiny):
    """The README's dense sketch declaring the count sketch's geometry gets eq. 19's τ_α, which no
    watermarked text reaches on it though the score separates them: the conformance suite says so."""
    mod = _readme_example_plugin()

    class Claims(mod.DenseGaussianSketch):
        name = "dense-gaussian"
        count_geometry = True

    plugin = types.ModuleType("claims_count_geometry")
    plugin.sketchwm_register_sketches = hookimpl(lambda: [Claims])
    params = {"prior": {"source": "uniform"}, "sketch": {"name": "dense-gaussian", "params": {"D": 256}}}
    with pytest.raises(AssertionError, match="TPR 0"):
        check_scheme("global-sketch", params, backend=tiny, registry=plugin_registry(plugin), checks=["round_trip"])


def test_check_sketch_catches_a_broken_sketch():
    """The suite can fail: a sketch whose token_scores is not the adjoint of project is rejected."""
    mod = _readme_example_plugin()

    class Broken(mod.DenseGaussianSketch):
        name = "broken"

        def token_scores(self, r):
            return super().token_scores(r) + 1.0

    with pytest.raises(AssertionError, match="Phi"):
        check_sketch(Broken, {"D": 32})
