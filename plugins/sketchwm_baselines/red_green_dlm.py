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
strength, the same logit scale as KGW's δ (a green token with a known context gets +δ from the
expectation boost alone); ``normalize`` divides it by |O| + 1, the largest possible ∂J/∂p, as the
reference code does when it does not search a KL budget. The KL-budget search is not implemented.

Vectorisation: every marginal is represented by its top candidates (``top_k_context`` of them as a
context, ``top_k_token`` as the scored token; a known or prompt token is a point mass); the hash
distribution of a position is the set of its context candidates (their pairwise sums for
|O| = 2) with product weights. J is evaluated on (B, G, pairs, k) and differentiated with autograd
with respect to the candidate weights: the context weights give the predictive bias, the token
weights the expectation boost; both are scattered back onto the vocabulary. Tokens outside the
top-k get no boost, as in the reference's top-k approximation; with top-k >= V it is exact.
Detection: binomial test on the green count with repeated (hash, token) pairs removed
(:class:`~sketchwm_baselines.green.ContextGreenListScheme`).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from sketchwm.channels import Tilt
from sketchwm.components import DenoiseStep, MarginalReads, Strength
from sketchwm.marginal_sums import row_logsumexp

from .context import context_hash
from .green import ContextGreenListScheme, GreenListParams

__all__ = ["RedGreenDLMScheme", "RedGreenDLMParams"]


class RedGreenDLMParams(GreenListParams):
    """Parameters of ``red-green-dlm``.

    Attributes:
        context, hash, gamma, delta, min_tokens: see :class:`GreenListParams`.
        terms: ``both`` gradient terms, or only ``expectation-boost`` / ``predictive-bias``.
        top_k_context: candidates kept per context marginal for the hash distribution.
        top_k_token: candidates kept per target marginal.
        normalize: use δ/(|O| + 1) as the tilt strength (the reference code's scaling).
    """

    terms: Literal["both", "expectation-boost", "predictive-bias"] = "both"
    top_k_context: int = Field(16, ge=1)
    top_k_token: int = Field(64, ge=1)
    normalize: bool = False


