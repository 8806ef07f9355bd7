"""Where the marginals of a denoising step come from: the canvas being denoised (:class:`Canvas`) and
the strategies that run the backend's LM head on the rows a scheme reads (:class:`MarginalSource`
and its amortised variants), with the engine's one NaN/inf check (:func:`check_logits`).

Every strategy returns the same :class:`~sketchwm.components.Marginals` for a step; they differ in
what they compute. The sampler (:class:`sketchwm.engine.MaskedDiffusionSampler`) picks one from its
``marginal_refresh`` setting and the scheme's declared reads (:class:`~sketchwm.components.MarginalReads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .components import DLMBackend, MarginalReads, Marginals, packed_masked_positions, row_index
from .errors import InputError

__all__ = ["Canvas", "MarginalSource", "FullCanvasMarginals", "IncrementalMarginals", "RefreshedMarginals",
           "check_logits"]


def check_logits(logits: torch.Tensor, valid: torch.Tensor, who: str, step: int) -> None:
    """The engine's one NaN/inf check, for the backend's logits and for a scheme's output.

    Args:
        logits: (B, R, V) float32; valid: (B, R) bool, the rows that matter.
        who: e.g. ``backend 'tiny'``; step: the step index, for the message.

    Raises:
        InputError: a valid row holds NaN or +inf, or is -inf everywhere (amax propagates NaN).
    """
    if not bool(torch.isfinite(logits.amax(-1))[valid].all()):
        raise InputError(f"{who} returned NaN or inf logits at step {step}")


@dataclass
class Canvas:
    """The state of one batch being denoised.

    Attributes:
        prompt_ids: (B, P) int64 left-padded prompts; prompt_mask: (B, P) bool, True on real tokens.
        tokens: (B, G) int64 generation region, ``mask_token_id`` where masked.
        mask_token_id: id of [MASK].
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    tokens: torch.Tensor
    mask_token_id: int

    @property
    def masked(self) -> torch.Tensor:
        """(B, G) bool, M_t."""
        return self.tokens == self.mask_token_id

    def model_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt + generation ids (B, P+G) int64 and the attention mask (B, P+G) bool."""
        gen_mask = torch.ones_like(self.tokens, dtype=torch.bool)
        return torch.cat([self.prompt_ids, self.tokens], 1), torch.cat([self.prompt_mask, gen_mask], 1)

    def commit(self, targets: torch.Tensor, x0: torch.Tensor, chosen: torch.Tensor) -> None:
        """Unmask: tokens[b, targets[b, j]] = x0[b, j] where chosen (all (B, K))."""
        self.tokens = self.tokens.scatter(1, targets, torch.where(chosen, x0, torch.gather(self.tokens, 1, targets)))


# ------------------------------------------------------------------ marginal sources (speed strategies)
class MarginalSource:
    """Where the marginals of a step come from: the backend's LM head on the rows a scheme reads.

    Every strategy returns the same :class:`Marginals` for a step; they differ in what they compute.
    This one is exact: the LM head on the declared rows only (``DLMBackend.logits_at``).

    Args:
        backend: the :class:`DLMBackend`; banned: (n,) int64 ids set to -inf.
    """

    def __init__(self, backend: DLMBackend, banned: torch.Tensor):
        self.backend, self.banned = backend, banned

    def reset(self) -> None:
        """Forget per-generation state (called before each batch)."""

    def marginals(self, canvas: Canvas, reads: MarginalReads, targets: torch.Tensor, target_valid: torch.Tensor,
                  step: int, refresh: "bool | torch.Tensor" = True) -> Marginals:
        """The :class:`Marginals` of ``reads`` for the targets (B, K) int64 / (B, K) bool at this step.

        ``refresh``: whether the sampler's ``marginal_refresh`` schedule is due at this step (the
        amortised strategies compute every declared row only then; this one always does): True,
        False, or a (B, G) bool mask of the positions to refresh (a partial refresh; strategies
        without one refresh every row).

        Raises:
            InputError: NaN or inf logits from the backend on a valid row.
        """
        positions, valid, rows = reads.layout(canvas.masked, targets, target_valid)
        return Marginals(self.fetch(canvas, positions, valid, step), positions, valid, rows, target_valid)

    def fetch(self, canvas: Canvas, positions: torch.Tensor, valid: torch.Tensor, step: int,
              at: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """Backend logits at generation positions (B, R) int64 → (B, R, V) float32, banned ids at -inf,
        checked on the ``valid`` rows (:func:`check_logits`); ``at``: the canvas's
        :meth:`DLMBackend.logits_rows`, when the step asks for rows in more than one round.

        Raises:
            InputError: logits of another shape, or NaN/inf on a valid row.
        """
        index = positions + canvas.prompt_ids.shape[1]
        if at is None:
            x, attn = canvas.model_inputs()
            logits = self.lm_head(x, attn, index).float()
        else:
            logits = at(index).float()
        want = (*positions.shape, self.backend.vocab_size)
        if logits.shape != want:
            raise InputError(f"backend '{self.backend.name}' returned logits of shape {tuple(logits.shape)}, expected {want}")
        if self.banned.numel():
            logits[..., self.banned] = float("-inf")
        check_logits(logits, valid, f"backend '{self.backend.name}'", step)
        return logits

    def lm_head(self, x: torch.Tensor, attn: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The model's logits at input positions index (B, R) → (B, R, V)."""
        return self.backend.logits_at(x, attn, index)


