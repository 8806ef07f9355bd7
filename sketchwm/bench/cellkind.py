"""The cell-kind plugin contract of ``sketchwm bench``: what a kind of cell plans and how it runs.

A benchmark *unit* (one keyed scheme setting on one backend, length, prompt set and regime) owns
texts its cells share; a *cell* is one thing done to them (:mod:`sketchwm.bench.runner`). Each kind
of cell (``clean``, ``attack``, ``spoof``, ``scrub`` and the theory checks ``theory-kl``, ...) is a
:class:`CellKind` registered through the ``sketchwm_register_cell_kinds`` hook, the built-ins
(:mod:`sketchwm.bench.builtin_kinds`) exactly like third-party ones. A kind states

* which cells a unit gets (:meth:`CellKind.plan`: one :class:`CellSpec` per cell, the fields its
  identity hash covers),
* what it reads (:attr:`CellKind.needs`: names of the run's inputs, :data:`INPUTS`), and
* how it runs (:meth:`CellKind.run`: those inputs in, a :class:`CellEvidence` out).

The planner and the runner look a kind up by its name; neither branches on it.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from ..components import Component
from .metric import CellData

__all__ = ["CellKind", "CellSpec", "UnitScope", "CellEvidence", "Scored", "INPUTS", "cell_data", "text_rows"]

#: the inputs a kind may name in :attr:`CellKind.needs`, each built once per unit (or run) by the
#: runner: name → what the kind's :meth:`CellKind.run` receives under that name
INPUTS: dict[str, str] = {
    "texts": "sketchwm.bench.inputs.UnitTexts: the unit's watermarked texts, their scores and the KL recorded",
    "nulls": "sketchwm.bench.inputs.NullSplits: the unit's unwatermarked calibration and report splits, scored",
    "scorer": "sketchwm.bench.inputs.UnitScorer: detection under the unit's keyed scheme",
    "quality": "sketchwm.bench.inputs.CleanQuality: oracle perplexities and cross-sample diversity",
    "attacks": "sketchwm.bench.inputs.Attacks: the run's attacks built on the unit's backend",
    "theft": "sketchwm.bench.inputs.Theft: the thief's stolen texts and the stealer fitted on them",
    "human": "tuple[str, ...]: the human passages the text spoofers forge",
    "unrelated": "sketchwm.bench.inputs.UnrelatedKeys: scores under keys unrelated to the unit's",
    "spoofing": "sketchwm.bench.inputs.SpoofSetting: backend, prompts and sampler of the generation spoofer",
    "scheme": "the unit's keyed scheme (sketchwm.components.WatermarkScheme)",
    "vocab": "(n,) int64 numpy array: the backend's token ids an edit may write",
    "path": "dict: the recorded sampling path of the theory checks (sketchwm.bench.theory.sampling_path)",
    "soundness": "(pairs, n) float64 numpy array: p-values of human texts under fresh keys (theory.soundness_pvalues)",
}


@dataclass
class Scored:
    """Detection of a batch of texts.

    Attributes:
        scores, p_values: (n,) float64 (an empty text: score −inf, p-value 1).
        n_tokens: (n,) int64 tokens scored per text; ids: the n token-id lists.
        analytic: {α: (n,) float64} the scheme's analytic τ_α at each text's length (−inf where none).
        seconds: wall seconds the detection took.
    """

    scores: np.ndarray
    p_values: np.ndarray
    n_tokens: np.ndarray
    ids: list[list[int]]
    analytic: dict[float, np.ndarray]
    seconds: float

    @classmethod
    def empty(cls, alphas: tuple[float, ...]) -> "Scored":
        """No texts: every array of length 0."""
        e = np.zeros(0)
        return cls(e, e, np.zeros(0, dtype=np.int64), [], {a: e for a in alphas}, 0.0)


@dataclass(frozen=True)
class CellSpec:
    """One cell a kind asks for: the fields of :class:`sketchwm.bench.plan.Cell` it fixes.

    Attributes:
        attack: attack name ("none" when nothing is done to the texts); strength: its strength (or the
            check's parameter, e.g. a Fisher scale), as given in the config.
        attack_params: the params the cell records (JSON object).
        n: texts the cell evaluates; train_n: stolen texts the thief learns from (0: no thief).
        identity: further fields of the cell's identity hash (e.g. the stealing or theory spec).
        hashed_params: the params the hash reads instead of ``attack_params`` (the attack's resolved
            params), or None.
    """

    attack: str
    strength: float
    attack_params: dict[str, Any]
    n: int
    train_n: int = 0
    identity: dict[str, Any] | None = None
    hashed_params: dict[str, Any] | None = None


@dataclass(frozen=True)
class UnitScope:
    """What a kind's planner sees of one unit of the grid.

    Attributes:
        cfg: the run's :class:`sketchwm.bench.config.BenchConfig`.
        prompt_set: the unit's :class:`sketchwm.bench.config.PromptSet`.
        key, regime: the unit's key and regime indices.
        label, scheme_name: the unit's scheme label (a variant's, e.g. ``unigram[delta=2]``) and registered name.
        at_default: whether the unit runs its scheme's default strength.
        attack_params: {(attack name, its config params as sorted JSON): resolved params} of ``cfg.attacks``.
        theory_metrics: the run's metrics that apply to theory cells only.
    """

    cfg: Any
    prompt_set: Any
    key: int
    regime: int
    label: str
    scheme_name: str
    at_default: bool
    attack_params: dict[tuple[str, str], dict[str, Any]]
    theory_metrics: tuple[str, ...]


@dataclass
class CellEvidence:
    """What a cell produced.

    Attributes:
        data: the metric input (:class:`sketchwm.bench.metric.CellData`).
        texts: the detection of the cell's texts, one ``text`` row each (:meth:`Scored.empty` when the
            cell has none).
        columns: further per-text columns of those rows ({column: (n,) array or None}).
        rows: further rows after the text rows (``row_type``, ``text_index`` and columns), e.g. the null splits.
    """

    data: CellData
    texts: Scored
    columns: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


def cell_data(cell: Any, texts: Scored, nulls: Any, **fields: Any) -> CellData:
    """The metric input of ``cell`` whose texts' detection is ``texts``, against the unit's null splits
    ``nulls`` (a :class:`sketchwm.bench.inputs.NullSplits`); ``fields``: further :class:`CellData` fields."""
    return CellData(kind=cell.kind, attack=cell.attack, strength=cell.strength, scores=texts.scores,
                    p_values=texts.p_values, n_tokens=texts.n_tokens, analytic=texts.analytic,
                    null_cal=nulls.cal.scores, null_fpr=nulls.fpr.scores, null_fpr_analytic=nulls.fpr.analytic,
                    train_n=cell.train_n, token_ids=texts.ids, null_cal_tokens=nulls.cal.n_tokens,
                    null_fpr_tokens=nulls.fpr.n_tokens, **fields)


def text_rows(row_type: str, scored: Scored, columns: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per text of ``scored``: ``row_type``, ``text_index``, ``n_tokens``, ``score``, ``p_value``
    and each of ``columns`` ((n,) arrays; None: the column is left empty)."""
    out = []
    for i in range(len(scored.scores)):
        r = {"row_type": row_type, "text_index": i, "n_tokens": int(scored.n_tokens[i]),
             "score": float(scored.scores[i]), "p_value": float(scored.p_values[i])}
        for k, v in columns.items():
            r[k] = None if v is None else float(v[i])
        out.append(r)
    return out


