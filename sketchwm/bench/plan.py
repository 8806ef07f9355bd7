"""The bench plan: which units (backend × scheme setting × regime × length × prompt set × key) and which
cells a config asks for, in a stable order with a hash per cell so an interrupted run resumes. Each
registered cell kind (:class:`sketchwm.bench.cellkind.CellKind`: clean, attack, spoof, scrub, the theory
checks) says which cells a unit gets. Pure bookkeeping, no model is loaded here;
:mod:`sketchwm.bench.runner` runs the plan.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from ..config import config_hash
from ..keys import WatermarkKey
from .cellkind import CellKind, UnitScope
from .config import BenchConfig, check_unique_labels
from .seeds import derive_seed

#: false-positive rates at which per-text analytic thresholds are computed
ALPHAS = (0.01, 0.001)


_FAMILIES = {"substitute": "substitution", "insert": "insertion", "delete": "deletion", "reorder": "reordering",
             "flood": "flooding", "repeat": "flooding", "paraphrase": "paraphrase", "steal": "stealing",
             "stolen": "stealing"}


def attack_family(attack: str) -> str:
    """The attack family of an attack name ("substitute-synonym" → "substitution"; "none" → "none")."""
    if attack == "none":
        return "none"
    head = attack.split("-", 1)[0]
    return _FAMILIES.get(head, head)


_seed = derive_seed  # the runner's short name


def bench_registry(registry: Any = None) -> Any:
    """``registry`` (default: the installed plugins), checked to hold benchmark metrics and cell kinds.

    The built-in metrics and cell kinds register like every plugin, through the entry points
    ``builtin-metrics`` (:mod:`sketchwm.bench.builtin_metrics`) and ``builtin-cell-kinds``
    (:mod:`sketchwm.bench.builtin_kinds`); the runner does not import them itself.

    Raises:
        RegistryError: no metric or no cell kind is registered (sketchwm's entry points are not
            installed: run ``pip install -e .`` in the checkout).
    """
    if registry is None:
        from ..registry import get_registry

        registry = get_registry()
    for kind, entry_point in (("metric", "builtin-metrics"), ("cell-kind", "builtin-cell-kinds")):
        if not registry.names(kind):
            from ..errors import RegistryError

            raise RegistryError(f"no benchmark {kind}s are registered (the entry point {entry_point!r} is missing): "
                                "reinstall sketchwm with `pip install -e .`")
    return registry


def cell_kinds(registry: Any) -> list[CellKind]:
    """The registered cell kinds, built, in the order their cells come in a unit (``order``, then name)."""
    return sorted((registry.build("cell-kind", n) for n in registry.names("cell-kind")), key=lambda k: (k.order, k.name))


@dataclass(frozen=True)
class Unit:
    """Cells sharing a backend, a keyed scheme, null texts and watermarked texts (indices into the config)."""

    scheme: str
    scheme_name: str
    scheme_params: str  # JSON
    backend: int
    key: int
    length: int
    prompt_set: int
    regime: int = 0
    curve: str = ""  # the entry's label: the variants of one strength sweep share it
    scheme_version: str = ""  # the scheme class's ``version`` when the plan was made


@dataclass(frozen=True)
class Cell:
    """One thing done to a unit's texts; ``hash`` is the content hash of everything that defines its rows
    (:func:`plan` lists what it covers)."""

    unit: Unit
    kind: str
    attack: str
    strength: float
    attack_params: str  # JSON
    n: int
    train_n: int
    hash: str


def derive_key(cfg: BenchConfig, index: int) -> WatermarkKey:
    """Key ``index`` of the run: HMAC-SHA256(key_seed, "sketchwm/bench/key/<index>") (never written out)."""
    return WatermarkKey(hmac.new(cfg.key_seed.encode(), f"sketchwm/bench/key/{index}".encode(), hashlib.sha256).digest())


def derive_unrelated_key(cfg: BenchConfig, index: int, j: int) -> WatermarkKey:
    """The ``j``-th key unrelated to run key ``index``: HMAC-SHA256(key_seed, "sketchwm/bench/unrelated-key/<index>/<j>"),
    a domain no key of the run is derived in (never written out)."""
    msg = f"sketchwm/bench/unrelated-key/{index}/{j}".encode()
    return WatermarkKey(hmac.new(cfg.key_seed.encode(), msg, hashlib.sha256).digest())


def metric_names(cfg: BenchConfig, registry: Any) -> list[str]:
    """Metrics the run computes (config order, or every registered one); raises RegistryError on unknown names."""
    names = cfg.metrics if cfg.metrics is not None else registry.names("metric")
    for n in names:
        registry.get("metric", n)
    return list(names)


def resolved_params(cls: Any, params: dict[str, Any] | None) -> dict[str, Any]:
    """``params`` of component class ``cls`` as the component runs them: validated by its ``Params``
    model, every default filled in, as JSON values (raises :class:`ConfigError` when invalid)."""
    return cls.parse_params(params).model_dump(mode="json")


def scheme_identity(cls: Any, params: dict[str, Any] | None) -> dict[str, Any]:
    """The part of a cell's identity that the scheme fixes: its name, its ``version`` class attribute
    and its resolved params (:func:`resolved_params`). A changed default or a bumped version changes
    it, hence the hash of every cell of the scheme: a results folder then reruns those cells instead
    of reusing rows the older code or defaults produced."""
    return {"scheme": cls.name, "scheme_version": str(cls.version), "params": resolved_params(cls, params)}


def plan(cfg: BenchConfig, registry: Any) -> list[tuple[Unit, list[Cell]]]:
    """Every unit of the grid with its cells (units in the order schemes, regimes, variants, backends,
    lengths, prompt sets, keys; a unit's cells in its kinds' order, each kind's in the order it plans them).

    A cell's hash covers everything that defines its rows: the run's shared settings, the scheme's
    identity (:func:`scheme_identity`: resolved params and version), the backend, key, length,
    prompts and regime, the attack with its resolved params, and the cell's own fields.

    Raises:
        RegistryError: unknown scheme, backend (other than ``tiny``), attack or metric.
        ConfigError: invalid scheme or attack params.
    """
    metrics = metric_names(cfg, registry)
    for b in cfg.backends:
        if b.name != "tiny":
            registry.get("backend", b.name).parse_params(b.params)
    attack_params = {(a.name, json.dumps(a.params, sort_keys=True)): resolved_params(registry.get("attack", a.name), a.params)
                     for a in cfg.attacks}
    for ta in cfg.stealing.text_attacks if cfg.stealing else []:
        if not isinstance(ta, str):
            registry.get("attack", ta.name).parse_params(ta.params)
    fps = [derive_key(cfg, k).fingerprint for k in range(cfg.keys)]
    kinds = cell_kinds(registry)
    # a cell's hash covers the metrics that may apply to it: adding theory metrics (which apply to
    # theory cells only) leaves the hashes, hence the finished parts, of every other cell valid
    theory = {k.name for k in kinds if k.evidence == "theory"}
    theory_only = {n for n in metrics if set(registry.get("metric", n).kinds) <= theory}
    common = {"sampler": cfg.sampler, **({"diversity": cfg.diversity.model_dump()} if cfg.diversity else {}), "n_null_cal": cfg.n_null_cal, "n_null_fpr": cfg.n_null_fpr, "seed": cfg.seed,
              "metrics": [n for n in metrics if n not in theory_only], "oracle": cfg.oracle, "similarity": cfg.similarity, "tokens_step": cfg.tokens_step,
              "batch_size": cfg.batch_size}
    out = []
    regimes = cfg.regime_list
    labels = []
    for si, s in enumerate(cfg.schemes):
        cls = registry.get("scheme", s.name)
        labels.append((si, s, [lab for lab, _ in s.variants(cls.strength, cfg.sweep)]))
    check_unique_labels(labels)
    for s in cfg.schemes:
        cls = registry.get("scheme", s.name)
        strength = cls.strength
        default = strength.value_of(cls.parse_params(s.params))
        for ri, regime in enumerate(regimes):
            variants = s.variants(strength, cfg.sweep) if regime.sweep else s.variants()
            for label, params in variants:
                at_default = strength.value_of(cls.parse_params(params)) == default
                for bi, b in enumerate(cfg.backends):
                    for length in cfg.lengths:
                        for pi, ps in enumerate(cfg.prompt_sets):
                            for k in range(cfg.keys):
                                unit = Unit(label, s.name, json.dumps(params, sort_keys=True), bi, k, length, pi, ri,
                                            s.label or s.name, str(cls.version))
                                ident = {**common, **scheme_identity(cls, params), "backend": b.model_dump(mode="json"),
                                         "key": fps[k], "length": length, "prompts": ps.model_dump(mode="json")}
                                if cfg.regimes:  # the default regime keeps the hashes of configs without regimes
                                    ident["regime"] = regime.model_dump(mode="json")
                                scope = UnitScope(cfg, ps, k, ri, label, s.name, at_default, attack_params,
                                                  tuple(n for n in metrics if n in theory_only))
                                cells = [_cell(unit, ident, kind.name, spec) for kind in kinds for spec in kind.plan(scope)]
                                out.append((unit, cells))
    return out


def _cell(unit: Unit, ident: dict[str, Any], kind: str, spec: Any) -> Cell:
    """The cell of ``unit`` that ``spec`` (a :class:`sketchwm.bench.cellkind.CellSpec` of ``kind``) describes;
    its hash reads the attack's resolved params where the spec gives them, the cell keeps those written."""
    h = config_hash({**ident, "kind": kind, "attack": spec.attack, "strength": spec.strength,
                     "attack_params": spec.attack_params if spec.hashed_params is None else spec.hashed_params,
                     "n": spec.n, "train_n": spec.train_n, **(spec.identity or {})})
    return Cell(unit, kind, spec.attack, float(spec.strength), json.dumps(spec.attack_params, sort_keys=True), spec.n,
                spec.train_n, h)
