"""``confidence_threshold`` remasking (Fast-dLLM's parallel decoding, Wu et al. 2025) and its regime:
every candidate above the threshold is committed, at least max(k, 1) per step, never outside the
block, and generation ends within the sampler's steps; the default watermark works under it."""

from __future__ import annotations

import pytest
import torch

from sketchwm.api import Watermarker
from sketchwm.bench.config import REGIMES
from sketchwm.config import DEFAULT_SCHEME
from sketchwm.engine import Canvas, MaskedDiffusionSampler
from sketchwm.errors import ConfigError
from sketchwm.keys import WatermarkKey
from sketchwm_builtin.remasking import ConfidenceThresholdRemasking

CFG = {"gen_length": 32, "block_length": 8, "steps": 32, "temperature": 0.5, "remasking": "confidence_threshold"}
PROMPTS = ["the water", "people go", "time of day", "he said"]


def test_choose_commits_every_candidate_above_the_threshold_and_at_least_k():
    """Hand-made marginals: p(x0) per candidate is known; invalid candidates are never committed."""
    rule = ConfidenceThresholdRemasking({"threshold": 0.9})
    p = torch.tensor([[0.95, 0.5, 0.97, 0.6, 0.99],  # three above 0.9, k = 1
                      [0.3, 0.5, 0.4, 0.2, 0.1],  # none above, k = 0: the most confident alone
                      [0.91, 0.2, 0.3, 0.8, 0.7]])  # one above, k = 3: the top three (0.91, 0.8, 0.7)
    logits = torch.stack([p, 1 - p], -1).log()  # (B, K, V = 2), x0 = token 0
    x0 = torch.zeros(3, 5, dtype=torch.long)
    valid = torch.ones(3, 5, dtype=torch.bool)
    valid[0, 4] = False  # a padding candidate above the threshold
    chosen = rule.choose(logits, logits, x0, valid, torch.tensor([1, 0, 3]))
    assert chosen.tolist() == [[True, False, True, False, False],
                               [False, True, False, False, False],
                               [True, False, False, True, True]]


def test_params_are_validated():
    with pytest.raises(ConfigError, match="threshold"):
        ConfidenceThresholdRemasking({"threshold": 1.5})
    assert ConfidenceThresholdRemasking().params.threshold == 0.9


