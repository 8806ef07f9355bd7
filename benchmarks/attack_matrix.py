"""Attack matrix: how each watermark survives each attack (issue 5, "Must show").

For every registered watermark scheme (or those given with ``--schemes``) on the default model:

1. generate ``--n-texts`` watermarked texts of ``--gen-length`` tokens (default 100 x 128) and as
   many unwatermarked texts from other prompts; the detection threshold τ is sketchwm's one
   decision rule, max(conformal (1 - α) quantile of the scheme's score on the unwatermarked texts,
   the scheme's analytic τ_α) (:func:`sketchwm.stats.decision_threshold`), so FPR <= 1% on clean text;
2. apply every registered attack (or ``--attacks``) at strengths 0.1 / 0.3 / 0.5 and record the
   TPR (fraction of attacked texts scoring above τ), mean semantic similarity to the original,
   mean edit fraction and mean token Levenshtein distance;
3. watermark stealing (Jovanović et al. 2024): for n in ``--steal-n`` (default 100 and 1000), fit
   :class:`sketchwm_attacks.WatermarkStealer` on n watermarked texts (other prompts) against n
   unwatermarked texts, then report the **spoof rate** (fraction of boosted unwatermarked
   generations detected at 1% FPR) and the **scrub rate** (fraction of detected watermarked texts
   no longer detected after ``steal-scrub``) at the same strengths. Control: the same spoofed
   texts scored by the scheme under an unrelated key (its own threshold from the same
   unwatermarked texts), ``spoof_rate_other_key``. A spoof that learned the key is detected under
   the key only; one that merely fools the detector (e.g. with repetitive text) also under the
   other key. ``--strengths`` with no values skips the scrub step.

Output: a long CSV (``scheme, backend, attack, strength, metric, value, n, train_n, seed,
config_hash, package_version``) and a printed table (TPR / similarity per strength).
Generations are cached under ``<out dir>/cache`` (keyed by a config hash), so re-running with
other attacks does not regenerate.

Usage::

    python benchmarks/attack_matrix.py                       # full run (hours on a 2-core CPU)
    python benchmarks/attack_matrix.py --quick               # 20 texts, steal n = 50/200, no SmolLM2
    python benchmarks/attack_matrix.py --steal-n             # no stealing
    python benchmarks/attack_matrix.py --attacks none        # stealing only
    python benchmarks/attack_matrix.py --n-texts 50 --schemes global-sketch unigram --steal-n 100
    python benchmarks/attack_matrix.py --attacks none --steal-n 100 --schemes global-sketch global-sketch#g25 \
        --params '{"global-sketch#g25": {"score": {"name": "penalized", "params": {"gamma": 0.25}}}}'

A scheme may be listed under tagged names ``NAME#TAG`` (rows and caches carry the tag, params are
NAME's ``--params`` with the tag's on top), to compare settings of one scheme in one table.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from sketchwm.config import config_hash
from sketchwm.detection import pad_ids, scheme_analytic_threshold
from sketchwm.stats import decision_threshold
from sketchwm.registry import get_registry

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "out" / "attack_matrix.csv"
HEAVY_ATTACKS = {"paraphrase-smollm2"}
STEAL_ATTACK = "steal-scrub"


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _package_version() -> str:
    try:
        import sketchwm

        return str(getattr(sketchwm, "__version__", "unknown"))
    except ImportError:
        return "unknown"


class Generations:
    """Generate (or load cached) texts for a scheme / the base model."""

    def __init__(self, backend: Any, key: Any, sampler: dict, cache_dir: Path, batch_size: int,
                 params: dict[str, dict] | None = None):
        self.backend, self.key, self.sampler = backend, key, sampler
        self.params = params or {}
        self.cache_dir, self.batch_size = cache_dir, batch_size
        cache_dir.mkdir(parents=True, exist_ok=True)

    def scheme_params(self, scheme: str) -> dict:
        """``--params`` of ``scheme``; a tagged name ``NAME#TAG`` takes NAME's, then its own on top."""
        base = scheme.split("#", 1)[0]
        if base == scheme:
            return dict(self.params.get(scheme, {}))
        return {**self.params.get(base, {}), **self.params.get(scheme, {})}

    def watermarker(self, scheme: str, key: Any = None) -> Any:
        """A :class:`sketchwm.api.Watermarker` for ``scheme`` with this run's key (or ``key``), backend and sampler."""
        from sketchwm.api import Watermarker

        spec = {"name": scheme.split("#", 1)[0], "params": self.scheme_params(scheme)}
        return Watermarker(key or self.key, {"scheme": spec, "sampler": self.sampler}, backend=self.backend)

    def get(self, scheme: str | None, prompts: Sequence[str], seed: int, label: str) -> list[str]:
        """Texts for ``prompts`` (watermarked by ``scheme``, or unwatermarked when None)."""
        tag = config_hash({
            "scheme": scheme, "params": self.scheme_params(scheme) if scheme else {}, "key": self.key.fingerprint, "model": getattr(self.backend, "model_id", ""),
            "sampler": self.sampler, "seed": seed, "prompts": hashlib.sha256("\n".join(prompts).encode()).hexdigest(),
        })
        path = self.cache_dir / f"{label}-{scheme or 'base'}-{len(prompts)}-{tag}.jsonl"
        if path.exists():
            texts = [json.loads(l)["text"] for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
            if len(texts) == len(prompts):
                return texts
        t0 = time.time()
        wm = self.watermarker(scheme or "global-sketch")
        out = wm.generate(list(prompts), seed=seed, watermark=scheme is not None, batch_size=self.batch_size)
        from sketchwm.io import write_jsonl_atomic

        write_jsonl_atomic(str(path), ({"prompt": p, "text": t} for p, t in zip(prompts, out.texts)))
        _log(f"generated {len(prompts)} {label} texts ({scheme or 'unwatermarked'}) in {time.time() - t0:.0f}s")
        return list(out.texts)


class Scores:
    """Detection statistics of a batch: ``score`` (B,) float64 (empty text → -inf) and ``p_value`` (B,)."""

    def __init__(self, scheme: Any, backend: Any, texts: Sequence[str]):
        ids = backend.encode(list(texts))
        x, valid = pad_ids(ids)
        out = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device))
        empty = torch.tensor([len(i) == 0 for i in ids])
        s = out.score.double().cpu()
        self.score = torch.where(empty, torch.full_like(s, float("-inf")), s).nan_to_num(nan=float("-inf"))
        p = out.p_value.double().cpu()
        self.p_value = torch.where(empty, torch.ones_like(p), p).nan_to_num(nan=1.0)

    def rate(self, tau: float) -> float:
        """Fraction above the calibrated threshold."""
        return float((self.score > tau).double().mean())

    def p_rate(self, alpha: float) -> float:
        """Fraction with the scheme's own p-value <= alpha (no calibration)."""
        return float((self.p_value <= alpha).double().mean())


