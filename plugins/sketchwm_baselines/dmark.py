"""``dmark``: DMark, red-green lists keyed on predicted or both-side neighbours in a DLM.

L. Wu, L. Zhong, W. Qu, Y. Li, Y. Liu, S. Zhai, C. Shen, J. Zhang, "DMark: Order-Agnostic
Watermarking for Diffusion Large Language Models", arXiv 2510.02902. The paper's full text was not
reachable from this project (only its abstract), so no equation or algorithm numbers are cited;
the rules below follow the abstract's three strategies and the authors' public reference
implementation (read, not copied).

The watermark is KGW's soft red list (Kirchenbauer et al. 2023, Alg. 2) with the left neighbour as
context: a keyed green list G(h, ·) of ratio γ for every context token h, and detection counts the
pairs (x_{i−1}, x_i) with G(x_{i−1}, x_i) = 1. In a DLM the neighbours of a masked position i may
still be masked when i is decoded; DMark's strategies (``strategy``) say which green lists tilt
the logits l_i of i:

* ``predictive``: h = x_{i−1} if the left neighbour is decoded (or is the last prompt token), else
  its *predicted* token, the argmax of the model's current marginal p_{i−1};
  l̃_i(v) = l_i(v) + δ·G(h, v).
* ``bidirectional``: the left and the right neighbour, each only when decoded:
  l̃_i(v) = l_i(v) + δ·G(x_{i−1}, v)·[x_{i−1} known] + δ·G(v, x_{i+1})·[x_{i+1} known].
  The second term makes the *next* pair (v, x_{i+1}) green: v is the context of x_{i+1}, so it
  raises the candidates v whose green list holds the token already decoded on the right.
* ``predictive-bidirectional`` (default, the paper's strongest): ``bidirectional``, and when
  neither neighbour is decoded, the predicted left neighbour of ``predictive``.

Strength knob: δ (``delta``), a logit shift before the sampler's temperature (each applicable
term adds up to δ, so a position with both neighbours decoded can get 2δ). Defaults γ = 0.5,
δ = 2.0 are those of the reference implementation. The tilt moves the argmax, so it also marks
greedy (T = 0) decoding.

Detection: KGW's z-score with repeated (context, token) pairs removed and the exact one-sided
binomial p-value, shared with ``red-green-dlm`` and ``kgw-naive``
(:class:`~sketchwm_baselines.green.ContextGreenListScheme`, context {−1}): under a random key the
green bits of the n distinct (x_{i−1}, x_i) pairs of a text are iid Bernoulli(γ), so the green count
is Binomial(n, γ) and P(X >= g) is exact. The green lists share their key domain with the other
KGW-family schemes, so one key marks (and detects) all of them at the same γ.

Vectorisation: green rows G(h, ·) and columns G(·, t) are (B, K, V) keyed tables computed with
:func:`sketchwm.prf.keyed_uniform` over (hash, token) counters, cached per target slot
(:class:`~sketchwm_baselines.context.KeyedRowCache`); no loop over tokens or the vocabulary.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, MarginalReads, Strength
from sketchwm.config import StrictModel

from .context import HashKind, KeyedRowCache, gather_context
from .green import ContextGreenListScheme

__all__ = ["DMarkScheme", "DMarkParams"]

Strategy = Literal["predictive", "bidirectional", "predictive-bidirectional"]


class DMarkParams(StrictModel):
    """Parameters of ``dmark``.

    Attributes:
        strategy: which neighbours key the green lists (module doc).
        gamma: green ratio γ; G(h, v) ~ iid Bernoulli(γ) over (context, token) pairs.
        delta: tilt strength δ, the logit shift per applicable green list (the strength knob).
        min_tokens: shortest text the detector accepts.
        context, hash: read-only, the left neighbour as context ((−1,), SumHash of one token = the
            token id), what the shared detector reads.
    """

    strategy: Strategy = "predictive-bidirectional"
    gamma: float = Field(0.5, gt=0, lt=1)
    delta: float = Field(2.0, ge=0)
    min_tokens: int = Field(16, ge=1)

    @property
    def context(self) -> tuple[int, ...]:
        """The context set O = {−1}: the left neighbour."""
        return (-1,)

    @property
    def hash(self) -> HashKind:
        """The context hash of one token: the token id itself."""
        return "sum"


class DMarkScheme(ContextGreenListScheme):
    """DMark: KGW green lists keyed on decoded, predicted or right-hand neighbours (Wu et al. 2025)."""

    name = "dmark"
    Params = DMarkParams
    strength = Strength("delta", (0.5, 1.0, 2.0, 3.0))  # green-logit shift δ; default 2

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._rows = KeyedRowCache()  # G(h, ·) per target slot, keyed by the left context h
        self._cols = KeyedRowCache()  # G(·, t) per target slot, keyed by the right token t

    @property
    def predictive(self) -> bool:
        """Whether the strategy reads predicted left neighbours."""
        return self.params.strategy != "bidirectional"

    @property
    def bidirectional(self) -> bool:
        """Whether the strategy reads the right neighbour."""
        return self.params.strategy != "predictive"

    @property
    def reads(self) -> MarginalReads:
        """A predicted left neighbour is the argmax of the marginal one position left of a target,
        so the predictive strategies read the masked rows within 1 of the targets; ``bidirectional``
        reads the targets alone."""
        return MarginalReads.near(1) if self.predictive else MarginalReads.sampled()

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Drop the green rows and columns cached for the previous batch."""
        self._rows.reset()
        self._cols.reset()

    def green_rows(self, h: torch.Tensor) -> torch.Tensor:
        """G(h, ·) for contexts h (n,) int64 → (n, V) bool."""
        return self.green(h[:, None], torch.arange(self.vocab_size, device=h.device)[None, :])

    def green_cols(self, t: torch.Tensor) -> torch.Tensor:
        """G(·, t) for right tokens t (n,) int64 → (n, V) bool: entry v says whether t is green after v."""
        return self.green(torch.arange(self.vocab_size, device=t.device)[None, :], t[:, None])

    def predicted_tokens(self, step: DenoiseStep) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's predicted token at every masked position whose marginal the step holds.

        Returns:
            tokens (B, G) int64, argmax of the (untilted) marginal p_i at masked rows, the current
            token elsewhere; and have (B, G) bool, True where a prediction was made.
        """
        m = step.marginals
        guess = m.logits.argmax(-1)  # (B, R)
        pred = step.tokens.clone()
        have = torch.zeros_like(step.masked)
        pred.scatter_(1, m.positions, torch.where(m.valid, guess, torch.gather(pred, 1, m.positions)))
        have.scatter_(1, m.positions, m.valid | torch.gather(have, 1, m.positions))
        return pred, have & step.masked

    def neighbour_keys(self, step: DenoiseStep) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The left context h_i and the right token t_i of every generation position, per strategy.

        Returns:
            h (B, G) int64 and use_h (B, G) bool (apply δ·G(h_i, ·)); t (B, G) int64 and use_t (B, G)
            bool (apply δ·G(·, t_i)).
        """
        known = ~step.masked
        left, left_ok = gather_context(step.tokens, known, (-1,), step.prompt_ids, step.prompt_mask)  # (B, G, 1)
        right, right_ok = gather_context(step.tokens, known, (1,))  # (B, G, 1): nothing right of the region
        h, t = left[..., 0], right[..., 0]
        use_t = right_ok if self.bidirectional else torch.zeros_like(right_ok)
        use_h = left_ok
        if self.predictive:
            pred, have = self.predicted_tokens(step)  # (B, G)
            p_left = torch.zeros_like(pred)  # p_left[i] = prediction at i − 1 (none at i = 0: the prompt is known)
            ok_left = torch.zeros_like(have)
            p_left[:, 1:], ok_left[:, 1:] = pred[:, :-1], have[:, :-1]
            fill = ~left_ok & ok_left
            if self.bidirectional:  # predict only where no neighbour is decoded
                fill &= ~right_ok
            h = torch.where(fill, p_left, h)
            use_h = use_h | fill
        return h, use_h, t, use_t

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """l + δ·G(h_i, ·) + δ·G(·, t_i) at the masked target rows (module doc); (B, K, V) float32."""
        p = self.params
        m = step.marginals
        if p.delta == 0.0 or not bool(step.masked.any()):
            return m.target_logits()
        h, use_h, t, use_t = self.neighbour_keys(step)  # (B, G): read before the logits are tilted in place
        logits = m.target_logits()  # (B, K, V)
        V = self.vocab_size
        sel_h = m.at_targets(step.masked & use_h)  # (B, K)
        if bool(sel_h.any()):
            rows = self._rows.lookup(m.at_targets(h), sel_h, self.green_rows, V, torch.bool)  # (B, K, V), valid on sel_h
            logits += p.delta * (rows & sel_h[..., None]).to(logits.dtype)
        sel_t = m.at_targets(step.masked & use_t)  # (B, K)
        if bool(sel_t.any()):
            cols = self._cols.lookup(m.at_targets(t), sel_t, self.green_cols, V, torch.bool)  # (B, K, V), valid on sel_t
            logits += p.delta * (cols & sel_t[..., None]).to(logits.dtype)
        return logits
