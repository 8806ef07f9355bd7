"""``kth-exp-edit``: the EXP-edit watermark of Kuditipudi et al. 2024, ported to masked DLMs.

R. Kuditipudi, J. Thickstun, T. Hashimoto, P. Liang, "Robust Distortion-free Watermarks for
Language Models" (TMLR 2024, arXiv 2307.15593). The key is a shared sequence of n uniform vectors
ξ_0, …, ξ_{n-1} ∈ (0, 1)^V, ξ_j(v) = PRF(k, j·V + v). Generation position i of a text with shift τ
uses ξ_{(i+τ) mod n} as the Gumbel-max noise (their exponential minimum sampling,
argmax_v ξ(v)^{1/p(v)}, is Gumbel-max), so it is distortion-free. τ is drawn per text from the
sampler's generator (``random_shift``, their random shift that makes the texts of one key
diverse); with ``random_shift`` off every text starts at ξ_0 (as in the DLM reference port).

Detection (their test statistic φ with the Levenshtein cost d_γ, "EXP-edit"): for the text
y_1..y_m and every key shift s, the edit distance between y and the key window
(ξ_{(s+j) mod n})_{j<m} with substitution cost log(1 − ξ_j(y_a)) and insertion/deletion cost γ
(``edit_cost``):

    A[a][j] = min(A[a−1][j] + γ, A[a][j−1] + γ, A[a−1][j−1] + log(1 − ξ_{s+j−1}(y_a))),

φ(y, ξ) = min_s A[m][m] (their block length k = m); low φ means watermarked. ``window="free"``
replaces the n fixed windows by one semi-global alignment against any stretch of the cyclic key
(see :func:`levenshtein_min`). The p-value is their permutation test:
φ against φ(y, ξ'^(1..P)) for P fresh key sequences ξ' (independent of the key, from the public
``null_seed``): p = (1 + #{φ' <= φ}) / (1 + P), valid at every length under a random key; its
resolution is 1/(P+1) (``n_permutations``, default 99: smallest p = 0.01). ``score`` = ``z`` =
(mean φ' − φ)/sd φ', the statistic standardised by its own null.

Cost: the DP is vectorised over batch × (key + P null keys) × n shifts × m window columns, with one
Python step per text token (the horizontal recursion is a ``cummin``): O((P+1)·n·m²) cell updates
per text — 0.4 G for n = 256, m = 128, P = 99 (``window="free"``: O((P+1)·(n+m)·m), about 1%
of that at these sizes). Raise P for finer p-values; lower ``key_len`` or use ``window="free"`` for
speed.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, SchemeScores, Strength
from sketchwm.config import StrictModel
from sketchwm.prf import keyed_uniform
from sketchwm.stats import permutation_pvalue, standardise

from .context import KeyedNoiseScheme


__all__ = ["KTHExpEditScheme", "KTHExpEditParams", "levenshtein_min"]

_U_MIN, _U_MAX = 1e-12, 1.0 - 2.0**-24
#: elements of one DP buffer (rows × shifts × columns) per chunk
_DP_BUDGET = 1 << 23


class KTHExpEditParams(StrictModel):
    """Parameters of ``kth-exp-edit``.

    Attributes:
        key_len: n, length of the key sequence (and number of shifts the detector searches).
        random_shift: draw the shift τ of each text from the sampler's generator (else τ = 0).
        edit_cost: γ, insertion/deletion cost of the Levenshtein statistic (0 as in their EXP-edit runs).
        n_permutations: P, null key sequences of the permutation test (p-value resolution 1/(P+1)).
        null_seed: public seed of the null key sequences.
        window: ``fixed`` key windows of the text's length over all n shifts (KTH's φ), or ``free``
            semi-global alignment (≈ n·m/(n+m) times faster; see :func:`levenshtein_min`).
        min_tokens: shortest text the detector accepts.
    """

    key_len: int = Field(256, ge=1, le=65536)
    random_shift: bool = True
    edit_cost: float = Field(0.0, ge=0)
    n_permutations: int = Field(99, ge=1, le=100000)
    null_seed: int = Field(0, ge=0)
    window: Literal["fixed", "free"] = "fixed"
    min_tokens: int = Field(16, ge=1)


def levenshtein_min(cost: torch.Tensor, lengths: torch.Tensor, gamma: float, window: str = "fixed") -> torch.Tensor:
    """φ, the Levenshtein cost d_γ of the text against the best key window (Kuditipudi et al. 2024).

    Args:
        cost: (R, M, n) float, cost[r, a, c] = log(1 − ξ_c(y_a)) of text token a against key row c.
        lengths: (R,) int64, m_r <= M (tokens a >= m_r are ignored).
        gamma: insertion/deletion cost γ >= 0.
        window: ``fixed`` — min over shifts s ∈ [0, n) of A_s[m_r][m_r], aligning the first m_r
            tokens with the key window (s, …, s+m_r−1) mod n (KTH's φ with block length m);
            ``free`` — semi-global alignment against any contiguous stretch of the cyclic key
            (free start and end), one DP instead of n: O(m(n+m)) instead of O(n m²).

    Returns:
        (R,) float.
    """
    R, M, n = cost.shape
    dev, dt = cost.device, cost.dtype
    if M == 0:
        return torch.zeros(R, dtype=dt, device=dev)
    K = n + M - 1
    doubled = cost[:, :, torch.arange(K, device=dev) % n]  # (R, M, K): the cyclic key, unrolled
    if window == "fixed":
        W = doubled.unfold(2, M, 1)  # (R, M, n, M) view: [r, a, s, j] = cost[r, a, (s+j) mod n]
        shape = (R, n, M + 1)
    else:
        W = doubled[:, :, None, :]  # (R, M, 1, K): one alignment over the unrolled key
        shape = (R, 1, K + 1)
    cols = torch.arange(shape[-1], device=dev, dtype=dt) * gamma  # (C,) j·γ
    A = (cols if window == "fixed" else torch.zeros_like(cols)).expand(shape).clone()  # row a = 0
    all_full = bool((lengths == M).all())
    for a in range(1, M + 1):  # one step per text token; everything else is vectorised
        T = torch.empty_like(A)  # (R, S, C)
        T[..., 0] = a * gamma
        diag = A[..., :-1] + W[:, a - 1]  # substitution (R, S, C-1)
        T[..., 1:] = torch.minimum(A[..., 1:] + gamma, diag) if gamma else torch.minimum(A[..., 1:], diag)
        # horizontal moves: A[j] = min_{j' <= j} T[j'] + (j − j')γ  (a cummin)
        A_new = torch.cummin(T - cols, dim=-1).values + cols if gamma else torch.cummin(T, dim=-1).values
        A = A_new if all_full else torch.where((lengths >= a).view(R, 1, 1), A_new, A)
    if window == "fixed":
        end = A.gather(2, lengths.view(R, 1, 1).expand(R, n, 1)).squeeze(2)  # (R, n) = A_s[m][m]
        return end.min(1).values
    return A[:, 0].min(1).values  # free end


class KTHExpEditScheme(KeyedNoiseScheme):
    """KTH EXP-edit: keyed Gumbel noise indexed by position, Levenshtein permutation test (Kuditipudi et al. 2024)."""

    name = "kth-exp-edit"
    Params = KTHExpEditParams
    strength = Strength.none("distortion-free: keyed uniforms indexed by position, no strength knob")

    def seed_domain(self) -> str:
        """The key sequence ξ's domain, ``baselines/kth-exp/xi``."""
        return "baselines/kth-exp/xi"

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._table: torch.Tensor | None = None  # (n, V) float32, built on first use
        self._shift: torch.Tensor | None = None  # (B,) int64, per generation

    # ------------------------------------------------------------------ key sequence
    def xi(self, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """ξ_row(token) in float64 for broadcastable int64 ``rows`` (in [0, n)) and ``tokens``."""
        return keyed_uniform(self._seed, rows * self.vocab_size + tokens, dtype=torch.float64)

    def table(self) -> torch.Tensor:
        """The whole key sequence ξ as (n, V) float32 (cached; n·V PRF evaluations once)."""
        if self._table is None:
            n, V = self.params.key_len, self.vocab_size
            rows = torch.arange(n, device=self.device)[:, None]  # (n, 1)
            self._table = self.xi(rows, torch.arange(V, device=self.device)[None, :]).clamp(_U_MIN, _U_MAX).float()
        return self._table

    # ------------------------------------------------------------------ generation
    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Forget the previous batch's shifts (new ones are drawn at the first step)."""
        self._shift = None

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor:
        """ξ_{(i+τ_b) mod n} at every target position i of text b: (B, K, V) float32."""
        B = step.tokens.shape[0]
        n = self.params.key_len
        dev = step.marginals.logits.device
        if self._shift is None or self._shift.shape[0] != B:
            if self.params.random_shift:
                self._shift = torch.randint(n, (B,), generator=step.generator, device=dev)
            else:
                self._shift = torch.zeros(B, dtype=torch.long, device=dev)
        rows = (step.marginals.target_positions + self._shift[:, None]) % n  # (B, K)
        return self.table().to(dev)[rows]  # (B, K, V)

    # ------------------------------------------------------------------ detection
    def statistic(self, ids: torch.Tensor, lengths: torch.Tensor, null: bool = False) -> torch.Tensor:
        """φ under the key (null=False, → (B,)) or under the P null key sequences (→ (B, P)).

        Args:
            ids: (B, M) int64, the valid tokens of each text first.
            lengths: (B,) int64 valid tokens per text.
        """
        p = self.params
        B, M = ids.shape
        n, V = p.key_len, self.vocab_size
        c = torch.arange(n, device=self.device)
        if not null:
            cost = torch.log1p(-self.xi(c[None, None, :], ids[:, :, None])).float()  # (B, M, n)
            return levenshtein_min(cost, lengths, p.edit_cost, p.window)
        P = p.n_permutations
        per = max(1, _DP_BUDGET // max(1, n * (M + 1)))  # DP rows per chunk
        k_chunk = max(1, per // max(B, 1))  # null keys per chunk
        out = []
        for k0 in range(0, P, k_chunk):  # chunks of null keys (memory), each fully vectorised
            k = torch.arange(k0, min(P, k0 + k_chunk), device=self.device)  # (k,)
            counter = ((k[None, :, None, None] * n + c[None, None, None, :]) * V + ids[:, None, :, None])  # (B, k, M, n)
            xi = keyed_uniform(p.null_seed, counter, stream=1, dtype=torch.float64)
            cost = torch.log1p(-xi).float().flatten(0, 1)  # (B·k, M, n)
            phi = levenshtein_min(cost, lengths.repeat_interleave(k.numel()), p.edit_cost, p.window)  # (B·k,)
            out.append(phi.view(B, -1))
        return torch.cat(out, 1)  # (B, P)

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """φ, its null-standardised z and the permutation p-value; ids, valid (B, N)."""
        ids, valid = self.check_ids(ids, valid)
        order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # valid tokens first, in order
        ids = ids.gather(1, order)
        lengths = valid.sum(1)  # (B,)
        ids = ids[:, : int(lengths.max()) if lengths.numel() else 0]
        phi = self.statistic(ids, lengths).double()  # (B,)
        null = self.statistic(ids, lengths, null=True).double()  # (B, P)
        P = null.shape[1]
        p_value = permutation_pvalue(null, phi, "less")  # a small φ is watermarked
        var = null.var(1, unbiased=True) if P > 1 else torch.ones_like(phi)
        z = standardise(-phi, -null.mean(1), var)  # sign flipped: large z is watermarked
        p_value = torch.where(lengths > 0, p_value, torch.ones_like(p_value))
        method = f"permutation test ({P} null key sequences; resolution {1.0 / (P + 1):.3g})"
        return SchemeScores(score=z, z=z, p_value=p_value, n_scored=lengths.long(), p_value_method=method)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """No closed form for the Levenshtein statistic: the detector uses the permutation p-value."""
        raise NotImplementedError

    def describe(self) -> dict:
        """Config plus the p-value resolution."""
        d = super().describe()
        d["p_value_resolution"] = 1.0 / (self.params.n_permutations + 1)
        return d

