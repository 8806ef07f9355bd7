"""``aar-gumbel``: Aaronson's Gumbel-max watermark (distortion-free), ported to masked DLMs.

S. Aaronson, "Watermarking of large language models" (talk, 2023); analysed in Fernandez et al.
2023, "Three Bricks to Consolidate Watermarks for LLMs", and used as the ``AAR`` baseline of
Gloaguen et al. 2025. A keyed uniform vector r ∈ (0, 1)^V is derived from the context
(or the position) of a token, and the token is

    x = argmax_v r_v^{1/p_v} = argmax_v [log p_v − log(−log r_v)],                       (AAR)

i.e. Gumbel-max sampling with the keyed uniforms in place of fresh noise: over random keys, x is
distributed exactly as p (distortion-free). The engine does the argmax; this scheme only supplies
r through :meth:`sampling_uniforms`.

Keying (``keying``):
  * ``context``: r_v = PRF(k, h·V + v) with h the hash of the context tokens (offsets ``context``).
    A masked position whose context is not yet fully known (a masked neighbour) gets the sampler's
    ordinary noise: its token is unwatermarked but still distortion-free.
  * ``position``: r_v = PRF(k, i·V + v) for generation position i (the text must start at the
    first generated token for detection; not robust to insertions/deletions).

Detection (Aaronson's score, as in Three Bricks): S = Σ_t −log(1 − r_{x_t}) over the scored tokens. Under a random key
every r_{x_t} of a distinct (hash, token) pair is iid U(0, 1), so each term is Exp(1) and S ~
Gamma(n, 1): the p-value P(Gamma(n, 1) >= S) is exact. Repeated (hash, token) pairs are scored
once (context keying). ``score`` = −log10 p, ``z`` = (S − n)/√n.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, SchemeScores, Strength
from sketchwm.prf import keyed_uniform
from sketchwm.stats import gamma_logsf, log10_threshold, scores_from_log_p, standardise

from .context import (ContextParams, KeyedNoiseScheme, KeyedRowCache, context_hash, first_occurrence, gather_context,
                      pair_counter)

__all__ = ["AARGumbelScheme", "AARGumbelParams"]

#: clamp of the keyed uniforms passed to the sampler (float32 rounding could otherwise give 1.0)
_U_MIN, _U_MAX = 1e-12, 1.0 - 2.0**-24


class AARGumbelParams(ContextParams):
    """Parameters of ``aar-gumbel``.

    Attributes:
        keying: ``context`` (PRF of the context hash) or ``position`` (PRF of the position).
        context, hash: the context set and hash for ``context`` keying (:class:`ContextParams`).
        min_tokens: shortest text the detector accepts.
    """

    keying: Literal["context", "position"] = "context"
    min_tokens: int = Field(16, ge=1)


class AARGumbelScheme(KeyedNoiseScheme):
    """Aaronson's Gumbel-max watermark: keyed uniforms replace the sampling noise (distortion-free)."""

    name = "aar-gumbel"
    Params = AARGumbelParams
    strength = Strength.none("distortion-free: keyed uniforms replace the sampling noise, no strength knob")

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        super().__init__(params, key, vocab_size, device)
        self._rows = KeyedRowCache()

    @property
    def keying(self) -> str:
        """``context`` or ``position``: what the uniforms are keyed on (``params.keying``)."""
        return self.params.keying

    def seed_domain(self) -> str:
        """One seed per keying: ``baselines/aar-gumbel/<keying>``."""
        return f"baselines/aar-gumbel/{self.params.keying}"

    def uniforms(self, counters: torch.Tensor) -> torch.Tensor:
        """r = PRF(k, counter) in float64, strictly inside (0, 1); counters int64 (any shape)."""
        return keyed_uniform(self._seed, counters, dtype=torch.float64)

    # ------------------------------------------------------------------ generation
    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Drop the uniform rows cached for the previous batch."""
        self._rows.reset()

    def uniform_rows(self, h: torch.Tensor) -> torch.Tensor:
        """r(h, ·) for hashes (or positions) h (n,) → (n, V) float32, clamped for the sampler."""
        vocab = torch.arange(self.vocab_size, device=h.device)
        return self.uniforms(pair_counter(h[:, None], vocab[None, :], self.vocab_size)).clamp(_U_MIN, _U_MAX).float()

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor:
        """Keyed r of eq. (AAR) at every target row that can be keyed: (B, K, V) float32.

        Targets that cannot be keyed (context keying with an unknown context) get uniforms from
        ``step.generator`` (one ``rand`` of shape (B, K, V)); padding targets are ignored by the engine.
        """
        p = self.params
        m = step.marginals
        B, G = step.tokens.shape
        K, V = m.targets.shape[1], m.logits.shape[-1]
        dev = m.logits.device
        if self.keying == "position":  # the same rows for every text: cache (1, G, V), gather the targets
            pos = torch.arange(G, device=dev)[None, :]  # (1, G)
            rows = self._rows.lookup(pos, torch.ones_like(pos, dtype=torch.bool), self.uniform_rows, V, torch.float32)
            return rows[0][m.target_positions]  # (B, K, V)
        ctx, ok = gather_context(step.tokens, ~step.masked, p.context, step.prompt_ids, step.prompt_mask)  # (B, G, |O|)
        sel = m.at_targets(step.masked & ok)  # (B, K) keyable now
        noise = torch.rand((B, K, V), generator=step.generator, device=dev).clamp_(_U_MIN, _U_MAX)  # (B, K, V)
        if not bool(sel.any()):
            return noise
        hashes = m.at_targets(context_hash(ctx, V, p.hash))  # (B, K)
        rows = self._rows.lookup(hashes, sel, self.uniform_rows, V, torch.float32)  # (B, K, V)
        return torch.where(sel[..., None], rows, noise)

    # ------------------------------------------------------------------ detection
    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """S = Σ −log(1 − r_x) with its exact Gamma(n, 1) p-value; ids, valid (B, N)."""
        p = self.params
        ids, valid = self.check_ids(ids, valid)
        B, N = ids.shape
        V = self.vocab_size
        if self.keying == "position":
            pos = torch.arange(N, device=self.device).expand(B, N)  # (B, N)
            keep = valid  # distinct positions: every pair is distinct
            counters = pair_counter(pos, ids, V)  # (B, N)
        else:
            ctx, ok = gather_context(ids, valid, p.context)  # (B, N, |O|)
            counters = pair_counter(context_hash(ctx, V, p.hash), ids, V)  # (B, N)
            keep = first_occurrence(counters, valid & ok)  # (B, N)
        r = self.uniforms(counters)  # (B, N) float64
        s = (-torch.log1p(-r) * keep).sum(1)  # (B,)
        n = keep.sum(1)  # (B,)
        z = standardise(s, n.double(), n.double())
        return scores_from_log_p(gamma_logsf(s, n), z, n, "exact Gamma(n, 1)")

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """−log10 α: ``score`` is −log10 of an exact p-value, so this holds at every length."""
        return log10_threshold(alpha)
