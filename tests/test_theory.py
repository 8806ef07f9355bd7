"""Theory checks (sketchwm.bench.theory): the paper's statements measured on the tiny model, and each
check shown to fail when fed a wrong formula, an unsound p-value or a wrong bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sketchwm.api import Watermarker
from sketchwm.bench.config import BenchConfig
from sketchwm.bench.leaderboard import aggregate, tables
from sketchwm.bench.results import read_results
from sketchwm.bench.runner import run_bench
from sketchwm.bench.theory import (PathRecorder, adversarial_substitutions, chain_rule_summary, edit_bound,
                                   edit_ratios, fisher_terms, soundness_summary)
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.testing import tiny_texts

pytestmark = pytest.mark.usefixtures("one_thread")

SCALES = [1.0, 0.25, 1 / 16, 1 / 64]
#: the paper's count sketch with its key-randomised score (Theorem 5.6 is about S_k on this sketch)
COUNT = {"prior": {"source": "uniform"}, "delta": 2.0, "null": "key-randomised",
         "sketch": {"name": "count-sketch", "params": {"d": 4, "w": 64, "counting": "count"}}}


@pytest.fixture(scope="module")
def scheme(tiny):
    from sketchwm.keys import WatermarkKey

    return Watermarker(WatermarkKey(bytes(range(32))), {"scheme": {"name": "global-sketch", "params": COUNT}},
                       backend=tiny).scheme


def record(tiny, scheme, divergence=None, n=48):
    """Generate n texts of 16 tokens (random remasking) with a PathRecorder; returns (recorder, ids)."""
    rec = PathRecorder(SCALES, divergence)
    sampler = MaskedDiffusionSampler(tiny, {"gen_length": 16, "steps": 16, "block_length": 16,
                                            "remasking": "random"}, scheme)
    out = sampler.generate(tiny_texts(n, 4, 0, punct=False), torch.Generator().manual_seed(1), observers=[rec])
    return rec, [x.tolist() for x in out.ids]


@pytest.fixture(scope="module")
def path(tiny, scheme):
    return record(tiny, scheme)


def test_chain_rule_matches_the_path_log_likelihood_ratio(path):
    """Theorem 5.1: E_P̃[log dP̃/dP] = Σ_t E_P̃[KL(Q̃_t‖Q_t)], the sum over committed rows of KL(p̃‖p)."""
    rec, _ = path
    assert all((r == 16).all() for r in rec.rows)  # every position credited exactly once
    s = chain_rule_summary(np.concatenate(rec.kl_sum), np.concatenate(rec.log_ratio))
    assert s["kl_chain"] > 5  # a real tilt (δ = 2 on 16 tokens), not a vacuous 0 = 0
    assert abs(s["z"]) < 4, s


def test_chain_rule_check_catches_a_wrong_formula(tiny, scheme):
    """Crediting the reverse divergence KL(p‖p̃) per row instead of KL(p̃‖p) is rejected."""
    reverse = lambda lp, lq: (lp.exp() * (lp - lq).nan_to_num(0.0, 0.0, 0.0)).sum(-1)  # noqa: E731
    rec, _ = record(tiny, scheme, reverse)
    s = chain_rule_summary(np.concatenate(rec.kl_sum), np.concatenate(rec.log_ratio))
    assert abs(s["z"]) > 4, s


def test_fisher_ratio_tends_to_one(path):
    """Corollary 5.3 (eq. 16): KL(p_η‖p) / (½η²Var_p a) → 1 as η → 0, and a missing ½ is caught."""
    rec, _ = path
    ratio = rec.fisher_kl / rec.fisher_half_var
    err = np.abs(ratio - 1)
    assert np.all(np.diff(err) < 0) and err[-1] < 0.02, ratio
    wrong = rec.fisher_kl / (2 * rec.fisher_half_var)  # η²Var_p(a): the constant of eq. 16 dropped
    assert abs(wrong[-1] - 1) > 0.4


def test_fisher_terms_exact_on_a_two_point_law():
    """Two tokens, p = (½, ½), a = (±1): KL(p_η‖p) = η tanh η − log cosh η and Var_p a = 1."""
    base = torch.zeros(1, 2)
    shift = torch.tensor([[1.0, -1.0]])
    kl, half = fisher_terms(base, shift, [0.5, 0.01])
    eta = np.array([0.5, 0.01])
    np.testing.assert_allclose(kl, eta * np.tanh(eta) - np.log(np.cosh(eta)), rtol=1e-9)
    np.testing.assert_allclose(half, 0.5 * eta**2, rtol=1e-12)


def test_soundness_summary_flags_an_unsound_key():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(20, 400))
    ok = soundness_summary(p, 0.05)
    assert ok["rejected"] == 0 and ok["max_fpr"] < 0.1
    p[3] /= 3  # one key whose p-values are three times too small: FPR ≈ 15% at α = 5%
    bad = soundness_summary(p, 0.05)
    assert bad["rejected"] == 1 and bad["max_fpr"] > 0.1


def test_edit_sensitivity_bound_holds_and_a_wrong_bound_is_caught(path, scheme, tiny):
    """Theorem 5.6 on random edits and on the score-lowering substitutions; a bound that takes ‖u_k‖ = 1 and
    drops the penalty term (Lipschitz constant 2 instead of 2√D + λ(‖h‖+‖h'‖)) is violated."""
    _, ids = path
    vocab = np.setdiff1d(np.arange(tiny.vocab_size), [tiny.mask_token_id, *tiny.banned_token_ids])
    wrong = lambda E, n, n2, h1, h2, D, lam, L: edit_bound(E, n, n2, 0 * h1, 0 * h2, 1, lam, L)  # noqa: E731
    for k in (1, 4, 16):
        r = edit_ratios(scheme, ids, k, vocab, seed=k)
        assert r.shape == (3 * len(ids),) and np.all(np.isfinite(r))
        assert r.max() <= 1.0, (k, r.max())
        assert edit_ratios(scheme, ids, k, vocab, seed=k, bound_fn=wrong).max() > 1.0


def test_adversarial_substitution_moves_the_inner_product_most():
    c = np.array([-4.0, 0.0, 2.0, 4.0])
    assert adversarial_substitutions([0, 1, 2, 3], 2, c, np.arange(4), 1) == [3, 3, 2, 3]
    assert adversarial_substitutions([0, 1, 2, 3], 2, c, np.arange(4), -1) == [0, 1, 0, 0]


def test_theory_table_on_the_leaderboard(tmp_path):
    """A config with ``theory:`` runs the four checks and the leaderboard shows them in their own table."""
    cfg = BenchConfig.model_validate({
        "name": "th", "backends": [{"name": "tiny"}], "lengths": [16], "keys": 2, "tokens_step": 0,
        "schemes": [{"name": "global-sketch", "label": "gs-count", "params": COUNT}, {"name": "aar-gumbel"}],
        "prompt_sets": [{"name": "w", "source": "tiny", "n": 8}], "n_null_cal": 20, "n_null_fpr": 10,
        "sampler": {"steps": 16}, "batch_size": 64,
        "theory": {"n_texts": 24, "fisher_scales": [1.0, 0.01], "domains": ["tiny", "human"], "n_human": 40,
                   "n_keys": 3, "edit_counts": [2], "n_edit": 8},
    })
    assert run_bench(cfg, tmp_path, progress=False)["cells"] == 2 * (2 + 1 + 2 + 1 + 1)
    (t,) = [t for t in tables(aggregate(read_results(tmp_path))) if t.task == "theory"]
    assert list(t.mean.columns) == ["kl-chain", "kl-chain-z", "kl-path", "fisher-ratio s=1", "fisher-ratio s=0.01",
                                    "sound-max-fpr@1%", "sound-max-fpr@5%", "sound-rejected",
                                    "edit-bound-ratio k=2", "edit-bound-violations k=2"]
    gs = t.mean.loc["gs-count"]
    assert gs["kl-chain"] > 0 and abs(gs["kl-chain-z"]) < 4 and abs(gs["fisher-ratio s=0.01"] - 1) < 0.02
    assert 0 <= gs["edit-bound-ratio k=2"] <= 1 and gs["edit-bound-violations k=2"] == 0
    assert gs["sound-rejected"] == 0
    aar = t.mean.loc["aar-gumbel"]
    assert np.isnan(aar["kl-chain"]) and np.isnan(aar["edit-bound-ratio k=2"])  # no tilt, no sketch: n/a
    assert np.isfinite(aar["sound-max-fpr@5%"])
    with pytest.raises(ValueError, match="theory.schemes"):
        BenchConfig.model_validate({**cfg.model_dump(), "theory": {"schemes": ["nope"]}})
