"""Tests of the flooding attacks (``flood-token``, ``repeat-span``).

The generic conformance suite of ``tests/test_attacks.py`` runs over every registered attack, so
it covers these two as soon as they are registered; this module checks that they are registered
and their specific properties: the identity at strength 0, the exact ``every-k`` placement, the
number of inserted / repeated words, seeded determinism and the reported edit fraction.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from sketchwm.errors import ConfigError
from sketchwm.registry import get_registry
from sketchwm.testing import TINY_WORDS, tiny_texts

import sketchwm_attacks
from sketchwm_attacks import metrics
from sketchwm_attacks.base import AttackParams, n_edits, split_sentences
from sketchwm_attacks.flooding import FREQUENT_WORDS, FloodToken, RepeatSpan, every_k

NAMES = ("flood-token", "repeat-span")


_texts = tiny_texts  # shared helper (sketchwm.testing)


def _make(name: str, **params):
    return get_registry().create("attack", name, {"similarity": False, **params})


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(w in it for w in short)


def _distinct(n: int) -> str:
    """n distinct words that are none of the flood tokens."""
    return " ".join(f"w{i}" for i in range(n))


# ============================================================================ registration
def test_registered_with_documented_params():
    assert FloodToken in sketchwm_attacks.ATTACKS and RepeatSpan in sketchwm_attacks.ATTACKS
    names = get_registry().names("attack")
    for name in NAMES:
        assert name in names and name in sketchwm_attacks.__doc__
        cls = get_registry().get("attack", name)
        assert issubclass(cls.Params, AttackParams) and cls.summary()


@pytest.mark.parametrize(
    "params",
    [{"choice": "fixed"}, {"choice": "stopword", "token": "x"}, {"choice": "fixed", "token": "two words"},
     {"choice": "fixed", "token": ""}, {"choice": "frequent", "rank": 0},
     {"choice": "frequent", "rank": len(FREQUENT_WORDS) + 1}, {"placement": "sometimes"}, {"choice": "emoji"}],
)
def test_flood_token_rejects_bad_params(params):
    with pytest.raises(ConfigError):
        _make("flood-token", **params)


@pytest.mark.parametrize("params", [{"mode": "paragraph"}, {"span_words": 0}])
def test_repeat_span_rejects_bad_params(params):
    with pytest.raises(ConfigError):
        _make("repeat-span", **params)


# ============================================================================ identity
@pytest.mark.parametrize(
    "name,params",
    [("flood-token", {}), ("flood-token", {"placement": "random"}), ("flood-token", {"choice": "punct"}),
     ("repeat-span", {}), ("repeat-span", {"mode": "sentence"})],
)
def test_strength_zero_is_identity(name, params):
    texts = _texts(3, 30, seed=0) + ["single", "Hello,   world!\n again"]
    out = _make(name, **params).apply(texts, 0.0, torch.Generator().manual_seed(0))
    assert out.texts == [" ".join(t.split()) for t in texts]
    assert out.edit_fraction == [0.0] * len(texts) and out.levenshtein == [0] * len(texts)


# ============================================================================ flood-token
@pytest.mark.parametrize("n", [24, 25, 7])
def test_every_k_half_inserts_after_every_second_word(n):
    out = _make("flood-token").apply([_distinct(n)], 0.5, torch.Generator().manual_seed(0))
    w = out.texts[0].split()
    assert len(w) == n + n // 2 and w.count("the") == n // 2
    # after every 2nd original word comes "the", nowhere else
    expected = []
    for i in range(n):
        expected.append(f"w{i}")
        if (i + 1) % 2 == 0:
            expected.append("the")
    assert w == expected
    assert out.edit_fraction[0] == pytest.approx((n // 2) / n)
    assert out.meta["token"] == "the" and out.meta["placement"] == "every-k"


@pytest.mark.parametrize("s,k", [(1.0, 1), (0.5, 2), (0.4, 3), (0.3, 3), (0.25, 4), (0.2, 5), (0.1, 10), (0.01, 100)])
def test_every_k_period(s, k):
    assert every_k(s) == k
    n = 50
    out = _make("flood-token", choice="fixed", token="ZZ").apply([_distinct(n)], s, torch.Generator().manual_seed(0))
    w = out.texts[0].split()
    positions = [i for i, x in enumerate(w) if x == "ZZ"]
    assert len(positions) == n // k
    # the j-th flood token (0-based) follows original word (j + 1) k, i.e. sits at output index (j + 1) k + j
    assert positions == [(j + 1) * k + j for j in range(n // k)]
    assert out.edit_fraction[0] == pytest.approx((n // k) / n)


@pytest.mark.parametrize(
    "params,token",
    [({}, "the"), ({"choice": "punct"}, ","), ({"choice": "frequent"}, "the"), ({"choice": "frequent", "rank": 3}, "and"),
     ({"choice": "fixed", "token": "@@"}, "@@")],
)
def test_flood_token_choice(params, token):
    out = _make("flood-token", **params).apply([_distinct(20)], 0.2, torch.Generator().manual_seed(0))
    assert out.meta["token"] == token
    assert out.texts[0].split().count(token) == 4


@pytest.mark.parametrize("s", [0.1, 0.3, 0.5, 1.0])
def test_random_placement_inserts_round_s_n_at_distinct_gaps(s):
    texts = _texts(4, 37, seed=1)
    attack = _make("flood-token", placement="random", choice="fixed", token="QQ")
    out = attack.apply(texts, s, torch.Generator().manual_seed(2))
    for a, b, f in zip(texts, out.texts, out.edit_fraction):
        wa, wb = a.split(), b.split()
        k = n_edits(s, len(wa))
        assert len(wb) == len(wa) + k and wb.count("QQ") == k
        assert [x for x in wb if x != "QQ"] == wa  # only the flood token was added
        assert all(not (x == y == "QQ") for x, y in zip(wb, wb[1:]))  # distinct gaps: never two in a row
        assert f == pytest.approx(k / len(wa))


def test_random_placement_seeded_determinism():
    texts = _texts(3, 30, seed=3)
    attack = _make("flood-token", placement="random")
    a = attack.apply(texts, 0.5, torch.Generator().manual_seed(7))
    b = attack.apply(texts, 0.5, torch.Generator().manual_seed(7))
    c = attack.apply(texts, 0.5, torch.Generator().manual_seed(8))
    assert a.texts == b.texts and a.edit_fraction == b.edit_fraction
    assert a.texts != c.texts
    assert a.edit_fraction == c.edit_fraction  # the count is fixed, only the gaps move


def test_every_k_ignores_the_generator():
    texts = _texts(2, 30, seed=4)
    attack = _make("flood-token")
    a = attack.apply(texts, 0.3, torch.Generator().manual_seed(0))
    b = attack.apply(texts, 0.3, torch.Generator().manual_seed(1))
    assert a.texts == b.texts


@pytest.mark.parametrize("placement", ["every-k", "random"])
@pytest.mark.parametrize("s", [0.2, 0.5, 1.0])
def test_flood_edit_fraction_matches_inserted_over_original(placement, s):
    texts = _texts(3, 41, seed=5)
    out = _make("flood-token", placement=placement).apply(texts, s, torch.Generator().manual_seed(0))
    for a, b, f, lev in zip(texts, out.texts, out.edit_fraction, out.levenshtein):
        n_in, n_out = len(a.split()), len(b.split())
        assert f == pytest.approx((n_out - n_in) / n_in)
        assert f == pytest.approx(metrics.word_edit_fraction(a, b))  # pure insertions: Levenshtein = inserted
        assert lev == n_out - n_in and out.meta["levenshtein_unit"] == "word"


# ============================================================================ repeat-span
@pytest.mark.parametrize("span_words", [1, 3, 5, 8])
@pytest.mark.parametrize("s", [0.1, 0.3, 0.5, 1.0])
def test_repeat_phrase_adds_exactly_round_s_n_words(s, span_words):
    texts = _texts(4, 43, seed=6)
    attack = _make("repeat-span", span_words=span_words)
    out = attack.apply(texts, s, torch.Generator().manual_seed(1))
    for a, b, f, added in zip(texts, out.texts, out.edit_fraction, out.meta["added_words"]):
        wa, wb = a.split(), b.split()
        k = n_edits(s, len(wa))
        assert added == k and len(wb) == len(wa) + k
        assert f == pytest.approx(k / len(wa)) == pytest.approx(metrics.word_edit_fraction(a, b))
        assert _is_subsequence(wa, wb)


def test_repeat_phrase_copies_follow_their_source():
    """With distinct words: the originals appear in order, and each added run repeats the words
    right before it (at most span_words of them); all copies but possibly one are whole spans."""
    n, L = 60, 5
    out = _make("repeat-span", span_words=L).apply([_distinct(n)], 0.3, torch.Generator().manual_seed(3))
    idx = [int(x[1:]) for x in out.texts[0].split()]
    i, nxt, copies = 0, 0, []  # nxt: the next original word expected
    while i < len(idx):
        if idx[i] == nxt:
            i, nxt = i + 1, nxt + 1
            continue
        run = nxt - idx[i]  # a copy of original words idx[i] .. nxt - 1, the words just emitted
        assert 1 <= run <= L and idx[i : i + run] == list(range(idx[i], nxt))
        copies.append(run)
        i += run
    assert nxt == n and sum(copies) == n_edits(0.3, n) == 18
    assert sum(c < L for c in copies) <= 1


@pytest.mark.parametrize("s", [0.1, 0.3, 0.5, 1.0])
def test_repeat_sentence_adds_about_s_n_words(s):
    texts = _texts(4, 64, seed=7)  # 8 sentences of 8 words each
    out = _make("repeat-span", mode="sentence").apply(texts, s, torch.Generator().manual_seed(2))
    for a, b, f, added in zip(texts, out.texts, out.edit_fraction, out.meta["added_words"]):
        wa, wb = a.split(), b.split()
        k = n_edits(s, len(wa))
        longest = max(len(x.split()) for x in split_sentences(a))
        assert len(wb) == len(wa) + added and abs(added - k) <= longest / 2
        assert f == pytest.approx(added / len(wa)) == pytest.approx(metrics.word_edit_fraction(a, b))
        # every sentence of the output is a sentence of the input, duplicates adjacent
        sa, sb = split_sentences(a), split_sentences(b)
        assert set(sb) == set(sa)
        dup = [x for x, y in zip(sb, sb[1:]) if x == y]
        assert len(sb) == len(sa) + len(dup) and sum(len(x.split()) for x in dup) == added


def test_repeat_sentence_mean_added_close_to_target():
    """Over many texts of 10 sentences of varied length the mean added count is near s n."""
    rnd = random.Random(0)
    texts = []
    for _ in range(40):
        sents = [" ".join(rnd.choice(TINY_WORDS) for _ in range(rnd.randint(3, 12))) + "." for _ in range(10)]
        texts.append(" ".join(sents))
    s = 0.3
    out = _make("repeat-span", mode="sentence").apply(texts, s, torch.Generator().manual_seed(0))
    mean_ratio = sum(out.edit_fraction) / len(texts)
    assert abs(mean_ratio - s) <= 0.05


def test_repeat_sentence_without_sentence_marks_doubles_or_keeps():
    text = _distinct(20)
    attack = _make("repeat-span", mode="sentence")
    low = attack.apply([text], 0.4, torch.Generator().manual_seed(0))
    high = attack.apply([text], 0.6, torch.Generator().manual_seed(0))
    assert low.texts == [text] and low.edit_fraction == [0.0]
    assert high.texts == [text + " " + text] and high.edit_fraction == [1.0]


@pytest.mark.parametrize("mode", ["phrase", "sentence"])
def test_repeat_span_seeded_determinism(mode):
    texts = _texts(3, 48, seed=8)
    attack = _make("repeat-span", mode=mode)
    a = attack.apply(texts, 0.4, torch.Generator().manual_seed(11))
    b = attack.apply(texts, 0.4, torch.Generator().manual_seed(11))
    c = attack.apply(texts, 0.4, torch.Generator().manual_seed(12))
    assert a.texts == b.texts and a.edit_fraction == b.edit_fraction
    assert a.texts != c.texts


# ============================================================================ contract details
@pytest.mark.parametrize("name", NAMES)
def test_metrics_and_meta(name):
    texts = _texts(2, 30, seed=9)
    out = _make(name).apply(texts, 0.3, torch.Generator().manual_seed(0))
    assert all(math.isnan(x) for x in out.similarity)
    assert out.meta["attack"] == name and out.meta["strength"] == 0.3
    assert out.levenshtein == metrics.token_levenshtein(texts, out.texts)


@pytest.mark.parametrize("name", NAMES)
def test_bad_strength(name):
    for bad in (-0.1, 1.01, float("nan")):
        with pytest.raises(ConfigError):
            _make(name).apply(["a b c"], bad, torch.Generator())
