"""Channels and combined schemes (sketchwm/channels.py): a combined scheme is its declared channels, its
tilt is the channels' tilts, its p-value the weighted Bonferroni bound over the channels' own p-values
(each reported by name in ``SchemeScores.channels``), and the generation hooks reach every channel."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sketchwm.channels import Channel, CombinedScheme, ComposedScheme, Tilt, union_reads
from sketchwm.components import DenoiseStep, MarginalReads, Marginals
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError
from sketchwm.keys import WatermarkKey
from sketchwm.multiple_testing import weighted_bonferroni
from sketchwm.registry import get_registry

#: the default's sketch channel params (delta, coverage_full, marginals) with a uniform prior
DEFAULT_SKETCH_UNIFORM = {"delta": 0.75, "coverage_full": 0.25, "marginals": "sampled", "prior": {"source": "uniform"}}

V = 120
MASK = 4
KEY = WatermarkKey(bytes(range(32)))

pytestmark = pytest.mark.usefixtures("one_thread")


class _TwoGreen(CombinedScheme):
    """Two red-green-dlm channels under two subkeys, each an increment with half of α."""

    name = "test-two-green"

    class Params(StrictModel):
        """No parameters."""

    def __init__(self, params, key, vocab_size: int, device="cpu", channels: tuple[str, ...] = ("a", "b"),
                 acts: str = "increment"):
        super().__init__(params, key, vocab_size, device)
        reg = get_registry()
        self.combine(*[Channel(n, reg.create("scheme", "red-green-dlm", {"delta": 1.5}, key.subkey(n), vocab_size),
                               acts, 1.0 / len(channels)) for n in channels])


def _step(B: int, G: int, seed: int) -> DenoiseStep:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn((B, G, V), generator=g)
    logits[..., :5] = float("-inf")
    masked = torch.rand((B, G), generator=g) < 0.6
    tokens = torch.where(masked, torch.full((B, G), MASK), torch.randint(5, V, (B, G), generator=g))
    return DenoiseStep(step=0, total_steps=4, tokens=tokens, masked=masked, marginals=Marginals.canvas(logits, masked),
                       prompt_ids=torch.tensor([[9, 17]] * B), prompt_mask=torch.ones(B, 2, dtype=torch.bool),
                       block=(0, G), mask_token_id=MASK, generator=torch.Generator().manual_seed(seed))


def test_combined_tilt_adds_the_increments_and_the_pvalue_is_bonferroni_over_the_channels():
    """Two increment channels: tilt = l + Σ_j increment_j (each read at the untilted marginals);
    p = min(1, 2·min(p_a, p_b)); ``channels`` holds each channel's own (p, z) as float64."""
    both = _TwoGreen({}, KEY, V)
    a, b = (c.scheme for c in both.channels)
    step = _step(2, 12, seed=1)
    raw = step.marginals.logits.clone()

    def fresh() -> DenoiseStep:
        return dataclasses.replace(step, marginals=Marginals.canvas(raw.clone(), step.masked))

    got = both.process_logits(fresh())
    want = raw + (a.process_logits(fresh()) - raw) + (b.process_logits(fresh()) - raw)
    live = torch.isfinite(raw) & step.masked[..., None]
    assert torch.allclose(got[live], want[live], atol=1e-5)
    assert both.reads == a.reads and both.noise == "sampler"

    ids = torch.randint(5, V, (16, 40), generator=torch.Generator().manual_seed(2))
    valid = torch.ones_like(ids, dtype=torch.bool)
    out = both.score_ids(ids, valid)
    pa, pb = a.score_ids(ids, valid), b.score_ids(ids, valid)
    assert torch.equal(out.p_value, torch.clamp(2 * torch.minimum(pa.p_value.double(), pb.p_value.double()), max=1.0))
    assert list(out.channels) == ["a", "b"]
    for name, s in (("a", pa), ("b", pb)):
        p, z = out.channels[name]
        assert p.dtype == z.dtype == torch.float64 and p.shape == (16,)
        assert torch.equal(p, s.p_value.double()) and torch.equal(z, s.z.double())
    assert out.p_value_method.startswith("weighted Bonferroni over two channels (a 0.5, b 0.5)")


