"""The benchmark run: plan the cell grid, build each model/key/calibration once, write a part per cell.

Grid (:class:`sketchwm.bench.config.BenchConfig`): a *unit* is one (scheme variant, backend, key,
length, prompt set, regime); it owns what its cells share — the backend, the keyed scheme, the
unwatermarked null texts (calibration and report splits) and the watermarked texts, each generated
once. A *cell* is one thing done to the unit's texts, of a registered kind
(:class:`sketchwm.bench.cellkind.CellKind`: ``clean``, ``attack``, ``spoof``, ``scrub``, the theory
checks). Each cell is identified by a content hash of its configuration; its rows go to one Parquet
part (:mod:`sketchwm.bench.results`), so a restarted run skips finished cells.

A kind names the inputs it reads (:data:`sketchwm.bench.cellkind.INPUTS`); :func:`run_cells` builds
each of them once per unit from the run's :class:`~sketchwm.bench.inputs.Services` and hands the
kind exactly those.

Executors: ``local`` runs every cell in this process through one :func:`run_cells` call; ``ray`` runs
each unit as a Ray task (its own services) and writes parts as tasks finish.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .. import __version__
from ..errors import ConfigError
from .cellkind import INPUTS, CellKind, Scored, text_rows  # noqa: F401 - Scored re-exported
from .config import BenchConfig
from .inputs import (Attacks, CleanQuality, NullSplits, Services, SpoofSetting, Theft, UnitScorer, UnitTexts,
                     prefix_tokens_to_detect)  # noqa: F401 - prefix_tokens_to_detect re-exported
from .metric import Metric, decisions
from .plan import (ALPHAS, Cell, Unit, _seed, attack_family, bench_registry, cell_kinds,  # noqa: F401 - re-exported
                   metric_names, plan)
from .recorders import KLRecorder
from .results import done_cells, git_commit, remove_stale_parts, write_part

__all__ = ["Unit", "Cell", "plan", "Services", "run_cells", "unit_inputs", "run_bench", "bench_registry",
           "attack_family", "ALPHAS", "Scored", "prefix_tokens_to_detect"]


class _Wiring:
    """One run's wiring: its services, metrics and cell kinds, and each unit's inputs, built once and
    handed to a cell kind by name (:meth:`inputs`). Cell kinds never see this object.

    Args:
        services: the run's :class:`Services`.

    Attributes:
        services, cfg, registry; metrics: the run's :class:`Metric` objects; kinds: {name: :class:`CellKind`};
        commit: the checkout's git commit.
    """

    def __init__(self, services: Services):
        s = self.services = services
        self.cfg, self.registry = s.cfg, s.registry
        self.metrics: list[Metric] = [self.registry.create("metric", n) for n in metric_names(s.cfg, self.registry)]
        self.kinds: dict[str, CellKind] = {k.name: k for k in cell_kinds(self.registry)}
        self.commit = git_commit()
        self._cache: dict[Any, Any] = {}
        self._inputs: dict[str, Callable[[Unit], Any]] = {
            "texts": self.texts, "nulls": self.nulls, "scorer": self.scorer, "quality": self.quality,
            "attacks": self.attacks, "theft": self.theft, "human": lambda unit: s.prompts.human(),
            "unrelated": s.schemes.unrelated, "spoofing": self.spoofing, "scheme": s.schemes.scheme,
            "vocab": self.vocab, "path": self.path, "soundness": self.soundness}

    def _get(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()``, once per ``key`` for the run."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def kind(self, name: str) -> CellKind:
        """The registered cell kind ``name``.

        Raises:
            RegistryError: unknown name (with close matches).
        """
        if name not in self.kinds:
            self.registry.get("cell-kind", name)  # raises, naming the registered kinds
        return self.kinds[name]

    def inputs(self, kind: CellKind, unit: Unit) -> dict[str, Any]:
        """{name: input} of the inputs ``kind`` needs, for ``unit`` (each built once per unit).

        Raises:
            ConfigError: the kind names an input the runner does not build.
        """
        unknown = [n for n in kind.needs if n not in self._inputs]
        if unknown:
            raise ConfigError(f"cell kind {kind.name!r} needs unknown inputs {unknown}; known: {', '.join(INPUTS)}")
        return {n: self._inputs[n](unit) for n in kind.needs}

    def _backend(self, unit: Unit) -> Any:
        return self.services.models.backend(unit.backend)

    def _prompts(self, unit: Unit) -> dict[str, list[str]]:
        return self.services.prompts.split(unit.prompt_set)

    # ------------------------------------------------------------------ the units' inputs (cellkind.INPUTS)
    def scorer(self, unit: Unit) -> UnitScorer:
        return self._get(("scorer", unit), lambda: UnitScorer(self.services.schemes.scheme(unit),
                                                              self._backend(unit).encode, self.cfg.tokens_step))

    def texts(self, unit: Unit) -> UnitTexts:
        def build() -> UnitTexts:
            prompts = self._prompts(unit)["eval"]
            rec = KLRecorder()
            wm, secs = self.services.models.generate(unit.backend, unit.length, prompts, self.services.schemes.scheme(unit),
                                                     _seed(self.cfg.seed, "wm", unit), unit.regime,
                                                     [rec] if self.cfg.kl else ())
            kl, per_text, sampled = rec.per_text(len(wm)) or (None, None, None)
            return UnitTexts(wm, prompts, secs, self.scorer(unit).score(wm), kl, per_text, sampled)
        return self._get(("texts", unit), build)

    def nulls(self, unit: Unit) -> NullSplits:
        def build() -> NullSplits:
            models = self.services.models
            null = lambda split: models.null_texts(unit.backend, unit.length, unit.prompt_set, split, unit.regime)  # noqa: E731
            fpr_texts = null("null_fpr")
            return NullSplits(self.scorer(unit).score(null("null_cal")), self.scorer(unit).score(fpr_texts), fpr_texts)
        return self._get(("nulls", unit), build)

    def quality(self, unit: Unit) -> CleanQuality:
        def build() -> CleanQuality:
            oracle = self.services.oracle
            ppl = oracle.ppl(self.texts(unit).texts, ("wm", unit))
            null_ppl = None if ppl is None else oracle.ppl(
                self.nulls(unit).fpr_texts, ("null", unit.backend, unit.length, unit.prompt_set, unit.regime))
            return CleanQuality(ppl, null_ppl, self._diversity(unit, True), self._diversity(unit, False))
        return self._get(("quality", unit), build)

    def _diversity(self, unit: Unit, watermarked: bool) -> list[list[list[int]]] | None:
        """Token ids of ``samples`` texts of each of the first ``prompts`` eval prompts (config ``diversity``),
        watermarked under the unit's key or not (shared by schemes and keys); None without ``diversity``."""
        spec = self.cfg.diversity
        if spec is None:
            return None
        tag = ("div", unit) if watermarked else ("div-null", unit.backend, unit.length, unit.prompt_set, unit.regime)

        def build() -> list[list[list[int]]]:
            prompts = self._prompts(unit)["eval"][: spec.prompts]
            rep = [p for p in prompts for _ in range(spec.samples)]  # (prompts·samples) prompts, sample-major
            scheme = self.services.schemes.scheme(unit) if watermarked else None
            texts, _ = self.services.models.generate(unit.backend, unit.length, rep, scheme, _seed(self.cfg.seed, *tag),
                                                     regime=unit.regime)
            ids = self._backend(unit).encode(texts)
            return [ids[i * spec.samples:(i + 1) * spec.samples] for i in range(len(prompts))]
        return self._get(tag, build)

    def attacks(self, unit: Unit) -> Attacks:
        return self._get(("attacks", unit.backend), lambda: Attacks(self.registry, self._backend(unit), self.cfg.similarity))

    def theft(self, unit: Unit) -> Theft:
        def build() -> Theft:
            be, models = self._backend(unit), self.services.models
            train = models.generate(unit.backend, unit.length, self._prompts(unit)["steal_train"],
                                    self.services.schemes.scheme(unit), _seed(self.cfg.seed, "steal", unit), unit.regime)[0]
            ref = models.null_texts(unit.backend, unit.length, unit.prompt_set, "steal_ref", unit.regime)
            return Theft(train, ref, lambda tr, rf: self.registry.create(
                "attack", "steal-scrub", None, backend=be, watermarked_texts=tr, reference_texts=rf).stealer)
        return self._get(("theft", unit), build)

    def spoofing(self, unit: Unit) -> SpoofSetting:
        return SpoofSetting(self._backend(unit), self._prompts(unit)["null_fpr"],
                            self.services.models.sampler_config(unit.backend, unit.length, unit.regime))

    def vocab(self, unit: Unit) -> np.ndarray:
        be = self._backend(unit)
        banned = np.array(sorted(set(getattr(be, "banned_token_ids", ()) or ()) | {be.mask_token_id}), dtype=np.int64)
        return np.setdiff1d(np.arange(be.vocab_size), banned)

    def path(self, unit: Unit) -> dict[str, Any]:
        from .theory import sampling_path

        spec = self.cfg.theory
        return self._get(("theory-path", unit), lambda: sampling_path(
            self._backend(unit), self.services.schemes.scheme(unit), self._prompts(unit)["eval"][: spec.n_texts],
            self.services.models.sampler_config(unit.backend, unit.length), self.cfg.batch_size, spec.fisher_scales,
            _seed(self.cfg.seed, "theory-path", unit)))

    def soundness(self, unit: Unit) -> np.ndarray:
        from .theory import soundness_pvalues

        return self._get(("theory-sound", unit), lambda: soundness_pvalues(
            self._backend(unit).encode, unit.length, lambda key: self.services.schemes.keyed(unit, key),
            self.cfg.key_seed, self.cfg.seed, self.cfg.theory))


