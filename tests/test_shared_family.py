"""The key family with shared hashes (``global-sketch-family`` ``hashes: shared``, the default's sketch channel).

* Member i is direction index i of one derived key: its z and exact p-value equal those of that
  ``global-sketch`` scheme, and all K + M columns come from one pass (C extension and numpy alike).
* Embedding tilts each text of a batch along its own member's direction in one step, and the member
  of largest z is the drawn one.
* Testing at the member of largest z (instead of smallest p) keeps the family p-value's level; the
  default's combined p-value holds its level over keys; a mixture forgery (the limit of every counting
  thief) is refused, a single member's is not.

Tiny vocabulary and models built in code; seeded; seconds each.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import ndtri

from sketchwm.components import token_sums
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm.testing import tiny_backend, tiny_texts
from sketchwm_builtin.global_sketch import GlobalSketchScheme
from sketchwm_builtin.key_family import SHARED_DOMAIN, family_pvalues

pytestmark = pytest.mark.usefixtures("one_thread")

UNIFORM = {"prior": {"source": "uniform"}}


@pytest.fixture(scope="module")
def tiny():
    return tiny_backend(seed=0)


def _shared(V: int, key: WatermarkKey, members: int = 4, member: dict | None = None, **params):
    return get_registry().create("scheme", "global-sketch-family", {"member": {**UNIFORM, **(member or {})},
                                 "members": members, "hashes": "shared", **params}, key, V)


@pytest.mark.parametrize("counting", ["presence", "capped"])
def test_members_and_decoys_are_direction_indices_of_one_key(counting):
    """Every member's and decoy's z (and every member's exact p-value) equals that of the global sketch
    under the shared key at direction index i (decoys: K + j), for the presence and the capped sketch."""
    V, key = 700, WatermarkKey(b"\x11" * 32)
    sk = {"sketch": {"name": "count-sketch", "params": {"d": 4, "w": 256, "counting": counting, "exclude_top": 300}}}
    fam = _shared(V, key, members=3, decoys=4, member=sk)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (12, 50), generator=g)
    valid = torch.rand(12, 50, generator=g) > 0.1
    p, z, z_decoy, n, _ = fam.shared_stats.scores(ids, valid, every=True)
    for i in range(3 + 4):
        ref = GlobalSketchScheme({**UNIFORM, **sk, "direction_index": i}, key.subkey(SHARED_DOMAIN), V).score_ids(ids, valid)
        got = z[i] if i < 3 else z_decoy[i - 3]
        assert torch.allclose(got, ref.z.double(), atol=1e-9), i
        if i < 3:
            assert torch.allclose(p[i], ref.p_value.double(), rtol=1e-12, atol=0), i
    assert torch.equal(n, ref.n_scored.long())


@pytest.mark.parametrize("K", [7, 16, 32, 48])
@pytest.mark.parametrize("with_c", [True, False])
def test_distinct_sums_of_many_columns_match_the_torch_reference(with_c, K, monkeypatch):
    """distinct_token_sums with a (V + 1, K) int8 table: the C pass (its unrolled K = 16, 32, 48 and its
    general loop) and the numpy pass give the torch reference's sums (distinct valid ids only; padding
    row V = 0; the table's extreme entries ±127)."""
    if not with_c:
        monkeypatch.setattr(token_sums, "_distinct_sums", None)
    elif token_sums._distinct_sums is None:
        pytest.skip("the C extension is not built here")
    g = torch.Generator().manual_seed(1)
    V = 300
    table = torch.randint(-4, 5, (V + 1, K), dtype=torch.int8, generator=g)
    table[:5], table[5:10] = 127, -127
    table[V] = 0
    keep = torch.randint(0, 2, (V + 1,), dtype=torch.int8, generator=g)
    keep[V] = 0
    ids = torch.randint(0, V, (600, 41), generator=g)
    valid = torch.rand(600, 41, generator=g) > 0.3
    T, n = token_sums.distinct_token_sums(ids, valid, table, keep)
    T_ref, n_ref = token_sums._distinct_token_sums_torch(ids, valid, table, keep)
    assert T.shape == (600, K) and torch.equal(T, T_ref) and torch.equal(n, n_ref)
    rows = np.array([599, 3, 3, 0, 417] + list(range(100, 400, 7)), dtype=np.int64)  # any order, repeats
    T_r, n_r = token_sums.distinct_token_sums(ids, valid, table, keep, rows=rows)
    assert torch.equal(T_r, T_ref[rows]) and torch.equal(n_r, n_ref[rows])
    if with_c:  # a row outside the texts is refused by the C pass, not read
        with pytest.raises(ValueError, match="outside"):
            token_sums._distinct_table_sums_c(ids, valid, table, keep, np.array([600]))


@pytest.mark.parametrize("K", [7, 16, 32, 48])
def test_distinct_sums_of_long_texts_at_the_table_extremes(K):
    """Texts longer than one 256-row block of the C pass, of distinct ids whose entries are all +127 (or
    all -127, or -128): sums far beyond int16 (the pass's partial sums per block) equal the torch reference."""
    if token_sums._distinct_sums is None:
        pytest.skip("the C extension is not built here")
    g = torch.Generator().manual_seed(2)
    V, N = 3000, 1100
    for fill in (127, -127, -128):
        table = torch.full((V + 1, K), fill, dtype=torch.int8)
        table[V] = 0
        keep = torch.ones(V + 1, dtype=torch.int8)
        keep[V] = 0
        ids = torch.stack([torch.randperm(V, generator=g)[:N] for _ in range(3)])  # distinct ids: every row counts
        ids[2, 600:] = ids[2, :500]  # repeats after the first blocks: counted once
        valid = torch.ones_like(ids, dtype=torch.bool)
        T, n = token_sums.distinct_token_sums(ids, valid, table, keep)
        T_ref, n_ref = token_sums._distinct_token_sums_torch(ids, valid, table, keep)
        assert torch.equal(T, T_ref) and torch.equal(n, n_ref)
        assert int(T[0, 0]) == fill * N and int(T[2, 0]) == fill * 600


def test_each_text_is_tilted_along_its_own_member_in_one_batch(tiny):
    """12 texts × 48 tokens, K = 3, shared hashes: one batched step tilts every text (the shared
    scheme holds a (B, D) direction), several members are drawn, the member of largest z is the drawn
    one for at least 10 of 12, and at least 9 are detected at p ≤ 0.05."""
    scheme = _shared(tiny.vocab_size, WatermarkKey(b"\x05" * 32), members=3, member={"delta": 2.0}, decoys=0,
                     spread="normal")
    cfg = {"gen_length": 48, "block_length": 48, "steps": 24}
    out = MaskedDiffusionSampler(tiny, cfg, scheme).generate(tiny_texts(12, 3, seed=2), torch.Generator().manual_seed(0))
    drawn = scheme.drawn.clone()
    assert len(set(drawn.tolist())) >= 2
    assert scheme.shared._gradient.u.shape == (12, scheme.shared.sketch.dim)
    valid = torch.ones_like(out.ids, dtype=torch.bool)
    _, z, _, _, best = scheme.shared_stats.scores(out.ids, valid)
    assert torch.equal(best, z.argmax(0)) and int((best == drawn).sum()) >= 10
    assert int((scheme.score_ids(out.ids, valid).p_value <= 0.05).sum()) >= 9


@pytest.mark.parametrize("spread", ["normal", "student"])
def test_family_pvalue_at_the_member_of_largest_z_keeps_its_level(spread):
    """Null members (p_i uniform, z_i a noisy function of p_i, so the largest z is not always the
    smallest p): testing at argmax z rejects at most α (+ 3 binomial sd) at α = 0.01 and 0.05."""
    g = torch.Generator().manual_seed(3)
    K, B = 8, 40_000
    p = torch.rand(K, B, generator=g, dtype=torch.float64)
    z = torch.from_numpy(-ndtri(p.numpy())) + 0.3 * torch.randn(K, B, generator=g, dtype=torch.float64)
    best = z.argmax(0)
    pv, got, _ = family_pvalues(p, z, "bonferroni", True, spread, None, best)
    assert torch.equal(got, best)
    for alpha in (0.01, 0.05):
        rate = float((pv <= alpha).double().mean())
        assert rate <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / B), (alpha, rate)