def test_a_channel_is_added_by_declaring_it():
    """A third channel is one more entry: its p-value enters the bound at its weight."""
    three = _TwoGreen({}, KEY, V, channels=("a", "b", "c"))
    ids = torch.randint(5, V, (8, 40), generator=torch.Generator().manual_seed(3))
    valid = torch.ones_like(ids, dtype=torch.bool)
    ps = [s.p_value.double() for s in three.channel_scores(ids, valid)]
    assert torch.equal(three.score_ids(ids, valid).p_value, weighted_bonferroni(ps, [1 / 3] * 3))
    assert list(three.score_ids(ids, valid).channels) == ["a", "b", "c"]


def test_combine_refuses_what_it_cannot_combine():
    """Repeated names, two channels that rewrite the rows, and no channel at all are refused."""
    with pytest.raises(ConfigError, match="distinct names"):
        _TwoGreen({}, KEY, V, channels=("a", "a"))
    with pytest.raises(ConfigError, match="at most one rows channel"):
        _TwoGreen({}, KEY, V, acts="rows")
    with pytest.raises(ConfigError, match="one or more channels"):
        _TwoGreen({}, KEY, V, channels=())


def test_the_stop_token_and_begin_reach_every_part():
    """ComposedScheme forwards set_stop_token and begin to every part (the combined schemes and the key family)."""
    both = _TwoGreen({}, KEY, V)
    both.set_stop_token(7)
    assert both.stop_token_id == 7 and all(c.scheme.stop_token_id == 7 for c in both.channels)
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        both.set_stop_token(V)
    family = get_registry().create("scheme", "global-sketch-family",
                                   {"members": 3, "decoys": 2, "member": {"prior": {"source": "uniform"}}}, KEY, V)
    assert isinstance(family, ComposedScheme)
    family.set_stop_token(11)
    assert all(m.stop_token_id == 11 for m in family.members)


def test_the_default_reports_its_channels():
    """global-sketch-green: channels ``sketch``, ``green`` (the default, ``sampling: free``) and
    ``keyed-sampling`` under ``sampling: keyed``, each the p-value and z of the scheme it names."""
    reg = get_registry()
    sketch = {"prior": {"source": "uniform"}, "coverage_full": 0.25}
    default = reg.create("scheme", "global-sketch-green", {"sketch": sketch, "sampling": "keyed"}, KEY, V)
    ids = torch.randint(5, V, (12, 48), generator=torch.Generator().manual_seed(4))
    valid = torch.ones_like(ids, dtype=torch.bool)
    out = default.score_ids(ids, valid)
    assert list(out.channels) == ["sketch", "green", "keyed-sampling"]
    for c, s in zip(default.channels, default.channel_scores(ids, valid)):
        assert torch.equal(out.channels[c.name][0], s.p_value.double().cpu())
    free = reg.create("scheme", "global-sketch-green", {"sketch": sketch}, KEY, V)
    assert list(free.score_ids(ids, valid).channels) == ["sketch", "green"] and free.noise == "sampler"
    # every masked row for the sketch, incrementally, and its green lists' neighbours (radius 2) fresh
    assert default.noise == "keyed" and default.reads == MarginalReads.masked(incremental=True, radius=2)


