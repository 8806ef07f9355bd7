"""Theory checks of the benchmark harness: the paper's statements measured on the schemes as built.

Four checks, each a benchmark cell kind whose numbers the ``theory`` metrics
(:mod:`sketchwm.bench.builtin_metrics`) put in the leaderboard's "Theory checks" table:

* ``theory-kl`` — **KL chain rule** (Theorem 5.1, eq. 9 with the factorised transition of eq. 11).
  Texts are generated with random remasking (positions chosen independently of the tilt, so the
  remasking rule is the unwatermarked one, the theorem's condition for eq. 11 with equality) at
  temperature 1, top-p 1. For every text the recorder sums, over the rows the sampler commits,
  (i) KL(p̃_i‖p_i) — the chain-rule formula, Σ_t E[KL(Q̃_t‖Q_t)] along the path — and (ii) the
  trajectory log-likelihood ratio log dP̃/dP = Σ log p̃_i(y_i)/p_i(y_i) of the tokens actually
  drawn. Under P̃, E[(ii)] = D_KL(P̃‖P) = E[(i)]: the check reports both means and the Monte-Carlo
  z of their difference (|z| ≲ 3 when the identity holds).
  Same cell, **Fisher expansion** (Corollary 5.3, eq. 16): for every tilted row the scheme's own
  logit shift g = η_t a_{k,t} (its output minus the model's logits) is scaled by s ∈ ``fisher_scales``
  and KL(p_s‖p), p_s ∝ p·e^{s g}, is compared with ½ s² Var_p(g) = ½ (sη_t)² Var_p(a): the ratio
  Σ KL / Σ ½ s² Var over rows tends to 1 as s → 0.
* ``theory-sound`` — **per-key soundness**: for ``n_keys`` keys (HMAC-SHA256 of the run's
  ``key_seed``, domain ``sketchwm/bench/theory-key``) and each human domain
  (``heldout-manpages``, ``heldout-culture``: sources no model or prior was fitted on), the fraction
  of passages (cut to the unit's length) with p ≤ α. Reported: the largest FPR over keys and
  domains, and the number of (key, domain) pairs for which a one-sided binomial test rejects
  FPR ≤ α at level 0.01 / (number of pairs) (Bonferroni): 0 when every key is sound.
* ``theory-edit`` — **edit sensitivity** (Lemma 5.5, Theorem 5.6): k random token edits
  (substitutions, insertions, deletions) of the unit's watermarked texts; for every pair the
  observed |S_k(y) − S_k(y')| of the penalised score (eq. 2) on the scheme's sketch h = H/√N is
  compared with the bound (2√D + λ(‖h‖+‖h'‖))·c·L_φ·E/√N_min, c = 2 at equal normaliser (eq. 23)
  else 3 (eq. 22), E the Levenshtein distance, L_φ = max_v ‖φ(v)‖ (√d for Count-Sketch). Reported:
  the largest observed/bound ratio (≤ 1 if the theorem holds) and the number of violations.
  Schemes without a sketch and a penalised score (every baseline) have no such bound: no value.

The pure functions (:func:`chain_rule_summary`, :func:`fisher_terms`, :func:`soundness_summary`,
:func:`edit_bound`) take arrays so the tests can feed them wrong inputs and see the check fail.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from typing import Any, Sequence

import numpy as np
import torch

from ..keys import WatermarkKey

__all__ = ["PathRecorder", "chain_rule_summary", "fisher_terms", "soundness_summary", "edit_bound", "theory_key",
           "random_edits", "THEORY_KINDS"]

#: cell kinds of the theory checks
THEORY_KINDS = ("theory-kl", "theory-sound", "theory-edit")


# ---------------------------------------------------------------------------- (a), (b) sampling path
def fisher_terms(base: torch.Tensor, shift: torch.Tensor, scales: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Σ over rows of KL(p_s‖p) and of ½ s² Var_p(g) for each scale s (Corollary 5.3, eq. 16).

    Args:
        base: (M, V) float logits of the model's marginals p (−inf on banned ids).
        shift: (M, V) float logit shift g of the scheme (tilted minus base; non-finite entries
            where p = 0 are ignored).
        scales: S positive floats.

    Returns:
        (kl (S,), half_var (S,)) float64: exact KL(p_s‖p) with p_s ∝ p·exp(s g), and ½ s² Var_p(g),
        summed over the M rows.
    """
    lp = torch.log_softmax(base.double(), -1)  # (M, V)
    p = lp.exp()
    g = torch.where(torch.isfinite(lp) & torch.isfinite(shift), shift.double(), torch.zeros_like(lp))  # (M, V)
    g = g - (p * g).sum(-1, keepdim=True)  # centred under p (a per-row constant does not change the tilt)
    var = (p * g * g).sum(-1)  # (M,) Var_p(g)
    kl, half = [], []
    for s in scales:  # a handful of scales, each vectorised over rows × vocabulary
        lq = torch.log_softmax(lp + s * g, -1)
        kl.append(float((lq.exp() * (lq - lp).nan_to_num(0.0, 0.0, 0.0)).sum()))
        half.append(float(0.5 * s * s * var.sum()))
    return np.array(kl), np.array(half)


