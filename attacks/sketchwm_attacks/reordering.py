"""Reordering attacks: move words without changing which words the text contains.

* ``reorder-sentences`` — permute sentences (split after ``.``, ``!``, ``?``).
* ``reorder-spans`` — cut the text into consecutive spans of ``span_length`` words and permute spans.
* ``reorder-words`` — permute individual words; strength 1 is a full shuffle of the text.

Strength s: the attack picks ``round(s * m)`` of the m units (sentences, spans or words),
uniformly, and moves them along a random cycle, so every picked unit lands in the place of
another picked unit (a uniformly random ``k``-cycle; no picked unit stays in place when k >= 2,
and nothing moves when k < 2). ``edit_fraction`` = words in moved units / words. Every variant
keeps the multiset of words exactly (whitespace is normalised to single spaces), hence the token
counts of a WordPiece/BPE text up to merges across word boundaries: a test of the permutation
invariance of count-based detectors (the seed paper's global sketch is exactly invariant).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from .base import AttackParams, EditResult, TextAttack, n_edits, split_sentences

__all__ = ["SentenceShuffle", "SpanShuffle", "WordShuffle", "cycle_units"]


def cycle_units(units: list[list[str]], strength: float, generator: torch.Generator) -> tuple[list[list[str]], int]:
    """Move ``round(strength * len(units))`` units along a random cycle.

    Args:
        units: word lists (sentences, spans or single words).
        strength: fraction of units to move.
        generator: randomness.

    Returns:
        (reordered units, number of words in moved units).
    """
    m = len(units)
    k = n_edits(strength, m)
    if k < 2:
        return list(units), 0
    picked = torch.randperm(m, generator=generator)[:k].tolist()  # random order = random k-cycle
    out = list(units)
    for j in range(k):
        out[picked[j]] = units[picked[(j + 1) % k]]
    return out, sum(len(units[p]) for p in picked)


class ReorderParams(AttackParams):
    """Attributes: similarity (see :class:`AttackParams`)."""


class _UnitShuffle(TextAttack):
    """Common driver: split a text into units, cycle a fraction of them, rejoin."""

    unit: ClassVar[str] = ""

    def _units(self, text: str) -> list[list[str]]:
        raise NotImplementedError

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        outs, fracs = [], []
        for text in texts:
            units = self._units(text)
            n = sum(len(u) for u in units)
            if n == 0:
                outs.append(text)
                fracs.append(0.0)
                continue
            new, moved = cycle_units(units, strength, generator)
            outs.append(" ".join(w for u in new for w in u))
            fracs.append(moved / n)
        return EditResult(outs, fracs, {"unit": self.unit})


class SentenceShuffle(_UnitShuffle):
    """Move ``round(strength * m)`` of the m sentences along a random cycle (see module doc)."""

    name = "reorder-sentences"
    Params = ReorderParams
    unit = "sentence"

    def _units(self, text):
        return [s.split() for s in split_sentences(text)]


class SpanShuffleParams(ReorderParams):
    """Attributes: span_length: words per span (the last span may be shorter)."""

    span_length: int = Field(4, ge=1)


class SpanShuffle(_UnitShuffle):
    """Move ``round(strength * m)`` of the m spans of ``span_length`` words along a random cycle."""

    name = "reorder-spans"
    Params = SpanShuffleParams
    unit = "span"

    def _units(self, text):
        w, L = text.split(), self.params.span_length
        return [w[i : i + L] for i in range(0, len(w), L)]


class WordShuffle(_UnitShuffle):
    """Move ``round(strength * n)`` of the n words along a random cycle; strength 1 shuffles all words."""

    name = "reorder-words"
    Params = ReorderParams
    unit = "word"

    def _units(self, text):
        return [[w] for w in text.split()]
