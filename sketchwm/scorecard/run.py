"""Run a scorecard: the benchmark cells it needs, then every promise, then one line per promise.

The power, robustness and forgery lines come from a benchmark grid run through the harness
(:mod:`sketchwm.bench`): the scheme under test and the baselines swept over their strength knobs in the
tier's regimes, clean and edited texts scored by the one decision rule (conformal 1%-FPR threshold), and
the thieves of :class:`sketchwm.bench.config.StealingSpec` on the scheme's default setting. Its rows are
Parquet parts under ``<out>/bench`` (a rerun into the same folder skips finished cells). Diversity,
the null, speed and the user loop are measured with the same services
(:class:`sketchwm.bench.inputs.Services`: same backend, keys, schemes, prompts).

Outputs in ``<out>``: ``scorecard.json`` (config, lines, timing), ``scorecard.parquet`` (the lines as a
long table) and ``scorecard.txt`` (the printed lines). A run of some promises (``only``) into a folder
that holds a scorecard of the same scheme spec and tier keeps that scorecard's lines of the other
promises, each marked with the version and commit that measured it (:meth:`Scorecard.keep_earlier`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd

from .config import ROBUSTNESS_EDITS, ScorecardConfig
from ..errors import InputError
from .lines import Line, format_line, judge
from . import promises as P

__all__ = ["bench_config", "run_scorecard", "Scorecard", "PROMISES", "promise_of"]

#: The promises in printed order: (name, function).
PROMISES: tuple[tuple[str, Callable[[P.Run], list[Line]]], ...] = (
    ("forgery", P.forgery), ("diversity", P.diversity), ("power", P.power), ("robustness", P.robustness),
    ("null", P.null), ("speed", P.speed), ("user-loop", P.user_loop),
)


def _strengths(registry: Any, name: str, params: dict[str, Any], points: int) -> list[float] | None:
    """The strengths to sweep: None (the declared grid) for ``points`` 0, else the default and the ``points`` − 1
    grid settings just below it (weaker), topped up from above where the grid has too few below, in grid order;
    None for a scheme without a knob. Weaker settings first because the power line's KL budgets lie below
    most schemes' defaults, and the robustness line reads the default itself."""
    cls = registry.get("scheme", name)
    st = cls.strength
    if st.field is None or points == 0:
        return None
    d = st.value_of(cls.parse_params(params))
    grid = sorted(set(st.grid) | {d})
    i = grid.index(d)
    lo = max(0, i - (points - 1))
    return [float(v) for v in grid[lo:max(i + 1, lo + points)]]


def members(params: dict[str, Any]) -> int:
    """The member count an adaptive thief assumes from a scheme's full params (defaults included):
    ``members`` where the params or a nested channel's give one, else 1."""
    stack: list[Any] = [params]
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            if isinstance(d.get("members"), int):
                return max(1, int(d["members"]))
            stack.extend(d.values())
    return 1


def bench_config(cfg: ScorecardConfig, registry: Any) -> Any:
    """The :class:`sketchwm.bench.config.BenchConfig` of the scorecard's benchmark cells (module doc)."""
    from ..bench.config import AttackEntry, BenchConfig, PromptSet, SchemeEntry, StealingSpec, TextThiefSpec
    from ..bench.plan import bench_registry

    reg = bench_registry(registry)
    t = cfg.tier
    resolved = lambda s: (s.name, reg.get("scheme", s.name).parse_params(s.params).model_dump(mode="json"))  # noqa: E731
    # a baseline identical to the scheme under test would share its cells (same content hash): left out
    entries = [(cfg.scheme, cfg.scheme_label())] + [(b, b.name) for b in cfg.comparison() if resolved(b) != resolved(cfg.scheme)]
    schemes = [SchemeEntry(name=s.name, label=label, params=dict(s.params), sweep=True,
                           strengths=_strengths(reg, s.name, dict(s.params), t.sweep_points)) for s, label in entries]
    k = cfg.adaptive_clusters or members(reg.get("scheme", cfg.scheme.name).parse_params(cfg.scheme.params).model_dump())
    thieves = ["spoof-insert", "spoof-substitute", "spoof-pair-insert", "spoof-pair-substitute",
               TextThiefSpec(name="spoof-adaptive", params={"clusters": k})]
    regimes = list(dict.fromkeys([*t.power_regimes, *t.regimes]))
    return BenchConfig(
        name=f"scorecard-{t.name}", schemes=schemes, backends=[cfg.backend], lengths=[t.length],
        prompt_sets=[PromptSet(name="report", source=cfg.prompts, n=t.n_power)], keys=1, key_seed=cfg.key_seed,
        sampler={"steps": t.steps}, regimes=regimes, sweep=True, n_null_cal=t.n_null_cal, n_null_fpr=t.n_null_fpr,
        attacks=[AttackEntry(name=a, strengths=[s]) for a, s in ROBUSTNESS_EDITS] if t.robustness else [],
        stealing=StealingSpec(train_n=t.steal_n, spoof_n=t.spoof_n, delta=4.0, text_attacks=thieves,
                              unrelated_keys=t.unrelated_keys, budget=0.2, human=cfg.human, human_n=t.forge_n),
        oracle=False, similarity=False, tokens_step=0, kl=True, seed=cfg.seed, batch_size=cfg.batch_size)


