"""Greedy decoding and the unmasking order as a watermark channel.

* the warning: a scheme that tilts (or replaces the sampling noise) warns once at T = 0, through the
  CLI's warning path and into the record's provenance, and not at T > 0 or when it steers the order;
* remasking rules are a plugin kind: a third-party rule registered through the plugin mechanism is
  the one the engine uses;
* order steering marks greedy text: on a tiny model whose argmax depends on its decoded neighbours
  (:class:`sketchwm.testing.neighbour.NeighbourBackend`: the order changes the greedy text), the global sketch's steering (its default at T = 0) and
  ``dgmark`` are detected, with the marginals untouched;
* dgmark's keying: its parity is the documented keyed function, recomputed here independently.
"""

from __future__ import annotations

import json
import types
import warnings

import pytest
import torch

from sketchwm.context import BuildContext
from sketchwm.engine import MaskedDiffusionSampler, RemaskingRule
from sketchwm.errors import GreedyDecodingWarning, RegistryError
from sketchwm.hookspecs import hookimpl
from sketchwm.observers import TiltObserver
from sketchwm.prf import keyed_bits
from sketchwm.registry import get_registry
from sketchwm.testing import tiny_backend
from sketchwm.testing.neighbour import NeighbourBackend
from sketchwm.testing.schemes import KEY, OTHER_KEY, PROMPTS, plugin_registry

pytestmark = pytest.mark.usefixtures("one_thread")

GREEDY = {"gen_length": 64, "block_length": 32, "steps": 32, "temperature": 0.0, "remasking": "low_confidence"}
UNIFORM = {"prior": {"source": "uniform"}}


def _scheme(name, backend, key=KEY, **params):
    return get_registry().build("scheme", name, params, BuildContext(key=key, vocab_size=backend.vocab_size))


def _valid(ids):
    return torch.ones_like(ids, dtype=torch.bool)


# ------------------------------------------------------------------ the warning
@pytest.mark.parametrize("name,params", [("red-green-dlm", {}), ("unigram", {}), ("aar-gumbel", {}),
                                         ("global-sketch", {**UNIFORM, "order": "off"})])
def test_greedy_warning_fires_once_for_schemes_that_cannot_act(name, params, tiny):
    scheme = _scheme(name, tiny, **params)
    with pytest.warns(GreedyDecodingWarning, match=f"scheme '{name}' at temperature 0.*temperature > 0") as rec:
        first = MaskedDiffusionSampler(tiny, GREEDY, scheme)
        MaskedDiffusionSampler(tiny, GREEDY, scheme)  # the same scheme again: no second warning
    assert len([w for w in rec if issubclass(w.category, GreedyDecodingWarning)]) == 1
    assert first.warnings and "\n" not in first.warnings[0] and not first.steering


@pytest.mark.parametrize("name,params,sampler", [
    ("red-green-dlm", {}, {"temperature": 0.7}),  # T > 0: the tilt acts
    ("global-sketch", UNIFORM, {}),  # T = 0: the default global sketch steers the order
    ("global-sketch", {**UNIFORM, "order": "off"}, {"temperature": 1.0}),
    ("dgmark", {}, {}),  # the order is its channel
])
def test_no_greedy_warning_otherwise(name, params, sampler, tiny):
    scheme = _scheme(name, tiny, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GreedyDecodingWarning)
        s = MaskedDiffusionSampler(tiny, {**GREEDY, **sampler}, scheme)
        MaskedDiffusionSampler(tiny, {**GREEDY, **sampler})  # no scheme at all
    assert s.warnings == []


