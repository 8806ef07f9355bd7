"""Tiny models built in code, for tests and examples (nothing downloaded).

``tiny_tokenizer()`` is a word-level tokenizer over ~100 English words plus BERT's special tokens;
``tiny_backend()`` wraps a randomly initialised 2-layer BERT masked LM over it as an
``hf-masked-lm`` backend. Random weights give high-entropy marginals, which is what statistical
tests of a watermark need; they say nothing about text quality.
"""

from .schemes import check_scheme, check_sketch, plugin_registry
from .tiny import SPECIALS, TINY_WORDS, tiny_backend, tiny_masked_lm, tiny_texts, tiny_tokenizer

__all__ = ["TINY_WORDS", "SPECIALS", "tiny_tokenizer", "tiny_masked_lm", "tiny_backend", "tiny_texts",
           "check_scheme", "check_sketch", "plugin_registry"]