class FullCanvasMarginals(MarginalSource):
    """Reference strategy: the LM head on every position (``DLMBackend.logits``, (B, P+G, V)), then
    the declared rows are picked from it. Slow; what the tests compare the exact strategy with."""

    def lm_head(self, x: torch.Tensor, attn: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Gather the rows ``index`` (B, R) from the full (B, P+G, V) logits."""
        full = self.backend.logits(x, attn)
        return torch.gather(full, 1, index[..., None].expand(-1, -1, full.shape[-1]))


class IncrementalMarginals(MarginalSource):
    """Amortised strategy for ``MarginalReads.masked(incremental=True)`` (``SamplerConfig.marginal_refresh``
    other than 1): at a full refresh the LM head runs on every masked row (a complete
    :class:`Marginals`); at a partial refresh (``refresh`` a (B, G) mask: the block about to be
    denoised) on the masked rows of the mask and the targets; in between on the K targets only, and
    the masked rows within the declaration's ``radius`` of them when it has one and a reader asks for
    them (:meth:`Marginals.wider`; a partial refresh of those rows).
    The last two are passed with ``complete`` False and the scheme updates its running statistic
    from them (O(K·V) per step instead of O(M·V)). Other declarations are computed exactly.
    """

    def marginals(self, canvas: Canvas, reads: MarginalReads, targets: torch.Tensor, target_valid: torch.Tensor,
                  step: int, refresh: "bool | torch.Tensor" = True) -> Marginals:
        """See :meth:`MarginalSource.marginals`; the targets (and the rows of a partial refresh) otherwise.

        Between refreshes, a declaration with a radius gets the targets alone, and the rows within the
        radius on demand (:meth:`Marginals.wider`: the LM head on them, on the same forward pass of the
        model, :meth:`DLMBackend.logits_rows`); those are the rows and logits of a partial refresh of them.
        """
        if not reads.incremental:
            return super().marginals(canvas, reads, targets, target_valid, step)
        if isinstance(refresh, bool) and refresh:  # complete, and the scheme should hold the rows
            m = super().marginals(canvas, reads, targets, target_valid, step)
            m.incremental_follows = True
            return m
        rows = torch.arange(targets.shape[1], device=targets.device).expand_as(targets)
        if reads.radius and isinstance(refresh, bool):
            # the targets now; the rows within the radius of a target (a partial refresh of them) only if
            # a reader asks (Marginals.wider), from the same forward pass of the model
            x, attn = canvas.model_inputs()
            at = self.backend.logits_rows(x, attn)
            masked = canvas.masked  # (B, G): this step's, whenever a reader asks

            def near() -> Marginals:
                return self._partial_refresh(canvas, masked, reads.near_targets(masked, targets, target_valid),
                                             targets, target_valid, step, at)

            return Marginals(self.fetch(canvas, targets, target_valid, step, at), targets, target_valid, rows,
                             target_valid, complete=False, widen=near)
        if isinstance(refresh, bool):  # the targets alone
            return Marginals(self.fetch(canvas, targets, target_valid, step), targets, target_valid, rows, target_valid,
                             complete=False)
        if reads.radius:  # a partial refresh, and the rows within the radius of a target, fresh
            refresh = refresh | reads.near_targets(canvas.masked, targets, target_valid)
        return self._partial_refresh(canvas, canvas.masked, refresh, targets, target_valid, step)

    def _partial_refresh(self, canvas: Canvas, masked: torch.Tensor, refresh: torch.Tensor, targets: torch.Tensor,
                         target_valid: torch.Tensor, step: int,
                         at: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Marginals:
        """The masked rows of ``refresh`` (B, G) bool and the targets, fresh (``complete`` False); ``at``:
        the step's :meth:`DLMBackend.logits_rows` when the targets were already read from it."""
        chosen = torch.zeros_like(masked).scatter_(1, targets, target_valid)
        positions, valid = packed_masked_positions(masked & (refresh | chosen))
        rows = torch.gather(row_index(positions, masked.shape[1]), 1, targets)
        return Marginals(self.fetch(canvas, positions, valid, step, at), positions, valid, rows,
                         target_valid, complete=False)


class RefreshedMarginals(MarginalSource):
    """Amortised strategy (``SamplerConfig.marginal_refresh`` other than 1) for schemes that read every
    masked row without updating a statistic incrementally: the LM head runs on all of them only at
    refresh steps; in between, the masked rows that are not targets keep their marginals from the
    last refresh (masked rows are never re-masked, so they are a subset of the refreshed ones),
    gathered into a full (B, R, V) tensor, and only the K target rows are computed fresh. Other
    declarations read rows that move with the targets and are computed exactly.

    Args:
        backend, banned: as :class:`MarginalSource`.
    """

    def __init__(self, backend: DLMBackend, banned: torch.Tensor):
        super().__init__(backend, banned)
        self.cache: tuple[torch.Tensor, torch.Tensor] | None = None  # (logits (B, R0, V), row of each position (B, G))

    def reset(self) -> None:
        """Drop the cached rows."""
        self.cache = None

    def marginals(self, canvas: Canvas, reads: MarginalReads, targets: torch.Tensor, target_valid: torch.Tensor,
                  step: int, refresh: "bool | torch.Tensor" = True) -> Marginals:
        """See :meth:`MarginalSource.marginals`; cached rows between refreshes (a partial refresh refreshes all)."""
        if reads.kind != "masked" or self.cache is None or not (isinstance(refresh, bool) and not refresh):
            m = super().marginals(canvas, reads, targets, target_valid, step)
            if reads.kind == "masked":  # hooks may tilt target_logits() in place: never let it alias the cache
                row_of = row_index(m.positions, canvas.tokens.shape[1])
                self.cache = (m.logits.clone() if m.rows_are_targets else m.logits, row_of)
            return m
        positions, valid, rows = reads.layout(canvas.masked, targets, target_valid)
        old_logits, old_row_of = self.cache
        V = old_logits.shape[-1]
        logits = torch.gather(old_logits, 1, torch.gather(old_row_of, 1, positions)[..., None].expand(-1, -1, V))
        fresh = self.fetch(canvas, targets, target_valid, step)  # (B, K, V): the LM head on the targets only
        b_idx, k_idx = target_valid.nonzero(as_tuple=True)  # the real targets (padding ones repeat or are unmasked)
        logits[b_idx, rows[b_idx, k_idx]] = fresh[b_idx, k_idx]
        return Marginals(logits, positions, valid, rows, target_valid)
