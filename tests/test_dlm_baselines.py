"""The DLM baselines ``dmark`` (Wu et al. 2025) and ``gumbel-position`` (Bagchi et al. 2025).

* ``dmark``'s tilt equals δ times the green lists of the right neighbours, per strategy (decoded
  left token, predicted left token, decoded right token), against a brute-force construction;
* ``gumbel-position``'s uniforms depend on the generation position (and only on it), and its
  detector needs the text at its generated positions;
* both run in every sampling regime of the leaderboard (random order, blocks with low-confidence
  remasking, entropy remasking with a nucleus, greedy T = 0), with the watermark detected where the
  scheme can act and, for the distortion-free one, the greedy text left unchanged.
"""

from __future__ import annotations

import pytest
import torch

from sketchwm.components import DenoiseStep, MarginalReads, Marginals
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.prf import keyed_uniform
from sketchwm.registry import get_registry
from sketchwm_baselines.green import green_bits

V = 120
MASK = 4
KEY = WatermarkKey(b"dlm-baselines-test-secret-key-001")

pytestmark = pytest.mark.usefixtures("one_thread")


def _make(name: str, params: dict | None = None, key: WatermarkKey = KEY, vocab_size: int = V):
    return get_registry().create("scheme", name, params or {}, key, vocab_size)


def _state(seed: int = 0):
    """One text of 8 positions after the prompt [7]: decoded 11 at 1 and 12 at 4, the rest masked, so
    the masked positions see every neighbour case (decoded / masked / none on each side)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn((1, 8, V), generator=g) * 2.0
    logits[..., :5] = float("-inf")  # special ids, as the engine bans them
    tokens = torch.tensor([[MASK, 11, MASK, MASK, 12, MASK, MASK, MASK]])
    masked = tokens == MASK
    step = DenoiseStep(step=0, total_steps=1, tokens=tokens, masked=masked,
                       marginals=Marginals.canvas(logits.clone(), masked),
                       prompt_ids=torch.tensor([[7]]), prompt_mask=torch.ones(1, 1, dtype=torch.bool), block=(0, 8),
                       mask_token_id=MASK, generator=torch.Generator().manual_seed(seed))
    return step, logits


def _expected_dmark_bias(strategy: str, scheme, tokens: torch.Tensor, logits: torch.Tensor,
                         prompt_last: int) -> torch.Tensor:
    """δ-tilt of DMark's strategies, position by position (plain Python over the 8 positions)."""
    delta, gamma = scheme.params.delta, scheme.params.gamma
    seed = scheme._seed
    vocab = torch.arange(V)
    toks = tokens[0].tolist()
    G = len(toks)
    bias = torch.zeros(G, V)
    for i in range(G):
        if toks[i] != MASK:
            continue
        left = prompt_last if i == 0 else (toks[i - 1] if toks[i - 1] != MASK else None)
        right = toks[i + 1] if i + 1 < G and toks[i + 1] != MASK else None
        predicted = int(logits[0, i - 1].argmax()) if i > 0 and toks[i - 1] == MASK else None
        if strategy == "predictive":
            h = left if left is not None else predicted
            if h is not None:
                bias[i] += delta * green_bits(seed, torch.tensor(h), vocab, V, gamma).float()
            continue
        if left is not None:
            bias[i] += delta * green_bits(seed, torch.tensor(left), vocab, V, gamma).float()
        if right is not None:  # v is the context of the decoded right token
            bias[i] += delta * green_bits(seed, vocab, torch.tensor(right), V, gamma).float()
        if strategy == "predictive-bidirectional" and left is None and right is None and predicted is not None:
            bias[i] += delta * green_bits(seed, torch.tensor(predicted), vocab, V, gamma).float()
    return bias


@pytest.mark.parametrize("strategy", ["predictive", "bidirectional", "predictive-bidirectional"])
def test_dmark_tilt_is_delta_times_the_neighbours_green_lists(strategy):
    """Every masked position is tilted by δ·G(left, ·) (decoded, or the argmax of the left marginal
    where the strategy predicts it) and δ·G(·, right) (decoded right token), and by nothing else."""
    scheme = _make("dmark", {"strategy": strategy, "delta": 1.5})
    step, logits = _state(seed=3)
    scheme.begin(1, 8, step.prompt_ids, step.prompt_mask)
    tilted = scheme.process_logits(step)  # (1, 8, V)
    want = _expected_dmark_bias(strategy, scheme, step.tokens, logits, prompt_last=7)
    live = torch.isfinite(logits[0])  # banned ids stay at -inf
    got = torch.where(live, tilted[0] - logits[0], 0.0)
    want = torch.where(live, want, 0.0)
    masked = step.masked[0]
    assert torch.allclose(got[masked], want[masked], atol=1e-5)
    assert float(want[masked].abs().sum()) > 0
    # each case of the state is reached: predicted left (3: right decoded; 6, 7: no decoded neighbour)
    if strategy != "bidirectional":
        assert float(want[6].abs().sum()) > 0 and float(want[7].abs().sum()) > 0