#: the columns of a results row after the cell's head, in order
COLUMNS = ["row_type", "text_index", "n_tokens", "score", "p_value", "detected", "tokens_to_detect", "ppl", "kl",
           "kl_sampled", "diversity", "distinct_texts", "first_token_match", "similarity", "edit_fraction",
           "unrelated_flagged", "metric", "value", "unit", "higher_is_better", "task", "deterministic", "n", "note"]


def _head(w: _Wiring, cell: Cell, kind: CellKind) -> dict[str, Any]:
    """The columns every row of ``cell`` shares: what the cell is, its unit, the run and the code."""
    unit, cfg, schemes = cell.unit, w.cfg, w.services.schemes
    knob = schemes.knob(unit)
    return {
        "run": cfg.name, "cell_hash": cell.hash, "cell_kind": cell.kind, "scheme": unit.scheme,
        "scheme_name": unit.scheme_name, "scheme_params": unit.scheme_params, "scheme_version": unit.scheme_version,
        "scheme_params_resolved": schemes.resolved_params(unit), "curve": unit.curve or unit.scheme,
        "regime": cfg.regime_list[unit.regime].name, "regime_index": unit.regime, "knob": knob[0],
        "knob_value": knob[1], "default_strength": knob[2], "knob_stronger": knob[3], "tokens_step": cfg.tokens_step,
        "min_tokens": w.scorer(unit).min_tokens if kind.evidence == "texts" else None,
        "backend": cfg.backends[unit.backend].name,
        "model_id": str(getattr(w.services.models.backend(unit.backend), "model_id", "")), "length": unit.length,
        "prompt_set": cfg.prompt_sets[unit.prompt_set].name, "key_index": unit.key,
        "key_fingerprint": schemes.key(unit.key).fingerprint, "attack": cell.attack, "attack_family": attack_family(cell.attack),
        "attack_params": cell.attack_params, "strength": cell.strength, "train_n": cell.train_n, "seed": cfg.seed,
        "package_version": __version__, "git_commit": w.commit,
    }


