"""The command line's shared pieces: bounded argument types (a bad value exits with status 2 and a
one-line message), the key, alpha and configuration options every command shares, and building a
:class:`sketchwm.api.Watermarker` from them. Re-exported by :mod:`sketchwm.cli`, where plugins'
commands find them (``from sketchwm.cli import add_config_args, config_from_args``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Callable, NoReturn



# ---------------------------------------------------------------- argument types (argparse: bad value → exit 2)
def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def finite_float(text: str) -> float:
    """A finite float (NaN and ±inf refused)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return v


def _bounded(name: str, parse: Callable[[str], Any], ok: Callable[[Any], bool], bound: str, doc: str):
    """An argparse type: ``parse(text)`` (which raises its own ArgumentTypeError), then
    ``ArgumentTypeError("must be <bound>, got <value>")`` unless ``ok(value)``."""

    def check(text: str) -> Any:
        v = parse(text)
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {v}")
        return v

    check.__name__ = check.__qualname__ = name  # argparse names the type in some messages
    check.__doc__ = doc
    return check


positive_int = _bounded("positive_int", _int, lambda v: v >= 1, "a positive integer",
                        "An integer >= 1 (batch sizes, lengths, counts).")


nonneg_int = _bounded("nonneg_int", _int, lambda v: 0 <= v < 2**63, "an integer in [0, 2^63)",
                      "An integer in [0, 2**63) (seeds, offsets).")


nonneg_float = _bounded("nonneg_float", finite_float, lambda v: v >= 0, ">= 0", "A finite float >= 0 (temperatures).")


probability = _bounded("probability", finite_float, lambda v: 0 < v < 1, "in (0, 1)",
                       "A float strictly between 0 and 1 (false-positive rates α).")


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: ``sketchwm: error: <problem>: see `sketchwm <cmd> --help```
    (for the sub-commands' parsers too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog.split()[0]}: error: {message}: see `{self.prog} --help`\n")


# ---------------------------------------------------------------- shared options
def _add_key_args(p: argparse.ArgumentParser, required_help: str = "") -> None:
    p.add_argument("--key", metavar="KEYFILE",
                   help="key file from `sketchwm keygen` (mode 0600); default: $SKETCHWM_KEY_FILE, or a hex secret "
                        "in $SKETCHWM_KEY. A secret on the command line is refused" + required_help)
    p.add_argument("--insecure-key-permissions", action="store_true",
                   help="accept a key file that the group or others can read (refused by default, as ssh does)")


def _add_alpha_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha", type=probability, default=0.01, help="target false-positive rate in (0, 1) (default 0.01)")


def add_config_args(p: argparse.ArgumentParser) -> None:
    """Add ``--config``, ``--scheme``, ``--scheme-params``, ``--backend``, ``--backend-params``, ``--device``
    (read back with :func:`config_from_args`)."""
    p.add_argument("--config", help="JSON file with {scheme, backend, sampler} (see WatermarkConfig); for detect it "
                                    "overrides, on purpose, the configuration recorded in the input")
    p.add_argument("--scheme", help="registered scheme name (default: global-sketch-green, sketchwm.config.DEFAULT_SCHEME)")
    p.add_argument("--scheme-params", help="scheme params as JSON (or @file.json)")
    p.add_argument("--backend", help="registered backend name (default: default)")
    p.add_argument("--backend-params", help="backend params as JSON (or @file.json)")
    p.add_argument("--device", help="device for the backend: auto, cpu, cuda")


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars on stderr: not under --quiet or --json, and only when stderr is a terminal."""
    return not getattr(args, "quiet", False) and not getattr(args, "json", False) and sys.stderr.isatty()


def _key(args: argparse.Namespace):
    from .keys import WatermarkKey

    return WatermarkKey.load(getattr(args, "key", None), allow_hex=False,
                             allow_insecure=getattr(args, "insecure_key_permissions", False) or None)


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration dict (``scheme``, ``backend``, ...) given by the options of :func:`add_config_args`.

    Raises:
        InputError: an unreadable ``--config`` file or bad JSON in a ``--*-params`` option.
    """
    from .config import DEFAULT_SCHEME
    from .io import read_json_arg

    cfg: dict[str, Any] = read_json_arg("@" + args.config, "--config") if getattr(args, "config", None) else {}
    if getattr(args, "scheme", None) or getattr(args, "scheme_params", None):
        base = cfg.get("scheme", {"name": DEFAULT_SCHEME})
        cfg["scheme"] = {"name": args.scheme or base.get("name", DEFAULT_SCHEME),
                         "params": read_json_arg(args.scheme_params, "--scheme-params") or base.get("params", {})}
    if getattr(args, "backend", None) or getattr(args, "backend_params", None) or getattr(args, "device", None):
        base = cfg.get("backend", {"name": "default"})
        params = read_json_arg(args.backend_params, "--backend-params") or dict(base.get("params", {}))
        if args.device:
            params["device"] = args.device
        cfg["backend"] = {"name": args.backend or base.get("name", "default"), "params": params}
    return cfg


def _watermarker(args: argparse.Namespace, config: dict[str, Any] | None = None):
    from .api import Watermarker

    return Watermarker(_key(args), config_from_args(args) if config is None else config)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
