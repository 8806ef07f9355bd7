"""Candidates for a safe default, measured on the development split of the prompts.

Candidates (``CANDIDATES``): the three-channel default ``global-sketch-green`` (``gsg-keyed``), the
same without keyed sampling (``gsg-free``), ``keyed-family`` over ``gsg-free`` with K = 8 and 16
members (``family8-free``, ``family16-free``; K = 16 also detected with the unit-noise spread test,
``family16-free-normal``, and without a spread test, ``family16-free-nospread``) and
``global-sketch-family`` (``sketch-family16``).
Every text is written by the shipped default model from the prompts of ``prompts-development`` (the
prompts ``sketchwm scorecard`` never reads); keys come from :func:`sketchwm.bench.seeds.bench_key`
and are never printed.

Stages (``--stages``; texts are cached as JSONL under ``--cache`` and reused, so stages compose):

* ``corpus``: ``--n-steal`` texts per candidate (128 tokens, ``mdlm-random-t1``: one block, random
  order, T = 1) under the victim key; candidate ``none``: the unwatermarked ones (the thief's reference). K = 8
  reads the K = 16 family's texts embedded under members 0-7 (member keys do not depend on K, so
  they are K = 8 family texts).
* ``t05``: ``--n-t05`` texts per candidate in ``llada-blocks-t0.5`` (blocks of 32, low-confidence
  remasking, T = 0.5).
* ``diversity``: 8 seeds of each of ``--n-div-prompts`` prompts under the victim key and without
  it, in both regimes, ``--div-length`` tokens: the rate at which two samples of one prompt share
  their first generated token, and the distinct texts per prompt.
* ``evaluate``: TPR at p ≤ 0.01 (the promised 1% FPR) on each regime's texts, FPR on the
  unwatermarked ones; spoof rate under the victim key and under an unrelated key of the word thief
  (``spoof-insert``, ``spoof-substitute``: document-frequency stealing) and of the pair thief
  (``spoof-pair-insert``, ``spoof-pair-substitute``, when registered) fitted on the first N ∈
  ``--ns`` texts, forging the first ``--n-human`` passages of each held-out human domain at budget
  ``--budget``, scored on their first ``--score-tokens`` tokens; the per-key null: the rate at p ≤ 0.01 over ``--n-keys`` keys on the first
  ``--n-null`` passages of each held-out domain (128 tokens each), pooled with its interval and the
  worst key's rate. Every rate has its exact (Clopper-Pearson) 95% interval.

Writes ``results-<candidates>.csv`` (this run's rows) and ``table.md`` (every results file of the
folder) under ``--out``.

    python -m benchmarks.safe_default_dev --stages corpus t05 diversity evaluate
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

#: tag → (scheme name, params); "none" is the unwatermarked model
CANDIDATES: dict[str, tuple[str, dict]] = {
    "none": ("", {}),
    "gsg-keyed": ("global-sketch-green", {"sampling": "keyed", "family": {"members": 1}}),
    "gsg-free": ("global-sketch-green", {"sampling": "free", "family": {"members": 1}}),
    "sketchfam16-normal": ("global-sketch-green", {"family": {"members": 16, "spread": "normal", "decoys": 0}}),
    "sketchfam16": ("global-sketch-green", {"family": {"members": 16}}),
    "family8-free": ("keyed-family", {"members": 8}),
    "family16-free": ("keyed-family", {"members": 16}),
    "family16-free-normal": ("keyed-family", {"members": 16, "spread": "normal"}),
    "family16-free-nospread": ("keyed-family", {"members": 16, "spread_test": False}),
    "sketch-family16": ("global-sketch-family", {}),
}
#: tags whose texts are another tag's texts embedded under members < K (or detected another way): tag → (source tag, K)
VIEWS = {"family8-free": ("family16-free", 8), "family16-free-normal": ("family16-free", 16),
         "family16-free-nospread": ("family16-free", 16), "sketchfam16": ("sketchfam16-normal", None)}
REGIMES = {
    "mdlm-random-t1": {"remasking": "random", "temperature": 1.0, "top_p": 1.0, "block": None},
    "llada-blocks-t0.5": {"remasking": "low_confidence", "temperature": 0.5, "top_p": 1.0, "block": 32},
}
ALPHA = 0.01


#: the public seed of the run's keys (:func:`sketchwm.bench.seeds.bench_key`)
KEY_SEED = "safe-default-dev"


def key(label: str):
    """The key for ``label`` (never printed): ``victim`` is the run's key 0, ``unrelated`` its unrelated
    key 0, ``null/i`` the run's key 1 + i (:func:`sketchwm.bench.seeds.bench_key`)."""
    from sketchwm.bench.seeds import bench_key

    if label == "unrelated":
        return bench_key(KEY_SEED, "unrelated-key", 0)
    return bench_key(KEY_SEED, "key", 0 if label == "victim" else 1 + int(label.split("/")[1]))