class PathRecorder:
    """Wraps a scheme's ``process_logits`` to record, per text, the chain-rule KL and the path log-ratio.

    Use: ``rec.begin(B)``, generate one batch with ``scheme.process_logits = rec.wrap(original)``,
    then ``rec.end(final_ids)``; :attr:`kl_sum` and :attr:`log_ratio` (lists of (B,) float64 arrays,
    one per batch) hold Σ KL(p̃_i‖p_i) and Σ log p̃_i(y_i)/p_i(y_i) over the committed rows of each
    text (nats). A row is committed at the step after which its position is no longer masked (its
    token never changes again), so rows are resolved one call later, against the next state.

    Args:
        scales: Fisher scales s (see :func:`fisher_terms`); the sums over all tilted rows accumulate in
            :attr:`fisher_kl` and :attr:`fisher_half_var` ((S,) float64).
    """

    def __init__(self, scales: Sequence[float] = ()):
        self.scales = list(scales)
        self.kl_sum: list[np.ndarray] = []
        self.log_ratio: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []
        self.fisher_kl = np.zeros(len(self.scales))
        self.fisher_half_var = np.zeros(len(self.scales))
        self.keyed_uniforms = False
        self._pending: tuple[torch.Tensor, ...] | None = None

    def begin(self, batch: int) -> None:
        """Start a batch of ``batch`` texts."""
        self._acc = [np.zeros(batch), np.zeros(batch), np.zeros(batch, dtype=np.int64)]
        self._pending = None

    def _resolve(self, tokens: torch.Tensor, unmasked: torch.Tensor) -> None:
        """Credit the pending rows committed by now: tokens, unmasked (B, G)."""
        if self._pending is None:
            return
        pos, fresh, lr, kl = self._pending  # (B, R), (B, R) bool, (B, R, V), (B, R)
        done = fresh & torch.gather(unmasked, 1, pos)  # (B, R)
        tok = torch.gather(tokens, 1, pos)  # (B, R)
        lr_tok = torch.gather(lr, 2, tok[..., None])[..., 0].double()  # (B, R)
        self._acc[0] += torch.where(done, kl, torch.zeros_like(kl)).sum(1).cpu().numpy()
        self._acc[1] += torch.where(done, lr_tok, torch.zeros_like(lr_tok)).sum(1).cpu().numpy()
        self._acc[2] += done.sum(1).cpu().numpy()
        self._pending = None

    def end(self, final_ids: torch.Tensor) -> None:
        """Close the batch against the final canvas ids (B, G) int64."""
        ids = final_ids.to(self._pending[0].device) if self._pending is not None else final_ids
        self._resolve(ids, torch.ones_like(ids, dtype=torch.bool))
        self.kl_sum.append(self._acc[0])
        self.log_ratio.append(self._acc[1])
        self.rows.append(self._acc[2])

    def wrap(self, process_logits: Any) -> Any:
        """``process_logits`` that records (the returned logits are the scheme's, unchanged)."""
        def wrapped(step: Any) -> torch.Tensor:
            self._resolve(step.tokens, ~step.masked)
            base = step.logits.detach().clone()
            out = process_logits(step)
            B, G = step.tokens.shape
            if step.positions is not None:
                pos = step.positions  # (B, K)
            else:
                pos = torch.arange(G, device=base.device).expand(B, -1)  # (B, G)
            R = pos.shape[1]
            # rows that are masked now, first occurrence of their position (padding rows repeat others)
            first = torch.full((B, G), R, dtype=torch.long, device=base.device).scatter_reduce(
                1, pos, torch.arange(R, device=base.device).expand(B, -1), "amin", include_self=True)
            fresh = (torch.gather(first, 1, pos) == torch.arange(R, device=base.device)[None]) & torch.gather(step.masked, 1, pos)
            if step.positions is None:
                g = torch.arange(G, device=base.device)[None]
                fresh &= (g >= step.block[0]) & (g < step.block[1])
            lp, lq = torch.log_softmax(base.double(), -1), torch.log_softmax(out.double(), -1)  # (B, R, V)
            lr = (lq - lp).nan_to_num(0.0, 0.0, 0.0)
            kl = (lq.exp() * lr).sum(-1)  # (B, R)
            self._pending = (pos, fresh, lr.float(), kl)
            if self.scales and bool(fresh.any()):
                k, h = fisher_terms(base[fresh], (out - base)[fresh], self.scales)
                self.fisher_kl += k
                self.fisher_half_var += h
            return out
        return wrapped

    def wrap_uniforms(self, sampling_uniforms: Any) -> Any:
        """``sampling_uniforms`` that notes whether the scheme samples with keyed uniforms."""
        def wrapped(step: Any) -> Any:
            u = sampling_uniforms(step)
            self.keyed_uniforms |= u is not None
            return u
        return wrapped


