"""``sketchwm prior estimate``: the token prior π_tok for a model other than the default (added by
:mod:`sketchwm_builtin.register` through the hook ``sketchwm_register_commands``).

Usage::

    sketchwm prior estimate --out prior.npz [--corpus FILE | --n-samples N] [--config-out cfg.json]
                            [--backend NAME --backend-params JSON | --config cfg.json]

Without ``--corpus`` it samples the model without watermark (``--n-samples`` prompts from the shipped
prompt set or ``--prompts FILE``); with it, it counts the texts of FILE (plain lines or JSONL with
``text``) through the backend's tokenizer. It writes the counts with their provenance (see
:mod:`sketchwm_builtin.token_prior`) and prints the scheme's ``prior`` spec as JSON; ``--config-out`` also writes
the full configuration (the input config with that prior and the tokenizer fingerprint), to keep
with the key and pass to ``--config`` when generating and detecting.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_prior_command", "cmd_prior_estimate"]


def with_prior(scheme, params: dict, spec: dict) -> dict:
    """The scheme's ``params`` with the token prior ``spec`` where the scheme reads it: its own
    ``prior`` field (``global-sketch``, ``global-sketch-family``), or its sketch channel's
    (``global-sketch-green``: ``sketch.prior``). Returns a new dict.

    Raises:
        ConfigError: a scheme with neither (it reads no token prior).
    """
    from sketchwm.errors import ConfigError

    fields = type(scheme).Params.model_fields
    if "prior" in fields:
        return {**params, "prior": spec}
    sketch = fields.get("sketch")
    if sketch is not None and "prior" in getattr(sketch.annotation, "model_fields", {}):
        return {**params, "sketch": {**dict(params.get("sketch") or {}), "prior": spec}}
    raise ConfigError(f"scheme {scheme.name!r} reads no token prior: --config-out has nowhere to put it")


def cmd_prior_estimate(args: argparse.Namespace) -> int:
    """Estimate, save, print the spec (and write the configuration with ``--config-out``)."""
    from sketchwm.api import Watermarker
    from sketchwm.cli import config_from_args
    from sketchwm.data import load_prompts
    from sketchwm.io import atomic_write, read_texts
    from sketchwm.keys import WatermarkKey

    from .token_prior import estimate_from_corpus, estimate_from_samples

    cfg = config_from_args(args)
    # the key is never used: the model is sampled without watermark and no scheme is built
    wm = Watermarker(WatermarkKey.generate(), cfg)
    if args.corpus:
        texts = read_texts(args.corpus)
        prior = estimate_from_corpus(wm.backend.tokenizer, texts, wm.backend.vocab_size,
                                     source=f"{len(texts)} texts of {args.corpus}")
    else:
        prompts = (load_prompts(args.prompts) if args.prompts
                   else load_prompts("prompts", args.n_samples, args.prompt_offset))
        over = {"gen_length": args.gen_length} if args.gen_length else {}
        prior = estimate_from_samples(wm, prompts, seed=args.seed, batch_size=args.batch_size, progress=not args.quiet,
                                      **over)
    prior.save(args.out)
    spec = prior.spec(os.path.abspath(args.out))
    if args.config_out:
        full = wm.config.model_dump(mode="json")
        full["scheme"]["params"] = with_prior(wm.scheme, full["scheme"].get("params", {}), spec)
        full["tokenizer"] = prior.tokenizer
        with atomic_write(Path(args.config_out)) as fh:
            fh.write(json.dumps(full, indent=2) + "\n")
    print(json.dumps(spec))
    print(f"wrote token prior ({int(prior.counts.sum())} tokens, V={prior.vocab_size}, tokenizer {prior.tokenizer}) "
          f"to {args.out}" + (f" and the configuration to {args.config_out}" if args.config_out else ""), file=sys.stderr)
    return 0


def add_prior_command(subparsers: Any, parents: "list[argparse.ArgumentParser] | tuple" = ()) -> argparse.ArgumentParser:
    """Add ``prior estimate`` (``subparsers`` and ``parents`` as in the hook ``sketchwm_register_commands``);
    returns the ``prior`` parser."""
    from sketchwm.cli import add_config_args, nonneg_int, positive_int

    parents = list(parents)  # nested parsers share the --debug option too
    p = subparsers.add_parser("prior", parents=parents, help="token prior for another model's vocabulary (sign balancing, null)")
    sub = p.add_subparsers(dest="prior_command", required=True, help="estimate: count tokens of samples or a corpus")
    e = sub.add_parser("estimate", parents=parents, help="estimate the token prior from unwatermarked samples or a corpus",
                       description=__doc__.splitlines()[0])
    e.add_argument("--out", required=True, help="counts file (.npz with provenance)")
    e.add_argument("--corpus", help="count these texts (plain lines or JSONL with 'text') instead of sampling")
    e.add_argument("--prompts", help="prompts to sample from (default: the shipped prompt set)")
    e.add_argument("--n-samples", type=positive_int, default=500, help="unwatermarked samples to count (default 500)")
    e.add_argument("--prompt-offset", type=nonneg_int, default=300,
                   help="first shipped prompt to sample from (default 300: disjoint from the demo's prompts)")
    e.add_argument("--gen-length", type=positive_int, help="tokens per sample (default: the backend's)")
    e.add_argument("--seed", type=nonneg_int, default=3, help="seed of the sampler (default 3)")
    e.add_argument("--batch-size", type=positive_int, default=50, help="samples per batch (default 50)")
    e.add_argument("--config-out", help="also write the configuration with this prior (JSON)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_args(e)
    e.set_defaults(func=cmd_prior_estimate)
    return p
