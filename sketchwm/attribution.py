"""Multi-key attribution as one bit-packed product (beyond the paper; see :mod:`sketchwm_builtin.global_sketch.attribution`).

What is attributed. A *key family* shares the sketch key k_sk — hence the Count-Sketch hash h_r,
signs σ_r and excluded tokens, so every member sees the same integer sketch H(y) = Φᵀx(y) ∈ Z^D of
a text (x the kept-token presence or counts, h = H/√n) — and member i has its own Rademacher
direction u^{(i)} = PRF(k_dir, i) ∈ {±1}^D, k_dir derived from the one secret by HMAC-SHA256 with
domain separation (:mod:`sketchwm.keys`, :mod:`sketchwm.prf`). Members are ranked by
⟨u^{(i)}, H⟩, which orders them exactly as the paper's S_k = 2⟨u, h⟩ − λ‖h‖² (eq. 2) and as
z = ⟨u, h⟩/‖h‖ (the penalty and ‖h‖ are shared). Keys with *independent* k_sk hash differently
and each needs its own sketch (one O(N·d) pass per key); they are not what this module ranks.

How. The bank stores u^{(i)} as D bits per member (bit j = 1 iff u_j = +1): K·D/8 bytes, 12.8 MB
for K = 100,000 and D = 1,024. For an integer H, shift it to H' = H − m ≥ 0 (m = min(H, 0)) and
split H' into P bit-planes β_p (P = bit length of max H', 3-4 for a 256-token text). Then exactly

    ⟨u, H⟩ = Σ_p 2^p (2·popcount(b ∧ β_p) − |β_p|) + m·(2·popcount(b) − D),

so scoring K members is P AND/popcount passes over the bank (numpy ``bitwise_count``), in chunks
of keys that stay in cache, split over threads. No float rounding: the result is the integer
⟨u^{(i)}, H⟩ the float reference U·H gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .components import over_slices
from .errors import InputError

__all__ = ["DirectionBank", "integer_sketch"]


def integer_sketch(scheme: Any, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """H(y) = Φᵀx(y) of each text, the unnormalised sketch shared by a key family: (B, N) → (B, D) int64.

    Raises:
        InputError: ids outside [0, V); the sketch is not integer-valued (a sketch with real weights).
    """
    tok, x = scheme.sketch.sparse_weights(ids, valid)
    H = scheme.sketch.project_sparse(tok, x).double()  # (B, D) integer-valued for the Count-Sketch
    Hr = H.round()
    if bool((H - Hr).abs().max() > 1e-6) if H.numel() else False:
        raise InputError("attribution needs an integer sketch (Count-Sketch with ±1 signs)")
    return Hr.long()


@dataclass
class DirectionBank:
    """Bit-packed Rademacher directions u^{(i)} of K key-family members (module doc).

    Attributes:
        bits: (D/64, K) uint64, word-major (each bank word is a contiguous run over the K members):
            bit j mod 64 (little-endian) of word j // 64 is 1 iff u^{(i)}_j = +1.
        plus: (K,) int64, popcount of each row (number of +1 coordinates).
        dim: D.
    """

    bits: np.ndarray
    plus: np.ndarray
    dim: int

    @classmethod
    def build(cls, scheme: Any, n_keys: int, chunk: int = 4096) -> "DirectionBank":
        """Directions 0..n_keys−1 of ``scheme.directions`` (HMAC-derived k_dir, keyed PRF), packed in chunks.

        Raises:
            InputError: n_keys < 1, or D not a multiple of 64.
        """
        if n_keys < 1:
            raise InputError("n_keys must be >= 1")
        D = int(scheme.sketch.dim)
        if D % 64:
            raise InputError(f"the bit-packed bank needs D to be a multiple of 64, got D = {D}")
        bits = np.empty((D // 64, n_keys), dtype=np.uint64)
        for s in range(0, n_keys, chunk):
            idx = torch.arange(s, min(n_keys, s + chunk))
            U = scheme.directions(idx).cpu().numpy() > 0  # (k, D) bool
            bits[:, s:s + len(idx)] = np.packbits(U, axis=1, bitorder="little").view(np.uint64).T
        plus = np.bitwise_count(bits).sum(0, dtype=np.int64)
        return cls(bits, plus, D)

    def __len__(self) -> int:
        return int(self.bits.shape[1])

    @property
    def nbytes(self) -> int:
        """Size of the packed directions in bytes (K·D/8)."""
        return int(self.bits.nbytes)

    def inner(self, H: torch.Tensor | np.ndarray, chunk: int = 8192, threads: int | None = None) -> np.ndarray:
        """Exact ⟨u^{(i)}, H⟩ for every member: H (D,) integers → (K,) int64.

        Args:
            H: the integer sketch of one text (:func:`integer_sketch`).
            chunk: members per cache-resident block.
            threads: worker threads (default ``torch.get_num_threads()``).

        Raises:
            InputError: H of the wrong length.
        """
        H = np.asarray(H.cpu().numpy() if torch.is_tensor(H) else H, dtype=np.int64).reshape(-1)
        if H.shape[0] != self.dim:
            raise InputError(f"sketch has {H.shape[0]} coordinates, the bank has D = {self.dim}")
        m = min(int(H.min()), 0)
        Hp = H - m  # (D,) >= 0
        P = max(1, int(Hp.max()).bit_length())
        planes = [np.packbits(((Hp >> p) & 1).astype(bool), bitorder="little").view(np.uint64) for p in range(P)]
        const = -sum(int(np.bitwise_count(b).sum()) << p for p, b in enumerate(planes)) - m * self.dim
        W, K = self.bits.shape
        out = np.empty(K, dtype=np.int64)
        work = [[(w, plane[w]) for w in range(W) if plane[w]] for plane in planes]  # skip all-zero plane words

        def run(lo: int, hi: int) -> None:
            tmp = np.empty(chunk, np.uint64)
            cnt = np.empty(chunk, np.uint8)
            part = np.empty(chunk, np.uint16)  # Σ_w popcount ≤ D per plane
            for i in range(lo, hi, chunk):
                r = min(chunk, hi - i)
                t, c, a = tmp[:r], cnt[:r], part[:r]
                acc = (2 * m) * self.plus[i:i + r] + const  # m·(2·popcount(b) − D) − Σ_p 2^p |β_p|
                for p, words in enumerate(work):
                    a.fill(0)
                    for w, word in words:  # one contiguous run of r keys per bank word
                        np.bitwise_and(self.bits[w, i:i + r], word, out=t)
                        np.bitwise_count(t, out=c)
                        np.add(a, c, out=a)
                    acc += a.astype(np.int64) << (p + 1)
                out[i:i + r] = acc

        over_slices(K, run, min_per_worker=chunk, threads=threads)
        return out

    def top(self, H: torch.Tensor | np.ndarray, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """The k members of largest ⟨u^{(i)}, H⟩, best first (ties: lower index first):
        indices (k,) int64 and values (k,) int64."""
        s = self.inner(H)
        k = min(k, s.shape[0])
        kth = np.partition(s, s.shape[0] - k)[s.shape[0] - k]  # the k-th largest value
        cand = np.flatnonzero(s >= kth)  # every member tied at the boundary, so ties resolve by index
        idx = cand[np.lexsort((cand, -s[cand]))[:k]]  # by value descending, then index ascending
        return idx.astype(np.int64), s[idx]
