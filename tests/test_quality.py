"""Repetition / diversity metrics (sketchwm.quality) against a plain-Python reference."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from sketchwm.detection import pad_ids
from sketchwm.errors import InputError
from sketchwm.quality import distinct_n, ngram_codes, repetition_report, seq_rep_n, top_token_share


def _ref_distinct(seq: list[int], n: int) -> float:
    grams = [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


def _ref_top(seq: list[int]) -> float:
    return Counter(seq).most_common(1)[0][1] / len(seq) if seq else math.nan


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-12


def test_hand_computed_values():
    ids, valid = pad_ids([[1, 2, 1, 2, 1, 2], [5, 6, 7, 8]])
    # bigrams of row 0: 12 21 12 21 12 -> 2 distinct of 5
    assert distinct_n(ids, valid, 2).tolist() == pytest.approx([2 / 5, 1.0])
    assert seq_rep_n(ids, valid, 2).tolist() == pytest.approx([3 / 5, 0.0])
    assert top_token_share(ids, valid).tolist() == pytest.approx([3 / 6, 1 / 4])


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_matches_reference_on_random_ragged_batch(n):
    g = torch.Generator().manual_seed(n)
    seqs = []
    for b in range(24):
        length = int(torch.randint(0, 40, (1,), generator=g))
        vocab = int(torch.randint(2, 30000, (1,), generator=g)) if b % 3 else 3  # some very repetitive rows
        seqs.append(torch.randint(0, vocab, (length,), generator=g).tolist())
    ids, valid = pad_ids(seqs)
    got_d = distinct_n(ids, valid, n).tolist()
    got_t = top_token_share(ids, valid).tolist()
    for seq, d, t in zip(seqs, got_d, got_t):
        assert _close(d, _ref_distinct(seq, n)), (seq, n, d)
        assert _close(t, _ref_top(seq)), (seq, t)


def test_padding_value_does_not_leak_into_counts():
    # pad id equal to a real id: the padded tail must not add n-grams or counts
    ids, valid = pad_ids([[7, 7, 7, 7, 7, 7, 7, 7], [0, 1]], pad=0)
    assert distinct_n(ids, valid, 2).tolist() == pytest.approx([1 / 7, 1.0])
    assert top_token_share(ids, valid).tolist() == pytest.approx([1.0, 0.5])


def test_short_and_empty_texts_are_nan_and_skipped_in_report():
    ids, valid = pad_ids([[], [3], [1, 2, 3, 4, 5]])
    d4 = distinct_n(ids, valid, 4)
    assert math.isnan(d4[0]) and math.isnan(d4[1]) and d4[2] == 1.0
    assert math.isnan(top_token_share(ids, valid)[0])
    rep = repetition_report(ids, valid)
    assert rep["seq_rep_4"] == 0.0 and rep["distinct_2"] == 1.0


def test_bad_input_raises_clear_errors():
    ids, valid = pad_ids([[1, 2, 3]])
    with pytest.raises(InputError, match="order"):
        distinct_n(ids, valid, 0)
    with pytest.raises(InputError, match="bool"):
        distinct_n(ids, valid.long(), 2)
    with pytest.raises(InputError, match="integer"):
        distinct_n(ids.float(), valid, 2)
    with pytest.raises(InputError, match="negative"):
        distinct_n(-ids, valid, 2)
    with pytest.raises(InputError, match=r"\(B, N\)"):
        top_token_share(ids[0], valid[0])
    big, bvalid = pad_ids([[2**40, 1, 2]])
    with pytest.raises(InputError, match="overflow"):
        ngram_codes(big, bvalid, 2)
