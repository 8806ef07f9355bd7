"""Statistical properties of the baseline schemes (issue 4) that the conformance suite does not cover.

* Distortion-free schemes (``aar-gumbel``, ``gumbel-position``, ``kth-exp-edit``): over many keys, the token the engine's
  Gumbel-max picks with the scheme's uniforms is distributed as the marginal.
* ``red-green-dlm`` raises the expected green score more than ``kgw-naive`` at the same δ.
* The shared helpers (duplicate removal, the Levenshtein DP) against brute force.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from scipy import stats

from sketchwm.components import DenoiseStep, MarginalReads, Marginals
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry
from sketchwm_baselines.context import first_occurrence
from sketchwm_baselines.kth_exp_edit import levenshtein_min

V = 120
MASK = 4


pytestmark = pytest.mark.usefixtures("one_thread")


def _step(logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, prompt: list[int], seed: int = 0) -> DenoiseStep:
    B, G, _ = logits.shape
    return DenoiseStep(
        step=0, total_steps=1, tokens=tokens, masked=masked, marginals=Marginals.canvas(logits, masked),
        prompt_ids=torch.tensor([prompt] * B), prompt_mask=torch.ones(B, len(prompt), dtype=torch.bool),
        block=(0, G), mask_token_id=MASK, generator=torch.Generator().manual_seed(seed),
    )


def _key(i: int) -> WatermarkKey:
    return WatermarkKey(i.to_bytes(4, "big") * 8)


def _keyed_choice_counts(name: str, params: dict, n_keys: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Over ``n_keys`` keys: counts of the engine's Gumbel-max choice at the three masked positions
    of one fixed state whose marginals are all equal (distinct PRF counters, so the three choices
    of one key are independent draws). Returns (counts (V,), marginal (V,))."""
    g = torch.Generator().manual_seed(7)
    allowed = torch.tensor([10, 20, 30, 40, 50, 60])
    row = torch.full((V,), float("-inf"))
    row[allowed] = torch.randn(allowed.numel(), generator=g)  # 6 live tokens
    logits = row.expand(1, 5, V).clone()  # (1, 5, V)
    tokens = torch.tensor([[MASK, 11, MASK, 12, MASK]])  # masked positions 0, 2, 4 have known left contexts
    masked = tokens == MASK
    cls = get_registry().get("scheme", name)
    counts = torch.zeros(V)
    prompt, prompt_mask = torch.tensor([[7]]), torch.ones(1, 1, dtype=torch.bool)
    for i in range(n_keys):  # one scheme per key: the distribution is over keys
        scheme = cls(params, _key(i), V)
        scheme.begin(1, 5, prompt, prompt_mask)
        u = scheme.sampling_uniforms(_step(logits, tokens, masked, [7], seed=i))  # (1, 5, V)
        x0 = (logits - torch.log(-torch.log(u.double()))).argmax(-1)[masked]  # engine's Gumbel-max, T = 1
        counts += torch.bincount(x0, minlength=V)
    return counts, torch.softmax(row.double(), -1)


N_KEYS = 1000
#: |frequency − p| <= 0.03 per token: ~4 standard deviations of a frequency near 0.2 over 3000 draws
FREQ_TOL = 0.03


@pytest.mark.parametrize(
    "name,params",
    [
        ("aar-gumbel", {"keying": "context"}),
        ("aar-gumbel", {"keying": "position"}),
        ("gumbel-position", {}),
        ("kth-exp-edit", {"key_len": 8}),
        ("kth-exp-edit", {"key_len": 8, "random_shift": False}),
    ],
)
def test_distortion_free_over_keys(name, params):
    counts, marginal = _keyed_choice_counts(name, params, N_KEYS)
    total = counts.sum()
    assert (counts / total - marginal).abs().max().item() <= FREQ_TOL
    live = marginal > 0
    exp = marginal[live] / marginal[live].sum() * total.double()
    chi = stats.chisquare(counts[live].double().numpy(), exp.numpy())  # seeded keys: deterministic
    assert chi.pvalue > 1e-4, chi


