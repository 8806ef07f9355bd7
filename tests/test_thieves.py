"""The pair thief, the adaptive thief and the generation spoofer (``sketchwm_attacks.thieves``).

* The pair stealer finds planted (previous token, token) pairs that a word count cannot see, and its
  forgeries are flagged by a context-keyed green list (red-green-dlm) under the victim key only.
* Word and pair thieves spend equal word budgets.
* The adaptive thief keeps one stolen-unit list per planted member.
* The generation spoofer writes boosted tokens into the positions it regenerates.

Tiny vocabulary and models built in code; seeded; seconds each.
"""

from __future__ import annotations

import pytest
import torch

from sketchwm.detection import pad_ids
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm.testing import tiny_backend, tiny_texts
from sketchwm_attacks.forgery import DocFrequencyStealer
from sketchwm_attacks.thieves import PairStealer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_backend(seed=0)


def _word_ids(tiny) -> list[int]:
    """Token ids of the tiny vocabulary that are whole words."""
    out = []
    for t in range(tiny.vocab_size):
        w = tiny.decode([t]).strip()
        if w.isalpha() and tiny.encode([w])[0] == [t]:
            out.append(t)
    return out


def _pair_planted(words: list[int], follow: dict[int, int], n: int, seed: int, length: int = 40, p: float = 0.5):
    """n documents of uniform whole-word tokens where, after token a in ``follow``, ``follow[a]`` comes next with
    probability p: a context-keyed boost that leaves every token's frequency nearly unchanged."""
    g = torch.Generator().manual_seed(seed)
    W = torch.as_tensor(words)
    docs = []
    for _ in range(n):  # per document: a Markov chain of length ``length``
        d = [int(W[torch.randint(len(W), (1,), generator=g)])]
        for _ in range(length - 1):
            a = d[-1]
            if a in follow and float(torch.rand(1, generator=g)) < p:
                d.append(follow[a])
            else:
                d.append(int(W[torch.randint(len(W), (1,), generator=g)]))
        docs.append(d)
    return docs


def test_pair_stealer_finds_planted_pairs_a_word_count_misses(tiny):
    words = _word_ids(tiny)
    perm = torch.randperm(len(words), generator=torch.Generator().manual_seed(0)).tolist()
    follow = {words[perm[i]]: words[perm[i + 1]] for i in range(0, 20, 2)}
    wm = _pair_planted(words, follow, 150, seed=1)
    ref = _pair_planted(words, {}, 150, seed=2)
    top = [tuple(x) for x in PairStealer(tiny.vocab_size).fit(wm, ref).ranked(10).tolist()]
    assert sum(1 for a, b in top if follow.get(a) == b) >= 8, top
    planted_b = set(follow.values())
    word_top = DocFrequencyStealer(tiny.vocab_size).fit(wm, ref).ranked(10).tolist()
    assert sum(t in planted_b for t in word_top) <= 8  # no clean signal in single-token counts


def test_pair_thief_forges_a_context_keyed_green_list_under_the_victim_key_only(tiny):
    """Texts whose every token is drawn 4× likelier when green given its left neighbour (red-green-dlm's
    rule under the victim key): pasting the stolen pairs into tiny human texts at budget 0.5 gets them
    flagged under the victim key (≥ 15%, and 10 points above the word thief at the same budget), not
    under an unrelated one (≤ 5%)."""
    V, reg = tiny.vocab_size, get_registry()
    victim = reg.create("scheme", "red-green-dlm", {}, WatermarkKey(b"\x01" * 32), V)
    other = reg.create("scheme", "red-green-dlm", {}, WatermarkKey(b"\x02" * 32), V)
    words = _word_ids(tiny)
    W = torch.as_tensor(words)
    pairs = torch.stack([W.repeat_interleave(len(W)), W.repeat(len(W))], 1)  # (|W|², 2) every (previous, next)
    p = victim.score_ids(pairs, torch.ones_like(pairs, dtype=torch.bool)).p_value.view(len(W), len(W))
    boost = torch.where(p < 0.5, 4.0, 1.0).double()  # (|W|, |W|): 4× on the victim's green (context, token) pairs
    g = torch.Generator().manual_seed(3)
    wm = []
    for _ in range(200):  # per document: a Markov chain over whole words
        d = [int(torch.randint(len(W), (1,), generator=g))]
        for _ in range(39):
            d.append(int(torch.multinomial(boost[d[-1]], 1, generator=g)))
        wm.append([words[i] for i in d])
    ref = [[int(W[i]) for i in torch.randint(len(W), (40,), generator=g)] for _ in range(200)]
    stealers = {"pair": PairStealer(V).fit(wm, ref), "word": DocFrequencyStealer(V).fit(wm, ref)}
    human = tiny_texts(60, 30, seed=5, punct=False)
    hit, miss = {}, {}
    for name in ("spoof-pair-insert", "spoof-pair-substitute", "spoof-insert", "spoof-substitute"):
        st = stealers["pair" if "pair" in name else "word"]
        atk = reg.create("attack", name, {"similarity": False}, backend=tiny, stealer=st)
        out = atk.apply(human, 0.5, torch.Generator().manual_seed(0))
        ids, valid = pad_ids(tiny.encode(out.texts))
        hit[name] = float((victim.score_ids(ids, valid).p_value <= 0.01).double().mean())
        miss[name] = float((other.score_ids(ids, valid).p_value <= 0.01).double().mean())
    for kind in ("insert", "substitute"):
        assert hit[f"spoof-pair-{kind}"] >= 0.15 and miss[f"spoof-pair-{kind}"] <= 0.05, (hit, miss)
        assert hit[f"spoof-pair-{kind}"] >= hit[f"spoof-{kind}"] + 0.1, hit


