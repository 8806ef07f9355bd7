"""Repetition flooding, key by key: TPR at the calibrated 1% threshold after ``flood-token``.

For each of ``--n-keys`` keys and each scheme configuration (``default`` = the shipped default,
:data:`sketchwm.config.DEFAULT_SCHEME` (``global-sketch-green``), ``sketch`` = ``global-sketch``
alone, ``count`` = the paper's plain count sketch with its key-randomised score, ``unigram``), generate ``--n-texts`` watermarked texts on the default model, flood them with one
repeated token (``flood-token``: after every 2nd word = strength 0.5, every 5th = 0.2; the token
choice is ``--choice``), and detect with sketchwm's one decision rule (:meth:`Detector.decide`:
score ≥ max(τ_N, τ_α), τ_N calibrated on ``--n-null`` unwatermarked samples of other prompts with
the same key). The unwatermarked samples are generated once and scored under every key.
The last line is one JSON object.

    python benchmarks/flood_per_key.py --n-keys 4 --n-texts 40 --n-null 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from sketchwm.bench.presets import BASE_PRESETS, preset_config

CONFIGS = {tag: preset_config(tag) for tag in BASE_PRESETS}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-keys", type=int, default=4)
    ap.add_argument("--n-texts", type=int, default=40)
    ap.add_argument("--n-null", type=int, default=200)
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.5, 0.2])
    ap.add_argument("--choice", default="stopword", help="flood-token choice: stopword | punct | frequent")
    ap.add_argument("--schemes", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from sketchwm.api import Watermarker
    from sketchwm.data import load_prompts
    from sketchwm.bench.seeds import bench_key
    from sketchwm.registry import get_registry

    t0 = time.perf_counter()
    prompts = load_prompts("prompts", args.n_texts)
    null_prompts = load_prompts("prompts", args.n_null, offset=args.n_texts)
    keys = [bench_key(str(args.seed), "key", i) for i in range(args.n_keys)]
    base = Watermarker(keys[0])
    null = base.generate(null_prompts, seed=args.seed + 1, watermark=False, batch_size=args.batch_size)
    flood = get_registry().create("attack", "flood-token", {"choice": args.choice})
    rows = []
    for tag in args.schemes:
        for ki, key in enumerate(keys):
            wm = Watermarker(key, CONFIGS[tag], backend=base.backend)
            cal = wm.calibrate(null.texts, alpha=0.01, source=f"{args.n_null} unwatermarked samples")
            det = wm.detector(cal, 0.01)
            marked = wm.generate(prompts, seed=args.seed, batch_size=args.batch_size)
            row = {"scheme": tag, "key": ki, "clean": float(det.detect(marked.texts).is_watermarked.double().mean())}
            for s in args.strengths:
                att = flood.apply(marked.texts, s, torch.Generator().manual_seed(args.seed))
                row[f"flood_{s:g}"] = float(det.detect(att.texts).is_watermarked.double().mean())
            rows.append(row)
            print(json.dumps(row), flush=True)
    cols = ["clean"] + [f"flood_{s:g}" for s in args.strengths]
    print(f"\nTPR at the calibrated 1% threshold (one rule), flood-token '{args.choice}', {args.n_texts} texts per key")
    print(f"{'scheme':10s} {'key':>3s} " + " ".join(f"{c:>10s}" for c in cols))
    for r in rows:
        print(f"{r['scheme']:10s} {r['key']:3d} " + " ".join(f"{r[c]:10.3f}" for c in cols))
    out = {"rows": rows, "n_texts": args.n_texts, "n_null": args.n_null, "choice": args.choice,
           "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