def test_the_default_pvalue_holds_its_level_over_keys(tiny):
    """The default (K = 16 shared-hash members and the green lists) on 300 key-independent texts of
    64 tokens, over 10 keys: at most 3% flagged at p ≤ 0.01 for any key."""
    V = tiny.vocab_size
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(5, V, (300, 64), generator=g)
    valid = torch.ones_like(ids, dtype=torch.bool)
    for k in range(10):
        s = get_registry().create("scheme", "global-sketch-green", {"sketch": UNIFORM}, WatermarkKey(bytes([k]) * 32), V)
        assert s.sketch_channel.params.hashes == "shared" and s.sketch_channel.params.members == 16
        rate = float((s.score_ids(ids, valid).p_value <= 0.01).double().mean())
        assert rate <= 0.03, (k, rate)


def test_a_mixture_forgery_is_refused_and_a_member_forgery_is_not(tiny):
    """Random texts plus the 30 kept tokens of largest mean boost (1/K)Σ c_i over the shared-hash
    members: the reported p-value flags almost none; plus member 0's 30 most boosted tokens: flagged."""
    V = tiny.vocab_size
    scheme = _shared(V, WatermarkKey(b"\x09" * 32), members=4, decoys=0, spread="normal")
    C = scheme.member_token_weights()  # (K, V)
    keep = scheme.sketch.keep_table()[:V].bool() & (torch.arange(V) >= 5)
    g = torch.Generator().manual_seed(4)
    base = torch.randint(5, V, (200, 30), generator=g)
    flagged = {}
    for label, score in (("mixture", C.mean(0)), ("member", C[0])):
        s = torch.where(keep, score, torch.full_like(score, -1e9))
        add = torch.argsort(s, descending=True)[:30]
        ids = torch.cat([base, add.expand(200, -1)], 1)
        flagged[label] = float((scheme.score_ids(ids, torch.ones_like(ids, dtype=torch.bool)).p_value <= 0.01)
                               .double().mean())
    assert flagged["mixture"] <= 0.05 and flagged["member"] >= 0.9, flagged


