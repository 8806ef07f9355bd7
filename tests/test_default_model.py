"""Fast tests of the shipped default DLM and the shipped evaluation data (issue 3)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from sketchwm.data import load, load_records, load_token_counts
from sketchwm.default_model import (
    DEFAULT_SAMPLER,
    MAX_LENGTH,
    MODEL_DIR,
    VOCAB_SIZE,
    load_default_model,
    load_sampler_defaults,
)
from sketchwm.errors import InputError, ModelFileError

FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "sampler.json"]


@pytest.fixture(scope="module")
def loaded():
    return load_default_model("cpu")


def _copy_dir(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    for f in FILES:
        shutil.copy(MODEL_DIR / f, d / f)
    return d


def test_shipped_files_present_and_small():
    for f in FILES + ["MODEL_CARD.md", "loss_curve.png"]:
        assert (MODEL_DIR / f).is_file(), f
    assert (MODEL_DIR / "model.safetensors").stat().st_size <= 25 * 2**20


def test_logits_shape(loaded):
    model, tok = loaded
    ids = torch.tensor([tok.encode("the lord is my shepherd ; i shall not want.", add_special_tokens=False)] * 2)
    ids[:, 3] = tok.mask_token_id
    logits = model(ids)
    assert logits.shape == (2, ids.shape[1], VOCAB_SIZE)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    assert len(tok) == VOCAB_SIZE and tok.mask_token_id == 103


def test_fills_masks_better_than_chance(loaded):
    """A trained model ranks most of the true tokens of a plain sentence in its top 20."""
    model, tok = loaded
    ids = torch.tensor([tok.encode("and the lord said unto moses, go in unto pharaoh, and tell him that the "
                                   "people of the land shall serve the king.", add_special_tokens=False)])
    L = ids.shape[1]
    x = ids.repeat(L, 1)
    x[torch.arange(L), torch.arange(L)] = tok.mask_token_id  # row i masks position i
    logits = model(x)[torch.arange(L), torch.arange(L)]  # (L, V)
    hit = (logits.topk(20, dim=-1).indices == ids[0][:, None]).any(-1)
    assert hit.float().mean() >= 0.5


def test_too_long_and_bad_ids_raise(loaded):
    model, _ = loaded
    with pytest.raises(InputError, match="MAX_LENGTH"):
        model(torch.full((1, MAX_LENGTH + 1), 103, dtype=torch.long))
    with pytest.raises(InputError, match="vocabulary"):
        model(torch.tensor([[5, VOCAB_SIZE]]))
    with pytest.raises(InputError):
        model(torch.tensor([1.0, 2.0]))


def test_missing_file_names_it(tmp_path):
    d = _copy_dir(tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(ModelFileError, match="model.safetensors"):
        load_default_model(model_dir=d)


def test_corrupt_weights_names_file(tmp_path):
    d = _copy_dir(tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFileError, match="model.safetensors"):
        load_default_model(model_dir=d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="config.json"):
        load_default_model(model_dir=d)


def test_config_weights_mismatch(tmp_path):
    d = _copy_dir(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] += 1
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFileError, match="does not match"):
        load_default_model(model_dir=d)
    cfg["num_hidden_layers"] -= 1
    cfg["hidden_size"] = 256
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFileError, match="does not match"):
        load_default_model(model_dir=d)


def test_sampler_defaults():
    s = load_sampler_defaults()
    assert s == DEFAULT_SAMPLER
    assert s["remasking"] in {"low_confidence", "random", "entropy"}
    assert s["gen_length"] % s["block_length"] == 0 and s["steps"] <= s["gen_length"]


def test_data_sets():
    prompts, human = load("prompts"), load("human")
    assert len(prompts) >= 500 and len(human) >= 2400
    assert all(isinstance(t, str) and t for t in prompts[:50])
    recs = load_records("human")
    assert {"text", "source", "doc_id", "n_tokens"} <= set(recs[0])
    assert all(100 <= r["n_tokens"] <= 300 for r in recs)
    assert all(16 <= r["n_tokens"] <= 40 for r in load_records("prompts"))
    assert {r["source"] for r in recs} == {"fortunes", "bible-kjv", "wordnet", "python-docs", "shakespeare"}
    assert not {r["doc_id"] for r in recs} & {r["doc_id"] for r in load_records("prompts")}


def test_token_counts():
    c = load_token_counts("default-train")
    assert c.shape == (VOCAB_SIZE,) and c.dtype == torch.int64
    assert int(c.sum()) > 1_000_000 and int(c[103]) == 0


def test_unknown_name_raises():
    with pytest.raises(ValueError, match="prompts"):
        load("nope")
    with pytest.raises(ValueError, match="default-train"):
        load_token_counts("nope")
