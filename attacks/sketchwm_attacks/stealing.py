"""Watermark stealing (Jovanović, Staab & Vechev 2024, "Watermark Stealing in Large Language Models").

The attacker queries the watermarked model for n outputs and holds unwatermarked text (the base
model's outputs or human text). From token frequencies alone it estimates which tokens (and, for
context-hashed schemes, which (context, token) pairs) the watermark favours, then

* **spoofs**: generates with the *unwatermarked* model, adding ``delta * boost`` to the logits, and
  hopes the detector fires (:meth:`WatermarkStealer.spoof`);
* **scrubs**: finds the tokens of a watermarked text with the highest learned boost and
  regenerates them with the base model, penalising boosted tokens (:class:`StealingScrub`,
  registered as ``steal-scrub``).

Learned score (the paper's §3, eq. for s(T, ctx)): with empirical frequencies p̂_w (watermarked)
and p̂_b (base), additively smoothed,

    s(T, ctx) = min(r, c) / c  if r = p̂_w(T | ctx) / p̂_b(T | ctx) >= 1, else 0,      c = ``clip`` (2)

for the empty context (per-token, s0) and for the left-neighbour context (per-context, s1; only
pairs seen at least ``min_count`` times in the watermarked data). The boost of token T after
token t is ``s0(T) + context_weight * s1(t, T)``. In a masked diffusion LM the "context" of a
position is its left neighbour in the text, used when that neighbour is already decoded.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, MarginalReads, SchemeScores, WatermarkScheme
from sketchwm.config import StrictModel
from sketchwm.errors import InputError

from .base import AttackParams, EditResult, TextAttack, n_edits
from .paraphrase import resample_masked

__all__ = ["StealerConfig", "WatermarkStealer", "SpoofScheme", "StealingScrub"]


class StealerConfig(StrictModel):
    """Attributes:
    clip: c, the ratio at which a token's score saturates at 1.
    smoothing: additive (Laplace) smoothing of the per-token counts.
    context_prior: strength β of the per-token prior in per-context base frequencies:
        p̂_b(T | t) = (n_b(t, T) + β p̂_b(T)) / (n_b(t) + β).
    min_count: per-context pairs seen fewer times in the watermarked data get no s1.
    context_weight: weight of s1 in the boost (0 = per-token only).
    """

    clip: float = Field(2.0, gt=1.0)
    smoothing: float = Field(1.0, gt=0.0)
    context_prior: float = Field(2.0, gt=0.0)
    min_count: int = Field(2, ge=1)
    context_weight: float = Field(1.0, ge=0.0)


def _flatten(seqs: Sequence[Sequence[int]], V: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All tokens (N,) and all left-neighbour pair keys t*V + T (M,) of a list of sequences."""
    toks, pairs = [], []
    for s in seqs:
        t = torch.as_tensor(list(s), dtype=torch.long)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= V):
            raise InputError(f"token id outside the vocabulary [0, {V})")
        toks.append(t)
        if t.numel() > 1:
            pairs.append(t[:-1] * V + t[1:])
    empty = torch.zeros(0, dtype=torch.long)
    return (torch.cat(toks) if toks else empty), (torch.cat(pairs) if pairs else empty)


