"""The C pass of the context-keyed green-list detector gives the torch path's counts exactly."""

import pytest
import torch

import sketchwm_baselines.green as green_mod
from sketchwm_baselines.green import ContextGreenListScheme, GreenListParams
from sketchwm_baselines.kgw_naive import KGWNaiveScheme

V = 997


def _ids(seed: int, B: int = 37, N: int = 61) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 12, (B, N), generator=g)  # a small alphabet: many repeated pairs
    ids[: B // 2] = torch.randint(0, V, (B // 2, N), generator=g)
    valid = torch.rand(B, N, generator=g) < 0.9  # holes, not only right padding
    lengths = torch.randint(0, N + 1, (B,), generator=g)
    valid &= torch.arange(N)[None, :] < lengths[:, None]  # empty and short texts too
    return ids, valid


def _torch_counts(scheme, ids, valid):
    """(g, n) of the torch path, from the context helpers."""
    from sketchwm_baselines.context import context_hash, first_occurrence, gather_context, pair_counter

    ctx, ok = gather_context(ids, valid, scheme.params.context)
    h = context_hash(ctx, scheme.vocab_size, scheme.params.hash)
    keep = first_occurrence(pair_counter(h, ids, scheme.vocab_size), valid & ok)
    return (scheme.green(h, ids) & keep).sum(1), keep.sum(1)


@pytest.mark.skipif(green_mod._green_counts is None, reason="the optional C extension is not built here")
@pytest.mark.parametrize("context,hash_kind", [((-1,), "sum"), ((1,), "sum"), ((-1, 1), "sum"), ((-2, -1), "ordered"),
                                               ((-1, 3), "ordered")])
@pytest.mark.parametrize("gamma", [0.25, 0.5, 0.9])
def test_c_counts_equal_torch_counts(key, monkeypatch, context, hash_kind, gamma):
    params = GreenListParams(context=context, hash=hash_kind, gamma=gamma, min_tokens=1)
    scheme = ContextGreenListScheme(params, key, V)
    ids, valid = _ids(len(context) * 31 + int(gamma * 100))
    counts = scheme._green_counts_c(ids, valid)
    assert counts is not None
    g_torch, n_torch = _torch_counts(scheme, ids, valid)
    assert torch.equal(counts[0], g_torch) and torch.equal(counts[1], n_torch)
    fast = scheme.score_ids(ids, valid)
    monkeypatch.setattr(green_mod, "_green_counts", None)
    assert scheme._green_counts_c(ids, valid) is None
    slow = scheme.score_ids(ids, valid)
    assert torch.equal(fast.n_scored.long(), slow.n_scored.long())
    assert torch.equal(fast.p_value.double().nan_to_num(-1.0), slow.p_value.double().nan_to_num(-1.0))
    assert torch.equal(fast.z.double().nan_to_num(-9.0), slow.z.double().nan_to_num(-9.0))
    assert int(counts[1].sum()) > 0 and int(counts[0].sum()) > 0  # the comparison saw green pairs


def test_subclasses_keep_their_own_path(key):
    """A scheme that overrides nothing uses the C pass; the registered KGW schemes share the base lists."""
    s = KGWNaiveScheme(KGWNaiveScheme.Params(), key, V)
    ids, valid = _ids(5)
    out = s._green_counts_c(ids, valid)
    assert (out is None) == (green_mod._green_counts is None)


@pytest.mark.skipif(green_mod._green_counts is None, reason="the optional C extension is not built here")
def test_c_counts_split_over_threads_equal_torch_counts(key):
    """From 65,536 ids the rows are split over threads: the counts are still the torch path's."""
    scheme = ContextGreenListScheme(GreenListParams(context=(-1, 1), min_tokens=1), key, V)
    ids, valid = _ids(11, B=1500, N=64)  # 96,000 ids
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        g, n = scheme._green_counts_c(ids, valid)
    finally:
        torch.set_num_threads(before)
    g_torch, n_torch = _torch_counts(scheme, ids, valid)
    assert torch.equal(n, n_torch) and torch.equal(g, g_torch)


@pytest.mark.parametrize("context,hash_kind", [((-1,), "sum"), ((-1, 1), "sum"), ((-2, -1), "ordered")])
@pytest.mark.parametrize("scored", [False, True])
def test_c_gumbel_scores_equal_the_torch_path(key, monkeypatch, context, hash_kind, scored):
    """aar-gumbel's detector (context keying): the C pass ``gumbel_scores`` gives the torch path's pair
    counts exactly and its score (hence p-value) up to summation order, with and without a scored
    vocabulary (the default's keyed channel scores the sketch's kept tokens only); split over threads too."""
    import sketchwm_baselines.aar_gumbel as aar

    if aar._gumbel_scores is None:
        pytest.skip("the optional C extension is not built here")
    scheme = aar.AARGumbelScheme(aar.AARGumbelParams(context=context, hash=hash_kind, min_tokens=1), key, V)
    if scored:
        scheme.scored_vocab = torch.rand(V, generator=torch.Generator().manual_seed(3)) < 0.5
    for B in (37, 600):  # 600 × 200 ids: the rows split over threads
        ids, valid = _ids(len(context) * 7 + int(scored), B=B, N=61 if B == 37 else 200)
        valid[0] = False  # an empty text
        fast = scheme.score_ids(ids, valid)
        monkeypatch.setattr(aar, "_gumbel_scores", None)
        slow = scheme.score_ids(ids, valid)
        monkeypatch.undo()
        assert torch.equal(fast.n_scored.long(), slow.n_scored.long())
        assert int(fast.n_scored[0]) == 0 and bool((fast.n_scored > 0).any())
        assert torch.allclose(fast.p_value.double(), slow.p_value.double(), rtol=1e-9, atol=1e-13)
        assert torch.allclose(fast.z.double(), slow.z.double(), rtol=1e-9, atol=1e-9, equal_nan=True)
