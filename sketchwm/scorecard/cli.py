"""``sketchwm scorecard``: run every promise of a scheme and print one line per promise (added by the benchmark
harness's plugin module through the hook ``sketchwm_register_commands``).

Usage::

    sketchwm scorecard [--quick] [--scheme NAME --scheme-params JSON] [--baselines NAME ...]
                       [--backend NAME --backend-params JSON] [--out DIR] [--only PROMISE ...]

Prints ``PASS|FAIL|INFO  <promise>  <figure> [<interval>]  (n=…; need …)`` per line and writes
``scorecard.json``, ``scorecard.parquet`` and ``scorecard.txt`` to ``--out`` (default
``runs/scorecard/<scheme>/<tier>``). Exit status 0 when no line about the scheme under test fails, 1 otherwise;
with ``--against REFERENCE.json``, 1 only when a line that passed in the reference fails or is missing now
(the CI regression guard: lines that already failed there are reported, not gated).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_scorecard_command", "cmd_scorecard"]


def add_scorecard_command(subparsers: Any, parents: Any = ()) -> argparse.ArgumentParser:
    """Add the ``scorecard`` sub-command; returns its parser (handler :func:`cmd_scorecard`)."""
    p = subparsers.add_parser("scorecard", parents=list(parents),
                              help="check every promise of a scheme (forgery, diversity, power, robustness, null, "
                                   "speed, user loop): one pass/fail line each",
                              description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick tier (small n; gates only on decisive lines)")
    p.add_argument("--scheme", help="registered scheme name (default: the shipped default)")
    p.add_argument("--scheme-params", help="scheme params as JSON (or @file.json)")
    p.add_argument("--baselines", nargs="+", metavar="NAME", help="comparison set (default: red-green-dlm unigram aar-gumbel)")
    p.add_argument("--backend", help="registered backend name (default: default; tiny: the code-built test model)")
    p.add_argument("--backend-params", help="backend params as JSON (or @file.json)")
    p.add_argument("--out", help="output folder (default runs/scorecard/<scheme>/<tier>)")
    p.add_argument("--only", nargs="+", metavar="PROMISE",
                   help="run only these promises (forgery diversity power robustness null speed user-loop)")
    p.add_argument("--against", metavar="SCORECARD_JSON",
                   help="a regression guard: compare with this earlier scorecard.json of the same scheme and tier and "
                        "exit 1 only where a line that passed there fails (or is missing) now")
    p.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    p.set_defaults(func=cmd_scorecard)
    return p


def cmd_scorecard(args: argparse.Namespace) -> int:
    """Run the scorecard, print its lines, write its files; exit 1 when a line about the scheme fails."""
    from ..config import DEFAULT_SCHEME, ComponentSpec
    from ..errors import ConfigError
    from ..io import read_json_arg
    from .config import TIERS, ScorecardConfig
    from .run import PROMISES, run_scorecard

    tier = TIERS["quick" if args.quick else "full"]
    over: dict[str, Any] = {"tier": tier}
    over["scheme"] = ComponentSpec(name=args.scheme or DEFAULT_SCHEME,
                                   params=read_json_arg(args.scheme_params, "--scheme-params") or {})
    if args.baselines:  # named on the command line: they replace the tier's comparison set too
        over["baselines"] = [ComponentSpec(name=b) for b in args.baselines]
        over["tier"] = tier.model_copy(update={"baselines": None})
    if args.backend:
        over["backend"] = ComponentSpec(name=args.backend, params=read_json_arg(args.backend_params, "--backend-params") or {})
        if args.backend == "tiny":
            over["prompts"], over["human"] = "tiny", ["tiny"]
    names = [n for n, _ in PROMISES]
    bad = sorted(set(args.only or []) - set(names))
    if bad:
        raise ConfigError(f"unknown promise(s) {bad}: choose from {', '.join(names)}")
    cfg = ScorecardConfig(**over)
    out = args.out or f"runs/scorecard/{cfg.scheme.name}/{tier.name}"
    log = None if args.quiet else (lambda m: print(f"scorecard: {m}", file=sys.stderr, flush=True))
    card = run_scorecard(cfg, out, only=set(args.only) if args.only else None, log=log)
    print(card.text())
    print(f"scorecard {cfg.scheme.name} ({tier.name}): {'passed' if card.passed else 'FAILED'} in "
          f"{card.seconds['total']:.0f} s → {out}/scorecard.json", file=sys.stderr)
    if not args.against:
        return 0 if card.passed else 1
    import json
    from pathlib import Path

    from .lines import compare

    try:
        ref = json.loads(Path(args.against).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--against {args.against}: cannot read a scorecard.json there ({exc})") from exc
    if ref.get("tier") != tier.name or (ref.get("scheme") or {}).get("name") != cfg.scheme.name:
        raise ConfigError(f"--against {args.against} is the {ref.get('tier')} tier of {(ref.get('scheme') or {}).get('name')}, "
                          f"not the {tier.name} tier of {cfg.scheme.name}")
    regressed, improved = compare([ln.as_dict() for ln in card.lines], ref.get("lines", []))
    for s in improved:
        print(f"improved   {s}")
    for s in regressed:
        print(f"REGRESSED  {s}")
    print(f"against {args.against}: {len(regressed)} regressed, {len(improved)} improved", file=sys.stderr)
    return 1 if regressed else 0
