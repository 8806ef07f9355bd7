"""``sketchwm attack``: run one registered attack on a JSONL file (added by the attack suite through the
hook ``sketchwm_register_commands``).

Usage::

    sketchwm attack --attack NAME --strength S --input IN.jsonl [--output OUT.jsonl] [--seed N]
                    [--params JSON] [--watermarked TRAIN.jsonl] [--batch-size B]

Each input line is a JSON object with a ``text`` field (optional ``prompt`` and ``ids``: the
text's token ids, handed to the attack). Each output line is the input object with ``text``
replaced by the edited text, ``ids`` dropped (they no longer match), and the fields
``original_text``, ``attack``, ``strength``, ``seed``, ``params``, ``edit_fraction``,
``levenshtein`` and ``similarity`` (null when not computed) added. Without ``--output`` the
lines go to stdout. ``--watermarked`` gives the attacker's watermarked samples to ``steal-scrub``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from sketchwm.errors import ConfigError
from sketchwm.hookspecs import hookimpl

__all__ = ["add_attack_command", "run_attack", "read_jsonl", "sketchwm_register_commands"]


@hookimpl
def sketchwm_register_commands(subparsers: Any, parents: Any) -> None:
    """Add ``sketchwm attack`` (see module doc)."""
    add_attack_command(subparsers, parents)


def add_attack_command(subparsers: Any, parents: Any = ()) -> argparse.ArgumentParser:
    """Add the ``attack`` sub-command to an argparse ``subparsers`` object; returns its parser.

    The parser's default ``func`` is :func:`run_attack`; ``parents`` are argparse parent parsers
    (the CLI's shared ``--debug``).
    """
    p = subparsers.add_parser(
        "attack", parents=list(parents),
        help="apply a registered attack (substitution, paraphrase, ...) to texts in a JSONL file",
        description=__doc__.splitlines()[0],
    )
    from sketchwm.cli import finite_float, nonneg_int, positive_int

    p.add_argument("--attack", required=True, help="registered attack name (see `sketchwm plugins`)")
    p.add_argument("--strength", required=True, type=finite_float, help="attack strength in [0, 1] (meaning per attack)")
    p.add_argument("--input", required=True, type=Path, help="JSONL file with a 'text' field per line")
    p.add_argument("--output", type=Path, default=None,
                   help="output JSONL (default: stdout); written atomically, an existing file is replaced only on success")
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the attack's torch.Generator (default 0), stored as 'attack_seed'")
    p.add_argument("--params", default=None, help='attack parameters as a JSON object, e.g. \'{"similarity": false}\'')
    p.add_argument("--watermarked", type=Path, default=None,
                   help="JSONL of the attacker's watermarked samples (steal-scrub)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="texts per attack call (default 64)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_attack)
    return p


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read JSONL objects with a string ``text`` (or a plain-text file as one text); see :func:`sketchwm.io.read_records`.

    Raises:
        InputError: missing file, a line that is not a JSON object with a string ``text``.
    """
    from sketchwm.io import read_records

    return read_records(str(path))


def _token_counter(rows: list[dict[str, Any]]) -> Any:
    """A function texts → token counts with the generating backend's tokenizer, or None when no
    record carries ``n_tokens`` (nothing to recount). The backend is the one named in the records'
    ``config.backend`` (``provenance.config`` or ``config``), else ``default``.

    Raises:
        RegistryError, ConfigError, ModelFileError: the named backend cannot be built.
    """
    if not any("n_tokens" in r for r in rows):
        return None
    from sketchwm.registry import get_registry

    spec: dict[str, Any] = {"name": "default", "params": {}}
    for r in rows:
        cfg = r.get("config") or (r.get("provenance") or {}).get("config")
        if isinstance(cfg, dict) and isinstance(cfg.get("backend"), dict) and cfg["backend"].get("name"):
            spec = cfg["backend"]
            break
    backend = get_registry().build("backend", spec["name"], dict(spec.get("params") or {}))
    tok = backend.tokenizer
    return lambda texts: [len(tok.encode(t, add_special_tokens=False)) for t in texts]


def run_attack(args: argparse.Namespace) -> int:
    """Run the ``attack`` sub-command (see module doc). Returns the exit status (0).

    Raises:
        ConfigError: bad ``--params`` JSON, strength outside [0, 1], bad batch size.
        InputError: unreadable input, output directory missing.
        RegistryError: unknown attack name.
    """
    import torch

    from sketchwm.context import BuildContext
    from sketchwm.registry import get_registry

    params: dict[str, Any] = {}
    if args.params:
        try:
            params = json.loads(args.params)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--params is not valid JSON: {exc.msg}") from None
        if not isinstance(params, dict):
            raise ConfigError("--params must be a JSON object")
    if not (0.0 <= args.strength <= 1.0):
        raise ConfigError(f"--strength must be in [0, 1], got {args.strength}")
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be >= 1")
    registry = get_registry()
    registry.get("attack", args.attack)  # fail fast on an unknown name, before reading files
    rows = read_jsonl(args.input)
    resources: dict[str, Any] = {}
    if args.watermarked is not None:
        resources["watermarked_texts"] = [r["text"] for r in read_jsonl(args.watermarked)]
    attack = registry.build("attack", args.attack, params, BuildContext(resources=resources))
    gen = torch.Generator().manual_seed(int(args.seed))
    params_json = attack.params.model_dump(mode="json")

    counter = _token_counter(rows)
    out_path = args.output
    if out_path is not None:
        from sketchwm.io import check_output_path

        check_output_path(out_path)
    bar = None
    if not args.quiet and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows), desc=f"attack {attack.name}", unit="text")

    def records():
        for b0 in range(0, len(rows), args.batch_size):
            batch = rows[b0 : b0 + args.batch_size]
            texts = [r["text"] for r in batch]
            ids = [r["ids"] for r in batch] if all(isinstance(r.get("ids"), list) for r in batch) else None
            prompts = [r["prompt"] for r in batch] if all(isinstance(r.get("prompt"), str) for r in batch) else None
            res = attack.apply(texts, args.strength, gen, token_ids=ids, prompts=prompts)
            counts = counter(res.texts) if counter is not None else None
            for j, (r, text, frac, lev, sim) in enumerate(
                    zip(batch, res.texts, res.edit_fraction, res.levenshtein, res.similarity)):
                rec = {k: v for k, v in r.items() if k != "ids"}
                if counts is not None and "n_tokens" in r:
                    rec["original_n_tokens"], rec["n_tokens"] = r["n_tokens"], counts[j]
                prov = dict(rec["provenance"]) if isinstance(rec.get("provenance"), dict) else {}
                seeds = dict(prov["seeds"]) if isinstance(prov.get("seeds"), dict) else {}
                seeds["attack"] = args.seed
                prov.update(seeds=seeds, attack={"name": attack.name, "strength": args.strength, "params": params_json})
                rec.update(
                    text=text, original_text=r["text"], attack=attack.name, strength=args.strength,
                    attack_seed=args.seed, params=params_json, edit_fraction=frac, levenshtein=lev,
                    similarity=None if (sim is None or math.isnan(sim)) else sim, provenance=prov,
                )
                yield rec
            if bar is not None:
                bar.update(len(batch))

    from sketchwm.io import write_jsonl_atomic

    try:
        write_jsonl_atomic(str(out_path) if out_path is not None else "-", records())
    finally:
        if bar is not None:
            bar.close()
    if args.output:
        print(f"wrote {len(rows)} attacked texts to {args.output}", file=sys.stderr)
    return 0
