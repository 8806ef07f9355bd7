"""``sketchwm bench`` and ``sketchwm leaderboard``: one benchmark harness, one results format.

* :mod:`sketchwm.bench.config` — the grid configuration (YAML or JSON, pydantic, unknown fields rejected);
* :mod:`sketchwm.bench.plan` — the units and cells a config asks for, each cell with its content hash;
* :mod:`sketchwm.bench.cellkind` / :mod:`sketchwm.bench.builtin_kinds` — cell kinds as plugins
  (hook ``sketchwm_register_cell_kinds``): what a kind plans, reads and runs;
* :mod:`sketchwm.bench.inputs` — the typed inputs cells read and the run's services that build them;
* :mod:`sketchwm.bench.runner` — the wiring and the run (local or Ray executor);
* :mod:`sketchwm.bench.results` — long-format Parquet part files, one per finished cell;
* :mod:`sketchwm.bench.metric` / :mod:`sketchwm.bench.builtin_metrics` — metrics as plugins
  (hook ``sketchwm_register_metrics``);
* :mod:`sketchwm.bench.leaderboard` — Markdown, CSV pivots and an offline HTML page.

This package's ``__init__`` stays import-light: :mod:`sketchwm.registry` imports the metric and
cell-kind bases.
"""
