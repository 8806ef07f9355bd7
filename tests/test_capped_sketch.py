"""The capped-count sketch (x_v = min(c_v, k)): its sketch, exact expected sketch and gradient, and its null.

Seeds and tolerances are stated in each test. The expectation and the gradient are checked against an
independent computation: a dynamic programme over the count of each token (its law truncated at k),
differentiated by autograd.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sketchwm.components.expected_sketch import capped_column_sums, capped_expected_weights, capped_row_derivative
from sketchwm.keys import WatermarkKey
from sketchwm.lattice_sum import capped_sum_tail
from sketchwm.registry import get_registry
from sketchwm.stats import bernoulli_sum_tail


def _key(i: int) -> WatermarkKey:
    return WatermarkKey(bytes([i + 1]) * 32)


def _sketch(V=40, cap=2, prior=None, exclude_top=0):
    return get_registry().create("sketch", "count-sketch", {"d": 2, "w": 8, "counting": "capped", "cap": cap,
                                                            "exclude_top": exclude_top}, _key(0), V, prior, "cpu")


def _expected_dp(p: torch.Tensor, valid: torch.Tensor, frozen: torch.Tensor, k: int) -> torch.Tensor:
    """E[min(f_v + C_v, k)] by a dynamic programme over the rows: p (B, M, V) float64 (autograd), valid (B, M),
    frozen (B, V) → (B, V). The law of C_v is kept on {0, …, k} with mass absorbed at k."""
    B, M, V = p.shape
    dist = torch.zeros(B, V, k + 1, dtype=torch.float64)
    dist[..., 0] = 1.0
    for i in range(M):
        pi = (p[:, i] * valid[:, i, None])[..., None]  # (B, V, 1)
        up = torch.cat([torch.zeros(B, V, 1, dtype=torch.float64), dist[..., :-1]], -1)
        up = up + torch.nn.functional.pad(dist[..., -1:], (k, 0))  # stay at k
        dist = dist * (1 - pi) + up * pi
    j = torch.arange(k + 1, dtype=torch.float64)
    return (torch.clamp(frozen[..., None] + j, max=float(k)) * dist).sum(-1)


def test_capped_sketch_counts_up_to_k_copies_and_ignores_order():
    sk = _sketch(cap=2)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (2, 30), generator=g)
    valid = torch.rand(2, 30, generator=g) > 0.1
    x, n = sk.weights(sk.counts(ids, valid))
    assert torch.equal(x, sk.counts(ids, valid).clamp(max=2))
    tok, xs = sk.sparse_weights(ids, valid)
    dense = torch.zeros(2, 41).scatter_add_(1, tok, xs)[:, :40]
    assert torch.equal(dense, x) and torch.equal(xs.sum(1), n)
    assert torch.allclose(sk.project_sparse(tok, xs) / n.sqrt()[:, None], sk.sketch(ids, valid), atol=1e-5)
    perm = torch.randperm(30, generator=g)
    assert torch.allclose(sk.sketch(ids[:, perm], valid[:, perm]), sk.sketch(ids, valid))
    # a flood of one token moves the sketch at most by its k copies: 2 copies or 50 give the same sketch
    one = torch.tensor([[3, 7, 9, 11]])
    assert torch.allclose(sk.sketch(torch.cat([one, torch.full((1, 1), 3)], 1)),
                          sk.sketch(torch.cat([one, torch.full((1, 50), 3)], 1)))


@pytest.mark.parametrize("k", [2, 3])
def test_capped_expected_weights_and_derivative_match_dynamic_programme(k):
    """Closed forms (Poisson-binomial through elementary symmetric polynomials) against the DP and its
    autograd gradient (seed 1; float32 marginals in, so 1e-5 absolute)."""
    B, M, V = 2, 9, 7
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(B, M, V, generator=g) * 2
    valid = torch.rand(B, M, generator=g) > 0.2
    frozen = torch.randint(0, k + 2, (B, V), generator=g).double()
    p = torch.softmax(logits.double(), -1).requires_grad_(True)
    exact = _expected_dp(p, valid, frozen, k)
    sums = capped_column_sums(logits, valid.float(), k)
    assert torch.allclose(capped_expected_weights(frozen, sums), exact, atol=1e-5)
    (grad,) = torch.autograd.grad(exact.sum(), p)  # E_v depends on p_i(v) alone: the sum's gradient is the diagonal
    d = capped_row_derivative(frozen, sums, p.detach().float())
    assert torch.allclose((d.double() * valid[..., None]), grad * valid[..., None], atol=1e-5)


def test_capped_tilt_is_the_gradient_of_the_score():
    """a_i(v) = ½ ∂S(ĥ(p))/∂p_i(v) at the masked rows for the scheme's capped sketch, n̂ included (seed 4)."""
    V, G, k = 25, 10, 2
    sch = get_registry().create("scheme", "global-sketch", {
        "sketch": {"name": "count-sketch", "params": {"d": 2, "w": 8, "counting": "capped", "cap": k}},
        "prior": {"source": "uniform"}, "delta": 0.5}, _key(0), V)
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(1, G, V, generator=g)
    tokens = torch.randint(0, 5, (1, G), generator=g)  # repeats among the frozen tokens
    masked = torch.zeros(1, G, dtype=torch.bool)
    masked[0, :6] = True
    tokens[masked] = V
    a = sch.token_gradient(logits.clone(), tokens, masked)  # (1, G, V)
    probs = torch.softmax(logits.double(), -1).requires_grad_(True)
    frozen = torch.zeros(1, V, dtype=torch.float64)
    frozen[0].index_add_(0, tokens[0, ~masked[0]], torch.ones(int((~masked).sum()), dtype=torch.float64))
    w = _expected_dp(probs, masked, frozen, k)[0]  # (V,)
    Phi = sch.sketch.project(torch.eye(V)).double()  # (V, D)
    h = (w @ Phi) / w.sum().sqrt()
    S = 2 * (sch.u.double() * h).sum() - sch.score_fn.lam * (h * h).sum()
    (grad,) = torch.autograd.grad(0.5 * S, probs)
    assert torch.allclose(a[0, :6].double(), grad[0, :6], atol=1e-4, rtol=1e-3)


