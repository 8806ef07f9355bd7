"""The ``detect`` command's checks of its inputs: the configuration the records were generated with
(against the command line's), the detection's alpha (against a calibration's), the records'
tokenizer and key (against the detector's), and the ``--executor ray`` path.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from .cli_args import config_from_args
from .errors import InputError

__all__ = ["_recorded_config", "_first_difference", "_detect_config", "_check_tokenizer", "_detection_alpha",
           "_check_key", "_detect_ray"]


def _recorded_config(recs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one configuration the input records were generated with (None when they carry none).

    Raises:
        InputError: the records carry different configurations (names the first differing field).
    """
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, r in enumerate(recs):
        prov = r.get("provenance") if isinstance(r.get("provenance"), dict) else {}
        cfg = prov.get("config", r.get("config"))
        if not isinstance(cfg, dict):
            continue
        cfg = {k: cfg[k] for k in ("scheme", "backend", "sampler") if k in cfg}
        found.setdefault(json.dumps(cfg, sort_keys=True), (i, cfg))
    if not found:
        return None
    if len(found) > 1:
        (i, a), (j, b) = list(found.values())[:2]
        field = _first_difference(a, b)
        raise InputError(f"the input mixes configurations (record {i + 1} and record {j + 1} differ in {field}): "
                         "detect each group separately, or pass --config FILE to use one configuration for all")
    return next(iter(found.values()))[1]


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    return path or "<root>"


def _detect_config(args: argparse.Namespace, recs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The configuration to detect with, and where it came from (``--config``, ``records``, ``command line``).

    The records' configuration is used when present; an explicit ``--scheme``/``--scheme-params``/
    ``--backend``/``--backend-params`` value that contradicts it is refused (``--device`` may
    differ); ``--config FILE`` overrides the records on purpose.

    Raises:
        InputError: a contradiction (names the field) or records with mixed configurations.
    """
    if args.config:
        return config_from_args(args), "--config"
    recorded = _recorded_config(recs)
    if recorded is None:
        return config_from_args(args), "command line"
    from .config import DEFAULT_SCHEME
    from .io import read_json_arg
    from .registry import get_registry

    reg = get_registry()
    cfg = json.loads(json.dumps(recorded))
    for kind, name_arg, params_arg in (("scheme", args.scheme, args.scheme_params),
                                       ("backend", args.backend, args.backend_params)):
        rec_spec = cfg.get(kind) or {"name": DEFAULT_SCHEME if kind == "scheme" else "default", "params": {}}
        if name_arg and name_arg != rec_spec.get("name"):
            raise InputError(f"--{kind} {name_arg!r} contradicts the input records' {kind}.name {rec_spec.get('name')!r}: "
                             "drop it to use the recorded configuration, or pass --config FILE to override on purpose")
        given = read_json_arg(params_arg, f"--{kind}-params")
        rec_params = dict(rec_spec.get("params") or {})
        if given:
            cls = reg.get(kind, rec_spec["name"])
            mine = cls.parse_params({**rec_params, **given}).model_dump(mode="json")
            theirs = cls.parse_params(rec_params).model_dump(mode="json")
            for k in sorted(given):
                if k == "device":
                    continue
                if mine.get(k) != theirs.get(k):
                    raise InputError(
                        f"--{kind}-params {k}={json.dumps(mine.get(k))} contradicts the input records' {kind}.params.{k}="
                        f"{json.dumps(theirs.get(k))}: drop it to use the recorded configuration, or pass --config FILE "
                        "to override on purpose")
            rec_params.update({k: v for k, v in given.items() if k == "device"})
        if kind == "backend" and args.device:
            rec_params["device"] = args.device
        cfg[kind] = {"name": rec_spec["name"], "params": rec_params}
    return cfg, "records"


def _check_tokenizer(chunk: Any, wm: Any) -> None:
    """Refuse records generated with another tokenizer than the detector's backend uses.

    Raises:
        TokenizerMismatchError: naming both fingerprints.
    """
    recorded = {r["tokenizer"] for r in chunk.meta() if isinstance(r.get("tokenizer"), str)}
    if recorded and recorded != {wm.backend.tokenizer_fingerprint}:
        from .errors import TokenizerMismatchError

        raise TokenizerMismatchError(
            f"the input was generated with tokenizer {', '.join(sorted(recorded))}, but the detector's backend uses "
            f"tokenizer {wm.backend.tokenizer_fingerprint}: pass the generating --backend"
        )


def _detection_alpha(alpha: float | None, calibration: Any, any_alpha: bool) -> float:
    """The α of a detection: ``--alpha``, else the calibration's, else 0.01.

    Raises:
        CalibrationError: ``--alpha`` differs from the calibration's α, without ``any_alpha``.
    """
    if alpha is None:
        return calibration.alpha if calibration is not None else 0.01
    if calibration is not None and not any_alpha and not math.isclose(alpha, calibration.alpha, rel_tol=1e-9):
        from .errors import CalibrationError

        raise CalibrationError(
            f"the calibration was made at alpha={calibration.alpha:g}, but this detection asks for --alpha {alpha:g}: "
            f"drop --alpha to use the calibration's, recalibrate with `sketchwm calibrate --alpha {alpha:g}`, or pass "
            "--any-calibration-alpha to combine them anyway")
    return alpha


def _check_key(chunk: Any, fingerprint: str, strict: bool, seen: set[str]) -> None:
    """Warn (once per other key) when watermarked input records name another key than the one in use.

    A record's key is its ``key_fingerprint`` (or its provenance's); records marked ``watermarked:
    false`` are left out (their key did not act).

    Raises:
        InputError: with ``strict``, a record of another key.
    """
    import warnings

    from .errors import SketchwmWarning

    for r in chunk.meta():
        prov = r.get("provenance") if isinstance(r.get("provenance"), dict) else {}
        fp = r.get("key_fingerprint", prov.get("key_fingerprint"))
        if not isinstance(fp, str) or fp == fingerprint or fp in seen \
                or r.get("watermarked", prov.get("watermarked")) is False:
            continue
        seen.add(fp)
        msg = (f"the input records were generated with key {fp}, but this detection uses key {fingerprint}: "
               "pass the generating key with --key")
        if strict:
            raise InputError(msg + " (or drop --strict to detect anyway)")
        warnings.warn(msg + " (--strict makes this an error)", SketchwmWarning, stacklevel=2)


def _detect_ray(args: argparse.Namespace, key: Any, wm: Any, calibration: Any, run: dict[str, Any], fmt: str) -> int:
    """``sketchwm detect --executor ray``: :func:`sketchwm.corpus.detect_with_ray` with the configuration
    resolved here (records, ``--config`` or the command line)."""
    from .corpus import detect_with_ray

    if not args.out:
        raise InputError("--executor ray writes its results as Parquet files: pass --out DIR (a new directory)")
    wm.detector(calibration, args.alpha)  # a calibration for another key or scheme fails here, not on the workers
    n, info = detect_with_ray(args.input, args.out, key=wm.key, config=wm.config.model_dump(mode="json"),
                        calibration=calibration.model_dump_json() if calibration is not None else None,
                        alpha=args.alpha, fmt=fmt, run=run, batch_size=args.chunk_size, workers=args.workers,
                        address=args.ray_address)
    print(f"wrote {n} results to {args.out} (Parquet files; Ray: {info['cpus']:g} CPUs, {info['workers']} detector "
          "actors)", file=sys.stderr)
    return 0