class Scorecard:
    """The outcome: ``lines`` in printed order, ``seconds`` per promise, the config, and the exit status
    (:attr:`passed`: no FAIL line about the scheme under test; baselines' lines never fail the run)."""

    def __init__(self, cfg: ScorecardConfig, lines: list[Line], seconds: dict[str, float]):
        self.cfg, self.lines, self.seconds = cfg, lines, seconds

    @property
    def passed(self) -> bool:
        return not any(ln.status == "FAIL" and ln.detail.get("subject", self.cfg.scheme_label()) == self.cfg.scheme_label()
                       for ln in self.lines)

    def text(self) -> str:
        """One line per promise (:func:`sketchwm.scorecard.lines.format_line`); baselines' lines marked."""
        me = self.cfg.scheme_label()
        out = []
        for ln in self.lines:
            s = format_line(ln)
            subject = ln.detail.get("subject", me)
            out.append(s if subject == me else s.replace("  ", f"  [{subject}] ", 1))
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        from .. import __version__
        from ..bench.results import git_commit

        return {"scheme": self.cfg.scheme.model_dump(mode="json"), "tier": self.cfg.tier.name,
                "config": self.cfg.model_dump(mode="json"), "passed": self.passed, "seconds": self.seconds,
                "package_version": __version__, "git_commit": git_commit(),
                "lines": [ln.as_dict() for ln in self.lines]}

    def keep_earlier(self, path: Path, ran: set[str]) -> int:
        """Keep the lines of the promises this run did not run (``ran``) from an earlier scorecard of
        the same scheme spec and tier at ``path``, in :data:`PROMISES` order, each marked in its
        ``detail`` with the package version and commit that measured it (``earlier_run``). Returns the
        number of lines kept: 0 when there is no such file, or it is of another scheme or tier (then
        nothing is mixed).

        Raises:
            InputError: ``path`` exists but is not a scorecard JSON.
        """
        if not path.exists():
            return 0
        try:
            old = json.loads(path.read_text())
            same = old["scheme"] == self.cfg.scheme.model_dump(mode="json") and old["tier"] == self.cfg.tier.name
            old_lines = old["lines"]
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: not a scorecard JSON ({e}); move it away or choose another --out") from None
        if not same:
            return 0
        run_of = {"package_version": old.get("package_version"), "git_commit": old.get("git_commit")}
        kept: dict[str, list[Line]] = {}
        for d in old_lines:
            name = promise_of(d["promise"])
            if name is not None and name not in ran:
                ln = Line.from_dict(d)
                ln.detail.setdefault("earlier_run", run_of)
                kept.setdefault(name, []).append(ln)
        mine: dict[str, list[Line]] = {}
        for ln in self.lines:
            mine.setdefault(promise_of(ln.promise) or "", []).append(ln)
        self.lines = [ln for name, _fn in PROMISES for ln in mine.pop(name, []) + kept.get(name, [])] + \
            [ln for rest in mine.values() for ln in rest]
        for name in kept:  # the earlier run's seconds for the promise, when it recorded them
            self.seconds.setdefault(f"{name} (earlier run)", (old.get("seconds") or {}).get(name))
        return sum(len(v) for v in kept.values())

    def write(self, out: Path) -> list[Path]:
        """``scorecard.json``, ``scorecard.parquet`` and ``scorecard.txt`` in ``out`` (atomic writes)."""
        from ..io import atomic_write

        out.mkdir(parents=True, exist_ok=True)
        data = self.to_json()
        paths = [out / "scorecard.json", out / "scorecard.txt", out / "scorecard.parquet"]
        with atomic_write(paths[0]) as fh:
            fh.write(json.dumps(data, indent=1, default=str) + "\n")
        with atomic_write(paths[1]) as fh:
            fh.write(self.text() + "\n")
        rows = [{**{k: v for k, v in ln.as_dict().items() if k != "detail"}, "detail": json.dumps(ln.detail, default=str),
                 "scheme": self.cfg.scheme.name, "tier": self.cfg.tier.name} for ln in self.lines]
        pd.DataFrame(rows).to_parquet(paths[2], index=False)
        return paths


