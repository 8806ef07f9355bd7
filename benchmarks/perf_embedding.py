"""Cost of one global-sketch embedding step relative to one softmax, measured side by side.

One embedding step (seed paper Alg. 1, lines 5-9: expected sketch eq. 5, residual, per-token score
eq. 6, exponential tilt eq. 7) on float32 logits of shape (1, 256, 126464) — LLaDA's vocabulary —
with a Count-Sketch d = 4, w = 256 (D = 1,024), divided by ``torch.softmax`` on the same tensor.
The two are interleaved and each ratio is taken within one repeat, so machine noise cancels;
the median ratio is reported. The floor is one softmax plus one pass over the logits.

``--counting presence`` uses the default presence sketch; ``--eos ID`` sets a stop token, so the
step computes the expected sketch of the text cut at its first EOS (issue 13).

Usage: python benchmarks/perf_embedding.py [--device cpu|cuda] [--repeats 15] [--counting count|presence] [--eos ID]
Last line: {"ratio": ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from sketchwm.components import DenoiseStep
from sketchwm.keys import WatermarkKey
from sketchwm.registry import Registry, get_plugin_manager


def builtin_registry() -> Registry:
    import importlib.metadata

    eps = [e for e in importlib.metadata.entry_points(group="sketchwm") if e.name.startswith("builtin")]
    return Registry(get_plugin_manager(eps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=126464)
    ap.add_argument("--counting", choices=["count", "presence"], default="count")
    ap.add_argument("--eos", type=int, default=None, help="stop token id (cut-text expected sketch)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    B, G, V = args.batch, args.positions, args.vocab
    reg = builtin_registry()
    scheme = reg.get("scheme", "global-sketch")(
        {"prior": {"source": "uniform"}, "delta": 1.0,
         "sketch": {"name": "count-sketch", "params": {"d": 4, "w": 256, "counting": args.counting}}},
        WatermarkKey(b"benchmark key, not a secret!!!!!"), V, device=dev, registry=reg,
    )
    scheme.set_stop_token(args.eos)
    g = torch.Generator(device="cpu").manual_seed(0)
    logits = torch.randn(B, G, V, generator=g).to(dev)  # (B, G, V) float32
    masked = (torch.rand(B, G, generator=g) < 0.75).to(dev)  # (B, G)
    tokens = torch.randint(0, V, (B, G), generator=g).to(dev)
    step = DenoiseStep(10, 64, tokens, masked, logits, torch.zeros(B, 1, dtype=torch.long, device=dev),
                       torch.ones(B, 1, dtype=torch.bool, device=dev), (0, G), V)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn) -> float:
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        dt = time.perf_counter() - t
        del out
        return dt

    with torch.no_grad():
        for _ in range(2):  # warm-up
            timed(lambda: torch.softmax(logits, -1))
            timed(lambda: scheme.process_logits(step))
        ratios, t_soft, t_emb = [], [], []
        for _ in range(args.repeats):
            a = timed(lambda: torch.softmax(logits, -1))
            b = timed(lambda: scheme.process_logits(step))
            t_soft.append(a)
            t_emb.append(b)
            ratios.append(b / a)
    res = {
        "device": str(dev), "shape": [B, G, V], "D": scheme.sketch.dim, "threads": torch.get_num_threads(),
        "counting": args.counting, "eos": args.eos,
        "softmax_ms_median": round(1e3 * statistics.median(t_soft), 2),
        "embedding_ms_median": round(1e3 * statistics.median(t_emb), 2),
        "ratio": round(statistics.median(ratios), 3),
    }
    print(f"softmax {res['softmax_ms_median']} ms, embedding step {res['embedding_ms_median']} ms "
          f"(median of {args.repeats} side-by-side repeats on {dev})")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
