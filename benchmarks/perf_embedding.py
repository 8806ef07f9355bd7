"""Cost of one global-sketch embedding step relative to one softmax on the same logits, side by side.

One embedding step (seed paper Alg. 1, lines 5-9: expected sketch eq. 5 or its presence analogue,
residual, per-token score eq. 6, exponential tilt eq. 7, :meth:`GlobalSketchScheme.process_logits`)
on float32 logits of shape (1, 256, 126464) — LLaDA's vocabulary — at D = 1,024 (d = 4, w = 256),
against one softmax of the same tensor. Both sides follow the same allocation policy and neither
mutates the input:

* ``allocating``: softmax → ``torch.softmax(logits)`` (a fresh output); embedding → a fresh
  ``torch.empty_like(logits)`` output that ``process_logits`` writes logits + η_t a into
  (``Marginals.out``), as torch.softmax fills its fresh output.
* ``inplace``: both write into a preallocated output: softmax → ``aten._softmax.out``; embedding →
  ``process_logits`` with ``Marginals.out`` = that output.

Neither side reads or writes anything else of (B, G, V) size beyond its own working buffers.

The input is checked unchanged at the end. Schemes, all with a Zipf prior: the shipped default
(:data:`sketchwm.config.DEFAULT_SCHEME`; ``ratio``, ``ratio_inplace``), which on these logits (high
coverage) gives its green lists no share of the tilt and so skips their candidates; the same with
the handover off, its green lists tilting at every step (``ratio_green_every_step``: what a step costs
where the green lists take a share, e.g. at low temperature); ``global-sketch`` alone (presence
Count-Sketch, ``exclude_top`` 300; ``ratio_global_sketch``, ``ratio_global_sketch_inplace``); and the
paper's count sketch (``ratio_count``, ``ratio_count_inplace``). Contenders are interleaved and each ratio is the median
over repeats of per-repeat ratios, so machine noise cancels.

``--eos ID`` sets a stop token, so the step computes the expected sketch of the text cut at its
first EOS.

Usage: python benchmarks/perf_embedding.py [--device cpu|cuda] [--threads 2] [--repeats 9] [--eos ID]
Last line: {"ratio": ..., "ratio_inplace": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from sketchwm.bench.machine import machine
from sketchwm.bench.perf import add_common_args, builtin_registry, interleaved, median_ms, setup
from sketchwm.bench.seeds import bench_key
from sketchwm.components import DenoiseStep, Marginals
from sketchwm.config import DEFAULT_SCHEME


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=9)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=126464)
    ap.add_argument("--masked", type=float, default=0.75, help="fraction of masked positions")
    ap.add_argument("--eos", type=int, default=None,
                    help="stop token id: the step computes the expected sketch of the text cut at its first EOS")
    args = ap.parse_args(argv)
    dev = setup(args)
    B, G, V = args.batch, args.positions, args.vocab
    reg = builtin_registry()
    key = bench_key("perf-embedding", "key", 0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prior.npy"
        np.save(path, 1e9 / np.arange(1, V + 1) ** 1.1)
        prior = {"source": "file", "path": str(path)}
        with_prior = {"sketch": {"prior": prior}} if DEFAULT_SCHEME == "global-sketch-green" else {"prior": prior}
        schemes = {
            "default": reg.create("scheme", DEFAULT_SCHEME, with_prior, key, V, device=dev, registry=reg),
            "green_every_step": reg.create("scheme", DEFAULT_SCHEME, {**with_prior, "handover": False}, key, V,
                                           device=dev, registry=reg),
            "global_sketch": reg.create("scheme", "global-sketch", {"prior": prior}, key, V, device=dev, registry=reg),
            "count": reg.create("scheme", "global-sketch", {"prior": prior, "sketch": {"name": "count-sketch", "params": {
                "d": 4, "w": 256, "counting": "count"}}, "null": "key-randomised"}, key, V, device=dev, registry=reg),
        }
    for sch in schemes.values():
        sch.set_stop_token(args.eos)
    g = torch.Generator(device="cpu").manual_seed(0)
    logits = torch.randn(B, G, V, generator=g).to(dev)  # (B, G, V) float32, never modified
    before = logits.clone()
    masked = (torch.rand(B, G, generator=g) < args.masked).to(dev)  # (B, G)
    tokens = torch.randint(0, V, (B, G), generator=g).to(dev)
    out_soft = torch.empty_like(logits)
    out_emb = torch.empty_like(logits)

    def embed(scheme, out: torch.Tensor) -> torch.Tensor:
        step = DenoiseStep(10, 64, tokens, masked, Marginals.canvas(logits, masked, out=out),
                           torch.zeros(B, 1, dtype=torch.long, device=dev), torch.ones(B, 1, dtype=torch.bool, device=dev),
                           (0, G), V)
        return scheme.process_logits(step)

    fns = {"softmax": lambda: torch.softmax(logits, -1),
           "softmax_inplace": lambda: torch.ops.aten._softmax.out(logits, -1, False, out=out_soft)}
    for name, sch in schemes.items():
        fns[f"{name}"] = (lambda sch=sch: embed(sch, torch.empty_like(logits)))
        fns[f"{name}_inplace"] = (lambda sch=sch: embed(sch, out_emb))
    times = interleaved(fns, args.repeats, dev)
    assert torch.equal(logits, before), "the input logits were modified"

    def ratio(a: str, b: str) -> float:
        return round(statistics.median(x / y for x, y in zip(times[a], times[b])), 3)

    res = {"scheme": DEFAULT_SCHEME,
           "ratio": ratio("default", "softmax"), "ratio_inplace": ratio("default_inplace", "softmax_inplace"),
           "ratio_green_every_step": ratio("green_every_step", "softmax"),
           "ratio_global_sketch": ratio("global_sketch", "softmax"),
           "ratio_global_sketch_inplace": ratio("global_sketch_inplace", "softmax_inplace"),
           "ratio_count": ratio("count", "softmax"), "ratio_count_inplace": ratio("count_inplace", "softmax_inplace"),
           "median_ms": {k: median_ms(v) for k, v in times.items()}, "device": str(dev), "shape": [B, G, V],
           "D": schemes["global_sketch"].sketch.dim, "threads": torch.get_num_threads(), "repeats": args.repeats, "eos": args.eos,
           "better": {k: "lower" for k in ("ratio", "ratio_inplace", "ratio_green_every_step", "ratio_global_sketch",
                                           "ratio_count", "ratio_count_inplace")},
           "machine": machine()}
    for k, v in res["median_ms"].items():
        print(f"{k:>16}: {v:8.2f} ms")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
