"""Plugin registry: fake entry points, errors, and a meta-test that every hook is documented and exercised."""

import importlib.metadata
import inspect
import types
from pathlib import Path

import pytest
import torch

from sketchwm import hookspecs
from sketchwm.api import Watermarker
from sketchwm.components import Sketch
from sketchwm.config import StrictModel
from sketchwm.errors import RegistryError
from sketchwm.hookspecs import hookimpl
from sketchwm.keys import WatermarkKey
from sketchwm.registry import KINDS, Registry, get_plugin_manager


class FakeEntryPoint:
    """Stands in for importlib.metadata.EntryPoint (tox-style plugin tests: nothing installed)."""

    def __init__(self, name, obj):
        self.name, self._obj = name, obj

    def load(self):
        return self._obj


def builtin_eps():
    return [e for e in importlib.metadata.entry_points(group="sketchwm") if e.name.startswith("builtin")]


class DenseGaussianSketch(Sketch):
    """A third-party sketch: dense keyed Gaussian projection (Φ with iid N(0,1)/√D entries)."""

    name = "dense-gaussian"

    class Params(StrictModel):
        D: int = 64

    def __init__(self, params, key, vocab_size, token_prior=None, device="cpu"):
        super().__init__(params, key, vocab_size, token_prior, device)
        g = torch.Generator().manual_seed(key.seed("dense-gaussian") % (2**62))
        self.phi = torch.randn(vocab_size, self.params.D, generator=g) / self.params.D**0.5

    @property
    def dim(self):
        return self.params.D

    def project(self, weights):
        return weights.float() @ self.phi

    def token_scores(self, r):
        return r.float() @ self.phi.T


def make_plugin(*classes, hook="sketchwm_register_sketches"):
    mod = types.ModuleType("fake_sketch_plugin")

    def impl():
        return list(classes)

    impl.__name__ = hook
    setattr(mod, hook, hookimpl(impl))
    return mod


def test_fake_entry_point_sketch_generates_and_detects(tiny):
    reg = Registry(get_plugin_manager(builtin_eps() + [FakeEntryPoint("third-party", make_plugin(DenseGaussianSketch))]))
    assert "dense-gaussian" in reg.names("sketch")
    cfg = {"scheme": {"name": "global-sketch", "params": {"sketch": {"name": "dense-gaussian", "params": {"D": 64}}, "delta": 2.0, "score": {"name": "z"}}},
           "sampler": {"gen_length": 64, "block_length": 64, "steps": 32}}
    wm = Watermarker(WatermarkKey(b"p" * 32), cfg, backend=tiny, registry=reg)
    marked = wm.generate(["the water", "he said", "a new way", "we can"], seed=0)
    plain = wm.generate(["the water", "he said", "a new way", "we can"], seed=0, watermark=False)
    assert float(wm.detect_ids(marked.token_lists()).z.min()) > float(wm.detect_ids(plain.token_lists()).z.max())
    assert float(wm.detect_ids(marked.token_lists()).p_value.max()) < 0.01


def test_duplicate_name_is_an_error():
    class Dup(DenseGaussianSketch):
        name = "count-sketch"

    with pytest.raises(RegistryError, match="registered twice"):
        Registry(get_plugin_manager(builtin_eps() + [FakeEntryPoint("dup", make_plugin(Dup))]))


def test_wrong_base_class_is_refused():
    class NotASketch:
        name = "bogus"

    with pytest.raises(RegistryError, match="not a subclass"):
        Registry(get_plugin_manager(builtin_eps() + [FakeEntryPoint("bad", make_plugin(NotASketch))]))


def test_broken_entry_point_names_itself():
    class Broken:
        name = "broken"

        def load(self):
            raise ImportError("no module named nowhere")

    with pytest.raises(RegistryError, match="entry point 'broken'"):
        get_plugin_manager([Broken()], on_error="raise")
    with pytest.warns(UserWarning, match="plugin 'broken' failed to load"):  # default: left out, named
        assert Registry(get_plugin_manager([Broken()])).broken == {"broken": "ImportError: no module named nowhere"}


def test_unknown_names_suggest_close_matches(builtin_registry):
    with pytest.raises(RegistryError, match="did you mean 'count-sketch'"):
        builtin_registry.get("sketch", "count-skech")
    with pytest.raises(RegistryError, match="did you mean 'scheme'"):
        builtin_registry.names("schemes")


def test_describe_lists_every_kind(builtin_registry):
    d = builtin_registry.describe()
    assert set(d) == set(KINDS)
    assert {"count-sketch"} <= {x["name"] for x in d["sketch"]}
    assert {"penalized", "z"} <= {x["name"] for x in d["score"]}
    assert {"default", "hf-masked-lm", "llada", "dream", "mdlm"} <= {x["name"] for x in d["backend"]}
    assert "global-sketch" in {x["name"] for x in d["scheme"]}


def test_every_hook_is_documented_and_exercised():
    """datasette-style meta-test: each hookspec has a docstring, a KINDS entry, and appears in a test."""
    specs = [n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("sketchwm_")]
    assert specs, "no hookspecs found"
    kinds_hooks = {h for h, _ in KINDS.values()}
    tests_text = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    for name in specs:
        assert (getattr(hookspecs, name).__doc__ or "").strip(), f"hook {name} has no docstring"
        # every hook registers components collected by the registry, except the command-line hook
        assert name in kinds_hooks or name == "sketchwm_register_commands", f"hook {name} is not collected by the registry"
    exercised = {"sketchwm_register_sketches": "make_plugin(DenseGaussianSketch)",
                 "sketchwm_register_scores": 'names("score")', "sketchwm_register_backends": 'names("backend")',
                 "sketchwm_register_schemes": 'names("scheme")', "sketchwm_register_attacks": 'names("attack")',
                 "sketchwm_register_metrics": 'names("metric")', "sketchwm_register_cell_kinds": 'names("cell-kind")',
                 "sketchwm_register_remasking_rules": 'names("remasking")',
                 "sketchwm_register_commands": "make_command_plugin("}
    for name in specs:
        assert name in exercised and exercised[name] in tests_text, f"hook {name} is not exercised by a test"


def test_builtin_hooks_return_their_classes(builtin_registry):
    assert builtin_registry.names("score") == ["penalized", "z"]
    assert "global-sketch" in builtin_registry.names("scheme")
    assert isinstance(builtin_registry.names("attack"), list)
