"""Issue 13 defects 2, 5, 6, 7 on the stand-ins of LLaDA, Dream and MDLM (sketchwm.testing.standins)."""

from __future__ import annotations

import pytest
import torch

from sketchwm.api import Watermarker
from sketchwm.engine import MaskedDiffusionSampler, transfer_schedule
from sketchwm.errors import ConfigError
from sketchwm.keys import WatermarkKey
from sketchwm.testing import tiny_masked_lm, tiny_tokenizer
from sketchwm.testing.standins import save_standin, standin_backend
from sketchwm.userloop import LogitsTilter, dream_logits_hook

#: the tilt at every temperature (order "off"): the user-loop tests compare tilts under greedy decoding,
#: where the default global sketch would steer the order instead (which a user loop cannot do)
SCHEME = {"scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}, "delta": 2.0, "order": "off"}}}
KEY = WatermarkKey(b"u" * 32)


@pytest.fixture(scope="module")
def standins(tmp_path_factory, one_thread):
    return {k: standin_backend(k, tmp_path_factory.mktemp(k)) for k in ("llada", "dream", "mdlm")}


# ------------------------------------------------------------------ defect 2: Dream's shift on every path
def test_dream_marginals_identical_through_every_path(standins):
    be = standins["dream"]
    x = torch.tensor([be.encode_prompts(["the water is"])[0] + [be.mask_token_id] * 12])
    attn = torch.ones_like(x, dtype=torch.bool)
    L = x.shape[1]
    full = be.logits(x, attn)
    raw = be.model(x).logits.float()
    assert torch.allclose(full[0, 1:], be.postprocess_logits(raw[0, :-1].clone()), atol=1e-5)  # row i from row i-1
    idx = torch.arange(L)[None]
    assert torch.allclose(be.logits_at(x, attn, idx), full, atol=1e-5)


# ------------------------------------------------------------------ defect 5: fidelity
def test_padded_embedding_rows_and_specials_never_sampled(standins):
    for kind, be in standins.items():
        n_tok = len(be.tokenizer)
        assert be.vocab_size > n_tok - (kind == "mdlm")
        assert set(range(n_tok, be.vocab_size)) <= set(be.banned_token_ids), kind
        out = MaskedDiffusionSampler(be, {"gen_length": 32, "block_length": 32, "steps": 16, "temperature": 1.0,
                                          "top_p": 1.0, "remasking": "random", "stop_at_eos": False}).generate(["the water"] * 8)
        assert int(out.ids.max()) < n_tok, f"{kind}: sampled a padded embedding row"


def test_turn_end_is_merged_into_eos_not_banned(standins):
    for kind, token in (("dream", "<|im_end|>"), ("llada", "<|eot_id|>")):
        be = standins[kind]
        end = be.tokenizer.convert_tokens_to_ids(token)
        assert end not in be.banned_token_ids and end in be.turn_end_ids
        x = torch.tensor([be.encode(["the water"])[0] + [be.mask_token_id] * 6])
        raw = be.model(x).logits.float()
        if kind == "dream":
            raw = torch.cat([raw[:, :1], raw[:, :-1]], 1)
        got = be.logits(x)
        want_eos = torch.logaddexp(raw[..., be.eos_token_id], raw[..., end])
        assert torch.allclose(got[..., be.eos_token_id], want_eos, atol=1e-5), kind
        assert bool(torch.isinf(got[..., end]).all()), kind


def test_dream_attention_mask_is_4d_with_position_ids():
    from sketchwm_builtin.backends.dream import dream_attention

    am = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mask, pos = dream_attention(am)
    assert mask.shape == (2, 1, 5, 5) and mask.dtype == torch.bool
    assert not bool(mask[0, 0, :, :2].any()) and bool(mask[0, 0, 2:, 2:].all())
    assert pos[0].tolist() == [1, 1, 0, 1, 2] and pos[1].tolist() == [0, 1, 2, 3, 4]
    assert dream_attention(torch.ones(2, 5, dtype=torch.bool)) == ("full", None)


def test_mdlm_never_sees_padding(standins):
    be = standins["mdlm"]
    seen = []
    handle = be.model.register_forward_pre_hook(lambda m, args, kw: seen.append(args[0] if args else kw["input_ids"]), with_kwargs=True)
    try:
        MaskedDiffusionSampler(be, {"gen_length": 8, "block_length": 8, "steps": 4}).generate(["the water is", "he"])
    finally:
        handle.remove()
    assert seen and all(int(x[:, 0].eq(be.mask_token_id).sum()) == 0 for x in seen), "MDLM was fed [MASK] padding"


def test_top_p_applies_to_the_tempered_marginals():
    from sketchwm.engine import sample_tokens
    from sketchwm.testing import tiny_backend

    be = tiny_backend()
    logits = torch.full((1, 4000, be.vocab_size), -30.0)
    logits[..., 10], logits[..., 11], logits[..., 12] = 2.0, 1.0, 0.0
    # tempered: p ∝ e^{4}, e^{2}, e^{0} = 0.87, 0.12, 0.02 → the 0.8-nucleus is {10}; untempered it is {10, 11}
    x0, _ = sample_tokens(logits, None, torch.Generator().manual_seed(0), temperature=0.5, top_p=0.8)
    assert set(x0.unique().tolist()) == {10}



@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95, 0.999])
def test_the_nucleus_from_the_top_candidates_is_the_warpers(top_p):
    """The top-k nucleus keeps exactly the tokens of transformers' full-sort warper, on sharp rows (the
    nucleus inside the first candidates), wider ones (the next candidate count), flat rows (the full
    sort) and rows that mix them in one batch."""
    from transformers.generation.logits_process import TopPLogitsWarper

    from sketchwm.engine import _top_p_filter

    g = torch.Generator().manual_seed(int(top_p * 1000))
    V = 30522
    scale = torch.tensor([0.3, 1.0, 3.0, 10.0, 30.0]).repeat_interleave(40)[:, None]  # flat ... sharp rows
    logits = torch.randn(200, V, generator=g) * scale  # (200, V)
    want = TopPLogitsWarper(top_p)(None, logits.clone())
    for ks in [(64, 4096), (64,), (16, 256, 2048)]:
        got = _top_p_filter(logits.reshape(4, 50, V), top_p, ks).reshape(200, V)
        assert torch.equal(torch.isinf(got), torch.isinf(want)), ks
        assert torch.equal(got[~torch.isinf(got)], logits[~torch.isinf(want)]), ks
    kept = (~torch.isinf(want)).sum(1)
    assert int(kept.min()) >= 1 and int(kept.max()) > 4096, "no row took the full sort: the test does not cover it"
    assert bool(((kept > 64) & (kept <= 4096)).any()), "no row was read from the second candidate count"


