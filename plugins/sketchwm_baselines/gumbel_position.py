"""``gumbel-position``: position-seeded Gumbel-max sampling at every diffusion step (Bagchi et al. 2025).

A. Bagchi, A. Bhimaraju, M. Choraria, D. Alabi, L. R. Varshney, "Watermarking Discrete Diffusion
Language Models", arXiv 2511.02083 (tested on LLaDA). Only the paper's abstract and a summary of it
were reachable from this project, so equation numbers are not cited; the scheme follows that
description: its Algorithm 1 applies the distribution-preserving Gumbel-max trick at every
diffusion step, with the randomness seeded by the sequence position, and the false-detection
probability decays exponentially in the text length.

At every step and every masked position i being decoded, the token is

    x_i = argmax_v [log p_i(v) − log(−log r_{i,v})],   r_{i,v} = PRF(k, i·V + v) ∈ (0, 1),

i.e. Gumbel-max sampling with keyed uniforms that depend on the generation position i and the
token v only (not on the step, the neighbours or the prompt). Over random keys x_i is distributed
exactly as p_i: the scheme is distortion-free at every step and under every remasking rule (a
position redrawn at a later step reuses its r_i, as the engine's confidence rules do).

Strength knob: none. The scheme has no tilt; its only lever is the sampler's temperature. At
T = 0 the engine takes the argmax of the logits and draws no noise, so greedy text is the model's
own greedy text and carries no watermark (a distortion-free scheme cannot change a deterministic
output).

Detection: Aaronson's score S = Σ_i −log(1 − r_{i,x_i}) over the text's positions (the text must
start at the first generated token; an insertion or deletion shifts every later position). Under
a random key every r_{i,x_i} is an independent U(0, 1) ((position, token) pairs are distinct), so
S ~ Gamma(n, 1) and the p-value P(Gamma(n, 1) >= S) is exact; its Chernoff bound is the paper's
exponential decay. ``z`` = (S − n)/√n. The code is ``aar-gumbel``'s with ``keying = "position"``
(:class:`~sketchwm_baselines.aar_gumbel.AARGumbelScheme`), under its own key domain.
"""

from __future__ import annotations

from pydantic import Field

from sketchwm.components import Strength
from sketchwm.config import StrictModel

from .aar_gumbel import AARGumbelScheme

__all__ = ["GumbelPositionScheme", "GumbelPositionParams"]


class GumbelPositionParams(StrictModel):
    """Parameters of ``gumbel-position`` (no strength knob: the scheme is distortion-free).

    Attributes:
        min_tokens: shortest text the detector accepts.
    """

    min_tokens: int = Field(16, ge=1)


class GumbelPositionScheme(AARGumbelScheme):
    """Position-seeded Gumbel-max at every diffusion step (Bagchi et al. 2025), distortion-free."""

    name = "gumbel-position"
    Params = GumbelPositionParams
    strength = Strength.none("distortion-free: position-seeded keyed uniforms replace the sampling noise, no strength knob")

    @property
    def keying(self) -> str:
        """Always ``position``: r_{i,v} depends on the generation position i and the token v."""
        return "position"

    def seed_domain(self) -> str:
        """``baselines/gumbel-position``: its own uniforms, distinct from ``aar-gumbel``'s."""
        return "baselines/gumbel-position"
