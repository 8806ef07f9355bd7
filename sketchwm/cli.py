"""Command-line interface: ``sketchwm keygen | generate | detect | calibrate | plugins | demo | attack``.

Errors from bad input print one line on stderr (``sketchwm: error: ...``) and exit with status 2,
without a traceback. Outputs are written atomically: a failure never truncates an existing file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from .errors import InputError, SketchwmError

__all__ = ["main", "build_parser"]


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="JSON file with {scheme, backend, sampler} (see WatermarkConfig)")
    p.add_argument("--scheme", help="registered scheme name (default: global-sketch)")
    p.add_argument("--scheme-params", help="scheme params as JSON (or @file.json)")
    p.add_argument("--backend", help="registered backend name (default: default)")
    p.add_argument("--backend-params", help="backend params as JSON (or @file.json)")
    p.add_argument("--device", help="device for the backend: auto, cpu, cuda")


def _config(args: argparse.Namespace) -> dict[str, Any]:
    from .io import read_json_arg

    cfg: dict[str, Any] = read_json_arg("@" + args.config, "--config") if getattr(args, "config", None) else {}
    if getattr(args, "scheme", None) or getattr(args, "scheme_params", None):
        base = cfg.get("scheme", {"name": "global-sketch"})
        cfg["scheme"] = {"name": args.scheme or base.get("name", "global-sketch"),
                         "params": read_json_arg(args.scheme_params, "--scheme-params") or base.get("params", {})}
    if getattr(args, "backend", None) or getattr(args, "backend_params", None) or getattr(args, "device", None):
        base = cfg.get("backend", {"name": "default"})
        params = read_json_arg(args.backend_params, "--backend-params") or dict(base.get("params", {}))
        if args.device:
            params["device"] = args.device
        cfg["backend"] = {"name": args.backend or base.get("name", "default"), "params": params}
    return cfg


def _watermarker(args: argparse.Namespace):
    from .api import Watermarker
    from .keys import WatermarkKey

    return Watermarker(WatermarkKey.load(args.key), _config(args))


def cmd_keygen(args: argparse.Namespace) -> int:
    from .api import keygen

    key = keygen(args.out, overwrite=args.force)
    print(f"wrote key {key.fingerprint} to {args.out} (mode 0600)", file=sys.stderr)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from .io import read_lines, write_jsonl_atomic

    prompts = list(args.prompt or [])
    if args.prompts:
        prompts += read_lines(args.prompts)
    if not prompts:
        raise InputError("no prompts: pass --prompt TEXT or --prompts FILE")
    wm = _watermarker(args)
    over = {k: v for k, v in {"gen_length": args.gen_length, "steps": args.steps, "block_length": args.block_length,
                                "temperature": args.temperature, "remasking": args.remasking}.items() if v is not None}
    out = wm.generate(prompts, seed=args.seed, watermark=not args.no_watermark, batch_size=args.batch_size,
                      progress=not args.quiet, **over)
    tok_fp = wm.backend.tokenizer_fingerprint
    records = [
        {"prompt": p, "text": t, "n_tokens": int(n), "watermarked": not args.no_watermark,
         "scheme": wm.config.scheme.name, "key_fingerprint": wm.key.fingerprint, "tokenizer": tok_fp, "seed": args.seed}
        for p, t, n in zip(out.prompts, out.texts, out.lengths.tolist())
    ]
    write_jsonl_atomic(args.out, records)
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    from .io import iter_record_chunks

    wm = _watermarker(args)  # key errors first, before reading (possibly) stdin
    detector = wm.detector(args.calibration, args.alpha)
    res, start = None, 0
    for recs in iter_record_chunks(args.input, args.chunk_size):  # bounded memory: one chunk at a time
        recorded = {r["tokenizer"] for r in recs if isinstance(r.get("tokenizer"), str)}
        if recorded and recorded != {wm.backend.tokenizer_fingerprint}:
            from .errors import TokenizerMismatchError

            raise TokenizerMismatchError(
                f"the input was generated with tokenizer {', '.join(sorted(recorded))}, but the detector's backend uses "
                f"tokenizer {wm.backend.tokenizer_fingerprint}: pass the generating --backend"
            )
        res = detector.detect([r["text"] for r in recs])
        rows = res.to_records()
        if args.json:
            sys.stdout.write("".join(json.dumps(r) + "\n" for r in rows))
        else:
            if start == 0:
                print(f"{'#':>4} {'tokens':>6} {'score':>10} {'z':>7} {'p-value':>10} {'threshold':>10}  decision")
            for i, r in enumerate(rows, start):
                print(f"{i:>4} {r['n_tokens']:>6} {r['score']:>10.3f} {r['z']:>7.2f} {r['p_value']:>10.2e} "
                      f"{r['threshold']:>10.3f}  {'WATERMARKED' if r['is_watermarked'] else 'not watermarked'}")
        start += len(rows)
    if not args.json and res is not None:
        print(f"key {res.key_fingerprint}; threshold: {res.threshold_source} (alpha={res.alpha}); p-value: {res.p_value_method}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .demo import demo_prompts
    from .io import read_texts

    wm = _watermarker(args)
    if args.input:
        texts = read_texts(args.input)
        source, model_id = f"{len(texts)} texts from {args.input}", args.model_id or "human"
    else:
        prompts = demo_prompts(args.n_samples, offset=args.prompt_offset)
        over = {"gen_length": args.gen_length} if args.gen_length else {}
        out = wm.generate(prompts, seed=args.seed, watermark=False, batch_size=args.batch_size, progress=not args.quiet, **over)
        texts, source, model_id = out.texts, f"{len(prompts)} unwatermarked samples of {wm.backend.model_id}", None
    cal = wm.calibrate(texts, alpha=args.alpha, source=source, model_id=model_id)
    cal.save(args.out)
    print(f"wrote calibration for key {cal.key_fingerprint} ({len(cal.bins)} length bins) to {args.out}", file=sys.stderr)
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from .registry import get_registry

    desc = get_registry().describe()
    if args.json:
        print(json.dumps(desc, indent=2, ensure_ascii=False))
    else:
        for kind, items in desc.items():
            print(f"{kind}:")
            for it in items:
                print(f"  {it['name']:<18} {it['summary']}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_table, run_demo
    from .keys import WatermarkKey

    key = WatermarkKey.load(args.key) if args.key else None
    res = run_demo(key=key, n_prompts=args.n_prompts, n_null=args.n_null, gen_length=args.gen_length, alpha=args.alpha,
                   seed=args.seed, config=_config(args) or None, progress=not args.quiet)
    print(format_table(res))
    if args.json:
        print(json.dumps(res))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``sketchwm`` command."""
    p = argparse.ArgumentParser(prog="sketchwm", description="Global sketch watermarking for masked diffusion LMs.")
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("keygen", help="write a new secret key file (mode 0600)")
    k.add_argument("--out", required=True)
    k.add_argument("--force", action="store_true", help="overwrite an existing key file")
    k.set_defaults(func=cmd_keygen)

    g = sub.add_parser("generate", help="generate (watermarked) text → JSONL")
    g.add_argument("--key", required=False)
    g.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    g.add_argument("--prompts", help="file with one prompt per line (or JSONL with 'prompt'); - for stdin")
    g.add_argument("--out", default="-", help="output JSONL (default stdout)")
    g.add_argument("--no-watermark", action="store_true", help="sample the base model")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--gen-length", type=int)
    g.add_argument("--steps", type=int)
    g.add_argument("--block-length", type=int)
    g.add_argument("--temperature", type=float)
    g.add_argument("--remasking", choices=["low_confidence", "random", "entropy"])
    g.add_argument("--batch-size", type=int, default=16)
    g.add_argument("--quiet", action="store_true")
    _add_config_args(g)
    g.set_defaults(func=cmd_generate)

    d = sub.add_parser("detect", help="detect the watermark in text or JSONL")
    d.add_argument("--key", required=False)
    d.add_argument("--input", required=True, help="plain text file (one text) or JSONL with 'text'; - for stdin")
    d.add_argument("--calibration", help="calibration JSON from `sketchwm calibrate` (default: analytic threshold)")
    d.add_argument("--alpha", type=float, default=0.01)
    d.add_argument("--json", action="store_true", help="one JSON result per line")
    d.add_argument("--chunk-size", type=int, default=4096,
                   help="texts read and detected at a time (large JSONL inputs stream in bounded memory)")
    _add_config_args(d)
    d.set_defaults(func=cmd_detect)

    c = sub.add_parser("calibrate", help="empirical thresholds from unwatermarked texts → JSON")
    c.add_argument("--key", required=False)
    c.add_argument("--out", required=True)
    c.add_argument("--input", help="unwatermarked texts (JSONL/plain); default: sample the model")
    c.add_argument("--model-id", help="label of the null texts' source (with --input)")
    c.add_argument("--n-samples", type=int, default=200)
    c.add_argument("--prompt-offset", type=int, default=100)
    c.add_argument("--gen-length", type=int)
    c.add_argument("--alpha", type=float, default=0.01)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--batch-size", type=int, default=50)
    c.add_argument("--quiet", action="store_true")
    _add_config_args(c)
    c.set_defaults(func=cmd_calibrate)

    pl = sub.add_parser("plugins", help="list registered components by kind")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_plugins)

    dm = sub.add_parser("demo", help="the main job: generate, calibrate, detect, print TPR/FPR")
    dm.add_argument("--key", help="key file (default: the public demo key)")
    dm.add_argument("--n-prompts", type=int, default=20)
    dm.add_argument("--n-null", type=int, default=200)
    dm.add_argument("--gen-length", type=int, default=128)
    dm.add_argument("--alpha", type=float, default=0.01)
    dm.add_argument("--seed", type=int, default=0)
    dm.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last line")
    dm.add_argument("--quiet", action="store_true")
    _add_config_args(dm)
    dm.set_defaults(func=cmd_demo)

    try:
        from .cli_attack import add_attack_command

        add_attack_command(sub)
    except ImportError:
        pass
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sketchwm`` console script; returns the exit status."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # busy-waiting OpenMP threads starve a shared 2-core CPU
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SketchwmError as exc:
        print(f"sketchwm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sketchwm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
