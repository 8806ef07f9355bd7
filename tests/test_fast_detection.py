"""The O(B·N) detection path (row sort, per-token tables, per-length moments) against the dense
(B, V) reference it replaced, for both counting modes and both nulls."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sketchwm.detection import Detector, pad_ids
from sketchwm.errors import InputError

V = 3000


def _scheme(builtin_registry, key, tmp_path, counting="presence", null="auto", p_value="exact"):
    counts = np.random.default_rng(0).zipf(1.3, V).astype(np.float64)  # a heavy-tailed token prior
    path = tmp_path / "prior.npy"
    np.save(path, counts)
    params = {"sketch": {"name": "count-sketch", "params": {"d": 4, "w": 64, "counting": counting, "exclude_top": 40}},
              "prior": {"source": "file", "path": str(path)}, "null": null, "p_value": p_value}
    return builtin_registry.get("scheme", "global-sketch")(params, key, V, registry=builtin_registry)


def _random_batch(B=37, N=90, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 200, (B, N), generator=g)  # a small range: many repeated tokens
    ids[::3] = torch.randint(0, V, (len(range(0, B, 3)), N), generator=g)
    lengths = torch.randint(20, N + 1, (B,), generator=g)
    valid = torch.arange(N)[None, :] < lengths[:, None]
    return torch.where(valid, ids, torch.randint(0, V, ids.shape, generator=g)), valid  # junk on padding


def reference_background_z(scheme, ids, valid):
    """The dense path: x (B, V) presence table, T = x @ c, moments per text (chunks of 256 texts)."""
    c = scheme.sketch.token_scores(scheme.u[None].float())[0].double()
    x, n_d = scheme.sketch.weights(scheme.sketch.counts(ids, valid))
    T = x.double() @ c
    n = valid.sum(1).double()
    q = -torch.expm1(n[:, None] * scheme._log1m_pi[None, :])
    mu, var = q @ c, (q * (1 - q)) @ (c * c)
    return (T - mu) / var.clamp_min(1e-12).sqrt(), n_d


def reference_background_p(scheme, ids, valid) -> np.ndarray:
    """The exact shifted tail P(T' >= T − β·σ) per text, T' by direct convolution (benchmarks/exact_tail.py)."""
    mod = _exact_tail_module()
    c = np.round(scheme.token_weights().numpy()).astype(np.int64)
    x, _ = scheme.sketch.weights(scheme.sketch.counts(ids, valid))
    T = x.double().numpy() @ c
    n = valid.sum(1).numpy()
    out = np.empty(len(T))
    for length in np.unique(n):
        lo, pmf, _ = mod.exact_law(c, scheme._log1m_pi.numpy(), int(length))
        tail = np.cumsum(pmf[::-1])[::-1]
        var = float(scheme.background_moments(torch.tensor([int(length)]))[1][0])
        for i in np.nonzero(n == length)[0]:
            t = int(np.ceil(T[i] - scheme.params.null_margin * np.sqrt(var) - 1e-9))  # c is even: T' on even points
            j = t - lo
            out[i] = 1.0 if j <= 0 else (0.0 if j >= tail.size else tail[j])
    return out


def _exact_tail_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("exact_tail", Path(__file__).resolve().parents[1] / "benchmarks" / "exact_tail.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_printed_p_value_keeps_its_level_under_the_exact_law(builtin_registry, tmp_path):
    """The fast version of ``benchmarks/exact_tail.py``: under the background null's exact law (direct
    convolution), P(printed p <= α) <= 1.05·α at α = 1e-4, 1e-6, 1e-8, for 2 keys at 16 and 32 tokens
    (V = 3000, a Zipf law π_r ∝ r^-1.1, the default sketch), at the default β and at β = 0. A normal
    approximation 1 − Φ(z) fires at up to ~170·α here."""
    from sketchwm.keys import WatermarkKey

    mod = _exact_tail_module()
    np.save(tmp_path / "zipf.npy", 1e9 / np.arange(1, V + 1) ** 1.1)
    for i in range(2):
        sch = builtin_registry.get("scheme", "global-sketch")({"prior": {"source": "file", "path": str(tmp_path / "zipf.npy")}},
                                                                WatermarkKey(bytes([i + 1]) * 32), V, registry=builtin_registry)
        for n in (16, 32):
            row = mod.check_scheme(sch, n)
            assert max(row["printed"]) <= 1.05 and max(row["beta=0"]) <= 1.05, (i, n, row)


def test_sparse_weights_match_dense(builtin_registry, key, tmp_path):
    ids, valid = _random_batch()
    for counting in ("presence", "count"):
        sk = _scheme(builtin_registry, key, tmp_path, counting, null="key-randomised").sketch
        tok, x = sk.sparse_weights(ids, valid)
        dense = torch.zeros(ids.shape[0], V + 1).scatter_add_(1, tok, x)
        ref, n = sk.weights(sk.counts(ids, valid))
        assert torch.equal(dense[:, :V], ref) and float(dense[:, V].abs().sum()) == 0.0
        assert torch.equal(x.sum(1), n)
        assert torch.equal(sk.project_sparse(tok, x), sk.project(ref))  # integer sums: exact in float32


def test_background_null_fast_equals_reference(builtin_registry, key, tmp_path):
    sch = _scheme(builtin_registry, key, tmp_path)
    assert sch.null == "background" and sch.sketch.report()["excluded_tokens"] == 40
    ids, valid = _random_batch()
    z_ref, n_ref = reference_background_z(sch, ids, valid)
    s = sch.score_ids(ids, valid)
    torch.testing.assert_close(s.score, z_ref, rtol=1e-10, atol=1e-10)
    assert torch.equal(s.n_scored, n_ref.long())
    p_ref = torch.from_numpy(reference_background_p(sch, ids, valid))
    p = s.p_value
    assert bool((p >= p_ref * (1 - 1e-12)).all()), "the p-value is below the exact tail"
    mid = p_ref > 1e-9  # the exact region: within a relative 1e-6 of the direct convolution (the Chernoff bound below)
    torch.testing.assert_close(p[mid], p_ref[mid], rtol=1e-6, atol=0)
    # cached moments: a second call (lengths now cached) gives the same
    torch.testing.assert_close(sch.score_ids(ids, valid).score, s.score, rtol=0, atol=0)


@pytest.mark.parametrize("counting", ["presence", "count"])
@pytest.mark.parametrize("p_value", ["exact", "normal"])
def test_key_randomised_fast_equals_reference(builtin_registry, key, tmp_path, counting, p_value):
    sch = _scheme(builtin_registry, key, tmp_path, counting, null="key-randomised", p_value=p_value)
    ids, valid = _random_batch(seed=2)
    h_ref = sch.sketch.sketch(ids, valid)
    n_ref = sch.sketch.weights(sch.sketch.counts(ids, valid))[1]
    h, n = sch.sketch_ids(ids, valid)
    torch.testing.assert_close(h, h_ref, rtol=1e-6, atol=1e-6)
    assert torch.equal(n, n_ref)
    ref = sch.score_fn.p_values(sch.u, h_ref, method=p_value, n_tokens=n_ref)
    s = sch.score_ids(ids, valid)
    torch.testing.assert_close(s.score, ref.score.double(), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(s.p_value, ref.p_value.double(), rtol=1e-9, atol=1e-300)


def test_detector_on_tiny_model_texts(builtin_registry, key, tiny):
    from sketchwm.testing import tiny_texts

    sch = builtin_registry.get("scheme", "global-sketch")({}, key, tiny.vocab_size, registry=builtin_registry)
    det = Detector(sch, tiny.tokenizer, "fp", alpha=0.01)
    texts = tiny_texts(24, 60, seed=3)
    res = det.detect(texts)
    ids, valid = pad_ids(det.tokenize(texts))
    if sch.null == "background":
        z_ref, n_ref = reference_background_z(sch, ids, valid)
    else:
        h = sch.sketch.sketch(ids, valid)
        n_ref = sch.sketch.weights(sch.sketch.counts(ids, valid))[1]
        z_ref = sch.score_fn.p_values(sch.u, h, n_tokens=n_ref).score.double()
    torch.testing.assert_close(res.score, z_ref, rtol=1e-9, atol=1e-9)
    thr = torch.tensor([sch.analytic_threshold(0.01, int(k)) for k in valid.sum(1)], dtype=torch.float64)
    assert torch.equal(res.threshold, thr) and torch.equal(res.is_watermarked, z_ref >= thr)
    # a pre-tokenised batch gives the same as the id lists
    same = det.detect_batch(ids, valid)
    assert torch.equal(same.score, res.score) and torch.equal(same.is_watermarked, res.is_watermarked)


def test_detect_batch_errors(builtin_registry, key, tmp_path, tiny):
    det = Detector(_scheme(builtin_registry, key, tmp_path), tiny.tokenizer, "fp")
    ids, valid = _random_batch()
    bad = ids.clone()
    bad[5, 3] = V + 7
    with pytest.raises(InputError, match=f"text 5 has token id {V + 7} outside the vocabulary"):
        det.detect_batch(bad, valid)
    short = valid.clone()
    short[4, 10:] = False
    with pytest.raises(InputError, match="text 4 has 10 tokens"):
        det.detect_batch(ids, short)
    with pytest.raises(InputError, match="non-empty"):
        det.detect_batch(ids[:0], valid[:0])
    out = det.detect_batch(ids, valid)
    assert out.is_watermarked.shape == (ids.shape[0],)



def test_a_detection_scans_its_ids_once_and_a_rewritten_batch_is_checked_again(builtin_registry, key, tiny,
                                                                              monkeypatch):
    """The default's detector and both its channels check one batch: the ids are scanned once
    (one_batch). A batch rewritten in place through numpy between two detections (no torch version
    bump) is checked again: the summary is shared only inside one detection."""
    from sketchwm.components import token_sums
    from sketchwm.config import DEFAULT_SCHEME

    scans = []
    real = token_sums._scan_range
    monkeypatch.setattr(token_sums, "_scan_range", lambda ids: scans.append(1) or real(ids))
    sch = builtin_registry.create("scheme", DEFAULT_SCHEME, {}, key, tiny.vocab_size, registry=builtin_registry)
    det = Detector(sch, tiny.tokenizer, "fp")
    arr = np.random.default_rng(0).integers(0, tiny.vocab_size, size=(6, 40))
    ids = torch.from_numpy(arr)
    valid = torch.ones(6, 40, dtype=torch.bool)
    first = det.detect_batch(ids, valid)
    assert len(scans) == 1
    assert torch.equal(sch.score_ids(ids, valid).p_value, first.p_value)  # score_ids alone: its own one scan
    assert len(scans) == 2
    arr[2, 7] = tiny.vocab_size + 3  # the same tensor object, rewritten underneath
    with pytest.raises(InputError, match=f"text 2 has token id {tiny.vocab_size + 3} outside"):
        det.detect_batch(ids, valid)
    with pytest.raises(InputError, match=f"token id {tiny.vocab_size + 3} is outside"):
        sch.score_ids(ids, valid)

def test_distinct_token_sums_numpy_and_torch_paths_agree():
    from sketchwm.components import _distinct_token_sums_torch, distinct_token_sums

    ids, valid = _random_batch(B=600, N=50, seed=5)  # more rows than one chunk: exercises the threads
    g = torch.Generator().manual_seed(0)
    keep = (torch.rand(V + 1, generator=g) < 0.8).to(torch.int8)
    keep[V] = 0
    for values in (torch.randint(-4, 5, (V + 1,), generator=g).to(torch.int8), torch.randn(V + 1, generator=g, dtype=torch.float64)):
        values[V] = 0
        T, n = distinct_token_sums(ids, valid, values, keep, chunk=64)
        T2, n2 = _distinct_token_sums_torch(ids, valid, values, keep)
        assert torch.equal(n, n2)
        torch.testing.assert_close(T.double(), T2.double(), rtol=1e-12, atol=1e-12)


def test_unigram_distinct_counts_match_first_occurrence(key):
    from sketchwm_baselines.context import first_occurrence
    from sketchwm_baselines.unigram import UnigramScheme

    sch = UnigramScheme({}, key, V)
    ids, valid = _random_batch(seed=7)
    keep = first_occurrence(ids, valid)
    n_ref, g_ref = keep.sum(1), (sch.green_mask[ids] & keep).sum(1)
    s = sch.score_ids(ids, valid)
    assert torch.equal(s.n_scored, n_ref)
    gamma = sch.n_green / V
    torch.testing.assert_close(s.z, (g_ref - gamma * n_ref).double() / (n_ref * gamma * (1 - gamma)).double().sqrt())
