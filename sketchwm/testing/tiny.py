"""Tiny models built in code: a word-level tokenizer, a random 2-layer BERT masked LM and its backend.

Re-exported by :mod:`sketchwm.testing` (see its doc).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TINY_WORDS", "SPECIALS", "tiny_tokenizer", "tiny_masked_lm", "tiny_backend", "tiny_texts"]

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY_WORDS = (
    "the of and to a in is it you that he was for on are with as his they be at one have this from or had by "
    "word but what some we can out other were all there when up use your how said an each she which do their "
    "time if will way about many then them write would like so these her long make thing see him two has look "
    "more day could go come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little only round man year"
).split()


def tiny_tokenizer() -> Any:
    """A word-level ``PreTrainedTokenizerFast`` (vocabulary: 5 specials + :data:`TINY_WORDS`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + TINY_WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )


def tiny_masked_lm(vocab_size: int, seed: int = 0, hidden: int = 32, layers: int = 2, max_len: int = 512) -> Any:
    """A randomly initialised ``BertForMaskedLM`` (seeded, eval mode)."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)  # only place global RNG is touched: building a test model
    cfg = BertConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=max_len,
    )
    return BertForMaskedLM(cfg).eval()


def tiny_backend(seed: int = 0, device: str = "cpu") -> Any:
    """An ``hf-masked-lm`` backend over :func:`tiny_tokenizer` and :func:`tiny_masked_lm`."""
    from sketchwm_builtin.backends.hf_masked_lm import HFMaskedLMBackend

    tok = tiny_tokenizer()
    model = tiny_masked_lm(len(tok), seed=seed)
    be = HFMaskedLMBackend({"device": device, "path": "tiny"}, model=model, tokenizer=tok)
    be.model_id = f"tiny-bert-seed{seed}"
    return be


def tiny_texts(n: int, words: int, seed: int, punct: bool = True) -> list[str]:
    """``n`` texts of ``words`` words drawn from :data:`TINY_WORDS` (seeded ``random.Random``), with a
    sentence end ('.') on every 8th word when ``punct``."""
    import random

    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        ws = [rnd.choice(TINY_WORDS) for _ in range(words)]
        if punct:
            ws = [w + "." if (i % 8 == 7) else w for i, w in enumerate(ws)]
        out.append(" ".join(ws))
    return out
