"""Backends whose checkpoints cannot be downloaded here, tested with in-code models of the same interface."""

from types import SimpleNamespace

import pytest
import torch

from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.errors import ConfigError, ModelFileError
from sketchwm.testing import tiny_masked_lm, tiny_tokenizer
from sketchwm_builtin.backends import DreamBackend, HFMaskedLMBackend, LLaDABackend, MDLMBackend


class ScriptedModel(torch.nn.Module):
    """Returns logits whose argmax at position i is (input[i] + shift_target) % V, to check alignment."""

    def __init__(self, V, signature="llada"):
        super().__init__()
        self.V, self.signature = V, signature
        self.config = SimpleNamespace(vocab_size=V, max_position_embeddings=256, max_sequence_length=256, model_length=256)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, timesteps=None):
        B, L = input_ids.shape
        target = (torch.arange(L) * 3 + 11) % self.V  # the "right" token for position i
        if self.signature == "dream":  # AR-adapted: position i predicts token i+1
            target = torch.roll(target, -1)
        logits = torch.full((B, L, self.V), -5.0)
        logits[:, torch.arange(L), target] = 5.0
        return SimpleNamespace(logits=logits)


def _tok():
    return tiny_tokenizer()


def test_llada_backend_interface():
    tok = _tok()
    V = len(tok)
    be = LLaDABackend({"path": "x", "device": "cpu", "mask_token_id": V - 1, "eos_token_id": 3, "eot_token_id": 2}, model=ScriptedModel(V), tokenizer=tok)
    assert be.mask_token_id == V - 1 and be.eos_token_id == 3
    x = torch.randint(0, V, (2, 12))
    out = be.logits(x)
    assert out.shape == (2, 12, V)
    assert torch.equal(out.argmax(-1)[0], (torch.arange(12) * 3 + 11) % V)
    assert be.sampler_defaults["remasking"] == "low_confidence"


def test_dream_backend_shifts_logits_by_one():
    tok = _tok()
    V = len(tok)
    be = DreamBackend({"path": "x", "device": "cpu"}, model=ScriptedModel(V, "dream"), tokenizer=tok)
    out = be.logits(torch.randint(0, V, (1, 12)))
    # after the shift, position i's marginal is for token i (positions 1..L-1 exactly)
    assert torch.equal(out.argmax(-1)[0, 1:], ((torch.arange(12) * 3 + 11) % V)[1:])


def test_mdlm_backend_mask_id_is_vocab_size():
    tok = _tok()
    V = len(tok) + 1
    be = MDLMBackend({"path": "x", "device": "cpu"}, model=ScriptedModel(V, "mdlm"), tokenizer=tok)
    assert be.mask_token_id == len(tok) and be.vocab_size == V
    out = MaskedDiffusionSampler(be, {"gen_length": 16, "block_length": 16, "steps": 8, "temperature": 0.0}).generate(["the water"])
    assert not bool((out.ids == be.mask_token_id).any())


def test_llada_generation_stops_at_eos():
    tok = _tok()
    V = len(tok)

    class EOSModel(ScriptedModel):
        def forward(self, input_ids, attention_mask=None, timesteps=None):
            out = super().forward(input_ids)
            out.logits[:, 10:, 3] = 50.0  # EOS from position 10 on
            return out

    be = LLaDABackend({"path": "x", "device": "cpu", "mask_token_id": V - 1, "eos_token_id": 3, "eot_token_id": 2}, model=EOSModel(V), tokenizer=tok)
    out = MaskedDiffusionSampler(be, {"gen_length": 16, "block_length": 16, "steps": 16, "temperature": 0.0}).generate(["the"])
    assert int(out.lengths[0]) < 16


def test_missing_checkpoint_directory():
    with pytest.raises(ModelFileError, match="not found"):
        HFMaskedLMBackend({"path": "/nonexistent/model", "device": "cpu"})
    with pytest.raises(ModelFileError, match="not found"):
        LLaDABackend({"path": "/nonexistent/llada", "device": "cpu"})


def test_hf_masked_lm_from_local_directory(tmp_path):
    tok = _tok()
    model = tiny_masked_lm(len(tok))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    be = HFMaskedLMBackend({"path": str(tmp_path), "device": "cpu"})
    assert be.vocab_size == len(tok) and be.mask_token_id == tok.mask_token_id
    assert set(tok.all_special_ids) <= set(be.banned_token_ids)
    with pytest.raises(ConfigError, match="exceeds the model's maximum"):
        be.logits(torch.zeros(1, 600, dtype=torch.long))


def test_default_backend_loads_shipped_or_standin_model():
    from sketchwm_builtin.backends import DefaultBackend

    be = DefaultBackend({"device": "cpu"})
    assert be.vocab_size == 30522 and be.mask_token_id == 103
    assert be.model_id.startswith("default:")
    out = be.logits(torch.tensor([[101, 1996, 103, 2003, 102]]))
    assert out.shape == (1, 5, 30522) and torch.isfinite(out).all()


def test_logits_at_matches_full_logits(tiny):
    x = torch.randint(0, tiny.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    idx = torch.tensor([[0, 5], [11, 2], [7, 7]])
    full = tiny.logits(x)
    got = tiny.logits_at(x, None, idx)
    assert got.shape == (3, 2, tiny.vocab_size)
    assert torch.allclose(got, torch.gather(full, 1, idx[..., None].expand(-1, -1, full.shape[-1])), atol=1e-5)
    pos = torch.zeros(3, 12, dtype=torch.bool)
    pos[0, 3] = True
    assert torch.allclose(tiny.logits(x, None, pos)[0, 3], full[0, 3], atol=1e-5)
