"""Thieves beyond single words: the pair thief, the generation spoofer and the adaptive thief.

All three learn from N texts of the watermarked model and N unwatermarked samples of the same open
model (resources ``watermarked_texts`` and ``reference_texts``), as the word thief of
:mod:`sketchwm_attacks.forgery` does (Jovanović et al. 2024, "Watermark Stealing in Large Language
Models"); none holds the key.

**Pair thief** (``spoof-pair-insert``, ``spoof-pair-substitute``). A context-keyed channel (a green
list or keyed sampling seeded by the previous token, Kirchenbauer et al. 2023) boosts a token *after
a given neighbour*: counting single words cannot see it, counting adjacent pairs can. The pair
stealer (:class:`PairStealer`) scores every adjacent token pair (a, b) by the two-proportion z
statistic of eq. (1) of :mod:`sketchwm_attacks.forgery` on document frequencies: the fraction of
watermarked texts holding the pair against the fraction of reference texts. One pair is at once a
(previous word, word) count for b and a (word, next word) count for a, so one table serves left- and
right-context channels. The forger writes the most boosted pairs of whole words into the passage at
the word thief's budget: ``round(s · n)`` words of the n-word passage (⌈k/2⌉ pairs, the last cut to
one word when k is odd), so word and pair thieves compare at equal word budgets.

**Generation spoofer** (``spoof-generate``). Fits :class:`sketchwm_attacks.stealing.WatermarkStealer`
(per-token and per-left-context frequency ratios) and lets the *unwatermarked* model write with
``δ · boost`` added to its logits: it regenerates a fraction s of the passage's tokens (all of them
at s = 1), as :meth:`WatermarkStealer.spoof` generates from a prompt.

**Adaptive thief** (``spoof-adaptive``). Knows the scheme and its parameters, not the key. Against a
key family of K members (``clusters`` = K; Aremu et al. 2025 randomise the key per text) it clusters
the stolen texts by their boosted tokens (k-means, :class:`sketchwm_attacks.forgery.ClusteredStealer`)
and steals per cluster; against context-keyed channels it learns per context, i.e. pairs. Each forgery
takes one cluster at random and writes that cluster's most boosted pairs, then its most boosted words
while the budget lasts (``placement``: ``insert`` or ``substitute``).

Stolen units are whole words: tokens that decode to letters only and encode back to the one token.
``edit_fraction`` = words written / n.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Sequence

import numpy as np
import torch
from pydantic import Field

from sketchwm.errors import InputError

from .base import AttackParams, EditResult, TextAttack, n_edits, sample_positions
from .forgery import (ClusteredStealer, DocFrequencyBase, DocFrequencyConfig, DocFrequencyStealer, top_positive,
                      two_proportion_z)
from .stealing import StealerConfig, WatermarkStealer

__all__ = ["PairStealer", "PairInsertion", "PairSubstitution", "GenerationSpoof", "AdaptiveThief", "pair_keys"]


def pair_keys(ids: Sequence[int], vocab_size: int) -> torch.Tensor:
    """Distinct adjacent pairs of one text as keys ``a · V + b``: (P,) int64, sorted."""
    t = torch.as_tensor(list(ids), dtype=torch.long)
    if t.numel() < 2:
        return torch.zeros(0, dtype=torch.long)
    return torch.unique(t[:-1] * vocab_size + t[1:])


def _pair_doc_counts(docs: Sequence[Sequence[int]], V: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys (K,) int64 sorted, counts (K,) int64): how many documents hold each adjacent pair.

    Raises:
        InputError: a token id outside [0, V).
    """
    parts = []
    for d in docs:  # per document: its distinct pairs
        t = torch.as_tensor(list(d), dtype=torch.long)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= V):
            raise InputError(f"token id outside the vocabulary [0, {V})")
        parts.append(pair_keys(t.tolist(), V))
    flat = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
    return torch.unique(flat, return_counts=True)