def _run_cell(w: _Wiring, cell: Cell) -> list[dict[str, Any]]:
    """All rows of one cell: its texts' rows (with the one rule's decision), the kind's further rows
    (e.g. a clean cell's null splits) and one summary row per metric that applies to the kind."""
    t0 = time.perf_counter()
    kind = w.kind(cell.kind)
    ev = kind.run(cell, **w.inputs(kind, cell.unit))
    sc, columns = ev.texts, dict(ev.columns)
    if len(sc.scores):
        flags, _ = decisions(ev.data, sc.scores, 0.01, sc.analytic[0.01], sc.n_tokens)  # the one rule, per length bin
        columns["detected"] = None if flags is None else flags.astype(np.float64)
    rows = text_rows("text", sc, columns) + ev.rows
    for m in w.metrics:
        if cell.kind not in m.kinds:
            continue
        v = m.compute(ev.data)
        if v is None:
            continue
        rows.append({"row_type": "summary", "metric": m.name, "value": float(v.value), "unit": m.unit,
                     "higher_is_better": m.higher_is_better, "task": m.task, "deterministic": m.deterministic,
                     "n": int(v.n), "note": v.note})
    head = _head(w, cell, kind)
    wall = time.perf_counter() - t0
    return [{**head, "row_index": j, **{c: r.get(c) for c in COLUMNS}, "wall_time_s": wall} for j, r in enumerate(rows)]


