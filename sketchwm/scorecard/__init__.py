"""``sketchwm scorecard``: every promise of a scheme checked in one run, one pass/fail line each.

For one scheme spec (default: the shipped default) and a comparison set of baselines, the scorecard
measures forgery (word, pair, generation and adaptive thieves at N stolen texts, and the unrelated-key
rate), diversity for one key, power at equal KL, robustness to the standard edits, the per-key null on
both held-out human domains, speed ratios measured side by side, and the user loop
(:mod:`sketchwm.scorecard.promises` states each rule). It prints one line per promise::

    PASS  forgery: pair thief, paste-in, N=1000  0.010 [0.001, 0.036]  (n=200; need <= 0.050, bound <= 0.100)

and writes ``scorecard.json``, ``scorecard.parquet`` and ``scorecard.txt``. Two tiers
(:data:`sketchwm.scorecard.config.TIERS`): ``quick``, a regression guard that gates only on lines whose
small-n interval is decisive, and ``full``, the sizes the promises name. Every figure is measured on the
report split of the shipped prompts (``prompts-report``); tune on ``prompts-development``.

Example::

    from sketchwm.scorecard import ScorecardConfig, TIERS, run_scorecard
    card = run_scorecard(ScorecardConfig(tier=TIERS["quick"]), "runs/scorecard")
    print(card.text())
"""

from __future__ import annotations

from .config import KL_BUDGETS, ROBUSTNESS_EDITS, TIERS, ScorecardConfig, Tier
from .lines import Line, clopper_pearson, format_line, judge
from .run import PROMISES, Scorecard, bench_config, run_scorecard

__all__ = ["ScorecardConfig", "Tier", "TIERS", "KL_BUDGETS", "ROBUSTNESS_EDITS", "Line", "clopper_pearson", "format_line",
           "judge", "PROMISES", "Scorecard", "bench_config", "run_scorecard"]
