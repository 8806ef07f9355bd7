"""Generation time of each scheme relative to the unwatermarked sampler, measured side by side.

For every registered scheme (or ``--schemes``), on the default DLM with its shipped sampler
(random remasking), the same prompts and seed: seconds to generate ``--batch`` texts of
``--gen-length`` tokens with the scheme, divided by the seconds of the unwatermarked sampler in the
same repeat (interleaved, so machine noise cancels; the median ratio over ``--repeats`` is printed).
Schemes that declare ``reads = MarginalReads.sampled()`` also run forced to read every masked row
(``MarginalReads.masked()``), which shows what the declaration saves in
:class:`sketchwm.engine.MaskedDiffusionSampler` (the LM head runs on the K sampled rows instead of
all masked rows). The other schemes (the global sketch, red-green-dlm) also run with the reference
:class:`sketchwm.marginal_sources.FullCanvasMarginals` (the LM head on all P+G positions, then the rows picked),
which shows what the exact packed :class:`sketchwm.marginal_sources.MarginalSource` saves (LM head on the
declared rows only, packed (B, R, V), the tilt applied to the K sampled rows).

Usage: python benchmarks/perf_row_path.py [--schemes unigram,global-sketch] [--repeats 3]
Last line: one JSON object {scheme: median ratio to unwatermarked}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from sketchwm.bench.seeds import bench_key
from sketchwm.components import MarginalReads
from sketchwm.data import load
from sketchwm.engine import FullCanvasMarginals, MaskedDiffusionSampler
from sketchwm.registry import get_registry


def _time(backend, cfg: dict, scheme, prompts: list[str], seed: int, source=None) -> float:
    t0 = time.perf_counter()
    MaskedDiffusionSampler(backend, cfg, scheme, marginal_source=source).generate(prompts, torch.Generator().manual_seed(seed))
    return time.perf_counter() - t0


def _reading_every_masked_row(scheme):
    """The scheme re-typed to declare ``MarginalReads.masked()``."""
    scheme.__class__ = type(f"{type(scheme).__name__}ReadsMasked", (type(scheme),), {"reads": MarginalReads.masked()})
    return scheme


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemes", default="", help="comma-separated (default: every registered scheme)")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    reg = get_registry()
    backend = reg.create("backend", "default")
    key = bench_key("perf-row-path", "key", 0)
    cfg = {"gen_length": args.gen_length}
    prompts = list(load("prompts"))[: args.batch]
    variants: list[tuple[str, str, str]] = []  # (label, scheme, variant: "" | "masked reads" | "full canvas")
    for name in [s for s in args.schemes.split(",") if s] or reg.names("scheme"):
        variants.append((name, name, ""))
        reads = reg.create("scheme", name, {}, key, backend.vocab_size).reads
        if reads == MarginalReads.sampled():
            variants.append((f"{name} (every masked row read)", name, "masked reads"))
        else:
            variants.append((f"{name} (full-canvas LM head)", name, "full canvas"))
    _time(backend, cfg, None, prompts[:2], 0)  # warm-up
    ratios: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    base_s: list[float] = []
    for rep in range(args.repeats):
        for label, name, variant in variants:
            scheme = reg.create("scheme", name, {}, key, backend.vocab_size)
            if variant == "masked reads":
                _reading_every_masked_row(scheme)
            source = FullCanvasMarginals if variant == "full canvas" else None
            base = _time(backend, cfg, None, prompts, rep)
            ratios[label].append(_time(backend, cfg, scheme, prompts, rep, source) / base)
            base_s.append(base)
    print(f"unwatermarked: median {statistics.median(base_s):.2f} s per {args.batch} texts of {args.gen_length} tokens")
    print(f"{'scheme':42s}{'time / unwatermarked':>22s}")
    result = {}
    for label, r in ratios.items():
        result[label] = round(statistics.median(r), 3)
        print(f"{label:42s}{result[label]:>22.2f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
