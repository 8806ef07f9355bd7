"""Deletion attack: remove a fraction of the words of a text.

``delete-random``: strength s removes ``round(s * n)`` of the n words (whitespace-separated
tokens, punctuation tokens included), positions uniform without replacement. The output has
exactly ``n - round(s * n)`` words; ``edit_fraction`` = deleted / n. Word deletion is the
"deletion" edit of Kirchenbauer et al. (2023) and of the MarkLLM robustness suite.
"""

from __future__ import annotations

from .base import AttackParams, WordAttack, n_edits, sample_positions

__all__ = ["RandomDeletion"]


class RandomDeletionParams(AttackParams):
    """Attributes: similarity (see :class:`AttackParams`)."""


class RandomDeletion(WordAttack):
    """Delete ``round(strength * n)`` uniformly chosen words (see module doc)."""

    name = "delete-random"
    Params = RandomDeletionParams

    def _edit_words(self, words, strength, generator):
        k = n_edits(strength, len(words))
        drop = set(sample_positions(len(words), k, generator))
        return [w for i, w in enumerate(words) if i not in drop], k / len(words)