def test_greedy_warning_cli_line_and_provenance(tmp_path, capsys, monkeypatch):
    """`sketchwm generate` of a tilting scheme at T = 0: one `sketchwm: warning:` line on stderr (no
    source location), and the record's provenance carries the same line."""
    from cli_tiny import GEN_SMALL, save_tiny_model, tiny_args

    from sketchwm.cli import main

    monkeypatch.setenv("SKETCHWM_KEY", "00" * 32)
    model = save_tiny_model(tmp_path / "m")
    out = tmp_path / "out.jsonl"
    args = tiny_args(model, order="off")
    rc = main(["generate", "--prompt", "the water", "--prompt", "one day", "--out", str(out), *GEN_SMALL,
               "--temperature", "0", "--remasking", "low_confidence", *args])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = [ln for ln in err.splitlines() if "GreedyDecodingWarning" in ln or ln.startswith("sketchwm: warning:")]
    assert len(lines) == 1 and lines[0].startswith("sketchwm: warning: scheme 'global-sketch' at temperature 0"), err
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert recs[0]["provenance"]["warnings"] == [lines[0][len("sketchwm: warning: "):]]
    assert recs[0]["provenance"]["order_steering"] is False
    # the default global sketch steers the order at T = 0: no warning, and the record says so
    rc = main(["generate", "--prompt", "the water", "--out", str(out), *GEN_SMALL, "--temperature", "0",
               *tiny_args(model)])
    err = capsys.readouterr().err
    assert rc == 0 and "warning" not in err, err
    prov = json.loads(out.read_text().splitlines()[0])["provenance"]
    assert prov["warnings"] == [] and prov["order_steering"] is True


# ------------------------------------------------------------------ remasking rules as plugins
class EveryOtherRemasking(RemaskingRule):
    """Test rule: commit the leftmost candidates first (a third-party plugin)."""

    name = "leftmost-test"

    def confidence(self, logits, scaled, x0):
        K = x0.shape[1]
        return -torch.arange(K, dtype=torch.float32).expand(x0.shape[0], K)


def _rule_plugin():
    mod = types.ModuleType("leftmost_rule_plugin")

    @hookimpl
    def sketchwm_register_remasking_rules():
        return [EveryOtherRemasking]

    mod.sketchwm_register_remasking_rules = sketchwm_register_remasking_rules
    return mod


def test_third_party_remasking_rule_is_used_by_the_engine(tiny):
    reg = plugin_registry(_rule_plugin())
    assert "leftmost-test" in reg.names("remasking")
    assert {"random", "low_confidence", "entropy"} <= set(get_registry().names("remasking"))
    cfg = {"gen_length": 16, "block_length": 16, "steps": 16, "temperature": 1.0, "remasking": "leftmost-test"}
    sampler = MaskedDiffusionSampler(tiny, cfg, registry=reg)
    assert isinstance(sampler.remasking, EveryOtherRemasking)
    seen = []
    orig = sampler.remasking.choose

    def spy(logits, scaled, x0, valid, k, priority=None):
        chosen = orig(logits, scaled, x0, valid, k, priority)
        seen.append(chosen.clone())
        return chosen

    sampler.remasking.choose = spy
    sampler.generate(PROMPTS[:2], torch.Generator().manual_seed(0))
    # one token per step, the leftmost masked position: the first candidate of every step
    assert len(seen) == 16 and all(bool(c[:, 0].all()) and int(c.sum()) == 2 for c in seen)
    with pytest.raises(RegistryError, match="did you mean 'leftmost-test'"):
        MaskedDiffusionSampler(tiny, {**cfg, "remasking": "leftmost-tst"}, registry=reg)


# ------------------------------------------------------------------ order steering under greedy decoding
@pytest.fixture(scope="module")
def neighbour():
    return NeighbourBackend(seed=0)


#: LLaDA's greedy regime (blocks of 32, two tokens a step), 128 tokens: the order channel carries
#: less than a tilt at T > 0 (about z 2.6 per 64 tokens on this model), so texts are longer
STEERED = {**GREEDY, "gen_length": 128, "steps": 64}


def _greedy(backend, scheme=None, seed=0, observers=()):
    from sketchwm.data import load_prompts

    return MaskedDiffusionSampler(backend, STEERED, scheme).generate(load_prompts("tiny", 16, seed=3),
                                                                     torch.Generator().manual_seed(seed),
                                                                     observers=observers)