def test_dmark_declares_the_left_neighbour_rows():
    """The predictive strategies read the marginal left of a target; ``bidirectional`` the targets only."""
    assert _make("dmark").reads == MarginalReads.near(1)
    assert _make("dmark", {"strategy": "predictive"}).reads == MarginalReads.near(1)
    assert _make("dmark", {"strategy": "bidirectional"}).reads == MarginalReads.sampled()
    assert _make("gumbel-position").reads == MarginalReads.sampled()


def test_gumbel_position_uniforms_are_keyed_on_the_position():
    """r_{i,v} = PRF(k, i·V + v): the same row for position i in every text and at every step, other rows
    at other positions; detection is Aaronson's score of those uniforms."""
    scheme = _make("gumbel-position")
    G = 6
    logits = torch.zeros((2, G, V))
    tokens = torch.full((2, G), MASK)
    masked = tokens == MASK
    targets = torch.tensor([[0, 3], [3, 5]])
    m = Marginals.select(logits, masked, targets, torch.ones_like(targets, dtype=torch.bool), scheme.reads)
    step = DenoiseStep(step=2, total_steps=4, tokens=tokens, masked=masked, marginals=m, prompt_ids=torch.tensor([[7], [9]]),
                       prompt_mask=torch.ones(2, 1, dtype=torch.bool), block=(0, G), mask_token_id=MASK,
                       generator=torch.Generator().manual_seed(0))
    scheme.begin(2, G, step.prompt_ids, step.prompt_mask)
    u = scheme.sampling_uniforms(step).double()  # (2, 2, V)
    vocab = torch.arange(V)
    for b in range(2):
        for k in range(2):
            i = int(targets[b, k])
            want = keyed_uniform(scheme._seed, i * V + vocab, dtype=torch.float64)
            assert torch.allclose(u[b, k], want.clamp(max=1 - 2.0**-24), atol=1e-7)
    assert torch.equal(u[0, 1], u[1, 0])  # position 3 in both texts
    assert not torch.allclose(u[0, 0], u[0, 1])  # positions 0 and 3 differ
    ids = torch.tensor([[10, 20, 30, 40, 50, 60] * 3])
    s = scheme.score_ids(ids, torch.ones_like(ids, dtype=torch.bool))
    r = keyed_uniform(scheme._seed, torch.arange(ids.shape[1]) * V + ids[0], dtype=torch.float64)
    assert torch.allclose(s.z, ((-torch.log1p(-r)).sum() - ids.shape[1]) / ids.shape[1] ** 0.5)


def test_gumbel_position_detection_needs_the_generated_positions(tiny):
    """Watermarked texts are detected at their positions and not once shifted by one token (a
    position-blind key would still detect them), nor with another key."""
    scheme = _make("gumbel-position", vocab_size=tiny.vocab_size)
    cfg = {"gen_length": 64, "block_length": 64, "steps": 32}
    prompts = ["the water", "a man said", "one day", "people like", "time", "we can"]
    ids = MaskedDiffusionSampler(tiny, cfg, scheme).generate(prompts, torch.Generator().manual_seed(4)).ids
    ones = torch.ones_like(ids, dtype=torch.bool)
    assert float(scheme.score_ids(ids, ones).p_value.max()) < 1e-3
    shifted = ids[:, 1:]
    assert float(scheme.score_ids(shifted, torch.ones_like(shifted, dtype=torch.bool)).p_value.median()) > 0.05
    other = _make("gumbel-position", key=WatermarkKey(b"dlm-baselines-test-secret-key-002"), vocab_size=tiny.vocab_size)
    assert float(other.score_ids(ids, ones).p_value.median()) > 0.05


#: the sampling regimes of the leaderboard, as sampler overrides
REGIMES = {
    "random": {},
    "blocks-low-confidence": {"remasking": "low_confidence", "block_length": 16},
    "entropy-top-p": {"remasking": "entropy", "top_p": 0.9},
    "greedy": {"remasking": "low_confidence", "block_length": 16, "temperature": 0.0},
}


@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("name", ["dmark", "gumbel-position"])
def test_runs_in_every_regime(name, regime, tiny):
    """8 texts × 64 tokens per regime: watermarked texts are detected (median p < 1e-3) where the
    scheme can act; ``gumbel-position`` at T = 0 leaves the greedy text unchanged (distortion-free: no
    noise is drawn) and is not detected in it."""
    cfg = {"gen_length": 64, "block_length": 64, "steps": 32, **REGIMES[regime]}
    prompts = ["the water", "a man said", "people like to", "one day", "time", "many new words", "the first", "we can"]
    scheme = _make(name, vocab_size=tiny.vocab_size)
    wm = MaskedDiffusionSampler(tiny, cfg, scheme).generate(prompts, torch.Generator().manual_seed(6)).ids
    p = scheme.score_ids(wm, torch.ones_like(wm, dtype=torch.bool)).p_value
    if name == "gumbel-position" and regime == "greedy":
        base = MaskedDiffusionSampler(tiny, cfg).generate(prompts, torch.Generator().manual_seed(6)).ids
        assert torch.equal(wm, base)
        assert float(p.median()) > 0.01
    else:
        assert float(p.median()) < 1e-3, p
