"""The statistic over the masked rows M_t that the expected sketch (eq. 5 of the seed paper) reads, kept
incrementally between marginal refreshes.

Under ``MarginalReads.masked(incremental=True)`` the engine passes every masked row only at
refreshes and the target rows alone in between. :class:`MaskedStatistic` keeps the sum over the
other masked rows from the rows of the last complete step (:class:`RunningSums`): those rows keep
the marginals of that step, the sampler's amortised-refresh approximation
(docs/sampler-approximations.md). ``marginal_refresh = 1`` makes every step complete, and the sums exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sketchwm.components import MarginalReads, Marginals, packed_masked_positions, row_index
from sketchwm.components.expected_sketch import capped_column_sums
from sketchwm.errors import InputError
from sketchwm.marginal_sums import MarginalSums, masked_marginal_sums

__all__ = ["MaskedStatistic", "RunningSums"]


@dataclass
class RunningSums:
    """The statistic over M_t kept between refreshes (:meth:`MaskedStatistic.sums`).

    Attributes:
        logits: (B, R0, V) float32, the rows of the last complete step (not modified).
        row_of: (B, G) int64, the row of ``logits`` of each position masked then.
        base: (B, V) float32, the statistic over the positions masked and not targets at the last
            step, from the rows of the last complete step; None until first needed (a step
            without a tilt, or a stop token, does not compute it).
        base_weights: (B, R0) float32, 1 on the rows of the complete step that were masked and not
            targets (what ``base`` sums when computed late).
        masked: (B, G) bool, M_t at the last step; targets: (B, G) bool, its (valid) targets.
        owned: whether ``logits`` is a copy this object may write (rows renewed by a partial refresh).
    """

    logits: torch.Tensor
    row_of: torch.Tensor
    base: torch.Tensor | None
    base_weights: torch.Tensor
    masked: torch.Tensor
    targets: torch.Tensor
    owned: bool = False

    @classmethod
    def start(cls, marginals: Marginals, masked: torch.Tensor, base: torch.Tensor | None = None) -> "RunningSums":
        """From a complete step: its rows (copied when the hooks may tilt them in place), M_t (B, G)
        bool and, if computed, the statistic over its non-target masked rows (B, V)."""
        logits, owned = marginals.logits, marginals.out is None  # the engine's rows: ours after the step (Marginals doc)
        if marginals.rows_are_targets and marginals.out is None:  # target_logits() is this tensor: keep a copy
            logits = logits.clone()
        row_of = row_index(marginals.positions, masked.shape[1])
        targets = torch.zeros_like(masked).scatter_(1, marginals.target_positions, marginals.target_valid)  # (B, G)
        weights = (marginals.valid & ~marginals.target_rows).to(logits.dtype)
        return cls(logits, row_of, base, weights, masked.clone(), targets, owned)

    def replace(self, marginals: Marginals, rows: torch.Tensor) -> None:
        """Hold the fresh ``marginals.logits`` rows where ``rows`` (B, R) bool is True from now on."""
        if not self.owned:  # the complete step's tensor belongs to a caller that passed ``out``: copy before writing
            self.logits, self.owned = self.logits.clone(), True
        b, r = rows.nonzero(as_tuple=True)
        self.logits[b, self.row_of[b, marginals.positions[b, r]]] = marginals.logits[b, r]

    def rows_at(self, positions: torch.Tensor) -> torch.Tensor:
        """The last complete step's logits at positions (B, n) int64 (masked then) → (B, n, V)."""
        rows = torch.gather(self.row_of, 1, positions)  # (B, n)
        batch = torch.arange(rows.shape[0], device=rows.device)[:, None]  # (B, 1)
        return self.logits[batch, rows]  # whole rows copied: no (B, n, V) index tensor, as a gather would need

    def complete(self, marginals: Marginals, masked: torch.Tensor) -> Marginals:
        """Every masked row: the held ones, with the fresh rows of the incomplete ``marginals`` (the
        targets, and the rows of a partial refresh, which are held from now on)."""
        renew = marginals.valid & ~marginals.target_rows
        if bool(renew.any()):
            self.replace(marginals, renew)
        positions, valid, rows = MarginalReads.masked().layout(masked, marginals.target_positions, marginals.target_valid)
        logits = self.rows_at(positions)
        row_of = row_index(positions, masked.shape[1])
        b, r = marginals.valid.nonzero(as_tuple=True)
        logits[b, row_of[b, marginals.positions[b, r]]] = marginals.logits[b, r]
        self.masked = masked.clone()
        return Marginals(logits, positions, valid, rows, marginals.target_valid, marginals.out)


