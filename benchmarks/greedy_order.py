"""The unmasking order as a watermark channel under greedy decoding: how much it carries, and when it has nothing.

Two measurements, LLaDA's greedy regime (T = 0, low-confidence remasking, blocks of 32, two tokens
a step), CPU, a few seconds each::

    python benchmarks/greedy_order.py

1. Capacity: on each model, how many distinct greedy texts the prompts give and the mean number of
   distinct tokens per text. A model whose greedy text is one repeated token whatever the order
   (the random stand-ins) leaves an order-steering watermark nothing to choose.
2. Detection: on :class:`sketchwm.testing.neighbour.NeighbourBackend` (its argmax reads its decoded
   neighbours, so the order changes the greedy text), the median z and p-value of the steered
   greedy texts — ``global-sketch`` steering alone (``greedy_tilt`` 0) over δ, and ``dgmark``
   over its strength — against the unsteered greedy texts, and the fraction of tokens that differ.

3. The argmax tilt (``global-sketch``'s ``greedy_tilt``: at T = 0 the default steers the order and
   tilts the marginals with δ·greedy_tilt): on the LLaDA stand-in (whose greedy text the order
   alone cannot change) and, with ``--default-model``, on the shipped default model with the
   shipped prompts (slower), the fraction of committed tokens whose argmax the tilt overturned,
   the fraction that differ from the unwatermarked greedy text, the median z and p-value, and on
   the default model the oracle perplexity ratio (median, SmolLM2-135M, ``sketchwm.oracle``).

Prints one table per measurement and a JSON line last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key
from sketchwm.context import BuildContext
from sketchwm.data import load_prompts
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.registry import get_registry
from sketchwm.testing.neighbour import NeighbourBackend

GREEDY = {"temperature": 0.0, "remasking": "low_confidence", "block_length": 32, "top_p": 1.0, "stop_at_eos": False}


def greedy(backend, prompts, G, scheme=None):
    cfg = {**GREEDY, "gen_length": G, "steps": G // 2}
    return MaskedDiffusionSampler(backend, cfg, scheme).generate(prompts, torch.Generator().manual_seed(0))


def greedy_counted(backend, prompts, G, scheme):
    """:func:`greedy` with ``scheme``, counting the committed tokens whose argmax the scheme's tilt
    overturned: (output, overturned fraction)."""
    sampler = MaskedDiffusionSampler(backend, {**GREEDY, "gen_length": G, "steps": G // 2}, scheme)
    flips, process, choose = [], scheme.process_logits, sampler.remasking.choose

    def spy_process(step):
        before = step.marginals.at_target_rows(step.marginals.logits).argmax(-1)  # (B, K) untilted argmax
        out = process(step)
        flips.append(out.argmax(-1) != before)  # (B, K)
        return out

    def spy_choose(logits, scaled, x0, valid, k, priority=None):
        chosen = choose(logits, scaled, x0, valid, k, priority)  # (B, K) committed
        flips[-1] = flips[-1][chosen]
        return chosen

    scheme.process_logits, sampler.remasking.choose = spy_process, spy_choose
    out = sampler.generate(prompts, torch.Generator().manual_seed(0))
    return out, float(torch.cat(flips).float().mean())


def argmax_tilt(name, backend, prompts, G, key, tilts, oracle=None):
    """Measurement 3 on one model: one row per (``greedy_tilt``, ``greedy_margin``) of ``tilts``."""
    reg, base = get_registry(), greedy(backend, prompts, G)
    valid = torch.ones_like(base.ids, dtype=torch.bool)
    ppl_base = oracle.perplexity([t for t in base.texts if t.strip()]) if oracle else None
    rows = []
    for t, m in tilts:
        params = {"greedy_tilt": t, "greedy_margin": m}
        scheme = reg.build("scheme", "global-sketch", params, BuildContext(key=key, vocab_size=backend.vocab_size))
        out, overturned = greedy_counted(backend, prompts, G, scheme)
        wm, plain = scheme.score_ids(out.ids, valid), scheme.score_ids(base.ids, valid)
        row = {"model": name, "greedy_tilt": t, "greedy_margin": m, "delta": scheme.params.delta, "overturned": round(overturned, 3),
               "changed": round(float((out.ids != base.ids).float().mean()), 3),
               "median_z": round(float(wm.z.median()), 2), "median_p": float(wm.p_value.median()),
               "median_z_unwatermarked": round(float(plain.z.median()), 2), "oracle_ppl_ratio": None}
        if oracle:
            ppl = oracle.perplexity([t for t in out.texts if t.strip()])
            row["oracle_ppl_ratio"] = round(statistics.median(ppl) / statistics.median(ppl_base), 3)
        rows.append(row)
    return rows


def capacity(name, backend, prompts, G):
    out = greedy(backend, prompts, G)
    lists = out.token_lists()
    return {"model": name, "distinct_texts": len({tuple(x) for x in lists}), "texts": len(lists),
            "mean_distinct_tokens": round(sum(len(set(x)) for x in lists) / len(lists), 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="prompts")
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--tilts", default="0,2,4,4:inf,8",
                    help="measurement 3: greedy_tilt[:greedy_margin] settings, comma-separated (margin default 1)")
    ap.add_argument("--default-model", action="store_true", help="measurement 3 also on the shipped default model")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    G, reg, key = args.gen_length, get_registry(), bench_key(DEFAULT_KEY_SEED, "key", 0)
    prompts = load_prompts("tiny", args.n, seed=3)

    from sketchwm.testing import tiny_backend
    from sketchwm.testing.standins import standin_backend

    models = [("neighbour-test", NeighbourBackend(0)), ("tiny-bert", tiny_backend(0))]
    tilts = [(float(t.split(":")[0]), (None if t.split(":")[1] == "inf" else float(t.split(":")[1])) if ":" in t else 1.0)
             for t in args.tilts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        models.append(("llada-standin", standin_backend("llada", Path(tmp) / "llada")))
        caps = [capacity(n, be, prompts, G) for n, be in models]
        tilted = argmax_tilt("llada-standin", models[-1][1], prompts, G, key, tilts)
    if args.default_model:
        from sketchwm.api import Watermarker
        from sketchwm.oracle import OracleLM

        default = Watermarker(key, {"backend": {"name": "default"}}).backend
        tilted += argmax_tilt("default", default, load_prompts("prompts", args.n, seed=3), G, key, tilts, OracleLM())
    print(f"{'model':<16} {'distinct greedy texts':>22} {'distinct tokens/text':>21}")
    for c in caps:
        print(f"{c['model']:<16} {c['distinct_texts']:>16} of {c['texts']:<3} {c['mean_distinct_tokens']:>21}")

    be = models[0][1]
    base = greedy(be, prompts, G)
    valid = torch.ones_like(base.ids, dtype=torch.bool)
    rows = []
    runs = [("global-sketch", {"prior": {"source": "uniform"}, "delta": d, "greedy_tilt": 0.0}, f"delta={d:g}") for d in (0.0, 0.75, 2.0, 5.0)]
    runs += [("dgmark", {"strength": s}, f"strength={s:g}") for s in (0.0, 0.5, 1.0)]
    for name, params, label in runs:
        scheme = reg.build("scheme", name, params, BuildContext(key=key, vocab_size=be.vocab_size))
        out = greedy(be, prompts, G, scheme)
        wm, plain = scheme.score_ids(out.ids, valid), scheme.score_ids(base.ids, valid)
        rows.append({"scheme": name, "setting": label, "changed": round(float((out.ids != base.ids).float().mean()), 3),
                     "median_z": round(float(wm.z.median()), 2), "median_p": float(wm.p_value.median()),
                     "median_z_unwatermarked": round(float(plain.z.median()), 2)})
    print(f"\nneighbour-test, {args.n} texts x {G} tokens, T = 0, low-confidence, blocks of 32")
    print(f"{'scheme':<14} {'setting':<13} {'tokens changed':>14} {'median z':>9} {'median p':>10} {'z unwatermarked':>16}")
    for r in rows:
        print(f"{r['scheme']:<14} {r['setting']:<13} {r['changed']:>14.3f} {r['median_z']:>9.2f} {r['median_p']:>10.2e} "
              f"{r['median_z_unwatermarked']:>16.2f}")
    print(f"\nargmax tilt of the default global-sketch at T = 0 (order steered, tilt δ·greedy_tilt), {args.n} texts x {G} tokens")
    print(f"{'model':<14} {'greedy_tilt':>11} {'margin':>6} {'overturned':>10} {'changed':>8} {'median z':>9} {'median p':>10} "
          f"{'z unwatermarked':>16} {'oracle ppl ratio':>17}")
    for r in tilted:
        ppl = "-" if r["oracle_ppl_ratio"] is None else f"{r['oracle_ppl_ratio']:.3f}"
        print(f"{r['model']:<14} {r['greedy_tilt']:>11g} {'inf' if r['greedy_margin'] is None else r['greedy_margin']:>6} {r['overturned']:>10.3f} {r['changed']:>8.3f} {r['median_z']:>9.2f} "
              f"{r['median_p']:>10.2e} {r['median_z_unwatermarked']:>16.2f} {ppl:>17}")
    print(json.dumps({"capacity": caps, "detection": rows, "argmax_tilt": tilted, "n": args.n, "gen_length": G}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
