"""``sketchwm bench`` and ``sketchwm leaderboard``: one benchmark harness, one results format.

* :mod:`sketchwm.bench.config` — the grid configuration (YAML or JSON, pydantic, unknown fields rejected);
* :mod:`sketchwm.bench.runner` — the run context and the cell grid (local or Ray executor);
* :mod:`sketchwm.bench.results` — long-format Parquet part files, one per finished cell;
* :mod:`sketchwm.bench.metric` / :mod:`sketchwm.bench.builtin_metrics` — metrics as plugins
  (hook ``sketchwm_register_metrics``);
* :mod:`sketchwm.bench.leaderboard` — Markdown, CSV pivots and an offline HTML page.

This package's ``__init__`` stays import-light: :mod:`sketchwm.registry` imports the metric base.
"""
