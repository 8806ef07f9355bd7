"""The README's third-party sketch (``dense-gaussian``, registered as a plugin, not installed) on the
smoke bench: TPR at 1% FPR against ROC-AUC per key, clean cells.

The config is ``benchmarks/configs/smoke.yaml`` (tiny code-built model, 32 tokens, 16 prompts, two
keys, 99 calibration and 40 report null texts) with the one scheme ``global-sketch`` on the
``dense-gaussian`` sketch and no attacks. A sketch that declares no count-sketch geometry has no
analytic τ_α for the penalised score (eq. 19); its decisions use the calibrated τ_N and the
key-randomised Chernoff p-value. The example is read from the first Markdown file (README.md, then
docs/*.md) that shows ``# my_pkg/my_sketch.py``.

    python benchmarks/third_party_sketch.py --out runs/dense-gaussian
"""

from __future__ import annotations

import argparse
import re
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def example_plugin() -> types.ModuleType:
    """The README's example sketch module, executed as written."""
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if not md.exists():
            continue
        code = re.search(r"```python\n(# my_pkg/my_sketch.py\n.*?)```", md.read_text(encoding="utf-8"), re.S)
        if code:
            mod = types.ModuleType("my_pkg_my_sketch")
            exec(compile(code.group(1), f"{md.name}:my_pkg/my_sketch.py", "exec"), mod.__dict__)  # noqa: S102
            return mod
    raise SystemExit("no Markdown file shows my_pkg/my_sketch.py")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="run directory (results are resumed from it)")
    args = ap.parse_args(argv)
    import yaml

    from sketchwm.bench.config import BenchConfig
    from sketchwm.bench.results import read_results
    from sketchwm.bench.runner import bench_registry, run_bench
    from sketchwm.testing import plugin_registry

    cfg = yaml.safe_load((ROOT / "benchmarks" / "configs" / "smoke.yaml").read_text())
    cfg.update(name="smoke-dense-gaussian", attacks=[], schemes=[{"name": "global-sketch", "params": {
        "prior": {"source": "uniform"}, "sketch": {"name": "dense-gaussian", "params": {"D": 256}}}}])
    cfg.pop("stealing", None)
    run_bench(BenchConfig.model_validate(cfg), Path(args.out), registry=bench_registry(plugin_registry(example_plugin())),
              progress=False)
    df = read_results(args.out)
    m = df[(df.row_type == "summary") & df.metric.isin(["tpr@1%fpr", "roc-auc", "fpr@1%", "tpr-analytic@1%"])]
    print(m.pivot_table(index="key_index", columns="metric", values="value").to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