class CellKind(Component):
    """A kind of benchmark cell (see module doc).

    Subclasses set ``name`` (the ``cell_kind`` column and part of every cell's identity), ``evidence``,
    ``needs`` and ``order``, and implement :meth:`plan` and :meth:`run`.
    """

    kind = "cell-kind"
    #: "texts": the cell's texts are scored under the unit's key (text rows carry the decision, the
    #: ``min_tokens`` column is set); "theory": a check of the seed paper's statements that makes its own
    #: evidence (:mod:`sketchwm.bench.theory`); metrics that apply to theory cells only are left out of
    #: the other cells' identity
    evidence: ClassVar[Literal["texts", "theory"]] = "texts"
    #: the inputs :meth:`run` takes, by their names in :data:`INPUTS`
    needs: ClassVar[tuple[str, ...]] = ()
    #: where the kind's cells come among a unit's cells (lower first, then by name)
    order: ClassVar[int] = 100

    def __init__(self, params: Any = None):
        self.params = self.parse_params(params)

    @abstractmethod
    def plan(self, scope: UnitScope) -> list[CellSpec]:
        """The cells of this kind that the unit ``scope`` gets (none when the config does not ask for it)."""

    @abstractmethod
    def run(self, cell: Any, **inputs: Any) -> CellEvidence:
        """The evidence of ``cell`` (a :class:`sketchwm.bench.plan.Cell` of this kind) from the inputs
        named in :attr:`needs`, each passed as a keyword argument."""