def test_word_and_pair_thieves_spend_equal_word_budgets(tiny):
    wm, ref = tiny_texts(40, 40, seed=11), tiny_texts(40, 40, seed=12)
    human = tiny_texts(10, 30, seed=13)
    spent = {}
    for name in ("spoof-insert", "spoof-pair-insert", "spoof-adaptive"):
        atk = get_registry().create("attack", name, {"similarity": False}, backend=tiny, watermarked_texts=wm,
                                    reference_texts=ref)
        out = atk.apply(human, 0.2, torch.Generator().manual_seed(0))
        spent[name] = out.edit_fraction
        assert all(f <= 0.2 + 1 / 30 + 1e-9 for f in out.edit_fraction), (name, out.edit_fraction)
    assert spent["spoof-pair-insert"] == pytest.approx(spent["spoof-insert"], abs=1 / 30 + 1e-9)


def test_adaptive_thief_keeps_one_unit_list_per_member(tiny):
    """Texts of two planted members (disjoint pair tables): with clusters=2 the thief holds two lists whose top
    pairs each come from one member."""
    words = _word_ids(tiny)
    perm = torch.randperm(len(words), generator=torch.Generator().manual_seed(4)).tolist()
    follows = [{words[perm[i]]: words[perm[i + 1]] for i in range(o, o + 16, 2)} for o in (0, 16)]
    wm = _pair_planted(words, follows[0], 80, seed=5, p=0.8) + _pair_planted(words, follows[1], 80, seed=6, p=0.8)
    ref = _pair_planted(words, {}, 160, seed=7)
    dec = lambda ids: [tiny.decode([t]).strip() for t in ids]  # noqa: E731
    atk = get_registry().create("attack", "spoof-adaptive", {"similarity": False, "clusters": 2, "n_features": 40},
                                backend=tiny, watermarked_texts=[tiny.decode(d) for d in wm],
                                reference_texts=[tiny.decode(d) for d in ref])
    lists = atk._unit_lists()
    assert len(lists) == 2
    named = [{tuple(dec([a, b])) for a, b in f.items()} for f in follows]
    for units in lists:
        top = [u for u in units if len(u) == 2][:5]
        assert max(sum(u in m for u in top) for m in named) >= 4, top


def test_generation_spoofer_writes_boosted_tokens(tiny):
    """Planted green tokens 4× likelier in 100 texts: the spoofer's full regeneration holds more of them than
    the same regeneration with δ = 0."""
    V = tiny.vocab_size
    words = _word_ids(tiny)
    green = set(words[: len(words) // 4])
    g = torch.Generator().manual_seed(8)
    w = torch.tensor([4.0 if t in green else 1.0 for t in words], dtype=torch.float64)
    wm = [[words[i] for i in torch.multinomial(w / w.sum(), 40, replacement=True, generator=g).tolist()] for _ in range(100)]
    ref = [[words[i] for i in torch.randint(len(words), (40,), generator=g).tolist()] for _ in range(100)]
    wm_t, ref_t = [tiny.decode(d) for d in wm], [tiny.decode(d) for d in ref]
    human = tiny_texts(12, 30, seed=9, punct=False)
    frac = {}
    for delta in (0.0, 4.0):
        atk = get_registry().create("attack", "spoof-generate", {"similarity": False, "delta": delta}, backend=tiny,
                                    watermarked_texts=wm_t, reference_texts=ref_t)
        out = atk.apply(human, 1.0, torch.Generator().manual_seed(0))
        ids = [t for x in tiny.encode(out.texts) for t in x]
        frac[delta] = sum(t in green for t in ids) / max(1, len(ids))
        assert all(f > 0.5 for f in out.edit_fraction)
    assert frac[4.0] > frac[0.0] + 0.1, frac
    assert V > 0
