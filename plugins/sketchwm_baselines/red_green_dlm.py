"""``red-green-dlm``: the red-green watermark for diffusion LMs of Gloaguen et al. 2025.

T. Gloaguen, R. Staab, N. Jovanović, M. Vechev, "Watermarking Diffusion Language Models",
arXiv 2509.24368. Green lists as in KGW, G(h, v) ~ Bernoulli(γ), seeded by the hash h of the
context tokens (SumHash over a context set O such as {-1} or {-1, +1}). In a DLM the context of a
masked position is itself uncertain, so at every denoising step the scheme maximises the
*expected green score* of the final text under the factorised marginals p_i (their eq. for J):

    J(p) = Σ_i Σ_h Σ_v P_i(h) · p_i(v) · G(h, v),                            (J)

where P_i(h) = P(Σ_{o∈O} x_{i+o} = h) is the hash distribution of position i, computed from the
neighbours' marginals (a convolution of them for SumHash; a point mass for known tokens and for
prompt tokens). Each masked marginal is exponentially tilted along the gradient of J,

    p̃_i(v) ∝ p_i(v) · exp(δ · ∂J/∂p_i(v)),                                   (tilt)

and ∂J/∂p_j(v) has two terms:
  * the *expectation boost*  Σ_h P_j(h) G(h, v) — how green v is at j given j's uncertain context;
  * the *predictive bias*    Σ_{o} Σ_{v'} p_{j-o}(v') Σ_h ∂P_{j-o}(h)/∂p_j(v) G(h, v') — how much
    choosing v at j makes the tokens that use j as context green.
``terms`` selects both (default) or one of them (the paper's ablation). δ is the plain tilt
strength; the reference code's optional KL-budget search is not implemented.

Vectorisation: the hash distribution is represented by the top-``top_k_context`` candidates of each
context marginal (their pairwise sums for |O| = 2), the target by its top-``top_k_token``
candidates; J is evaluated on (B, G, pairs, k) and differentiated with autograd, which yields
both terms at once (tokens outside the top-k get no boost, as in the reference's top-k
approximation). With top-k >= V the computation is exact. Detection: binomial test on the green
count with repeated (hash, token) pairs removed
(:class:`~sketchwm_baselines.common.ContextGreenListScheme`).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep

from .common import ContextGreenListScheme, GreenListParams, context_hash

__all__ = ["RedGreenDLMScheme", "RedGreenDLMParams"]


class RedGreenDLMParams(GreenListParams):
    """Parameters of ``red-green-dlm``.

    Attributes:
        context, hash, gamma, delta, min_tokens: see :class:`GreenListParams`.
        terms: ``both`` gradient terms, or only ``expectation-boost`` / ``predictive-bias``.
        top_k_context: candidates kept per context marginal for the hash distribution.
        top_k_token: candidates kept per target marginal.
    """

    terms: Literal["both", "expectation-boost", "predictive-bias"] = "both"
    top_k_context: int = Field(16, ge=1)
    top_k_token: int = Field(64, ge=1)


class RedGreenDLMScheme(ContextGreenListScheme):
    """Red-green watermark for DLMs: tilt along ∇J of the expected green score (Gloaguen et al. 2025)."""

    name = "red-green-dlm"
    Params = RedGreenDLMParams

    # ------------------------------------------------------------------ expected green score
    def _candidates(self, q: torch.Tensor, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, k: int):
        """Top-k candidates of every context slot, per offset.

        Args:
            q: (B, G, V) marginals of the generation region (one-hot where known).
            prompt_ids, prompt_mask: (B, P) left-padded prompt.
            k: candidates per slot.

        Returns:
            list over offsets o of (tokens (B, G, k) int64, weights (B, G, k) float) for the
            token at i + o (weights 0 where there is no context).
        """
        B, G, V = q.shape
        offs = self.params.context
        L, R = max(0, -min(offs)), max(0, max(offs))
        w, t = torch.topk(q, k, dim=-1)  # (B, G, k), differentiable in q
        left_t = torch.zeros((B, L, k), dtype=torch.long, device=q.device)
        left_w = torch.zeros((B, L, k), dtype=q.dtype, device=q.device)
        take = min(L, prompt_ids.shape[1])
        if take > 0:
            left_t[:, L - take:, 0] = prompt_ids[:, -take:]
            left_w[:, L - take:, 0] = prompt_mask[:, -take:].to(q.dtype)  # point mass on the prompt token
        ext_t = torch.cat([left_t, t, torch.zeros((B, R, k), dtype=torch.long, device=q.device)], 1)  # (B, L+G+R, k)
        ext_w = torch.cat([left_w, w, torch.zeros((B, R, k), dtype=q.dtype, device=q.device)], 1)
        return [(ext_t[:, L + o: L + o + G], ext_w[:, L + o: L + o + G]) for o in offs]  # ≤ 2 offsets

    def expected_green(
        self, q: torch.Tensor, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, terms: str = "both"
    ) -> torch.Tensor:
        """J of eq. (J) per text, under the (top-k truncated) marginals.

        Args:
            q: (B, G, V) float marginals (one-hot rows for known tokens).
            prompt_ids, prompt_mask: (B, P) left-padded prompt (the context of the first positions).
            terms: which inputs J is differentiable in: ``both``; ``expectation-boost`` detaches the
                hash distributions, ``predictive-bias`` detaches the target marginals.

        Returns:
            (B,) float, Σ_i E[G(h_i, x_i)] over the generation region.
        """
        p = self.params
        V = q.shape[-1]
        kc, kv = min(p.top_k_context, V), min(p.top_k_token, V)
        ctx = self._candidates(q, prompt_ids, prompt_mask, kc)
        # hash candidates: every combination of the offsets' candidates (kc or kc² of them)
        h_tok, h_w = ctx[0][0], ctx[0][1]  # (B, G, kc)
        if len(ctx) == 2:
            t1, w1 = ctx[1]
            pair = torch.stack(torch.broadcast_tensors(h_tok[..., :, None], t1[..., None, :]), -1)  # (B, G, kc, kc, 2)
            h_tok = context_hash(pair, self.vocab_size, p.hash).flatten(-2)  # (B, G, kc²)
            h_w = (h_w[..., :, None] * w1[..., None, :]).flatten(-2)  # (B, G, kc²) = P_i(h) per candidate
        else:
            h_tok = context_hash(h_tok[..., None], self.vocab_size, p.hash)  # (B, G, kc)
        pv, tv = torch.topk(q, kv, dim=-1)  # (B, G, kv)
        if terms == "expectation-boost":
            h_w = h_w.detach()
        elif terms == "predictive-bias":
            pv = pv.detach()
        green = self.green(h_tok[..., :, None], tv[..., None, :]).to(q.dtype)  # (B, G, pairs, kv)
        # J_i = Σ_pairs Σ_v P_i(h) p_i(v) G(h, v)
        return torch.einsum("bgh,bgv,bghv->b", h_w, pv, green)  # (B,)

    def tilt_direction(self, step: DenoiseStep) -> torch.Tensor:
        """∂J/∂p_i(v) at the current marginals: (B, G, V) float32, zero at known positions."""
        masked = step.masked  # (B, G)
        with torch.enable_grad():
            probs = torch.softmax(step.logits.float(), dim=-1).detach().requires_grad_(True)  # (B, G, V)
            onehot = torch.nn.functional.one_hot(step.tokens.clamp(0, self.vocab_size - 1), self.vocab_size).to(probs.dtype)
            q = torch.where(masked[..., None], probs, onehot)  # (B, G, V): known tokens are point masses
            J = self.expected_green(q, step.prompt_ids, step.prompt_mask, self.params.terms)  # (B,)
            (grad,) = torch.autograd.grad(J.sum(), probs)  # (B, G, V)
        return grad * masked[..., None]

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Exponential tilt (tilt) in logit space: l + δ·∂J/∂p at masked positions; (B, G, V) float32."""
        if self.params.delta == 0.0 or not bool(step.masked.any()):
            return step.logits
        return step.logits + self.params.delta * self.tilt_direction(step)
