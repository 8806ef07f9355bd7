"""``count-sketch``: the keyed Count-Sketch of the seed paper (Def. 2.3, §4.1), with balanced signs (eq. 4).

For each row r ∈ [d], a keyed hash h_r: V → [w] and a sign σ_r: V → {±1}; the token feature
φ(v) ∈ R^{d×w} has one signed bucket per row. Tables are tensors over the whole vocabulary,
derived from the sketch key k_sk by the keyed PRF of :mod:`sketchwm.prf`.

Sign balancing (eq. 4): given a token prior π_tok, the signs inside each bucket are chosen so
that Σ_{v: h_r(v)=b} π(v) σ_r(v) ≈ 0: tokens of a bucket are taken in decreasing π and each gets
the sign opposite to the bucket's running sum (greedy number partitioning), with keyed coins for
ties and for zero-mass tokens. All d·w buckets are processed in parallel (one vectorised step
per within-bucket rank; no loop over tokens).
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from sketchwm.components import Sketch
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError
from sketchwm.hookspecs import hookimpl
from sketchwm.prf import keyed_randint, keyed_signs

__all__ = ["CountSketch", "balance_signs", "bucket_imbalance"]


def bucket_imbalance(prior: torch.Tensor, buckets: torch.Tensor, signs: torch.Tensor, w: int) -> torch.Tensor:
    """Per-bucket signed mass Σ_{v: h_r(v)=b} π(v) σ_r(v) (the left side of eq. 4).

    Args:
        prior: (V,) float64 probabilities.
        buckets: (d, V) int64 in [0, w).
        signs: (d, V) float ±1.

    Returns:
        (d, w) float64.
    """
    d = buckets.shape[0]
    out = torch.zeros(d, w, dtype=torch.float64, device=buckets.device)
    return out.scatter_add_(1, buckets, prior[None, :].to(torch.float64) * signs.to(torch.float64))


def balance_signs(prior: torch.Tensor, buckets: torch.Tensor, coins: torch.Tensor, w: int) -> torch.Tensor:
    """Greedy balanced signs (eq. 4) for every bucket of every row at once.

    Args:
        prior: (V,) float64, token probabilities π_tok (sums to 1).
        buckets: (d, V) int64 bucket of each token in each row.
        coins: (d, V) float ±1 keyed coins (used for ties and zero-mass tokens).
        w: number of buckets.

    Returns:
        (d, V) float32 signs in {-1, +1}.
    """
    d, V = buckets.shape
    device = buckets.device
    prior = prior.to(torch.float64)
    # order tokens by (bucket, -mass): sort by mass descending, then stable sort by bucket
    by_mass = torch.argsort(prior, descending=True, stable=True)  # (V,)
    b_sorted = buckets[:, by_mass]  # (d, V)
    order2 = torch.argsort(b_sorted, dim=1, stable=True)  # (d, V)
    tok = by_mass[order2]  # (d, V) token ids grouped by bucket, heaviest first
    bkt = torch.gather(b_sorted, 1, order2)  # (d, V) their buckets, non-decreasing
    sizes = torch.zeros(d, w, dtype=torch.long, device=device).scatter_add_(1, bkt, torch.ones_like(bkt))
    starts = torch.cumsum(sizes, 1) - sizes  # (d, w)
    rank = torch.arange(V, device=device)[None, :] - torch.gather(starts, 1, bkt)  # (d, V) rank within bucket
    max_size = int(sizes.max())
    grid_tok = torch.full((d, w, max_size), -1, dtype=torch.long, device=device)
    flat = (bkt * max_size + rank)  # (d, V)
    grid_tok.view(d, -1).scatter_(1, flat, tok)
    valid = grid_tok >= 0  # (d, w, S)
    safe = grid_tok.clamp_min(0)
    mass = torch.where(valid, prior[safe], torch.zeros((), dtype=torch.float64, device=device))  # (d, w, S)
    coin = torch.where(valid, torch.gather(coins.to(torch.float64), 1, safe.view(d, -1)).view(d, w, max_size), 1.0)
    # the greedy pass in numpy (float64, the same arithmetic): a loop over the within-bucket rank,
    # vectorised over all d*w buckets, where torch's per-call overhead made it most of a scheme's build
    mass_np, coin_np = mass.cpu().numpy(), coin.cpu().numpy()  # (d, w, S) each
    running = np.zeros((d, w))
    out_np = np.empty((d, w, max_size))
    for k in range(max_size):
        m, c = mass_np[:, :, k], coin_np[:, :, k]
        s = np.where(m > 0, np.where(running > 0, -1.0, np.where(running < 0, 1.0, c)), c)
        out_np[:, :, k] = s
        running = running + s * m
    out = torch.from_numpy(out_np).to(device)
    # scatter back to (d, V)
    res = torch.empty(d, V, dtype=torch.float32, device=device)
    return res.scatter_(1, tok, torch.gather(out.view(d, -1), 1, flat).float())


class CountSketchParams(StrictModel):
    """Count-Sketch shape and what it counts.

    Attributes:
        d: rows (independent hash functions).
        w: buckets per row; D = d·w.
        balance_signs: balance signs under the token prior (eq. 4); False gives plain keyed signs.
        counting: ``count`` — the paper's sketch, Σ_j φ(y_j) / √N (Def. 2.3, §4.1), every
            occurrence counts; ``presence`` — the sketch of the set of distinct tokens,
            Σ_{v ∈ y} φ(v) / √n_d with n_d the number of distinct (kept) tokens: adding copies of a
            token already present leaves it unchanged (flood-robust, see :class:`Sketch`);
            ``capped`` — the sketch of the counts capped at ``cap``, Σ_v min(c_v, k) φ(v) / √n with
            n = Σ_v min(c_v, k) over kept tokens: repeated tokens carry evidence up to k copies, a
            flood of one token adds at most k·φ(v) (``presence`` is k = 1).
        cap: k of ``capped`` counting (ignored otherwise).
        exclude_top: the ``exclude_top`` most frequent tokens of the token prior get φ(v) = 0
            (they are in almost every text, so their presence carries no evidence and their
            domain-dependent frequency is what biases a fixed key's null). 0 keeps every token;
            ignored (and reported) when no prior is given; never more than half the vocabulary.
    """

    d: int = Field(4, ge=1, le=64)
    w: int = Field(256, ge=2, le=1 << 20)
    balance_signs: bool = True
    counting: Literal["count", "presence", "capped"] = "count"
    cap: int = Field(2, ge=1, le=8)
    exclude_top: int = Field(0, ge=0)


class CountSketch(Sketch):
    """Keyed Count-Sketch φ_k: V → R^{d×w} with prior-balanced signs (paper Def. 2.3, eq. 4).

    Args:
        params: :class:`CountSketchParams`.
        key: the sketch key k_sk (:class:`sketchwm.keys.WatermarkKey`).
        vocab_size: V.
        token_prior: (V,) non-negative counts or probabilities π_tok, or None (signs not balanced).
        device: where the (d, V) tables live.

    Raises:
        ConfigError: prior of the wrong length, negative, or all zero.
    """

    name = "count-sketch"
    count_geometry = True  # one ±1 entry per row: the geometry eq. 19's λ = γ√w is set for
    Params = CountSketchParams

    def __init__(self, params: Any, key: Any, vocab_size: int, token_prior: torch.Tensor | None = None, device="cpu"):
        super().__init__(params, key, vocab_size, token_prior, device)
        d, w, V = self.params.d, self.params.w, self.vocab_size
        rows = torch.arange(d, dtype=torch.int64)[:, None]
        counter = rows * (1 << 32) + torch.arange(V, dtype=torch.int64)[None, :]  # (d, V)
        self.buckets = keyed_randint(key.seed("count-sketch/bucket"), counter, w)  # (d, V) int64
        coins = keyed_signs(key.seed("count-sketch/sign"), counter)  # (d, V) float32
        self.counting = self.params.counting
        self.cap = self.params.cap if self.counting == "capped" else 1
        self._report: dict[str, Any] = {"d": d, "w": w, "D": d * w, "balanced": False, "counting": self.counting,
                                        "excluded_tokens": 0, **({"cap": self.cap} if self.counting == "capped" else {})}
        keep = torch.ones(V, dtype=torch.bool)
        if token_prior is not None:
            prior = torch.as_tensor(token_prior, dtype=torch.float64).flatten()
            if prior.numel() != V:
                raise ConfigError(f"token prior has {prior.numel()} entries but the vocabulary has {V}")
            if bool((prior < 0).any()) or not torch.isfinite(prior).all() or float(prior.sum()) <= 0:
                raise ConfigError("token prior must be finite, non-negative and not all zero")
            prior = prior / prior.sum()
            n_ex = min(self.params.exclude_top, V // 2)
            if n_ex:
                keep[torch.argsort(prior, descending=True, stable=True)[:n_ex]] = False
                self._report.update(excluded_tokens=n_ex, excluded_mass=float(prior[~keep].sum()))
                prior = torch.where(keep, prior, torch.zeros_like(prior))  # balance the kept tokens only
                prior = prior / prior.sum()
            raw = bucket_imbalance(prior, self.buckets, coins, w)
            signs = balance_signs(prior, self.buckets, coins, w) if self.params.balance_signs else coins
            bal = bucket_imbalance(prior, self.buckets, signs, w)
            mass = bucket_imbalance(prior, self.buckets, torch.ones_like(coins), w)  # (d, w) bucket mass
            heaviest = torch.zeros(d, w, dtype=torch.float64).scatter_reduce_(
                1, self.buckets, prior[None, :].expand(d, -1), reduce="amax", include_self=True
            )
            floor = (2 * heaviest - mass).clamp_min(0)  # no signs can do better than this
            self._report.update(
                max_excess_imbalance=float((bal.abs() - floor).max()),
                mean_excess_imbalance=float((bal.abs() - floor).mean()),
                unbalanced_mean_excess_imbalance=float((raw.abs() - floor).clamp_min(0).mean()),
                balanced=bool(self.params.balance_signs),
                max_abs_imbalance=float(bal.abs().max()),
                mean_abs_imbalance=float(bal.abs().mean()),
                unbalanced_max_abs_imbalance=float(raw.abs().max()),
                unbalanced_mean_abs_imbalance=float(raw.abs().mean()),
                max_bucket_mass=float(mass.max()),
            )
        else:
            signs = coins
            if self.params.exclude_top:
                self._report["exclude_top_ignored"] = "no token prior: every token is kept"
        self.keep = keep  # (V,) bool, False where φ(v) = 0
        self.signs = torch.where(keep[None, :], signs.to(torch.float32), torch.zeros((), dtype=torch.float32))
        self.flat_index = (rows * w + self.buckets)  # (d, V) coordinate in [0, D)
        self.to(self.device)

    def to(self, device: Any) -> "CountSketch":
        """Move the tables to ``device``."""
        self.device = torch.device(device)
        self.buckets = self.buckets.to(self.device)
        self.signs = self.signs.to(self.device)
        self.flat_index = self.flat_index.to(self.device)
        self.keep = self.keep.to(self.device)
        self.__dict__.pop("_idx_cache", None)
        self.__dict__.pop("_phi_cache", None)
        return self

    @property
    def dim(self) -> int:
        """D = d·w."""
        return self.params.d * self.params.w

    @property
    def width(self) -> int:
        """w."""
        return self.params.w

    def report(self) -> dict[str, Any]:
        """Shape and achieved per-bucket sign imbalance |Σ π σ| (balanced vs plain keyed signs).

        ``max_excess_imbalance`` is the largest excess over the per-bucket floor
        max(0, 2·heaviest − bucket mass) that no choice of signs can beat.
        """
        return dict(self._report)

    def _batched_index(self, B: int) -> torch.Tensor:
        """Flat coordinates b·D + r·w + h_r(v) for a batch of B, (B·d·V,) int64, cached per B."""
        cache = self.__dict__.setdefault("_idx_cache", {})
        if B not in cache or cache[B].device != self.device:
            offsets = torch.arange(B, device=self.device)[:, None, None] * self.dim  # (B, 1, 1)
            cache[B] = (self.flat_index[None] + offsets).reshape(-1)
        return cache[B]

    def _phi(self, transpose: bool) -> torch.Tensor:
        """Φ as a sparse CSR matrix, (V, D) or its transpose (D, V) float32 with d signed entries per token
        (cached per device): the projections below are one sparse × dense product each."""
        cache = self.__dict__.setdefault("_phi_cache", {})
        key = (transpose, self.device)
        if key not in cache:
            d, V, dev = self.params.d, self.vocab_size, self.device
            # row v of Φ holds d entries at r·w + h_r(v), r = 0..d−1: distinct, already in column order
            if transpose:  # (D, V): entries grouped by coordinate, tokens ascending within one (stable sort)
                coord = self.flat_index.reshape(-1).cpu().numpy()  # (d·V,) r-major, tokens ascending within each r
                order = np.argsort(coord, kind="stable")  # numpy: torch's sort is a parallel region
                cols = torch.from_numpy(np.tile(np.arange(V, dtype=np.int64), d)[order]).to(dev)
                vals = self.signs.reshape(-1)[torch.from_numpy(order).to(dev)]
                crow = torch.from_numpy(np.concatenate([[0], np.bincount(coord, minlength=self.dim).cumsum()])).to(dev)
                shape = (self.dim, V)
            else:  # (V, D): d entries per token
                cols = self.flat_index.T.reshape(-1)
                vals = self.signs.T.reshape(-1)
                crow = torch.arange(0, d * V + 1, d, dtype=torch.int64, device=dev)
                shape = (V, self.dim)
            with warnings.catch_warnings():  # "sparse CSR support is in beta": used for plain products only
                warnings.simplefilter("ignore", UserWarning)
                cache[key] = torch.sparse_csr_tensor(crow, cols.contiguous(), vals.contiguous(), shape)
        return cache[key]

    def project(self, weights: torch.Tensor) -> torch.Tensor:
        """Φᵀ weights: (B, V) → (B, D) float32, i.e. Σ_v weights_v φ(v) (one sparse (D, V) × dense (V, B) product)."""
        weights = weights.to(self.device, torch.float32)
        if weights.requires_grad:  # autograd (tests): the dense scatter-add form
            vals = weights[:, None, :] * self.signs[None, :, :]  # (B, d, V)
            out = torch.zeros(weights.shape[0] * self.dim, dtype=torch.float32, device=self.device)
            return out.scatter_add(0, self._batched_index(weights.shape[0]), vals.reshape(-1)).view(-1, self.dim)
        return (self._phi(True) @ weights.T).T.contiguous()

    def project_sparse(self, tok: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Φᵀx from (tok, x) of :meth:`sparse_weights`, both (B, N) → (B, D) float32, one scatter-add of
        B·N·d entries (no (B, V) table): Σ_j x_j σ_r(tok_j) added at coordinate r·w + h_r(tok_j)."""
        tables = self.__dict__.get("_sparse_tables")
        if tables is None or tables[0].device != self.device:  # (V + 1, d), row V = padding (sign 0)
            d = self.params.d
            idx = torch.cat([self.flat_index.T, torch.zeros(1, d, dtype=torch.int64, device=self.device)])
            sgn = torch.cat([self.signs.T, torch.zeros(1, d, dtype=torch.float32, device=self.device)])
            tables = self.__dict__["_sparse_tables"] = (idx.contiguous(), sgn.contiguous())
        idx_t, sgn_t = tables
        B, D = tok.shape[0], self.dim
        idx = idx_t[tok] + (torch.arange(B, device=tok.device) * D)[:, None, None]  # (B, N, d)
        vals = sgn_t[tok] * x.to(torch.float32)[..., None]  # (B, N, d)
        out = torch.zeros(B * D, dtype=torch.float32, device=tok.device)
        return out.index_add_(0, idx.reshape(-1), vals.reshape(-1)).view(B, D)

    def token_scores(self, r: torch.Tensor) -> torch.Tensor:
        """Φ r: (B, D) → (B, V) float32, ⟨r, φ(v)⟩ = Σ_r σ_r(v) r[r, h_r(v)]."""
        r = r.to(self.device, torch.float32)
        if r.requires_grad:  # autograd (tests): the dense gather form
            picked = torch.index_select(r, 1, self.flat_index.reshape(-1)).view(r.shape[0], self.params.d, self.vocab_size)
            return (picked * self.signs[None]).sum(1)  # (B, V)
        return (self._phi(False) @ r.T).T.contiguous()  # one sparse (V, D) × dense (D, B) product


@hookimpl
def sketchwm_register_sketches() -> list[type]:
    """Register the Count-Sketch."""
    return [CountSketch]
