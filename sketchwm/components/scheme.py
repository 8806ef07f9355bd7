"""The watermark-scheme contract: generation hooks for the engine and a detector."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from .component import Component
from .marginals import DenoiseStep, MarginalReads
from .token_sums import check_token_ids

__all__ = ["WatermarkScheme", "SchemeScores"]


@dataclass
class SchemeScores:
    """Per-text detection statistics returned by :meth:`WatermarkScheme.score_ids`.

    Attributes:
        score: (B,) float64, the scheme's statistic (thresholds are on this).
        z: (B,) float64, a z-score (standardised statistic) for display and ranking.
        p_value: (B,) float64, p-value under the scheme's null.
        n_scored: (B,) int64, tokens that entered the statistic.
        p_value_method: e.g. "exact key-randomised (FFT)", "binomial", "gamma".
        channels: for a scheme combined from channels (:class:`sketchwm.channels.CombinedScheme`),
            each channel's own test by name: ((B,) float64 p-value, (B,) float64 z); None otherwise.
    """

    score: torch.Tensor
    z: torch.Tensor
    p_value: torch.Tensor
    n_scored: torch.Tensor
    p_value_method: str
    channels: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None


@dataclass(frozen=True)
class Strength:
    """A scheme's strength knob and its default sweep (read by ``sketchwm bench`` to sweep any scheme).

    A scheme declares it in one line, e.g. ``strength = Strength("delta", (0.5, 1.0, 2.0, 4.0))``,
    or ``strength = Strength.none("distortion-free: keyed noise replaces the sampler's")`` when it
    has no knob (the benchmark then runs it as a single point and says why on the leaderboard).

    Attributes:
        field: dotted path of the knob in the scheme's ``Params`` (e.g. ``"delta"`` or
            ``"score.params.gamma"``), or None for no knob.
        grid: default sweep, ascending; should hold the field's default so the default point is
            part of every curve (the conformance suite checks each value validates).
        stronger: ``"higher"`` when a larger value embeds more strongly (more detectable, more
            distortion), ``"lower"`` otherwise.
        reason: why there is no knob (``field`` None), shown on the leaderboard.

    Raises:
        ValueError: a field with an empty grid, or a grid without a field.
    """

    field: str | None
    grid: tuple[float, ...] = ()
    stronger: Literal["higher", "lower"] = "higher"
    reason: str = ""

    def __post_init__(self) -> None:
        if self.field is not None and not self.grid:
            raise ValueError(f"strength knob {self.field!r} needs a non-empty default grid")
        if self.field is None and self.grid:
            raise ValueError("a strength grid needs the Params field it sets")

    @classmethod
    def none(cls, reason: str = "declares no strength knob") -> "Strength":
        """No knob: the scheme is one point of every comparison; ``reason`` says why."""
        return cls(None, (), reason=reason)

    @property
    def sweeps(self) -> bool:
        """Whether there is a knob to sweep."""
        return self.field is not None

    def value_of(self, params: Any) -> float | None:
        """The knob's value in validated ``params`` (None without a knob or when the path is absent)."""
        if self.field is None:
            return None
        node: Any = params
        for part in self.field.split("."):
            node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
            if node is None:
                return None
        return float(node)


