"""The background null's margin β: how far the per-key mean of z moves between human text domains.

The default detector's p-value is the exact tail of the background null shifted up by β standard
deviations (``null_margin``; ``plugins/sketchwm_builtin/global_sketch/null.py``, module doc). The law's
tail is exact, so β has one job left: the background model's mean for a fixed key can be off on a
text domain it never saw. This script measures that offset where β is set, on the shipped
``human`` set (5 domains of the default model's test split, the corpus the token prior comes from):
for ``--n-keys`` keys (derived from ``--seed``), the mean z of each key over each domain's passages;
per domain, the standard deviation of those per-key means across keys; β = 3 × the largest.
It also prints, per domain, the worst key's fraction of passages with p <= 0.01 at β = 0 and at
the chosen β. The held-out domains (``benchmarks/null_per_key.py``) are for checking, not here.

    python benchmarks/null_margin.py --n-keys 40

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-keys", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0, help="keys are the harness's keys of key seed SEED (sketchwm.bench.seeds.bench_key)")
    ap.add_argument("--min-tokens", type=int, default=32)
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from sketchwm.data import load_records
    from sketchwm.default_model import MODEL_DIR
    from sketchwm.detection import pad_ids
    from sketchwm.bench.seeds import bench_key
    from sketchwm.registry import get_registry

    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    by_dom: dict[str, list[list[int]]] = {}
    for r in load_records("human"):
        ids = tok.encode(r["text"], add_special_tokens=False)
        if len(ids) >= args.min_tokens:
            by_dom.setdefault(r["source"], []).append(ids)
    batches = {d: pad_ids(x) for d, x in sorted(by_dom.items())}
    reg = get_registry()
    means = {d: [] for d in batches}
    fpr0 = {d: [] for d in batches}
    fpr = {d: [] for d in batches}
    for i in range(args.n_keys):
        key = bench_key(str(args.seed), "key", i)
        scheme = reg.create("scheme", "global-sketch", {}, key, len(tok))
        flat = reg.create("scheme", "global-sketch", {"null_margin": 0.0}, key, len(tok))
        for d, (ids, valid) in batches.items():
            s = scheme.score_ids(ids, valid)
            means[d].append(float(s.z.mean()))
            fpr[d].append(float((s.p_value <= 0.01).double().mean()))
            fpr0[d].append(float((flat.score_ids(ids, valid).p_value <= 0.01).double().mean()))
    sds = {d: float(np.std(m, ddof=1)) for d, m in means.items()}
    beta = 3 * max(sds.values())
    print(f"{'domain':12s} {'texts':>5s} {'mean z':>7s} {'sd of per-key mean z':>21s} "
          f"{'worst key P(p<=.01), beta=0':>28s} {'beta=0.5':>9s}")
    for d in batches:
        print(f"{d:12s} {batches[d][0].shape[0]:5d} {np.mean(means[d]):7.3f} {sds[d]:21.3f} "
              f"{100 * max(fpr0[d]):27.2f}% {100 * max(fpr[d]):8.2f}%")
    print(f"beta = 3 x max sd = {beta:.3f}  ({args.n_keys} keys)")
    out = {"n_keys": args.n_keys, "seed": args.seed, "sd_per_key_mean_z": sds, "beta": round(beta, 3),
           "worst_fpr01_beta0": {d: max(v) for d, v in fpr0.items()},
           "worst_fpr01_default": {d: max(v) for d, v in fpr.items()}, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
