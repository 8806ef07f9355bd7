"""What a scheme reads and sees at a denoising step: :class:`MarginalReads`, :class:`Marginals`, :class:`DenoiseStep`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

__all__ = ["MarginalReads", "Marginals", "DenoiseStep", "packed_masked_positions", "row_index"]


def packed_masked_positions(masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the True positions of each row, packed to the left.

    Args:
        masked: (B, G) bool, e.g. M_t.

    Returns:
        positions (B, M) int64 with M = the largest count of a row: row b lists its True positions
        in increasing order, then (padding) some of its False positions; valid (B, M) bool, True on
        the former. Indices within a row are distinct.
    """
    counts = masked.sum(1)  # (B,)
    M = int(counts.max()) if masked.numel() else 0
    order = torch.argsort((~masked).to(torch.uint8), dim=1, stable=True)[:, :M]  # True first, in order
    valid = torch.arange(M, device=masked.device)[None, :] < counts[:, None]
    return order, valid


def row_index(positions: torch.Tensor, gen_length: int) -> torch.Tensor:
    """The row of each position in a packed layout: positions (B, R) int64 (distinct per text) →
    (B, G) int64 with out[b, positions[b, r]] = r (0 at positions not listed)."""
    B, R = positions.shape
    return torch.zeros(B, gen_length, dtype=torch.long, device=positions.device).scatter_(
        1, positions, torch.arange(R, device=positions.device).expand(B, R))