class RedGreenDLMScheme(ContextGreenListScheme):
    """Red-green watermark for DLMs: tilt along ∇J of the expected green score (Gloaguen et al. 2025)."""

    name = "red-green-dlm"
    Params = RedGreenDLMParams
    strength = Strength("delta", (0.5, 1.0, 2.0, 3.0))  # green-logit shift δ; default 2

    @property
    def reads(self) -> MarginalReads:
        """The target row j's gradient reads the candidates of i + o' for i = j − o (o, o' ∈ O):
        the masked rows within 2·max|o| of j are all it needs."""
        return MarginalReads.near(2 * max(abs(o) for o in self.params.context))

    # ------------------------------------------------------------------ expected green score
    def _context_slots(self, t: torch.Tensor, w: torch.Tensor, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor):
        """Candidates of the token at i + o for every offset o (prompt tokens are point masses).

        Args:
            t, w: (B, G, k) candidates of the generation region.
            prompt_ids, prompt_mask: (B, P) left-padded prompt.

        Returns:
            list over offsets of (tokens (B, G, k), weights (B, G, k)); weight 0 = no context.
        """
        B, G, k = t.shape
        offs = self.params.context
        L, R = max(0, -min(offs)), max(0, max(offs))
        left_t = torch.zeros((B, L, k), dtype=torch.long, device=t.device)
        left_w = torch.zeros((B, L, k), dtype=w.dtype, device=t.device)
        take = min(L, prompt_ids.shape[1])
        if take > 0:
            left_t[:, L - take:, 0] = prompt_ids[:, -take:]
            left_w[:, L - take:, 0] = prompt_mask[:, -take:].to(w.dtype)
        ext_t = torch.cat([left_t, t, torch.zeros((B, R, k), dtype=torch.long, device=t.device)], 1)  # (B, L+G+R, k)
        ext_w = torch.cat([left_w, w, torch.zeros((B, R, k), dtype=w.dtype, device=t.device)], 1)
        return [(ext_t[:, L + o: L + o + G], ext_w[:, L + o: L + o + G]) for o in offs]  # ≤ 2 offsets

    def expected_green_candidates(
        self, t: torch.Tensor, w_ctx: torch.Tensor, w_tok: torch.Tensor, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
        rows: torch.Tensor | None = None, rows_valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """J of eq. (J) from candidate lists (the weights may require grad).

        Args:
            t: (B, G, k) candidate tokens of every position.
            w_ctx: (B, G, k) their weights as seen by the positions that use them as context.
            w_tok: (B, G, k) their weights as the scored token itself.
            prompt_ids, prompt_mask: (B, P) left-padded prompt.
            rows: None (sum over all G positions), or (B, R) int64 distinct positions i whose terms
                of J are summed (the terms a set of positions' gradients depend on).
            rows_valid: (B, R) bool with ``rows``, False on padding entries.

        Returns:
            (B,) float.
        """
        p = self.params
        kc, kv = min(p.top_k_context, t.shape[-1]), min(p.top_k_token, t.shape[-1])
        slots = self._context_slots(t[..., :kc], w_ctx[..., :kc], prompt_ids, prompt_mask)
        t, w_tok = t[..., :kv], w_tok[..., :kv]
        if rows is not None:  # only the terms of the positions in ``rows``
            def pick(x: torch.Tensor) -> torch.Tensor:
                return torch.gather(x, 1, rows[..., None].expand(-1, -1, x.shape[-1]))

            slots = [(pick(a), pick(b)) for a, b in slots]
            t, w_tok = pick(t), pick(w_tok) * rows_valid[..., None].to(w_tok.dtype)
        h_tok, h_w = slots[0]  # (B, G, kc)
        if len(slots) == 2:  # hash candidates: every pair of the two offsets' candidates
            t1, w1 = slots[1]
            pair = torch.stack(torch.broadcast_tensors(h_tok[..., :, None], t1[..., None, :]), -1)  # (B, G, kc, kc, 2)
            h_tok = context_hash(pair, self.vocab_size, p.hash).flatten(-2)  # (B, G, kc²)
            h_w = (h_w[..., :, None] * w1[..., None, :]).flatten(-2)  # (B, G, kc²) = P_i(h) per candidate
        else:
            h_tok = context_hash(h_tok[..., None], self.vocab_size, p.hash)  # (B, G, kc)
        green = self.green(h_tok[..., :, None], t[..., None, :]).to(w_tok.dtype)  # (B, G, pairs, kv)
        # J = Σ_i Σ_h Σ_v P_i(h) p_i(v) G(h, v)
        return torch.einsum("bgh,bgv,bghv->b", h_w, w_tok, green)  # (B,)

    def gradient_rows(self, positions: torch.Tensor, G: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The positions whose terms of J involve the marginal of a position in ``positions``.

        p_j enters the term of j itself and, as context, the terms of i = j − o for o in the context
        set O. The gradient of J at the positions j equals the gradient of the sum of those terms.

        Args:
            positions: (B, K) int64 generation-region positions j.
            G: generation length.

        Returns:
            rows (B, R) int64 (distinct per text) and valid (B, R) bool, as
            :func:`sketchwm.engine.packed_masked_positions` packs them.
        """
        from sketchwm.engine import packed_masked_positions

        B = positions.shape[0]
        at_j = torch.zeros((B, G), dtype=torch.bool, device=positions.device).scatter_(1, positions, True)
        need = at_j.clone()
        for o in self.params.context:  # i = j - o, for j in positions, within [0, G)
            if o > 0:
                need[:, : G - o] |= at_j[:, o:]
            elif o < 0:
                need[:, -o:] |= at_j[:, : G + o]
        return packed_masked_positions(need)

    def expected_green(self, q: torch.Tensor, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """J of eq. (J) per text under marginals q (B, G, V) (one-hot rows for known tokens), top-k truncated.

        Differentiable in q (through the top-k values). Returns (B,) float, Σ_i E[G(h_i, x_i)].
        """
        k = min(max(self.params.top_k_context, self.params.top_k_token), q.shape[-1])
        w, t = torch.topk(q, k, dim=-1)  # (B, G, k)
        return self.expected_green_candidates(t, w, w, prompt_ids, prompt_mask)

    def marginal_candidates(self, step: DenoiseStep, read: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k candidates of every position's distribution, from the packed rows of ``step.marginals``.

        ``read``: None, or (B, G) bool, the positions whose candidates are wanted (:meth:`read_positions`).
        Where they are at most half of the held rows, the top-k and normaliser run on those rows only
        (copied out; the same values there, each row's are its own) and the other held rows are left as
        their [MASK] point mass; otherwise every held row is computed in place, as with None.

        Returns:
            tokens (B, G, k) int64 and weights (B, G, k) float32, sorted by weight (k = the larger
            top-k): the marginal's top-k at the masked rows the marginals hold, a point mass on the
            token at known positions. Masked positions the marginals do not hold (farther than
            :attr:`reads`' radius from every target) are left as a point mass on their [MASK] id,
            which no term of the targets' gradient reads.
        """
        m = step.marginals
        k = min(max(self.params.top_k_context, self.params.top_k_token), m.logits.shape[-1])
        x = m.logits.float()  # (B, R, V)
        B, G = step.tokens.shape
        t = torch.zeros((B, G, k), dtype=torch.long, device=x.device)
        w = torch.zeros((B, G, k), dtype=x.dtype, device=x.device)
        t[..., 0] = step.tokens  # known positions: a point mass on their token
        w[..., 0] = 1.0
        keep = m.valid if read is None else m.valid & torch.gather(read, 1, m.positions)  # (B, R)
        if read is None or 2 * int(keep.sum()) > int(m.valid.sum()):
            # most held rows are read (every row is a target, as in a user's loop): every row, in place.
            # softmax is monotone in the logits: the top-k of the logits, their probabilities from the
            # row's log-normaliser (cache-blocked; no (B, R, V) softmax written)
            top, t_m = torch.topk(x, k, dim=-1)  # (B, R, k)
            w_m = (top - row_logsumexp(x)[..., None]).exp_()  # (B, R, k)
            idx = m.positions[..., None].expand(-1, -1, k)  # (B, R, k)
            kept = m.valid[..., None]  # padding rows point at known positions: leave those
            t.scatter_(1, idx, torch.where(kept, t_m, torch.gather(t, 1, idx)))
            w.scatter_(1, idx, torch.where(kept, w_m, torch.gather(w, 1, idx)))
            return t, w
        b, r = keep.nonzero(as_tuple=True)  # the wanted rows, (n,) each
        rows = x[b, r]  # (n, V)
        top, t_m = torch.topk(rows, k, dim=-1)  # (n, k)
        ref = int(x[0, 0].argmax()) if x.shape[1] else None  # the reference entry of the whole tensor's normaliser
        w_m = (top - row_logsumexp(rows, ref=ref)[..., None]).exp_()  # (n, k)
        pos = m.positions[b, r]  # (n,)
        t[b, pos], w[b, pos] = t_m, w_m
        return t, w

    def read_positions(self, rows: torch.Tensor, rows_valid: torch.Tensor, G: int) -> torch.Tensor:
        """The positions whose candidates the terms of J at ``rows`` (B, R) int64 / ``rows_valid`` (B, R)
        bool read (:meth:`expected_green_candidates`): each i itself and its contexts i + o, o ∈ O,
        within [0, G) → (B, G) bool."""
        at = torch.zeros((rows.shape[0], G), dtype=torch.bool, device=rows.device).scatter_(1, rows, rows_valid)
        read = at.clone()
        for o in self.params.context:  # the context of i is p = i + o: read[p] = at[p − o]
            if o > 0:
                read[:, o:] |= at[:, : G - o]
            elif o < 0:
                read[:, : G + o] |= at[:, -o:]
        return read

    def candidate_gradient(self, step: DenoiseStep) -> tuple[torch.Tensor, torch.Tensor]:
        """∂J/∂p_i(v) on the candidates (:meth:`marginal_candidates`): tokens (B, G, k) int64 and
        gradient (B, G, k) float32, exact at the target rows (only the terms of J their marginals
        enter are summed, :meth:`gradient_rows`), zero at known positions.

        The gradient with respect to the context weights is the predictive bias, the one with
        respect to the token weights the expectation boost (``terms`` keeps one or both).
        """
        rows, rows_valid = self.gradient_rows(step.marginals.target_positions, step.masked.shape[1])
        t, w = self.marginal_candidates(step, self.read_positions(rows, rows_valid, step.masked.shape[1]))  # (B, G, k)
        terms = self.params.terms
        with torch.enable_grad():
            w_ctx = w.detach().requires_grad_(terms != "expectation-boost")
            w_tok = w.detach().requires_grad_(terms != "predictive-bias")
            J = self.expected_green_candidates(t, w_ctx, w_tok, step.prompt_ids, step.prompt_mask, rows, rows_valid)  # (B,)
            leaves = [x for x in (w_ctx, w_tok) if x.requires_grad]
            grads = torch.autograd.grad(J.sum(), leaves)  # each (B, G, k)
        return t, sum(grads) * step.masked[..., None]  # known positions are not tilted

    def tilt_direction(self, step: DenoiseStep) -> torch.Tensor:
        """∂J/∂p_i(v) at the target rows, scattered onto the vocabulary: (B, K, V) float32, zero at
        known positions."""
        t, g = self.candidate_gradient(step)
        m = step.marginals
        K, V = m.targets.shape[1], m.logits.shape[-1]
        zeros = torch.zeros((t.shape[0], K, V), dtype=torch.float32, device=t.device)
        return zeros.scatter_add_(-1, m.at_targets(t), m.at_targets(g))  # (B, K, V)

    def tilt(self, step: DenoiseStep) -> Tilt | None:
        """The logit increment of the exponential tilt (tilt) at the target rows, read at the step's
        marginals: δ·∂J/∂p on each target's candidates, a :class:`~sketchwm.channels.Tilt` with
        ``index`` (B, K, k) int64 and ``value`` (B, K, k) float32 (δ/(|O| + 1) with ``normalize``);
        None when δ = 0 or nothing is masked."""
        p = self.params
        if p.delta == 0.0 or not bool(step.masked.any()):
            return None
        strength = p.delta / (len(p.context) + 1) if p.normalize else p.delta
        t, g = self.candidate_gradient(step)  # (B, G, k) each
        m = step.marginals
        return Tilt(index=m.at_targets(t), value=strength * m.at_targets(g))

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Exponential tilt (tilt) in logit space at the target rows: l + δ·∂J/∂p, (B, K, V) float32
        (``step.marginals.target_logits()`` modified in place; :meth:`tilt`)."""
        increment = self.tilt(step)
        logits = step.marginals.target_logits()
        return logits if increment is None else increment.add_to(logits)
