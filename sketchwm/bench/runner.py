"""The benchmark run: plan the cell grid, build each model/key/calibration once, write a part per cell.

Grid (:class:`sketchwm.bench.config.BenchConfig`): a *unit* is one (scheme variant, backend, key,
length, prompt set, regime); it owns what its cells share — the backend, the keyed scheme, the
unwatermarked null texts (calibration and report splits) and the watermarked texts, each generated
once. A *cell* is one thing done to the unit's texts, of a registered kind
(:class:`sketchwm.bench.cellkind.CellKind`: ``clean``, ``attack``, ``spoof``, ``scrub``, the theory
checks). Each cell is identified by a content hash of its configuration; its rows go to one Parquet
part (:mod:`sketchwm.bench.results`), so a restarted run skips finished cells.

A kind names the inputs it reads (:data:`sketchwm.bench.cellkind.INPUTS`); :class:`RunContext` builds
each of them once per unit from the run's services (:mod:`sketchwm.bench.inputs`) and
:func:`run_cell` hands the kind exactly those.

Executors: ``local`` runs units in this process with one shared :class:`RunContext`; ``ray`` runs
each unit as a Ray task (its own context) and writes parts as tasks finish.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .. import __version__
from ..errors import ConfigError
from ..keys import WatermarkKey
from ..observers import TiltObserver
from .cellkind import INPUTS, CellKind, Scored, text_rows  # noqa: F401 - Scored re-exported
from .config import BenchConfig
from .inputs import (Attacks, CleanQuality, Models, NullSplits, Oracle, PromptBank, SpoofSetting, Theft,  # noqa: F401
                     UnitScorer, UnitTexts, UnrelatedKeys, prefix_tokens_to_detect)  # prefix_tokens_to_detect re-exported
from .metric import Metric, decisions
from .plan import (ALPHAS, Cell, Unit, _seed, attack_family, bench_registry, cell_kinds, derive_key,  # noqa: F401 - re-exported
                   derive_unrelated_key, metric_names, plan, resolved_params)
from .recorders import KLRecorder
from .results import done_cells, git_commit, remove_stale_parts, write_part

__all__ = ["Unit", "Cell", "plan", "RunContext", "run_cell", "run_unit", "run_bench", "bench_registry", "attack_family",
           "ALPHAS", "Scored", "keyed_scheme", "prefix_tokens_to_detect"]


def keyed_scheme(ctx: "RunContext", unit: Unit, key: WatermarkKey) -> Any:
    """``unit``'s scheme and params under ``key``, on the unit's backend (not cached here).

    Raises:
        ConfigError, RegistryError: as :class:`sketchwm.api.Watermarker`.
    """
    from ..api import Watermarker

    spec = {"scheme": {"name": unit.scheme_name, "params": json.loads(unit.scheme_params)}}
    return Watermarker(key, spec, backend=ctx.backend(unit.backend), registry=ctx.registry).scheme


class RunContext:
    """The run's wiring: its services, built once, and each unit's inputs, built once and handed to a
    cell kind by name (:meth:`inputs`). Cell kinds never see this object.

    Args:
        cfg: the validated config; registry: plugin registry (default: installed plugins, checked by
            :func:`bench_registry`).

    Attributes:
        cfg, registry; metrics: the run's :class:`Metric` objects; kinds: {name: :class:`CellKind`};
        commit: the checkout's git commit; prompt_bank: :class:`PromptBank`; models: :class:`Models`;
        oracle: :class:`Oracle`.
    """

    def __init__(self, cfg: BenchConfig, registry: Any = None):
        self.cfg = cfg
        self.registry = bench_registry(registry)
        self.metrics: list[Metric] = [self.registry.create("metric", n) for n in metric_names(cfg, self.registry)]
        self.kinds: dict[str, CellKind] = {k.name: k for k in cell_kinds(self.registry)}
        self.commit = git_commit()
        self.prompt_bank = PromptBank(cfg)
        self.models = Models(cfg, self.registry, self.prompt_bank)
        self.oracle = Oracle(cfg.oracle)
        self._cache: dict[Any, Any] = {}
        self._inputs: dict[str, Callable[[Unit], Any]] = {
            "texts": self.texts, "nulls": self.nulls, "scorer": self.scorer, "quality": self.quality,
            "attacks": self.attacks, "theft": self.theft, "human": lambda unit: self.prompt_bank.human(),
            "unrelated": self.unrelated, "spoofing": self.spoofing, "scheme": self.scheme, "vocab": self.vocab,
            "path": self.path, "soundness": self.soundness}

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

    # ------------------------------------------------------------------ the run's services by index
    def backend(self, i: int) -> Any:
        """Backend ``i`` of the config (:meth:`Models.backend`)."""
        return self.models.backend(i)

    def prompts(self, p: int) -> dict[str, list[str]]:
        """Prompt set ``p``'s splits (:meth:`PromptBank.split`)."""
        return self.prompt_bank.split(p)

    def key(self, i: int) -> WatermarkKey:
        """Key ``i`` (see :func:`derive_key`)."""
        return self._get(("key", i), lambda: derive_key(self.cfg, i))

    def generate(self, b: int, length: int, prompts: Sequence[str], scheme: Any, seed: int, regime: int = 0,
                 observers: Sequence[TiltObserver] = ()) -> tuple[list[str], float]:
        """:meth:`Models.generate`."""
        return self.models.generate(b, length, prompts, scheme, seed, regime, observers)

    # ------------------------------------------------------------------ the unit's scheme
    def scheme(self, unit: Unit) -> Any:
        """The keyed scheme of ``unit`` on its backend's device."""
        return self._get(("scheme", unit), lambda: keyed_scheme(self, unit, self.key(unit.key)))

    def knob(self, unit: Unit) -> tuple[str, float, bool, str]:
        """The unit's strength knob: (Params field or "", its value or NaN, whether it is the scheme's default,
        which direction is stronger: "higher" or "lower")."""
        def build() -> tuple[str, float, bool, str]:
            cls = self.registry.get("scheme", unit.scheme_name)
            st = cls.strength
            v = st.value_of(cls.parse_params(json.loads(unit.scheme_params)))
            d = st.value_of(cls.parse_params(None))
            return st.field or "", float("nan") if v is None else v, v == d, st.stronger
        return self._get(("knob", unit), build)

    def resolved_params(self, unit: Unit) -> str:
        """The unit's scheme params as the scheme runs them (every default filled in), as sorted JSON:
        the ``scheme_params_resolved`` column, the params part of the cells' identity."""
        def build() -> str:
            cls = self.registry.get("scheme", unit.scheme_name)
            return json.dumps(resolved_params(cls, json.loads(unit.scheme_params)), sort_keys=True)
        return self._get(("resolved", unit), build)

    # ------------------------------------------------------------------ the units' inputs (cellkind.INPUTS)
    def scorer(self, unit: Unit) -> UnitScorer:
        return self._get(("scorer", unit), lambda: UnitScorer(self.scheme(unit), self.backend(unit.backend).encode,
                                                              self.cfg.tokens_step))

    def texts(self, unit: Unit) -> UnitTexts:
        def build() -> UnitTexts:
            prompts = self.prompts(unit.prompt_set)["eval"]
            rec = KLRecorder()
            wm, secs = self.models.generate(unit.backend, unit.length, prompts, self.scheme(unit),
                                            _seed(self.cfg.seed, "wm", unit), unit.regime, [rec] if self.cfg.kl else ())
            kl, per_text, sampled = rec.per_text(len(wm)) or (None, None, None)
            return UnitTexts(wm, prompts, secs, self.scorer(unit).score(wm), kl, per_text, sampled)
        return self._get(("texts", unit), build)

    def nulls(self, unit: Unit) -> NullSplits:
        def build() -> NullSplits:
            null = lambda split: self.models.null_texts(unit.backend, unit.length, unit.prompt_set, split, unit.regime)  # noqa: E731
            fpr_texts = null("null_fpr")
            return NullSplits(self.scorer(unit).score(null("null_cal")), self.scorer(unit).score(fpr_texts), fpr_texts)
        return self._get(("nulls", unit), build)

    def quality(self, unit: Unit) -> CleanQuality:
        def build() -> CleanQuality:
            ppl = self.oracle.ppl(self.texts(unit).texts, ("wm", unit))
            null_ppl = None if ppl is None else self.oracle.ppl(
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
            prompts = self.prompts(unit.prompt_set)["eval"][: spec.prompts]
            rep = [p for p in prompts for _ in range(spec.samples)]  # (prompts·samples) prompts, sample-major
            texts, _ = self.models.generate(unit.backend, unit.length, rep, self.scheme(unit) if watermarked else None,
                                            _seed(self.cfg.seed, *tag), regime=unit.regime)
            ids = self.backend(unit.backend).encode(texts)
            return [ids[i * spec.samples:(i + 1) * spec.samples] for i in range(len(prompts))]
        return self._get(tag, build)

    def attacks(self, unit: Unit) -> Attacks:
        return self._get(("attacks", unit.backend),
                         lambda: Attacks(self.registry, self.backend(unit.backend), self.cfg.similarity))

    def theft(self, unit: Unit) -> Theft:
        def build() -> Theft:
            be = self.backend(unit.backend)
            train = self.models.generate(unit.backend, unit.length, self.prompts(unit.prompt_set)["steal_train"],
                                         self.scheme(unit), _seed(self.cfg.seed, "steal", unit), unit.regime)[0]
            ref = self.models.null_texts(unit.backend, unit.length, unit.prompt_set, "steal_ref", unit.regime)
            return Theft(train, ref, lambda tr, rf: self.registry.create(
                "attack", "steal-scrub", None, backend=be, watermarked_texts=tr, reference_texts=rf).stealer)
        return self._get(("theft", unit), build)

    def unrelated(self, unit: Unit) -> UnrelatedKeys:
        count = self.cfg.stealing.unrelated_keys if self.cfg.stealing else 0
        return UnrelatedKeys(count, lambda j: self._get(("unrelated-scheme", unit, j), lambda: keyed_scheme(
            self, unit, derive_unrelated_key(self.cfg, unit.key, j))))

    def spoofing(self, unit: Unit) -> SpoofSetting:
        return SpoofSetting(self.backend(unit.backend), self.prompts(unit.prompt_set)["null_fpr"],
                            self.models.sampler_config(unit.backend, unit.length, unit.regime))

    def vocab(self, unit: Unit) -> np.ndarray:
        be = self.backend(unit.backend)
        banned = np.array(sorted(set(getattr(be, "banned_token_ids", ()) or ()) | {be.mask_token_id}), dtype=np.int64)
        return np.setdiff1d(np.arange(be.vocab_size), banned)

    def path(self, unit: Unit) -> dict[str, Any]:
        from .theory import sampling_path

        spec = self.cfg.theory
        return self._get(("theory-path", unit), lambda: sampling_path(
            self.backend(unit.backend), self.scheme(unit), self.prompts(unit.prompt_set)["eval"][: spec.n_texts],
            self.models.sampler_config(unit.backend, unit.length), self.cfg.batch_size, spec.fisher_scales,
            _seed(self.cfg.seed, "theory-path", unit)))

    def soundness(self, unit: Unit) -> np.ndarray:
        from .theory import soundness_pvalues

        return self._get(("theory-sound", unit), lambda: soundness_pvalues(
            self.backend(unit.backend).encode, unit.length, lambda key: keyed_scheme(self, unit, key),
            self.cfg.key_seed, self.cfg.seed, self.cfg.theory))


#: the columns of a results row after the cell's head, in order
COLUMNS = ["row_type", "text_index", "n_tokens", "score", "p_value", "detected", "tokens_to_detect", "ppl", "kl",
           "kl_sampled", "diversity", "distinct_texts", "first_token_match", "similarity", "edit_fraction",
           "unrelated_flagged", "metric", "value", "unit", "higher_is_better", "task", "deterministic", "n", "note"]


def _head(ctx: RunContext, cell: Cell, kind: CellKind) -> dict[str, Any]:
    """The columns every row of ``cell`` shares: what the cell is, its unit, the run and the code."""
    unit = cell.unit
    knob = ctx.knob(unit)
    return {
        "run": ctx.cfg.name, "cell_hash": cell.hash, "cell_kind": cell.kind, "scheme": unit.scheme,
        "scheme_name": unit.scheme_name, "scheme_params": unit.scheme_params, "scheme_version": unit.scheme_version,
        "scheme_params_resolved": ctx.resolved_params(unit), "curve": unit.curve or unit.scheme,
        "regime": ctx.cfg.regime_list[unit.regime].name, "regime_index": unit.regime, "knob": knob[0],
        "knob_value": knob[1], "default_strength": knob[2], "knob_stronger": knob[3], "tokens_step": ctx.cfg.tokens_step,
        "min_tokens": ctx.scorer(unit).min_tokens if kind.evidence == "texts" else None,
        "backend": ctx.cfg.backends[unit.backend].name,
        "model_id": str(getattr(ctx.backend(unit.backend), "model_id", "")), "length": unit.length,
        "prompt_set": ctx.cfg.prompt_sets[unit.prompt_set].name, "key_index": unit.key,
        "key_fingerprint": ctx.key(unit.key).fingerprint, "attack": cell.attack, "attack_family": attack_family(cell.attack),
        "attack_params": cell.attack_params, "strength": cell.strength, "train_n": cell.train_n, "seed": ctx.cfg.seed,
        "package_version": __version__, "git_commit": ctx.commit,
    }


def run_cell(ctx: RunContext, cell: Cell) -> list[dict[str, Any]]:
    """All rows of one cell: its texts' rows (with the one rule's decision), the kind's further rows
    (e.g. a clean cell's null splits) and one summary row per metric that applies to the kind.

    Raises:
        RegistryError: the cell's kind is not registered.
    """
    t0 = time.perf_counter()
    kind = ctx.kind(cell.kind)
    ev = kind.run(cell, **ctx.inputs(kind, cell.unit))
    sc, columns = ev.texts, dict(ev.columns)
    if len(sc.scores):
        flags, _ = decisions(ev.data, sc.scores, 0.01, sc.analytic[0.01], sc.n_tokens)  # the one rule, per length bin
        columns["detected"] = None if flags is None else flags.astype(np.float64)
    rows = text_rows("text", sc, columns) + ev.rows
    for m in ctx.metrics:
        if cell.kind not in m.kinds:
            continue
        v = m.compute(ev.data)
        if v is None:
            continue
        rows.append({"row_type": "summary", "metric": m.name, "value": float(v.value), "unit": m.unit,
                     "higher_is_better": m.higher_is_better, "task": m.task, "deterministic": m.deterministic,
                     "n": int(v.n), "note": v.note})
    head = _head(ctx, cell, kind)
    wall = time.perf_counter() - t0
    return [{**head, "row_index": j, **{c: r.get(c) for c in COLUMNS}, "wall_time_s": wall} for j, r in enumerate(rows)]


def run_unit(ctx: RunContext, cells: Sequence[Cell]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(cell hash, rows) for each cell, in order, sharing the unit's texts through ``ctx``."""
    for cell in cells:
        yield cell.hash, run_cell(ctx, cell)


def _ray_unit(cfg_json: str, cells: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Ray task body: a fresh context (installed plugins) runs one unit's cells."""
    cfg = BenchConfig.model_validate_json(cfg_json)
    ctx = RunContext(cfg)
    cs = [Cell(**{**c, "unit": Unit(**c["unit"])}) for c in cells]
    return list(run_unit(ctx, cs))


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
            ctx = RunContext(cfg, registry)
            for _, cells in todo:
                for h, rows in run_unit(ctx, cells):
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
