"""Theory checks of the benchmark harness: the paper's statements measured on the schemes as built.

Four checks, each a benchmark cell kind (:mod:`sketchwm.bench.builtin_kinds`) whose numbers the ``theory``
metrics (:mod:`sketchwm.bench.builtin_metrics`) put in the leaderboard's "Theory checks" table:

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
  (substitutions, insertions, deletions) of the watermarked texts of ``theory-kl``, and the k
  substitutions that move the score most; for every pair the
  observed |S_k(y) − S_k(y')| of the penalised score (eq. 2) on the scheme's sketch h = H/√N is
  compared with the bound (2√D + λ(‖h‖+‖h'‖))·c·L_φ·E/√N_min, c = 2 at equal normaliser (eq. 23)
  else 3 (eq. 22), E the Levenshtein distance, L_φ = max_v ‖φ(v)‖ (√d for Count-Sketch). Reported:
  the largest observed/bound ratio (≤ 1 if the theorem holds) and the number of violations.
  Schemes without a sketch and a penalised score (every baseline) have no such bound: no value.

The pure functions (:func:`chain_rule_summary`, :func:`fisher_terms`, :func:`soundness_summary`,
:func:`edit_bound`) take arrays so the tests can feed them wrong inputs and see the check fail.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from ..keys import WatermarkKey
from ..observers import TiltObserver
from .seeds import bench_key

__all__ = ["PathRecorder", "chain_rule_summary", "fisher_terms", "soundness_summary", "edit_bound", "edit_ratios",
           "random_edits", "adversarial_substitutions", "sampling_path", "soundness_pvalues", "theory_key",
           "has_penalised_sketch"]


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


class PathRecorder(TiltObserver):
    """Sampler observer that records, per text, the chain-rule KL and the path log-ratio.

    Pass it to :meth:`sketchwm.engine.MaskedDiffusionSampler.generate` (``observers=[rec]``); after
    each batch :attr:`kl_sum` and :attr:`log_ratio` (lists of (B,) float64 arrays, one per batch)
    hold Σ KL(p̃_i‖p_i) and Σ log p̃_i(y_i)/p_i(y_i) over the committed rows of each text (nats), and
    :attr:`rows` ((B,) int64 per batch) the number of rows credited. A row is committed at the step
    after which its position is no longer masked (its token never changes again), so rows are
    resolved one step later, against the next state, and the last ones against the batch's final ids.

    Args:
        scales: Fisher scales s (see :func:`fisher_terms`); the sums over all tilted rows accumulate in
            :attr:`fisher_kl` and :attr:`fisher_half_var` ((S,) float64).
        divergence: (log p (…, V), log p̃ (…, V)) → (…,) float64 per-row divergence credited as the
            chain-rule term; default KL(p̃‖p) (the tests pass a wrong one to see the check fail).

    Attributes:
        keyed_uniforms: whether the scheme supplied keyed uniforms at any observed step (its tokens
            were then not drawn from softmax of its logits).
    """

    def __init__(self, scales: Sequence[float] = (), divergence: Any = None):
        self.scales = list(scales)
        self.divergence = divergence or (lambda lp, lq: (lq.exp() * (lq - lp).nan_to_num(0.0, 0.0, 0.0)).sum(-1))
        self.kl_sum: list[np.ndarray] = []
        self.log_ratio: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []
        self.fisher_kl = np.zeros(len(self.scales))
        self.fisher_half_var = np.zeros(len(self.scales))
        self.keyed_uniforms = False
        self._pending: tuple[torch.Tensor, ...] | None = None

    def on_start(self, batch: int) -> None:
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

    def on_end(self, output: Any) -> None:
        """Close the batch against its final canvas ids ``output.ids`` (B, G) int64."""
        final_ids = output.ids
        ids = final_ids.to(self._pending[0].device) if self._pending is not None else final_ids
        self._resolve(ids, torch.ones_like(ids, dtype=torch.bool))
        self.kl_sum.append(self._acc[0])
        self.log_ratio.append(self._acc[1])
        self.rows.append(self._acc[2])

    def on_tilt(self, step: Any, before: torch.Tensor, after: torch.Tensor, uniforms: torch.Tensor | None) -> None:
        """Credit the rows the previous step committed, then keep this step's rows pending."""
        self._resolve(step.tokens, ~step.masked)
        self.keyed_uniforms |= uniforms is not None
        m = step.marginals
        B, G = step.tokens.shape
        pos = m.target_positions  # (B, K)
        R = pos.shape[1]
        dev = before.device
        # rows that are masked now, first occurrence of their position (padding rows repeat others)
        first = torch.full((B, G), R, dtype=torch.long, device=dev).scatter_reduce(
            1, pos, torch.arange(R, device=dev).expand(B, -1), "amin", include_self=True)
        fresh = ((torch.gather(first, 1, pos) == torch.arange(R, device=dev)[None])
                 & torch.gather(step.masked, 1, pos) & m.target_valid)
        lp, lq = torch.log_softmax(before.double(), -1), torch.log_softmax(after.double(), -1)  # (B, R, V)
        lr = (lq - lp).nan_to_num(0.0, 0.0, 0.0)
        kl = self.divergence(lp, lq)  # (B, R)
        self._pending = (pos, fresh, lr.float(), kl)
        if self.scales and bool(fresh.any()):
            k, h = fisher_terms(before[fresh], (after - before)[fresh], self.scales)
            self.fisher_kl += k
            self.fisher_half_var += h


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
    return bench_key(key_seed, "theory-key", index)


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


