"""Hook specifications of sketchwm (pluggy project name ``"sketchwm"``).

Every component hook is a *registration* hook: each implementation returns a list of component
classes, and the registry concatenates the lists of all plugins (pluggy's default: a list of
results). One hook adds to the command line instead: :func:`sketchwm_register_commands`, through
which a plugin brings its own ``sketchwm`` sub-commands.
Built-in components are registered exactly like third-party ones, through the entry-point group
``sketchwm`` in ``pyproject.toml``::

    [project.entry-points.sketchwm]
    my-sketches = "my_package.my_module"

where ``my_module`` defines functions decorated with :data:`sketchwm.hookimpl`. Implementations
may take fewer arguments than their spec; arguments are only ever added, never removed.
"""

from __future__ import annotations

import pluggy

PROJECT = "sketchwm"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ---------------------------------------------------------------- watermark building blocks
@hookspec
def sketchwm_register_sketches() -> list[type]:
    """Return :class:`sketchwm.components.Sketch` subclasses (e.g. Count-Sketch, paper Def. 2.3).

    Results of all plugins are concatenated; a name registered twice is an error.
    """


@hookspec
def sketchwm_register_scores() -> list[type]:
    """Return :class:`sketchwm.components.ScoreFunction` subclasses (e.g. the penalised score, eq. 2)."""


# ---------------------------------------------------------------- models
@hookspec
def sketchwm_register_backends() -> list[type]:
    """Return :class:`sketchwm.components.DLMBackend` subclasses (masked diffusion LMs)."""


# ---------------------------------------------------------------- watermarks
@hookspec
def sketchwm_register_schemes() -> list[type]:
    """Return :class:`sketchwm.components.WatermarkScheme` subclasses (the sketch watermark, baselines)."""


# ---------------------------------------------------------------- sampling
@hookspec
def sketchwm_register_remasking_rules() -> list[type]:
    """Return :class:`sketchwm.remasking.RemaskingRule` subclasses: which masked positions the sampler
    commits at each step (LLaDA's ``low_confidence`` and ``random``, Dream's ``entropy``, ...).

    The sampler setting ``remasking`` names one of them. Results of all plugins are concatenated;
    a name registered twice is an error. A watermark scheme that steers the order
    (:meth:`sketchwm.components.WatermarkScheme.steers_order`) ranks the rule's candidates with its
    own priority, so every registered rule works with order-steering schemes.
    """


# ---------------------------------------------------------------- adversarial benchmark
@hookspec
def sketchwm_register_attacks() -> list[type]:
    """Return :class:`sketchwm.components.Attack` subclasses (substitution, paraphrase, stealing, ...)."""


# ---------------------------------------------------------------- benchmark metrics
@hookspec
def sketchwm_register_metrics() -> list[type]:
    """Return :class:`sketchwm.bench.metric.Metric` subclasses (TPR at a FPR, ROC AUC, perplexity ratio, ...).

    Each declares its ``unit``, ``higher_is_better`` and the leaderboard ``task`` it belongs to;
    ``sketchwm bench run`` computes every registered metric (or those the config names) per cell.
    """


@hookspec
def sketchwm_register_cell_kinds() -> list[type]:
    """Return :class:`sketchwm.bench.cellkind.CellKind` subclasses: the kinds of benchmark cell (``clean``,
    ``attack``, ``spoof``, ``scrub``, the theory checks, ...).

    Each declares which cells a unit of the grid gets (``plan``), the inputs it reads (``needs``) and
    how it turns them into evidence for the metrics (``run``); ``sketchwm bench run`` plans and runs
    every registered kind. Results of all plugins are concatenated; a name registered twice is an error.
    """


# ---------------------------------------------------------------- command line
@hookspec
def sketchwm_register_commands(subparsers, parents) -> None:
    """Add sub-commands to the ``sketchwm`` command line (the argparse form of simonw/llm's ``register_commands``).

    Args:
        subparsers: the ``sketchwm`` parser's sub-parsers action. Add a command with
            ``p = subparsers.add_parser(NAME, parents=parents, help=ONE_LINE)``, its options with
            ``p.add_argument(...)`` (types from :mod:`sketchwm.cli`: ``positive_int``, ``probability``,
            ...; ``add_config_args`` for ``--config/--scheme/--backend``) and its handler with
            ``p.set_defaults(func=handler)``, where ``handler(args: argparse.Namespace) -> int``
            returns the exit status. The CLI's error path applies: a :class:`sketchwm.errors.SketchwmError`
            raised by the handler prints one line and exits 2.
        parents: argparse parent parsers with the options every sub-command shares (``--debug``);
            pass them to every ``add_parser`` call, nested ones included.

    Returns nothing. ``sketchwm --help`` lists plugin commands from a cached listing
    (:func:`sketchwm.plugin_index.describe_commands`); running ``sketchwm NAME`` imports only the
    plugin that adds NAME, so keep the handler's heavy imports (torch, models) inside the handler.
    A name already taken (by the core or another plugin) is an error.
    """
