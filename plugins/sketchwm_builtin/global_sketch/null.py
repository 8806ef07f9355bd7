"""The fixed-key background null of ``global-sketch`` (``null="background"``): its moments, its exact
law and the p-value and threshold read from it.

For a fixed key every token has a fixed weight c_k(v) = ⟨u_k, φ_k(v)⟩, so the presence statistic

    T = ⟨u_k, Φᵀx⟩ = Σ_v c_k(v) x_v,   x_v = 1[v ∈ y] on the kept tokens,

has a key-dependent null law. It is given by a background token model: each kept token is present
independently with q_v(n) = 1 − (1 − π_v)^n in a text of n tokens, π the token prior
(:func:`sketchwm_builtin.global_sketch.prior.background_token_model`). The score is

    z = (T − Σ_v c_k(v) q_v) / (Σ_v c_k(v)² q_v (1 − q_v))^{1/2}.

The p-value is the exact tail of T under that model, not a normal approximation: T/g₀ (g₀ the gcd of
the weights, 2 for the d = 4 Count-Sketch whose c_k(v) ∈ {−4, −2, 0, 2, 4}) is a sum of independent
integer-weighted Bernoulli terms, whose law is computed per length from its characteristic function
by FFT on a window of the integer support, with aliasing, series remainder and round-off bounded and
added, and the Chernoff bound where it is smaller (:func:`sketchwm.stats.bernoulli_sum_tail`). The
p-value is p = P(T' ≥ T − β·σ(n)) for T' under the model: the law shifted up by β standard
deviations, β = ``null_margin``, for domain shift alone (the background model's mean for one key can
be off on a text domain it never saw). The threshold on z at each length is the first lattice point
whose exact p-value is ≤ α, so ``z ≥ threshold`` ⇔ ``p ≤ α``.

The ``capped`` sketch counts each kept token up to k times: Y_v = min(C_v, k) with C_v
Binomial(n, π_v), or Beta-binomial(n, π_v·s, (1 − π_v)·s) with ``null_dispersion`` = s; its law is
:func:`sketchwm.lattice_sum.capped_sum_tail`.

What the null does not promise: validity on text from a distribution far from the prior (a flood of
rare tokens chosen by an adversary), or on text whose tokens are not independent given its length
beyond what β covers. Laws and moments are computed once per distinct length and cached.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sketchwm.components import distinct_token_sums
from sketchwm.errors import ConfigError
from sketchwm.lattice_sum import capped_sum_tail
from sketchwm.stats import LatticeTail, bernoulli_sum_tail, check_alpha

__all__ = ["BackgroundNull", "capped_pmf", "length_moments", "resolve_null"]


def resolve_null(null: str, sketch: Any) -> str:
    """The null hypothesis a scheme with ``sketch`` tests: ``null`` (``GlobalSketchParams.null``) with
    ``auto`` resolved to ``background`` for the ``presence`` and ``capped`` sketches, else ``key-randomised``.

    Raises:
        ConfigError: ``background`` with a sketch that counts tokens (``count``).
    """
    presence = getattr(sketch, "counting", "count") in ("presence", "capped")
    resolved = ("background" if presence else "key-randomised") if null == "auto" else null
    if resolved == "background" and not presence:
        raise ConfigError("null='background' needs the presence or capped sketch (sketch params counting='presence'): "
                          "token counts of real text are bursty and have no usable background null; use "
                          "null='key-randomised' with counting='count'")
    return resolved


def capped_pmf(n: torch.Tensor, log_pi: torch.Tensor, log1m_pi: torch.Tensor, cap: int,
               dispersion: float | None = None) -> torch.Tensor:
    """The law of Y = min(C, k), C ~ Binomial(n, π) (or Beta-binomial(n, πs, (1 − π)s) with
    ``dispersion`` = s), for lengths n (b,) and tokens (P,) given by log π and log(1 − π), (P,)
    float64 → (b, P, k + 1) float64, k = ``cap`` (P(C ≥ k) last)."""
    k = cap
    j = torch.arange(k, dtype=torch.float64, device=log_pi.device)  # (k,)
    n = n.to(log_pi.device, torch.float64)[:, None, None]  # (b, 1, 1)
    log_binom = torch.lgamma(n + 1) - torch.lgamma(j + 1) - torch.lgamma((n - j).clamp_min(0) + 1)  # (b, 1, k)
    s = dispersion
    if s is None:
        log_pj = log_binom + j * log_pi[None, :, None] + (n - j) * log1m_pi[None, :, None]  # (b, P, k)
    else:  # log B(j + a, n − j + b) − log B(a, b), a = πs, b = (1 − π)s
        a, b = (torch.exp(log_pi) * s)[None, :, None], (torch.exp(log1m_pi) * s)[None, :, None]  # (1, P, 1)
        log_pj = (log_binom + torch.lgamma(j + a) - torch.lgamma(a) + torch.lgamma((n - j).clamp_min(0) + b)
                  - torch.lgamma(b) - torch.lgamma(n + s) + torch.lgamma(torch.tensor(s, dtype=torch.float64)))
    pj = torch.exp(log_pj)  # (b, P, k)
    pj = torch.where(j[None, None, :] <= n, pj, torch.zeros_like(pj))
    return torch.cat([pj, (1.0 - pj.sum(-1, keepdim=True)).clamp_min(0.0)], -1)  # P(C ≥ k) last


def length_moments(ks: torch.Tensor, log_pi: torch.Tensor, log1m_pi: torch.Tensor, c: torch.Tensor, sketch: Any,
                   dispersion: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Background-null mean and variance of T = Σ_v c(v) Y_v for texts of ``ks`` (b,) float64 tokens:
    Y_v = 1[v present], q_v(n) = 1 − (1 − π_v)^n, or min(C_v, k) for the ``capped`` ``sketch``
    (:func:`capped_pmf`); log π and log(1 − π) (V,) float64; c (V,) or (V, K) float64, one column per
    key sharing the sketch → (b,) or (b, K) float64 each."""
    if sketch.counting == "capped":  # Y_v = min(C_v, k), C_v ~ Binomial(n, π_v)
        pmf = capped_pmf(ks, log_pi, log1m_pi, sketch.cap, dispersion)  # (b, V, k + 1)
        j = torch.arange(pmf.shape[-1], dtype=torch.float64, device=pmf.device)
        m1, m2 = pmf @ j, pmf @ (j * j)  # (b, V)
        return m1 @ c, (m2 - m1 * m1) @ (c * c)
    q = -torch.expm1(ks[:, None] * log1m_pi[None, :])  # (b, V)
    return q @ c, (q * (1 - q)) @ (c * c)


