"""Quality metrics of the shipped ``default`` masked diffusion LM.

Prints human-readable lines, then as the LAST line one JSON object::

    {"acc15", "pppl15", "gen_s", "top_token_share", "distinct2", "oracle_ppl_model", "oracle_ppl_human", ...}

* acc15 / pppl15: masked-token accuracy and pseudo-perplexity exp(mean CE) with 15% of tokens
  masked (i.i.d., seed 0), on the first 128 tokens of the shipped held-out human passages
  (``sketchwm.data.load("human")``, TEST split, >= 128 tokens), up to ``--n-eval`` passages.
* gen_s: median wall time per sample of 10 unconditional samples of 128 tokens in 64 steps,
  batch size 1, on the threads given by ``--threads`` (default 2).
* top_token_share / distinct2: over ``--n-samples`` (100) unconditional samples of 128 tokens under
  the default sampler settings: median over samples of (count of the most frequent token / 128)
  and median of (distinct bigrams / bigrams).
* oracle_ppl_model / oracle_ppl_human: median per-text perplexity under SmolLM2-135M-Instruct
  (``sketchwm.oracle``) of 100 of those samples and of 100 human passages cut to the same 128
  DLM tokens (both detokenised by the DLM tokenizer).  The pooled (token-weighted) values are
  printed and included as ``*_pooled``.

Generation uses the project's sampler (``sketchwm.engine.MaskedDiffusionSampler`` with the
``default`` backend ``sketchwm_builtin.backends.default.DefaultBackend``) when importable; otherwise
a minimal LLaDA-style loop in this file (``--sampler builtin`` forces it).  The ``sampler`` field
of the JSON says which ran.

Usage: ``python benchmarks/eval_default_model.py [--skip-oracle] [--temperature 1 --top-p 0.95 ...]``
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

from sketchwm.data import load_prompts, load_records
from sketchwm.default_model import (
    BANNED_TOKEN_IDS,
    MASK_TOKEN_ID,
    load_default_model,
    load_sampler_defaults,
)


# ----------------------------------------------------------------------------- masked metrics
@torch.no_grad()
def masked_metrics(model, tok, n_eval: int = 1000, length: int = 128, rate: float = 0.15,
                   seed: int = 0, batch: int = 50) -> dict:
    """acc/pppl at ``rate`` masking on the first ``length`` tokens of held-out human passages."""
    texts = [r["text"] for r in load_records("human") if r["n_tokens"] >= length]
    enc = tok(texts[: n_eval * 2], add_special_tokens=False)["input_ids"]
    rows = [e[:length] for e in enc if len(e) >= length][:n_eval]
    x_all = torch.tensor(rows, dtype=torch.long)  # (N, length)
    g = torch.Generator().manual_seed(seed)
    ce, ok, n = 0.0, 0, 0
    for i in range(0, x_all.shape[0], batch):
        x = x_all[i:i + batch]
        m = torch.rand(x.shape, generator=g) < rate
        logits = model.masked_logits(x.masked_fill(m, MASK_TOKEN_ID), m)
        tgt = x[m]
        ce += torch.nn.functional.cross_entropy(logits, tgt, reduction="sum").item()
        ok += (logits.argmax(-1) == tgt).sum().item()
        n += tgt.numel()
    return {"acc15": ok / n, "pppl15": math.exp(ce / n), "n_passages": int(x_all.shape[0]), "n_masked": n}


# ----------------------------------------------------------------------------- samplers
class BuiltinSampler:
    """Minimal LLaDA-style sampler: blocks of ``block_length`` decoded left to right, each in
    ``steps / n_blocks`` steps; Gumbel-max candidates at T after top-p, then commit
    ``block_length / steps_per_block`` masked positions of the block per step, chosen at random /
    by confidence / by negative entropy."""

    def __init__(self, model, tok, cfg: dict):
        self.model, self.tok, self.cfg = model, tok, cfg

    @torch.no_grad()
    def generate(self, prompts: list[str], generator: torch.Generator) -> list[list[int]]:
        """Return B lists of ``gen_length`` generated ids (prompt excluded)."""
        cfg = self.cfg
        G, S, T = cfg["gen_length"], cfg["steps"], cfg["temperature"]
        enc = [self.tok.encode(p, add_special_tokens=False) if p else [] for p in prompts]
        B, P = len(enc), max(1, max(len(e) for e in enc))
        x = torch.full((B, P + G), MASK_TOKEN_ID, dtype=torch.long)
        att = torch.ones((B, P + G), dtype=torch.long)
        x[:, :P] = 0
        att[:, :P] = 0
        for b, e in enumerate(enc):
            if e:
                x[b, P - len(e):P] = torch.tensor(e)
                att[b, P - len(e):P] = 1
        banned = torch.tensor(BANNED_TOKEN_IDS)
        bl = cfg.get("block_length", G)
        n_blocks = G // bl
        spb = S // n_blocks
        per_step = torch.full((spb,), bl // spb, dtype=torch.long)
        per_step[: bl % spb] += 1
        ar = torch.arange(G)
        for s in range(S):
            blk, s_in = divmod(s, spb)
            in_block = (ar >= blk * bl) & (ar < (blk + 1) * bl)
            gen = x[:, P:]
            masked = gen == MASK_TOKEN_ID
            logits = self.model(x, att)[:, P:].float()
            logits[..., banned] = float("-inf")
            if cfg.get("top_p", 1.0) < 1.0:
                sl, idx = torch.sort(logits, -1, descending=True)
                pr = torch.softmax(sl, -1)
                sl = sl.masked_fill(pr.cumsum(-1) - pr > cfg["top_p"], float("-inf"))
                logits = torch.empty_like(logits).scatter_(-1, idx, sl)
            if T == 0:
                x0 = logits.argmax(-1)
            else:
                u = torch.rand(logits.shape, generator=generator).clamp_(1e-12, 1 - 1e-7)
                x0 = (logits / T - torch.log(-torch.log(u))).argmax(-1)
            if cfg["remasking"] == "random":
                conf = torch.rand(x0.shape, generator=generator)
            else:
                lp = torch.log_softmax(logits, -1)
                conf = (lp.gather(-1, x0[..., None]).squeeze(-1).exp() if cfg["remasking"] == "low_confidence"
                        else (lp.exp() * lp.nan_to_num(neginf=0.0)).sum(-1))
            conf = conf.masked_fill(~(masked & in_block), float("-inf"))
            rank = torch.empty_like(ar.expand(B, -1)).scatter_(1, conf.argsort(1, descending=True), ar.expand(B, -1))
            commit = (rank < per_step[s_in]) & masked & in_block
            x[:, P:] = torch.where(commit, x0, gen)
        return x[:, P:].tolist()


def make_sampler(kind: str, model, tok, cfg: dict):
    """Return (generate_fn(prompts, generator) -> list[list[int]], description)."""
    if kind in ("auto", "engine"):
        try:
            from sketchwm.engine import MaskedDiffusionSampler
            from sketchwm_builtin.backends.default import DefaultBackend

            be = DefaultBackend({"device": "cpu"}, model=model.mlm, tokenizer=tok)
            be.max_length = min(be.max_length, model.max_length)
            sampler = MaskedDiffusionSampler(be, dict(cfg))

            def gen(prompts, generator):
                out = sampler.generate(prompts, generator=generator)
                return out.ids.tolist()

            return gen, "sketchwm.engine.MaskedDiffusionSampler + DefaultBackend"
        except Exception as exc:  # noqa: BLE001
            if kind == "engine":
                raise
            print(f"[eval] project sampler unavailable ({type(exc).__name__}: {exc}); using builtin loop")
    s = BuiltinSampler(model, tok, cfg)
    return s.generate, "builtin LLaDA-style loop (benchmarks/eval_default_model.py)"


# ----------------------------------------------------------------------------- diversity
def diversity(samples: list[list[int]]) -> tuple[float, float]:
    """Median top-token share and median distinct-bigram ratio over samples (lists of ids)."""
    shares, d2 = [], []
    for s in samples:  # per sample; counting is vectorised
        t = torch.tensor(s, dtype=torch.long)
        shares.append(torch.bincount(t).max().item() / t.numel())
        big = t[:-1] * 30522 + t[1:]
        d2.append(torch.unique(big).numel() / max(1, big.numel()))
    return statistics.median(shares), statistics.median(d2)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print metrics and the final JSON line; return the dict."""
    ap = argparse.ArgumentParser(description="metrics of the shipped default DLM")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-eval", type=int, default=1000)
    ap.add_argument("--n-samples", type=int, default=100)
    ap.add_argument("--n-timing", type=int, default=10)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--sampler", choices=["auto", "engine", "builtin"], default="auto")
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--remasking", choices=["low_confidence", "random", "entropy"])
    ap.add_argument("--steps", type=int)
    ap.add_argument("--block-length", type=int)
    ap.add_argument("--skip-oracle", action="store_true")
    ap.add_argument("--skip-masked", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples-out", help="write samples (unconditional + 5 prompted) to this JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    model, tok = load_default_model("cpu")
    load_s = time.time() - t0
    print(f"[eval] model loaded in {load_s:.2f} s")
    res: dict = {"load_s": round(load_s, 3)}
    if not args.skip_masked:
        m = masked_metrics(model, tok, args.n_eval)
        print(f"[eval] held-out test, 15% masking: acc {m['acc15']:.4f}  pppl {m['pppl15']:.2f} "
              f"({m['n_passages']} passages x 128 tokens, {m['n_masked']} masked)")
        res.update(acc15=round(m["acc15"], 4), pppl15=round(m["pppl15"], 2))
    cfg = load_sampler_defaults()
    for k in ("temperature", "top_p", "remasking", "steps", "block_length"):
        v = getattr(args, k)
        if v is not None:
            cfg[k] = v
    gen, desc = make_sampler(args.sampler, model, tok, cfg)
    print(f"[eval] sampler: {desc}; settings {json.dumps(cfg)}")
    res["sampler"] = desc
    res["sampler_settings"] = cfg
    g = torch.Generator().manual_seed(args.seed)
    times = []
    for _ in range(args.n_timing):
        t = time.perf_counter()
        gen([""], g)
        times.append(time.perf_counter() - t)
    res["gen_s"] = round(statistics.median(times), 3)
    print(f"[eval] generation of {cfg['gen_length']} tokens in {cfg['steps']} steps: median "
          f"{res['gen_s']:.3f} s/sample over {args.n_timing} (batch 1, {args.threads} threads)")
    samples = []
    t = time.perf_counter()
    while len(samples) < args.n_samples:
        samples += gen([""] * min(args.batch, args.n_samples - len(samples)), g)
    print(f"[eval] {len(samples)} samples in {time.perf_counter() - t:.1f} s (batch {args.batch})")
    share, d2 = diversity(samples)
    res.update(top_token_share=round(share, 4), distinct2=round(d2, 4))
    print(f"[eval] median top-token share {share:.4f} (<= 0.10), median distinct-2 {d2:.4f} (>= 0.70)")
    texts = [tok.decode(s, skip_special_tokens=True) for s in samples]
    prompts = load_prompts("prompts", 5)
    prompted = gen(prompts, g)
    ptexts = [tok.decode(s, skip_special_tokens=True) for s in prompted]
    for i in range(3):
        print(f"[eval] sample {i}: {texts[i][:300]}")
    if args.samples_out:
        from sketchwm.io import write_json_atomic

        write_json_atomic(args.samples_out, {"settings": cfg, "sampler": desc, "unconditional": texts[:20],
                                             "prompted": [{"prompt": p, "continuation": c} for p, c in zip(prompts, ptexts)]},
                          indent=1)
    if not args.skip_oracle:
        from sketchwm.oracle import OracleLM

        human = [r for r in load_records("human") if r["n_tokens"] >= 128][:100]
        htexts = [tok.decode(tok.encode(r["text"], add_special_tokens=False)[:128]) for r in human]
        oracle = OracleLM(threads=args.threads)
        nm = oracle.token_nll(texts[:100])
        nh = oracle.token_nll(htexts)
        pm = [math.exp(s / n) for s, n in nm if n]
        ph = [math.exp(s / n) for s, n in nh if n]
        pooled_m = math.exp(sum(s for s, n in nm if n) / sum(n for _, n in nm))
        pooled_h = math.exp(sum(s for s, n in nh if n) / sum(n for _, n in nh))
        res.update(oracle_ppl_model=round(statistics.median(pm), 2), oracle_ppl_human=round(statistics.median(ph), 2),
                   oracle_ppl_model_pooled=round(pooled_m, 2), oracle_ppl_human_pooled=round(pooled_h, 2))
        print(f"[eval] oracle (SmolLM2-135M) perplexity, median per text: model {res['oracle_ppl_model']:.1f} "
              f"vs human {res['oracle_ppl_human']:.1f}; pooled: {pooled_m:.1f} vs {pooled_h:.1f}")
    else:
        res.update(oracle_ppl_model=None, oracle_ppl_human=None)
    keys = ["acc15", "pppl15", "gen_s", "top_token_share", "distinct2", "oracle_ppl_model", "oracle_ppl_human"]
    out = {k: res.get(k) for k in keys}
    out.update({k: v for k, v in res.items() if k not in out})
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
