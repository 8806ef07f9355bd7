"""Watermark stealing at scale: spoof rate, scrub rate and unrelated-key flags vs stolen-sample count N.

Generation (``generate``): per scheme, ``--n-max`` texts of the default DLM watermarked under one
victim key (prompts 0..n-1), plus ``--n-max`` unwatermarked samples of the same open model (same
prompts, another seed): the thief's reference. Texts are appended batch by batch to JSONL files
under ``--cache`` (resumable: a rerun continues where the file ends). Keys derive from ``--seed``
by SHA-256 (victim and unrelated key), so runs are reproducible.

    python benchmarks/stealing.py generate --schemes none global-sketch --n-max 1000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

#: scheme tag -> (registered scheme name, params); "none" is the unwatermarked model
SCHEMES: dict[str, tuple[str, dict]] = {
    "none": ("", {}),
    "global-sketch": ("global-sketch", {}),
    "red-green-dlm": ("red-green-dlm", {}),
    "unigram": ("unigram", {}),
    "family-8": ("global-sketch-family", {"members": 8}),
}


def victim_key(seed: int, role: str = "victim"):
    """The benchmark's key for ``role`` (``victim`` or ``unrelated``), derived from ``seed`` by SHA-256."""
    from sketchwm.keys import WatermarkKey

    return WatermarkKey(hashlib.sha256(f"stealing/{seed}/{role}".encode()).digest())


def default_cache() -> Path:
    """``$SKETCHWM_CACHE_DIR/stealing`` (or ``~/.cache/sketchwm/stealing``)."""
    root = os.environ.get("SKETCHWM_CACHE_DIR") or str(Path.home() / ".cache" / "sketchwm")
    return Path(root) / "stealing"


def texts_path(cache: Path, seed: int, tag: str) -> Path:
    return cache / f"seed{seed}" / f"{tag}.jsonl"


def read_texts(path: Path) -> list[dict]:
    """Records ``{"i", "prompt", "text", "ids"}`` of a generation file ([] when absent)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def generate(tag: str, n: int, seed: int, cache: Path, batch_size: int) -> list[dict]:
    """Generate (or continue generating) ``n`` texts for scheme ``tag``; returns the records."""
    from sketchwm.api import Watermarker
    from sketchwm.data import load_prompts

    name, params = SCHEMES[tag]
    path = texts_path(cache, seed, tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_texts(path)
    if len(done) >= n:
        return done[:n]
    prompts = load_prompts("prompts", n)
    wm = Watermarker(victim_key(seed), {"scheme": {"name": name or "global-sketch", "params": params}})
    with path.open("a") as fh:
        for b0 in range(len(done), n, batch_size):
            t0 = time.perf_counter()
            chunk = prompts[b0 : b0 + batch_size]
            batch_seed = int.from_bytes(hashlib.sha256(f"{seed}/{tag}/{b0}".encode()).digest()[:6], "big")
            out = wm.generate(chunk, seed=batch_seed, watermark=bool(name), batch_size=batch_size)
            drawn = getattr(wm.scheme, "drawn", None) if name else None  # key family: each text's member
            for j, (p, t) in enumerate(zip(chunk, out.texts)):
                ids = out.ids[j, : int(out.lengths[j])].tolist()
                rec = {"i": b0 + j, "prompt": p, "text": t, "ids": ids}
                if drawn is not None:
                    rec["member"] = int(drawn[j])
                fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"[{tag}] {b0 + len(chunk)}/{n} texts ({time.perf_counter() - t0:.1f} s for {len(chunk)})", flush=True)
    return read_texts(path)[:n]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate the watermarked and unwatermarked texts")
    g.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    g.add_argument("--n-max", type=int, default=1000)
    g.add_argument("--batch-size", type=int, default=25)
    for p in (g,):
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--cache", type=Path, default=None)
        p.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = args.cache or default_cache()
    if args.cmd == "generate":
        for tag in args.schemes:
            generate(tag, args.n_max, args.seed, cache, args.batch_size)
        return {}
    return {}


if __name__ == "__main__":
    main(sys.argv[1:])
