"""Sampler observers (sketchwm.observers): instrumentation sees every tilt without patching the scheme,
and leaves the texts as they are."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from sketchwm.api import Watermarker
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.observers import TiltObserver
from sketchwm.testing import tiny_texts

ROOT = Path(__file__).resolve().parents[1]
SAMPLER = {"gen_length": 16, "steps": 8, "block_length": 16, "remasking": "random"}


class Log(TiltObserver):
    """Records the calls it gets."""

    def __init__(self):
        self.calls: list[tuple] = []

    def on_start(self, batch):
        self.calls.append(("start", batch))

    def on_tilt(self, step, before, after, uniforms):
        self.calls.append(("tilt", step.step, tuple(before.shape), tuple(after.shape), before.dtype,
                           bool(torch.equal(before, after)), uniforms is None))

    def on_end(self, output):
        self.calls.append(("end", tuple(output.ids.shape)))


def _scheme(tiny, name):
    return Watermarker(WatermarkKey(bytes(range(32))), {"scheme": {"name": name}}, backend=tiny).scheme


def test_observers_see_every_step_and_leave_the_texts_unchanged(tiny):
    """start, one tilt per step ((B, K, V) float32 logits before and after, tilted by a tilting scheme),
    end; the texts equal those generated without the observer."""
    prompts = tiny_texts(3, 4, 0, punct=False)
    for name, tilts, keyed in (("global-sketch", True, False), ("aar-gumbel", False, True)):
        sampler = MaskedDiffusionSampler(tiny, SAMPLER, _scheme(tiny, name))
        log = Log()
        seen = sampler.generate(prompts, torch.Generator().manual_seed(5), observers=[log])
        plain = sampler.generate(prompts, torch.Generator().manual_seed(5))
        assert seen.texts == plain.texts and torch.equal(seen.ids, plain.ids)
        assert log.calls[0] == ("start", 3) and log.calls[-1] == ("end", (3, 16))
        tilts_seen = log.calls[1:-1]
        assert [c[1] for c in tilts_seen] == list(range(8))
        assert all(c[2] == c[3] and c[2][0] == 3 and c[2][2] == tiny.vocab_size and c[4] == torch.float32
                   for c in tilts_seen)
        assert any(not c[5] for c in tilts_seen) == tilts  # AAR draws with keyed uniforms, it does not tilt
        assert all(c[6] != keyed for c in tilts_seen)


def test_without_a_scheme_observers_see_no_tilt(tiny):
    log = Log()
    MaskedDiffusionSampler(tiny, SAMPLER).generate(tiny_texts(2, 4, 0), torch.Generator().manual_seed(0),
                                                   observers=[log])
    assert [c[0] for c in log.calls] == ["start", "end"]


def test_no_code_patches_a_schemes_hooks():
    """Instrumentation goes through observers: nothing under sketchwm/ or benchmarks/ assigns a scheme's
    ``process_logits`` (or ``sampling_uniforms``) on a live object."""
    pattern = re.compile(r"\.(process_logits|sampling_uniforms)\s*=(?!=)")
    hits = [f"{p.relative_to(ROOT)}:{i}" for d in ("sketchwm", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert hits == []
