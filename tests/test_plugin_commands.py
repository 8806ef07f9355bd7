"""Plugins own their surface (issue 12): sub-commands through ``sketchwm_register_commands``, one build context."""

import importlib.metadata
import types
from pathlib import Path

import pytest
import torch

from sketchwm.cli import main, positive_int
from sketchwm.components import Attack, Sketch
from sketchwm.config import StrictModel
from sketchwm.context import BuildContext
from sketchwm.errors import ConfigError, InputError, RegistryError
from sketchwm.hookspecs import hookimpl
from sketchwm.keys import WatermarkKey
from sketchwm.registry import Registry, get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]


class FakeEntryPoint:
    def __init__(self, name, obj):
        self.name, self.value, self._obj = name, f"fake_{name}", obj  # value: the target module's name

    def load(self):
        return self._obj


def make_command_plugin(name="hello"):
    """A third-party plugin module adding ``sketchwm <name> --times N [--fail]``."""
    mod = types.ModuleType(f"fake_{name}_plugin")

    def run(args):
        if args.fail:
            raise InputError("the greeting failed on purpose: drop --fail")
        print(" ".join(["hello"] * args.times))
        return 0

    def sketchwm_register_commands(subparsers, parents):
        p = subparsers.add_parser(name, parents=parents, help=f"say hello ({name} plugin)")
        p.add_argument("--times", type=positive_int, default=1, help="how many times")
        p.add_argument("--fail", action="store_true", help="fail with a user error")
        p.set_defaults(func=run)

    mod.sketchwm_register_commands = hookimpl(sketchwm_register_commands)
    return mod


def test_directly_registered_plugin_adds_a_subcommand_that_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path))
    plugin = make_command_plugin()
    assert main(["hello", "--times", "3"], plugins=[plugin]) == 0
    assert capsys.readouterr().out.strip() == "hello hello hello"
    assert main(["hello", "--fail"], plugins=[plugin]) == 2  # the CLI's error path: one line, exit 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sketchwm: error: the greeting failed on purpose: drop --fail"]
    assert main(["hello", "--times", "0"], plugins=[plugin]) == 2
    assert "--times" in capsys.readouterr().err


def test_fake_entry_point_command_is_listed_cached_and_loaded_alone(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path))
    import sys

    from sketchwm import plugin_index

    real, real_load = importlib.metadata.entry_points, plugin_index._ListedEntryPoint.load
    loaded = []
    plugin = make_command_plugin("greet")
    monkeypatch.setitem(sys.modules, "fake_greeter", plugin)  # the fake entry point's target module

    def entry_points(**kw):
        eps = list(real(**kw))
        return eps + [FakeEntryPoint("greeter", plugin)] if kw.get("group") == "sketchwm" else eps

    def tracking_load(self):
        loaded.append(self.name)
        return real_load(self)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(plugin_index._ListedEntryPoint, "load", tracking_load)
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "greet" in out and "say hello (greet plugin)" in out and "attack" in out and "prior" in out
    assert len(list(tmp_path.glob("commands-*.json"))) == 1
    loaded.clear()
    assert main(["--help"]) == 0 and loaded == []  # listed from the cache: nothing imported
    capsys.readouterr()
    assert main(["greet", "--times", "2"]) == 0 and loaded == ["greeter"]  # only the plugin adding `greet`
    assert capsys.readouterr().out.strip() == "hello hello"
    assert main(["attack", "--help"]) == 0 and loaded == ["greeter", "attacks"]


