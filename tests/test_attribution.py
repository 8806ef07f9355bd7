"""Bit-packed attribution (sketchwm.attribution) against the float reference U·H."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sketchwm.attribution import DirectionBank, integer_sketch
from sketchwm.errors import InputError

V = 5000


@pytest.fixture(scope="module")
def scheme(builtin_registry):
    from sketchwm.keys import WatermarkKey

    params = {"prior": {"source": "uniform"}, "sketch": {"name": "count-sketch", "params": {"d": 4, "w": 64, "counting": "presence"}}}
    return builtin_registry.get("scheme", "global-sketch")(params, WatermarkKey(b"attribution test key...." * 2), V,
                                                           registry=builtin_registry)


def test_inner_is_exact_on_any_integer_sketch(scheme):
    K = 3001  # not a multiple of the chunk
    bank = DirectionBank.build(scheme, K, chunk=1000)
    assert bank.nbytes == K * scheme.sketch.dim // 8
    U = scheme.directions(torch.arange(K)).double()  # (K, D) float reference
    g = torch.Generator().manual_seed(0)
    for lo, hi in [(-5, 6), (0, 3), (-40, 1), (-1000, 1000), (0, 1)]:
        H = torch.randint(lo, hi, (scheme.sketch.dim,), generator=g)
        got = bank.inner(H, chunk=512, threads=2)
        assert np.array_equal(got, (U @ H.double()).round().long().numpy())


def test_top1_matches_float_reference_on_1000_texts(scheme):
    K = 400
    bank = DirectionBank.build(scheme, K)
    U = scheme.directions(torch.arange(K)).double()
    g = torch.Generator().manual_seed(1)
    B, N = 1000, 64
    ids = torch.randint(0, 300, (B, N), generator=g)  # repeats: presence sketch differs from counts
    valid = torch.arange(N)[None, :] < torch.randint(16, N + 1, (B, 1), generator=g)
    H = integer_sketch(scheme, ids, valid)  # (B, D)
    h_ref = scheme.sketch.sketch(ids, valid).double() * scheme.sketch.weights(scheme.sketch.counts(ids, valid))[1].double().sqrt()[:, None]
    assert torch.equal(H.double(), h_ref.round())  # the integer sketch is the reference's √n·h
    ref = H.double() @ U.T  # (B, K)
    ref_top = ref.argmax(1)  # first maximum
    got = torch.tensor([int(bank.top(H[b], 1)[0][0]) for b in range(B)])
    assert torch.equal(got, ref_top)
    idx, vals = bank.top(H[0], 7)  # top-k: descending values, ties by index
    order = sorted(range(K), key=lambda i: (-ref[0, i].item(), i))[:7]
    assert idx.tolist() == order and vals.tolist() == [int(ref[0, i]) for i in order]


def test_attribute_finds_the_member_and_checks_the_bank(scheme):
    member = 123
    u = scheme.directions(torch.tensor([member]))[0]  # (D,)
    # a text whose kept tokens all point along member 123's direction: each token's c(v) > 0
    c = scheme.sketch.token_scores(u[None].float())[0]
    good = torch.nonzero(c >= 2).flatten()[:60]
    ids = good[None, :].repeat(2, 1)
    valid = torch.ones_like(ids, dtype=torch.bool)
    att = scheme.attribute(ids, valid, n_keys=500, top=3)
    assert att.indices[:, 0].tolist() == [member, member]
    assert bool((att.p_value_fwer >= att.p_value).all()) and float(att.p_value[0, 0]) < 1e-6
    bank = DirectionBank.build(scheme, 100)
    with pytest.raises(InputError, match="fewer than n_keys"):
        scheme.attribute(ids, valid, n_keys=500, bank=bank)
    with pytest.raises(InputError, match="coordinates"):
        bank.inner(torch.zeros(7, dtype=torch.long))