def _planted(fam, V: int, B: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """B texts of 30-120 tokens, from key-independent to strongly boosted: member 0's 200 most boosted
    tokens planted at a rate rising from 0 to 40% over the batch. Returns ids (B, 120), valid (B, 120)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, 120), generator=g)
    top = torch.argsort(fam.member_token_weights()[0], descending=True)[:200]
    plant = torch.rand(B, 120, generator=g) < torch.linspace(0, 0.4, B)[:, None]
    ids = torch.where(plant, top[torch.randint(0, 200, (B, 120), generator=g)], ids)
    return ids, torch.arange(120)[None] < torch.randint(30, 121, (B, 1), generator=g)


def test_the_bernstein_shortcut_only_replaces_family_pvalues_of_one():
    """Texts from key-independent to strongly boosted (member 0's 200 most boosted tokens planted at
    0-40%): the reported member p-value is never below the exact one, the family p-value differs from
    the exact family p-value only where it reports 1 and the exact one is at least 0.25, and some
    texts take the shortcut."""
    V = 900
    fam = _shared(V, WatermarkKey(b"\x21" * 32), members=16, decoys=0, spread="normal")
    ids, valid = _planted(fam, V, 800, seed=5)
    p_exact, _, _, _, best = fam.shared_stats.scores(ids, valid, every=True)
    p_fast, _, _, _, best_fast = fam.shared_stats.scores(ids, valid)
    assert torch.equal(best, best_fast)
    cols = torch.arange(800)
    exact, fast = p_exact[best, cols], p_fast[best, cols]
    assert bool((fast >= exact - 1e-15).all())
    fam_exact, fam_fast = (16 * exact).clamp(max=1.0), (16 * fast).clamp(max=1.0)
    differ = (fam_fast - fam_exact).abs() > 1e-12
    assert 0 < int(differ.sum()) < 800
    assert bool((fam_fast[differ] == 1.0).all()) and float(fam_exact[differ].min()) >= 0.25
    assert int((fam_exact <= 0.01).sum()) > 50  # the planted texts are detected


def test_decoys_are_scored_only_where_the_family_pvalue_can_be_below_one():
    """With decoys the family reads their columns only for texts whose Bonferroni family p-value is
    below 1: the reported p-values equal those computed with every text's decoys (1 where the family
    p-value is 1), the decoys' z of the other texts are the same, and texts at family p-value 1 are
    given decoy z 0."""
    V, K, M = 900, 16, 8
    fam = _shared(V, WatermarkKey(b"\x23" * 32), members=K, decoys=M, spread="student")
    ids, valid = _planted(fam, V, 600, seed=7)
    st = fam.shared_stats
    p, z, zd_all, _, best = st.scores(ids, valid)
    _, _, zd_lazy, _, best_lazy = st.scores(ids, valid, decoys_where_fam_below_one=True)
    assert torch.equal(best, best_lazy)
    below = (K * p[best, torch.arange(600)]) < 1.0
    assert 0 < int(below.sum()) < 600  # both kinds of text occur
    assert torch.equal(zd_lazy[:, below], zd_all[:, below]) and bool((zd_lazy[:, ~below] == 0).all())
    want = family_pvalues(p, z, "bonferroni", True, "student", zd_all, best)[0]
    got = fam.score_ids(ids, valid).p_value
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)  # the last bits of the spread's sums may differ
    assert bool((got[~below] == 1.0).all())