def adversarial_substitutions(ids: Sequence[int], k: int, c: np.ndarray, vocab: np.ndarray, sign: int = 1) -> list[int]:
    """``ids`` with ``k`` tokens replaced to move ⟨u_k, H⟩ the most: ``sign`` = 1 replaces the k tokens of
    lowest c(v) = ⟨u_k, φ_k(v)⟩ by the allowed token of highest c (score-raising), −1 the k of highest c
    by the lowest (score-lowering, a scrub). Each such substitution moves ⟨u, H⟩ by up to 2d.
    ``c``: (V,) float64; ``vocab``: allowed replacement ids.
    """
    out = np.asarray(ids, dtype=np.int64).copy()
    cs = sign * c
    best = int(vocab[np.argmax(cs[vocab])])
    order = np.argsort(cs[out], kind="stable")[: min(k, out.size)]
    out[order] = best
    return out.tolist()


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


# ---------------------------------------------------------------------------- cells of the harness
def _uses_keyed_uniforms(scheme: Any) -> bool:
    from ..components import WatermarkScheme

    return type(scheme).sampling_uniforms is not WatermarkScheme.sampling_uniforms


def sampling_path(backend: Any, scheme: Any, prompts: Sequence[str], sampler_config: dict[str, Any], batch_size: int,
                  scales: Sequence[float], seed: int) -> dict[str, Any]:
    """Generate a text for each of ``prompts`` under ``scheme`` with a :class:`PathRecorder` observing.

    Random remasking, temperature 1 and top-p 1 (the chain rule's conditions; the rest of the sampler
    settings from ``sampler_config``), in batches of ``batch_size``, randomness seeded by ``seed``.
    Returns ``{"kl_sum", "log_ratio", "rows" (n,), "fisher_kl", "fisher_half_var" (S,), "scales", "ids"
    (the texts' token ids, cut at a stop token), "note"}``; a scheme that samples with keyed uniforms
    (distortion-free schemes: tokens are not drawn from softmax of its logits) gets only a note.
    """
    from ..engine import MaskedDiffusionSampler

    if _uses_keyed_uniforms(scheme):
        return {"note": "samples with keyed uniforms (distortion-free): its tokens are not drawn from the tilted "
                        "marginals, so the chain rule has no tilt to check"}
    prompts = list(prompts)
    cfg = {**sampler_config, "temperature": 1.0, "top_p": 1.0, "remasking": "random"}
    sampler = MaskedDiffusionSampler(backend, cfg, scheme)
    gen = torch.Generator(device=backend.device).manual_seed(seed % 2**62)
    rec = PathRecorder(scales)
    ids: list[list[int]] = []
    for i in range(0, len(prompts), batch_size):
        out = sampler.generate(prompts[i:i + batch_size], gen, observers=[rec])
        ids += [row[: int(n)] for row, n in zip(out.ids.tolist(), out.lengths.tolist())]
    note = "keyed uniforms returned during sampling" if rec.keyed_uniforms else ""
    return {"kl_sum": np.concatenate(rec.kl_sum), "log_ratio": np.concatenate(rec.log_ratio),
            "rows": np.concatenate(rec.rows), "fisher_kl": rec.fisher_kl, "fisher_half_var": rec.fisher_half_var,
            "scales": list(scales), "ids": ids, "note": note}