class WatermarkScheme(Component):
    """A watermark: hooks the engine calls during denoising, and a detector.

    With no scheme the engine samples the base model. At each step the engine picks the target
    rows (the positions it may commit), computes the marginals of the rows the scheme declares in
    :attr:`reads`, and calls
      * :meth:`process_logits` — the tilted logits of the target rows (B, K, V),
      * :meth:`sampling_uniforms` — keyed uniforms replacing the sampling noise, when :attr:`noise`
        is ``"keyed"`` (distortion-free schemes).

    Which positions are committed is the sampler's remasking rule
    (:class:`sketchwm.remasking.RemaskingRule`), unless the scheme declares that it steers the order
    (:meth:`steers_order`): then every eligible position of the block is a target and the engine
    commits the k of highest :meth:`order_priority` (order as a watermark channel; it works under
    greedy decoding, where a tilt cannot act). Otherwise random remasking can pick the targets
    before any marginal is computed.

    Args:
        params: validated ``Params``.
        key: the :class:`sketchwm.keys.WatermarkKey`.
        vocab_size: V.
        device: where tables live.
    """

    kind = "scheme"
    #: Minimum number of tokens for a meaningful detection; shorter texts raise InputError. Set from
    #: ``params.min_tokens`` by :meth:`__init__` when the scheme's ``Params`` have that field.
    min_tokens: int = 16
    #: Which rows of the marginals the hooks read (:class:`MarginalReads`); the engine runs the LM
    #: head on those rows only. A scheme whose reads depend on its params makes this a property.
    #: ``MarginalReads.masked(incremental=True)`` promises that the hooks also run on the sampled
    #: rows alone between refreshes (``Marginals.complete`` False; the global sketch).
    reads: MarginalReads = MarginalReads.masked()
    #: ``"sampler"``: tokens are drawn with the sampler's Gumbel noise (from its generator);
    #: ``"keyed"``: the scheme's :meth:`sampling_uniforms` supplies it (the engine calls that hook
    #: only then; user sampling loops cannot run such a scheme, :class:`sketchwm.userloop.LogitsTilter`).
    noise: Literal["sampler", "keyed"] = "sampler"
    #: The strength knob and its default sweep (:class:`Strength`); a scheme that declares none is
    #: benchmarked as a single point.
    strength: ClassVar[Strength] = Strength.none()
    #: The scheme's behaviour version: part of every benchmark cell's identity
    #: (:func:`sketchwm.bench.plan.plan`) beside its resolved ``Params``. Bump it (``"1"`` → ``"2"``)
    #: with any change to what the scheme generates or scores at the same params, so that the cells a
    #: results folder holds from the older code are rerun, not reused; ``sketchwm leaderboard``
    #: refuses to put two versions of one scheme on a page.
    version: ClassVar[str] = "1"

    def __init__(self, params, key, vocab_size: int, device="cpu"):
        self._init_table_owner(params, vocab_size, device)
        if "min_tokens" in type(self.params).model_fields:  # a scheme whose params carry the detector's minimum
            self.min_tokens = self.params.min_tokens

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "WatermarkScheme":
        """``cls(params, key, vocab_size, device=device)`` from the context (key and V required)."""
        return cls(params, *cls._key_and_vocab(context), device=context.device, **dict(context.resources))

    #: The id that ends a text (the backend's EOS when the sampler cuts texts there), or None: set
    #: by the engine through :meth:`set_stop_token` before :meth:`begin`.
    stop_token_id: int | None = None

    # -------------------------------------------------------------- generation hooks
    def set_stop_token(self, token_id: int | None) -> None:
        """Tell the scheme which id ends a text (texts are scored up to its first occurrence), or None.

        Called by the engine before each :meth:`begin` with the backend's ``eos_token_id`` when
        ``stop_at_eos`` is on. Code driving its own sampling loop calls it the same way.

        Raises:
            ConfigError: an id outside [0, V).
        """
        if token_id is not None and not 0 <= int(token_id) < self.vocab_size:
            from ..errors import ConfigError

            raise ConfigError(f"stop token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
        self.stop_token_id = None if token_id is None else int(token_id)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Called once before a batch is denoised (reset per-generation state). Default: nothing."""

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Tilted marginals of the target rows as logits: (B, K, V) float32 (K = the targets of
        ``step.marginals``); what is returned for padding targets is ignored.

        A scheme may modify ``step.marginals.target_logits()`` in place and return it. Default:
        the targets' logits unchanged.
        """
        return step.marginals.target_logits()

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor | None:
        """Keyed uniforms in (0, 1) replacing the Gumbel noise of the target rows: (B, K, V) float32,
        or None (default). Called only when :attr:`noise` is ``"keyed"``, after :meth:`process_logits`."""
        return None

    def steers_order(self, temperature: float) -> bool:
        """Whether this scheme ranks the candidate positions at sampler temperature T (0 = greedy):
        the engine then offers every eligible position of the block and commits the k of highest
        :meth:`order_priority`. Asked once per sampler. Default: False (the remasking rule decides).
        """
        return False

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """The priority of each target (higher = committed first): (B, K) float32; padding targets
        are ignored. Called after the tokens are drawn, only when :meth:`steers_order` is True.

        Args:
            step: the step's state (the same object :meth:`process_logits` saw).
            x0: (B, K) int64, the tokens drawn at the targets (the argmax at T = 0).
            confidence: (B, K) float32, the remasking rule's own score of each target
                (:meth:`sketchwm.remasking.RemaskingRule.confidence`; zeros for ``random``), which a
                scheme may keep as a tie-break or a base order.

        Raises:
            NotImplementedError: the default (a scheme that steers must implement it).
        """
        raise NotImplementedError(f"{self.display_name()} declares that it steers the order but has no order_priority")

    # -------------------------------------------------------------- detection
    # The one detection contract (shared with ScoreFunction.p_values / analytic_threshold):
    #   score_ids(ids (B, N) int64, valid (B, N) bool) -> SchemeScores, every field (B,)
    #   analytic_threshold(alpha: float, n_tokens: int) -> float  (NotImplementedError: no closed form)
    # Build p-values from sketchwm.stats (exact tails, bounds, permutation p-values, scores_from_log_p).
    def check_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Detector input on the scheme's device, checked: ids (B, N) int64 (valid ones in [0, V), the
        rest clamped there) and valid (B, N) bool. See :func:`check_token_ids`.

        Raises:
            InputError: wrong rank or shapes, non-integer ids, or a valid id outside [0, V) (named).
        """
        return check_token_ids(ids.to(self.device), valid.to(self.device), self.vocab_size)

    @abstractmethod
    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Detection statistics for ids (B, N) int64 with valid (B, N) bool (padding False).

        Returns:
            :class:`SchemeScores`: ``score`` (thresholds apply to it; larger = more watermarked), ``z``,
            ``p_value`` under the scheme's null, ``n_scored`` and ``p_value_method``, each (B,).

        Raises:
            InputError: wrong shapes or ids outside [0, V).
        """

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Threshold on ``score`` with false-positive probability <= alpha for a text of ``n_tokens``
        tokens, without calibration.

        Default: the score that corresponds to p-value alpha is unknown, so schemes override; the
        detector falls back to ``p_value <= alpha`` when this raises NotImplementedError.

        Raises:
            InputError: alpha outside (0, 1) (overrides).
            NotImplementedError: no closed form (the default).
        """
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """JSON-serialisable ``{"name", "params"}`` (no secrets)."""
        return {"name": self.name, "params": self.params.model_dump(mode="json")}
