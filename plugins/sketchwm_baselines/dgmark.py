"""``dgmark``: decoding-guided watermarking for diffusion LMs (order steering with a keyed parity).

P. M. Hong, A. No, "dgMARK: Decoding-Guided Watermarking for Diffusion Language Models",
arXiv 2601.22985 (ICML 2026). Only the paper's abstract and project page could be read here (the
method section and its algorithm/equation numbers were not reachable), so this implementation
follows their description, which the equations below make precise; it cites no equation number
of the paper and is not a line-by-line reproduction:

* a binary hash of (previous token, token) pairs gives a keyed *parity*
  b(h, v) = PRF(k, h·V + v) mod 2, iid Bernoulli(½) over distinct pairs;            (parity)
* the unmasking *order* is steered towards positions whose candidate token satisfies the parity,
  with no change to any logit ("without explicitly reweighting the model's learned
  probabilities"), so it works under greedy decoding; it is plug-and-play with the sampler's own
  order (confidence, entropy, ...), which decides among positions of equal parity standing;
* detection counts parity matches ("elevated parity-matching statistics").

Steering (:meth:`DGMarkScheme.order_priority`): at each step every masked position i of the block
is a candidate with its drawn token x_i (the argmax at T = 0). Committing x_i completes the pair
(x_{i−1}, x_i) when its left neighbour is already decoded and the pair (x_i, x_{i+1}) when its right
neighbour is; its parity standing is

    s_i = Σ_{completed pairs (h, v)} (2·b(h, v) − 1)  ∈ {−2, …, 2},                  (standing)

and the priority is π_i = c_i + strength·s_i, c_i ∈ [0, 1) the rank of the remasking rule's
confidence among the text's candidates. With ``strength`` = 1 (default) the standing decides
first and the rule's order breaks ties; 0 is the unwatermarked order. A position whose only
completed pair mismatches is deferred, and its token may change once more context is decoded.
The one-step lookahead variant of the paper and its sliding-window detector are not implemented.

Detection (:meth:`DGMarkScheme.score_ids`): the pairs (x_{i−1}, x_i) of the text, each distinct
pair counted once (a repeated pair repeats its bit); under a text independent of the key the g
matches among n distinct pairs are Binomial(n, ½), the one-sided p-value P(X ≥ g) is exact
(``scipy.stats.binom``), ``score`` = −log10 p, ``z`` = (g − n/2)/√(n/4).
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, MarginalReads, SchemeScores, Strength, WatermarkScheme
from sketchwm.config import StrictModel
from sketchwm.prf import keyed_bits
from sketchwm.stats import binomial_logsf, log10_threshold, scores_from_log_p, standardise

from .context import first_occurrence, pair_counter

__all__ = ["DGMarkScheme", "DGMarkParams", "parity_bits"]


def parity_bits(seed: int, prev: torch.Tensor, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Keyed parity b(h, v) = PRF(seed, h·V + v) mod 2 of (previous token, token) pairs (eq. parity).

    Args:
        seed: the scheme's keyed seed; prev, tokens: broadcastable int64 tensors of ids in [0, V).
        vocab_size: V.

    Returns:
        bool tensor of the broadcast shape, True where the pair satisfies the parity.
    """
    return (keyed_bits(seed, pair_counter(prev, tokens, vocab_size)) & 1) == 1


def rank_fraction(score: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each valid entry's rank among its row's valid entries, scaled to [0, 1) (higher score, higher
    rank): score (B, K) float, valid (B, K) bool → (B, K) float32 (0 on padding)."""
    s = torch.where(valid, score.float(), torch.full_like(score.float(), float("-inf")))
    order = torch.argsort(s, dim=1)  # ascending: padding first
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    n_pad = (~valid).sum(1, keepdim=True)  # (B, 1)
    n_valid = valid.sum(1, keepdim=True).clamp_min(1)
    return torch.where(valid, (rank - n_pad).float() / n_valid.float(), torch.zeros_like(s))


class DGMarkParams(StrictModel):
    """Parameters of ``dgmark``.

    Attributes:
        strength: weight of the parity standing against the remasking rule's order in the priority
            (module doc): 1 = the standing decides first (default), 0 = no watermark.
        min_tokens: shortest text the detector accepts.
    """

    strength: float = Field(1.0, ge=0, le=1)
    min_tokens: int = Field(16, ge=1)


class DGMarkScheme(WatermarkScheme):
    """dgMARK (Hong & No 2026): steer the unmasking order towards keyed-parity pairs; no logit changes."""

    name = "dgmark"
    Params = DGMarkParams
    strength = Strength("strength", (0.25, 0.5, 0.75, 1.0))  # weight of the keyed-parity standing; default 1
    #: the steering reads the drawn tokens and the decoded neighbours, no marginal beyond the targets
    reads = MarginalReads.sampled()
    seed_domain = "baselines/dgmark-parity"

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._seed = key.seed(self.seed_domain)

    def parity(self, prev: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """b(h, v) for broadcastable previous tokens and tokens → bool (:func:`parity_bits`)."""
        return parity_bits(self._seed, prev, tokens, self.vocab_size)

    # ------------------------------------------------------------------ generation: the order
    def steers_order(self, temperature: float) -> bool:
        """Always: the order is dgMARK's only channel (at every temperature, greedy included)."""
        return True

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """π_i = c_i + strength·s_i at the targets (module doc, eq. standing): (B, K) float32.

        Args:
            step: the step (targets ``step.marginals.target_positions`` (B, K), tokens and M_t (B, G)).
            x0: (B, K) int64 drawn tokens; confidence: (B, K) the remasking rule's scores.
        """
        pos = step.marginals.target_positions  # (B, K)
        valid = step.marginals.target_valid
        tokens, known = step.tokens, ~step.masked  # (B, G)
        G = tokens.shape[1]
        left = (pos - 1).clamp_min(0)
        right = (pos + 1).clamp_max(G - 1)
        left_known = torch.gather(known, 1, left) & (pos > 0)  # (B, K): the first token has no scored left pair
        right_known = torch.gather(known, 1, right) & (pos < G - 1)
        lt, rt = torch.gather(tokens, 1, left).clamp(0, self.vocab_size - 1), torch.gather(tokens, 1, right).clamp(0, self.vocab_size - 1)
        sign_l = self.parity(lt, x0).float() * 2 - 1  # (B, K) ±1
        sign_r = self.parity(x0, rt).float() * 2 - 1
        standing = sign_l * left_known.float() + sign_r * right_known.float()  # (B, K) in {-2..2}
        return rank_fraction(confidence, valid) + self.params.strength * standing

    # ------------------------------------------------------------------ detection
    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Exact binomial test on the parity matches of distinct (previous token, token) pairs:
        ids, valid (B, N) → :class:`SchemeScores` (B,)."""
        ids, valid = self.check_ids(ids, valid)
        prev = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], 1)  # (B, N) x_{i-1}
        ok = valid & torch.cat([torch.zeros_like(valid[:, :1]), valid[:, :-1]], 1)  # both tokens in the text
        keep = first_occurrence(pair_counter(prev, ids, self.vocab_size), ok)  # (B, N) distinct pairs
        g = (self.parity(prev, ids) & keep).sum(1)  # (B,)
        n = keep.sum(1)
        z = standardise(g, 0.5 * n, 0.25 * n)
        return scores_from_log_p(binomial_logsf(g, n, 0.5), z, n, "exact binomial (distinct token pairs, p = 1/2)")

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """−log10 α: ``score`` is −log10 of an exact p-value, so this holds at every length."""
        return log10_threshold(alpha)
