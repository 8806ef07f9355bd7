"""Watermark stealing at scale: spoof rate, scrub rate and unrelated-key flags vs stolen-sample count N.

``generate``: per scheme, ``--n-max`` texts of the default DLM (128 tokens, its shipped sampler)
watermarked under one victim key (prompts 0..n-1), and ``--n-max`` unwatermarked samples of the
same open model (same prompts, other seeds): the thief's reference. Texts are appended batch by
batch to JSONL files under ``--cache`` (resumable: a rerun continues where a file ends; the folder
names the victim key's fingerprint). Keys are the harness's (``sketchwm.bench.seeds.bench_key``) of
key seed ``--seed``: the victim is the run's key 0, the unrelated key its first unrelated key, so
runs are reproducible. For the key
family each record also holds the member its text was embedded under (ground truth for the
adaptive thief's clustering, never used by a thief).

``evaluate``: for each scheme with texts and each N of ``--ns`` available (the first N texts of
both files: N watermarked, N unwatermarked; generated texts are reused across N), fit the
document-frequency thief (:mod:`sketchwm_attacks.forgery`) and forge the first ``--n-human``
passages of each shipped held-out human domain (``heldout-manpages``, ``heldout-culture``; text no
model produced) with the registered ``spoof-insert`` and ``spoof-substitute`` at budget
``--budget`` (edited words / words), and, for the key family, with the adaptive thief
(``clusters`` = K). Reported per cell: the spoof rate (forged passages with p ≤ ``--alpha`` under
the victim key) with a percentile-bootstrap 95% interval, the same under an unrelated key. Also:
the *oracle mixture* thief (it ranks tokens by the family's exact mean boost (1/K)Σ_i c_i(v): the
limit N → ∞ of every thief that does not tell the members apart) and the *oracle member* thief
(member 0's exact c_0(v): an adaptive thief with perfect clustering); the generation spoofer
(``WatermarkStealer.spoof``, the unwatermarked model with stolen logit boosts) at the largest N;
the scrub rate of ``steal-scrub`` (strength ``--scrub-strength``, stealer of the first half of
the texts, applied to texts of the other half); and the price of the defence: TPR at p ≤ α and
median tokens-to-detect of the watermarked texts of each scheme (prefixes of 4, 8, …, 128
tokens) and on the first 16 and 32 tokens, FPR on the unwatermarked ones, and the TPR after ``flood-token`` (``--flood``). Writes ``results.csv`` (one long table),
``tables.md`` (its Markdown tables), ``summary.json`` and ``spoof_vs_n.png`` under ``--out``; runs compose (a run replaces the rows of
the schemes it evaluates and keeps the others, and the plot is redrawn from the whole table).

    python benchmarks/stealing.py generate --schemes none global-sketch --n-max 1000
    python benchmarks/stealing.py evaluate --out benchmarks/stealing
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from sketchwm.bench.bootstrap import bootstrap_interval
from sketchwm.bench.seeds import derive_seed

#: scheme tag -> (registered scheme name, params); "none" is the unwatermarked model
SCHEMES: dict[str, tuple[str, dict]] = {
    "none": ("", {}),
    "global-sketch": ("global-sketch", {}),
    "red-green-dlm": ("red-green-dlm", {}),
    "unigram": ("unigram", {}),
    "family-16": ("global-sketch-family", {"members": 16}),
    "family-16-normal": ("global-sketch-family", {"members": 16, "spread": "normal"}),
    "family-16-nodecoy": ("global-sketch-family", {"members": 16, "decoys": 0}),
    "family-8": ("global-sketch-family", {"members": 8}),
    "family-8-normal": ("global-sketch-family", {"members": 8, "spread": "normal"}),
    "family-4": ("global-sketch-family", {"members": 4}),
}
#: schemes whose texts are a subset of another's: a K-member family is the first K members of a
#: larger one (member keys do not depend on K), so its texts are those embedded under members < K;
#: the ``-normal`` and ``-nodecoy`` tags detect the same texts with the unit-noise spread test or without decoys
VIEWS: dict[str, tuple[str, int]] = {"family-16-normal": ("family-16", 16), "family-16-nodecoy": ("family-16", 16),
                                     "family-8": ("family-16", 8),
                                     "family-8-normal": ("family-16", 8), "family-4": ("family-16", 4)}


def victim_key(seed: int, role: str = "victim"):
    """The benchmark's key for ``role``: ``victim``, the harness's key 0 of key seed ``seed``, or
    ``unrelated``, that key's first unrelated key (:func:`sketchwm.bench.seeds.bench_key`)."""
    from sketchwm.bench.seeds import bench_key

    return bench_key(str(seed), "key", 0) if role == "victim" else bench_key(str(seed), "unrelated-key", 0, 0)