def test_distortion_check_has_power():
    """The same check flags a scheme that does distort: ``unigram`` at δ = 2 (applied as a tilt)."""
    reg = get_registry()
    scheme = reg.create("scheme", "unigram", {"delta": 2.0}, _key(0), V)
    g = torch.Generator().manual_seed(7)
    logits = torch.full((1, 1, V), float("-inf"))
    logits[..., :12] = torch.randn((1, 1, 12), generator=g)
    step = _step(logits, torch.tensor([[MASK]]), torch.tensor([[True]]), [7])
    tilted = torch.softmax(scheme.process_logits(step)[0, 0], -1)
    assert (tilted - torch.softmax(logits[0, 0], -1)).abs().max().item() > FREQ_TOL


def _random_state(B: int, G: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn((B, G, V), generator=g) * 1.5
    logits[..., :5] = float("-inf")  # special tokens, as the engine bans them
    masked = torch.rand((B, G), generator=g) < 0.5
    sampled = torch.distributions.Categorical(logits=logits).sample()  # (B, G)
    tokens = torch.where(masked, torch.full_like(sampled, MASK), sampled)
    return _step(logits, tokens, masked, [9, 17])


def _expected_green_fraction(rg, step: DenoiseStep, logits: torch.Tensor) -> float:
    """J of red-green-dlm (exact: top-k >= V) per masked-or-not position, under marginals softmax(logits)."""
    probs = torch.softmax(logits, -1)
    onehot = torch.nn.functional.one_hot(step.tokens.clamp(0, V - 1), V).float()
    q = torch.where(step.masked[..., None], probs, onehot)
    J = rg.expected_green(q, step.prompt_ids, step.prompt_mask)  # (B,)
    return float(J.sum()) / step.tokens.numel()


@pytest.mark.parametrize("delta", [1.0, 2.0])
def test_red_green_dlm_beats_kgw_naive_on_expected_green(delta):
    """Same key, δ and marginals: E[green fraction] base < kgw-naive < red-green-dlm (both terms),
    and each of red-green-dlm's two gradient terms alone already beats the base."""
    reg = get_registry()
    key = _key(1)
    common = {"gamma": 0.25, "delta": delta, "context": [-1]}
    exact = {"top_k_context": V, "top_k_token": V}
    rg = reg.create("scheme", "red-green-dlm", {**common, **exact}, key, V)
    kgw = reg.create("scheme", "kgw-naive", common, key, V)
    step = _random_state(3, 16, seed=3)
    logits = step.marginals.logits.clone()

    def fresh():  # the hooks may tilt the canvas logits in place: a new step per call
        return dataclasses.replace(step, marginals=Marginals.canvas(logits.clone(), step.masked))

    base = _expected_green_fraction(rg, step, logits)
    f_kgw = _expected_green_fraction(rg, step, kgw.process_logits(fresh()))
    f_rg = _expected_green_fraction(rg, step, rg.process_logits(fresh()))
    assert base < f_kgw < f_rg
    assert f_rg - base > 1.5 * (f_kgw - base)  # red-green-dlm also tilts masked positions with masked contexts
    for terms in ("expectation-boost", "predictive-bias"):
        one = reg.create("scheme", "red-green-dlm", {**common, **exact, "terms": terms}, key, V)
        assert _expected_green_fraction(rg, step, one.process_logits(fresh())) > base


@pytest.mark.parametrize("context", [[-1], [-1, 1]])
def test_red_green_dlm_packed_rows_equal_full_rows(context):
    """Packed masked rows (ragged |M_t|, garbage in the padding rows), all of them or only those its
    declared reads name (the neighbours of the sampled rows), give the same tilt at the sampled rows
    as the full canvas."""
    from sketchwm.engine import packed_masked_positions

    rg = get_registry().create("scheme", "red-green-dlm", {"context": context, "top_k_context": 8, "top_k_token": 16}, _key(4), V)
    step = _random_state(3, 12, seed=9)
    step.masked[1, :] = False
    step.masked[1, 3] = True  # text 1 has one masked position: padding rows for it
    step.tokens[step.masked] = MASK
    logits = step.marginals.logits.clone()
    mpos, mvalid = packed_masked_positions(step.masked)
    assert not bool(mvalid.all())
    pos, ok = mpos[:, :1], torch.ones(3, 1, dtype=torch.bool)  # (B, 1) a masked row per text
    full = rg.process_logits(dataclasses.replace(step, marginals=Marginals.canvas(logits.clone(), step.masked)))
    want = torch.gather(full, 1, pos[..., None].expand(-1, -1, V))
    for reads in (None, rg.reads):
        m = Marginals.select(logits, step.masked, pos, ok, reads)
        m.logits[~m.valid] = 7.0  # padding rows: unspecified
        assert torch.allclose(want, rg.process_logits(dataclasses.replace(step, marginals=m)), atol=1e-6)


@pytest.mark.parametrize("context", [[-1], [-1, 1], [1], [-2, 2]])
def test_red_green_dlm_reads_only_the_rows_its_terms_need(context):
    """The candidates (top-k and normaliser) computed on the rows the targets' terms of J read give
    bit-for-bit the tilt that candidates on every held row give (every masked row held, targets
    spread over the canvas, a text with one masked row)."""
    rg = get_registry().create("scheme", "red-green-dlm", {"context": context, "top_k_context": 8, "top_k_token": 16}, _key(6), V)
    step = _random_state(3, 24, seed=11)
    step.masked[1, :] = False
    step.masked[1, 5] = True
    step.tokens[step.masked] = MASK
    logits = step.marginals.logits.clone()
    pos = torch.stack([step.masked[b].nonzero()[:, 0][torch.tensor([0, -1])] for b in range(3)])  # (B, 2)
    ok = torch.ones_like(pos, dtype=torch.bool)
    m = Marginals.select(logits, step.masked, pos, ok, MarginalReads.masked())
    assert int(m.valid.sum()) > 2 * 3  # more rows held than the targets
    got = rg.tilt(dataclasses.replace(step, marginals=m))
    read = rg.read_positions(*rg.gradient_rows(pos, 24), 24)
    assert 2 * int(read.gather(1, m.positions)[m.valid].sum()) <= int(m.valid.sum())  # the rows-read path runs
    rg.read_positions = lambda *a: None  # every held row's candidates
    want = rg.tilt(dataclasses.replace(step, marginals=Marginals.select(logits, step.masked, pos, ok, MarginalReads.masked())))
    assert torch.equal(got.index, want.index) and torch.equal(got.value, want.value)


def test_red_green_dlm_gradient_matches_finite_difference():
    """∂J/∂p from autograd equals a finite difference of J (context {-1, +1}; the perturbed token is
    a top-1 candidate, so the top-k truncation is locally fixed and J is smooth)."""
    reg = get_registry()
    rg = reg.create("scheme", "red-green-dlm", {"context": [-1, 1], "top_k_context": 8, "top_k_token": 16}, _key(2), V)
    step = _random_state(1, 6, seed=5)
    grad = rg.tilt_direction(step)  # (1, 6, V)
    probs = torch.softmax(step.marginals.logits.double(), -1)
    onehot = torch.nn.functional.one_hot(step.tokens.clamp(0, V - 1), V).double()
    q = torch.where(step.masked[..., None], probs, onehot)
    b, i = step.masked.nonzero()[0].tolist()
    v = int(probs[b, i].argmax())
    eps = 1e-4
    q_hi, q_lo = q.clone(), q.clone()
    q_hi[b, i, v] += eps
    q_lo[b, i, v] -= eps
    fd = (rg.expected_green(q_hi, step.prompt_ids, step.prompt_mask) - rg.expected_green(q_lo, step.prompt_ids, step.prompt_mask)) / (2 * eps)
    assert math.isclose(float(fd), float(grad[b, i, v]), rel_tol=1e-3, abs_tol=1e-5)


def test_first_occurrence_matches_python():
    g = torch.Generator().manual_seed(0)
    keys = torch.randint(0, 6, (5, 20), generator=g)
    ok = torch.rand((5, 20), generator=g) < 0.8
    got = first_occurrence(keys, ok)
    for b in range(5):
        seen = set()
        for i in range(20):
            want = bool(ok[b, i]) and int(keys[b, i]) not in seen
            if ok[b, i]:
                seen.add(int(keys[b, i]))
            assert bool(got[b, i]) == want


def _lev(cost: list[list[float]], gamma: float) -> list[list[float]]:
    m, k = len(cost), len(cost[0])
    A = [[0.0] * (k + 1) for _ in range(m + 1)]
    for i in range(m + 1):
        for j in range(k + 1):
            if i == 0 or j == 0:
                A[i][j] = (i + j) * gamma
            else:
                A[i][j] = min(A[i - 1][j] + gamma, A[i][j - 1] + gamma, A[i - 1][j - 1] + cost[i - 1][j - 1])
    return A


@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_levenshtein_min_matches_brute_force(gamma):
    """Both windows of :func:`levenshtein_min` against a plain Python DP (KTH eq. 8)."""
    g = torch.Generator().manual_seed(1)
    R, M, n = 4, 6, 4
    cost = torch.log1p(-torch.rand((R, M, n), generator=g, dtype=torch.float64))
    lengths = torch.tensor([6, 3, 1, 5])
    fixed = levenshtein_min(cost, lengths, gamma, "fixed")
    free = levenshtein_min(cost, lengths, gamma, "free")
    K = n + M - 1
    for r in range(R):
        m = int(lengths[r])
        rows = cost[r, :m].tolist()
        want_fixed = min(_lev([[row[(s + j) % n] for j in range(m)] for row in rows], gamma)[m][m] for s in range(n))
        unrolled = [[row[c % n] for c in range(K)] for row in rows]
        want_free = min(min(_lev([row[s:] for row in unrolled], gamma)[m]) for s in range(K))
        assert math.isclose(float(fixed[r]), want_fixed, abs_tol=1e-9)
        assert math.isclose(float(free[r]), want_free, abs_tol=1e-9)


@pytest.mark.parametrize(
    "name,params,bound",
    [
        ("aar-gumbel", {"keying": "position"}, 1e-3),
        ("kth-exp-edit", {"key_len": 32, "window": "free", "n_permutations": 49}, 0.03),
        ("red-green-dlm", {"context": [-1, 1], "top_k_context": 8}, 1e-3),
        ("red-green-dlm", {"terms": "expectation-boost", "normalize": True, "delta": 4.0}, 1e-2),
        ("kgw-naive", {"context": [-1, 1], "hash": "ordered", "delta": 4.0}, 1e-2),  # both neighbours must be known
    ],
)
def test_non_default_variants_round_trip(name, params, bound, tiny):
    """Configurable variants the conformance suite (defaults only) does not reach: watermarked
    texts (6 × 64 tokens, tiny model) have a median p-value below ``bound``, unwatermarked ones
    a median above 0.05."""
    from sketchwm.engine import MaskedDiffusionSampler

    cfg = {"gen_length": 64, "block_length": 64, "steps": 32}
    prompts = ["the water", "a man said", "one day", "people like", "time", "we can"]
    scheme = get_registry().create("scheme", name, params, _key(3), tiny.vocab_size)
    wm = MaskedDiffusionSampler(tiny, cfg, scheme).generate(prompts, torch.Generator().manual_seed(4)).ids
    base = MaskedDiffusionSampler(tiny, cfg).generate(prompts, torch.Generator().manual_seed(4)).ids
    ones = torch.ones_like(wm, dtype=torch.bool)
    assert float(scheme.score_ids(wm, ones).p_value.median()) < bound
    assert float(scheme.score_ids(base, ones).p_value.median()) > 0.05