def soundness_pvalues(encode: Any, length: int, scheme_under: Any, key_seed: str, seed: int, spec: Any) -> np.ndarray:
    """p-values of human texts under fresh keys: (n_keys·len(domains), n) float64 (NaN read as 1).

    Args:
        encode: texts → token-id lists (the backend's tokenizer); length: texts are cut to this many tokens.
        scheme_under: a :class:`sketchwm.keys.WatermarkKey` → the scheme under that key.
        key_seed: the run's key seed (:func:`theory_key`); seed: the run's seed (which passages are drawn).
        spec: the config's :class:`sketchwm.bench.config.TheorySpec` (``domains``, ``n_human``, ``n_keys``).
    """
    from ..data import load_prompts
    from ..detection import pad_ids
    from .seeds import derive_seed as _seed

    doms = []
    for src in spec.domains:
        texts = load_prompts(src, spec.n_human, seed=_seed(seed, "theory", src))
        doms.append([ids[:length] for ids in encode(texts)])
    n = min(len(d) for d in doms)
    rows = []
    for k in range(spec.n_keys):
        scheme = scheme_under(theory_key(key_seed, k))
        for ids in doms:
            x, valid = pad_ids(ids[:n])
            p = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy()
            rows.append(np.nan_to_num(p, nan=1.0))
    return np.stack(rows)


def edit_ratios(scheme: Any, ids: list[list[int]], k: int, vocab: np.ndarray, seed: int,
                bound_fn: Any = None) -> np.ndarray | None:
    """Observed |ΔS_k| / bound after ``k`` random edits of each text, then (schemes with
    ``token_weights``) after its ``k`` score-raising and its ``k`` score-lowering substitutions
    (:func:`adversarial_substitutions`): (n,) or (3n,) float64. None when the scheme has no sketch with a penalised score. ``bound_fn``
    replaces :func:`edit_bound` (the tests pass a wrong bound to see the check fail)."""
    from rapidfuzz.distance import Levenshtein

    from ..detection import pad_ids

    if not has_penalised_sketch(scheme):
        return None
    score_fn = scheme.score_fn
    rng = np.random.default_rng(seed)
    edited = [random_edits(x, k, vocab, rng) for x in ids]
    if hasattr(scheme, "token_weights"):  # plus the score-raising and score-lowering substitutions of each text
        c = scheme.token_weights().double().cpu().numpy()
        edited += [adversarial_substitutions(x, k, c, vocab, sg) for sg in (1, -1) for x in ids]
        ids = list(ids) * 3
    E = np.array([Levenshtein.distance(a, b) for a, b in zip(ids, edited)], dtype=np.float64)

    def sk(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, valid = pad_ids(seqs)
        h, nn = scheme.sketch_ids(x.to(scheme.device), valid.to(scheme.device))
        s = score_fn.score(scheme.u, h.double())
        return s.cpu().numpy(), nn.double().cpu().numpy(), h.double().norm(dim=1).cpu().numpy()

    s1, n1, h1 = sk(ids)
    s2, n2, h2 = sk(edited)
    sketch = scheme.sketch
    L_phi = math.sqrt(sketch.params.d) if hasattr(getattr(sketch, "params", None), "d") else _max_feature_norm(sketch)
    bound = (bound_fn or edit_bound)(E, n1, n2, h1, h2, sketch.dim, float(score_fn.lam), L_phi)
    diff = np.abs(s1 - s2)
    return np.where(bound > 0, diff / np.where(bound > 0, bound, 1.0), np.where(diff > 0, np.inf, 0.0))


def has_penalised_sketch(scheme: Any) -> bool:
    """Whether ``scheme`` has a sketch (``sketch_ids``) and a penalised score (``score_fn.lam``): Theorem 5.6's setting."""
    return hasattr(scheme, "sketch_ids") and hasattr(getattr(scheme, "score_fn", None), "lam")


def _max_feature_norm(sketch: Any, chunk: int = 1024) -> float:
    """L_φ = max_v ‖φ(v)‖ by projecting one-hot weights in chunks of ``chunk`` tokens."""
    V, best = sketch.vocab_size, 0.0
    for i in range(0, V, chunk):
        m = min(chunk, V - i)
        eye = torch.zeros(m, V)
        eye[torch.arange(m), torch.arange(i, i + m)] = 1.0
        best = max(best, float(sketch.project(eye).norm(dim=1).max()))
    return best
