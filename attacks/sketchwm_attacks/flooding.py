"""Flooding attacks: lengthen a text with repeated material that carries no watermark evidence.

A count-based watermark statistic is additive over the tokens of a text (the seed paper's global
sketch h_k(y) = Φᵀc(y)/√N sums one keyed vector per token, §4.1;
:meth:`sketchwm.components.Sketch.sketch`), so many copies of one token, or of one phrase, add a
large term that owes nothing to the watermark and dilute the watermarked share. Repetition
is a known weak spot of token-counting detectors: Fernandez et al. (2023, "Three Bricks to
Consolidate Watermarks for LLMs") score each (context, token) tuple only once because repeated
tuples break the detector's independence assumption, and the reference detector of Kirchenbauer
et al. (2023, "A Watermark for Large Language Models"; 2024, "On the Reliability of Watermarks for
Large Language Models") has an option to ignore repeated n-grams for the same reason. The
attacker needs no key.

* ``flood-token`` — insert one repeated word (the *flood token*) into the text. The token is
  ``choice``: ``"stopword"`` (``"the"``), ``"punct"`` (``","``, a word of its own in the default
  model's detokenised output), ``"frequent"`` (the ``rank``-th most frequent word form of the
  Brown corpus, :data:`FREQUENT_WORDS`) or ``"fixed"`` (the ``token`` parameter, one
  whitespace-free word). ``placement``: ``"every-k"`` inserts it after every k-th word,
  k = ``round(1 / s)`` (half away from zero; s = 0.5 → after every 2nd word, s = 0.2 → every 5th,
  s = 1 → after every word), i.e. ``floor(n / k)`` insertions, deterministic (no randomness
  used); ``"random"`` inserts ``round(s * n)`` copies at as many distinct gaps of the n + 1 gaps
  (before the first word, between words, after the last), uniformly without replacement.
* ``repeat-span`` — duplicate material of the text immediately after itself. ``mode="phrase"``
  (default): the text is cut into consecutive spans of ``span_words`` words at a uniformly random
  phase; spans are picked in random order (full-length spans before the shorter edge spans) and
  each picked span is repeated right after itself, until exactly ``round(s * n)`` words are added
  (the last copy may repeat only the last words of its span). Picked spans never overlap, so every
  copy directly follows its source: the output reads "... a b c d e a b c d e ...".
  ``mode="sentence"``: sentences (split after ``.``, ``!``, ``?``) are visited in random order and one is repeated right after itself whenever that brings the
  number of added words closer to ``round(s * n)``; the added count is within half the longest
  sentence of the target (a text without sentence marks is one sentence: it is doubled or left
  alone).

Strength s in [0, 1]: words inserted / words of the input (the *insertion rate*); 0 is the
identity. ``edit_fraction`` = inserted words / n exactly (for ``every-k`` that is
``floor(n / round(1 / s)) / n``, close to but not always equal to s). The input is a subsequence of
the output; words are rejoined with single spaces (see :mod:`sketchwm_attacks.base`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, field_validator, model_validator

from .base import AttackParams, EditResult, TextAttack, WordAttack, n_edits, sample_positions, split_sentences

__all__ = ["FloodToken", "RepeatSpan", "FREQUENT_WORDS", "flood_token_word"]

#: The 20 most frequent word forms of the Brown corpus (Kučera & Francis 1967, "Computational
#: Analysis of Present-Day American English"; ~1M words of 1961 American English), most frequent
#: first, case-folded. An attacker without the key can take such a list from any public corpus.
FREQUENT_WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "a", "in", "that", "is", "was", "he",
    "for", "it", "with", "as", "his", "on", "be", "at", "by", "i",
)

#: The flood token of ``choice="stopword"`` (a member of :data:`sketchwm_attacks.base.STOPWORDS`).
STOPWORD_TOKEN = "the"
#: The flood token of ``choice="punct"``.
PUNCT_TOKEN = ","


class FloodTokenParams(AttackParams):
    """Attributes:
    choice: which token floods the text: "stopword" ("the"), "punct" (","), "frequent" (the
        ``rank``-th word of :data:`FREQUENT_WORDS`) or "fixed" (``token``).
    token: the flood token for ``choice="fixed"`` (one word, no whitespace); only valid with "fixed".
    rank: 1-based rank in :data:`FREQUENT_WORDS` for ``choice="frequent"`` (1 = "the").
    placement: "every-k" (after every round(1/s)-th word) or "random" (round(s·n) distinct random gaps).
    similarity: see :class:`AttackParams`.
    """

    choice: Literal["stopword", "punct", "frequent", "fixed"] = "stopword"
    token: str | None = None
    rank: int = Field(1, ge=1, le=len(FREQUENT_WORDS))
    placement: Literal["every-k", "random"] = "every-k"

    @field_validator("token")
    @classmethod
    def _one_word(cls, v: str | None) -> str | None:
        if v is not None and (not v or v.split() != [v]):
            raise ValueError(f"token must be one non-empty word without whitespace, got {v!r}")
        return v

    @model_validator(mode="after")
    def _token_iff_fixed(self) -> "FloodTokenParams":
        if self.choice == "fixed" and self.token is None:
            raise ValueError('choice="fixed" needs a token')
        if self.choice != "fixed" and self.token is not None:
            raise ValueError(f'token is only used with choice="fixed" (choice is "{self.choice}")')
        return self


def flood_token_word(params: FloodTokenParams) -> str:
    """The flood token that ``params`` select (see :class:`FloodTokenParams`)."""
    if params.choice == "stopword":
        return STOPWORD_TOKEN
    if params.choice == "punct":
        return PUNCT_TOKEN
    if params.choice == "frequent":
        return FREQUENT_WORDS[params.rank - 1]
    assert params.token is not None  # enforced by the validator
    return params.token


def every_k(strength: float) -> int | None:
    """k = round(1 / strength) (half away from zero) of the ``every-k`` placement; None for strength 0."""
    if strength <= 0.0:
        return None
    return max(1, int(math.floor(1.0 / strength + 0.5)))


class FloodToken(WordAttack):
    """Insert one repeated token after every round(1/s)-th word or at round(s·n) random gaps (see module doc).

    ``meta["token"]`` is the flood token used.
    """

    name = "flood-token"
    Params = FloodTokenParams

    def __init__(self, params: Any = None, **resources: Any):
        super().__init__(params, **resources)
        self.token = flood_token_word(self.params)

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        res = super()._edit(texts, strength, generator, token_ids=token_ids, prompts=prompts)
        res.meta.update({"token": self.token, "placement": self.params.placement})
        return res

    def _edit_words(self, words, strength, generator):
        n = len(words)
        if self.params.placement == "every-k":
            k = every_k(strength)
            gaps = set() if k is None else set(range(k, n + 1, k))  # gap i = after the i-th word
        else:
            gaps = set(sample_positions(n + 1, n_edits(strength, n), generator))
        out: list[str] = []
        for i in range(n + 1):
            if i in gaps:
                out.append(self.token)
            if i < n:
                out.append(words[i])
        return out, len(gaps) / n


class RepeatSpanParams(AttackParams):
    """Attributes:
    mode: "phrase" (non-overlapping spans of ``span_words`` words) or "sentence" (whole sentences).
    span_words: words per span in "phrase" mode.
    similarity: see :class:`AttackParams`.
    """

    mode: Literal["phrase", "sentence"] = "phrase"
    span_words: int = Field(5, ge=1)


class RepeatSpan(TextAttack):
    """Repeat random phrases or sentences right after themselves until ~round(s·n) words are added (see module doc).

    ``meta["added_words"]`` lists the words added per text.
    """

    name = "repeat-span"
    Params = RepeatSpanParams

    def _phrase_units(self, words: list[str], generator: torch.Generator) -> list[list[str]]:
        L = min(self.params.span_words, len(words))
        phase = int(torch.randint(L, (1,), generator=generator))
        cuts = [0] + list(range(phase, len(words), L)) + [len(words)]
        cuts = sorted(set(cuts))
        return [words[a:b] for a, b in zip(cuts, cuts[1:])]

    def _duplicate_phrases(self, words: list[str], target: int, generator: torch.Generator) -> tuple[list[str], int]:
        units = self._phrase_units(words, generator)
        L = min(self.params.span_words, len(words))
        order = torch.randperm(len(units), generator=generator).tolist()
        order = [u for u in order if len(units[u]) == L] + [u for u in order if len(units[u]) < L]
        copies: dict[int, list[str]] = {}
        added = 0
        for u in order:
            if added >= target:
                break
            take = min(len(units[u]), target - added)
            copies[u] = units[u][len(units[u]) - take :]  # a suffix: the copy repeats the words just before it
            added += len(copies[u])
        out = [w for j, unit in enumerate(units) for w in unit + copies.get(j, [])]
        return out, added

    def _duplicate_sentences(self, text: str, target: int, generator: torch.Generator) -> tuple[list[str], int]:
        sents = [s.split() for s in split_sentences(text)]
        sents = [s for s in sents if s]
        picked: set[int] = set()
        added = 0
        if target > 0:
            for j in torch.randperm(len(sents), generator=generator).tolist():
                if abs(added + len(sents[j]) - target) < abs(added - target):
                    picked.add(j)
                    added += len(sents[j])
        out = [w for j, s in enumerate(sents) for w in (s + s if j in picked else s)]
        return out, added

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        outs, fracs, added_all = [], [], []
        for text in texts:
            words = text.split()
            n = len(words)
            if n == 0:
                outs.append(text)
                fracs.append(0.0)
                added_all.append(0)
                continue
            target = n_edits(strength, n)
            if self.params.mode == "phrase":
                new, added = self._duplicate_phrases(words, target, generator) if target else (words, 0)
            else:
                new, added = self._duplicate_sentences(text, target, generator)
            outs.append(" ".join(new))
            fracs.append(added / n)
            added_all.append(added)
        return EditResult(outs, fracs, {"added_words": added_all, "mode": self.params.mode})