class MaskedStatistic:
    """The column statistic over M_t of one generation: Σ_{j∈M_t} log(1 − p_j) (``presence``),
    Σ_{j∈M_t} p_j (``count``) or the capped sketch's count laws, (B, V) float32, with the running
    state that carries it between refreshes.

    Args:
        sketch: the scheme's sketch (its ``counting`` and ``cap`` are read).
        tail_epsilon: ε of the tail linearisation (:func:`sketchwm.marginal_sums.masked_marginal_sums`).
    """

    def __init__(self, sketch: Any, tail_epsilon: float):
        self.sketch, self.tail_epsilon = sketch, tail_epsilon
        self.running: RunningSums | None = None

    def reset(self) -> None:
        """Forget the running state (a new generation)."""
        self.running = None

    def state(self) -> RunningSums:
        """The running state of this generation.

        Raises:
            InputError: no complete step since :meth:`reset`.
        """
        if self.running is None:
            raise InputError("incomplete marginals (the targets alone) before any complete step of this generation: "
                             "the first step after begin() must pass every masked row")
        return self.running

    def observe(self, marginals: Marginals, masked: torch.Tensor) -> None:
        """Hold the rows of a complete step without summing them (a step that needs no statistic)."""
        self.running = RunningSums.start(marginals, masked) if marginals.incremental_follows else None

    def all_rows(self, marginals: Marginals, masked: torch.Tensor) -> Marginals:
        """Every masked row at this step: ``marginals`` when complete (held for the steps that follow),
        else the held rows with the fresh ones of ``marginals`` (:meth:`RunningSums.complete`)."""
        if not marginals.complete:
            return self.state().complete(marginals, masked)
        self.observe(marginals, masked)
        return marginals

    def _of(self, logits: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, MarginalSums | None]:
        """The statistic of the rows of ``logits`` (B, R, V) weighted by ``weights`` (B, R)."""
        if self.sketch.counting == "capped":  # (B, k, V) float64, dense (no tail linearisation)
            return capped_column_sums(logits, weights, self.sketch.cap), None
        presence = self.sketch.counting == "presence"
        sums = masked_marginal_sums(logits, weights, eps=self.tail_epsilon, log_absent=presence)
        return (sums.log_absent if presence else sums.mass), sums

    def sums(self, marginals: Marginals, masked: torch.Tensor) -> tuple[torch.Tensor, MarginalSums | None]:
        """The statistic over M_t (masked (B, G) bool) and the :class:`MarginalSums` of the rows passed
        (for the tilt's exact columns; None for ``capped``).

        A complete :class:`Marginals` is summed in full and starts the running state: ``base``, the
        sum over the masked rows that are not targets, from the rows it holds. An incomplete one
        (between refreshes: the targets and, at a partial refresh, more rows, all fresh) gives
        base + the targets' fresh terms after moving base to this step: one signed sum over the held
        rows of the positions whose role changed (-1: now a target, or given fresh; +1: a target of
        the last step still masked and not a target now; committed positions were targets of the
        last step, so they leave by not coming back), plus the fresh non-target rows, which replace
        the held ones. O(K·V) per step.

        Raises:
            InputError: incomplete marginals with no complete step since :meth:`reset`.
        """
        stat_of = self._of
        target_row = marginals.target_rows  # (B, R)
        if marginals.complete:
            stat, sums = stat_of(marginals.logits, marginals.valid)
            self.running = None
            if marginals.incremental_follows:  # hold the rows; base = the non-target rows' terms
                base = torch.zeros_like(stat) if marginals.rows_are_targets else \
                    stat - stat_of(marginals.at_target_rows(marginals.logits), marginals.target_valid)[0]
                self.running = RunningSums.start(marginals, masked, base=base)
            return stat, sums
        run = self.state()
        if run.base is None:  # started on a step without a tilt: the base of that complete step now
            run.base = stat_of(run.logits, run.base_weights)[0]
        stat, sums = stat_of(marginals.logits, marginals.valid & target_row)  # the targets' fresh terms
        is_target = torch.zeros_like(masked).scatter_(1, marginals.target_positions, marginals.target_valid)  # (B, G)
        partial = not marginals.rows_are_targets  # more fresh rows than the targets: a partial refresh
        renew_row = marginals.valid & ~target_row  # (B, R) fresh rows that are not targets: they replace the held ones
        enter = run.targets & masked & ~is_target
        moved = enter | (is_target & ~run.targets)  # the held rows leaving (-1) or entering (+1) base
        if partial:
            moved |= torch.zeros_like(masked).scatter_(1, marginals.positions, renew_row)
        pos, val = packed_masked_positions(moved)
        if pos.shape[1]:
            sign = torch.where(torch.gather(enter, 1, pos), 1.0, -1.0) * val  # (B, n): 0 on padding
            run.base.add_(stat_of(run.rows_at(pos), sign)[0])
        if partial:
            run.base.add_(stat_of(marginals.logits, renew_row)[0])
            run.replace(marginals, renew_row)
        run.targets, run.masked = is_target, masked.clone()
        return run.base + stat, sums
