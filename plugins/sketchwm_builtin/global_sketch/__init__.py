"""``global-sketch``: the global sketch watermark of the seed paper (Alg. 1 embedding, Alg. 2 detection)
for masked diffusion LMs.

A keyed Count-Sketch φ_k maps the text's tokens to a vector h_k(y) ∈ R^D (eq. 1, 3; sign-balanced by
the token prior, eq. 4); the watermark tilts every masked marginal towards tokens that raise the
score S_k(h) = 2⟨u_k, h⟩ − λ‖h‖² (eq. 2), and the detector tests S_k or the fixed-key statistic
⟨u_k, h⟩ against a null. The parts:

* :mod:`.params`: :class:`GlobalSketchParams`, :class:`PriorSpec`.
* :mod:`.prior`: the token prior π_tok (eq. 4) and the background token model built from it.
* :mod:`.embed`: the expected sketch (eq. 5), the residual gradient (eq. 6) and the exponential tilt
  (eq. 7) of Alg. 1, with their ``presence`` and stop-token analogues and the η_t schedule.
* :mod:`.running`: the column statistic over the masked rows, kept between marginal refreshes.
* :mod:`.order`: the unmasking order as a second channel (eq. 6 read as a ranking).
* :mod:`.null`: the fixed-key background null and its exact p-value; the paper's key-randomised
  null (Theorem 5.4, eq. 17-19) is the score function's.
* :mod:`.attribution`: ranking the members of a key family (§4.1 keys k = (k_sk, k_dir)).
* :mod:`.scheme`: :class:`GlobalSketchScheme`, which composes them.
"""

from .attribution import Attribution
from .params import GlobalSketchParams, PriorSpec
from .prior import resolve_prior
from .scheme import GlobalSketchScheme

__all__ = ["GlobalSketchScheme", "GlobalSketchParams", "PriorSpec", "Attribution", "resolve_prior"]