def test_a_command_name_already_taken_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path))
    assert main(["detect", "--help"], plugins=[make_command_plugin("detect")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "taken" in err[0] and "detect" in err[0]


def test_attack_prior_bench_commands_come_from_their_plugins(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path))
    assert not (ROOT / "sketchwm" / "cli_attack.py").exists() and not (ROOT / "sketchwm" / "cli_prior.py").exists()
    assert not (ROOT / "sketchwm" / "token_prior.py").exists()
    from sketchwm.plugin_index import describe_commands

    cmds = describe_commands()
    assert {c: cmds[c]["plugin"] for c in ("attack", "prior", "bench", "leaderboard")} == {
        "attack": "attacks", "prior": "builtin-schemes", "bench": "builtin-metrics", "leaderboard": "builtin-metrics"}
    for argv, needle in ((["attack", "--help"], "--strength"), (["prior", "estimate", "--help"], "--corpus"),
                         (["bench", "run", "--help"], "--executor"), (["leaderboard", "--help"], "--readme")):
        with pytest.raises(SystemExit) as exc:  # argparse's --help exits 0 (main turns it into the status)
            from sketchwm.cli import build_parser

            build_parser(argv).parse_args(argv)
        assert exc.value.code == 0 and needle in capsys.readouterr().out
    assert main(["attack", "--attack", "delete-random", "--strength", "2", "--input", "x.jsonl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--strength must be in [0, 1]" in err[0]


# ---------------------------------------------------------------- build context
class KeyedMarkSketch(Sketch):
    """A third-party sketch built from the context: records what it was given."""

    name = "keyed-mark"

    def __init__(self, params, key, vocab_size, token_prior=None, device="cpu"):
        super().__init__(params, key, vocab_size, token_prior, device)
        self.given = (key, vocab_size, token_prior, str(device))

    @property
    def dim(self):
        return 8

    def project(self, weights):
        return weights.float()[..., :8]

    def token_scores(self, r):
        return r.float()


class ContextReader(Attack):
    """A third-party attack that reads more of the context than its constructor's defaults."""

    name = "context-reader"

    def __init__(self, params=None, *, vocab_size=None, **resources):
        super().__init__(params, **resources)
        self.vocab_size = vocab_size

    @classmethod
    def from_context(cls, params, context):
        return cls(params, vocab_size=context.require("vocab_size", cls.display_name()), **dict(context.resources))

    def apply(self, texts, strength, generator, *, token_ids=None, prompts=None):
        raise NotImplementedError


def _plugin(hook, *classes):
    mod = types.ModuleType(f"fake_{hook}")

    def impl():
        return list(classes)

    impl.__name__ = hook
    setattr(mod, hook, hookimpl(impl))
    return mod


def test_registry_builds_third_party_components_from_one_context():
    reg = Registry(get_plugin_manager([], extra_plugins=[_plugin("sketchwm_register_sketches", KeyedMarkSketch),
                                                         _plugin("sketchwm_register_attacks", ContextReader)]))
    key, prior = WatermarkKey(b"c" * 32), torch.ones(50, dtype=torch.float64)
    sk = reg.build("sketch", "keyed-mark", {}, BuildContext(key=key, vocab_size=50, token_prior=prior))
    assert sk.given[0] is key and sk.given[1] == 50 and sk.given[2] is prior and sk.given[3] == "cpu"
    with pytest.raises(ConfigError, match="sketch 'keyed-mark' needs 'key' in its build context"):
        reg.build("sketch", "keyed-mark", {}, BuildContext(vocab_size=50))
    att = reg.build("attack", "context-reader", None, BuildContext(vocab_size=7, resources={"human_texts": ["x"]}))
    assert att.vocab_size == 7 and att.resources == {"human_texts": ["x"]}


def test_global_sketch_builds_its_sketch_and_score_through_the_context_registry(builtin_registry):
    """The global sketch reads the registry from its context: a sketch only this registry knows is found."""
    reg = Registry(get_plugin_manager([e for e in importlib.metadata.entry_points(group="sketchwm")
                                       if e.name.startswith("builtin")],
                                      extra_plugins=[_plugin("sketchwm_register_sketches", KeyedMarkSketch)]))
    ctx = BuildContext(key=WatermarkKey(b"g" * 32), vocab_size=50)
    sch = reg.build("scheme", "global-sketch", {"prior": {"source": "uniform"}, "sketch": {"name": "keyed-mark"},
                                                "score": {"name": "z"}}, ctx)
    assert isinstance(sch.sketch, KeyedMarkSketch) and sch.sketch.given[1] == 50 and sch.score_fn.dim == 8
    with pytest.raises(RegistryError, match="keyed-mark"):  # the installed registry does not know it
        builtin_registry.build("scheme", "global-sketch", {"prior": {"source": "uniform"}, "sketch": {"name": "keyed-mark"}}, ctx)


def test_no_constructor_signature_inspection():
    needle = "co_" + "varnames"  # spelled apart so that this file does not match itself
    found = [str(p) for d in ("sketchwm", "plugins", "attacks", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")
             if needle in p.read_text(encoding="utf-8")]
    assert found == []


# ---------------------------------------------------------------- one prompt loader
def test_load_prompts_one_loader_for_every_source(tmp_path):
    from sketchwm.data import load, load_prompts
    from sketchwm.testing import tiny_texts

    shipped = load("prompts")
    assert load_prompts("prompts", 5, offset=10) == shipped[10:15] and load_prompts("prompts") == shipped
    assert load_prompts("tiny", 3, seed=4) == tiny_texts(3, 6, 4, punct=False)
    plain, jsonl = tmp_path / "p.txt", tmp_path / "p.jsonl"
    plain.write_text("first prompt\n\n second prompt \n")
    jsonl.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    assert load_prompts(str(plain)) == ["first prompt", "second prompt"] and load_prompts(str(jsonl)) == ["a", "b"]
    assert load_prompts(str(plain), 1, offset=1) == ["second prompt"]
    for bad, match in (({"source": "promts"}, "neither a shipped set"), ({"source": str(plain), "n": 3}, "only 2 prompts"),
                       ({"source": "prompts", "n": 0}, "n >= 1"), ({"source": "tiny"}, "give their number"),
                       ({"source": "prompts", "offset": len(shipped)}, "requested")):
        with pytest.raises(InputError, match=match):
            load_prompts(**bad)
