"""Token prior per vocabulary (issue 13, defect 4): estimate, store with the configuration, refuse a mismatch."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from sketchwm.errors import CalibrationError, ConfigError
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm.testing import tiny_texts
from sketchwm_builtin.token_prior import TokenPrior, estimate_from_corpus, estimate_from_samples


def _scheme(V, prior, tok=None):
    return get_registry().create("scheme", "global-sketch", {"prior": prior}, WatermarkKey(b"p" * 32), V,
                                 tokenizer_fingerprint=tok)


def test_corpus_estimate_counts_and_round_trip(tiny, tmp_path):
    texts = tiny_texts(50, 30, seed=1)
    prior = estimate_from_corpus(tiny.tokenizer, texts, tiny.vocab_size, source="tiny corpus")
    ids = [tiny.tokenizer.encode(t, add_special_tokens=False) for t in texts]
    ref = np.bincount(np.concatenate(ids), minlength=tiny.vocab_size)
    assert np.array_equal(prior.counts.numpy(), ref.astype(np.float64))
    assert prior.tokenizer == tiny.tokenizer_fingerprint and prior.vocab_size == tiny.vocab_size
    path = prior.save(tmp_path / "prior.npz")
    back = TokenPrior.load(path)
    assert torch.equal(back.counts, prior.counts) and back.tokenizer == prior.tokenizer and back.source == "tiny corpus"
    spec = prior.spec(path)
    sch = _scheme(tiny.vocab_size, spec, tiny.tokenizer_fingerprint)
    assert sch.prior_desc["sha256"] == spec["sha256"] and sch.sketch.report()["balanced"]
    assert sch.prior_fingerprint == spec["sha256"][:16]


def test_sample_estimate_is_the_unwatermarked_model(tiny):
    from sketchwm.api import Watermarker

    wm = Watermarker(WatermarkKey(b"p" * 32), {"scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}}},
                     backend=tiny)
    prior = estimate_from_samples(wm, ["the water"] * 4, seed=2, gen_length=16, block_length=16, steps=4)
    out = wm.generate(["the water"] * 4, seed=2, watermark=False, gen_length=16, block_length=16, steps=4)
    assert float(prior.counts.sum()) == 64 and torch.equal(prior.counts, torch.bincount(out.ids.flatten(), minlength=tiny.vocab_size).double())
    assert wm._scheme is None  # no scheme (and no prior) was needed to sample


def test_mismatched_prior_is_refused(tiny, tmp_path):
    prior = estimate_from_corpus(tiny.tokenizer, tiny_texts(20, 20, seed=2), tiny.vocab_size)
    spec = prior.spec(prior.save(tmp_path / "p.npz"))
    with pytest.raises(ConfigError, match="estimated with tokenizer") as exc:
        _scheme(tiny.vocab_size, spec, "0123456789abcdef")  # another tokenizer of the same size
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="vocabulary of"):
        _scheme(tiny.vocab_size + 1, spec)
    # a file without its provenance, checked through the spec's tokenizer
    np.save(tmp_path / "bare.npy", prior.counts.numpy())
    bare = {**spec, "path": str(tmp_path / "bare.npy")}
    assert _scheme(tiny.vocab_size, bare, tiny.tokenizer_fingerprint).prior_desc["sha256"] == spec["sha256"]
    with pytest.raises(ConfigError, match="estimated with tokenizer"):
        _scheme(tiny.vocab_size, bare, "0123456789abcdef")


def test_auto_prior_no_longer_falls_back_silently(tiny):
    """Before issue 13 ``auto`` silently used uniform for another vocabulary, and used the packaged counts for
    any tokenizer with the default's size."""
    with pytest.warns(UserWarning, match="sketchwm prior estimate"):
        sch = _scheme(tiny.vocab_size, {"source": "auto"}, tiny.tokenizer_fingerprint)
    assert sch.prior_desc["source"] == "uniform" and sch.prior_fingerprint == "uniform"
    with pytest.warns(UserWarning, match="belong to tokenizer"):
        sch = _scheme(30522, {"source": "auto"}, "0123456789abcdef")
    assert sch.prior_desc["source"] == "uniform"
    with pytest.raises(ConfigError, match="belong to tokenizer"):
        _scheme(30522, {"source": "packaged"}, "0123456789abcdef")


def test_default_prior_still_resolves_for_the_default_tokenizer(default_tokenizer):
    from sketchwm.components import tokenizer_fingerprint

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sch = _scheme(len(default_tokenizer), {"source": "auto"}, tokenizer_fingerprint(default_tokenizer))
    assert sch.prior_desc["source"] == "packaged"


def test_calibration_records_the_prior_and_refuses_another(tiny, tmp_path):
    """Same configuration, same path, other counts (no sha256 pinned): the calibration is refused."""
    from sketchwm.api import Watermarker

    path = tmp_path / "p.npz"
    estimate_from_corpus(tiny.tokenizer, tiny_texts(30, 30, seed=3), tiny.vocab_size).save(path)
    cfg = {"scheme": {"name": "global-sketch", "params": {"prior": {"source": "file", "path": str(path)}}}}
    wm = Watermarker(WatermarkKey(b"p" * 32), cfg, backend=tiny)
    cal = wm.calibrate(tiny_texts(120, 24, seed=4), alpha=0.05)
    assert cal.token_prior == wm.scheme.prior_fingerprint != "uniform"
    wm.detect(tiny_texts(2, 24, seed=5), calibration=cal)  # same prior: accepted
    estimate_from_corpus(tiny.tokenizer, tiny_texts(30, 30, seed=9), tiny.vocab_size).save(path)
    wm2 = Watermarker(WatermarkKey(b"p" * 32), cfg, backend=tiny)
    with pytest.raises(CalibrationError, match="token prior"):
        wm2.detect(tiny_texts(2, 24, seed=5), calibration=cal)


def test_cli_prior_estimate_writes_the_configuration_and_detection_checks_it(tiny, tmp_path, capsys):
    from sketchwm.cli import main

    model_dir = tmp_path / "model"
    tiny.model.save_pretrained(model_dir)
    tiny.tokenizer.save_pretrained(model_dir)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny_texts(40, 30, seed=6)) + "\n")
    backend = ["--backend", "hf-masked-lm", "--backend-params", json.dumps({"path": str(model_dir)})]
    rc = main(["prior", "estimate", "--corpus", str(corpus), "--out", str(tmp_path / "prior.npz"),
               "--config-out", str(tmp_path / "cfg.json"), *backend])
    assert rc == 0
    spec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cfg = json.loads((tmp_path / "cfg.json").read_text())
    assert cfg["scheme"]["name"] == "global-sketch-green"  # the default: the prior is its sketch channel's
    assert cfg["scheme"]["params"]["sketch"]["prior"] == spec and spec["tokenizer"] == cfg["tokenizer"] == tiny.tokenizer_fingerprint
    key = tmp_path / "k.key"
    WatermarkKey(b"c" * 32).save(key)
    text = tmp_path / "t.txt"
    text.write_text(tiny_texts(1, 30, seed=7)[0])
    assert main(["detect", "--key", str(key), "--config", str(tmp_path / "cfg.json"), "--input", str(text), "--json"]) == 0
    cfg["scheme"]["params"]["sketch"]["prior"]["tokenizer"] = "0123456789abcdef"
    cfg["tokenizer"] = None
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["detect", "--key", str(key), "--config", str(tmp_path / "bad.json"), "--input", str(text)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sketchwm: error:") and "estimated with tokenizer" in err and "\n" not in err