def default_cache() -> Path:
    """``$SKETCHWM_CACHE_DIR/stealing`` (or ``~/.cache/sketchwm/stealing``)."""
    root = os.environ.get("SKETCHWM_CACHE_DIR") or str(Path.home() / ".cache" / "sketchwm")
    return Path(root) / "stealing"


def texts_path(cache: Path, seed: int, tag: str, length: int = 128, steps: int | None = None) -> Path:
    """The generation file of scheme ``tag``: ``cache/seed{seed}-{fp}/{tag}.jsonl`` (128 tokens, the
    sampler's steps) or ``cache/seed{seed}-{fp}/L{length}[s{steps}]/{tag}.jsonl``, ``fp`` the first 12
    characters of the victim key's fingerprint (texts of another key are never read back)."""
    sub = ("" if length == 128 else f"L{length}") + ("" if steps is None else f"s{steps}")
    return cache / f"seed{seed}-{victim_key(seed).fingerprint[:12]}" / sub / f"{tag}.jsonl"


def read_texts(path: Path) -> list[dict]:
    """Records ``{"i", "prompt", "text", "ids"}`` of a generation file ([] when absent)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def generate(tag: str, n: int, seed: int, cache: Path, batch_size: int, length: int = 128,
             steps: int | None = None) -> list[dict]:
    """Generate (or continue generating) ``n`` texts of ``length`` tokens (``steps`` denoising steps;
    None: the sampler's default) for scheme ``tag``; returns the records."""
    from sketchwm.api import Watermarker
    from sketchwm.data import load_prompts

    name, params = SCHEMES[tag]
    path = texts_path(cache, seed, tag, length, steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_texts(path)
    if len(done) >= n:
        return done[:n]
    prompts = load_prompts("prompts", n)
    wm = Watermarker(victim_key(seed), {"scheme": {"name": name or "global-sketch", "params": params},
                                        "sampler": sampler_settings(length, steps)})
    with path.open("a") as fh:
        for b0 in range(len(done), n, batch_size):
            t0 = time.perf_counter()
            chunk = prompts[b0 : b0 + batch_size]
            batch_seed = derive_seed(seed, tag, b0)
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


def sampler_settings(length: int, steps: int | None) -> dict:
    """The sampler overrides of a run: ``gen_length`` and, when given, ``steps``."""
    return {"gen_length": length, **({} if steps is None else {"steps": steps})}


class OracleStealer:
    """A 'stealer' that knows exact per-token boosts (V,) (the oracle thieves of the module doc)."""

    def __init__(self, token_score: torch.Tensor, n: int = 0):
        self.token_score, self.n_watermarked = token_score.double(), n

    def ranked(self, k: int | None = None) -> torch.Tensor:
        from sketchwm_attacks.forgery import top_positive

        return top_positive(self.token_score, k)


def evaluate(args: argparse.Namespace, cache: Path) -> dict:
    """The ``evaluate`` sub-command (module doc)."""
    import numpy as np
    import pandas as pd

    from sketchwm.data import load
    from sketchwm.detection import pad_ids
    from sketchwm.registry import get_registry
    from sketchwm_attacks.forgery import ClusteredStealer, DocFrequencyStealer

    t_start = time.perf_counter()
    reg = get_registry()
    backend = reg.build("backend", "default")
    V = backend.vocab_size
    human = []
    for dom in ("heldout-manpages", "heldout-culture"):
        human += load(dom)[: args.n_human]
    none = read_texts(texts_path(cache, args.seed, "none", args.length, args.steps))
    rows: list[dict] = []
    gen = lambda tag: torch.Generator().manual_seed(derive_seed(tag))  # noqa: E731

    def ids_of(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return pad_ids([x if x else [0] for x in backend.encode(texts)])

    def flagged(scheme, texts: list[str]) -> "np.ndarray":
        ids, valid = ids_of(texts)
        if args.score_tokens:  # the first score_tokens tokens of each text (one exact null law per length)
            ids, valid = ids[:, : args.score_tokens], valid[:, : args.score_tokens]
        return (scheme.score_ids(ids, valid).p_value.double() <= args.alpha).numpy()

    def record(tag, thief, n, metric, hits, **extra):
        rate, lo, hi = bootstrap_interval(hits, seed=len(rows))
        rows.append({"scheme": tag, "thief": thief, "n_stolen": n, "budget": args.budget, "metric": metric,
                     "value": rate, "lo": lo, "hi": hi, "n": int(np.asarray(hits).size), **extra})
        print(f"{tag:14s} {thief:22s} N={n:5d} {metric:18s} {rate:6.3f} [{lo:.3f}, {hi:.3f}] (n={np.asarray(hits).size})",
              flush=True)

    spoof_cache: dict[tuple, list[str]] = {}
    forged_cache: dict[tuple, list[str]] = {}
    shared: dict[str, object] = {}
    for tag in args.schemes:
        name, params = SCHEMES[tag]
        if tag in VIEWS:
            src, k = VIEWS[tag]
            pool = [r for r in read_texts(texts_path(cache, args.seed, src, args.length, args.steps)) if r["member"] < k]
        else:
            pool = read_texts(texts_path(cache, args.seed, tag, args.length, args.steps))
        if not pool:
            print(f"{tag}: no generated texts under {cache}; skipped", flush=True)
            continue
        victim = reg.create("scheme", name, params, victim_key(args.seed), V)
        other = reg.create("scheme", name, params, victim_key(args.seed, "unrelated"), V)
        for role, sch in (("victim", victim), ("unrelated", other)):  # families of one key share members and decoys
            if hasattr(sch, "members"):  # (same keys and params: their exact null laws are built once)
                prev = shared.setdefault(role, sch)
                sch.members = prev.members[: len(sch.members)] if len(prev.members) >= len(sch.members) else sch.members
                sch.decoys = prev.decoys[: len(sch.decoys)] if len(prev.decoys) >= len(sch.decoys) else sch.decoys
        family = getattr(victim, "members", None)
        K = len(family) if family else 0
        pool_id = VIEWS.get(tag, (tag, K))  # tags on the same texts share the forged and spoofed texts
        # the price: clean power and tokens-to-detect, FPR on the unwatermarked samples
        wm_texts = [r["text"] for r in pool[: args.n_power]]
        if args.n_power:  # (--n-power 0 skips it)
            record(tag, "none", 0, "tpr", flagged(victim, wm_texts))
            record(tag, "none", 0, "fpr-unwatermarked", flagged(victim, [r["text"] for r in none[: args.n_power]]))
            ids, valid = ids_of(wm_texts)
            lengths = list(range(4, 129, 4))
            det = torch.stack([victim.score_ids(ids[:, :L], valid[:, :L]).p_value <= args.alpha for L in lengths])  # (L, B)
            for L in (16, 32):  # power on short prefixes, where the family's correction costs
                record(tag, "none", 0, f"tpr@{L}-tokens", det[lengths.index(L)].numpy())
            first = torch.where(det.any(0), torch.tensor(lengths, dtype=torch.float64)[det.int().argmax(0)],
                                torch.tensor(float("inf"), dtype=torch.float64))
            rows.append({"scheme": tag, "thief": "none", "n_stolen": 0, "budget": 0.0, "metric": "median-tokens-to-detect",
                         "value": float(first.median()), "lo": float("nan"), "hi": float("nan"), "n": len(wm_texts)})
            print(f"{tag:14s} median tokens-to-detect {float(first.median())} (n={len(wm_texts)})", flush=True)
            for strength in args.flood:  # flood robustness: one repeated token (registered flood-token)
                atk = reg.create("attack", "flood-token", {"similarity": False})
                record(tag, f"flood-token@{strength:g}", 0, "tpr-after-attack",
                       flagged(victim, atk.apply(wm_texts, strength, gen(f"{tag}/flood/{strength}")).texts))
        ns = sorted({n for n in args.ns if n <= min(len(pool), len(none))} | ({min(len(pool), len(none))} if args.include_max else set()))
        for n in ns:
            w_ids, r_ids = [r["ids"] for r in pool[:n]], [r["ids"] for r in none[:n]]
            thieves = {"doc-frequency": DocFrequencyStealer(V).fit(w_ids, r_ids)}
            if K > 1:
                cl = ClusteredStealer(V, K, seed=args.seed).fit(w_ids, r_ids)
                thieves[f"adaptive-{K}"] = cl
                truth = np.array([r.get("member", -1) for r in pool[:n]])
                ct = pd.crosstab(cl.labels.numpy(), truth)
                purity = float(ct.to_numpy().max(1).sum() / n)
                rows.append({"scheme": tag, "thief": f"adaptive-{K}", "n_stolen": n, "budget": 0.0,
                             "metric": "cluster-purity", "value": purity, "lo": float("nan"), "hi": float("nan"), "n": n})
                print(f"{tag:14s} adaptive clustering purity at N={n}: {purity:.3f}", flush=True)
            for thief, st in thieves.items():
                for attack in ("spoof-insert", "spoof-substitute"):
                    def forge() -> list[str]:
                        atk = reg.create("attack", attack, {"similarity": False}, backend=backend, stealer=st)
                        return atk.apply(human, args.budget, gen(f"{pool_id[0]}/{thief}/{n}/{attack}")).texts
                    key = (*pool_id, thief, n, attack)  # tags on the same texts forge once
                    forged = forged_cache[key] = forged_cache.get(key) or forge()
                    record(tag, f"{thief}/{attack}", n, "spoof-rate", flagged(victim, forged))
                    record(tag, f"{thief}/{attack}", n, "unrelated-key-rate", flagged(other, forged))
        if family:  # oracle thieves: N → ∞ without / with telling the members apart
            c = torch.stack([m.token_weights() for m in family])  # (K, V)
            keep = family[0].sketch.keep_table()[:V].bool()
            oracles = {"oracle-mixture": c.mean(0), "oracle-member": c[0]}
            for thief, score in oracles.items():
                st = OracleStealer(torch.where(keep, score, torch.zeros_like(score)))
                def forge() -> list[str]:
                    atk = reg.create("attack", "spoof-insert", {"similarity": False}, backend=backend, stealer=st)
                    return atk.apply(human, args.budget, gen(f"{pool_id[0]}/{thief}")).texts
                key = (*pool_id, thief)
                forged = forged_cache[key] = forged_cache.get(key) or forge()
                record(tag, f"{thief}/spoof-insert", 0, "spoof-rate", flagged(victim, forged))
                record(tag, f"{thief}/spoof-insert", 0, "unrelated-key-rate", flagged(other, forged))
        gen_ns = [n for n in (args.gen_spoof_ns or ns[-1:]) if n in ns] if args.n_gen_spoof else []
        for n in gen_ns:  # the generation spoofer (default: at the largest N)
            from sketchwm.data import load_prompts
            from sketchwm_attacks.stealing import WatermarkStealer

            prompts = load_prompts("prompts", args.n_gen_spoof, offset=len(load_prompts("prompts")) - args.n_gen_spoof)
            for cw in args.spoof_context_weights:  # 1: the stealer's default (per-token and left-neighbour boosts)
                def spoofs() -> list[str]:
                    ws = WatermarkStealer(V, {"context_weight": cw}).fit([r["ids"] for r in pool[:n]], [r["ids"] for r in none[:n]])
                    return ws.spoof(backend, prompts, gen(f"{pool_id[0]}/gen-spoof/{n}"), delta=args.spoof_delta,
                                    sampler_config=sampler_settings(args.length, args.steps)).texts
                key = (*pool_id, n, cw)
                texts = spoof_cache[key] = spoof_cache.get(key) or spoofs()
                thief = "generation-spoofer" + ("" if cw == 1.0 else f" (context_weight={cw:g})")
                record(tag, thief, n, "spoof-rate", flagged(victim, texts))
                record(tag, thief, n, "unrelated-key-rate", flagged(other, texts))
        if args.n_scrub and len(pool) >= 2 * args.n_scrub and tag not in VIEWS:  # steal-scrub: stealer of the first half, targets of the second
            n = len(pool) // 2
            targets = [r["text"] for r in pool[n : n + args.n_scrub]]
            before = flagged(victim, targets)
            atk = reg.create("attack", "steal-scrub", {"similarity": False}, backend=backend,
                             watermarked_texts=[r["text"] for r in pool[:n]], reference_texts=[r["text"] for r in none[:n]])
            after = flagged(victim, atk.apply(targets, args.scrub_strength, gen(f"{tag}/scrub")).texts)
            record(tag, f"steal-scrub@{args.scrub_strength:g}", n, "scrub-rate", (~after[before]).astype(float))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    if (out / "results.csv").exists():  # runs compose: this run's schemes replace their rows of earlier runs
        old = pd.read_csv(out / "results.csv")
        df = pd.concat([old[~old["scheme"].isin(df["scheme"].unique())], df], ignore_index=True)
    df.to_csv(out / "results.csv", index=False)
    plot_spoof_vs_n(df, out / "spoof_vs_n.png")
    (out / "tables.md").write_text(tables(df))
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    run = {"command": "python benchmarks/stealing.py " + " ".join(sys.argv[1:]), "schemes": sorted(set(r["scheme"] for r in rows)),
           "seconds": round(time.perf_counter() - t_start, 1), "alpha": args.alpha, "budget": args.budget,
           "n_human": 2 * args.n_human, "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    runs = json.loads((out / "summary.json").read_text())["runs"] if (out / "summary.json").exists() else []
    runs = [r for r in runs if not set(r["schemes"]) <= set(run["schemes"])] + [run]
    (out / "summary.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    print(json.dumps(run))
    return run


def price(args: argparse.Namespace, cache: Path) -> dict:
    """The ``price`` sub-command: the defence's cost in power on the *same* texts.

    A text of the family is a ``global-sketch`` text under the member key it drew (same params, so
    the same KL/token by construction). ``--n-power`` texts of ``--length`` tokens are generated
    with ``global-sketch`` under the victim's member-0 key and scored twice: by ``global-sketch``
    under that key (the undefended default) and by the family (``--members``, each spread test)
    under the victim key. Reported: TPR at p ≤ ``--alpha``, the TPR on the first 16 and 32 tokens,
    the median tokens-to-detect (prefixes 4, 8, …), and the FPR on ``--n-null`` unwatermarked
    samples of the same length (``none`` generation file, generated when missing; 0 skips it).
    """
    import numpy as np

    from sketchwm.detection import pad_ids
    from sketchwm.registry import get_registry
    from sketchwm_builtin.key_family import member_key

    reg = get_registry()
    backend = reg.build("backend", "default")
    V = backend.vocab_size
    key0 = member_key(victim_key(args.seed), 0)
    SCHEMES["member-0"] = ("global-sketch", {})
    path = texts_path(cache, args.seed, "member-0", args.length, args.steps)
    if len(read_texts(path)) < args.n_power:  # generate under the member key (not the victim key)
        from sketchwm.api import Watermarker
        from sketchwm.data import load_prompts

        done = read_texts(path)
        prompts = load_prompts("prompts", args.n_power)
        wm = Watermarker(key0, {"scheme": {"name": "global-sketch"}, "sampler": sampler_settings(args.length, args.steps)})
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            for b0 in range(len(done), args.n_power, args.batch_size):
                chunk = prompts[b0: b0 + args.batch_size]
                bs = derive_seed(args.seed, "member-0", b0)
                out = wm.generate(chunk, seed=bs, batch_size=args.batch_size)
                for j, (pr, t) in enumerate(zip(chunk, out.texts)):
                    fh.write(json.dumps({"i": b0 + j, "prompt": pr, "text": t, "ids": out.ids[j, : int(out.lengths[j])].tolist()}) + "\n")
                fh.flush()
                print(f"[member-0] {b0 + len(chunk)}/{args.n_power} texts", flush=True)
    texts = [r["ids"] for r in read_texts(path)[: args.n_power]]
    none = [r["ids"] for r in generate("none", args.n_null, args.seed, cache, args.batch_size, args.length, args.steps)] if args.n_null else []
    detectors = {"global-sketch (member key)": reg.create("scheme", "global-sketch", {}, key0, V)}
    for variant in args.spreads:  # "student" (default decoys), "student:M" (M decoys) or "normal"
        spread, _, m = variant.partition(":")
        extra = {"decoys": int(m)} if m else {}
        detectors[f"family-{args.members} ({variant})"] = reg.create(
            "scheme", "global-sketch-family", {"members": args.members, "spread": spread, **extra}, victim_key(args.seed), V)
    ids, valid = pad_ids(texts)
    nids, nvalid = pad_ids(none) if none else (None, None)
    lengths = list(range(4, args.length + 1, 4))
    res = {}
    for name, det in detectors.items():
        flag = lambda i, v: (det.score_ids(i, v).p_value.double() <= args.alpha).numpy()  # noqa: E731
        hits = np.stack([flag(ids[:, :L], valid[:, :L]) for L in lengths])  # (L, B)
        first = np.where(hits.any(0), np.array(lengths)[hits.argmax(0)], np.inf)
        row = {"tpr": bootstrap_interval(hits[-1]), "tpr@16": bootstrap_interval(hits[lengths.index(16)]),
               "tpr@32": bootstrap_interval(hits[lengths.index(32)]), "median-tokens-to-detect": float(np.median(first)),
               "fpr": bootstrap_interval(flag(nids, nvalid) if none else []), "n": len(texts), "n_null": len(none)}
        res[name] = row
        print(f"{name:32s} TPR@{args.length} {row['tpr'][0]:.3f} [{row['tpr'][1]:.3f}, {row['tpr'][2]:.3f}]  "
              f"TPR@16 {row['tpr@16'][0]:.3f} [{row['tpr@16'][1]:.3f}, {row['tpr@16'][2]:.3f}]  "
              f"TPR@32 {row['tpr@32'][0]:.3f} [{row['tpr@32'][1]:.3f}, {row['tpr@32'][2]:.3f}]  "
              f"median tokens-to-detect {row['median-tokens-to-detect']:g}  FPR {row['fpr'][0]:.3f} (n={len(texts)}, {len(none)})",
              flush=True)
    print(json.dumps({"command": "python benchmarks/stealing.py " + " ".join(sys.argv[1:]), "alpha": args.alpha,
                      "length": args.length, "steps": args.steps, "results": res}))
    return res


def tables(df) -> str:
    """Markdown tables of a results table: spoof and unrelated-key rates per scheme, thief and N; the
    price of each scheme (power, tokens-to-detect, FPR, flooding); scrub rates and cluster purity."""
    def cell(r) -> str:
        if r["lo"] != r["lo"]:  # NaN: no interval
            return f"{r['value']:.3g}"
        return f"{r['value']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"

    out = []
    sp = df[df["metric"].isin(["spoof-rate", "unrelated-key-rate"])].copy()
    sp["N"] = sp["n_stolen"].map(lambda n: "∞ (oracle)" if n == 0 else str(n))
    out.append("| scheme | thief | N | spoof rate [95% CI] | unrelated-key rate [95% CI] | n |")
    out.append("|---|---|---|---|---|---|")
    for (tag, thief, n), g in sp.groupby(["scheme", "thief", "n_stolen"], sort=True):
        by = {m: r for m, r in zip(g["metric"], g.to_dict("records"))}
        s, u = by.get("spoof-rate"), by.get("unrelated-key-rate")
        out.append(f"| {tag} | {thief} | {'∞ (oracle)' if n == 0 else n} | {cell(s) if s else ''} | {cell(u) if u else ''} | "
                   f"{int(s['n']) if s else ''} |")
    out.append("")
    price = ["tpr", "tpr@16-tokens", "tpr@32-tokens", "median-tokens-to-detect", "fpr-unwatermarked", "tpr-after-attack"]
    pr = df[df["metric"].isin(price)]
    out.append("| scheme | TPR (128 tokens, p ≤ α) | TPR (16 tokens) | TPR (32 tokens) | median tokens-to-detect | "
               "FPR (unwatermarked) | TPR after flood-token 0.5 | n |")
    out.append("|---|---|---|---|---|---|---|---|")
    for tag, g in pr.groupby("scheme", sort=True):
        by = {m: r for m, r in zip(g["metric"], g.to_dict("records"))}
        out.append(f"| {tag} | " + " | ".join(cell(by[m]) if m in by else "" for m in price) + f" | {int(by['tpr']['n'])} |")
    out.append("")
    other = df[df["metric"].isin(["scrub-rate", "cluster-purity"])]
    if len(other):
        out.append("| scheme | what | N | value | n |")
        out.append("|---|---|---|---|---|")
        for r in other.sort_values(["metric", "scheme", "n_stolen"]).to_dict("records"):
            out.append(f"| {r['scheme']} | {r['metric']} ({r['thief']}) | {r['n_stolen']} | {cell(r)} | {r['n']} |")
    return "\n".join(out) + "\n"


def plot_spoof_vs_n(df, path: Path) -> None:
    """Spoof rate vs N (log x) per scheme and thief, with the bootstrap intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sp = df[(df["metric"] == "spoof-rate") & (df["n_stolen"] > 0)]
    thieves = sorted(sp["thief"].unique())
    ncols = min(4, max(1, len(thieves)))
    nrows = -(-max(1, len(thieves)) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False, sharey=True)
    for ax in axes.flat[len(thieves):]:
        ax.set_visible(False)
    for ax, thief in zip(axes.flat, thieves):
        for tag, g in sp[sp["thief"] == thief].groupby("scheme"):
            g = g.sort_values("n_stolen")
            ax.errorbar(g["n_stolen"], g["value"], yerr=[g["value"] - g["lo"], g["hi"] - g["value"]], marker="o",
                        capsize=3, label=tag)
        ax.set_xscale("log")
        ax.set_title(thief, fontsize=9)
        ax.set_xlabel("stolen texts N")
        ax.axhline(0.05, color="grey", lw=0.8, ls="--")
        ax.legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel("spoof rate (p <= alpha, victim key)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate the watermarked and unwatermarked texts")
    g.add_argument("--schemes", nargs="+", default=[t for t in SCHEMES if t not in VIEWS],
                   choices=[t for t in SCHEMES if t not in VIEWS])
    g.add_argument("--n-max", type=int, default=1000)
    g.add_argument("--batch-size", type=int, default=25)
    e = sub.add_parser("evaluate", help="fit the thieves, forge human passages, score (module doc)")
    e.add_argument("--schemes", nargs="+", default=[t for t in SCHEMES if t != "none"], choices=[t for t in SCHEMES if t != "none"])
    e.add_argument("--ns", type=int, nargs="+", default=[50, 200, 1000])
    e.add_argument("--include-max", action="store_true", help="also evaluate at the largest N the files hold")
    e.add_argument("--budget", type=float, default=0.2, help="edited words / words of each forged passage")
    e.add_argument("--n-human", type=int, default=100, help="passages per held-out domain to forge")
    e.add_argument("--alpha", type=float, default=0.01)
    e.add_argument("--score-tokens", type=int, default=0,
                   help="score only the first this many tokens of each text (0: all); fewer distinct lengths, "
                        "fewer exact null laws to build (the key family scores 48 keys)")
    e.add_argument("--n-power", type=int, default=200, help="watermarked / unwatermarked texts for TPR, FPR, tokens-to-detect")
    e.add_argument("--n-gen-spoof", type=int, default=0, help="texts of the generation spoofer (0: skip)")
    e.add_argument("--gen-spoof-ns", type=int, nargs="*", default=None,
                   help="stolen-text counts N of the generation spoofer (default: the largest N evaluated)")
    e.add_argument("--spoof-delta", type=float, default=4.0)
    e.add_argument("--spoof-context-weights", type=float, nargs="+", default=[1.0],
                   help="context_weight of the generation spoofer's stealer (1: its default; 0: per-token boosts only)")
    e.add_argument("--n-scrub", type=int, default=0, help="texts to scrub (0: skip)")
    e.add_argument("--scrub-strength", type=float, default=0.3)
    e.add_argument("--flood", type=float, nargs="*", default=[0.5], help="flood-token strengths for the TPR after flooding")
    e.add_argument("--out", default="benchmarks/stealing")
    pp = sub.add_parser("price", help="power of the family vs the undefended default on the same texts (price doc)")
    pp.add_argument("--n-power", type=int, default=100)
    pp.add_argument("--n-null", type=int, default=100, help="unwatermarked texts for the FPR (0: skip)")
    pp.add_argument("--members", type=int, default=16)
    pp.add_argument("--spreads", nargs="+", default=["student", "student:0", "normal"],
                    help="spread tests of the family: student (default decoys), student:M (M decoys), normal")
    pp.add_argument("--alpha", type=float, default=0.01)
    pp.add_argument("--batch-size", type=int, default=25)
    t = sub.add_parser("tables", help="rewrite tables.md and the plot from an existing results.csv")
    t.add_argument("--out", default="benchmarks/stealing")
    for p in (g, e, t, pp):
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--cache", type=Path, default=None)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--length", type=int, default=128, help="tokens per generated text (its own cache folder)")
        p.add_argument("--steps", type=int, default=None, help="denoising steps (default: the sampler's)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = args.cache or default_cache()
    if args.cmd == "generate":
        for tag in args.schemes:
            generate(tag, args.n_max, args.seed, cache, args.batch_size, args.length, args.steps)
        return {}
    if args.cmd == "price":
        return price(args, cache)
    if args.cmd == "tables":
        import pandas as pd

        df = pd.read_csv(Path(args.out) / "results.csv")
        (Path(args.out) / "tables.md").write_text(tables(df))
        plot_spoof_vs_n(df, Path(args.out) / "spoof_vs_n.png")
        return {}
    return evaluate(args, cache)


if __name__ == "__main__":
    main(sys.argv[1:])