@pytest.mark.parametrize("name,params", [("global-sketch", {**UNIFORM, "greedy_tilt": 0.0}), ("dgmark", {})])
def test_order_steering_marks_greedy_text(name, params, neighbour):
    """At T = 0 the steered texts are the model's greedy texts under another order (steering alone:
    the marginals are not tilted, every committed token is the argmax of its row when committed), and they are
    detected with the key, not with another key, while the unsteered greedy texts are not."""
    scheme = _scheme(name, neighbour, **params)
    assert MaskedDiffusionSampler(neighbour, STEERED, scheme).steering
    tilted = []

    class Spy(TiltObserver):
        def on_tilt(self, step, before, after, uniforms):
            tilted.append(not torch.equal(after, before))

    out = _greedy(neighbour, scheme, observers=[Spy()])
    assert tilted, "the observer saw no step"
    assert not any(tilted), "steering at T = 0 must leave the marginals untouched"
    base = _greedy(neighbour)
    assert not torch.equal(out.ids, base.ids)  # another order, another greedy text
    marked = scheme.score_ids(out.ids, _valid(out.ids))
    plain = scheme.score_ids(base.ids, _valid(base.ids))
    other = _scheme(name, neighbour, key=OTHER_KEY, **params).score_ids(out.ids, _valid(out.ids))
    # 16 texts of 128 tokens; tolerances: medians, seeded
    assert float(marked.p_value.median()) < 1e-2, marked.p_value
    assert float(plain.p_value.median()) > 0.05 and float(other.p_value.median()) > 0.05


def test_default_global_sketch_marks_greedy_text_the_order_cannot_change(tmp_path):
    """The LLaDA stand-in writes one repeated token whatever the order, so steering alone leaves its
    greedy text unchanged; the default global sketch's argmax tilt (δ·greedy_tilt) still marks it.
    16 texts × 64 tokens under LLaDA's own sampler defaults (T = 0, low confidence, blocks of 32):
    detected with the key (median p < 1e-4, seeded; measured 4e-9), not with another key, and the
    unwatermarked greedy texts not. Fails when the greedy watermark is broken (no tilt at T = 0, the
    tilt on the wrong rows, or a wrong sign)."""
    from sketchwm.data import load_prompts
    from sketchwm.testing.standins import standin_backend

    be = standin_backend("llada", tmp_path / "llada")
    cfg = {"gen_length": 64, "steps": 32, "stop_at_eos": False}  # the rest: the backend's greedy defaults
    prompts = load_prompts("tiny", 16, seed=3)

    def run(scheme=None):
        sampler = MaskedDiffusionSampler(be, cfg, scheme)
        assert sampler.config.temperature == 0.0 and sampler.config.block_length == 32
        return sampler.generate(prompts, torch.Generator().manual_seed(0)).ids

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the stand-in's vocabulary has no packaged token prior
        scheme = _scheme("global-sketch", be)
        steer_only = _scheme("global-sketch", be, greedy_tilt=0.0)
        other = _scheme("global-sketch", be, key=OTHER_KEY)
    base, marked = run(), run(scheme)
    assert torch.equal(run(steer_only), base)  # the order alone changes nothing on this model
    p = scheme.score_ids(marked, _valid(marked)).p_value
    assert float(p.median()) < 1e-4, p
    assert float(scheme.score_ids(base, _valid(base)).p_value.median()) > 0.05
    assert float(other.score_ids(marked, _valid(marked)).p_value.median()) > 0.05


def test_greedy_margin_bounds_the_argmax_tilt(neighbour):
    """With ``greedy_margin`` m every committed token's untilted logit is within m of its row's
    maximum (the tilt only overturns near-ties), and some tokens are overturned."""
    m = 0.5
    scheme = _scheme("global-sketch", neighbour, **UNIFORM, greedy_tilt=8.0, greedy_margin=m)
    sampler = MaskedDiffusionSampler(neighbour, STEERED, scheme)
    gaps, flipped = [], []
    process, choose = scheme.process_logits, sampler.remasking.choose

    def spy_process(step):
        untilted = step.marginals.at_target_rows(step.marginals.logits).clone()
        out = process(step)
        x0 = out.argmax(-1)
        gaps.append(untilted.amax(-1) - untilted.gather(-1, x0[..., None]).squeeze(-1))  # (B, K)
        flipped.append(x0 != untilted.argmax(-1))
        return out

    def spy_choose(logits, scaled, x0, valid, k, priority=None):
        chosen = choose(logits, scaled, x0, valid, k, priority)
        gaps[-1], flipped[-1] = gaps[-1][chosen], flipped[-1][chosen]
        return chosen

    scheme.process_logits, sampler.remasking.choose = spy_process, spy_choose
    sampler.generate(PROMPTS[:2], torch.Generator().manual_seed(0))
    gaps, flipped = torch.cat(gaps), torch.cat(flipped)
    assert float(gaps.max()) <= m + 1e-5 and bool(flipped.any()), (gaps.max(), flipped.float().mean())


