"""Multi-key attribution for ``global-sketch`` (beyond the seed paper; :mod:`sketchwm.attribution`).

A key family shares k_sk and gives member i the direction u^{(i)} = PRF(k_dir, i) (seed paper §4.1
for k = (k_sk, k_dir)); the members share the integer sketch H = Φᵀx of a text and are ranked by the
exact ⟨u^{(i)}, H⟩, for all K at once over a bit-packed bank of directions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sketchwm.errors import InputError
from sketchwm.stats import bonferroni, rademacher_sum_pvalue

__all__ = ["Attribution", "attribute"]


@dataclass
class Attribution:
    """Multi-key attribution of texts.

    Attributes:
        indices: (B, top) int64, family indices ranked by score (best first).
        scores: (B, top) float64, their scores.
        z: (B, top) float64.
        p_value: (B, top) float64, per-key key-randomised p-values.
        p_value_fwer: (B, top) float64, Bonferroni family-wise-corrected p-values (min(1, K·p)).
        n_keys: K.
    """

    indices: torch.Tensor
    scores: torch.Tensor
    z: torch.Tensor
    p_value: torch.Tensor
    p_value_fwer: torch.Tensor
    n_keys: int


def attribute(scheme: Any, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, top: int = 5, chunk: int = 8192,
              bank: Any = None) -> Attribution:
    """Rank K key-family members of ``scheme`` (a :class:`GlobalSketchScheme`) for each text.

    The members are ranked by the exact ⟨u^{(i)}, H⟩ (the order of S_k and of z), computed for all
    K at once as AND/popcount passes over a bit-packed bank. p-values are exact key-randomised per
    member (they share the pmf of ⟨u, H⟩ given h); ``p_value_fwer`` is Bonferroni-corrected over the
    K members.

    Args:
        scheme: the scheme whose key family is ranked (its sketch, score and ``directions``).
        ids, valid: (B, N) int64 and bool, as in ``score_ids``.
        n_keys: K (up to 100,000 and more; the bank is K·D/8 bytes).
        top: how many best members to return.
        chunk: members per block when the bank is built here.
        bank: a prebuilt :class:`sketchwm.attribution.DirectionBank` of this key's family with at
            least ``n_keys`` members (built here when None).

    Raises:
        InputError: n_keys < 1, or a bank with fewer than ``n_keys`` members.
    """
    from sketchwm.attribution import DirectionBank, integer_sketch

    if n_keys < 1:
        raise InputError("n_keys must be >= 1")
    bank = bank if bank is not None else DirectionBank.build(scheme, n_keys, chunk)
    if len(bank) < n_keys:
        raise InputError(f"the direction bank holds {len(bank)} members, fewer than n_keys = {n_keys}")
    ids, valid = ids.to(scheme.device), valid.to(scheme.device)
    H = integer_sketch(scheme, ids, valid)  # (B, D) int64
    n = scheme.sketch.sparse_weights(ids, valid)[1].sum(1).round().long()  # (B,) the normaliser
    top = min(top, n_keys)
    if len(bank) > n_keys:
        bank = DirectionBank(bank.bits[:, :n_keys], bank.plus[:n_keys], bank.dim)
    best = [bank.top(H[b], top) for b in range(H.shape[0])]  # per text: one pass over the bank
    best_i = torch.from_numpy(np.stack([i for i, _ in best])).to(scheme.device)  # (B, top)
    ip_int = torch.from_numpy(np.stack([v for _, v in best])).to(scheme.device)  # (B, top) ⟨u, H⟩
    h = H.double() / n.double().clamp_min(1).sqrt()[:, None]  # (B, D)
    U_top = scheme.directions(best_i.flatten()).double().view(H.shape[0], top, -1)  # (B, top, D)
    best_s = torch.stack([scheme.score_fn.score(U_top[b], h[b:b + 1])[0] for b in range(H.shape[0])])  # (B, top)
    z = ip_int.double() / n.double().clamp_min(1).sqrt()[:, None] / h.norm(dim=1, keepdim=True).clamp_min(1e-300)
    p = rademacher_sum_pvalue(H, ip_int)
    return Attribution(best_i, best_s, z, p, bonferroni(p, n_keys), n_keys)
