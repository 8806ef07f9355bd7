"""The backend conformance suite (sketchwm.testing.backends) for every built-in backend and a third-party one."""

from __future__ import annotations

import importlib.metadata
import types

import torch

from sketchwm.components import DLMBackend
from sketchwm.config import StrictModel
from sketchwm.hookspecs import hookimpl
from sketchwm.registry import Registry, get_plugin_manager
from sketchwm.testing import tiny_tokenizer
from sketchwm.testing.backends import BackendConformance, save_probe_bert
from sketchwm.testing.standins import save_standin, standin_backend


class TestDefaultConformance(BackendConformance):
    """``default``: the shipped model's BERT architecture and WordPiece vocabulary, loaded from a directory."""

    def make_backend(self, directory, *, position_probe=False, stop_after=None, stop_slope=1.5, instruct=True):
        from transformers import AutoTokenizer

        from sketchwm.default_model import MODEL_DIR
        from sketchwm_builtin.backends import DefaultBackend

        tok = AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
        save_probe_bert(directory, tok, self.probe_ids_for(tok) if position_probe else None)
        return DefaultBackend({"path": str(directory), "device": "cpu"})

    def probe_ids_for(self, tok):
        from sketchwm.testing.standins import probe_ids

        return probe_ids(tok)


class TestHFMaskedLMConformance(TestDefaultConformance):
    """``hf-masked-lm``: a BERT checkpoint directory over the tiny word vocabulary."""

    def make_backend(self, directory, *, position_probe=False, stop_after=None, stop_slope=1.5, instruct=True):
        from sketchwm_builtin.backends import HFMaskedLMBackend

        tok = tiny_tokenizer()
        save_probe_bert(directory, tok, self.probe_ids_for(tok) if position_probe else None)
        return HFMaskedLMBackend({"path": str(directory), "device": "cpu"})


class _StandinConformance(BackendConformance):
    kind = ""
    instruct_has_template = True

    def make_backend(self, directory, *, position_probe=False, stop_after=None, stop_slope=1.5, instruct=True):
        return standin_backend(self.kind, directory, position_probe=position_probe, stop_after=stop_after,
                               stop_slope=stop_slope, instruct=instruct)


class TestLLaDAConformance(_StandinConformance):
    kind = "llada"


class TestDreamConformance(_StandinConformance):
    kind = "dream"


class TestMDLMConformance(_StandinConformance):
    kind = "mdlm"
    instruct_has_template = False  # MDLM-OWT is unconditional: no chat format


# ------------------------------------------------------------------ a third-party backend
class ToyParams(StrictModel):
    path: str = ""


class ToyLLaDALikeBackend(DLMBackend):
    """A third-party backend: a LLaDA-layout checkpoint driven by its own code, not the built-in classes."""

    name = "toy-llada-like"
    Params = ToyParams

    def __init__(self, params=None):
        from transformers import AutoModel, AutoTokenizer

        self.params = self.parse_params(params)
        self.tokenizer = AutoTokenizer.from_pretrained(self.params.path, trust_remote_code=True)
        self.model = AutoModel.from_pretrained(self.params.path, trust_remote_code=True).eval()
        self.device = torch.device("cpu")
        self.vocab_size = int(self.model.config.vocab_size)
        self.mask_token_id = int(self.model.config.mask_token_id)
        self.eos_token_id = int(self.tokenizer.eos_token_id)
        self.banned_token_ids = sorted(set(self.tokenizer.all_special_ids) - {self.eos_token_id}
                                       | set(range(len(self.tokenizer), self.vocab_size)))
        self.max_length = 256
        self.model_id = "toy-llada-like"

    def logits(self, input_ids, attention_mask=None, positions=None):
        am = None if attention_mask is None else attention_mask.long()
        return self.model(input_ids, attention_mask=am).logits.float()


def _third_party_registry():
    mod = types.ModuleType("toy_backend_plugin")

    @hookimpl
    def sketchwm_register_backends():
        return [ToyLLaDALikeBackend]

    mod.sketchwm_register_backends = sketchwm_register_backends

    class EP:  # stands in for importlib.metadata.EntryPoint (nothing installed)
        name, load = "toy-backend", staticmethod(lambda: mod)

    builtin = [e for e in importlib.metadata.entry_points(group="sketchwm") if e.name.startswith("builtin")]
    return Registry(get_plugin_manager(builtin + [EP()]))


class TestThirdPartyConformance(BackendConformance):
    """A backend registered through a (fake) entry point and created by name from the registry."""

    def make_backend(self, directory, *, position_probe=False, stop_after=None, stop_slope=1.5, instruct=True):
        save_standin("llada", directory, position_probe=position_probe, stop_after=stop_after, stop_slope=stop_slope,
                     instruct=False)
        reg = _third_party_registry()
        assert "toy-llada-like" in reg.names("backend")
        return reg.create("backend", "toy-llada-like", {"path": str(directory)})