# ------------------------------------------------------------------ defect 6: bring your own model
def test_raw_transformers_model_as_backend_is_refused_with_a_hint():
    tok = tiny_tokenizer()
    with pytest.raises(ConfigError, match="from_model"):
        Watermarker(KEY, backend=tiny_masked_lm(len(tok)))


def test_from_model_matches_the_named_backend(tmp_path):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    tok = tiny_tokenizer()
    tiny_masked_lm(len(tok)).save_pretrained(tmp_path / "bert")
    tok.save_pretrained(tmp_path / "bert")
    save_standin("llada", tmp_path / "llada")
    cfg = {**SCHEME, "sampler": {"gen_length": 16, "block_length": 16, "steps": 8}}
    for kind, sub, loader in (("masked-lm", "bert", AutoModelForMaskedLM), ("llada", "llada", AutoModel)):
        d = str(tmp_path / sub)
        model = loader.from_pretrained(d, trust_remote_code=True)
        wm = Watermarker.from_model(KEY, model, AutoTokenizer.from_pretrained(d), kind=kind, config=cfg, device="cpu")
        name = "hf-masked-lm" if kind == "masked-lm" else kind
        named = Watermarker(KEY, {**cfg, "backend": {"name": name, "params": {"path": d, "device": "cpu", "dtype": "float32"}}})
        assert wm.config.backend.name == name and wm.backend.model_id == named.backend.model_id == f"{name}:{sub}"
        a, b = wm.generate(["the water"], seed=2), named.generate(["the water"], seed=2)
        assert a.texts == b.texts, kind


def test_from_model_in_memory_model_id_is_not_a_dot():
    tok = tiny_tokenizer()
    wm = Watermarker.from_model(KEY, tiny_masked_lm(len(tok)), tok, kind="masked-lm", device="cpu")
    assert wm.backend.model_id == "hf-masked-lm:BertForMaskedLM"


