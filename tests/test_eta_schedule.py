"""η_t schedules on the paper's denoising time (issue 13, defect 3).

τ = t/T is the masked fraction of the block being denoised (the whole canvas with one block); each
semi-autoregressive block runs through τ = 1 → 0, so ``late`` tilts the end of every block.
"""

from __future__ import annotations

import pytest
import torch

from sketchwm.components import DenoiseStep, Marginals
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry


def _scheme(V, **params):
    base = {"prior": {"source": "uniform"}, "sketch": {"name": "count-sketch", "params": {"d": 2, "w": 8, "counting": "count"}},
            "null": "key-randomised"}
    base.update(params)
    return get_registry().create("scheme", "global-sketch", base, WatermarkKey(bytes([5]) * 32), V)


def _step(G, block, n_masked_in_block, step, total_steps, V=20):
    tokens = torch.full((1, G), V, dtype=torch.long)
    masked = torch.zeros(1, G, dtype=torch.bool)
    b0, b1 = block
    masked[0, b1 - n_masked_in_block:b1] = True
    masked[0, b1:] = True  # later blocks untouched
    tokens[~masked] = 7
    logits = torch.randn(1, G, V, generator=torch.Generator().manual_seed(step))
    return DenoiseStep(step=step, total_steps=total_steps, tokens=tokens, masked=masked, marginals=Marginals.canvas(logits, masked),
                       prompt_ids=torch.zeros(1, 0, dtype=torch.long), prompt_mask=torch.zeros(1, 0, dtype=torch.bool),
                       block=block, mask_token_id=V)


def test_late_tilts_the_end_of_every_block_including_the_first():
    """2 blocks of 8 positions, 4 steps each (T = 8): under ``late`` (fraction ½) the last two steps of
    the FIRST block are tilted and its first two are not. Fails on the code before issue 13, whose
    global step counter never tilted the first block."""
    V, G = 20, 16
    sch = _scheme(V, schedule="late", late_fraction=0.5)
    tilted = []
    for s, n_masked in enumerate([8, 6, 4, 2]):  # block 0, steps 0..3
        st = _step(G, (0, 8), n_masked, s, 8, V)
        before = st.marginals.logits.clone()
        tilted.append(not torch.equal(sch.process_logits(st), before))
    assert tilted == [False, False, True, True]
    tilted = []
    for s, n_masked in enumerate([8, 6, 4, 2]):  # block 1, steps 4..7: the same pattern
        st = _step(G, (8, 16), n_masked, 4 + s, 8, V)
        before = st.marginals.logits.clone()
        tilted.append(not torch.equal(sch.process_logits(st), before))
    assert tilted == [False, False, True, True]


def test_schedule_weights_on_denoising_time():
    V = 20
    late = _scheme(V, schedule="late", late_fraction=0.25)
    ramp = _scheme(V, schedule="ramp")
    const = _scheme(V)
    tau = torch.tensor([1.0, 0.5, 0.25, 0.125])
    assert late.schedule_weight(tau, 8).tolist() == [0.0, 0.0, 1.0, 1.0]
    assert torch.allclose(ramp.schedule_weight(tau, 8), torch.tensor([0.125, 0.625, 0.875, 1.0]))
    assert const.schedule_weight(tau, 8).tolist() == [1.0] * 4
    # one block: τ is the masked fraction of the canvas (= 1 − step/T under the even transfer schedule)
    st = _step(16, (0, 16), 12, 1, 4, V)
    assert float(late.denoising_time(st)[0]) == pytest.approx(0.75)


def test_engine_late_schedule_watermarks_the_first_block(tiny):
    """Semi-autoregressive generation (2 blocks) under ``late``: with the same seed the first block of the
    watermarked text differs from the unwatermarked one (it is tilted); before issue 13 it was identical."""
    from sketchwm.engine import MaskedDiffusionSampler

    sch = get_registry().create("scheme", "global-sketch", {"prior": {"source": "uniform"}, "schedule": "late",
                                                            "delta": 2.0}, WatermarkKey(bytes([9]) * 32), tiny.vocab_size)
    cfg = {"gen_length": 32, "block_length": 16, "steps": 8}
    prompts = ["the water of the day"] * 4
    base = MaskedDiffusionSampler(tiny, cfg, None).generate(prompts, torch.Generator().manual_seed(3))
    marked = MaskedDiffusionSampler(tiny, cfg, sch).generate(prompts, torch.Generator().manual_seed(3))
    assert not torch.equal(base.ids[:, :16], marked.ids[:, :16])
