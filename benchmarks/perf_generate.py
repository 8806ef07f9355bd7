"""Watermarked vs unwatermarked generation time on the default model, side by side, for every scheme.

Workload: ``--prompts`` 16 prompts × ``--gen-length`` 128 tokens on the shipped default
DLM with its sampler defaults, one batch. Per repeat, the unwatermarked sampler and each scheme are
run in turn with the same prompts and seed (interleaved, so the drifts of a shared machine hit all
alike); each scheme's ratio is the median over repeats of (its time / the unwatermarked time of the
same repeat). ``ratio`` is the default scheme's (:data:`sketchwm.config.DEFAULT_SCHEME`,
``global-sketch-green``), under the sampler's default ``marginal_refresh`` (``auto``: under random
remasking the global sketch's statistic over the masked rows is computed at the first step and
updated from the sampled rows afterwards; under the confidence rules every masked row is refreshed
when a block starts; ``refresh`` in the JSON says which schedule ran). ``--refresh`` times other schedules too; ``--remasking`` replaces the shipped
remasking rule (the per-regime tilt error and detection z are ``benchmarks/tilt_error.py``'s).

Detection z against the exact computation: on ``--z-prompts`` prompts (batches of ``--prompts``,
fixed seeds) the default scheme generates under the default schedule and under
``marginal_refresh = 1`` (every masked row at every step: the exact eq. 5), and the JSON gives
both mean z, their relative difference ``z_rel_diff`` and its standard error ``z_rel_diff_se``
(the two runs' texts diverge after the first differing draw, so they are compared as two samples).

``--profile`` also profiles one watermarked generation of the default scheme (cProfile, top
functions by cumulative time, and the torch operator table) and prints both before the JSON.

Usage: python benchmarks/perf_generate.py [--device cpu|cuda] [--threads 2] [--repeats 3] [--schemes a,b]
       [--refresh 64,block] [--remasking random|low_confidence|entropy] [--z-prompts 64] [--profile]
Last line: {"ratio": ..., "schemes": {name: ratio}, "z_rel_diff": ..., ...}
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import statistics
import time

import torch

from sketchwm.bench.machine import machine
from sketchwm.bench.perf import add_common_args, setup
from sketchwm.bench.seeds import bench_key
from sketchwm.data import load
from sketchwm.config import DEFAULT_SCHEME
from sketchwm.detection import Detector
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.registry import get_registry

DEFAULT = DEFAULT_SCHEME


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--schemes", default="", help="comma-separated (default: every registered scheme)")
    ap.add_argument("--backend", default="default")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: process CPU time (all threads), steadier than wall time on a shared machine")
    ap.add_argument("--refresh", default="",
                    help="also time the default scheme with these sampler marginal_refresh values (comma-separated, e.g. 64,block)")
    ap.add_argument("--remasking", choices=["random", "low_confidence", "entropy"], default=None,
                    help="sampler remasking rule (default: the backend's shipped one)")
    ap.add_argument("--z-prompts", type=int, default=64,
                    help="prompts (in batches of --prompts) on which detection z of the default sampler is compared with "
                         "the exact computation (marginal_refresh=1); 0 skips the comparison")
    args = ap.parse_args(argv)
    dev = setup(args)
    reg = get_registry()
    backend = reg.create("backend", args.backend, {"device": str(dev)} if args.backend == "default" else {})
    key = bench_key("perf-generate", "key", 0)
    cfg = {**(backend.sampler_defaults or {}), "gen_length": args.gen_length}
    if args.remasking:
        cfg["remasking"] = args.remasking
    prompts = list(load("prompts"))[: args.prompts]
    names = [s for s in args.schemes.split(",") if s] or reg.names("scheme")
    if DEFAULT not in names:
        names.insert(0, DEFAULT)
    schemes = {n: reg.create("scheme", n, {}, key, backend.vocab_size, device=backend.device) for n in names}

    variants = {n: (schemes[n], cfg) for n in names}
    refreshes = [int(r) if r.isdigit() else r for r in args.refresh.split(",") if r]
    for r in refreshes:
        variants[f"{DEFAULT} (refresh {r})"] = (schemes[DEFAULT], {**cfg, "marginal_refresh": r})
    names = list(variants)

    def run(scheme, seed: int, config: dict = cfg):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        t0 = clock()
        out = MaskedDiffusionSampler(backend, config, scheme).generate(prompts, torch.Generator(device=backend.device).manual_seed(seed))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return clock() - t0, out

    with torch.no_grad():
        run(None, 0)  # warm-up
        ratios: dict[str, list[float]] = {n: [] for n in names}
        base_s: list[float] = []
        for rep in range(args.repeats):
            base, _ = run(None, rep)
            base_s.append(base)
            for n in names:
                t, _ = run(*variants[n][:1], rep, variants[n][1])
                ratios[n].append(t / base)
            print(f"repeat {rep}: unwatermarked {base:.2f} s; " + ", ".join(f"{n} {ratios[n][-1]:.2f}x" for n in names),
                  flush=True)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            run(schemes[DEFAULT], 0)
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
            print("cProfile, one watermarked generation (default scheme), top 25 by cumulative time:")
            print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:6000])
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            with profile(activities=acts) as tp:
                run(schemes[DEFAULT], 0)
            print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    extra = {}
    if args.z_prompts:  # detection z of the default (amortised) sampler vs the exact computation, same prompts and seeds
        det = Detector(schemes[DEFAULT], backend.tokenizer, "benchmark")
        pool = list(load("prompts"))[: args.z_prompts]
        batches = [pool[i:i + args.prompts] for i in range(0, len(pool), args.prompts)]

        def z_of(config: dict) -> torch.Tensor:
            zs = []
            for i, batch in enumerate(batches):
                out = MaskedDiffusionSampler(backend, config, schemes[DEFAULT]).generate(
                    batch, torch.Generator(device=backend.device).manual_seed(1000 + i))
                zs.append(det.detect_ids(out.token_lists()).z)
            return torch.cat(zs).double()

        with torch.no_grad():
            z_exact = z_of({**cfg, "marginal_refresh": 1})
            z_cmp = {"default": z_of(cfg), **{f"refresh {r}": z_of({**cfg, "marginal_refresh": r}) for r in refreshes}}
        se = lambda a, b: math.sqrt(float(a.var()) / len(a) + float(b.var()) / len(b))  # noqa: E731
        extra = {"z_texts": len(z_exact), "z_mean_exact": round(float(z_exact.mean()), 3)}
        for k, z in z_cmp.items():
            tag = "" if k == "default" else "_" + k.replace(" ", "_")
            extra[f"z_mean{tag}"] = round(float(z.mean()), 3)
            extra[f"z_rel_diff{tag}"] = round(float((z.mean() - z_exact.mean()) / z_exact.mean()), 4)
            extra[f"z_rel_diff_se{tag}"] = round(se(z, z_exact) / float(z_exact.mean()), 4)
        print(f"detection z over {len(z_exact)} texts: exact {extra['z_mean_exact']}; "
              + "; ".join(f"{k} {extra['z_mean' + ('' if k == 'default' else '_' + k.replace(' ', '_'))]}" for k in z_cmp))
    table = {n: round(statistics.median(r), 3) for n, r in ratios.items()}
    print(f"unwatermarked: median {statistics.median(base_s):.2f} s for {len(prompts)} prompts x {args.gen_length} tokens")
    print(f"{'scheme':24s}{'time / unwatermarked':>22s}")
    for n, r in table.items():
        print(f"{n:24s}{r:>22.2f}")
    print(json.dumps({"ratio": table[DEFAULT], "schemes": table, "refresh": MaskedDiffusionSampler(backend, cfg, schemes[DEFAULT]).refresh,
                      "unwatermarked_s": round(statistics.median(base_s), 2), "prompts": len(prompts),
                      "gen_length": args.gen_length, "device": str(dev), "threads": torch.get_num_threads(),
                      "repeats": args.repeats, "clock": args.clock, "remasking": cfg.get("remasking", "random"), **extra,
                      "better": {"ratio": "lower"}, "machine": machine()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
