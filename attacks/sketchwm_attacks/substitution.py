"""Substitution attacks: replace a fraction of the words of a text.

* ``substitute-random`` — each chosen word becomes a uniformly random word of a vocabulary (the
  "random token replacement" attack of Kirchenbauer et al. 2023, §7, at the word level).
* ``substitute-synonym`` — each chosen word becomes a WordNet synonym (nltk; WordNet laid out by
  :mod:`sketchwm_attacks.wordnet_setup`), the lexical-substitution attack used by e.g. MarkLLM.
* ``substitute-contextual`` — each chosen word is masked and replaced by a *different*
  high-probability whole-word fill of the unwatermarked masked LM (the default DLM): the
  "contextual substitution" attack of Kirchenbauer et al. (2024, "On the Reliability of Watermarks").

Strength s: the attack targets ``round(s * n)`` of the n words of a text (positions uniform
without replacement among the *eligible* words: alphabetic words for random replacement, words
with a synonym / non-stop-words for the others). If fewer words are eligible, all eligible words
are replaced; the reported ``edit_fraction`` is the number actually replaced / n. Punctuation
attached to a word (``"(happy),"``) and its capitalisation are kept.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import torch
from pydantic import Field

from .base import (
    STOPWORDS,
    AttackParams,
    EditResult,
    TextAttack,
    WordAttack,
    match_case,
    n_edits,
    sample_positions,
    split_affixes,
)

__all__ = ["RandomSubstitution", "SynonymSubstitution", "ContextualSubstitution", "wordnet_synonyms"]


def _is_word(core: str) -> bool:
    return bool(core) and core.replace("'", "").replace("-", "").isalpha()


class RandomSubstitutionParams(AttackParams):
    """Attributes: similarity (see :class:`AttackParams`)."""


class RandomSubstitution(WordAttack):
    """Replace a fraction ``strength`` of the words by uniformly random words.

    Eligible words: those whose core (without punctuation) is alphabetic. The replacement is drawn
    uniformly from the vocabulary (resource ``vocabulary``, default :data:`COMMON_WORDS`) and
    differs from the original word. ``edit_fraction`` = replaced words / words.
    """

    name = "substitute-random"
    Params = RandomSubstitutionParams

    min_vocabulary = 2

    def _edit_words(self, words, strength, generator):
        eligible = [i for i, w in enumerate(words) if _is_word(split_affixes(w)[1])]
        k = min(n_edits(strength, len(words)), len(eligible))
        chosen = [eligible[j] for j in sample_positions(len(eligible), k, generator)]
        draws = torch.randint(len(self.vocabulary), (len(chosen),), generator=generator).tolist()
        out = list(words)
        for i, d in zip(chosen, draws):
            lead, core, trail = split_affixes(words[i])
            new = self.vocabulary[d]
            if new.lower() == core.lower():
                new = self.vocabulary[(d + 1) % len(self.vocabulary)]
            out[i] = lead + match_case(core, new) + trail
        return out, len(chosen) / len(words)


# ---------------------------------------------------------------------------- WordNet synonyms
@functools.lru_cache(maxsize=200_000)
def wordnet_synonyms(word: str, max_senses: int = 3, multiword: bool = False) -> tuple[str, ...]:
    """Sorted WordNet synonyms of ``word`` (lower-case), excluding the word itself.

    Only synsets in which ``word`` itself is a lemma are used (so inflected forms such as "ran",
    whose synsets list "run", get no base-form replacement that would break the grammar), the
    first ``max_senses`` of each part of speech in WordNet's sense-frequency order.

    Raises:
        ModelFileError: WordNet is not installed where nltk finds it (see :mod:`sketchwm_attacks.wordnet_setup`).
    """
    from .wordnet_setup import load_wordnet

    wn = load_wordnet()
    w = word.lower()
    seen: set[str] = set()
    per_pos: dict[str, int] = {}
    for syn in wn.synsets(w):
        names = [lem.name() for lem in syn.lemmas()]
        if w not in (n.lower() for n in names):
            continue
        pos = syn.pos()
        if per_pos.get(pos, 0) >= max_senses:
            continue
        per_pos[pos] = per_pos.get(pos, 0) + 1
        for n in names:
            if ("_" in n or "-" in n) and not multiword:
                continue
            cand = n.replace("_", " ").lower()
            if cand != w and cand.replace(" ", "").isalpha():
                seen.add(cand)
    return tuple(sorted(seen))


class SynonymSubstitutionParams(AttackParams):
    """Attributes:
    max_senses: WordNet senses per part of speech to take synonyms from (most frequent first).
    multiword: allow multi-word synonyms ("look into"); they change the word count.
    skip_stopwords: never replace function words (:data:`STOPWORDS`).
    """

    max_senses: int = Field(3, ge=1)
    multiword: bool = False
    skip_stopwords: bool = True


class SynonymSubstitution(WordAttack):
    """Replace a fraction ``strength`` of the words by a WordNet synonym (nltk, offline WordNet 3.0).

    Eligible words: alphabetic, not a stop word, with at least one synonym
    (:func:`wordnet_synonyms`); the synonym is uniform among them. ``edit_fraction`` = replaced
    words / words, which is below ``strength`` when too few words have synonyms.

    Raises:
        ModelFileError: WordNet missing (run ``python -m sketchwm_attacks.wordnet_setup``).
    """

    name = "substitute-synonym"
    Params = SynonymSubstitutionParams

    def _synonyms(self, core: str) -> tuple[str, ...]:
        if not _is_word(core) or (self.params.skip_stopwords and core.lower() in STOPWORDS):
            return ()
        return wordnet_synonyms(core.lower(), self.params.max_senses, self.params.multiword)

    def _edit_words(self, words, strength, generator):
        syns = [self._synonyms(split_affixes(w)[1]) for w in words]
        eligible = [i for i, s in enumerate(syns) if s]
        k = min(n_edits(strength, len(words)), len(eligible))
        chosen = [eligible[j] for j in sample_positions(len(eligible), k, generator)]
        out = list(words)
        for i in chosen:
            lead, core, trail = split_affixes(words[i])
            d = int(torch.randint(len(syns[i]), (1,), generator=generator))
            out[i] = lead + match_case(core, syns[i][d]) + trail
        return out, len(chosen) / len(words)


# ---------------------------------------------------------------------------- masked-LM fills
class ContextualSubstitutionParams(AttackParams):
    """Attributes:
    top_k: the replacement is sampled among the k most probable whole-word fills (original excluded).
    temperature: softmax temperature over those k fills (0 = take the most probable).
    skip_stopwords: never replace function words (:data:`STOPWORDS`).
    """

    top_k: int = Field(10, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    skip_stopwords: bool = True


class ContextualSubstitution(TextAttack):
    """Mask a fraction ``strength`` of the words and fill each with a different likely word.

    All chosen words of a text are masked at once (each by a single mask token, punctuation kept)
    and the unwatermarked masked LM (resource ``backend``, default: the registry's ``default``
    backend) gives a distribution per mask; the replacement is sampled among the ``top_k`` most
    probable whole-word tokens (no ``##`` pieces, no special tokens, alphabetic) other than the
    original word. Texts longer than the model's maximum length are processed in windows.
    ``edit_fraction`` = replaced words / words.
    """

    name = "substitute-contextual"
    Params = ContextualSubstitutionParams
    needs_backend: ClassVar[bool] = True

    def _candidates(self) -> torch.Tensor:
        """(V,) bool: ids that decode to a whole alphabetic word (cached per backend)."""
        be = self.backend
        cache = getattr(self, "_cand_cache", None)
        if cache is not None and cache[0] is be:
            return cache[1]
        tok = be.tokenizer
        V = be.vocab_size
        ok = torch.zeros(V, dtype=torch.bool)
        vocab = tok.get_vocab()
        banned = set(be.banned_token_ids) | {be.mask_token_id}
        for piece, i in vocab.items():  # once per backend, not per token
            if 0 <= i < V and i not in banned and not piece.startswith("##"):
                s = piece.lstrip("\u0120\u2581")  # GPT-2 "Ġ", SentencePiece "▁" word markers
                if len(s) > 1 and s.isalpha() or s in ("a", "i"):
                    ok[i] = True
        self._cand_cache = (be, ok)
        return ok

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        be = self.backend
        mask_id = be.mask_token_id
        limit = max(8, be.max_length)
        rows: list[list[int]] = []  # model-token rows (windows)
        slots: list[tuple[int, int, int, int]] = []  # (text, word, row, position of the mask)
        words_all: list[list[str]] = []
        fracs: list[float] = []
        for t, text in enumerate(texts):
            words = text.split()
            words_all.append(words)
            if not words:
                fracs.append(0.0)
                continue
            eligible = [
                i for i, w in enumerate(words)
                if _is_word(split_affixes(w)[1])
                and not (self.params.skip_stopwords and split_affixes(w)[1].lower() in STOPWORDS)
            ]
            k = min(n_edits(strength, len(words)), len(eligible))
            chosen = set(eligible[j] for j in sample_positions(len(eligible), k, generator))
            fracs.append(len(chosen) / len(words))
            if not chosen:
                continue
            pieces: list[str] = []
            for i, w in enumerate(words):
                if i in chosen:
                    lead, _, trail = split_affixes(w)
                    pieces.extend([lead, "\x00", trail])
                else:
                    pieces.extend(["", w, ""])
            enc = be.encode([p for p in pieces if p and p != "\x00"])
            it = iter(enc)
            row: list[int] = []
            for i in range(len(words)):
                lead, mid, trail = pieces[3 * i : 3 * i + 3]
                lead_ids = next(it) if lead else []
                mid_ids = [mask_id] if mid == "\x00" else (next(it) if mid else [])
                trail_ids = next(it) if trail else []
                ids = lead_ids + mid_ids + trail_ids
                if len(row) + len(ids) > limit and row:
                    rows.append(row)
                    row = []
                if mid == "\x00":
                    slots.append((t, i, len(rows), len(row) + len(lead_ids)))
                row.extend(ids[:limit])
            rows.append(row)
        outs = [list(w) for w in words_all]
        if slots:
            fills = self._fill(rows, slots, words_all, generator)
            for (t, i, _, _), fill in zip(slots, fills):
                lead, core, trail = split_affixes(words_all[t][i])
                outs[t][i] = lead + match_case(core, fill) + trail
        texts_out = [" ".join(o) if o else texts[t] for t, o in enumerate(outs)]
        return EditResult(texts_out, fracs, {"backend": getattr(be, "model_id", be.name)})

    @torch.no_grad()
    def _fill(self, rows, slots, words_all, generator) -> list[str]:
        be = self.backend
        pad = getattr(be.tokenizer, "pad_token_id", None)
        pad = be.mask_token_id if pad is None else int(pad)
        L = max(len(r) for r in rows)
        ids = torch.full((len(rows), L), pad, dtype=torch.long)
        attn = torch.zeros((len(rows), L), dtype=torch.bool)
        for r, row in enumerate(rows):  # per row: building the batch
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            attn[r, : len(row)] = True
        logits_all = []
        for start in range(0, len(rows), 32):
            logits_all.append(be.logits(ids[start : start + 32].to(be.device), attn[start : start + 32].to(be.device)).float().cpu())
        logits = torch.cat(logits_all, 0)  # (R, L, V)
        r_idx = torch.tensor([s[2] for s in slots])
        p_idx = torch.tensor([s[3] for s in slots])
        lg = logits[r_idx, p_idx]  # (M, V)
        lg = lg.masked_fill(~self._candidates()[None, : lg.shape[1]], float("-inf"))  # (M, V)
        # exclude the original word (its first token when it is a single token)
        orig = be.encode([split_affixes(words_all[t][i])[1].lower() for t, i, _, _ in slots])
        for m, o in enumerate(orig):
            if len(o) == 1:
                lg[m, o[0]] = float("-inf")
        k = min(self.params.top_k, lg.shape[1])
        top, top_idx = lg.topk(k, dim=-1)  # (M, k)
        if self.params.temperature == 0.0:
            pick = torch.zeros(len(slots), dtype=torch.long)
        else:
            prob = torch.softmax(top / self.params.temperature, dim=-1).nan_to_num(0.0)  # (M, k)
            prob = torch.where(prob.sum(-1, keepdim=True) > 0, prob, torch.ones_like(prob))
            pick = torch.multinomial(prob, 1, generator=generator).squeeze(-1)  # (M,)
        chosen = top_idx.gather(1, pick[:, None]).squeeze(-1).tolist()  # (M,)
        return [be.decode([c]).strip() for c in chosen]
