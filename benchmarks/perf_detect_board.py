"""Detection throughput of every scheme of a leaderboard config, warm and side by side: the board's speed column.

Each scheme is built as the board builds it (:class:`sketchwm.bench.inputs.Services`: the config's
params, at the scheme's default strength, under the run's key 0, on the run's first backend), and its
``Detector.detect_batch`` is timed on the same token ids: the shipped human passages
(``sketchwm.data.load("human")``) tokenised by that backend's tokenizer and cut into texts of the
config's longest length (128 tokens for the headline), ``--tokens`` ids in all. Calls are interleaved
over ``--repeats`` rounds after one untimed round (:func:`sketchwm.bench.perf.interleaved_medians`), so
a shared machine's drift hits every scheme alike; each figure is the median. Tokenisation is excluded
(it costs every scheme the same; ``benchmarks/perf_detect.py`` times the text paths of the default).

The leaderboard (``sketchwm leaderboard``) reads the JSON this writes as ``detect-speed.json`` in the
results folder and shows it in the first screen's "detect tokens/s" column, with the CPU it ran on;
without it the column falls back to each cell's own timing (one cold call on the cell's texts).

Usage: python benchmarks/perf_detect_board.py [--config leaderboard-headline] [--tokens 65536] [--repeats 5]
       [--threads N] [--out runs/leaderboard/detect-speed.json]
Last line: {"tokens_per_s": {curve: tokens/s}, "over_default": {curve: ratio}, "machine": {...}, ...}
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from sketchwm.bench.config import load_config
from sketchwm.bench.inputs import Services
from sketchwm.bench.perf import add_common_args, interleaved_medians, report, setup
from sketchwm.bench.plan import plan
from sketchwm.config import DEFAULT_SCHEME
from sketchwm.data import load
from sketchwm.detection import Detector


def board_ids(tokenizer, length: int, tokens: int) -> torch.Tensor:
    """(B, length) int64 ids of the shipped human passages, concatenated in their shipped order and cut
    into B = ``tokens`` // ``length`` texts (the passages are repeated if they hold fewer ids).

    Raises:
        ValueError: ``tokens`` < ``length``.
    """
    if tokens < length:
        raise ValueError(f"--tokens {tokens} is below one text of {length} tokens")
    flat: list[int] = []
    texts = load("human")
    while len(flat) < tokens:
        for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
            flat += ids
            if len(flat) >= tokens:
                break
    B = tokens // length
    return torch.tensor(flat[:B * length], dtype=torch.int64).view(B, length)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=5)
    ap.add_argument("--config", default="leaderboard-headline", help="leaderboard config (a shipped name or a path)")
    ap.add_argument("--tokens", type=int, default=1 << 16, help="token ids per call (default 65,536)")
    ap.add_argument("--out", default="", help="also write the JSON here (the results folder's detect-speed.json)")
    args = ap.parse_args(argv)
    dev = setup(args)
    cfg = load_config(args.config)
    svc = Services.build(cfg)
    units = [u for u, _ in plan(cfg, svc.registry) if u.key == 0 and u.backend == 0]
    chosen: dict[str, object] = {}
    for u in units:  # per curve: its default-strength variant, else its first
        if u.curve not in chosen or (svc.schemes.knob(u)[2] and not svc.schemes.knob(chosen[u.curve])[2]):
            chosen[u.curve] = u
    backend = svc.models.backend(0)
    length = max(cfg.lengths)
    ids = board_ids(backend.tokenizer, length, args.tokens).to(dev)
    valid = torch.ones_like(ids, dtype=torch.bool)
    fns = {}
    for curve, u in chosen.items():
        det = Detector(svc.schemes.scheme(u), backend.tokenizer, "benchmark", alpha=0.01)
        fns[curve] = (lambda d=det: d.detect_batch(ids, valid))
    ms = interleaved_medians(fns, args.repeats, dev)
    n_tok = ids.numel()
    tps = {k: round(n_tok / (v / 1e3), -3) for k, v in ms.items()}
    ref = tps.get(DEFAULT_SCHEME)
    over = {k: round(v / ref, 3) for k, v in tps.items()} if ref else {}
    lines = [f"{k:>22}: {ms[k]:9.2f} ms  {tps[k]:.3g} tokens/s" + (f"  {over[k]:.2f}x the default" if over else "")
             for k in sorted(tps, key=tps.get, reverse=True)]
    res = {"tokens_per_s": tps, "over_default": over, "median_ms": ms, "config": cfg.name, "tokens": n_tok,
           "texts": int(ids.shape[0]), "length": length, "model_id": getattr(backend, "model_id", backend.name),
           "V": backend.vocab_size, "device": str(dev), "threads": torch.get_num_threads(), "repeats": args.repeats,
           "settings": {k: u.scheme for k, u in chosen.items()}}
    if args.out:
        from sketchwm.bench.machine import machine

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**res, "machine": machine()}, indent=1) + "\n", encoding="utf-8")
    report(lines, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
