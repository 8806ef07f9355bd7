"""Mean text length with and without the watermark on the stopping stand-in.

The stand-in (:mod:`sketchwm.testing.stopping`) is a tiny random masked LM whose EOS probability at
canvas position i is σ((i − k)/s): unwatermarked, the text (tokens before the first EOS) has a known
length law. For each sketch counting and key, 200 prompts are generated without and with the
watermark from the same seed (paired), and the script prints the mean lengths, their ratio, the
theoretical E[L] and the median z of the cut texts (≥ 16 tokens), then one JSON line.

    python benchmarks/eos_length.py [--n 200] [--keys 3] [--gen-length 48] [--stop-after 30]
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--keys", type=int, default=3)
    ap.add_argument("--gen-length", type=int, default=48)
    ap.add_argument("--stop-after", type=float, default=30.0)
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    from sketchwm.api import Watermarker
    from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key
    from sketchwm.testing.stopping import expected_length, stopping_backend

    G = args.gen_length
    be = stopping_backend(gen_length=G, stop_after=args.stop_after, softness=3.0)
    kw = dict(gen_length=G, block_length=G, steps=args.steps, batch_size=100)
    rows = []
    print(f"E[L] of the stand-in: {expected_length(G, args.stop_after, 3.0):.2f} tokens of {G}")
    print(f"{'counting':<9} {'key':>3} {'len base':>9} {'len wm':>8} {'ratio':>7} {'median z':>9}")
    for counting in ("presence", "count"):
        params: dict = {"prior": {"source": "uniform"}}
        if counting == "count":
            params["sketch"] = {"name": "count-sketch", "params": {"d": 4, "w": 256, "counting": "count"}}
        for k in range(args.keys):
            wm = Watermarker(bench_key(DEFAULT_KEY_SEED, "key", k), {"scheme": {"name": "global-sketch", "params": params}},
                             backend=be)
            prompts = ["the water"] * args.n
            base = wm.generate(prompts, seed=1, watermark=False, **kw)
            marked = wm.generate(prompts, seed=1, watermark=True, **kw)
            lb, lw = base.lengths.double().mean().item(), marked.lengths.double().mean().item()
            z = wm.detect_ids([x for x in marked.token_lists() if len(x) >= 16]).z.median().item()
            rows.append({"counting": counting, "key": k, "mean_length_base": lb, "mean_length_wm": lw,
                         "ratio": lw / lb, "median_z": z})
            print(f"{counting:<9} {k:>3} {lb:>9.2f} {lw:>8.2f} {lw / lb:>7.3f} {z:>9.2f}", flush=True)
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