def test_capped_sum_tail_is_exact():
    """k = 1 is the Bernoulli tail; k = 2 against a direct convolution (40 terms, seed 0): within the
    added error bound (1e-9), never below the exact tail."""
    rng = np.random.default_rng(0)
    g = rng.integers(-2, 3, 40)
    q = rng.uniform(0, 0.3, 40)
    xs = np.arange(-20, 21)
    assert np.allclose(capped_sum_tail(g, np.stack([1 - q, q], 1)).sf(xs), bernoulli_sum_tail(g, q).sf(xs), atol=1e-9)
    pm = rng.dirichlet([5, 1, 0.5], 40)
    off = 4 * 40
    dist = np.zeros(2 * off + 1)
    dist[off] = 1.0
    for gi, row in zip(g, pm):
        dist = sum(row[j] * np.roll(dist, int(gi * j)) for j in range(3))
    sf = np.cumsum(dist[::-1])[::-1]
    xs = np.arange(-30, 31)
    got = capped_sum_tail(g, pm).sf(xs)
    assert np.all(got >= sf[xs + off] - 1e-15) and np.all(got - sf[xs + off] <= 1e-9)


def test_capped_background_null_holds_on_model_null():
    """Texts drawn from the background model itself: P(p ≤ α) ≤ α + 3 s.e. for each of 4 fixed keys
    (4,000 texts of 60 tokens from a Zipf prior over V = 400, seed 11; margin β = 0)."""
    V, n, B = 400, 60, 4000
    prior = 1.0 / torch.arange(1, V + 1).double()
    pi = prior / prior.sum()
    g = torch.Generator().manual_seed(11)
    ids = torch.multinomial(pi.float(), B * n, replacement=True, generator=g).view(B, n)
    valid = torch.ones_like(ids, dtype=torch.bool)
    reg = get_registry()
    sk = {"d": 4, "w": 32, "counting": "capped", "cap": 2, "exclude_top": 10}
    for k in range(4):
        sch = reg.create("scheme", "global-sketch", {"sketch": {"name": "count-sketch", "params": sk},
                                                     "prior": {"source": "uniform"}, "null_margin": 0.0}, _key(k), V)
        sch._log1m_pi, sch._log_pi = torch.log1p(-pi), torch.log(pi)  # the background model: the true prior
        sch.sketch = reg.create("sketch", "count-sketch", sk, _key(k).subkey("k_sk"), V, prior, "cpu")
        sch._c_u = None
        p = sch.score_ids(ids, valid).p_value
        for alpha in (0.01, 0.05):
            rate = float((p <= alpha).double().mean())
            assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / B), (k, alpha, rate)
        # the threshold on z is the p-value's: z ≥ threshold ⇔ p ≤ α
        thr = sch.analytic_threshold(0.01, n)
        z = sch.score_ids(ids, valid).z
        assert torch.equal(z >= thr, p <= 0.01)