# ------------------------------------------------------------------ defect 7: the user's own loop
def _llada_style_loop(be, tilt, prompts, gen_length, block_length, steps):
    """A LLaDA generate.py-shaped loop (greedy, low-confidence remasking) written on the user side."""
    lists = be.encode_prompts(prompts)
    P = max(map(len, lists))
    pad = be.tokenizer.pad_token_id
    x = torch.full((len(lists), P + gen_length), be.mask_token_id)
    am = torch.zeros_like(x, dtype=torch.bool)
    for b, ids in enumerate(lists):
        x[b, :P - len(ids)] = pad
        x[b, P - len(ids):P] = torch.tensor(ids)
        am[b, P - len(ids):] = True
    n_blocks = gen_length // block_length
    step = 0
    for blk in range(n_blocks):
        b0, b1 = P + blk * block_length, P + (blk + 1) * block_length
        k = transfer_schedule((x[:, b0:b1] == be.mask_token_id).sum(1), steps // n_blocks)
        for s in range(steps // n_blocks):
            mask_index = x == be.mask_token_id
            logits = be.model(x, attention_mask=am.long()).logits
            if tilt is not None:
                logits = tilt(logits, x, step=step, block=(b0 - P, b1 - P))
            x0 = logits.argmax(-1)
            p = torch.softmax(logits.float(), -1)
            conf = torch.gather(p, -1, x0[..., None]).squeeze(-1)
            conf[:, b1:] = -float("inf")
            conf = torch.where(mask_index, conf, -float("inf"))
            for b in range(x.shape[0]):  # per row, as generate.py does
                sel = torch.topk(conf[b], int(k[b, s])).indices
                x[b, sel] = x0[b, sel]
            step += 1
    return x[:, P:]


def test_llada_style_user_loop_gives_the_engine_texts(standins):
    be = standins["llada"]
    wm = Watermarker(KEY, {**SCHEME, "backend": {"name": "llada"}}, backend=be)
    prompts = ["the water is", "he said"]
    cfg = dict(gen_length=16, block_length=8, steps=8, temperature=0.0, remasking="low_confidence", stop_at_eos=False)
    engine = wm.generate(prompts, seed=0, **cfg).ids
    user = _llada_style_loop(be, LogitsTilter.from_watermarker(wm, steps=8, stop_at_eos=False), prompts, 16, 8, 8)
    plain = _llada_style_loop(be, None, prompts, 16, 8, 8)
    assert not torch.equal(user, plain), "the tilt changed nothing: the test would not see a wrong tilt"
    assert torch.equal(user, engine)


def _dream_style_loop(be, hook, ids, G, steps):
    """Dream's ``_sample`` shape on the user side: forward, shift, hook, greedy sample, entropy order."""
    x = torch.tensor([ids + [be.mask_token_id] * G])
    n_mask = transfer_schedule(torch.tensor([G]), steps)
    for i in range(steps):
        mask_index = x == be.mask_token_id
        logits = be.model(x, attention_mask="full").logits
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        if hook is not None:
            logits = hook(i, x, logits)
        probs = torch.softmax(logits.float(), -1)
        x0 = probs.argmax(-1)
        conf = (probs * torch.log_softmax(logits.float(), -1).nan_to_num(neginf=0.0)).sum(-1)
        conf = torch.where(mask_index, conf, -float("inf"))
        sel = torch.topk(conf[0], int(n_mask[0, i])).indices
        x[0, sel] = x0[0, sel]
    return x[0, len(ids):]


def test_dream_hook_in_a_dream_style_loop_gives_the_engine_texts(standins):
    be = standins["dream"]
    wm = Watermarker(KEY, SCHEME, backend=be)
    G, steps = 16, 8
    hook = dream_logits_hook(wm, steps, stop_at_eos=False)  # as the engine run below
    ids = be.encode_prompts(["the water is"])[0]
    user = _dream_style_loop(be, hook, ids, G, steps)
    engine = wm.generate(["the water is"], seed=0, gen_length=G, block_length=G, steps=steps, temperature=0.0,
                         remasking="entropy", top_p=1.0, stop_at_eos=False)
    assert not torch.equal(user, _dream_style_loop(be, None, ids, G, steps)), "the tilt changed nothing"
    assert torch.equal(user, engine.ids[0])
    assert hook.tilter._step == steps


# ------------------------------------------------------------------ the smoke script cannot rot
def test_real_dlm_smoke_runs_on_a_standin(capsys, one_thread):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "real_dlm_smoke.py"
    spec = importlib.util.spec_from_file_location("real_dlm_smoke", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--backend", "dream", "--standin", "--n", "12", "--n-cal", "40", "--alpha", "0.05",
                     "--gen-length", "32", "--batch-size", "20"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(last) >= {"tpr", "fpr", "mean_length_wm", "mean_length_base", "oracle_ppl_ratio"}
    assert 0 <= last["fpr"] <= 1 and 0 <= last["tpr"] <= 1 and last["oracle_ppl_ratio"] is None
    from sketchwm.config import DEFAULT_SCHEME

    assert last["scheme"] == DEFAULT_SCHEME == "global-sketch-green"
    assert mod.main(["--backend", "llada", "--standin", "--n", "4", "--n-cal", "20", "--alpha", "0.05",
                     "--gen-length", "32", "--scheme", "dmark", "--scheme-params", '{"delta": 3.0}']) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["scheme"] == "dmark" and last["backend"] == "llada"