def test_union_reads_and_tilt_shares():
    """union_reads: masked rows if any channel reads them (incremental when every masked read is, carrying
    the widest ``near`` radius), else the widest ``near``, else the targets; Tilt.add_to adds each text's
    increment times its share."""
    near2, near1, sampled = MarginalReads.near(2), MarginalReads.near(1), MarginalReads.sampled()
    inc = MarginalReads.masked(incremental=True)
    assert union_reads([sampled, near1, near2]) == near2
    assert union_reads([sampled]) == sampled
    assert union_reads([inc, near2, sampled]) == MarginalReads.masked(incremental=True, radius=2)
    assert union_reads([inc, sampled]) == inc
    assert union_reads([MarginalReads.masked(), inc, near1]) == MarginalReads.masked()
    assert union_reads([inc] * 2) == inc
    with pytest.raises(ValueError, match="radius"):
        MarginalReads("masked", 2, False)
    with pytest.raises(ValueError, match="radius"):
        MarginalReads("sampled", 1)
    logits = torch.zeros(2, 1, 4)
    tilt = Tilt(index=torch.tensor([[[1, 1]], [[2, 3]]]), value=torch.ones(2, 1, 2))
    tilt.add_to(logits, torch.tensor([0.5, 1.0]))
    assert torch.equal(logits, torch.tensor([[[0.0, 1.0, 0.0, 0.0]], [[0.0, 0.0, 1.0, 1.0]]]))