def test_dispersed_capped_null_holds_on_bursty_text_where_the_binomial_null_does_not():
    """Texts whose counts are Beta-binomial (each text draws its own token distribution θ ~ Dirichlet(π·s),
    then 60 tokens from θ: words recur, as in human text). With ``null_dispersion`` = s the capped
    null's p-value holds for each of 4 fixed keys (P(p ≤ α) ≤ α + 3 s.e.); the binomial null, which
    ignores the recurrence, flags more than α + 3 s.e. under some key. The law itself is scipy's
    Beta-binomial."""
    from scipy.stats import betabinom

    V, n, B, s = 400, 60, 4000, 20.0
    prior = 1.0 / torch.arange(1, V + 1).double()
    pi = prior / prior.sum()
    g = torch.Generator().manual_seed(5)
    theta = torch.distributions.Dirichlet(pi * s)
    torch.manual_seed(5)
    th = theta.sample((B,))  # (B, V) one token distribution per text
    ids = torch.multinomial(th.float(), n, replacement=True, generator=g)  # (B, n)
    valid = torch.ones_like(ids, dtype=torch.bool)
    reg = get_registry()
    sk = {"d": 4, "w": 32, "counting": "capped", "cap": 4, "exclude_top": 10}
    worst_binomial = 0.0
    for k in range(4):
        for disp in (s, None):
            sch = reg.create("scheme", "global-sketch", {"sketch": {"name": "count-sketch", "params": sk},
                                                         "prior": {"source": "uniform"}, "null_margin": 0.0,
                                                         "null_dispersion": disp}, _key(k), V)
            sch._log1m_pi, sch._log_pi = torch.log1p(-pi), torch.log(pi)
            sch.sketch = reg.create("sketch", "count-sketch", sk, _key(k).subkey("k_sk"), V, prior, "cpu")
            sch._c_u = None
            if disp is not None and k == 0:
                law = sch._capped_pmf(torch.tensor([float(n)]), sch._log_pi, sch._log1m_pi)[0]  # (V, 5)
                ref = betabinom(n, (pi * s).numpy()[:, None], ((1 - pi) * s).numpy()[:, None]).pmf(np.arange(4)[None, :])
                np.testing.assert_allclose(law[:, :4].numpy(), ref, rtol=1e-9, atol=1e-14)
            p = sch.score_ids(ids, valid).p_value
            for alpha in (0.01, 0.05):
                rate = float((p <= alpha).double().mean())
                if disp is None:
                    worst_binomial = max(worst_binomial, rate - alpha - 3 * math.sqrt(alpha * (1 - alpha) / B))
                else:
                    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / B), (k, alpha, rate)
    assert worst_binomial > 0, "the binomial null should over-flag bursty text"