def dev_prompts() -> list[str]:
    """The development split's prompts."""
    from sketchwm.data import load_prompts

    return load_prompts("prompts-development")


def interval(k: int, n: int) -> tuple[float, float]:
    """Exact (Clopper-Pearson) 95% interval of a rate k/n."""
    from scipy.stats import binomtest

    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(int(k), int(n)).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def build(reg, tag: str, k, backend):
    """Candidate ``tag``'s scheme under key ``k`` (None for ``none``)."""
    from sketchwm.context import BuildContext

    name, params = CANDIDATES[tag]
    return reg.build("scheme", name, params, BuildContext.for_backend(backend, key=k)) if name else None


def sampler(backend, regime: str, length: int, steps: int) -> dict:
    r = REGIMES[regime]
    return {**backend.sampler_defaults, "gen_length": length, "steps": steps, "block_length": r["block"] or length,
            "remasking": r["remasking"], "temperature": r["temperature"], "top_p": r["top_p"]}


def generate(reg, backend, tag: str, file: Path, prompts: list[str], seeds: list[int], args) -> list[dict]:
    """Texts of ``tag`` for ``prompts`` (batch b of ``--batch`` prompts with seed ``seeds[b]``),
    appended to ``file`` batch by batch (a rerun continues where the file ends)."""
    from sketchwm.engine import MaskedDiffusionSampler

    done = [json.loads(x) for x in file.read_text().splitlines()] if file.exists() else []
    if len(done) >= len(prompts):
        return done[: len(prompts)]
    regime, length = file.parent.name.split("@")
    scheme = build(reg, tag, key("victim"), backend)
    engine = MaskedDiffusionSampler(backend, sampler(backend, regime, int(length), args.steps), scheme)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a") as fh:
        for b0 in range(len(done), len(prompts), args.batch):
            t0 = time.perf_counter()
            chunk = prompts[b0 : b0 + args.batch]
            out = engine.generate(chunk, torch.Generator().manual_seed(seeds[b0 // args.batch]))
            drawn = getattr(scheme, "drawn", None)
            for j, p in enumerate(chunk):
                rec = {"i": b0 + j, "prompt": p, "ids": out.ids[j, : int(out.lengths[j])].tolist()}
                if drawn is not None:
                    rec["member"] = int(drawn[j])
                fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"[{file.parent.name}/{tag}] {b0 + len(chunk)}/{len(prompts)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return [json.loads(x) for x in file.read_text().splitlines()][: len(prompts)]


def texts_of(cache: Path, regime: str, length: int, tag: str) -> list[dict]:
    """The cached texts of ``tag`` (a view's: its source's texts of members < K)."""
    src, K = VIEWS.get(tag, (tag, None))
    f = cache / f"{regime}@{length}" / f"{src}.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []
    return [r for r in recs if K is None or r["member"] < K]


def seeds_for(label: str, n: int) -> list[int]:
    return [int.from_bytes(hashlib.sha256(f"{label}/{b}".encode()).digest()[:6], "big") for b in range(n)]


def stage_corpus(reg, backend, args, regime: str, n: int, offset: int, tags: list[str]) -> None:
    prompts = dev_prompts()[offset : offset + n]
    for tag in [t for t in tags if t not in VIEWS]:
        generate(reg, backend, tag, args.cache / f"{regime}@128" / f"{tag}.jsonl", prompts,
                 seeds_for(f"{regime}/{tag}", -(-n // args.batch)), args)


def stage_diversity(reg, backend, args, tags: list[str]) -> None:
    """8 seeds × ``--n-div-prompts`` prompts per candidate and regime: batch s holds every prompt at seed s."""
    prompts = dev_prompts()[400 : 400 + args.n_div_prompts]
    for regime in REGIMES:
        for tag in tags:
            f = args.cache / f"{regime}@{args.div_length}" / f"div-{tag}.jsonl"
            old, args.batch = args.batch, len(prompts)
            try:
                generate(reg, backend, tag, f, prompts * 8, seeds_for(f"div/{regime}/{tag}", 8), args)
            finally:
                args.batch = old


def detect(scheme, backend, id_lists: list[list[int]], max_tokens: int | None = None) -> np.ndarray:
    """p-values (B,) of token-id lists (cut to ``max_tokens``)."""
    from sketchwm.detection import pad_ids

    ids, valid = pad_ids([x[:max_tokens] if max_tokens else x for x in id_lists])
    return scheme.score_ids(ids, valid).p_value.double().numpy()


def evaluate(reg, backend, args, tags: list[str]) -> list[dict]:
    from sketchwm.data import load

    rows: list[dict] = []

    def rate(tag, metric, hits, **extra):
        hits = np.asarray(hits, dtype=bool)
        lo, hi = interval(int(hits.sum()), hits.size)
        rows.append({"candidate": tag, "metric": metric, "value": float(hits.mean()) if hits.size else float("nan"),
                     "lo": lo, "hi": hi, "n": int(hits.size), **extra})
        print(f"{tag:16s} {metric:40s} {rows[-1]['value']:.3f} [{lo:.3f}, {hi:.3f}] (n={hits.size})", flush=True)

    human = {d: load(d) for d in ("heldout-manpages", "heldout-culture")}
    forge_on = human["heldout-manpages"][: args.n_human] + human["heldout-culture"][: args.n_human]
    attacks = [a for a in ("spoof-insert", "spoof-substitute", "spoof-pair-insert", "spoof-pair-substitute")
               if a in reg.names("attack")]
    none_t1 = texts_of(args.cache, "mdlm-random-t1", 128, "none")
    gen = lambda label: torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(label.encode()).digest()[:6], "big"))  # noqa: E731
    for tag in [t for t in tags if t != "none"]:
        t0 = time.perf_counter()
        victim, other = build(reg, tag, key("victim"), backend), build(reg, tag, key("unrelated"), backend)
        # power at the promised 1% FPR, and the FPR on the model's own unwatermarked texts
        for regime in REGIMES:
            wm, ref = texts_of(args.cache, regime, 128, tag), texts_of(args.cache, regime, 128, "none")
            if wm:
                rate(tag, f"tpr@p<=.01 {regime}", detect(victim, backend, [r["ids"] for r in wm]) <= ALPHA)
                rate(tag, f"fpr-unwatermarked {regime}", detect(victim, backend, [r["ids"] for r in ref]) <= ALPHA)
        # forgery: thieves fitted on the first N texts of the corpus
        corpus = texts_of(args.cache, "mdlm-random-t1", 128, tag)
        for n in [n for n in args.ns if n <= min(len(corpus), len(none_t1))]:
            wm_texts = [backend.decode(r["ids"]) for r in corpus[:n]]
            ref_texts = [backend.decode(r["ids"]) for r in none_t1[:n]]
            for attack in attacks:
                atk = reg.create("attack", attack, {"similarity": False}, backend=backend,
                                 watermarked_texts=wm_texts, reference_texts=ref_texts)
                forged = atk.apply(forge_on, args.budget, gen(f"{tag}/{attack}/{n}")).texts
                ids = [x[: args.score_tokens] for x in backend.encode(forged)]  # one length: one null law per member
                rate(tag, f"spoof {attack} N={n}", detect(victim, backend, ids) <= ALPHA, budget=args.budget)
                rate(tag, f"unrelated-key {attack} N={n}", detect(other, backend, ids) <= ALPHA, budget=args.budget)
        # the per-key null on held-out human text (128 tokens), over n_keys keys
        for dom, texts in human.items():
            ids = [x for x in backend.encode(texts[: args.n_null]) if len(x) >= 128]
            hits = np.stack([detect(build(reg, tag, key(f"null/{i}"), backend), backend, ids, 128) <= ALPHA
                             for i in range(args.n_keys)])  # (keys, texts)
            rate(tag, f"null {dom} pooled over {args.n_keys} keys", hits.ravel())
            rate(tag, f"null {dom} worst of {args.n_keys} keys", hits[int(hits.mean(1).argmax())])
        print(f"{tag}: evaluated in {time.perf_counter() - t0:.0f} s", flush=True)
    # diversity: first-token matches between the 8 samples of each prompt, and distinct texts per prompt
    for tag in tags:
        for regime in REGIMES:
            recs = texts_of(args.cache, regime, args.div_length, f"div-{tag}")
            if not recs:
                continue
            by: dict[str, list[list[int]]] = {}
            for r in recs:
                by.setdefault(r["prompt"], []).append(r["ids"])
            match = [a[0] == b[0] for samples in by.values() for i, a in enumerate(samples) for b in samples[i + 1:]]
            rate(tag, f"first-token match {regime}", match, prompts=len(by), seeds=len(recs) // max(1, len(by)))
            distinct = [len({tuple(s) for s in samples}) for samples in by.values()]
            rows.append({"candidate": tag, "metric": f"distinct of 8 {regime}", "value": float(np.mean(distinct)),
                         "lo": float(np.min(distinct)), "hi": float(np.max(distinct)), "n": len(distinct)})
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one row per metric, one column per candidate, ``value [lo, hi] (n)``."""
    import pandas as pd

    df = pd.DataFrame(rows)
    cands = [c for c in CANDIDATES if c in set(df["candidate"])]
    lines = ["| metric | " + " | ".join(cands) + " |", "|---|" + "---|" * len(cands)]
    for metric in dict.fromkeys(df["metric"]):
        cells = []
        for c in cands:
            r = df[(df["metric"] == metric) & (df["candidate"] == c)]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            if metric.startswith("distinct"):
                cells.append(f"{r['value']:.2f} (min {r['lo']:.0f}, {r['n']} prompts)")
            else:
                cells.append(f"{r['value']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] ({r['n']})")
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", nargs="+", default=["corpus", "t05", "diversity", "evaluate"],
                    choices=["corpus", "t05", "diversity", "evaluate"])
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    ap.add_argument("--n-steal", type=int, default=200)
    ap.add_argument("--n-t05", type=int, default=48)
    ap.add_argument("--n-div-prompts", type=int, default=6)
    ap.add_argument("--div-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=32, help="denoising steps of every generation")
    ap.add_argument("--ns", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--n-human", type=int, default=100)
    ap.add_argument("--n-null", type=int, default=100)
    ap.add_argument("--n-keys", type=int, default=10)
    ap.add_argument("--budget", type=float, default=0.2)
    ap.add_argument("--score-tokens", type=int, default=190, help="forged passages are scored on their first tokens")
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("SKETCHWM_CACHE_DIR") or Path.home() / ".cache" / "sketchwm") / "safe_default_dev")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/safe_default_dev"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from sketchwm.registry import get_registry

    reg = get_registry()
    backend = reg.build("backend", "default")
    tags = args.candidates
    if "corpus" in args.stages:
        stage_corpus(reg, backend, args, "mdlm-random-t1", args.n_steal, 0, tags)
    if "t05" in args.stages:
        stage_corpus(reg, backend, args, "llada-blocks-t0.5", args.n_t05, 200, tags)
    if "diversity" in args.stages:
        stage_diversity(reg, backend, args, tags)
    if "evaluate" in args.stages:
        rows = evaluate(reg, backend, args, tags)
        args.out.mkdir(parents=True, exist_ok=True)
        import pandas as pd

        # runs compose: each run writes the rows of its candidates to its own file, the table reads them all
        pd.DataFrame(rows).to_csv(args.out / f"results-{'+'.join(tags)}.csv", index=False)
        df = pd.concat([pd.read_csv(f) for f in sorted(args.out.glob("results-*.csv"))], ignore_index=True)
        head = (f"Development split (`prompts-development`), default model, {args.steps} denoising steps, 128 tokens; "
                f"spoof budget {args.budget:g} of the passage's words on {2 * args.n_human} held-out passages "
                f"(their first {args.score_tokens} tokens scored); "
                f"null over {args.n_keys} keys on {args.n_null} passages per held-out domain (128 tokens); "
                f"rates at p ≤ {ALPHA:g} with exact 95% intervals and their counts. Runs:\n\n")
        cmd = "python -m benchmarks.safe_default_dev " + " ".join(argv if argv is not None else sys.argv[1:])
        runs = [r for r in (args.out / "runs.txt").read_text().splitlines() if r != cmd] if (args.out / "runs.txt").exists() else []
        (args.out / "runs.txt").write_text("\n".join(runs + [cmd]) + "\n")
        head += "".join(f"    {r}\n" for r in runs + [cmd]) + "\n"
        (args.out / "table.md").write_text(head + table(df.to_dict("records")))
        print(table(df.to_dict("records")))


if __name__ == "__main__":
    main()
