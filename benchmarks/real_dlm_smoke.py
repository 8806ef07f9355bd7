"""End-to-end smoke run of a real diffusion LM backend: generate, calibrate, detect.

For users with a LLaDA, Dream or MDLM checkpoint (and a GPU)::

    python benchmarks/real_dlm_smoke.py --backend llada --path /models/LLaDA-8B-Instruct
    python benchmarks/real_dlm_smoke.py --backend mdlm --path /models/mdlm-owt --tokenizer-path /models/gpt2

and here, on the project's stand-ins (tiny random models with the real interface, see
``sketchwm.testing.standins``; under 2 minutes on a CPU)::

    python benchmarks/real_dlm_smoke.py --backend dream --standin
    python benchmarks/real_dlm_smoke.py --backend llada --standin --scheme dmark

Steps: ``--n-cal`` unwatermarked texts calibrate the detector (τ_N per length bin at ``--alpha``);
``--n`` held-out prompts are generated without and with the watermark of ``--scheme`` (default
``global-sketch-green``, the configured default; the backend's own sampler settings, see docs/backends.md, plus
``--gen-length``/``--steps``); texts are cut at the
first EOS and those shorter than the scheme's minimum length are left out (counted). TPR is the
detected fraction of watermarked texts, FPR that of held-out unwatermarked ones.

``distinct_texts_base`` and ``mean_distinct_tokens_base`` say how much the unwatermarked texts vary:
under greedy decoding a watermark that keeps the model's tokens (order steering: the default
global sketch at T = 0, ``dgmark``) can only choose among the greedy texts the orders give, and a
model whose greedy text is one repeated token leaves it nothing to choose.

``oracle_ppl_ratio`` = median oracle perplexity (SmolLM2-135M, ``sketchwm.oracle``) of watermarked
over unwatermarked texts; null with ``--no-oracle`` and by default on stand-ins (their random
weights produce word salad, whose perplexity says nothing about the watermark).

The last line printed is one JSON object:
``{"tpr", "fpr", "mean_length_wm", "mean_length_base", "oracle_ppl_ratio", ...}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from sketchwm.api import Watermarker
from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key


def prompts_for(n: int, seed: int, standin: bool) -> list[str]:
    """``n`` prompts: word strings over the stand-in vocabulary, or openings of shipped prompts."""
    from sketchwm.data import load_prompts

    if standin:
        return load_prompts("tiny", n, seed=seed)
    pool = load_prompts("prompts")
    return [pool[(seed * 7919 + i) % len(pool)] for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["llada", "dream", "mdlm"], required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--path", help="local checkpoint directory")
    src.add_argument("--standin", action="store_true", help="run on the project's tiny stand-in of the backend")
    ap.add_argument("--tokenizer-path", default="", help="mdlm: GPT-2 tokenizer directory")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--n", type=int, default=100, help="held-out prompts per arm")
    ap.add_argument("--n-cal", type=int, default=200, help="unwatermarked calibration texts")
    ap.add_argument("--gen-length", type=int, default=None, help="default: 64 on stand-ins, 256 otherwise")
    ap.add_argument("--steps", type=int, default=None, help="default: gen_length / 2")
    ap.add_argument("--temperature", type=float, default=None, help="override the backend's sampler default")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--scheme", default=None, help="registered scheme name (default: the configured default, global-sketch-green)")
    ap.add_argument("--scheme-params", default="{}", help="the scheme's params as JSON")
    args = ap.parse_args(argv)

    t0 = time.time()
    params = {"device": args.device}
    if args.dtype:
        params["dtype"] = args.dtype
    if args.tokenizer_path:
        params["tokenizer_path"] = args.tokenizer_path
    if args.standin:
        from sketchwm.testing.standins import save_standin

        torch.set_num_threads(1)
        path = str(save_standin(args.backend, Path(tempfile.mkdtemp(prefix="sketchwm-standin-")) / args.backend))
        params.update(dtype="float32")
    else:
        path = args.path
    G = args.gen_length or (64 if args.standin else 256)
    steps = args.steps or G // 2
    sampler = {"gen_length": G, "steps": steps, "block_length": G}
    if args.backend == "llada":
        sampler["block_length"] = min(32, G) if G % 32 == 0 else G
    if args.temperature is not None:
        sampler["temperature"] = args.temperature
    cfg = {"backend": {"name": args.backend, "params": {"path": path, **params}}, "sampler": sampler}
    if args.scheme:
        cfg["scheme"] = {"name": args.scheme, "params": json.loads(args.scheme_params)}
    key = bench_key(DEFAULT_KEY_SEED, "key", 0)  # a fixed, public smoke-test key
    wm = Watermarker(key, cfg)
    be = wm.backend
    print(f"backend {be.model_id}: V={be.vocab_size} mask={be.mask_token_id} eos={be.eos_token_id} "
          f"chat_template={getattr(be, 'uses_chat_template', False)} sampler={wm.sampler(False).config.model_dump()}")

    def cut(out):
        keep = [ids for ids in out.token_lists() if len(ids) >= wm.scheme.min_tokens]
        return keep, len(out.texts) - len(keep)

    cal_out = wm.generate(prompts_for(args.n_cal, args.seed + 1, args.standin), seed=args.seed + 1, watermark=False,
                          batch_size=args.batch_size)
    cal_ids, _ = cut(cal_out)
    calibration = wm.calibrate(id_lists=cal_ids, alpha=args.alpha, source="real_dlm_smoke unwatermarked")
    prompts = prompts_for(args.n, args.seed + 2, args.standin)
    base = wm.generate(prompts, seed=args.seed + 2, watermark=False, batch_size=args.batch_size)
    marked = wm.generate(prompts, seed=args.seed + 2, batch_size=args.batch_size)
    base_ids, base_short = cut(base)
    wm_ids, wm_short = cut(marked)
    det_wm = wm.detect_ids(wm_ids, calibration, args.alpha)
    det_base = wm.detect_ids(base_ids, calibration, args.alpha)
    tpr = float(det_wm.is_watermarked.float().mean())
    fpr = float(det_base.is_watermarked.float().mean())
    print(f"calibration texts {len(cal_ids)}; detected: watermarked {tpr:.3f} (n={len(wm_ids)}, {wm_short} too short), "
          f"unwatermarked {fpr:.3f} (n={len(base_ids)}, {base_short} too short); median z wm "
          f"{float(det_wm.z.median()):.2f} base {float(det_base.z.median()):.2f}")

    prov = wm.provenance()
    for problem in prov["warnings"]:
        print(f"warning: {problem}")
    ratio = None
    if not (args.no_oracle or args.standin):
        from sketchwm.oracle import OracleLM

        oracle = OracleLM(device=be.device)
        ppl_wm = oracle.perplexity([t for t in marked.texts if t.strip()])
        ppl_base = oracle.perplexity([t for t in base.texts if t.strip()])
        ratio = statistics.median(ppl_wm) / statistics.median(ppl_base)
    result = {
        "tpr": round(tpr, 4), "fpr": round(fpr, 4),
        "mean_length_wm": round(float(marked.lengths.float().mean()), 3),
        "mean_length_base": round(float(base.lengths.float().mean()), 3),
        "distinct_texts_base": len({tuple(ids) for ids in base.token_lists()}),
        "mean_distinct_tokens_base": round(statistics.fmean(len(set(ids)) for ids in base.token_lists()), 2),
        "oracle_ppl_ratio": None if ratio is None else round(ratio, 4),
        "backend": args.backend, "standin": bool(args.standin), "scheme": wm.scheme.name, "n": args.n, "n_cal": len(cal_ids),
        "gen_length": G, "steps": steps, "alpha": args.alpha, "seconds": round(time.time() - t0, 1),
        # what the run's provenance records: the order channel in use and any problem of the settings
        "order_steering": prov["order_steering"], "warnings": prov["warnings"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