def test_the_plugin_guides_combined_scheme_runs():
    """docs/plugins.md's ``my_pkg/green_pair.py``: two channels, tested by the weighted Bonferroni bound."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(# my_pkg/green_pair.py\n.*?)```", page, re.S)
    assert code, "docs/plugins.md no longer shows my_pkg/green_pair.py"
    ns: dict = {}
    exec(compile(code.group(1), "docs/plugins.md:my_pkg/green_pair.py", "exec"), ns)  # noqa: S102
    pair = ns["GreenPair"]({}, KEY, V)
    ids = torch.randint(5, V, (8, 40), generator=torch.Generator().manual_seed(5))
    valid = torch.ones_like(ids, dtype=torch.bool)
    out = pair.score_ids(ids, valid)
    p = torch.stack([out.channels[n][0] for n in ("left", "right")])
    assert torch.equal(out.p_value, (2 * p.min(0).values).clamp(max=1.0))
    step = _step(2, 10, seed=6)
    assert pair.process_logits(step).shape == (2, step.marginals.targets.shape[1], V)


def test_between_refreshes_the_rows_within_the_radius_come_fresh_when_asked_for():
    """An incremental masked read with a radius: at a step between refreshes the engine passes the
    targets, and the masked rows within the radius of them (a partial refresh), not every masked row,
    when a reader asks for them (Marginals.wider), from the same forward pass of the model."""
    from sketchwm.engine import Canvas, IncrementalMarginals

    class Model:
        name, vocab_size = "positions", 5
        forwards, heads = 0, []

        def logits_rows(self, x, attn):  # one forward pass; the head on any rows (B, R) → (B, R, V)
            Model.forwards += 1
            return lambda index: self.logits_at(x, attn, index)

        def logits_at(self, x, attn, index):  # each row's position in its logits
            Model.heads.append(index.shape[1])
            return index[..., None].float().expand(-1, -1, 5).clone()

    G, MASK = 10, 4
    canvas = Canvas.__new__(Canvas)
    canvas.prompt_ids, canvas.prompt_mask = torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, 0, dtype=torch.bool)
    canvas.tokens, canvas.mask_token_id = torch.full((1, G), MASK), MASK
    canvas.tokens[0, 0] = 1  # position 0 is known
    source = IncrementalMarginals(Model(), torch.zeros(0, dtype=torch.long))
    targets, valid = torch.tensor([[5]]), torch.tensor([[True]])
    m = source.marginals(canvas, MarginalReads.masked(incremental=True, radius=2), targets, valid, step=3, refresh=False)
    assert m.rows_are_targets and not m.complete and m.positions.tolist() == [[5]]
    assert (Model.forwards, Model.heads) == (1, [1])  # the target's row alone so far
    wide = m.wider()
    assert not wide.complete and wide.positions[wide.valid].tolist() == [3, 4, 5, 6, 7]
    assert wide.positions[0, wide.targets[0, 0]].item() == 5
    assert torch.equal(wide.logits[0, :, 0], wide.positions[0].float())
    assert m.wider() is wide and (Model.forwards, Model.heads) == (1, [1, 5])  # once, on the same forward pass
    alone = source.marginals(canvas, MarginalReads.masked(incremental=True), targets, valid, step=3, refresh=False)
    assert alone.positions[alone.valid].tolist() == [5]
    full = source.marginals(canvas, MarginalReads.masked(incremental=True, radius=2), targets, valid, step=0, refresh=True)
    assert full.complete and full.positions[full.valid].tolist() == list(range(1, G))


def test_a_channel_reads_between_refreshes_what_it_declared_not_what_another_channel_added():
    """Between refreshes a sketch-like channel (every masked row, incremental, no radius) gets the
    targets alone, though a green-like channel's radius made the engine pass their neighbours fresh
    too; the green-like channel gets those rows; a complete step reaches both unchanged."""
    from sketchwm.channels import channel_step

    class Reader:
        def __init__(self, reads):
            self.reads = reads

    B, R, K, V = 2, 5, 2, 7
    logits = torch.randn(B, R, V)
    positions = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 8, 9]])
    targets = torch.tensor([[2, 4], [1, 3]])  # rows of the targets
    partial = Marginals(logits, positions, torch.ones(B, R, dtype=torch.bool), targets,
                        torch.tensor([[True, True], [True, False]]), complete=False)
    step = DenoiseStep(3, 8, torch.zeros(B, 10, dtype=torch.long), torch.ones(B, 10, dtype=torch.bool), partial,
                       torch.zeros(B, 0, dtype=torch.long), torch.zeros(B, 0, dtype=torch.bool), (0, 10), 9)
    sketch = Channel("sketch", Reader(MarginalReads.masked(incremental=True)), "rows", 0.5)
    green = Channel("green", Reader(MarginalReads.near(2)), "increment", 0.5)
    got = channel_step(sketch, step).marginals
    assert got.rows_are_targets and not got.complete
    assert got.positions.tolist() == [[5, 7], [1, 8]]
    assert got.target_valid.tolist() == [[True, True], [True, False]]
    assert torch.equal(got.logits, logits[torch.arange(B)[:, None], targets])
    assert channel_step(green, step) is step
    full = dataclasses.replace(step, marginals=dataclasses.replace(partial, complete=True))
    assert channel_step(sketch, full) is full


def test_channels_scored_on_threads_of_their_own_give_the_sequential_scores(monkeypatch):
    """The default scored with its channels on concurrent threads (several torch threads, a large batch)
    gives every statistic of the one-thread path bit for bit, and a bad batch raises the same error."""
    import sketchwm.channels as channels
    from sketchwm.errors import InputError

    sketch = {"prior": {"source": "uniform"}}
    scheme = get_registry().create("scheme", "global-sketch-green", {"sketch": sketch}, KEY, V)
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, V, (64, 40), generator=g)
    valid = torch.rand(64, 40, generator=g) > 0.1
    seq = scheme.score_ids(ids, valid)  # one torch thread here (module fixture): the sequential path
    calls = []
    real = channels._channel_pool
    monkeypatch.setattr(channels, "_channel_pool", lambda w: calls.append(w) or real(w))
    monkeypatch.setattr(channels, "CONCURRENT_IDS", 1)
    torch.set_num_threads(2)
    try:
        conc = scheme.score_ids(ids, valid)
        with pytest.raises(InputError, match="outside"):
            scheme.score_ids(torch.where(ids == 3, V + 5, ids), valid | True)
    finally:
        torch.set_num_threads(1)
    assert calls, "the concurrent path did not run"
    for f in ("score", "z", "p_value", "n_scored"):
        assert torch.equal(getattr(seq, f), getattr(conc, f)), f
    assert seq.p_value_method == conc.p_value_method
    for name, (p, z) in seq.channels.items():
        assert torch.equal(p, conc.channels[name][0]) and torch.equal(z, conc.channels[name][1]), name


def test_the_default_computes_its_green_rows_only_when_it_tilts_and_writes_the_same_texts(tiny, builtin_registry,
                                                                                          monkeypatch):
    """Between refreshes the engine passes the default its targets alone and the green channel's
    neighbour rows on demand: they are computed at no step when the handover leaves the green lists no
    share (the shipped c* = 0.25 on the tiny model, whose samples cover about half their positions with
    distinct tokens) and at every step when it leaves them one (c* = 1), and the texts equal those of
    computing the rows at every step."""
    from sketchwm.components import marginals as marginals_module
    from sketchwm.engine import MaskedDiffusionSampler
    from sketchwm.marginal_sources import IncrementalMarginals

    widened = {"n": 0}
    wider = marginals_module.Marginals.wider

    def counting(self):
        widened["n"] += self.widen is not None and self._wider is None
        return wider(self)

    def generate(scheme, eager):
        cfg = {"gen_length": 32, "block_length": 32, "steps": 16, "remasking": "random", "temperature": 1.0}
        sampler = MaskedDiffusionSampler(tiny, cfg, scheme)
        assert isinstance(sampler.source, IncrementalMarginals)
        if eager:  # every step's neighbour rows computed up front, as a partial refresh of them
            lazy = sampler.source.marginals
            sampler.source.marginals = lambda *a, **k: lazy(*a, **k).wider()
        return sampler.generate(["the water", "people go", "time of day", "he said"], torch.Generator().manual_seed(5)).ids

    monkeypatch.setattr(marginals_module.Marginals, "wider", counting)
    for full, steps in ((0.25, 0), (1.0, 15)):  # 16 steps, the first a complete one
        scheme = builtin_registry.create("scheme", "global-sketch-green",
                                         {"sketch": {**DEFAULT_SKETCH_UNIFORM, "coverage_full": full}},
                                         WatermarkKey(b"w" * 32), tiny.vocab_size, registry=builtin_registry)
        widened["n"] = 0
        lazy_ids = generate(scheme, eager=False)
        assert widened["n"] == steps, (full, widened["n"])
        assert torch.equal(lazy_ids, generate(scheme, eager=True)), full


@pytest.mark.parametrize("sharpness", [1.0, 12.0])
def test_with_an_output_buffer_the_default_tilts_as_on_a_copy(sharpness):
    """A caller that owns the output (Marginals.out, every row a target: a benchmark, a user's buffer) gets
    the sketch's tilt first and the green increment only where its share is above 0; the result equals
    the in-place path on a copy of the logits, which computes the increment first. Flat logits leave
    the green lists no share (high coverage); rows that all peak on the same few tokens give them one."""
    V, B, G = 500, 3, 24
    scheme = get_registry().create("scheme", "global-sketch-green", {"sketch": DEFAULT_SKETCH_UNIFORM},
                                   WatermarkKey(b"o" * 32), V)
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(B, G, V, generator=g) + sharpness * torch.randn(1, 1, V, generator=g)  # (B, G, V)
    masked = torch.rand(B, G, generator=g) < 0.9
    tokens = torch.where(masked, V - 1, 7)  # the known positions hold one token

    def step(marginals):
        return DenoiseStep(3, 16, tokens, masked, marginals, torch.zeros(B, 1, dtype=torch.long),
                           torch.ones(B, 1, dtype=torch.bool), (0, G), V - 1, None, 1.0)

    scheme.begin(B, G, torch.zeros(B, 1, dtype=torch.long), torch.ones(B, 1, dtype=torch.bool))
    base = scheme.channel("sketch").scheme.tilt(step(Marginals.canvas(logits.clone(), masked)))
    share = scheme.green_share(base)
    assert (bool((share > 0).any()) if sharpness > 1 else not bool((share > 0).any())), share
    out = scheme.process_logits(step(Marginals.canvas(logits, masked, out=torch.empty_like(logits))))
    in_place = scheme.process_logits(step(Marginals.canvas(logits.clone(), masked)))
    assert torch.equal(out, in_place)
