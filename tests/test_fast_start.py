"""Detection's start-up without transformers (plugins/sketchwm_builtin/backends/fast_start.py): the
tokenizer read from tokenizer.json on a verified cache hit encodes, fingerprints and names its
special tokens exactly as the transformers tokenizer; any doubt falls back to transformers."""

from __future__ import annotations

import json
import shutil

import pytest

from sketchwm.batching import TextEncoder
from sketchwm.components import tokenizer_fingerprint
from sketchwm.default_model import MODEL_DIR
from sketchwm_builtin.backends.fast_start import DeferredTokenizer, files_digest, load_tokenizer_and_config

TEXTS = ["The river rose in the night, and by morning the fields were under water.",
         "naïve café — 3.14 × 2 = 6.28; [MASK] tokens [CLS] and emoji 🙂 stay as they are",
         "", "   leading spaces\tand\ttabs\nand new lines   "]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SKETCHWM_TOKENIZER_CACHE", raising=False)
    return tmp_path / "cache"


def _model_copy(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(MODEL_DIR / name, d / name)
    return d


def test_a_cache_hit_gives_the_transformers_tokenizers_ids_vocabulary_and_special_tokens(cache, default_tokenizer):
    first, cfg1 = load_tokenizer_and_config(str(MODEL_DIR))
    assert not isinstance(first, DeferredTokenizer)  # the first use of these files goes through transformers
    assert len(list(cache.glob("tokenizer-*.json"))) == 1
    fast, cfg2 = load_tokenizer_and_config(str(MODEL_DIR))
    assert isinstance(fast, DeferredTokenizer)
    ref = default_tokenizer
    assert tokenizer_fingerprint(fast) == tokenizer_fingerprint(ref)
    # the fingerprint and the placeholder ids come from the facts, equal to the full vocabulary's
    from sketchwm_builtin.backends.hf_masked_lm import special_token_ids

    assert fast.vocab_fingerprint == tokenizer_fingerprint(ref) and fast.placeholder_ids
    assert special_token_ids(fast, cfg2.vocab_size) == special_token_ids(ref, cfg1.vocab_size)
    assert fast.get_vocab() == ref.get_vocab() and len(fast) == len(ref)
    assert fast.mask_token_id == ref.mask_token_id and fast.all_special_ids == list(ref.all_special_ids)
    assert (cfg2.vocab_size, cfg2.max_position_embeddings) == (cfg1.vocab_size, cfg1.max_position_embeddings)
    want = ref(TEXTS, add_special_tokens=False)["input_ids"]
    assert [fast.encode(t, add_special_tokens=False) for t in TEXTS] == want
    assert TextEncoder(fast).encode(TEXTS) == want == TextEncoder(ref).encode(TEXTS)
    assert fast._full is None  # nothing above needed transformers' tokenizer
    assert fast.decode(want[0]) == ref.decode(want[0])  # anything else: the full tokenizer, built on demand
    assert fast._full is not None


def test_a_doubtful_cache_falls_back_to_transformers(cache, tmp_path, monkeypatch):
    d = _model_copy(tmp_path)
    load_tokenizer_and_config(str(d))
    assert isinstance(load_tokenizer_and_config(str(d))[0], DeferredTokenizer)
    (entry,) = cache.glob("tokenizer-*.json")
    facts = json.loads(entry.read_text())
    entry.write_text(json.dumps({**facts, "backend_sha256": "0" * 64}))  # the backend no longer matches
    assert not isinstance(load_tokenizer_and_config(str(d))[0], DeferredTokenizer)
    entry.write_text("{not json")
    assert not isinstance(load_tokenizer_and_config(str(d))[0], DeferredTokenizer)
    assert isinstance(load_tokenizer_and_config(str(d))[0], DeferredTokenizer)  # rewritten by the fallback
    monkeypatch.setenv("SKETCHWM_TOKENIZER_CACHE", "0")
    assert not isinstance(load_tokenizer_and_config(str(d))[0], DeferredTokenizer)


def test_changed_tokenizer_files_are_a_cache_miss(cache, tmp_path):
    d = _model_copy(tmp_path)
    before = files_digest(d)
    load_tokenizer_and_config(str(d))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["do_lower_case"] = not cfg.get("do_lower_case", True)  # transformers would rebuild the normaliser
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert files_digest(d) != before
    tok, _ = load_tokenizer_and_config(str(d))
    assert not isinstance(tok, DeferredTokenizer)
