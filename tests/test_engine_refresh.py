"""Sampler ``marginal_refresh``: the LM head runs on every masked row only every r-th step."""

from __future__ import annotations

import torch

from sketchwm.api import Watermarker
from sketchwm.keys import WatermarkKey

CFG = {"gen_length": 32, "block_length": 32, "steps": 16, "remasking": "random"}
PROMPTS = ["the water", "people go", "time of day", "he said"]


def _run(tiny, registry, refresh, monkeypatch):
    """Generate with ``marginal_refresh = refresh`` and count the logit rows the backend computes."""
    rows = {"n": 0}
    inner = tiny.logits_at

    def counting(input_ids, attention_mask, index):
        rows["n"] += int(index.numel())
        return inner(input_ids, attention_mask, index)

    with monkeypatch.context() as m:
        m.setattr(tiny, "logits_at", counting)
        wm = Watermarker(WatermarkKey(b"r" * 32), {"scheme": {"name": "global-sketch", "params": {
            "prior": {"source": "uniform"}, "delta": 2.0}}, "sampler": {**CFG, "marginal_refresh": refresh}},
            backend=tiny, registry=registry)
        out = wm.generate(PROMPTS, seed=3)
    return rows["n"], out, wm.detect_ids(out.token_lists())


def test_refresh_computes_fewer_rows_and_keeps_the_watermark(tiny, builtin_registry, monkeypatch):
    rows1, out1, det1 = _run(tiny, builtin_registry, 1, monkeypatch)
    rows4, out4, det4 = _run(tiny, builtin_registry, 4, monkeypatch)
    assert rows4 < 0.5 * rows1  # the masked rows are recomputed at one step in four
    assert out4.ids.shape == out1.ids.shape
    assert float(det4.p_value.median()) < 0.01 and float(det1.p_value.median()) < 0.01
    rows1b, out1b, _ = _run(tiny, builtin_registry, 1, monkeypatch)
    assert torch.equal(out1b.ids, out1.ids) and rows1b == rows1  # r = 1 is the exact, deterministic path
