"""Count-Sketch (Def. 2.3, eq. 4), expected sketch (eq. 5), tilt (eq. 7) and its Fisher expansion (eq. 15-16)."""

import math

import pytest
import torch

from sketchwm.errors import ConfigError, InputError
from sketchwm_builtin.count_sketch import CountSketch
from sketchwm_builtin.global_sketch import GlobalSketchScheme
from sketchwm.components import DenoiseStep, Marginals


def zipf_prior(V, s=1.1):
    r = torch.arange(1, V + 1, dtype=torch.float64)
    p = r ** (-s)
    perm = torch.randperm(V, generator=torch.Generator().manual_seed(3))
    return (p / p.sum())[perm]


def test_sketch_is_permutation_invariant(key):
    sk = CountSketch({"d": 4, "w": 64}, key, 500)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 500, (3, 120), generator=g)
    perm = torch.randperm(120, generator=g)
    assert torch.equal(sk.sketch(ids), sk.sketch(ids[:, perm]))
    # and actually depends on the tokens
    assert not torch.equal(sk.sketch(ids), sk.sketch(torch.roll(ids, 1, 0)))


def test_sketch_matches_definition(key):
    """h = vec(Σ_j φ(y_j)) / √N with φ(v)_{r,b} = σ_r(v) 1[h_r(v) = b]."""
    d, w, V = 3, 16, 50
    sk = CountSketch({"d": d, "w": w}, key, V)
    ids = torch.tensor([[1, 7, 7, 49, 0, 13]])
    H = torch.zeros(d, w)
    for v in ids[0].tolist():
        for r in range(d):
            H[r, sk.buckets[r, v]] += sk.signs[r, v]
    assert torch.allclose(sk.sketch(ids)[0], H.flatten() / math.sqrt(6))
    # token_scores is the adjoint of project: <Φᵀx, r> = <x, Φ r>
    x, r = torch.randn(2, V), torch.randn(2, d * w)
    assert torch.allclose((sk.project(x) * r).sum(1), (x * sk.token_scores(r)).sum(1), atol=1e-4)



