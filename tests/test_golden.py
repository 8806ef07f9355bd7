"""Golden outputs that pin the sampler and every scheme's detector before a refactor moves them.

For every registered watermark scheme (and the unwatermarked sampler) and every sampling path of
:class:`sketchwm.engine.MaskedDiffusionSampler` — random remasking (the row / packed paths), random
remasking with ``marginal_refresh = 2`` and ``"block"``, semi-autoregressive blocks, LLaDA's low-confidence
remasking, Dream's entropy remasking with a nucleus filter, greedy decoding — this records the
generated token ids on the tiny random BERT of :mod:`sketchwm.testing` (fixed key, seed and
prompts), and each scheme's detection statistics (score, z, p-value, tokens scored) of its
random-path texts. A change of behaviour shows up here as a changed id or score.

The goldens live in ``tests/golden/engine_golden.json``. When a change of behaviour is intended,
regenerate them in a commit of their own that says why::

    SKETCHWM_REGEN_GOLDEN=1 python -m pytest -q tests/test_golden.py
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.registry import get_registry
from sketchwm.testing.schemes import KEY

GOLDEN = Path(__file__).parent / "golden" / "engine_golden.json"
REGEN = os.environ.get("SKETCHWM_REGEN_GOLDEN") == "1"

PROMPTS = ["the water", "a man said", "", "many new words"]
BASE = {"gen_length": 32, "block_length": 32, "steps": 16, "temperature": 1.0, "top_p": 1.0,
        "remasking": "random", "stop_at_eos": True, "marginal_refresh": 1}
#: sampling path name → sampler overrides
PATHS: dict[str, dict] = {
    "random": {},
    "random-refresh2": {"marginal_refresh": 2},
    # amortised: every masked row at the first step, then each block's rows when it starts / then none
    "random-blocks-refresh-block": {"block_length": 8, "marginal_refresh": "block"},
    "random-blocks-refresh-auto": {"block_length": 8, "marginal_refresh": "auto"},  # the default: "once" here
    "random-blocks": {"block_length": 8},
    "low-confidence-blocks": {"remasking": "low_confidence", "block_length": 16},
    # the default under confidence remasking with blocks: the exact computation (refresh 1); and
    # "block-all" (every masked row when a block starts), its faster approximation
    "low-confidence-blocks-refresh-auto": {"remasking": "low_confidence", "block_length": 8, "marginal_refresh": "auto"},
    "entropy-blocks-refresh-block-all": {"remasking": "entropy", "block_length": 8, "marginal_refresh": "block-all"},
    "entropy-top-p": {"remasking": "entropy", "top_p": 0.9},
    "greedy-low-confidence": {"remasking": "low_confidence", "temperature": 0.0},
    # a temperature below 1: the sharpened marginals (global-sketch marginals="sampled", the two-channel handover)
    "low-confidence-blocks-t0.5": {"remasking": "low_confidence", "block_length": 16, "temperature": 0.5},
    # a backend whose texts stop (EOS after ~20 tokens): the EOS-weighted expected sketch of the
    # global sketch, and every scheme's handling of a stop token
    "stop-random": {"stopping": True},
    "stop-blocks": {"stopping": True, "block_length": 8},
    "stop-blocks-refresh-block": {"stopping": True, "block_length": 8, "marginal_refresh": "block"},
}
#: scheme params for the tiny vocabulary (as in the conformance suite)
PARAMS: dict[str, dict] = {
    "global-sketch": {"prior": {"source": "uniform"}},
    "global-sketch-family": {"member": {"prior": {"source": "uniform"}}},
    "global-sketch-green": {"sketch": {"prior": {"source": "uniform"}, "delta": 0.75, "coverage_full": 0.25,
                                       "marginals": "sampled"}},  # its default sketch channel, uniform prior
    "kth-exp-edit": {"key_len": 32, "n_permutations": 99},
    "keyed-family": {"inner": {"name": "global-sketch-green", "params": {
        "sketch": {"prior": {"source": "uniform"}, "delta": 0.75, "coverage_full": 0.25, "marginals": "sampled"},
        "sampling": "free", "family": {"members": 1}}}, "members": 4, "decoys": 8},
}
SCHEMES = [None] + get_registry().names("scheme")

pytestmark = pytest.mark.usefixtures("one_thread")


def _make(name: str | None, vocab_size: int):
    if name is None:
        return None
    return get_registry().create("scheme", name, PARAMS.get(name, {}), KEY, vocab_size)


def _run(tiny, name: str | None, path: str) -> dict:
    """Generated ids of one (scheme, path) and, on the random path, the scheme's scores of them."""
    sampler = dict(PATHS[path])
    if sampler.pop("stopping", False):
        from sketchwm.testing.stopping import stopping_backend

        tiny = stopping_backend(gen_length=BASE["gen_length"], stop_after=20.0, softness=3.0, seed=0)
    scheme = _make(name, tiny.vocab_size)
    out = MaskedDiffusionSampler(tiny, {**BASE, **sampler}, scheme).generate(
        PROMPTS, torch.Generator().manual_seed(20261123))
    rec = {"ids": out.ids.tolist(), "lengths": out.lengths.tolist()}
    if scheme is not None and path == "random":
        ids = out.ids
        s = scheme.score_ids(ids, torch.ones_like(ids, dtype=torch.bool))
        rec["scores"] = {"score": s.score.tolist(), "z": s.z.tolist(), "p_value": s.p_value.tolist(),
                         "n_scored": s.n_scored.tolist()}
    return rec


@pytest.fixture(scope="module")
def golden():
    if REGEN:
        return {}
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing; create it with SKETCHWM_REGEN_GOLDEN=1")
    return json.loads(GOLDEN.read_text())


_NEW: dict = {}


def _close(a: list[float], b: list[float]) -> bool:
    return all((math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
               for x, y in zip(a, b)) and len(a) == len(b)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", SCHEMES, ids=lambda n: n or "unwatermarked")
def test_golden(name, path, tiny, golden):
    """Token ids (exact) and detection statistics (relative 1e-9) equal the recorded goldens."""
    key = f"{name or 'unwatermarked'}/{path}"
    rec = _run(tiny, name, path)
    if REGEN:
        _NEW[key] = rec
        GOLDEN.parent.mkdir(exist_ok=True)
        merged = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        merged.update(_NEW)
        GOLDEN.write_text(json.dumps(merged, indent=0, sort_keys=True) + "\n")
        return
    assert key in golden, f"no golden for {key}; regenerate the goldens in a commit of their own"
    want = golden[key]
    assert rec["ids"] == want["ids"], f"{key}: generated token ids changed"
    assert rec["lengths"] == want["lengths"], f"{key}: lengths changed"
    if "scores" in want:
        for field in ("score", "z", "p_value"):
            assert _close(rec["scores"][field], want["scores"][field]), (
                f"{key}: {field} changed: {rec['scores'][field]} vs {want['scores'][field]}")
        assert rec["scores"]["n_scored"] == want["scores"]["n_scored"]


def test_golden_file_covers_every_scheme_and_path(golden):
    """A newly registered scheme or a new path must get goldens (regenerate to add them)."""
    if REGEN:
        pytest.skip("regenerating")
    want = {f"{n or 'unwatermarked'}/{p}" for n in SCHEMES for p in PATHS}
    assert want <= set(golden), sorted(want - set(golden))
