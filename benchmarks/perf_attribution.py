"""Attribution of one text among 100,000 key-family members: bit-packed AND/popcount vs float GEMV.

Workload: one 256-token text, K = 100,000 members, D = 1,024 (default ``global-sketch``,
presence Count-Sketch d = 4, w = 256). The bank of directions is built and bit-packed untimed
(:class:`sketchwm.attribution.DirectionBank`, K·D/8 bytes); timed per repeat, side by side:

* ``bank``: the text's integer sketch H and the exact ⟨u^{(i)}, H⟩ of all K members plus the top 5;
* ``float``: the same from a float32 (K, D) matrix of the directions (400 MB; ``--no-float`` skips it),
  the reference that the bank must match (checked: identical top-1 and values).

Usage: python benchmarks/perf_attribution.py [--device cpu|cuda] [--threads 2] [--keys 100000]
Last line: {"ms": <bank, median>, "bank_mb": ..., ...}
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from sketchwm.attribution import DirectionBank, integer_sketch
from sketchwm.bench.perf import add_common_args, interleaved_medians, report, setup
from sketchwm.bench.seeds import bench_key
from sketchwm.registry import get_registry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=9)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=126464)
    ap.add_argument("--no-float", action="store_true", help="skip the float32 reference GEMV")
    args = ap.parse_args(argv)
    dev = setup(args)
    reg = get_registry()
    scheme = reg.create("scheme", "global-sketch", {"prior": {"source": "uniform"}},
                        bench_key("perf-attribution", "key", 0), args.vocab, registry=reg)  # bank on CPU
    t0 = time.perf_counter()
    bank = DirectionBank.build(scheme, args.keys)
    build_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, args.vocab, (1, args.length), generator=g)
    valid = torch.ones_like(ids, dtype=torch.bool)
    fns = {"bank": lambda: bank.top(integer_sketch(scheme, ids, valid)[0], 5)}
    if not args.no_float:
        U = torch.from_numpy(np.unpackbits(np.ascontiguousarray(bank.bits.T).view(np.uint8), axis=1, bitorder="little")).to(dev, torch.float32)
        U.mul_(2).sub_(1)  # (K, D) ±1
        Hf = integer_sketch(scheme, ids, valid)[0].to(dev, torch.float32)
        fns["float"] = lambda: torch.topk(U @ Hf, 5)
        ref = (U @ Hf).round().long().cpu().numpy()
        got = bank.inner(integer_sketch(scheme, ids, valid)[0])
        assert np.array_equal(got, ref) and int(np.argmax(got)) == int(np.argmax(ref)), "bank differs from float reference"
    ms = interleaved_medians(fns, args.repeats, dev)
    res = {"ms": ms["bank"], "bank_mb": round(bank.nbytes / 1e6, 2), "float_ms": ms.get("float"),
           "float_mb": None if args.no_float else round(args.keys * scheme.sketch.dim * 4 / 1e6, 1),
           "keys": args.keys, "D": scheme.sketch.dim, "length": args.length, "build_s": round(build_s, 1),
           "device": str(dev), "threads": torch.get_num_threads(), "repeats": args.repeats}
    report([f"{k:>6}: {ms[k]:8.2f} ms" for k in fns], res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