def chain_rule_summary(kl_sum: np.ndarray, log_ratio: np.ndarray) -> dict[str, float]:
    """Monte-Carlo comparison of the chain-rule KL with the path log-likelihood ratio (Theorem 5.1).

    Args:
        kl_sum, log_ratio: (n,) float64 per text, nats (see :class:`PathRecorder`).

    Returns:
        ``{"kl_chain": mean Σ KL, "kl_path": mean log-ratio, "z": (mean difference)/(its standard
        error), "n": n}``; z is NaN with fewer than 2 texts and 0 when every difference is 0.
    """
    kl_sum, log_ratio = np.asarray(kl_sum, np.float64), np.asarray(log_ratio, np.float64)
    d = log_ratio - kl_sum
    n = d.size
    if n < 2:
        z = float("nan")
    else:
        se = d.std(ddof=1) / math.sqrt(n)
        z = 0.0 if se == 0 and d.mean() == 0 else float(d.mean() / se) if se > 0 else float("inf") * np.sign(d.mean())
    return {"kl_chain": float(kl_sum.mean()) if n else float("nan"),
            "kl_path": float(log_ratio.mean()) if n else float("nan"), "z": z, "n": n}


# ---------------------------------------------------------------------------- (c) soundness
def theory_key(key_seed: str, index: int) -> WatermarkKey:
    """Key ``index`` of the soundness check: HMAC-SHA256(key_seed, "sketchwm/bench/theory-key/<index>")."""
    return WatermarkKey(hmac.new(key_seed.encode(), f"sketchwm/bench/theory-key/{index}".encode(), hashlib.sha256).digest())


def soundness_summary(p_values: np.ndarray, alpha: float, level: float = 0.01) -> dict[str, float]:
    """Per-key false-positive rates at ``alpha`` and a Bonferroni binomial test of FPR ≤ α for each.

    Args:
        p_values: (K, n) float64, p-values of n human texts under each of K (key, domain) pairs.
        alpha: the nominal level; level: family-wise level of the binomial tests.

    Returns:
        ``{"max_fpr", "mean_fpr", "rejected" (pairs whose FPR is significantly above α), "pairs", "n"}``.
    """
    from scipy.stats import binom

    p = np.asarray(p_values, np.float64)
    hits = (p <= alpha).sum(1)  # (K,)
    n = p.shape[1]
    tail = binom.sf(hits - 1, n, alpha)  # P(Bin(n, α) ≥ hits)
    rejected = int((tail < level / max(1, p.shape[0])).sum())
    fpr = hits / max(n, 1)
    return {"max_fpr": float(fpr.max()), "mean_fpr": float(fpr.mean()), "rejected": rejected,
            "pairs": int(p.shape[0]), "n": int(n)}


# ---------------------------------------------------------------------------- (d) edit sensitivity
def random_edits(ids: Sequence[int], k: int, vocab: np.ndarray, rng: np.random.Generator,
                 kinds: Sequence[str] = ("substitute", "insert", "delete")) -> list[int]:
    """``ids`` after ``k`` random token edits of random kinds (tokens drawn from ``vocab``); keeps ≥ 1 token."""
    out = list(ids)
    for _ in range(k):
        kind = kinds[int(rng.integers(len(kinds)))]
        if kind == "delete" and len(out) <= 1:
            kind = "substitute"
        tok = int(vocab[int(rng.integers(len(vocab)))])
        if kind == "substitute":
            out[int(rng.integers(len(out)))] = tok
        elif kind == "insert":
            out.insert(int(rng.integers(len(out) + 1)), tok)
        else:
            del out[int(rng.integers(len(out)))]
    return out


def edit_bound(E: np.ndarray, n: np.ndarray, n2: np.ndarray, hn: np.ndarray, hn2: np.ndarray, D: int, lam: float,
               L_phi: float) -> np.ndarray:
    """Theorem 5.6's bound on |S_k(y) − S_k(y')|: (2√D + λ(‖h‖+‖h'‖))·c·L_φ·E/√N_min.

    Args:
        E: (m,) edit distances; n, n2: (m,) sketch normalisers N, N' (token counts of the sketch);
        hn, hn2: (m,) ‖h‖, ‖h'‖; D: sketch dimension; lam: λ; L_phi: max_v ‖φ(v)‖.

    Returns:
        (m,) float64; c = 2 where N = N' (eq. 23), 3 otherwise (eq. 22).
    """
    E, n, n2 = (np.asarray(x, np.float64) for x in (E, n, n2))
    c = np.where(n == n2, 2.0, 3.0)
    lip = 2 * math.sqrt(D) + lam * (np.asarray(hn, np.float64) + np.asarray(hn2, np.float64))
    return lip * c * L_phi * E / np.sqrt(np.maximum(np.minimum(n, n2), 1.0))