def test_global_sketch_steering_strength_is_delta(neighbour):
    """δ = 0 steers nothing: the low-confidence order, the unwatermarked greedy text."""
    out = _greedy(neighbour, _scheme("global-sketch", neighbour, **UNIFORM, delta=0.0))
    assert torch.equal(out.ids, _greedy(neighbour).ids)


# ------------------------------------------------------------------ dgmark's keying
def test_dgmark_parity_is_the_documented_keyed_function(neighbour):
    """The parity recomputed from its definition, b(h, v) = PRF(k, h·V + v) mod 2 with the seed of
    domain ``baselines/dgmark-parity``: most pairs of steered greedy text satisfy it, the detector
    counts exactly those, and the flipped parity would see the text as anti-watermarked. Fails when
    the keying (domain, counter, bit) or the detector's pairs change."""
    scheme = _scheme("dgmark", neighbour)
    out = _greedy(neighbour, scheme)
    ids = out.ids
    V = neighbour.vocab_size
    seed = KEY.seed("baselines/dgmark-parity")
    bits = (keyed_bits(seed, ids[:, :-1] * V + ids[:, 1:]) & 1) == 1  # (B, N-1) pairs (x_{i-1}, x_i)
    rate = bits.float().mean()
    base = _greedy(neighbour).ids
    base_rate = ((keyed_bits(seed, base[:, :-1] * V + base[:, 1:]) & 1) == 1).float().mean()
    # 16 × 127 pairs: the null rate 0.5 has standard deviation ~0.011; steering raises it to ~0.65
    assert float(rate) > 0.6 and float(base_rate) < 0.56, (rate, base_rate)
    res = scheme.score_ids(ids, _valid(ids))
    # the detector's count on distinct pairs: recompute it from the bits
    for b in range(ids.shape[0]):
        pairs = {}
        for j in range(1, ids.shape[1]):
            pairs.setdefault((int(ids[b, j - 1]), int(ids[b, j])), bool(bits[b, j - 1]))
        g, n = sum(pairs.values()), len(pairs)
        assert int(res.n_scored[b]) == n
        assert abs(float(res.z[b]) - (g - n / 2) / (n / 4) ** 0.5) < 1e-9


def test_dgmark_other_key_and_strength_zero(neighbour):
    out = _greedy(neighbour, _scheme("dgmark", neighbour, strength=0.0))
    assert torch.equal(out.ids, _greedy(neighbour).ids)  # strength 0: the rule's own order


def test_user_loop_refuses_schemes_that_always_steer(tiny):
    """A logits hook cannot change the order: dgmark and global-sketch with order 'steer' are refused;
    the default global sketch (which tilts where the temperature is not known) is accepted."""
    from sketchwm.errors import ConfigError
    from sketchwm.userloop import LogitsTilter

    for name, params in (("dgmark", {}), ("global-sketch", {**UNIFORM, "order": "steer"})):
        with pytest.raises(ConfigError, match="steers the unmasking order"):
            LogitsTilter(_scheme(name, tiny, **params), tiny, steps=8)
    LogitsTilter(_scheme("global-sketch", tiny, **UNIFORM), tiny, steps=8)


# ------------------------------------------------------------------ the steering mode passes the scheme conformance suite
@pytest.fixture(scope="module")
def steering_under_test(tiny):
    from sketchwm.testing.schemes import SchemeUnderTest

    return SchemeUnderTest("global-sketch", {**UNIFORM, "order": "steer"}, tiny, get_registry(), 1e-3)


@pytest.mark.parametrize("check", ["round_trip", "null", "other_key", "reproducible", "errors", "params_json"])
def test_steering_mode_conformance(check, steering_under_test):
    """The suite of :mod:`sketchwm.testing.schemes` (T = 1, random remasking: the order is steered
    and the marginals tilted) for ``global-sketch`` with ``order="steer"``; dgmark runs it in
    ``tests/test_schemes_conformance.py`` like every registered scheme."""
    from sketchwm.testing.schemes import SCHEME_CHECKS

    assert MaskedDiffusionSampler(steering_under_test.backend, {"temperature": 1.0},
                                  steering_under_test.make()).steering
    SCHEME_CHECKS[check](steering_under_test)