def _mean(xs: Sequence[float]) -> float:
    vals = [x for x in xs if not (isinstance(x, float) and math.isnan(x))]
    return float(sum(vals) / len(vals)) if vals else float("nan")


def run(args: argparse.Namespace) -> list[dict]:
    """Run the matrix; returns the long-format rows (also written to ``args.out``)."""
    from sketchwm.keys import WatermarkKey
    from sketchwm_attacks import WatermarkStealer

    reg = get_registry()
    if args.backend == "tiny":
        from sketchwm.testing import tiny_backend

        backend = tiny_backend()
    else:
        backend = reg.create("backend", args.backend)
    schemes = args.schemes or reg.names("scheme")
    attacks = args.attacks or [a for a in reg.names("attack") if a != STEAL_ATTACK]
    if attacks == ["none"]:  # stealing only
        attacks = []
    if args.quick and not args.attacks:
        attacks = [a for a in attacks if a not in HEAVY_ATTACKS]
    from sketchwm.data import load_prompts

    if backend.model_id.startswith("tiny"):  # the tiny smoke run: prompts in the tiny model's vocabulary
        from sketchwm.testing import TINY_WORDS

        prompts_all = [" ".join(TINY_WORDS[(i + j) % len(TINY_WORDS)] for j in range(6)) for i in range(5000)]
    else:
        prompts_all = load_prompts("prompts")
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(prompts_all), generator=g).tolist()
    prompts_all = [prompts_all[i] for i in order]
    n = args.n_texts
    max_steal = max(args.steal_n, default=0)

    def take(start: int, k: int) -> list[str]:
        return [prompts_all[(start + i) % len(prompts_all)] for i in range(k)]

    n_null = args.n_null or n
    # prompt blocks do not overlap (up to wrapping around the 1,054 prompts); the null block starts at
    # max(n, 100) so that runs with fewer texts reuse the cached null generations
    null_start = max(n, 100)
    eval_prompts, null_prompts = take(0, n), take(null_start, n_null)
    steal_prompts = take(null_start + n_null, max_steal)
    key = WatermarkKey(hashlib.sha256(f"sketchwm/attack-matrix/{args.seed}".encode()).digest())
    from sketchwm.engine import SamplerConfig

    base = {**SamplerConfig().model_dump(), **(backend.sampler_defaults or {})}
    sampler = {"gen_length": args.gen_length}
    sampler["block_length"] = args.block_length or (
        base["block_length"] if args.gen_length % base["block_length"] == 0 else args.gen_length)
    sampler["steps"] = args.steps or min(base["steps"], args.gen_length)
    out_path = Path(args.out)
    scheme_params = json.loads(args.params)
    gens = Generations(backend, key, sampler, out_path.parent / "cache", args.batch_size, scheme_params)
    model_id = getattr(backend, "model_id", args.backend)
    version = _package_version()
    rows: list[dict] = []

    def add(scheme, attack, strength, metric, value, count, params=None, train_n=""):
        rows.append({
            "scheme": scheme, "backend": model_id, "attack": attack, "strength": strength, "metric": metric,
            "value": value, "n": count, "train_n": train_n, "seed": args.seed,
            "config_hash": config_hash({"scheme": scheme, "backend": model_id, "sampler": sampler, "attack": attack,
                                        "params": params or {}, "strength": strength, "seed": args.seed,
                                        "train_n": train_n, "alpha": args.alpha}),
            "package_version": version,
        })

    # an unrelated key for the spoofing control (same scheme and params, other key material)
    other_key = WatermarkKey(hashlib.sha256(f"sketchwm/attack-matrix/{args.seed}/control-key".encode()).digest())
    null_texts = gens.get(None, null_prompts, args.seed + 1, "null")
    reference = gens.get(None, steal_prompts, args.seed + 2, "steal-ref") if max_steal else []
    attack_objs = {}
    for name in attacks:
        params = {"similarity": not args.no_similarity}
        resources = {"backend": backend}
        attack_objs[name] = reg.create("attack", name, params, **resources)

    for scheme_name in schemes:
        t_scheme = time.time()
        wmk = gens.watermarker(scheme_name)
        scheme = wmk.scheme
        null = Scores(scheme, backend, null_texts)
        # the one rule: max(conformal, analytic at 128 tokens)
        tau = decision_threshold(null.score, args.alpha, scheme_analytic_threshold(scheme, args.alpha, 128))
        wm_texts = gens.get(scheme_name, eval_prompts, args.seed + 3, "eval")
        wm = Scores(scheme, backend, wm_texts)
        detected = wm.score > tau
        add(scheme_name, "none", 0.0, "tpr_at_1pct_fpr", wm.rate(tau), n)
        add(scheme_name, "none", 0.0, "tpr_at_pvalue_1pct", wm.p_rate(args.alpha), n)
        add(scheme_name, "none", 0.0, "fpr_null_pvalue_1pct", null.p_rate(args.alpha), len(null_texts))
        add(scheme_name, "none", 0.0, "threshold", tau, len(null_texts))
        add(scheme_name, "none", 0.0, "mean_tokens", _mean([float(len(i)) for i in backend.encode(wm_texts)]), n)
        _log(f"{scheme_name}: clean TPR {wm.rate(tau):.2f} at tau={tau:.4g} (p-value rule: TPR {wm.p_rate(args.alpha):.2f}, "
             f"null FPR {null.p_rate(args.alpha):.2f})")
        for name, attack in attack_objs.items():
            k = min(n, args.heavy_n) if name in HEAVY_ATTACKS else n
            for s in args.strengths:
                t0 = time.time()
                out = attack.apply(wm_texts[:k], s, torch.Generator().manual_seed(args.seed + 17))
                sc = Scores(scheme, backend, out.texts)
                p = attack.params.model_dump(mode="json")
                add(scheme_name, name, s, "tpr_at_1pct_fpr", sc.rate(tau), k, p)
                add(scheme_name, name, s, "tpr_at_pvalue_1pct", sc.p_rate(args.alpha), k, p)
                add(scheme_name, name, s, "mean_similarity", _mean(out.similarity), k, p)
                add(scheme_name, name, s, "mean_edit_fraction", _mean(out.edit_fraction), k, p)
                add(scheme_name, name, s, "mean_levenshtein", _mean([float(x) for x in out.levenshtein]), k, p)
                _log(f"{scheme_name} | {name} @ {s}: TPR {sc.rate(tau):.2f} (p-value rule {sc.p_rate(args.alpha):.2f}), "
                     f"sim {_mean(out.similarity):.3f} ({time.time() - t0:.0f}s)")
        if max_steal:
            wm_train = gens.get(scheme_name, steal_prompts, args.seed + 4, "steal-train")
            w_ids, r_ids = backend.encode(wm_train), backend.encode(reference)
            control, control_tau = None, float("nan")
            for tn in args.steal_n:
                st = WatermarkStealer(backend.vocab_size).fit(w_ids[:tn], r_ids[:tn])
                k = min(n, args.spoof_n)
                spoof = st.spoof(backend, eval_prompts[:k], torch.Generator().manual_seed(args.seed + 5),
                                 delta=args.spoof_delta, sampler_config={**(backend.sampler_defaults or {}), **sampler})
                sp = Scores(scheme, backend, spoof.texts)
                sp_params = {"delta": args.spoof_delta}
                add(scheme_name, "steal-spoof", args.spoof_delta, "spoof_rate", sp.rate(tau), k, sp_params, tn)
                add(scheme_name, "steal-spoof", args.spoof_delta, "spoof_rate_pvalue_1pct", sp.p_rate(args.alpha), k, sp_params, tn)
                if control is None:
                    control = gens.watermarker(scheme_name, other_key).scheme
                    control_tau = decision_threshold(Scores(control, backend, null_texts).score, args.alpha,
                                                     scheme_analytic_threshold(control, args.alpha, 128))
                sp_other = Scores(control, backend, spoof.texts)
                add(scheme_name, "steal-spoof", args.spoof_delta, "spoof_rate_other_key", sp_other.rate(control_tau), k, sp_params, tn)
                add(scheme_name, "steal-spoof", args.spoof_delta, "spoof_rate_other_key_pvalue_1pct", sp_other.p_rate(args.alpha),
                    k, sp_params, tn)
                _log(f"{scheme_name} | steal n={tn}: spoof rate {sp.rate(tau):.2f} (p-value rule {sp.p_rate(args.alpha):.2f}; "
                     f"other key {sp_other.rate(control_tau):.2f}, its p-value rule {sp_other.p_rate(args.alpha):.2f})")
                scrub = reg.create("attack", STEAL_ATTACK, {"similarity": not args.no_similarity}, backend=backend, stealer=st)
                for s in args.strengths:
                    out = scrub.apply(wm_texts, s, torch.Generator().manual_seed(args.seed + 19))
                    sc = Scores(scheme, backend, out.texts)
                    still = sc.score > tau
                    n_det = int(detected.sum())
                    rate = float((detected & ~still).sum()) / n_det if n_det else float("nan")
                    p = scrub.params.model_dump(mode="json")
                    add(scheme_name, STEAL_ATTACK, s, "scrub_rate", rate, n_det, p, tn)
                    add(scheme_name, STEAL_ATTACK, s, "tpr_at_1pct_fpr", float(still.double().mean()), n, p, tn)
                    add(scheme_name, STEAL_ATTACK, s, "mean_similarity", _mean(out.similarity), n, p, tn)
                    add(scheme_name, STEAL_ATTACK, s, "mean_edit_fraction", _mean(out.edit_fraction), n, p, tn)
                    _log(f"{scheme_name} | steal-scrub n={tn} @ {s}: scrub rate {rate:.2f}, sim {_mean(out.similarity):.3f}")
        _log(f"{scheme_name} done in {time.time() - t_scheme:.0f}s")
        write_csv(rows, out_path)  # after each scheme, so a long run leaves partial results
    return rows