@dataclass(frozen=True)
class MarginalReads:
    """What a scheme's hooks read of the marginals at a denoising step: its declaration.

    The engine computes the LM head on these rows only and derives its fast path from this alone
    (:class:`Marginals` says what it passes). Build one with:

    * :meth:`sampled` — only the rows about to be sampled (the targets): the hooks transform each
      target row from that row alone (Unigram, KGW, AAR, KTH).
    * :meth:`masked` — every masked row (default): the hooks read a statistic over M_t, such as the
      global sketch's Σ_{i∈M_t} p_i of eq. 5 of the seed paper.
    * :meth:`near` — the masked rows within ``radius`` positions of a target (red-green-dlm's
      neighbour marginals, Gloaguen et al. 2025).

    Attributes:
        kind: ``sampled``, ``masked`` or ``near``.
        radius: r >= 0 for ``near`` (0 otherwise).
        incremental: ``masked`` only. The hooks keep a running statistic over M_t across the steps
            of one generation (reset by :meth:`WatermarkScheme.begin`), so between refreshes
            (``SamplerConfig.marginal_refresh``) the engine computes and passes the target rows
            only (:attr:`Marginals.complete` False): the other masked rows keep the marginals of
            the last complete step, an approximation whose effect the scheme must measure.
            With a ``radius`` r > 0 (an incremental ``masked`` read joined with a ``near`` one,
            :func:`sketchwm.channels.union_reads`), the masked rows within r of a target are passed
            fresh too, as a partial refresh: the running statistic takes them as renewed rows.

    Raises:
        ValueError: an unknown kind, a negative radius, a radius on a ``sampled`` or non-incremental
            ``masked`` read, or ``incremental`` with another kind.
    """

    kind: Literal["sampled", "masked", "near"] = "masked"
    radius: int = 0
    incremental: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("sampled", "masked", "near"):
            raise ValueError(f"unknown marginal reads kind {self.kind!r}")
        if self.radius < 0 or (self.radius and self.kind != "near" and not (self.kind == "masked" and self.incremental)):
            raise ValueError(f"radius must be >= 0 and only given with kind 'near' or an incremental 'masked', "
                             f"got {self.radius} with {self.kind!r}")
        if self.incremental and self.kind != "masked":
            raise ValueError(f"incremental reads need kind 'masked', got {self.kind!r}")

    @classmethod
    def sampled(cls) -> "MarginalReads":
        """Only the target rows."""
        return cls("sampled")

    @classmethod
    def masked(cls, incremental: bool = False, radius: int = 0) -> "MarginalReads":
        """Every masked row of the canvas (all blocks); ``incremental`` and ``radius``: see the class doc."""
        return cls("masked", int(radius), incremental)

    @classmethod
    def near(cls, radius: int) -> "MarginalReads":
        """The masked rows within ``radius`` positions of a target (and the targets)."""
        return cls("near", int(radius))

    def near_targets(self, masked: torch.Tensor, targets: torch.Tensor, target_valid: torch.Tensor) -> torch.Tensor:
        """The masked positions within ``radius`` of a valid target, the targets included: (B, G) bool, from
        masked (B, G) bool, targets (B, K) int64 and target_valid (B, K) bool (a max-pool of the targets'
        indicator)."""
        chosen = torch.zeros_like(masked).scatter(1, targets, target_valid)
        if self.radius == 0:
            return masked & chosen
        near = torch.nn.functional.max_pool1d(chosen[:, None, :].float(), kernel_size=2 * self.radius + 1,
                                              stride=1, padding=self.radius)[:, 0]
        return masked & (near > 0)

    def layout(self, masked: torch.Tensor, targets: torch.Tensor,
               target_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows to compute for a step and where the targets sit among them.

        Args:
            masked: (B, G) bool, M_t.
            targets: (B, K) int64 distinct generation-region positions about to be sampled.
            target_valid: (B, K) bool, False on padding entries (ignored by the engine).

        Returns:
            positions (B, R) int64 and valid (B, R) bool of the rows (``sampled``: the targets
            themselves, in their order; else the declared masked rows in increasing position order,
            padding after), and rows (B, K) int64, the row of each target.
        """
        B, K = targets.shape
        if self.kind == "sampled":
            return targets, target_valid, torch.arange(K, device=targets.device).expand(B, K)
        need = masked if self.kind == "masked" else self.near_targets(masked, targets, target_valid)
        positions, valid = packed_masked_positions(need)  # (B, R)
        return positions, valid, torch.gather(row_index(positions, masked.shape[1]), 1, targets)


@dataclass
class Marginals:
    """The model's marginals (as logits) of some rows of the generation region, packed: the one
    shape in which every scheme sees them (see :class:`MarginalReads`).

    Attributes:
        logits: (B, R, V) float32, the marginals p_i as logits, banned ids at -inf; rows with
            ``valid`` False hold unspecified values. Hooks must not modify it (use
            :meth:`target_logits`).
        positions: (B, R) int64 generation-region index i of each row; the valid rows of a text are
            distinct (in increasing order unless the scheme reads only the sampled rows).
        valid: (B, R) bool, True on rows of masked positions.
        targets: (B, K) int64, the rows about to be tilted and sampled: indices into ``logits``.
        target_valid: (B, K) bool, False on padding targets (a text that commits fewer than K
            tokens); the engine ignores what the hooks return for them.
        out: optional (B, K, V) float32 tensor the tilted target logits must be written to (a caller
            that keeps ``logits`` intact and owns the output buffer: a benchmark, a user's loop);
            then :meth:`target_logits` copies the targets into it and hooks may write it directly
            (``torch.add(..., out=out)``: one pass instead of a copy and a tilt). None (the engine):
            the hooks may tilt ``logits`` itself.
        complete: True when the rows are every row the scheme declared. False only for
            ``MarginalReads.masked(incremental=True)`` between refreshes: the rows are then the
            targets alone (rows = targets, positions = their positions) or, at a partial
            refresh, the targets and more masked rows, all fresh; every other masked row keeps
            the marginals the scheme last saw for it. A scheme with incremental reads may keep
            ``logits`` of a complete step and overwrite its rows at later steps of the same
            generation when ``out`` is None (the engine never reuses them); callers that pass
            ``out`` keep their ``logits`` intact.
        incremental_follows: True on a complete step of the engine's incremental strategy
            (:class:`sketchwm.marginal_sources.IncrementalMarginals`): the next steps pass fresh rows only
            until the next complete one, so an incremental scheme should hold these rows. False
            (exact strategies, benchmarks, user loops): nothing needs holding.
        widen: None, or how to compute this step's marginals with more rows, on demand (see
            :meth:`wider`): the engine passes the target rows alone between refreshes when a reader's
            declared rows near the targets may not be needed at the step (the default's green
            channel, whose share of the tilt is often 0), and computes them only if asked.

    Raises:
        ValueError: shapes that disagree (``out`` included).
    """

    logits: torch.Tensor
    positions: torch.Tensor
    valid: torch.Tensor
    targets: torch.Tensor
    target_valid: torch.Tensor
    out: torch.Tensor | None = None
    complete: bool = True
    incremental_follows: bool = False
    widen: Callable[[], "Marginals"] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.logits.dim() != 3 or self.positions.shape != self.logits.shape[:2] or self.valid.shape != self.positions.shape:
            raise ValueError(f"marginals: logits {tuple(self.logits.shape)}, positions {tuple(self.positions.shape)} and "
                             f"valid {tuple(self.valid.shape)} must be (B, R, V), (B, R), (B, R)")
        if self.targets.dim() != 2 or self.targets.shape != self.target_valid.shape or self.targets.shape[0] != self.logits.shape[0]:
            raise ValueError(f"marginals: targets {tuple(self.targets.shape)} and target_valid "
                             f"{tuple(self.target_valid.shape)} must both be (B, K) with B = {self.logits.shape[0]}")
        R, K = self.logits.shape[1], self.targets.shape[1]
        if self.out is not None and self.out.shape != (self.logits.shape[0], K, self.logits.shape[2]):
            raise ValueError(f"marginals: out {tuple(self.out.shape)} must be (B, K, V) = "
                             f"{(self.logits.shape[0], K, self.logits.shape[2])}")
        #: the targets are exactly the rows, in order (then :meth:`target_logits` is ``logits`` itself)
        self.rows_are_targets = R == K and bool(
            (self.targets == torch.arange(K, device=self.targets.device)).all())
        self._wider: Marginals | None = None  # what ``widen`` returned, once asked for

    @classmethod
    def canvas(cls, logits: torch.Tensor, masked: torch.Tensor, out: torch.Tensor | None = None) -> "Marginals":
        """Every position of the generation region as a row, every masked one a target.

        For code holding the full canvas (user sampling loops, tests): logits (B, G, V) float32,
        masked (B, G) bool; unmasked rows are padding. The hooks then return (B, G, V), written to
        ``out`` (B, G, V) when given (``logits`` then stays as it was).
        """
        B, G = masked.shape
        rows = torch.arange(G, device=masked.device).expand(B, G)
        return cls(logits, rows, masked, rows, masked, out)

    @classmethod
    def select(cls, logits: torch.Tensor, masked: torch.Tensor, targets: torch.Tensor, target_valid: torch.Tensor,
               reads: MarginalReads | None = None) -> "Marginals":
        """What the engine passes for ``reads`` (default: every masked row), picked from full-canvas
        logits (B, G, V): masked (B, G) bool, targets (B, K) int64 positions, target_valid (B, K) bool."""
        positions, valid, rows = (reads or MarginalReads.masked()).layout(masked, targets, target_valid)
        return cls(torch.gather(logits, 1, positions[..., None].expand(-1, -1, logits.shape[-1])), positions, valid,
                   rows, target_valid)

    @property
    def target_rows(self) -> torch.Tensor:
        """(B, R) bool, True on the rows that are (valid) targets."""
        return torch.zeros_like(self.valid).scatter_(1, self.targets, self.target_valid)

    @property
    def target_positions(self) -> torch.Tensor:
        """(B, K) int64, the generation-region position of each target."""
        return torch.gather(self.positions, 1, self.targets)

    def at_target_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Per-row values (B, R, ...) at the targets: (B, K, ...) (``x`` itself when the rows are the targets)."""
        if self.rows_are_targets:
            return x
        return _rows(x, self.targets)

    def targets_only(self) -> "Marginals":
        """These marginals with the target rows alone (rows = targets, in order): what a scheme whose
        declared reads are the targets between refreshes (``MarginalReads.masked(incremental=True)``
        with radius 0) is given when the rows passed also hold fresh rows that another reader asked
        for. ``self`` when the rows already are the targets; the logits of a copy otherwise.
        ``complete`` is False on the result unless ``self`` has no rows beyond the targets."""
        if self.rows_are_targets:
            return self
        K = self.targets.shape[1]
        rows = torch.arange(K, device=self.targets.device).expand_as(self.targets)
        return Marginals(self.at_target_rows(self.logits), self.target_positions, self.target_valid.clone(), rows,
                         self.target_valid, self.out, False, self.incremental_follows)

    def wider(self) -> "Marginals":
        """These marginals with every row the step's reads declared: ``self`` when ``widen`` is None,
        else what ``widen`` computes (the rows fresh from the model, the targets among them with the
        logits they have here before any hook tilted them), computed at the first call and kept.

        Raises:
            InputError: NaN or inf logits from the backend on a valid row (as the engine raises it).
        """
        if self.widen is None:
            return self
        if self._wider is None:
            self._wider = self.widen()
        return self._wider

    def at_targets(self, x: torch.Tensor) -> torch.Tensor:
        """Per-position values (B, G, ...) of the generation region at the targets: (B, K, ...)."""
        return _rows(x, self.target_positions)

    def target_logits(self) -> torch.Tensor:
        """(B, K, V) float32, the targets' logits, a tensor the caller may modify in place: ``out``
        holding a copy of them when given, else ``logits`` itself when the rows are the targets (read
        what you need from ``logits`` first), else a copy."""
        if self.out is not None:
            return self.out.copy_(self.at_target_rows(self.logits))
        return self.at_target_rows(self.logits)


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[b, index[b, k]] for x (B, R, ...) and index (B, K) int64 → (B, K, ...), a new tensor: whole rows
    copied by row index (a gather along dim 1 would first build a (B, K, ...) index tensor)."""
    if x.dim() == 2:
        return torch.gather(x, 1, index)
    return x[torch.arange(x.shape[0], device=x.device)[:, None], index]


@dataclass
class DenoiseStep:
    """What a watermark scheme sees at one denoising step (generation region only).

    Attributes:
        step: 0-based index of this step; ``total_steps`` steps in all (the paper's t = T - step).
        total_steps: T.
        tokens: (B, G) int64, current generation-region tokens (``mask_token_id`` where masked).
        masked: (B, G) bool, M_t restricted to the generation region.
        marginals: the :class:`Marginals` of the rows the scheme declared it reads
            (:attr:`WatermarkScheme.reads`) and the target rows about to be sampled.
        prompt_ids: (B, P) int64, left-padded prompts.
        prompt_mask: (B, P) bool, True on real prompt tokens.
        block: (start, end) of the block being decoded, in generation-region coordinates.
        mask_token_id: id of [MASK].
        generator: the sampler's torch.Generator (schemes should prefer keyed randomness).
        temperature: the sampler's temperature T (0 = greedy), or None when the caller does not say
            (a user's own sampling loop).
    """

    step: int
    total_steps: int
    tokens: torch.Tensor
    masked: torch.Tensor
    marginals: Marginals
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    block: tuple[int, int]
    mask_token_id: int
    generator: torch.Generator | None = None
    temperature: float | None = None
