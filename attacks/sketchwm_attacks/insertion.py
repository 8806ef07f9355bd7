"""Insertion attacks: add words to a text.

* ``insert-random`` — ``round(s * n)`` random words (resource ``vocabulary``, default
  :data:`sketchwm_attacks.base.COMMON_WORDS`) at uniformly random gaps of the n-word text.
* ``insert-human`` — the copy-paste attack (Kirchenbauer et al. 2024, "On the Reliability of
  Watermarks for Large Language Models", §4): ``round(s * n)`` consecutive words of human text
  (the shipped human passages, ``sketchwm.data.load("human")``, or resource ``human_texts``)
  pasted at the start, at the end, or spread over the text in ``n_chunks`` pieces. The watermarked
  share of the result is n / (n + round(s * n)) (reported as ``meta["watermarked_share"]``).

Strength s: words inserted / words of the input, so both attacks lengthen the text by exactly
``round(s * n)`` words; ``edit_fraction`` = inserted / n.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from sketchwm.errors import InputError, ModelFileError

from .base import AttackParams, EditResult, TextAttack, WordAttack, n_edits

__all__ = ["RandomInsertion", "HumanInsertion", "load_human_texts"]


class RandomInsertionParams(AttackParams):
    """Attributes: similarity (see :class:`AttackParams`)."""


class RandomInsertion(WordAttack):
    """Insert ``round(strength * n)`` random vocabulary words at uniformly random gaps.

    Each inserted word independently picks one of the n + 1 gaps (before the first word, between
    words, after the last word) and a uniform word of the vocabulary.
    """

    name = "insert-random"
    Params = RandomInsertionParams

    min_vocabulary = 1

    def _edit_words(self, words, strength, generator):
        n = len(words)
        k = n_edits(strength, n)
        gaps = torch.randint(n + 1, (k,), generator=generator).tolist()
        draws = torch.randint(len(self.vocabulary), (k,), generator=generator).tolist()
        inserted: dict[int, list[str]] = {}
        for g, d in zip(gaps, draws):
            inserted.setdefault(g, []).append(self.vocabulary[d].split()[0])
        out: list[str] = []
        for i in range(n + 1):
            out.extend(inserted.get(i, []))
            if i < n:
                out.append(words[i])
        return out, k / n


def load_human_texts() -> list[str]:
    """The shipped human passages: ``sketchwm.data.load("human")``, else ``sketchwm/data/human.jsonl.gz``.

    Raises:
        ModelFileError: no human passages are shipped.
    """
    try:
        from sketchwm.data import load  # type: ignore[attr-defined]

        rows = load("human")
        texts = [r if isinstance(r, str) else (r["text"] if isinstance(r, dict) else getattr(r, "text")) for r in rows]
        if texts:
            return [str(t) for t in texts]
    except (ImportError, AttributeError, KeyError, TypeError, ValueError, OSError):
        pass
    import sketchwm

    for base in map(Path, getattr(sketchwm, "__path__", [])):
        path = base / "data" / "human.jsonl.gz"
        if path.exists():
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return [json.loads(line)["text"] for line in fh if line.strip()]
    raise ModelFileError("no human passages found (sketchwm/data/human.jsonl.gz); pass human_texts=[...] to the attack")


class HumanInsertionParams(AttackParams):
    """Attributes:
    position: where the human words go: "start", "end", or "spread" (``n_chunks`` pieces at random gaps).
    n_chunks: pieces of human text for "spread".
    """

    position: Literal["start", "end", "spread"] = "spread"
    n_chunks: int = Field(3, ge=1)


class HumanInsertion(TextAttack):
    """Copy-paste ``round(strength * n)`` consecutive human words into each text (see module doc).

    The human span starts at a uniformly random word of a uniformly random passage and continues
    into the following passages when one is too short. For "spread", the span is cut into
    ``n_chunks`` nearly equal pieces inserted, in order, at uniformly random gaps of the text.
    """

    name = "insert-human"
    Params = HumanInsertionParams

    def __init__(self, params: Any = None, **resources: Any):
        super().__init__(params, **resources)
        self._human: list[list[str]] | None = None
        if resources.get("human_texts") is not None:
            self._human = [t.split() for t in resources["human_texts"] if t.split()]

    def _passages(self) -> list[list[str]]:
        if self._human is None:
            self._human = [t.split() for t in load_human_texts() if t.split()]
        if not self._human:
            raise InputError("insert-human: the human passages are empty")
        return self._human

    def _span(self, k: int, generator: torch.Generator) -> list[str]:
        passages = self._passages()
        p = int(torch.randint(len(passages), (1,), generator=generator))
        start = int(torch.randint(len(passages[p]), (1,), generator=generator))
        out = passages[p][start : start + k]
        while len(out) < k:  # continue into the next passages (cyclically)
            p = (p + 1) % len(passages)
            out.extend(passages[p][: k - len(out)])
        return out

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        outs, fracs, shares = [], [], []
        for text in texts:
            words = text.split()
            n = len(words)
            k = n_edits(strength, n)
            if k == 0:
                outs.append(" ".join(words) if words else text)
                fracs.append(0.0)
                shares.append(1.0)
                continue
            span = self._span(k, generator)
            pos = self.params.position
            if pos == "start":
                new = span + words
            elif pos == "end":
                new = words + span
            else:
                c = min(self.params.n_chunks, k)
                bounds = [round(j * k / c) for j in range(c + 1)]
                chunks = [span[bounds[j] : bounds[j + 1]] for j in range(c)]
                gaps = sorted(torch.randint(n + 1, (c,), generator=generator).tolist())
                new, j = [], 0
                for i in range(n + 1):
                    while j < c and gaps[j] == i:
                        new.extend(chunks[j])
                        j += 1
                    if i < n:
                        new.append(words[i])
            outs.append(" ".join(new))
            fracs.append(k / n)
            shares.append(n / (n + k))
        return EditResult(outs, fracs, {"watermarked_share": shares, "position": self.params.position})