FIELDS = ["scheme", "backend", "attack", "strength", "metric", "value", "n", "train_n", "seed", "config_hash", "package_version"]


def write_csv(rows: list[dict], path: Path) -> None:
    """Write the long-format rows."""
    from sketchwm.io import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, newline="") as fh:  # an interrupted run keeps the previous partial results
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


def format_table(rows: list[dict]) -> str:
    """Pivot: one line per (scheme, attack), one column per strength with ``TPR / similarity``; then stealing."""
    cell: dict[tuple, dict[float, dict[str, float]]] = {}
    w = max([15] + [len(r["scheme"]) for r in rows])  # scheme column width (tagged names are longer)
    strengths: set[float] = set()
    steal: list[str] = []
    for r in rows:
        if r["attack"] in ("none", STEAL_ATTACK, "steal-spoof"):
            continue
        strengths.add(r["strength"])
        cell.setdefault((r["scheme"], r["attack"]), {}).setdefault(r["strength"], {})[r["metric"]] = r["value"]
    steal_strengths = {r["strength"] for r in rows if r["attack"] == STEAL_ATTACK}
    ss = sorted(strengths)
    clean = {r["scheme"]: r["value"] for r in rows if r["attack"] == "none" and r["metric"] == "tpr_at_1pct_fpr"}
    head = f"{'scheme':{w}s} {'attack':22s} " + " ".join(f"{'s=' + format(s, 'g'):>13s}" for s in ss)
    lines = ["TPR at 1% FPR / mean semantic similarity after each attack", head, "-" * len(head)] if cell else []
    last = None
    for (scheme, attack), by_s in sorted(cell.items()):
        if scheme != last:
            lines.append(f"{scheme:{w}s} {'(no attack)':22s} {clean.get(scheme, float('nan')):13.2f}")
            last = scheme
        cols = []
        for s in ss:
            m = by_s.get(s, {})
            cols.append(f"{m.get('tpr_at_1pct_fpr', float('nan')):.2f} / {m.get('mean_similarity', float('nan')):.2f}".rjust(13))
        lines.append(f"{'':{w}s} {attack:22s} " + " ".join(cols))
    spoof = [r for r in rows if r["attack"] == "steal-spoof" and r["metric"] == "spoof_rate"]
    spoof_p = {(r["scheme"], r["train_n"]): r["value"] for r in rows
               if r["attack"] == "steal-spoof" and r["metric"] == "spoof_rate_pvalue_1pct"}
    spoof_o = {(r["scheme"], r["train_n"]): r["value"] for r in rows
               if r["attack"] == "steal-spoof" and r["metric"] == "spoof_rate_other_key"}
    scrub = [r for r in rows if r["attack"] == STEAL_ATTACK and r["metric"] == "scrub_rate"]
    ss = sorted(steal_strengths)
    if spoof or scrub:
        control = bool(spoof_o)  # runs before the control was added have no such rows
        lines += ["", "Watermark stealing (Jovanovic et al. 2024): spoof rate at the calibrated threshold (and with the",
                  "scheme's own p-value <= 1%" + ("; and at an unrelated key's calibrated threshold, the control" if control else "")
                  + "), scrub rate at each strength",
                  " ".join([f"{'scheme':{w}s} {'train n':>8s} {'spoof':>7s} {'spoof(p)':>9s}"]
                           + ([f"{'other key':>10s}"] if control else []) + [f"{'scrub@' + format(s, 'g'):>10s}" for s in ss])]
        for r in spoof:
            sc = {x["strength"]: x["value"] for x in scrub if x["scheme"] == r["scheme"] and x["train_n"] == r["train_n"]}
            sp_p = spoof_p.get((r["scheme"], r["train_n"]), float("nan"))
            cells = [f"{r['scheme']:{w}s} {r['train_n']:>8} {r['value']:7.2f} {sp_p:9.2f}"]
            if control:
                cells.append(f"{spoof_o.get((r['scheme'], r['train_n']), float('nan')):10.2f}")
            lines.append(" ".join(cells + [f"{sc.get(s, float('nan')):10.2f}" for s in ss]))
    return "\n".join(lines)