def run_cells(services: Services, cells: Iterable[Cell]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(cell hash, rows) of each cell of ``cells``, in order, each cell run when the iterator reaches it.

    The cells share their units' inputs: each is built once for the whole call, from ``services``
    (whose keys, schemes and generated null texts a caller may read before or after). A cell's rows:
    its texts' rows (with the one rule's decision), its kind's further rows (e.g. a clean cell's null
    splits) and one summary row per metric that applies to its kind; every row holds the columns
    :data:`COLUMNS` after the cell's head.

    Raises:
        RegistryError: a cell's kind, a metric or a component is not registered.
        ConfigError: a kind names an input the runner does not build.
    """
    w = _Wiring(services)
    for cell in cells:
        yield cell.hash, _run_cell(w, cell)


def unit_inputs(services: Services, kind: CellKind, unit: Unit) -> dict[str, Any]:
    """{name: input} of the inputs ``kind`` names (:data:`sketchwm.bench.cellkind.INPUTS`), built for
    ``unit`` from ``services``, as :func:`run_cells` hands them to the kind.

    Raises:
        ConfigError: the kind names an input the runner does not build.
    """
    return _Wiring(services).inputs(kind, unit)


#: the services of the grid a Ray worker process is running (its config JSON → services): built once
#: per worker, not per unit
_WORKER_SERVICES: dict[str, Services] = {}


def _ray_unit(cfg_json: str, cells: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Ray task body: one unit's cells, on the services of its grid (installed plugins) built once per
    worker process. Ray reuses a worker for the tasks that follow, so the models, the oracle and each
    regime's unwatermarked null texts are made once per worker, as one local run makes them once,
    instead of once per unit (every cell's seeds are its own, so the rows are the same either way).
    A task of another grid drops the previous grid's services first."""
    svc = _WORKER_SERVICES.get(cfg_json)
    if svc is None:
        _WORKER_SERVICES.clear()
        svc = _WORKER_SERVICES[cfg_json] = Services.build(BenchConfig.model_validate_json(cfg_json))
    cs = [Cell(**{**c, "unit": Unit(**c["unit"])}) for c in cells]
    return list(run_cells(svc, cs))


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'sketchwm[ray]' (or pip install ray)") from None
    return ray


def _record_config(out: Path, text: str) -> Path:
    """Write the grid's configuration into the results folder without touching an existing file.

    ``config.json`` holds the first grid run into ``out``; a different grid run into the same folder
    (cells are keyed by their own hash, so grids can share a folder) is kept as
    ``config-<sha256[:16]>.json``. Written atomically; an identical file is left as it is.
    """
    import hashlib

    from ..io import atomic_write

    first = out / "config.json"
    path = first
    if first.exists() and first.read_text() != text:
        path = out / f"config-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists() or path.read_text() != text:
        with atomic_write(path) as fh:
            fh.write(text)
    return path


def run_bench(cfg: BenchConfig, out: str | Path, *, registry: Any = None, executor: str = "local",
              progress: bool | None = None) -> dict[str, int]:
    """Run the grid into ``out`` (parts under ``out/parts``); finished cells of an earlier run are skipped.

    Args:
        cfg: validated config; out: results folder; registry: plugins (default installed + built-in metrics);
        executor: ``local`` or ``ray``; progress: tqdm bar (default: only when stderr is a terminal).

    Returns:
        ``{"cells": total, "skipped": already done, "ran": newly written}``.

    Raises:
        ConfigError: unknown executor, Ray missing. RegistryError: unknown component names.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    registry = bench_registry(registry)
    units = plan(cfg, registry)  # bad names and params fail here, before anything is written
    out.mkdir(parents=True, exist_ok=True)
    _record_config(out, cfg.model_dump_json(indent=2))
    remove_stale_parts(out)  # temporary parts of a run killed mid-write
    done = done_cells(out)
    todo = [(u, [c for c in cells if c.hash not in done]) for u, cells in units]
    todo = [(u, cs) for u, cs in todo if cs]
    total = sum(len(cs) for _, cs in units)
    n_todo = sum(len(cs) for _, cs in todo)
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=n_todo, unit="cell", desc=f"bench {cfg.name}", disable=not show, dynamic_ncols=True)
    try:
        if executor == "local":
            for h, rows in run_cells(Services.build(cfg, registry), [c for _, cells in todo for c in cells]):
                write_part(out, h, rows)
                bar.update(1)
        elif executor == "ray":
            ray = _require_ray()
            if not ray.is_initialized():
                ray.init(log_to_driver=False)
            task = ray.remote(_ray_unit)
            cfg_json = cfg.model_dump_json()
            pending = [task.remote(cfg_json, [asdict(c) for c in cells]) for _, cells in todo]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for h, rows in ray.get(ready[0]):
                    write_part(out, h, rows)
                    bar.update(1)
        else:
            raise ConfigError(f"unknown executor {executor!r} (choose local or ray)")
    finally:
        bar.close()
    return {"cells": total, "skipped": total - n_todo, "ran": n_todo}