class PairStealer(DocFrequencyBase):
    """Per-pair boost estimate: eq. (1) of :mod:`sketchwm_attacks.forgery` over adjacent token pairs.

    Args:
        vocab_size: V.
        config: :class:`sketchwm_attacks.forgery.DocFrequencyConfig` or dict (smoothing a, ``min_docs``).

    Attributes (after :meth:`fit`):
        keys: (K,) int64 pair keys ``a · V + b`` seen in at least ``min_docs`` watermarked texts, sorted.
        score: (K,) float64 z statistic of each.
        n_watermarked: N_w.
    """

    what = "pair stealing"

    def __init__(self, vocab_size: int, config: "DocFrequencyConfig | dict | None" = None):
        super().__init__(vocab_size, config)
        self.keys: torch.Tensor | None = None
        self.score = torch.zeros(0, dtype=torch.float64)

    def fit(self, watermarked: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> "PairStealer":
        """Learn the pair scores from token-id lists of watermarked and of unwatermarked texts.

        Raises:
            InputError: an empty set, or ids outside [0, V).
        """
        nw, nb = self._sizes(watermarked, reference)
        V, a = self.vocab_size, self.config.smoothing
        kw, cw = _pair_doc_counts(watermarked, V)  # (K,), (K,)
        keep = cw >= self.config.min_docs
        kw, cw = kw[keep], cw[keep].double()
        kb, cb_all = _pair_doc_counts(reference, V)
        cb = torch.zeros_like(cw)  # (K,) reference documents holding each pair
        if kb.numel() and kw.numel():
            pos = torch.searchsorted(kb, kw).clamp(max=kb.numel() - 1)
            cb = torch.where(kb[pos] == kw, cb_all[pos].double(), cb)
        self.keys, self.score, self.n_watermarked = kw, two_proportion_z(cw, cb, nw, nb, a), nw  # (K,)
        return self

    def ranked(self, k: int | None = None) -> torch.Tensor:
        """Pairs with a positive score, most boosted first (at most ``k``): (k', 2) int64 token ids.

        Raises:
            InputError: not fitted.
        """
        if self.keys is None:
            raise InputError("the pair stealer has not been fitted (call fit first)")
        keys = self.keys[top_positive(self.score, k)]
        return torch.stack([keys // self.vocab_size, keys % self.vocab_size], 1)


class _WordCheck:
    """Which token ids are whole words of a backend (decode to letters only, encode back to the one id), cached."""

    def __init__(self, backend: Any):
        self.backend, self.memo = backend, {}

    def word(self, t: int) -> str | None:
        if t not in self.memo:
            w = self.backend.decode([t]).strip()
            self.memo[t] = w if w.isalpha() and self.backend.encode([w])[0] == [t] else None
        return self.memo[t]


def stolen_pairs(stealer: PairStealer, check: _WordCheck, limit: int = 4000) -> list[tuple[str, str]]:
    """The stealer's pairs of whole words, most boosted first, each pair once (at most ``limit`` candidates read)."""
    out = []
    for a, b in stealer.ranked(limit).tolist():  # per candidate pair: decoding to words
        wa, wb = check.word(a), check.word(b)
        if wa is not None and wb is not None:
            out.append((wa, wb))
    return out


def stolen_words(stealer: DocFrequencyStealer, check: _WordCheck, limit: int = 4000) -> list[str]:
    """The word stealer's whole words, most boosted first."""
    return [w for w in (check.word(t) for t in stealer.ranked(limit).tolist()) if w is not None]


def _budget_units(units: list[tuple[str, ...]], k: int, present: set[str]) -> list[list[str]]:
    """Stolen units (pairs or single words) for a budget of ``k`` words: units of the list in order,
    skipping any whose words all appear in the passage already, the last one cut to fit."""
    out, used = [], 0
    for u in units:
        if used >= k:
            break
        if all(w.lower() in present for w in u):
            continue
        u = list(u[: k - used])
        out.append(u)
        used += len(u)
    return out


def _insert(words: list[str], units: list[list[str]], generator: torch.Generator) -> list[str]:
    """Each unit's words, kept adjacent, at a uniformly random gap of the passage."""
    gaps = torch.randint(len(words) + 1, (len(units),), generator=generator).tolist()
    at: dict[int, list[str]] = {}
    for g, u in zip(gaps, units):
        at.setdefault(g, []).extend(u)
    out: list[str] = []
    for i in range(len(words) + 1):
        out.extend(at.get(i, []))
        if i < len(words):
            out.append(words[i])
    return out


def _substitute(words: list[str], units: list[list[str]], generator: torch.Generator) -> list[str]:
    """Each unit overwrites as many adjacent words, at uniformly random non-overlapping slots of width 2."""
    out = list(words)
    slots = len(words) // 2 if len(words) >= 2 else len(words)
    width = 2 if len(words) >= 2 else 1
    for s, u in zip(sample_positions(slots, len(units), generator), units):
        for j, w in enumerate(u[:width]):
            out[s * width + j] = w
    return out


class PairThiefParams(AttackParams):
    """Attributes:
    stealer: :class:`DocFrequencyConfig` of the pair stealer fitted from resources.
    """

    stealer: DocFrequencyConfig = DocFrequencyConfig()


class _Forger(TextAttack):
    """Shared part of the text forgers: resources, the stolen-unit lists, the budget loop (module doc)."""

    needs_backend: ClassVar[bool] = True
    placement: ClassVar[str] = "insert"

    def _unit_lists(self) -> list[list[tuple[str, ...]]]:
        """Per cluster (one list for a single-key thief), the stolen units, most boosted first."""
        raise NotImplementedError

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        lists = self._resource("_units", self._unit_lists) or [[]]  # a thief that learned nothing writes nothing
        place = _insert if self._placement() == "insert" else _substitute
        outs, fracs, used = [], [], []
        for text in texts:  # word edits are Python-level, one passage at a time
            words = text.split()
            n = len(words)
            c = int(torch.randint(len(lists), (1,), generator=generator)) if len(lists) > 1 else 0
            present = {w.strip(".,;:!?\"'()").lower() for w in words}
            units = _budget_units(lists[c], n_edits(strength, n) if n else 0, present)
            outs.append(" ".join(place(words, units, generator)) if units else text)
            fracs.append(sum(len(u) for u in units) / n if n else 0.0)
            used.append(c)
        return EditResult(outs, fracs, {"clusters": len(lists), "cluster": used})

    def _placement(self) -> str:
        return self.placement


class _PairForger(_Forger):
    Params = PairThiefParams

    @property
    def stealer(self) -> PairStealer:
        """The ``stealer`` resource (a fitted :class:`PairStealer`), or one fitted from the texts."""
        def fit() -> PairStealer:
            w, r = self._stolen_ids()
            return PairStealer(self.backend.vocab_size, self.params.stealer).fit(w, r)
        return self._resource("stealer", fit)

    def _unit_lists(self) -> list[list[tuple[str, ...]]]:
        return [stolen_pairs(self.stealer, _WordCheck(self.backend))]


class PairInsertion(_PairForger):
    """Pair thief, paste-in: the most boosted adjacent word pairs at random gaps (module doc)."""

    name = "spoof-pair-insert"
    placement = "insert"


class PairSubstitution(_PairForger):
    """Pair thief, substitution: the most boosted adjacent word pairs over random word pairs (module doc)."""

    name = "spoof-pair-substitute"
    placement = "substitute"


class AdaptiveParams(AttackParams):
    """Attributes:
    clusters: K, the member keys the thief assumes (the family's ``members``; 1 for a single key).
    n_features: F, the globally most boosted tokens the clustering reads.
    placement: ``insert`` (paste-in) or ``substitute``.
    stealer: :class:`DocFrequencyConfig` of the per-cluster pair and word stealers.
    """

    clusters: int = Field(1, ge=1)
    n_features: int = Field(300, ge=1)
    placement: Literal["insert", "substitute"] = "insert"
    stealer: DocFrequencyConfig = DocFrequencyConfig()


class AdaptiveThief(_Forger):
    """The adaptive thief: cluster the stolen texts by member, then steal pairs and words per cluster (module doc)."""

    name = "spoof-adaptive"
    Params = AdaptiveParams

    def _placement(self) -> str:
        return self.params.placement

    def _unit_lists(self) -> list[list[tuple[str, ...]]]:
        w, r = self._stolen_ids()
        p, V = self.params, self.backend.vocab_size
        if p.clusters > 1:
            labels = ClusteredStealer(V, p.clusters, p.n_features, p.stealer).fit(w, r).labels.numpy()
        else:
            labels = np.zeros(len(w), dtype=np.int64)
        check, out = _WordCheck(self.backend), []
        for c in np.unique(labels).tolist():  # per cluster: its own pair and word statistics
            docs = [d for d, lab in zip(w, labels) if lab == c]
            pairs = stolen_pairs(PairStealer(V, p.stealer).fit(docs, r), check)
            words = stolen_words(DocFrequencyStealer(V, p.stealer).fit(docs, r), check)
            out.append([*pairs, *((x,) for x in words)])
        return out


class GenerationSpoofParams(AttackParams):
    """Attributes:
    stealer: :class:`StealerConfig` of the frequency-ratio stealer fitted from resources.
    delta: δ, the weight of the stolen boost added to the unwatermarked model's logits.
    steps: denoising steps of the regeneration.
    temperature: sampling temperature of the regeneration.
    """

    stealer: StealerConfig = StealerConfig()
    delta: float = Field(4.0, ge=0.0)
    steps: int = Field(8, ge=1)
    temperature: float = Field(1.0, ge=0.0)


class GenerationSpoof(TextAttack):
    """Generation spoofer: the unwatermarked model, boosted by the stolen frequency ratios, writes the text.

    Strength s: ``round(s · N)`` uniformly random tokens of the N-token passage (its first
    ``max_length``) are masked and regenerated by the unwatermarked DLM with logits
    ``+ δ · (s0(v) + w · s1(left neighbour, v))`` (:class:`WatermarkStealer`; a neighbour still masked
    counts as unknown). At s = 1 every token is the spoofer's: a boosted generation of the passage's
    length. ``edit_fraction`` = tokens changed / N. Resources: ``backend``, and ``stealer`` (a fitted
    :class:`WatermarkStealer`) or ``watermarked_texts`` with ``reference_texts``.
    """

    name = "spoof-generate"
    Params = GenerationSpoofParams
    needs_backend: ClassVar[bool] = True

    @property
    def stealer(self) -> WatermarkStealer:
        """The ``stealer`` resource, or one fitted from ``watermarked_texts`` and ``reference_texts``."""
        def fit() -> WatermarkStealer:
            return WatermarkStealer(self.backend.vocab_size, self.params.stealer).fit(*self._stolen_ids())
        return self._resource("stealer", fit)

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        from .paraphrase import resample_masked

        be, st, p = self.backend, self.stealer, self.params
        rows = [ids[: max(8, be.max_length)] for ids in be.encode(texts)]
        masks = [sample_positions(len(r), n_edits(strength, len(r)), generator) for r in rows]
        mask_id, s0, w = be.mask_token_id, st.token_score, st.config.context_weight

        def boost(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
            """logits (B, L, V) + δ · stolen boost at the masked positions."""
            masked = x == mask_id  # (B, L)
            bi, li = masked.nonzero(as_tuple=True)  # (M,), (M,)
            left = (li - 1).clamp(min=0)
            prev = torch.where((li > 0) & ~masked[bi, left], x[bi, left], torch.full_like(li, -1))  # (M,)
            b = s0[None, :] + w * st.context_rows(prev) if w > 0 else s0[None, :].expand(len(li), -1)  # (M, V)
            out = logits.clone()
            out[bi, li] += p.delta * b.to(out.dtype)
            return out

        new: list[list[int]] = []
        for b0 in range(0, len(rows), 16):
            new.extend(resample_masked(be, rows[b0:b0 + 16], masks[b0:b0 + 16], generator, steps=p.steps,
                                       temperature=p.temperature, remasking="random", logit_hook=boost))
        changed = [sum(int(a != c) for a, c in zip(r, n)) for r, n in zip(rows, new)]
        outs = [be.decode(n) if changed[t] else texts[t] for t, n in enumerate(new)]  # unchanged → verbatim
        fracs = [changed[t] / len(rows[t]) if rows[t] else 0.0 for t in range(len(texts))]
        return EditResult(outs, fracs, {"delta": p.delta, "stealer_n": st.n_watermarked})
