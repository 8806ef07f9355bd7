"""The model work that exact watermarked generation cannot skip, counted against unwatermarked generation.

Counts, for one generation of ``--prompts`` prompts × ``--gen-length`` tokens on the shipped default
model, how many positions the model's body reads and how many rows its LM head computes, without a
watermark and with the default scheme, under a remasking rule (``--remasking``, default
``low_confidence``, whose ``auto`` refresh is the exact computation). From the model's dimensions it
turns them into multiply-accumulates (MACs): the body ``layers · (4H² + 2·H·I + 2·L·H)`` per position
(``3·H·I`` for a gated MLP), the LM head ``H² + H·V`` per row for a BERT-style head (``H·V`` for a
plain linear head). ``model_work_ratio`` is the ratio of the two MAC counts: the extra model work that
exact watermarked generation cannot skip (the watermark must compute every row it reads), a count,
not a time (the sampler's own work and the kernels' efficiency are left out). The same row and
position counts are then priced with the dimensions of LLaDA-8B (H 4,096, 32 layers, I 12,288,
V 126,464, gated MLP, plain head; its published ``config.json``), to show how the ratio moves when the
body, not the head, dominates the model.

Usage:
    python benchmarks/generate_floor.py [--prompts 16] [--gen-length 128] [--remasking low_confidence]

Last line: JSON {"model_work_ratio": ..., "model_work_ratio_llada_8b_dims": ..., "rows": {...}, ...}.
"""

from __future__ import annotations

import argparse
import json

import torch

from sketchwm.bench.machine import machine
from sketchwm.bench.perf import add_common_args, setup
from sketchwm.bench.seeds import bench_key
from sketchwm.config import DEFAULT_SCHEME
from sketchwm.data import load
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.registry import get_registry

#: LLaDA-8B's dimensions (GSAI-ML/LLaDA-8B-Base config.json: d_model, n_layers, mlp_hidden_size, vocab_size)
LLADA_8B = {"hidden": 4096, "layers": 32, "intermediate": 12288, "vocab": 126464, "head_transform": False, "gated_mlp": True}


def macs(dims: dict, positions: int, rows: int, length: int) -> tuple[float, float]:
    """(body MACs, head MACs): the body over ``positions`` positions of sequences of ``length`` tokens and the
    LM head on ``rows`` rows, for ``dims`` (hidden, layers, intermediate, vocab, head_transform, gated_mlp)."""
    H, I, n = dims["hidden"], dims["intermediate"], dims["layers"]
    mlp = (3 if dims.get("gated_mlp") else 2) * H * I
    body = positions * n * (4 * H * H + mlp + 2 * length * H)
    head = rows * ((H * H if dims.get("head_transform") else 0) + H * dims["vocab"])
    return float(body), float(head)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=1)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--remasking", default="low_confidence")
    args = ap.parse_args(argv)
    dev = setup(args)
    reg = get_registry()
    backend = reg.create("backend", "default", {"device": str(dev)})
    scheme = reg.create("scheme", DEFAULT_SCHEME, {}, bench_key("generate-floor", "key", 0), backend.vocab_size,
                        device=backend.device)
    cfg = {**(backend.sampler_defaults or {}), "gen_length": args.gen_length, "remasking": args.remasking}
    prompts = list(load("prompts"))[: args.prompts]
    count = {"rows": 0, "positions": 0, "forwards": 0, "length": 0}
    enc, head = backend._encoder_and_head()  # the BERT-style body and LM head of the shipped model

    def body_pass(module, args, kwargs):  # one forward pass of the body over (B, L) ids
        x = kwargs.get("input_ids", args[0] if args else None)
        count["forwards"] += 1
        count["positions"] += int(x.numel())
        count["length"] = max(count["length"], int(x.shape[1]))

    def head_rows(module, args):  # the LM head on (..., H) hidden rows
        count["rows"] += int(args[0].shape[:-1].numel())

    enc.register_forward_pre_hook(body_pass, with_kwargs=True)
    head.register_forward_pre_hook(head_rows)
    out = {}
    for name, s in (("unwatermarked", None), (DEFAULT_SCHEME, scheme)):
        count.update(rows=0, positions=0, forwards=0, length=0)
        with torch.no_grad():
            MaskedDiffusionSampler(backend, cfg, s).generate(prompts, torch.Generator(device=backend.device).manual_seed(0))
        out[name] = dict(count)
    c = backend.model.config
    dims = {"hidden": c.hidden_size, "layers": c.num_hidden_layers, "intermediate": c.intermediate_size,
            "vocab": backend.vocab_size, "head_transform": True}
    res = {"remasking": args.remasking, "prompts": args.prompts, "gen_length": args.gen_length,
           "rows": {k: v["rows"] for k, v in out.items()}, "positions": {k: v["positions"] for k, v in out.items()},
           "forwards": {k: v["forwards"] for k, v in out.items()}, "model": dims}
    for label, d in (("model_work_ratio", dims), ("model_work_ratio_llada_8b_dims", LLADA_8B)):
        (bu, hu), (bw, hw) = (macs(d, out[k]["positions"], out[k]["rows"], out[k]["length"]) for k in out)
        res[label] = round((bw + hw) / (bu + hu), 3)
        res[f"{label}_head_share_unwatermarked"] = round(hu / (bu + hu), 3)
        print(f"{label}: body {bu:.3g} vs {bw:.3g} MACs, LM head {hu:.3g} vs {hw:.3g}; "
              f"exact watermarked / unwatermarked model work {res[label]:.3f}")
    print(f"LM-head rows: unwatermarked {res['rows']['unwatermarked']}, {DEFAULT_SCHEME} {res['rows'][DEFAULT_SCHEME]}; "
          f"positions through the body: {res['positions']['unwatermarked']} and {res['positions'][DEFAULT_SCHEME]}")
    res["machine"] = machine()
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