def promise_of(line_promise: str) -> str | None:
    """The :data:`PROMISES` name a printed line belongs to (``"forgery: word thief..."`` → ``forgery``,
    ``"user loop: ..."`` → ``user-loop``), or None."""
    head = line_promise.split(":", 1)[0].split(",", 1)[0].strip().replace(" ", "-")
    return head if head in {name for name, _fn in PROMISES} else None


def _wanted(cfg: ScorecardConfig, cell: Any, regime: str, is_default: bool, only: set[str] | None) -> bool:
    """The cells a scorecard runs: clean texts in the power regimes (every setting: the power line's curves),
    edited ones where robustness runs, the thieves on the scheme's default setting in the first power regime
    where forgery runs; nothing else (no scrub, no theory)."""
    t = cfg.tier
    runs = lambda name: only is None or name in only  # noqa: E731
    if cell.kind == "clean":
        return regime in t.power_regimes and (runs("power") or runs("robustness") or runs("forgery"))
    if cell.kind == "attack":
        return regime in t.power_regimes and runs("robustness")
    if cell.kind == "spoof":
        return runs("forgery") and cell.unit.curve == cfg.scheme_label() and is_default and regime == t.power_regimes[0]
    return False


def run_scorecard(cfg: ScorecardConfig, out: str | Path, *, registry: Any = None, only: set[str] | None = None,
                  log: Callable[[str], None] | None = None) -> Scorecard:
    """Run the scorecard into ``out`` (module doc) and return it (also written there).

    Args:
        cfg: the run; out: results folder; registry: plugins (default: installed + built-in metrics);
        only: promise names to run (default all of :data:`PROMISES`); log: progress messages (e.g. ``print``).

    Raises:
        ConfigError, RegistryError: bad scheme, baseline or backend names or params.
    """
    from ..bench.inputs import Services
    from ..bench.plan import bench_registry, plan
    from ..bench.results import done_cells, read_results, write_part
    from ..bench.runner import run_cells

    log = log or (lambda _m: None)
    out = Path(out)
    reg = bench_registry(registry)
    bcfg = bench_config(cfg, reg)
    units = plan(bcfg, reg)
    services = Services.build(bcfg, reg)
    knob = services.schemes.knob
    regimes = [r.name for r in bcfg.regime_list]
    defaults: dict[tuple[str, str], Any] = {}
    for unit, _cells in units:
        if knob(unit)[2] or not knob(unit)[0]:
            defaults.setdefault((unit.curve, regimes[unit.regime]), unit)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    bench_dir = out / "bench"
    done = done_cells(bench_dir)
    if only and ("power" in only) and "diversity" not in only:
        only = {*only, "diversity"}  # the power line compares with baselines that keep their diversity
    todo = [c for u, cells in units for c in cells
            if _wanted(cfg, c, regimes[u.regime], defaults.get((u.curve, regimes[u.regime])) == u, only)]
    hashes = [c.hash for c in todo]

    def pending() -> Iterator[Any]:
        """The cells not yet done, each logged as the runner reaches it."""
        for i, cell in enumerate(todo):
            if cell.hash not in done:
                log(f"bench cell {i + 1}/{len(todo)}: {cell.unit.scheme} {regimes[cell.unit.regime]} {cell.kind} {cell.attack}")
                yield cell

    for h, rows in run_cells(services, pending()):
        write_part(bench_dir, h, rows)
    seconds["bench"] = time.perf_counter() - t0
    df = read_results(bench_dir) if hashes else pd.DataFrame()
    df = df[df["cell_hash"].isin(set(hashes))] if len(df) else df
    run = P.Run(cfg, services.prompts, services.models, services.schemes, tuple(regimes), defaults, df)
    lines: list[Line] = []
    for name, fn in PROMISES:
        if only is not None and name not in only:
            continue
        t1 = time.perf_counter()
        log(f"promise {name}")
        lines += [judge(ln, cfg.tier.decisive_only) for ln in fn(run)]
        seconds[name] = time.perf_counter() - t1
    seconds["total"] = time.perf_counter() - t0
    card = Scorecard(cfg, lines, seconds)
    if only is not None:
        card.keep_earlier(out / "scorecard.json", only)
    card.write(out)
    return card