class BackgroundNull:
    """The background null of one key (module doc): moments, exact law, p-values and thresholds of T.

    Args:
        sketch: the scheme's sketch (``counting`` ``presence`` or ``capped``; ``keep_table``,
            ``check_ids``, ``sparse_weights``, ``cap``).
        weights: c_k(v) = ⟨u_k, φ_k(v)⟩, (V,) float64 (0 on excluded tokens).
        log_pi, log1m_pi: log π and log(1 − π) of the background token model, (V,) float64.
        dispersion: the ``capped`` null's Beta-binomial s, or None (binomial).
        device: where the per-text results are returned.
    """

    def __init__(self, sketch: Any, weights: torch.Tensor, log_pi: torch.Tensor, log1m_pi: torch.Tensor,
                 dispersion: float | None = None, device: Any = "cpu"):
        self.sketch, self.weights, self.dispersion, self.device = sketch, weights, dispersion, torch.device(device)
        self.log_pi, self.log1m_pi = log_pi, log1m_pi
        self._moments: dict[int, tuple[float, float]] = {}
        self._laws: dict[int, LatticeTail] = {}
        self._pairs: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._tables: tuple[torch.Tensor, torch.Tensor] | None = None

    def capped_pmf(self, n: torch.Tensor, log_pi: torch.Tensor, log1m_pi: torch.Tensor) -> torch.Tensor:
        """:func:`capped_pmf` with this sketch's cap and this null's dispersion."""
        return capped_pmf(n, log_pi, log1m_pi, self.sketch.cap, self.dispersion)

    def moments(self, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance of T for texts of n tokens: (B,) → (B,), (B,) float64.

        μ(n) = Σ_v c_k(v) q_v(n), σ²(n) = Σ_v c_k(v)² q_v(n)(1 − q_v(n)), q_v(n) = 1 − (1 − π_v)^n
        (``capped``: the moments of min(C_v, k)). They depend on the length only, so they are
        computed once per distinct length (chunks of 256 lengths, (256, V) float64 at a time).
        """
        c, cache = self.weights, self._moments
        lengths, inverse = np.unique(n.to(torch.int64).cpu().numpy(), return_inverse=True)  # numpy: no thread spin
        todo = [int(k) for k in lengths.tolist() if int(k) not in cache]
        for i in range(0, len(todo), 256):  # chunks of lengths: (chunk, V) float64 at a time
            ks = torch.tensor(todo[i:i + 256], dtype=torch.float64, device=self.log1m_pi.device)
            mu, var = length_moments(ks, self.log_pi, self.log1m_pi, c, self.sketch, self.dispersion)
            cache.update({k: (float(m), float(s)) for k, m, s in zip(todo[i:i + 256], mu.tolist(), var.tolist())})
        if len(cache) > 65536:  # bound the cache (lengths are at most a few thousand in practice)
            cache.clear()
        table = np.array([cache[int(k)] for k in lengths.tolist()], dtype=np.float64).reshape(-1, 2)
        mv = torch.from_numpy(table[inverse.reshape(-1)]).to(self.device)  # (B, 2)
        return mv[:, 0], mv[:, 1]

    def pairs(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The null's terms, grouped: (g₀, g (P,) int64, log(1 − π) (P,) float64, counts (P,) int64).

        T = Σ_v c_k(v) x_v = g₀·X with X = Σ_v g_v x_v, g_v = c_k(v)/g₀ integral (g₀ the gcd of the
        weights); kept tokens with equal (g_v, π_v) share one term with a count (the prior's counts
        repeat), tokens with c_k(v) = 0 (the excluded ones among them) drop out. Built once.

        Raises:
            ConfigError: weights c_k(v) that are not integers (a sketch whose features are not ±1
                entries): the exact law needs an integer lattice.
        """
        if self._pairs is None:
            c = self.weights.cpu().numpy()  # (V,) float64
            if not np.all(c == np.round(c)):
                raise ConfigError("null='background' needs integral token weights c_k(v) = <u_k, phi_k(v)> (the count "
                                  "sketch's +-1 features); use null='key-randomised' with this sketch")
            ci = np.round(c).astype(np.int64)
            nz = ci != 0
            g0 = int(np.gcd.reduce(np.abs(ci[nz]))) if nz.any() else 1
            key = np.stack([ci[nz] // g0, self.log1m_pi.cpu().numpy()[nz].view(np.int64)], 1)  # (P', 2) exact grouping
            uniq, counts = np.unique(key, axis=0, return_counts=True)
            self._pairs = (g0, uniq[:, 0].copy(), uniq[:, 1].copy().view(np.float64), counts.astype(np.int64))
        return self._pairs

    def law(self, n: int) -> LatticeTail:
        """The exact law of X = T/g₀ for texts of ``n`` tokens (:meth:`pairs`), as its upper tail
        (:func:`sketchwm.stats.bernoulli_sum_tail`, or :func:`sketchwm.lattice_sum.capped_sum_tail`);
        cached per length.

        Raises:
            ConfigError: see :meth:`pairs`.
        """
        cache = self._laws
        law = cache.get(n)
        if law is None:
            _, g, l1m, counts = self.pairs()
            if self.sketch.counting == "capped":
                l1m_t = torch.from_numpy(l1m)
                pmf = self.capped_pmf(torch.tensor([n]), torch.log(-torch.expm1(l1m_t)), l1m_t)[0].numpy()  # (P, k + 1)
                law = cache[n] = capped_sum_tail(g, pmf / pmf.sum(1, keepdims=True), counts)
            else:
                law = cache[n] = bernoulli_sum_tail(g, -np.expm1(n * l1m), counts)
            if len(cache) > 4096:  # bound the cache (a few KB a length)
                cache.clear()
                cache[n] = law
        return law

    def pvalue(self, T: np.ndarray, lengths: np.ndarray, var: np.ndarray, margin: float) -> np.ndarray:
        """p = P(X' ≥ X − β·σ_X) for X' under the exact law, β = ``margin``: T (B,) float64 integral
        statistics, lengths (B,) int64, var (B,) σ²(n) of T → (B,) float64.

        Exact under the null at β = 0 (an upper bound on the exact tail where the Chernoff bound
        takes over); β > 0 shifts the law up by β standard deviations. One table look-up per text,
        the laws built once per distinct length.
        """
        g0 = self.pairs()[0]
        X = np.round(T / g0)
        shift = margin * np.sqrt(np.maximum(var, 0.0)) / g0
        x = np.ceil(X - shift - 1e-9).astype(np.int64)  # P(X' >= X − βσ) = P(X' >= ⌈X − βσ⌉)
        p = np.empty(T.shape, dtype=np.float64)
        ls, inverse = np.unique(lengths, return_inverse=True)
        for i, n in enumerate(ls.tolist()):  # per distinct length, not per text
            sel = inverse.reshape(-1) == i
            p[sel] = self.law(int(n)).sf(x[sel])
        return p

    def stats(self, ids: torch.Tensor, valid: torch.Tensor, margin: float,
              with_p: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(z (B,) float64, n_d (B,) int64 distinct kept tokens, p (B,) float64 on the CPU or None) of
        ids (B, N) int64 with valid (B, N) bool. T is a sum over the text's distinct tokens, O(B·N).

        Raises:
            InputError: ids outside [0, V) (the sketch's ``check_ids``).
        """
        ids, lengths = self.sketch.check_ids(ids, valid)
        if self._tables is None:  # (V + 1,) c_k and keep with 0 on the padding id V; c_k as int8 when integral
            c = self.weights
            small_int = bool((c == c.round()).all()) and float(c.abs().max()) <= 127
            c_ext = torch.cat([c, torch.zeros(1, dtype=torch.float64, device=c.device)])
            self._tables = (c_ext.to(torch.int8) if small_int else c_ext, self.sketch.keep_table().to(torch.int8))
        tables = self._tables
        if self.sketch.counting == "capped":  # T = Σ_v c_k(v) min(c_v, k) over the first k copies of each id
            tok, x = self.sketch.sparse_weights(ids, valid)  # (B, N), (B, N)
            T, n_d = (tables[0].to(torch.float64)[tok] * x.double()).sum(1).round(), x.sum(1).round().long()
        else:
            T, n_d = distinct_token_sums(ids, valid, *tables)  # (B,), (B,)
        mu, var = self.moments(lengths)  # all tokens: the length the background model sees
        # (B,) arithmetic in numpy: a small torch op here waits ~10 ms on the thread pool
        Tn, mun, varn = T.cpu().numpy().astype(np.float64), mu.cpu().numpy(), var.cpu().numpy()
        z = torch.from_numpy((Tn - mun) / np.sqrt(np.maximum(varn, 1e-12)))
        p = torch.from_numpy(self.pvalue(Tn, lengths.cpu().numpy(), varn, margin)) if with_p else None
        if T.device.type == "cpu":
            return z, n_d, p
        return z.to(self.device), n_d.to(self.device), p

    def threshold(self, alpha: float, n_tokens: int, margin: float) -> float:
        """The threshold on z at level α for texts of ``n_tokens`` tokens: the z of the first lattice
        point of T whose exact p-value (:meth:`pvalue`) is ≤ α, less half a lattice step, so
        ``z ≥ threshold`` ⇔ ``p ≤ α`` exactly (the half step absorbs float rounding of z).

        Raises:
            InputError: α outside (0, 1).
        """
        check_alpha(alpha)
        g0 = self.pairs()[0]
        mu, var = (float(t[0]) for t in self.moments(torch.tensor([int(n_tokens)])))
        sd = math.sqrt(max(var, 1e-12))
        x_star = self.law(int(n_tokens)).isf(alpha)  # smallest x with P(X' >= x) <= α
        shift = margin * math.sqrt(max(var, 0.0)) / g0
        X_star = math.floor(x_star - 1 + shift + 1e-9) + 1  # smallest X with ⌈X − βσ_X − 1e-9⌉ >= x*
        return (g0 * X_star - 0.5 * g0 - mu) / sd