def read_csv(paths: Sequence[str]) -> list[dict]:
    """Rows of one or more CSVs written by this script (numbers parsed), for ``--table-only``.

    Runs merge: a row with the same (scheme, attack, strength, metric, train n) as an earlier one
    (e.g. a re-run that adds the stealing control) replaces it, in the earlier row's place.
    """
    rows: dict[tuple, dict] = {}
    for path in paths:
        with open(path, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                r["strength"] = float(r["strength"])
                r["value"] = float(r["value"])
                r["train_n"] = int(r["train_n"]) if r["train_n"] else ""
                rows[(r["scheme"], r["attack"], r["strength"], r["metric"], r["train_n"])] = r
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-texts", type=int, default=100, help="watermarked (and unwatermarked) texts per scheme")
    ap.add_argument("--n-null", type=int, default=100,
                    help="unwatermarked texts for the threshold (>= 99 for a finite 1%% conformal threshold)")
    ap.add_argument("--gen-length", type=int, default=128, help="tokens per generated text")
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (default: the backend's)")
    ap.add_argument("--block-length", type=int, default=None, help="semi-AR block length (default: the backend's)")
    ap.add_argument("--schemes", nargs="*", default=None, help="schemes (default: every registered one)")
    ap.add_argument("--attacks", nargs="*", default=None, help="attacks (default: every registered one but steal-scrub; 'none': stealing only)")
    ap.add_argument("--strengths", nargs="*", type=float, default=[0.1, 0.3, 0.5])
    ap.add_argument("--steal-n", nargs="*", type=int, default=[100, 1000], help="stealing training sizes (none: skip)")
    ap.add_argument("--spoof-n", type=int, default=100, help="spoofed texts per training size")
    ap.add_argument("--spoof-delta", type=float, default=4.0, help="spoofing logit boost δ")
    ap.add_argument("--heavy-n", type=int, default=20, help="texts for the slow SmolLM2 paraphraser")
    ap.add_argument("--params", default="{}", help='JSON {scheme: {param: value}} overriding scheme defaults, '
                    'e.g. \'{"kth-exp-edit": {"window": "free"}}\'')
    ap.add_argument("--alpha", type=float, default=0.01, help="false-positive rate of the threshold")
    ap.add_argument("--backend", default="default", help="registered backend, or 'tiny' for a smoke run")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--no-similarity", action="store_true", help="skip sentence-embedding similarity")
    ap.add_argument("--quick", action="store_true", help="20 texts, steal n = 50 and 200, 20 spoofs, no SmolLM2")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output CSV")
    ap.add_argument("--table-only", nargs="+", metavar="CSV", default=None,
                    help="print the table of existing CSVs (merged into --out) instead of running")
    args = ap.parse_args(argv)
    if args.table_only:
        rows = read_csv(args.table_only)
        write_csv(rows, Path(args.out))
        print(format_table(rows))
        return 0
    if args.quick:
        args.n_texts = min(args.n_texts, 20)
        args.steal_n = [n for n in (50, 200)] if args.steal_n == [100, 1000] else args.steal_n
        args.spoof_n = min(args.spoof_n, 20)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = run(args)
    write_csv(rows, Path(args.out))
    print(format_table(rows))
    print(f"\nwrote {len(rows)} rows to {args.out}")
    summary: dict[str, dict[str, float]] = {}
    for r in rows:
        summary.setdefault(f"{r['scheme']}|{r['attack']}|{r['strength']}", {})[r["metric"]] = r["value"]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
