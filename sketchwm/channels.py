"""Channels and combined schemes: a watermark built from parts that each carry their own evidence.

A *channel* is one watermark signal planted in a text and tested on its own: a registered
:class:`~sketchwm.components.WatermarkScheme` under its own key, with

* its action on generation: a tilt of the target rows (:class:`Tilt`, returned as a value by the
  scheme's ``tilt(step)``) or keyed sampling noise (the scheme's ``sampling_uniforms``),
* its test: the scheme's ``score_ids(ids, valid)``, a p-value valid for the key held,
* what it reads of the marginals: the scheme's declared ``reads``.

A *combined scheme* (:class:`CombinedScheme`) declares its channels, each channel's share of α
(a constant or a per-text function of the channels' scores) and of the tilt, and combines the tests
by one rule, the weighted Bonferroni bound :func:`sketchwm.multiple_testing.weighted_bonferroni`. It
forwards the generation hooks (:meth:`~WatermarkScheme.set_stop_token`, :meth:`~WatermarkScheme.begin`,
order steering, keyed noise) to its channels, and derives what it reads from theirs
(:func:`union_reads`). :class:`ComposedScheme` is the forwarding alone, for schemes built from other
schemes that combine them by another rule (the key family of ``global-sketch-family``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal, Protocol

import numpy as np
import torch

from .components import DenoiseStep, MarginalReads, SchemeScores, WatermarkScheme, one_batch, shared_pool
from .errors import ConfigError
from .multiple_testing import weighted_bonferroni
from .stats import normal_isf

__all__ = ["Tilt", "Tilting", "Channel", "ComposedScheme", "CombinedScheme", "channel_step", "union_reads"]

_COUNT = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class Tilt:
    """A channel's tilt at one denoising step, as the combiner receives it.

    A channel either rewrites the target rows (``logits``: the rows as it tilts them, e.g. the global
    sketch's eq. 7 tilt with its stop-token renormalisation), or gives a sparse logit increment
    (``index``, ``value``) that the combiner adds to the rows, times the channel's per-text share.

    Attributes:
        logits: (B, K, V) float32, the tilted target rows (K = the step's targets), or None.
        index: (B, K, k) int64 vocabulary ids of the increment, or None.
        value: (B, K, k) float32 logit increments at ``index`` (repeated ids add up), or None.
        coverage: (B,) float32, the fraction c ∈ [0, 1] of the generated positions the channel
            expects its statistic to read at this step (the global sketch: distinct kept tokens per
            position, n̂/N of eq. 5 of the seed paper), or None when it did not tilt.
    """

    logits: torch.Tensor | None = None
    index: torch.Tensor | None = None
    value: torch.Tensor | None = None
    coverage: torch.Tensor | None = None

    def add_to(self, logits: torch.Tensor, share: torch.Tensor | None = None) -> torch.Tensor:
        """Add the increment to ``logits`` (B, K, V) in place, each text's times ``share`` (B,) (None: all
        of it); returns ``logits``."""
        value = self.value if share is None else self.value * share.to(self.value.dtype)[:, None, None]  # (B, K, k)
        return logits.scatter_add_(-1, self.index, value.to(logits.dtype))


class Tilting(Protocol):
    """A scheme that can be a tilting channel: it returns its tilt as a value (None: no tilt at this step)."""

    def tilt(self, step: DenoiseStep) -> Tilt | None: ...


#: a channel's share of α: a constant, or a function of every channel's scores (by name) and each
#: text's token count (B,) int64 returning a float or a (B,) float64 tensor
Weight = float | Callable[[Mapping[str, SchemeScores], torch.Tensor], "float | torch.Tensor"]


@dataclass(frozen=True)
class Channel:
    """One channel of a combined scheme (module doc).

    Attributes:
        name: its name in :attr:`SchemeScores.channels` and in the p-value method (e.g. ``"sketch"``).
        scheme: the registered scheme that is the channel, under its own key: its generation state,
            its ``reads`` and its test.
        acts: how it acts on generation. ``rows``: its ``tilt(step)`` returns the tilted target rows
            (:attr:`Tilt.logits`); at most one per combined scheme, called after every ``increment``
            channel has read the untilted marginals. ``increment``: its ``tilt(step)`` returns a sparse
            increment read at the untilted marginals. ``noise``: its ``sampling_uniforms`` replace the
            sampler's noise; at most one. ``test``: detection only.
        weight: its share w_j of α in the weighted Bonferroni bound (:data:`Weight`); the shares of a
            combined scheme sum to at most 1 for every text.
        share: for an ``increment`` channel, its share of its own tilt per text as a function of the
            ``rows`` channel's :class:`Tilt` at the step ((B,) tensor, or None for all of it); None:
            always all of it.
        steers_order: the combined scheme's order steering is this channel's (at most one).
    """

    name: str
    scheme: WatermarkScheme
    acts: Literal["rows", "increment", "noise", "test"]
    weight: Weight
    share: Callable[[Tilt], torch.Tensor | None] | None = None
    steers_order: bool = False


def union_reads(reads: Sequence[MarginalReads]) -> MarginalReads:
    """The rows that serve every one of ``reads``: every masked row if any reads them, else the masked
    rows within the largest radius if any reads ``near``, else the targets alone. Every masked row is
    incremental when every ``masked`` read is; then the targets (every step) serve the ``sampled``
    reads, and the largest ``near`` radius is carried, so that the rows within it are passed fresh
    between refreshes (:class:`~sketchwm.components.MarginalReads`)."""
    if any(r.kind == "masked" for r in reads):
        incremental = all(r.incremental for r in reads if r.kind == "masked")
        radius = max((r.radius for r in reads if r.kind != "sampled"), default=0) if incremental else 0
        return MarginalReads.masked(incremental=incremental, radius=radius)
    radii = [r.radius for r in reads if r.kind == "near"]
    return MarginalReads.near(max(radii)) if radii else MarginalReads.sampled()


def channel_step(channel: Channel, step: DenoiseStep) -> DenoiseStep:
    """The step as ``channel`` declared it reads it: between refreshes (incomplete marginals) a channel
    whose reads are every masked row, incremental, with no radius of its own gets the target rows
    alone (:meth:`Marginals.targets_only`), not the fresh neighbour rows that another channel's
    ``near`` read added (:func:`union_reads`); a channel that reads more than the targets gets those
    rows when the engine passed them on demand (:meth:`Marginals.wider`); any other channel gets
    ``step`` itself."""
    r, m = channel.scheme.reads, step.marginals
    incremental_alone = r.kind == "masked" and r.incremental and r.radius == 0  # the targets between refreshes
    if m.widen is not None and not (incremental_alone or r.kind == "sampled"):
        return replace(step, marginals=m.wider())
    if m.complete or m.rows_are_targets or not incremental_alone:
        return step
    return replace(step, marginals=m.targets_only())


class ComposedScheme(WatermarkScheme):
    """A scheme built from other schemes (its :meth:`parts`): the stop token and the start of each
    batch are forwarded to every part, here once for all such schemes."""

    def parts(self) -> Sequence[WatermarkScheme]:
        """The schemes that generate under this one. Default: none."""
        return ()

    def set_stop_token(self, token_id: int | None) -> None:
        """As :meth:`WatermarkScheme.set_stop_token`, for this scheme and every part.

        Raises:
            ConfigError: an id outside [0, V).
        """
        super().set_stop_token(token_id)
        for part in self.parts():
            part.set_stop_token(token_id)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Start every part on a new batch."""
        for part in self.parts():
            part.begin(batch_size, gen_length, prompt_ids, prompt_mask)


#: ids from which :meth:`CombinedScheme.channel_scores` scores the channels on threads of their own
CONCURRENT_IDS = 1 << 16


def _channel_pool(workers: int) -> ThreadPoolExecutor:
    """The process-wide ``"channel"`` pool for whole channels, apart from the detectors' own ``"detect"``
    row-slice pool whose tasks a channel waits for (:mod:`sketchwm.components.threads`)."""
    return shared_pool("channel", workers)


class CombinedScheme(ComposedScheme):
    """A watermark made of channels, tested by the weighted Bonferroni bound over their p-values.

    A subclass builds its channel schemes in ``__init__`` and declares them with :meth:`combine`.
    Generation: the ``increment`` channels read the untilted marginals, the ``rows`` channel (if any)
    tilts the target rows, and each increment is added times its share; the ``noise`` channel (if any)
    supplies the sampling noise (:attr:`noise` ``"keyed"``); the channel that ``steers_order`` ranks
    the positions. Detection: p = min(1, min_j p_j/w_j) (:func:`weighted_bonferroni`), ``score`` =
    Φ⁻¹(1 − p) (so ``score ≥ Φ⁻¹(1 − α)`` ⇔ ``p ≤ α``), ``z`` the z of the channel with the smallest
    p_j/w_j, ``n_scored`` the first channel's, and each channel's own p-value and z in
    :attr:`SchemeScores.channels`.

    Attributes:
        channels: the declared :class:`Channel` tuple, in order.
    """

    channels: tuple[Channel, ...] = ()

    def combine(self, *channels: Channel | None) -> None:
        """Declare the channels (module doc), in order; a None entry (a channel the params switch off)
        is left out.

        Raises:
            ConfigError: no channel, a repeated name, more than one ``rows`` or ``noise`` channel or
                order-steering channel, or a tilting channel whose scheme has no ``tilt``.
        """
        channels = tuple(c for c in channels if c is not None)
        names = [c.name for c in channels]
        if not channels or len(set(names)) != len(names):
            raise ConfigError(f"{self.display_name()} needs one or more channels with distinct names, got {names}")
        for what, picked in (("rows", [c for c in channels if c.acts == "rows"]),
                             ("noise", [c for c in channels if c.acts == "noise"]),
                             ("order-steering", [c for c in channels if c.steers_order])):
            if len(picked) > 1:
                raise ConfigError(f"{self.display_name()}: at most one {what} channel, got {[c.name for c in picked]}")
        for c in channels:
            if c.acts in ("rows", "increment") and not callable(getattr(c.scheme, "tilt", None)):
                raise ConfigError(f"channel {c.name!r} ({c.scheme.display_name()}) tilts but has no tilt(step)")
        self.channels = channels
        self.noise = "keyed" if self._one("noise") is not None else "sampler"

    def _one(self, acts: str) -> Channel | None:
        """The channel that ``acts`` so (``rows`` or ``noise``), or None."""
        return next((c for c in self.channels if c.acts == acts), None)

    def channel(self, name: str) -> Channel:
        """The channel called ``name``.

        Raises:
            KeyError: no such channel.
        """
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(f"{self.display_name()} has no channel {name!r} (has {[c.name for c in self.channels]})")

    def parts(self) -> Sequence[WatermarkScheme]:
        """Every channel's scheme."""
        return [c.scheme for c in self.channels]

    @property
    def reads(self) -> MarginalReads:
        """What the channels read, together (:func:`union_reads`)."""
        return union_reads([c.scheme.reads for c in self.channels])

    # ------------------------------------------------------------------ generation
    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """The combined tilt of the target rows: (B, K, V) float32 (class doc).

        The increments read the untilted marginals. When the tilted rows cannot overwrite them (the
        target rows are a copy of the rows read, :meth:`Marginals.target_logits`, or the caller owns
        the output, :attr:`Marginals.out`), or the rows an increment reads come on demand
        (:meth:`Marginals.wider`, fresh from the model), the ``rows`` channel tilts first, and an
        increment whose share is 0 for every text is not computed (it would add zeros), nor are the
        rows it would have read: the result is the same.
        """
        rows, incs = self._one("rows"), [c for c in self.channels if c.acts == "increment"]
        m = step.marginals
        early = (rows is not None and (m.widen is not None or m.out is not None or not m.rows_are_targets)
                 and any(c.share is not None for c in incs))
        base = rows.scheme.tilt(channel_step(rows, step)) if early else None
        increments = []
        for c in incs:
            share = c.share(base if base is not None else Tilt()) if early and c.share is not None else None
            if share is not None and not bool((share > 0).any()):
                continue  # no text takes any of this increment at this step
            increments.append((c, c.scheme.tilt(channel_step(c, step)), share))
        if not early:
            base = rows.scheme.tilt(channel_step(rows, step)) if rows is not None else None
        logits = base.logits if base is not None else step.marginals.target_logits()  # (B, K, V)
        for c, inc, share in increments:
            if inc is not None:
                if share is None and c.share is not None:
                    share = c.share(base if base is not None else Tilt())
                inc.add_to(logits, share)
        return logits

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor | None:
        """The ``noise`` channel's keyed uniforms at the target rows, (B, K, V) float32; None without one."""
        noise = self._one("noise")
        return None if noise is None else noise.scheme.sampling_uniforms(step)

    def _steering(self) -> Channel | None:
        return next((c for c in self.channels if c.steers_order), None)

    def steers_order(self, temperature: float) -> bool:
        """The order-steering channel's rule (False without one)."""
        c = self._steering()
        return c is not None and c.scheme.steers_order(temperature)

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """The order-steering channel's priority of each target, (B, K) float32."""
        c = self._steering()
        if c is None:
            return super().order_priority(step, x0, confidence)
        return c.scheme.order_priority(step, x0, confidence)

    # ------------------------------------------------------------------ detection
    def channel_scores(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[SchemeScores, ...]:
        """Each channel's own scores for ids (B, N) int64 with valid (B, N) bool, in :attr:`channels` order.

        On the CPU with several torch threads and at least :data:`CONCURRENT_IDS` ids, the channels are
        scored at once on threads of their own: their detectors' C passes release the GIL, so one
        channel's passes run while another holds it for its numpy steps (each channel's scores are
        the same either way). Each thread runs in a copy of the caller's context, so the enclosing
        :func:`sketchwm.components.one_batch` summary is shared.

        Raises:
            InputError: ids outside [0, V), or a text shorter than a channel's minimum (the first
                channel's error, in :attr:`channels` order, when several fail).
        """
        workers = min(len(self.channels), torch.get_num_threads())
        if workers < 2 or ids.device.type != "cpu" or ids.numel() < CONCURRENT_IDS:
            return tuple(c.scheme.score_ids(ids, valid) for c in self.channels)
        pool = _channel_pool(workers)
        futures = [pool.submit(contextvars.copy_context().run, c.scheme.score_ids, ids, valid) for c in self.channels]
        return tuple(f.result() for f in futures)  # in order: the first channel's error is raised first

    def channel_weights(self, scores: Sequence[SchemeScores], valid: torch.Tensor) -> list[float | torch.Tensor]:
        """Each channel's share of α, in :attr:`channels` order: floats or (B,) float64 tensors.

        Args:
            scores: the channels' scores (:meth:`channel_scores`).
            valid: (B, N) bool, the texts' tokens.
        """
        by_name = {c.name: s for c, s in zip(self.channels, scores)}
        n_tokens = torch.from_numpy(np.count_nonzero(valid.cpu().numpy(), axis=1))  # (B,) int64
        return [c.weight(by_name, n_tokens) if callable(c.weight) else float(c.weight) for c in self.channels]

    def weight_rule(self) -> str:
        """How the channels share α, for the p-value method. Default: each channel's constant weight."""
        return ", ".join(f"{c.name} {c.weight:g}" for c in self.channels if not callable(c.weight)) or "per-text weights"

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """The weighted Bonferroni bound over the channels' p-values (class doc), each field (B,).

        Raises:
            InputError: ids outside [0, V), or a text shorter than a channel's minimum.
        """
        with one_batch(ids, valid, self.vocab_size):  # the channels check the same batch: once
            scores = self.channel_scores(ids, valid)
        ps = [s.p_value.double().cpu() for s in scores]  # J × (B,)
        weights = self.channel_weights(scores, valid)
        pv = weighted_bonferroni(ps, weights)  # (B,) float64
        from scipy.special import ndtri

        # Φ⁻¹(1 − p), finite at both ends: p = 1 (no channel has evidence, or a bound above 1) reads as
        # the largest double below 1, not −∞ (a calibrated threshold must be finite)
        score = torch.from_numpy(-ndtri(np.clip(pv.numpy(), 1e-300, np.nextafter(1.0, 0.0))))
        # numpy: (B,) arithmetic right after the channels' detector threads (see weighted_bonferroni)
        ratios = np.stack([np.broadcast_to(p.numpy() / np.asarray(w.numpy() if torch.is_tensor(w) else w), p.shape)
                           for p, w in zip(ps, weights)])  # (J, B) p_j / w_j
        zs = np.stack([s.z.double().cpu().numpy() for s in scores])  # (J, B)
        decides = np.argmin(np.where(np.isnan(ratios), np.inf, ratios), 0)[None]  # (1, B) the channel that decides
        z = torch.from_numpy(np.take_along_axis(zs, decides, 0)[0])
        count = _COUNT.get(len(scores), str(len(scores)))
        how = (f"weighted Bonferroni over {count} channel{'s' if len(scores) > 1 else ''} ({self.weight_rule()}): "
               + ", ".join(f"{c.name} [{s.p_value_method}]" for c, s in zip(self.channels, scores)))
        per_channel = {c.name: (p, torch.from_numpy(zj)) for c, p, zj in zip(self.channels, ps, zs)}
        return SchemeScores(score, z, pv, scores[0].n_scored.cpu(), how, channels=per_channel)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Φ⁻¹(1 − α) on ``score`` (⇔ p ≤ α).

        Raises:
            InputError: α outside (0, 1).
        """
        return normal_isf(alpha)