@pytest.mark.parametrize("d, w, V", [(3, 16, 50), (4, 256, 3000)])
def test_phi_is_the_dense_count_sketch_matrix(key, d, w, V):
    """Φ (V, D) and Φᵀ (D, V), built directly in CSR form, are the dense matrix of φ(v)_{r·w+b} =
    σ_r(v) 1[h_r(v) = b], with sorted column indices in every row (a canonical CSR)."""
    sk = CountSketch({"d": d, "w": w}, key, V)
    dense = torch.zeros(V, d * w)
    for r in range(d):
        dense[torch.arange(V), r * w + sk.buckets[r]] = sk.signs[r]
    for transpose, want in ((False, dense), (True, dense.T)):
        phi = sk._phi(transpose)
        assert torch.equal(phi.to_dense(), want)
        crow, col = phi.crow_indices(), phi.col_indices()
        for i in range(0, len(crow) - 1, max(1, (len(crow) - 1) // 50)):
            row = col[crow[i]:crow[i + 1]]
            assert bool((row[1:] > row[:-1]).all())

def test_sign_balancing_reduces_imbalance(key):
    V = 5000
    prior = zipf_prior(V)
    bal = CountSketch({"d": 4, "w": 64}, key, V, token_prior=prior)
    rep = bal.report()
    # achieved |Σ π σ| per bucket: within 1e-4 of the floor no signs can beat (a token heavier than
    # the rest of its bucket), and on average far below plain keyed signs
    assert rep["max_excess_imbalance"] < 1e-4
    assert rep["mean_excess_imbalance"] < 0.01 * rep["unbalanced_mean_excess_imbalance"]
    # signs stay keyed: about half positive, and a different key gives different signs
    assert abs(float(bal.signs.mean())) < 0.1
    from sketchwm.keys import WatermarkKey

    other = CountSketch({"d": 4, "w": 64}, WatermarkKey(b"x" * 32), V, token_prior=prior)
    assert float((other.signs != bal.signs).float().mean()) > 0.3


def test_prior_errors(key):
    with pytest.raises(ConfigError, match="entries"):
        CountSketch({}, key, 100, token_prior=torch.ones(99))
    with pytest.raises(ConfigError, match="non-negative"):
        CountSketch({}, key, 3, token_prior=torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ConfigError, match="unknown field 'dd'"):
        CountSketch({"dd": 3}, key, 100)


def test_out_of_vocabulary_ids(key):
    sk = CountSketch({"d": 2, "w": 8}, key, 10)
    with pytest.raises(InputError, match="outside the vocabulary"):
        sk.sketch(torch.tensor([[1, 2, 10]]))


def test_expected_sketch_equals_monte_carlo_mean(key):
    """eq. (5): E[h(Y)] for Y_i ~ p_i independently at masked positions, frozen tokens fixed."""
    V, G = 40, 30
    sk = CountSketch({"d": 2, "w": 8}, key, V)
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(G, V, generator=g) * 2, -1)
    masked = torch.rand(G, generator=g) < 0.6
    frozen_tokens = torch.randint(0, V, (G,), generator=g)
    frozen = sk.counts(frozen_tokens[None], (~masked)[None])
    mass = (probs * masked[:, None]).sum(0, keepdim=True)
    h_hat = sk.expected_sketch(frozen, mass, G)[0]
    S = 20000
    draws = torch.multinomial(probs, S, replacement=True, generator=g).T  # (S, G)
    ys = torch.where(masked[None], draws, frozen_tokens[None])
    mc = sk.sketch(ys).mean(0)
    se = sk.sketch(ys).std(0) / math.sqrt(S)
    assert float(((mc - h_hat).abs() / (se + 1e-9)).max()) < 5.0  # within 5 standard errors everywhere
    assert float((mc - h_hat).abs().max()) < 0.02


def _scheme(key, V, delta, **kw):
    return GlobalSketchScheme({"prior": {"source": "uniform"}, "delta": delta, "sketch": {"name": "count-sketch", "params": {"d": 2, "w": 16}}, **kw}, key, V)


def test_tilt_equals_equation_7(key):
    V, G = 60, 20
    sch = _scheme(key, V, 0.5)
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(1, G, V, generator=g)
    tokens = torch.randint(0, V, (1, G), generator=g)
    masked = torch.rand(1, G, generator=g) < 0.5
    tokens = torch.where(masked, torch.full_like(tokens, V), tokens)  # mask id outside V
    step = DenoiseStep(3, 10, tokens, masked, Marginals.canvas(logits, masked), torch.zeros(1, 1, dtype=torch.long),
                       torch.ones(1, 1, dtype=torch.bool), (0, G), V)
    p = torch.softmax(logits[0], -1)  # before the call: process_logits tilts in place
    out = sch.process_logits(step)
    # independent recomputation of eq. 5-7
    N = G
    H = torch.zeros(sch.sketch.dim)
    for i in range(G):
        if masked[0, i]:
            for v in range(V):
                for r in range(2):
                    H[r * 16 + sch.sketch.buckets[r, v]] += p[i, v] * sch.sketch.signs[r, v]
        else:
            v = int(tokens[0, i])
            for r in range(2):
                H[r * 16 + sch.sketch.buckets[r, v]] += sch.sketch.signs[r, v]
    h_hat = H / math.sqrt(N)
    lam = sch.score_fn.params.gamma * math.sqrt(16)
    r_vec = sch.u - lam * h_hat
    a = torch.tensor([sum(float(r_vec[r * 16 + sch.sketch.buckets[r, v]] * sch.sketch.signs[r, v]) for r in range(2)) for v in range(V)]) / math.sqrt(N)
    eta = 0.5 * math.sqrt(N)
    expected = p * torch.exp(eta * a)[None]
    expected = expected / expected.sum(-1, keepdim=True)
    got = torch.softmax(out[0], -1)
    assert torch.allclose(got[masked[0]], expected[masked[0]], atol=1e-5)


@pytest.mark.parametrize("frac", [0.3, 0.8])  # few / many masked rows
def test_packed_gradient_equals_unpacked(key, frac):
    """The engine's packed masked rows (ragged: texts with different |M_t|, padding rows filled with
    garbage) give the same a_{k,t} as the full canvas, and the tilt of the sampled target rows
    equals the full tilt at those rows."""
    from sketchwm.engine import packed_masked_positions

    V, G, B = 50, 24, 3
    sch = _scheme(key, V, 0.5)
    sch.begin(B, G, torch.zeros(B, 0, dtype=torch.long), torch.zeros(B, 0, dtype=torch.bool))
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(B, G, V, generator=g)
    tokens = torch.randint(0, V, (B, G), generator=g)
    masked = torch.rand(B, G, generator=g) < torch.tensor([[frac], [frac / 2], [frac]])
    masked[:, 0] = True
    tokens[masked] = V  # [MASK] id outside the vocabulary, as in the engine
    mpos, mvalid = packed_masked_positions(masked)
    assert not bool(mvalid.all())  # the test needs padding rows
    mlogits = torch.gather(logits, 1, mpos[..., None].expand(-1, -1, V)).clone()
    mlogits[~mvalid] = 1e3  # padding rows must not count
    full = sch.token_gradient(logits, tokens, masked)
    every = Marginals(mlogits, mpos, mvalid, torch.arange(mpos.shape[1]).expand_as(mpos), mvalid)  # every masked row a target
    packed = sch.marginal_gradient(every, tokens, masked)[0].expand(B, mpos.shape[1], V)  # at the packed rows
    full = torch.gather(full.expand(B, G, V), 1, mpos[..., None].expand(-1, -1, V))
    assert torch.allclose(full[mvalid], packed[mvalid], atol=1e-5)
    pos = mpos[:, :1]  # one sampled (masked) row per text
    common = dict(step=3, total_steps=8, tokens=tokens, masked=masked, prompt_ids=torch.zeros(B, 0, dtype=torch.long),
                  prompt_mask=torch.zeros(B, 0, dtype=torch.bool), block=(0, G), mask_token_id=V)
    tilted_full = sch.process_logits(DenoiseStep(marginals=Marginals.canvas(logits.clone(), masked), **common))
    rows = Marginals(mlogits, mpos, mvalid, torch.zeros_like(pos), torch.ones_like(pos, dtype=torch.bool))  # row 0 = pos
    tilted_rows = sch.process_logits(DenoiseStep(marginals=rows, **common))
    assert torch.allclose(torch.gather(tilted_full, 1, pos[..., None].expand(-1, -1, V)), tilted_rows, atol=1e-5)


def test_small_eta_fisher_expansion(key):
    """eq. (15)-(16): gain ≈ ησ², KL ≈ ½η²σ² for small η."""
    V = 200
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(V, generator=g), -1)
    a = torch.randn(V, generator=g)
    mu = (p * a).sum()
    var = (p * (a - mu) ** 2).sum()
    for eta in (1e-2, 3e-2):
        q = torch.softmax(torch.log(p) + eta * a, -1)
        gain = (q * a).sum() - mu
        kl = (q * (q / p).log()).sum()
        assert abs(float(gain / (eta * var)) - 1) < 0.1
        assert abs(float(kl / (0.5 * eta**2 * var)) - 1) < 0.1
    # and the scheme's own tilt of one position has the same law along its own score a(v)
    sch = _scheme(key, V, 1.0)
    logits = torch.log(p)[None, None].clone()
    tokens = torch.full((1, 1), V, dtype=torch.long)
    masked = torch.ones(1, 1, dtype=torch.bool)
    a_s = sch.token_gradient(logits, tokens, masked)[0]
    mu_s = (p * a_s).sum()
    var_s = (p * (a_s - mu_s) ** 2).sum()
    eta = 0.02
    q = torch.softmax(logits[0, 0] + eta * a_s, -1)
    assert abs(float(((q * a_s).sum() - mu_s) / (eta * var_s)) - 1) < 0.1
    assert abs(float((q * (q / p).log()).sum() / (0.5 * eta**2 * var_s)) - 1) < 0.1
