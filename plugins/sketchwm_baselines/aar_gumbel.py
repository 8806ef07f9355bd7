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

Repeated contexts (``repeats``, context keying). With ``keyed`` (the baseline as published) every
position whose context is known draws with its context's row, so two positions of one text that share
a context hash share their uniforms: their tokens are correlated, and at low entropy the same context
keeps producing the same continuation (a repetition loop the per-token KL does not see). With
``fresh`` a row is used at most once per text: a target whose context hash was already keyed at a
committed position of the text, or at an earlier target of the same step, draws with the sampler's
noise instead. Then over random keys every keyed draw uses an independent row, so the whole text,
not only each token, is distributed as the (tilted) model's sampler would draw it, and the detector
loses only what it deduplicates anyway (it scores each distinct (hash, token) pair once).

Detection (Aaronson's score, as in Three Bricks): S = Σ_t −log(1 − r_{x_t}) over the scored tokens. Under a random key
every r_{x_t} of a distinct (hash, token) pair is iid U(0, 1), so each term is Exp(1) and S ~
Gamma(n, 1): the p-value P(Gamma(n, 1) >= S) is exact. Repeated (hash, token) pairs are scored
once (context keying). ``score`` = −log10 p, ``z`` = (S − n)/√n.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, SchemeScores, Strength
from sketchwm.prf import keyed_uniform
from sketchwm.stats import gamma_logsf, log10_threshold, scores_from_log_p, standardise

try:  # the optional C extension (pyproject.toml ext-modules): the detector's score in one pass per text
    from sketchwm._fastids import gumbel_scores as _gumbel_scores
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _gumbel_scores = None

from .context import (ContextParams, KeyedNoiseScheme, KeyedRowCache, context_hash, first_occurrence, gather_context,
                      over_row_slices,
                      pair_counter)

__all__ = ["AARGumbelScheme", "AARGumbelParams"]

#: clamp of the keyed uniforms passed to the sampler (float32 rounding could otherwise give 1.0)
_U_MIN, _U_MAX = 1e-12, 1.0 - 2.0**-24


class AARGumbelParams(ContextParams):
    """Parameters of ``aar-gumbel``.

    Attributes:
        keying: ``context`` (PRF of the context hash) or ``position`` (PRF of the position).
        repeats: ``keyed`` (every known context draws with its row) or ``fresh`` (a context hash is
            keyed at most once per text; module doc, "Repeated contexts"). Context keying only.
        context, hash: the context set and hash for ``context`` keying (:class:`ContextParams`).
        min_tokens: shortest text the detector accepts.
    """

    keying: Literal["context", "position"] = "context"
    repeats: Literal["keyed", "fresh"] = "keyed"
    min_tokens: int = Field(16, ge=1)


class AARGumbelScheme(KeyedNoiseScheme):
    """Aaronson's Gumbel-max watermark: keyed uniforms replace the sampling noise (distortion-free).

    Args:
        params: :class:`AARGumbelParams`.
        key: the :class:`sketchwm.keys.WatermarkKey`.
        vocab_size: V.
        device: where tables live.
        scored_vocab: (V,) bool, the tokens whose (context, token) pairs the detector scores (None,
            the default: every pair). A combined scheme passes it when this is one of its channels
            (``global-sketch-green`` scores the sketch's kept tokens only).
    """

    name = "aar-gumbel"
    Params = AARGumbelParams
    strength = Strength.none("distortion-free: keyed uniforms replace the sampling noise, no strength knob")

    def __init__(self, params, key, vocab_size: int, device="cpu", scored_vocab: torch.Tensor | None = None):
        super().__init__(params, key, vocab_size, device)
        self._rows = KeyedRowCache()
        self._keyed: torch.Tensor | None = None  # (B, G) int64: hash each position was last keyed with, -1 = fresh noise
        #: (V,) bool or None: the detector scores only pairs whose token is True here (None: every pair)
        self.scored_vocab: torch.Tensor | None = scored_vocab

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
        """Drop the uniform rows cached for the previous batch (and, for ``repeats: fresh``, the record
        of which context hashes the batch has keyed)."""
        self._rows.reset()
        self._keyed = None

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
        sel = m.at_targets(step.masked & ok) & m.target_valid  # (B, K) keyable now
        noise = torch.rand((B, K, V), generator=step.generator, device=dev).clamp_(_U_MIN, _U_MAX)  # (B, K, V)
        hashes = m.at_targets(context_hash(ctx, V, p.hash))  # (B, K)
        if p.repeats == "fresh":
            sel = self._once_per_text(step, hashes, sel)
        if not bool(sel.any()):
            return noise
        rows = self._rows.lookup(hashes, sel, self.uniform_rows, V, torch.float32)  # (B, K, V)
        return torch.where(sel[..., None], rows, noise)

    def _once_per_text(self, step: DenoiseStep, hashes: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
        """``repeats: fresh``: the keyable targets whose context hash no committed position of the text
        was keyed with and no earlier target of this step holds; records what each target draws with.

        Args:
            step: the step (tokens, masked (B, G) and the targets' positions).
            hashes: (B, K) int64 context hash of each target.
            sel: (B, K) bool, the targets that could be keyed.

        Returns:
            (B, K) bool, the targets to key.
        """
        B, G = step.tokens.shape
        if self._keyed is None or self._keyed.shape != (B, G):
            self._keyed = torch.full((B, G), -1, dtype=torch.long, device=hashes.device)
        used = torch.where(step.masked, torch.full_like(self._keyed, -1), self._keyed)  # (B, G): committed and keyed
        seen = ((hashes[:, :, None] == used[:, None, :]) & (used[:, None, :] >= 0)).any(-1)  # (B, K)
        sel = sel & ~seen
        sel = first_occurrence(hashes, sel)  # one target per hash (first_occurrence is False off sel)
        valid = step.marginals.target_valid
        b, k = valid.nonzero(as_tuple=True)  # (n,)
        pos = step.marginals.target_positions[b, k]  # (n,)
        self._keyed[b, pos] = torch.where(sel[b, k], hashes[b, k], torch.full_like(pos, -1))
        return sel

    # ------------------------------------------------------------------ detection
    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """S = Σ −log(1 − r_x) with its exact Gamma(n, 1) p-value; ids, valid (B, N)."""
        ids, valid = self.check_ids(ids, valid)
        fast = self._gumbel_scores_c(ids, valid)
        s, n = fast if fast is not None else self._torch_scores(ids, valid)
        z = standardise(s, n.double(), n.double())
        return scores_from_log_p(gamma_logsf(s, n), z, n, "exact Gamma(n, 1)")

    def _torch_scores(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, n) of :meth:`score_ids` in torch: S (B,) float64 Aaronson's score, n (B,) int64 the scored
        pairs (checked ids (B, N) int64, valid (B, N) bool)."""
        p = self.params
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
        if self.scored_vocab is not None:
            keep = keep & self.scored_vocab.to(ids.device)[ids]  # (B, N): pairs of scored tokens only
        r = self.uniforms(counters)  # (B, N) float64
        return (-torch.log1p(-r) * keep).sum(1), keep.sum(1)  # (B,), (B,)

    def _gumbel_scores_c(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(S, n): S (B,) float64 Aaronson's score and n (B,) int64 the scored pairs, in one C pass per text
        (the optional extension's ``gumbel_scores``: the same contexts, counters, PRF, first occurrences
        and ``scored_vocab`` as the torch path, S equal up to summation order;
        ``tests/test_sketch_green.py``; rows split over the detector's threads), or None where it does
        not apply: no extension, not on the CPU, position keying, or a subclass with its own uniforms."""
        if (_gumbel_scores is None or ids.device.type != "cpu" or self.keying != "context"
                or type(self).uniforms is not AARGumbelScheme.uniforms):
            return None
        B, N = ids.shape
        s, n = np.zeros(B, np.float64), np.zeros(B, np.int64)
        seed = int(self._seed) & 0xFFFFFFFFFFFFFFFF
        x = np.ascontiguousarray(ids.numpy(), dtype=np.int64).reshape(-1)  # numpy views: see green.py
        v = np.ascontiguousarray(valid.numpy()).view(np.uint8).reshape(-1)
        keep = b"" if self.scored_vocab is None else np.ascontiguousarray(self.scored_vocab.cpu().numpy(), dtype=np.uint8)
        args = (tuple(int(o) for o in self.params.context), self.params.hash == "ordered", self.vocab_size,
                seed & 0xFFFFFFFF, seed >> 32, 0, keep)

        def run(a: int, b: int) -> None:  # rows [a, b): contiguous slices, the GIL released inside
            _gumbel_scores(x[a * N:b * N], v[a * N:b * N], b - a, N, *args, s[a:b], n[a:b])

        over_row_slices(run, B, N)
        return torch.from_numpy(s), torch.from_numpy(n)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """−log10 α: ``score`` is −log10 of an exact p-value, so this holds at every length."""
        return log10_threshold(alpha)
