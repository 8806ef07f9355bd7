"""Base classes of every pluggable component: one module per contract.

A plugin subclasses one of these, declares ``name`` (the registry key) and a nested ``Params``
(:class:`sketchwm.config.StrictModel`), and returns the class from the matching hook in
:mod:`sketchwm.hookspecs`. The core holds the mechanism; the algorithms live in plugins.

Kinds:
    * :class:`Sketch`          — a linear text sketch h(y) = Φᵀ counts(y) / √N (paper Def. 2.3).
    * :class:`ScoreFunction`   — a detector score of (u, h) with p-values (paper eq. 2, 17-19).
    * :class:`DLMBackend`      — a masked diffusion LM that returns logits for masked positions.
    * :class:`WatermarkScheme` — generation hooks for the engine + a detector.
    * :class:`Attack`          — a text transformation with a strength in [0, 1].

Modules: :mod:`.sketch`, :mod:`.score`, :mod:`.backend`, :mod:`.marginals`, :mod:`.scheme`,
:mod:`.attack` (one contract each), :mod:`.component` (the common base), and the shared
implementations :mod:`.token_sums` (id checks, sums over distinct tokens), :mod:`.expected_sketch`
(the stop-token expected sketch's row scans) and :mod:`.cpu`. Import from here:
``from sketchwm.components import Sketch``.
"""

from .attack import Attack, AttackOutput
from .backend import DLMBackend, tokenizer_fingerprint
from .component import Component
from .cpu import serial_on_cpu
from .expected_sketch import scan_rows_, stop_absence_
from .marginals import DenoiseStep, MarginalReads, Marginals, packed_masked_positions, row_index
from .scheme import SchemeScores, Strength, WatermarkScheme
from .score import ScoreFunction
from .sketch import Sketch
from .token_sums import _distinct_token_sums_torch  # noqa: F401 - used by tests
from .threads import gather_rows, over_slices, shared_pool
from .token_sums import check_token_ids, distinct_token_sums, ids_summary, one_batch, sort_rows

__all__ = [
    "Component",
    "Sketch",
    "ScoreFunction",
    "DLMBackend",
    "DenoiseStep",
    "MarginalReads",
    "Marginals",
    "packed_masked_positions",
    "row_index",
    "check_token_ids",
    "WatermarkScheme",
    "SchemeScores",
    "Strength",
    "Attack",
    "AttackOutput",
    "tokenizer_fingerprint",
    "serial_on_cpu",
    "distinct_token_sums",
    "sort_rows",
    "ids_summary",
    "one_batch",
    "scan_rows_",
    "stop_absence_",
    "shared_pool",
    "over_slices",
    "gather_rows",
]
