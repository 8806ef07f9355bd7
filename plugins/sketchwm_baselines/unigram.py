"""``unigram``: the Unigram watermark of Zhao et al. 2023 (a fixed green list).

X. Zhao, P. Ananth, L. Li, Y.-X. Wang, "Provable Robust Watermarking for AI-Generated Text"
(ICLR 2024, arXiv 2306.17439). One keyed green list G ⊂ V of size ⌊γV⌋, the same at every
position (Alg. 1): every logit is shifted by δ on G, l̃_v = l_v + δ·1[v ∈ G]. In a DLM the tilt
needs no context, so it applies to every masked position at every step.

Detection (Alg. 2) scores each *distinct* token of the text once: with n distinct tokens of which
g are green, z = (g − γn)/√(nγ(1−γ)) (their eq. for the z-score). Under a random key, G is a
uniformly random ⌊γV⌋-subset of V, so g is exactly Hypergeometric(V, ⌊γV⌋, n): the p-value
P(X >= g) is exact. ``score`` = −log10 p.
"""

from __future__ import annotations

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, MarginalReads, SchemeScores, Strength, WatermarkScheme, distinct_token_sums
from sketchwm.config import StrictModel
from sketchwm.prf import keyed_uniform
from sketchwm.stats import hypergeom_logsf, log10_threshold, scores_from_log_p, standardise


__all__ = ["UnigramScheme", "UnigramParams"]


class UnigramParams(StrictModel):
    """Parameters of ``unigram``.

    Attributes:
        gamma: green ratio γ (the list holds ⌊γV⌋ tokens, at least 1).
        delta: logit shift δ on green tokens.
        min_tokens: shortest text the detector accepts.
    """

    gamma: float = Field(0.5, gt=0, lt=1)
    delta: float = Field(2.0, ge=0)
    min_tokens: int = Field(16, ge=1)


class UnigramScheme(WatermarkScheme):
    """Unigram watermark: one keyed green list for every position (Zhao et al. 2023)."""

    name = "unigram"
    Params = UnigramParams
    strength = Strength("delta", (0.5, 1.0, 2.0, 3.0))  # green-logit shift δ; default 2
    reads = MarginalReads.sampled()  # the tilt of a row depends on that row only

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        V = self.vocab_size
        self.n_green = max(1, int(self.params.gamma * V))
        # the ⌊γV⌋ tokens of smallest keyed uniform: a key-uniform random subset of exact size
        u = keyed_uniform(key.seed("baselines/unigram"), torch.arange(V, device=self.device), dtype=torch.float64)  # (V,)
        self.green_mask = torch.zeros(V, dtype=torch.bool, device=self.device)
        self.green_mask[torch.argsort(u)[: self.n_green]] = True  # (V,)

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """l + δ·1[v ∈ G] at every target row; (B, K, V) float32."""
        logits = step.marginals.target_logits()
        if self.params.delta == 0.0:
            return logits
        return logits + self.params.delta * self.green_mask.to(logits)[None, None, :]

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """z-score and exact hypergeometric p-value of the distinct tokens; ids, valid (B, N)."""
        ids, valid = self.check_ids(ids, valid)
        g, n = distinct_token_sums(ids, valid, *self._tables())  # (B,) distinct green, distinct tokens
        gamma = self.n_green / self.vocab_size
        z = standardise(g, gamma * n, n * gamma * (1 - gamma))
        log_p = hypergeom_logsf(g, self.vocab_size, self.n_green, n)
        return scores_from_log_p(log_p, z, n, "exact hypergeometric (distinct tokens)")

    def _tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(V + 1,) int8 green and all-ones tables with 0 on the padding id V (cached)."""
        t = self.__dict__.get("_green_tables")
        if t is None:
            pad = torch.zeros(1, dtype=torch.int8, device=self.device)
            t = self._green_tables = (torch.cat([self.green_mask.to(torch.int8), pad]),
                                      torch.cat([torch.ones(self.vocab_size, dtype=torch.int8, device=self.device), pad]))
        return t

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """−log10 α: ``score`` is −log10 of an exact p-value, so this holds at every length."""
        return log10_threshold(alpha)