def _record(monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Every commit of the engine: (masked before (B, G), targets (B, K), chosen (B, K))."""
    calls = []
    commit = Canvas.commit

    def spy(self, targets, x0, chosen):
        calls.append((self.masked.clone(), targets.clone(), chosen.clone()))
        commit(self, targets, x0, chosen)

    monkeypatch.setattr(Canvas, "commit", spy)
    return calls


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.9])
def test_generation_stays_in_the_block_and_ends_within_the_steps(tiny, monkeypatch, threshold):
    """At each step: ≥ 1 commit per unfinished text, every committed position masked and inside the
    block of the text's first masked position, every confident candidate committed; the canvas is
    full at the end after at most ``steps`` model calls (threshold 0: one per block)."""
    calls = _record(monkeypatch)
    cfg = {**CFG, "remasking_params": {"threshold": threshold}}
    s = MaskedDiffusionSampler(tiny, cfg)
    conf = []
    choose = s.remasking.choose

    def spy_choose(logits, scaled, x0, valid, k, priority=None):
        conf.append(s.remasking.confidence(logits, scaled, x0))
        return choose(logits, scaled, x0, valid, k, priority)

    s.remasking.choose = spy_choose
    out = s.generate(PROMPTS, torch.Generator().manual_seed(3))
    assert not bool((out.ids == tiny.mask_token_id).any())
    assert len(calls) <= cfg["steps"]
    if threshold == 0.0:
        assert len(calls) == cfg["gen_length"] // cfg["block_length"]
    for (masked, targets, chosen), c in zip(calls, conf):
        open_rows = masked.any(1)
        assert (chosen.sum(1)[open_rows] >= 1).all()
        first = torch.where(open_rows, masked.float().argmax(1), 0)  # (B,) the first masked position
        b0 = first // cfg["block_length"] * cfg["block_length"]
        sel = chosen.nonzero()
        pos = targets[sel[:, 0], sel[:, 1]]
        assert bool(masked[sel[:, 0], pos].all())
        assert bool(((pos >= b0[sel[:, 0]]) & (pos < b0[sel[:, 0]] + cfg["block_length"])).all())
        in_block = (targets >= b0[:, None]) & (targets < b0[:, None] + cfg["block_length"])
        candidates = in_block & torch.gather(masked, 1, targets)
        assert bool(chosen[candidates & (c > threshold)].all())


def test_threshold_one_is_low_confidence(tiny):
    """No candidate exceeds p = 1: the rule commits the scheduled k, as ``low_confidence`` does."""
    base = {**CFG, "steps": 16}
    a = MaskedDiffusionSampler(tiny, {**base, "remasking_params": {"threshold": 1.0}}).generate(
        PROMPTS, torch.Generator().manual_seed(7))
    b = MaskedDiffusionSampler(tiny, {**base, "remasking": "low_confidence"}).generate(PROMPTS, torch.Generator().manual_seed(7))
    assert torch.equal(a.ids, b.ids)


def test_the_default_watermark_under_the_regime(builtin_registry, tiny):
    """The default scheme generates under the Fast-dLLM regime's sampler and is detected; the
    unwatermarked texts of the same sampler are not."""
    regime = REGIMES["fastdllm-blocks-t0.5-c0.9"]
    sampler = {**regime.sampler, "gen_length": 64, "steps": 64}
    wm = Watermarker(WatermarkKey(b"f" * 32), {"scheme": {"name": DEFAULT_SCHEME}, "sampler": sampler}, backend=tiny,
                     registry=builtin_registry)
    prompts = PROMPTS * 2
    marked = wm.generate(prompts, seed=1)
    plain = wm.generate(prompts, seed=1, watermark=False)
    assert not bool((marked.ids == tiny.mask_token_id).any())
    r_wm, r_plain = wm.detect_ids(marked.token_lists()), wm.detect_ids(plain.token_lists())
    assert float(r_wm.p_value.median()) < 1e-3
    assert float(r_plain.p_value.median()) > 0.05


def test_the_regime_runs_in_the_harness(tmp_path):
    """A bench grid in the named regime: its sampler reaches the engine (the rule and its threshold,
    steps capped at the length) and the default and a baseline get clean cells there."""
    from sketchwm.bench.config import BenchConfig
    from sketchwm.bench.results import read_results
    from sketchwm.bench.inputs import Services
    from sketchwm.bench.runner import run_bench

    cfg = BenchConfig.model_validate({
        "name": "fast", "backends": [{"name": "tiny"}], "regimes": ["fastdllm-blocks-t0.5-c0.9"],
        "schemes": [{"name": DEFAULT_SCHEME}, {"name": "red-green-dlm"}], "lengths": [32],
        "prompt_sets": [{"name": "w", "source": "tiny", "n": 4}], "keys": 1, "n_null_cal": 99, "n_null_fpr": 20,
        "attacks": [], "tokens_step": 0, "batch_size": 64, "metrics": ["tpr@1%fpr"]})
    sampler = Services.build(cfg).models.sampler_config(0, 32, 0)
    assert (sampler["remasking"], sampler["remasking_params"], sampler["steps"], sampler["block_length"]) == (
        "confidence_threshold", {"threshold": 0.9}, 32, 32)
    assert run_bench(cfg, tmp_path, progress=False)["ran"] == 2
    df = read_results(tmp_path)
    text = df[df["row_type"] == "text"]
    assert set(text["regime"]) == {"fastdllm-blocks-t0.5-c0.9"}
    assert set(text["scheme"]) == {DEFAULT_SCHEME, "red-green-dlm"} and (text["n_tokens"] > 0).all()
