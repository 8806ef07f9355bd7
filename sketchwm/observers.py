"""Observers of the masked-diffusion sampler: read-only hooks that see each generation's tilts.

An observer is passed to :meth:`sketchwm.engine.MaskedDiffusionSampler.generate` (``observers=[...]``)
and is called by the sampler, never by the scheme: the scheme is not wrapped or patched, and the
texts are the same with or without observers (an observer must not modify what it is given, nor
draw from the sampler's generator). The benchmark's KL recorder
(:class:`sketchwm.bench.recorders.KLRecorder`) and the theory checks' path recorder
(:class:`sketchwm.bench.theory.PathRecorder`) are observers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .components import DenoiseStep

__all__ = ["TiltObserver"]


class TiltObserver:
    """Base of the sampler's observers; each method is a no-op here, override the ones you need.

    Per call of ``generate`` (one batch of B texts) the sampler calls :meth:`on_start` once, then
    :meth:`on_tilt` at every denoising step that samples at least one row, then :meth:`on_end`.
    :meth:`on_tilt` is called only when the sampler has a watermark scheme.
    """

    def on_start(self, batch: int) -> None:
        """A batch of ``batch`` texts starts (its canvas is all [MASK])."""

    def on_tilt(self, step: "DenoiseStep", before: "torch.Tensor", after: "torch.Tensor",
                uniforms: "torch.Tensor | None") -> None:
        """One step's tilt, after the scheme's hooks and the sampler's NaN/inf check.

        Args:
            step: the :class:`sketchwm.components.DenoiseStep` the scheme saw (``step.marginals.target_valid``
                (B, K) bool marks the real target rows; ``step.temperature`` the sampler's T).
            before: (B, K, V) float32, the targets' logits before the scheme ran (a copy the observer may keep).
            after: (B, K, V) float32, the scheme's tilted logits, the ones tokens are drawn from (before
                the sampler's temperature and top-p).
            uniforms: (B, K, V) float keyed uniforms the scheme supplied for the draw, or None (the
                sampler's own noise, or greedy decoding).
        """

    def on_end(self, output: Any) -> None:
        """The batch is done: ``output`` is its :class:`sketchwm.engine.GenerationOutput` (``output.ids``
        (B, G) int64 the final tokens)."""
