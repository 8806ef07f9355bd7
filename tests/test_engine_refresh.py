"""Sampler ``marginal_refresh``: the LM head runs on every masked row only every r-th step."""

from __future__ import annotations

import torch

from sketchwm.api import Watermarker
from sketchwm.keys import WatermarkKey

CFG = {"gen_length": 32, "block_length": 32, "steps": 16, "remasking": "random"}
PROMPTS = ["the water", "people go", "time of day", "he said"]


class _CountingBackend:
    """Wraps a backend and counts the logit rows it computes."""

    def __init__(self, inner):
        self.__dict__["inner"], self.__dict__["rows"] = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def logits_at(self, input_ids, attention_mask, index):
        self.__dict__["rows"] += int(index.numel())
        return self.inner.logits_at(input_ids, attention_mask, index)


def _run(tiny, registry, refresh):
    be = _CountingBackend(tiny)
    wm = Watermarker(WatermarkKey(b"r" * 32), {"scheme": {"name": "global-sketch", "params": {
        "prior": {"source": "uniform"}, "delta": 2.0}}, "sampler": {**CFG, "marginal_refresh": refresh}},
        backend=be, registry=registry)
    out = wm.generate(PROMPTS, seed=3)
    return be.rows, out, wm.detect_ids(out.token_lists())


def test_refresh_computes_fewer_rows_and_keeps_the_watermark(tiny, builtin_registry):
    rows1, out1, det1 = _run(tiny, builtin_registry, 1)
    rows4, out4, det4 = _run(tiny, builtin_registry, 4)
    assert rows4 < 0.5 * rows1  # the masked rows are recomputed at one step in four
    assert out4.ids.shape == out1.ids.shape
    assert float(det4.p_value.median()) < 0.01 and float(det1.p_value.median()) < 0.01
    rows1b, out1b, _ = _run(tiny, builtin_registry, 1)
    assert torch.equal(out1b.ids, out1.ids) and rows1b == rows1  # r = 1 is the exact, deterministic path