class WatermarkStealer:
    """Frequency-ratio model of a watermark learned from its outputs (see module doc).

    Args:
        vocab_size: V.
        config: :class:`StealerConfig` or dict.

    Attributes (after :meth:`fit`):
        token_score: (V,) float32, s0.
        pair_keys: (K,) int64 sorted keys ``t * V + T`` of pairs with a per-context score.
        pair_score: (K,) float32, s1 of those pairs.
        n_watermarked: number of watermarked texts learned from.
    """

    def __init__(self, vocab_size: int, config: "StealerConfig | dict | None" = None):
        self.vocab_size = int(vocab_size)
        self.config = config if isinstance(config, StealerConfig) else StealerConfig.model_validate(config or {})
        self.token_score: torch.Tensor | None = None
        self.pair_keys = torch.zeros(0, dtype=torch.long)
        self.pair_score = torch.zeros(0, dtype=torch.float32)
        self.n_watermarked = 0

    def _score(self, ratio: torch.Tensor) -> torch.Tensor:
        c = self.config.clip
        return torch.where(ratio >= 1.0, ratio.clamp(max=c) / c, torch.zeros_like(ratio)).float()

    def fit(self, watermarked: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> "WatermarkStealer":
        """Learn s0 and s1 from token-id sequences of watermarked and of unwatermarked text.

        Args:
            watermarked: n token-id lists produced by the watermarked model.
            reference: token-id lists of unwatermarked text (base model or human).

        Returns:
            self.

        Raises:
            InputError: either set has no tokens, or ids outside [0, V).
        """
        V, cfg = self.vocab_size, self.config
        w_tok, w_pair = _flatten(watermarked, V)
        b_tok, b_pair = _flatten(reference, V)
        if w_tok.numel() == 0 or b_tok.numel() == 0:
            raise InputError("watermark stealing needs non-empty watermarked and reference texts")
        cw = torch.bincount(w_tok, minlength=V).double()  # (V,)
        cb = torch.bincount(b_tok, minlength=V).double()  # (V,)
        a = cfg.smoothing
        pw = (cw + a) / (cw.sum() + a * V)  # (V,)
        pb = (cb + a) / (cb.sum() + a * V)  # (V,)
        self.token_score = self._score(pw / pb)  # (V,)
        # per-context (left neighbour) ratios, on the pairs seen in the watermarked data
        keys, n_w = torch.unique(w_pair, return_counts=True)  # (K,), (K,)
        keep = n_w >= cfg.min_count
        keys, n_w = keys[keep], n_w[keep].double()
        if keys.numel():
            ctx, tok = keys // V, keys % V
            ctx_w = torch.bincount(w_pair // V, minlength=V).double()  # (V,) n_w(t)
            ctx_b = torch.bincount(b_pair // V, minlength=V).double()  # (V,) n_b(t)
            b_keys, n_b = torch.unique(b_pair, return_counts=True)
            nb = torch.zeros_like(n_w)  # (K,) n_b(t, T)
            if b_keys.numel():
                pos = torch.searchsorted(b_keys, keys).clamp(max=b_keys.numel() - 1)
                nb = torch.where(b_keys[pos] == keys, n_b[pos].double(), nb)
            beta = cfg.context_prior
            pw_c = (n_w + beta * pw[tok]) / (ctx_w[ctx] + beta)  # (K,)
            pb_c = (nb + beta * pb[tok]) / (ctx_b[ctx] + beta)  # (K,)
            self.pair_keys, self.pair_score = keys, self._score(pw_c / pb_c)
        else:
            self.pair_keys, self.pair_score = keys, torch.zeros(0, dtype=torch.float32)
        self.n_watermarked = len(watermarked)
        return self

    # ------------------------------------------------------------------ queries
    def _check(self) -> torch.Tensor:
        if self.token_score is None:
            raise InputError("the watermark stealer has not been fitted (call fit first)")
        return self.token_score

    def context_rows(self, prev: torch.Tensor) -> torch.Tensor:
        """Per-context boosts s1(prev, ·) for a batch of left neighbours.

        Args:
            prev: (M,) int64 token ids, or -1 where the neighbour is unknown (masked / none).

        Returns:
            (M, V) float32, zero where no per-context score was learned.
        """
        V = self.vocab_size
        M = prev.shape[0]
        out = torch.zeros(M, V, dtype=torch.float32)
        if self.pair_keys.numel() == 0 or M == 0:
            return out
        ctx = self.pair_keys // V  # (K,) sorted
        tok = self.pair_keys % V  # (K,)
        uniq, inv = torch.unique(prev, return_inverse=True)  # (U,), (M,)
        lo = torch.searchsorted(ctx, uniq)  # (U,)
        hi = torch.searchsorted(ctx, uniq, right=True)  # (U,)
        table = torch.zeros(uniq.shape[0], V, dtype=torch.float32)  # (U, V)
        counts = (hi - lo).clamp(min=0)
        u_idx = torch.repeat_interleave(torch.arange(uniq.shape[0]), counts)  # (E,)
        offs = torch.arange(int(counts.sum())) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        k_idx = torch.repeat_interleave(lo, counts) + offs  # (E,)
        table[u_idx, tok[k_idx]] = self.pair_score[k_idx]
        table[uniq < 0] = 0.0
        return table[inv]  # (M, V)

    def boosts(self, tokens: torch.Tensor, unknown: torch.Tensor | None = None) -> torch.Tensor:
        """Boost of every vocabulary token at every position, given the current left neighbours.

        Args:
            tokens: (B, L) int64 current tokens.
            unknown: (B, L) bool, positions whose token is not known yet (masked); None = all known.

        Returns:
            (B, L, V) float32: ``s0[None, None, :] + context_weight * s1(tokens[:, i-1], ·)``.
        """
        B, L = tokens.shape
        prev = torch.full((B, L), -1, dtype=torch.long)
        prev[:, 1:] = tokens[:, :-1]
        if unknown is not None:
            prev[:, 1:] = prev[:, 1:].masked_fill(unknown[:, :-1], -1)
        return self.boosts_given_prev(prev)

    def boosts_given_prev(self, prev: torch.Tensor) -> torch.Tensor:
        """Boost of every vocabulary token at positions whose left neighbours are ``prev``.

        Args:
            prev: (B, L) int64 left-neighbour token of each position, −1 where unknown.

        Returns:
            (B, L, V) float32: ``s0[None, None, :] + context_weight * s1(prev, ·)``.
        """
        s0 = self._check()
        B, L = prev.shape
        out = s0[None, None, :].expand(B, L, -1).clone()  # (B, L, V)
        if self.config.context_weight > 0:
            out += self.config.context_weight * self.context_rows(prev.reshape(-1)).reshape(B, L, -1)
        return out

    def token_boosts(self, ids: Sequence[int]) -> torch.Tensor:
        """Boost of each token of a text given its actual left neighbour: (N,) float32."""
        t = torch.as_tensor(list(ids), dtype=torch.long)[None, :]  # (1, N)
        return self.batch_token_boosts(t, torch.ones_like(t, dtype=torch.bool))[0]

    def batch_token_boosts(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Boost of each valid token given its left neighbour among the valid tokens (padding skipped).

        Args:
            ids: (B, N) int64 token ids; valid: (B, N) bool, False on padding.

        Returns:
            (B, N) float32 boosts of the valid tokens packed to the left (in text order), 0 after them.
        """
        s0 = self._check()
        ids, valid = ids.long().cpu(), valid.bool().cpu()
        order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # valid tokens first, in order
        t, ok = ids.gather(1, order), valid.gather(1, order)  # (B, N)
        out = torch.where(ok, s0[t.clamp(0, self.vocab_size - 1)], torch.zeros((), dtype=s0.dtype))  # (B, N)
        if self.config.context_weight > 0 and t.shape[1] > 1 and self.pair_keys.numel():
            keys = t[:, :-1] * self.vocab_size + t[:, 1:]  # (B, N-1) left-neighbour pairs
            pos = torch.searchsorted(self.pair_keys, keys.contiguous()).clamp(max=self.pair_keys.numel() - 1)
            hit = (self.pair_keys[pos] == keys) & ok[:, 1:]  # (B, N-1)
            out[:, 1:] += self.config.context_weight * torch.where(hit, self.pair_score[pos], torch.zeros_like(out[:, 1:]))
        return out

    # ------------------------------------------------------------------ spoofing
    def spoof(
        self,
        backend: Any,
        prompts: Sequence[str],
        generator: torch.Generator,
        delta: float = 4.0,
        sampler_config: Any = None,
    ) -> Any:
        """Generate from the unwatermarked model with logit boosts ``delta * boost`` (a spoofing attempt).

        Args:
            backend: the attacker's (unwatermarked) DLM backend, same tokenizer as the watermark.
            prompts: B prompts.
            generator: randomness.
            delta: boost strength δ_att added to the logits.
            sampler_config: :class:`sketchwm.engine.SamplerConfig` or dict (None = backend defaults).

        Returns:
            :class:`sketchwm.engine.GenerationOutput`.
        """
        from sketchwm.engine import MaskedDiffusionSampler

        scheme = SpoofScheme(self, delta)
        return MaskedDiffusionSampler(backend, sampler_config, scheme=scheme).generate(list(prompts), generator=generator)


class SpoofScheme(WatermarkScheme):
    """The spoofer's generation hook (not registered): adds ``delta * boost`` to masked positions' logits.

    Its :meth:`score_ids` is the attacker's own estimate (mean learned boost), not a detector.
    """

    name = "stolen-spoof"
    reads = MarginalReads.sampled()  # a row's boost depends on its known left neighbour only

    class Params(StrictModel):
        """delta: boost strength."""

        delta: float = Field(4.0, ge=0.0)

    def __init__(self, stealer: WatermarkStealer, delta: float = 4.0):
        super().__init__({"delta": delta}, key=None, vocab_size=stealer.vocab_size)
        self.stealer = stealer

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """logits + δ · boost at the target rows, (B, K, V); the left neighbour of position 0 is the
        prompt's last token."""
        B = step.tokens.shape[0]
        logits = step.marginals.target_logits()
        ctx = torch.cat([step.prompt_ids[:, -1:].cpu(), step.tokens.cpu()], 1)  # (B, 1+G)
        unknown = torch.cat([torch.zeros(B, 1, dtype=torch.bool), step.masked.cpu()], 1)  # (B, 1+G)
        prev = ctx[:, :-1].masked_fill(unknown[:, :-1], -1)  # (B, G) left neighbour of each position
        prev = torch.gather(prev, 1, step.marginals.target_positions.cpu())  # (B, K)
        boost = self.stealer.boosts_given_prev(prev)  # (B, K, V)
        return logits + self.params.delta * boost.to(logits.device)

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Mean learned boost per text (the attacker's view; p-values undefined → NaN); ids, valid (B, N)."""
        boosts = self.stealer.batch_token_boosts(ids, valid)  # (B, N), valid tokens packed left
        n = valid.sum(1).cpu().long()  # (B,)
        score = torch.where(n > 0, boosts.double().sum(1) / n.clamp_min(1), torch.zeros(n.shape, dtype=torch.float64))
        nan = torch.full_like(score, float("nan"))
        return SchemeScores(score=score, z=nan, p_value=nan.clone(), n_scored=n, p_value_method="none (attacker estimate)")


class StealingScrubParams(AttackParams):
    """Attributes:
    stealer: :class:`StealerConfig` fields for a stealer fitted from resources.
    delta: penalty δ subtracted (times the boost) from the base model's logits when refilling.
    steps: denoising steps of the refill.
    temperature: sampling temperature of the refill.
    """

    stealer: StealerConfig = StealerConfig()
    delta: float = Field(4.0, ge=0.0)
    steps: int = Field(4, ge=1)
    temperature: float = Field(1.0, ge=0.0)


class StealingScrub(TextAttack):
    """Scrub a watermark with a stolen frequency model: regenerate the most-boosted tokens.

    Strength s: the ``round(s * N)`` tokens of the N-token text with the highest learned boost
    (given their left neighbour; ties broken at random) are masked and refilled by the
    unwatermarked DLM with logits ``- delta * boost`` and the original token banned at its
    position. ``edit_fraction`` = tokens changed / N.

    Resources: ``backend`` (default: the registry's ``default``), and either ``stealer`` (a fitted
    :class:`WatermarkStealer`) or ``watermarked_texts`` (list of str, the attacker's n samples)
    with optional ``reference_texts`` (unwatermarked, default: the shipped human passages).

    Raises:
        InputError: no stealer and no ``watermarked_texts``.
    """

    name = "steal-scrub"
    Params = StealingScrubParams
    needs_backend: ClassVar[bool] = True

    @property
    def stealer(self) -> WatermarkStealer:
        """The ``stealer`` resource, or one fitted from ``watermarked_texts`` on first use."""
        return self._resource("stealer", self._fit_stealer)

    def _fit_stealer(self) -> WatermarkStealer:
        from .insertion import load_human_texts

        w_ids, r_ids = self._stolen_ids(default_reference=load_human_texts)
        return WatermarkStealer(self.backend.vocab_size, self.params.stealer).fit(w_ids, r_ids)

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        be, st = self.backend, self.stealer
        limit = max(8, be.max_length)
        encoded = [ids[:limit] for ids in be.encode(texts)]  # scrub the first max_length tokens
        masks = []
        for ids in encoded:
            k = n_edits(strength, len(ids))
            if k == 0:
                masks.append([])
                continue
            b = st.token_boosts(ids) + 1e-6 * torch.rand(len(ids), generator=generator)  # (N,) random tie-break
            masks.append(sorted(torch.topk(b, k).indices.tolist()))
        mask_id, delta, s0, w = be.mask_token_id, self.params.delta, st.token_score, st.config.context_weight

        def make_penalty(orig_rows: list[list[int]]):
            """A ``logit_hook`` for :func:`resample_masked` over a batch whose original rows are given."""
            orig = torch.full((len(orig_rows), max(1, max(len(r) for r in orig_rows))), -1, dtype=torch.long)
            for b, r in enumerate(orig_rows):  # per row: building the batch
                orig[b, : len(r)] = torch.as_tensor(r, dtype=torch.long)

            def penalise(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
                """logits (B, L, V) - δ · boost at masked positions, whose original token is banned."""
                masked = x == mask_id  # (B, L)
                bi, li = masked.nonzero(as_tuple=True)  # (M,), (M,)
                prev = torch.where(li > 0, x[bi, (li - 1).clamp(min=0)], torch.full_like(li, -1))  # (M,)
                prev = torch.where((li > 0) & masked[bi, (li - 1).clamp(min=0)], torch.full_like(prev, -1), prev)
                boost = s0[None, :] + w * st.context_rows(prev) if w > 0 else s0[None, :]  # (M, V)
                out = logits.clone()
                out[bi, li] -= delta * boost
                o = orig[bi, li.clamp(max=orig.shape[1] - 1)]  # (M,)
                keep = o >= 0
                out[bi[keep], li[keep], o[keep]] = float("-inf")  # never put the original token back
                return out

            return penalise

        new: list[list[int]] = []
        for b0 in range(0, len(encoded), 16):
            rows = encoded[b0 : b0 + 16]
            new.extend(
                resample_masked(be, rows, masks[b0 : b0 + 16], generator, steps=self.params.steps,
                                temperature=self.params.temperature, remasking="low_confidence",
                                logit_hook=make_penalty(rows))
            )
        changed = [sum(int(a != c) for a, c in zip(encoded[t], new[t])) for t in range(len(texts))]
        outs = [be.decode(n) if changed[t] else texts[t] for t, n in enumerate(new)]  # unchanged → verbatim
        fracs = [changed[t] / len(encoded[t]) if encoded[t] else 0.0 for t in range(len(texts))]
        return EditResult(outs, fracs, {"stealer_n": st.n_watermarked, "backend": getattr(be, "model_id", be.name)})
