"""Command-line interface: ``sketchwm keygen | generate | detect | calibrate | plugins | demo``, and the plugins' commands.

One error path (:func:`main`): a failure caused by the user's input, files or environment prints
one line on stderr (``sketchwm: error: <problem>: <fix>``) and exits with status 2, without a
traceback; a bug prints its traceback and exits with status 1; ``--debug`` shows the traceback of
every error. A :class:`sketchwm.errors.SketchwmWarning` (e.g. a watermark that cannot act under
greedy decoding) prints one line, ``sketchwm: warning: <problem>: <fix>``, and the run goes on;
``sketchwm generate`` also records it in each record's provenance (``warnings``). Outputs are written atomically (:func:`sketchwm.io.atomic_write`): a failure or an
interrupt never truncates an existing file. Keys are read from a file (``--key``) or the
environment (``$SKETCHWM_KEY_FILE``, ``$SKETCHWM_KEY``), never from a secret on the command line.

Adding a sub-command: write ``cmd_x(args) -> int`` and add a parser for it in :func:`build_parser`
(``sub.add_parser(...)``, ``set_defaults(func=cmd_x)``); the error path comes for free. A plugin adds
its own (``sketchwm attack`` from the attack suite, ``sketchwm prior`` from the global-sketch plugin,
``sketchwm bench``/``leaderboard`` from the benchmark harness) through the hook
``sketchwm_register_commands`` (:mod:`sketchwm.hookspecs`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from typing import Any, Callable, Sequence

from .cli_args import (_add_alpha_arg, _add_key_args, _key, _now, _Parser, _progress, _watermarker,  # noqa: F401
                       add_config_args, config_from_args, finite_float, nonneg_float, nonneg_int, positive_int, probability)
from .cli_detect import (_check_key, _check_tokenizer, _detect_config, _detect_ray, _detection_alpha,  # noqa: F401
                         _first_difference, _recorded_config)
from .errors import InputError, SketchwmError

__all__ = ["main", "build_parser", "positive_int", "nonneg_int", "finite_float", "nonneg_float", "probability",
           "add_config_args", "config_from_args"]


# ---------------------------------------------------------------- commands
def cmd_keygen(args: argparse.Namespace) -> int:
    from .api import keygen

    key = keygen(args.out, overwrite=args.force)
    print(f"wrote key {key.fingerprint} to {args.out} (mode 0600)", file=sys.stderr)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from .data import load_prompts
    from .io import check_output_path, write_jsonl_atomic

    if args.out != "-":
        check_output_path(args.out)  # before loading a model
    prompts = list(args.prompt or [])
    if args.prompts:
        prompts += load_prompts(args.prompts)
    if not prompts:
        raise InputError("no prompts: pass --prompt TEXT or --prompts FILE")
    wm = _watermarker(args)
    over = {k: v for k, v in {"gen_length": args.gen_length, "steps": args.steps, "block_length": args.block_length,
                                "temperature": args.temperature, "remasking": args.remasking}.items() if v is not None}
    prov = wm.provenance(watermark=not args.no_watermark, seeds={"generate": args.seed}, **over)
    out = wm.generate(prompts, seed=args.seed, watermark=not args.no_watermark, batch_size=args.batch_size,
                      progress=_progress(args), **over)
    prov["created"] = _now()
    records = [
        {"prompt": p, "text": t, "n_tokens": int(n), "watermarked": not args.no_watermark,
         "scheme": wm.config.scheme.name, "key_fingerprint": wm.key.fingerprint, "tokenizer": prov["tokenizer"],
         "seed": args.seed, "provenance": prov}
        for p, t, n in zip(out.prompts, out.texts, out.lengths.tolist())
    ]
    write_jsonl_atomic(args.out, records, append=args.append)
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    import itertools

    from .batching import prefetch
    from .io import check_output_path, input_format, iter_input_chunks

    key = _key(args)  # key errors first, before reading (possibly) stdin
    if args.out and args.executor == "local":
        check_output_path(args.out)  # before any work
    fmt = input_format(args.input, args.format, args.text_column)
    source = args.input
    if args.executor == "ray" and os.path.isdir(args.input):  # the configuration is read from the first file
        from pathlib import Path

        files = sorted(p for p in Path(args.input).iterdir() if p.is_file() and not p.name.startswith((".", "_")))
        if not files:
            raise InputError(f"input directory {args.input} has no files")
        source = str(files[0])
    reader = iter_input_chunks(source, fmt, args.chunk_size, strict=args.strict,  # bounded memory: one chunk at a time
                               text_field=args.text_column)
    first = next(reader)
    cfg, cfg_source = _detect_config(args, first.meta())
    recorded_cfg = json.dumps(_recorded_config(first.meta()), sort_keys=True) if cfg_source == "records" else None
    from .api import Watermarker
    from .detection import Calibration

    wm = Watermarker(key, cfg)
    calibration = Calibration.load(args.calibration) if args.calibration else None
    args.alpha = _detection_alpha(args.alpha, calibration, args.any_calibration_alpha)
    run = {"config_source": cfg_source, "calibration": args.calibration, "created": _now()}
    _check_tokenizer(first, wm)
    seen_keys: set[str] = set()
    _check_key(first, key.fingerprint, args.strict, seen_keys)
    if args.executor == "ray":
        _resume_gc()
        return _detect_ray(args, key, wm, calibration, run, fmt)
    det = wm.detector(calibration, args.alpha)
    prov = dict(wm.detection_provenance(), **run)
    _resume_gc()  # started up: the records' objects are short-lived garbage the collector should see

    def checked() -> Any:  # the next chunks are read and parsed in a background thread
        for c in itertools.chain([first], prefetch(reader, depth=2)):
            if recorded_cfg is not None and c.start > 0:
                later = _recorded_config(c.meta())
                if later is not None and json.dumps(later, sort_keys=True) != recorded_cfg:
                    field = _first_difference(json.loads(recorded_cfg), later)
                    raise InputError(f"the input mixes configurations (records from {c.start + 1} on differ in {field}): "
                                     "detect each group separately, or pass --config FILE to use one configuration for all")
            if c.start > 0:
                _check_tokenizer(c, wm)
                _check_key(c, key.fingerprint, args.strict, seen_keys)
            yield c

    from .corpus import ResultWriter, detection_columns, iter_results

    writer = ResultWriter(args.out) if args.out else None
    state = {"start": 0, "errors": [], "scored": 0, "watermarked": 0, "notes": [], "res": None}
    held: list[Any] = []  # output held back while no text has been scored (an input with none is one error)

    def emit(chunk: Any, res: Any) -> None:
        if writer is not None:
            cols, detection = detection_columns(res, run)
            writer.write(chunk, cols, detection)
            return
        rows = res.to_records()
        if args.json:
            sys.stdout.write(b"".join(orjson.dumps({"index": i, **r}) + b"\n" for i, r in enumerate(rows, chunk.start)).decode())
            return
        by_p = res.threshold_source == "p-value"  # the decision is p <= alpha: those two columns come first
        chan = res.channels is not None
        if chunk.start == 0:
            rule = "p-value     alpha" if by_p else "     score  threshold"
            print(f"{'#':>4} {'tokens':>6} {'scored':>6} {rule}  {'decision':<15}  "
                  + (f"{'score':>10}" if by_p else f"{'p-value':>10}")
                  + (f"  {'channel':<15} {'z':>7}" if chan else f"  {'z':>7}"))
        for i, r in enumerate(rows, chunk.start):
            if r["status"] != "ok":
                print(f"{i:>4} {r['n_tokens']:>6} {'-':>6} {'-':>10} {'-':>10}  not scored: {r['error']}")
                continue
            scored = "-" if r.get("n_scored") is None else r["n_scored"]
            pair = f"{r['p_value']:>10.2e} {r['alpha']:>10g}" if by_p else f"{r['score']:>10.3f} {r['threshold']:>10.3f}"
            other = f"{r['score']:>10.3f}" if by_p else f"{r['p_value']:>10.2e}"
            z = f"  {r['deciding_channel'] or '-':<15} {r['z']:>7.2f}" if chan else f"  {r['z']:>7.2f}"
            print(f"{i:>4} {r['n_tokens']:>6} {scored:>6} {pair}  "
                  f"{'WATERMARKED' if r['is_watermarked'] else 'not watermarked':<15}  {other}{z}")
            if r["p_value"] is not None and (r["p_value"] <= r["alpha"]) != r["is_watermarked"] and not by_p:
                state["notes"].append(f"  #{i}: {r['explanation']}")

    import orjson

    with writer if writer is not None else contextlib.nullcontext():
        for chunk, res in iter_results(checked(), det):
            res.provenance = prov
            chunk_errors = [e for e in res.errors or [] if e is not None]
            state["errors"] += chunk_errors
            state["scored"] += len(chunk) - len(chunk_errors)
            state["watermarked"] += int(res.is_watermarked.sum())
            state["start"] = chunk.start + len(chunk)
            state["res"] = res
            if state["scored"] == 0:
                held.append((chunk, res))
                continue
            for c, r in held:
                emit(c, r)
            held.clear()
            emit(chunk, res)
        start, errors = state["start"], state["errors"]
        if errors and len(errors) == start:  # nothing could be scored: one error, no output
            raise InputError(errors[0] if start == 1 else f"none of the {start} texts could be scored (first: {errors[0]})")
    res = state["res"]
    if writer is not None:
        print(f"wrote {start} results to {args.out} ({state['watermarked']} watermarked, {len(errors)} not scored)",
              file=sys.stderr)
    elif not args.json and res is not None:
        if res.threshold_source == "p-value":
            rule = f"decision: p-value <= alpha (no closed-form threshold, no calibration)"
        else:
            rule = f"decision: score against threshold ({res.threshold_source}, alpha={res.alpha})"
        chan = "; z: the deciding channel's" if res.channels is not None else ""
        print(f"{rule}; p-value: {res.p_value_method}{chan}\n"
              f"key {res.key_fingerprint}; scheme {prov['scheme']['name']} (config from {cfg_source}); "
              f"sketchwm {prov['sketchwm_version']}; --json for each text's explanation")
        for n in state["notes"]:
            print(n)
    if errors and args.strict:
        print(f"sketchwm: error: {len(errors)} of {start} texts could not be scored (first: {errors[0]}); "
              "drop --strict to report them per text", file=sys.stderr)
        return 2
    return 0


_GC_STATE: list[str] = []  # per command being run: "paused" (start-up), "frozen" (resumed), or "" (left alone)


@contextlib.contextmanager
def _gc_paused_startup(program: bool) -> Any:
    """Pause Python's cyclic garbage collector while a command starts up, until :func:`_resume_gc` or the end.

    Importing torch and transformers and loading a tokenizer make about a million long-lived objects,
    none of them garbage; the collector would traverse them again and again while they are made, then
    in every full collection and once more at exit (together about a quarter of ``sketchwm detect``'s
    start-up). :func:`_resume_gc` freezes them (``gc.freeze``). ``program``: this process is the
    command itself, so they stay frozen to its end; otherwise (``main([...])`` called in-process)
    they are handed back to the collector when the command returns.
    """
    import gc

    _GC_STATE.append("paused" if gc.isenabled() else "")
    if _GC_STATE[-1]:
        gc.disable()
    try:
        yield
    finally:
        state = _GC_STATE.pop()
        if state:
            gc.enable()
        if state == "frozen" and not program:
            gc.unfreeze()


def _resume_gc() -> None:
    """Freeze what the start-up made and turn the collector back on, after :func:`_gc_paused_startup`
    paused it (else nothing)."""
    import gc

    if _GC_STATE and _GC_STATE[-1] == "paused":
        _GC_STATE[-1] = "frozen"
        gc.freeze()  # kept for good: later collections need not traverse them
        gc.enable()


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .data import load_prompts
    from .io import check_output_path, read_texts

    check_output_path(args.out)
    wm = _watermarker(args)
    if args.input:
        texts = read_texts(args.input)
        source, model_id = f"{len(texts)} texts from {args.input}", args.model_id or "human"
        prov = wm.provenance(watermark=False, seeds={})
    else:
        prompts = load_prompts("prompts", args.n_samples, args.prompt_offset)
        over = {"gen_length": args.gen_length} if args.gen_length else {}
        prov = wm.provenance(watermark=False, seeds={"calibrate": args.seed}, **over)
        out = wm.generate(prompts, seed=args.seed, watermark=False, batch_size=args.batch_size,
                          progress=_progress(args), **over)
        texts, source, model_id = out.texts, f"{len(prompts)} unwatermarked samples of {wm.backend.model_id}", None
    cal = wm.calibrate(texts, alpha=args.alpha, source=source, model_id=model_id, skip_invalid=not args.strict,
                       provenance=prov)
    cal.save(args.out)
    skipped = f"; {cal.n_skipped} texts could not be scored and were left out" if cal.n_skipped else ""
    print(f"wrote calibration for key {cal.key_fingerprint} ({len(cal.bins)} length bins) to {args.out}{skipped}",
          file=sys.stderr)
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from .plugin_index import describe_commands, describe_plugins

    desc = describe_plugins(use_cache=not args.no_cache)
    if args.json:
        print(json.dumps(desc, indent=2, ensure_ascii=False))
    else:
        for kind, items in desc.items():
            if kind == "broken":
                continue
            print(f"{kind}:")
            for it in items:
                print(f"  {it['name']:<18} {it['summary']}")
        for it in desc.get("broken", []):
            print(f"broken plugin {it['name']!r}: failed to load and left out: {it['error']}")
        print("commands (hook sketchwm_register_commands):")
        for name, info in describe_commands(use_cache=not args.no_cache).items():
            print(f"  {name:<18} {info['help']} [plugin {info['plugin']}]")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_table, run_demo

    key = _key(args) if args.key else None
    res = run_demo(key=key, n_prompts=args.n_prompts, n_null=args.n_null, gen_length=args.gen_length, alpha=args.alpha,
                   seed=args.seed, config=config_from_args(args) or None, progress=_progress(args))
    print(format_table(res))
    if args.json:
        print(json.dumps(res))
    return 0


def build_parser(argv: Sequence[str] | None = None, plugins: Sequence[Any] = ()) -> argparse.ArgumentParser:
    """The argparse parser of the ``sketchwm`` command.

    Args:
        argv: the command line it will parse: only the plugin adding its sub-command is imported
            (others are listed from the cache of :func:`sketchwm.plugin_index.describe_commands`).
            None: every plugin command is built (the full parser).
        plugins: modules or objects implementing ``sketchwm_register_commands`` to register directly
            (plugins under test; installed plugins come from the ``sketchwm`` entry points).

    Raises:
        RegistryError: a plugin fails to load or adds a sub-command whose name is taken.
    """
    from . import __version__
    from .io import FORMATS_HELP, INPUT_FORMATS

    p = _Parser(prog="sketchwm", description="Global sketch watermarking for masked diffusion LMs.")
    p.add_argument("--version", action="version", version=f"sketchwm {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of every error")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND",
                           help="one of the sub-commands below; `sketchwm COMMAND --help` for its options")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of every error")

    def add(name: str, func: Callable[[argparse.Namespace], int], key_help: str | None = None,
            **kw: Any) -> argparse.ArgumentParser:
        """A sub-command running ``func``; with the key options (:func:`_add_key_args`) unless ``key_help`` is None."""
        parser = sub.add_parser(name, parents=[common], **kw)
        parser.set_defaults(func=func)
        if key_help is not None:
            _add_key_args(parser, key_help)
        return parser

    k = add("keygen", cmd_keygen, help="write a new secret key file (mode 0600)")
    k.add_argument("--out", required=True, help="path of the new key file (its directory must exist)")
    k.add_argument("--force", action="store_true", help="overwrite an existing key file")

    g = add("generate", cmd_generate, "", help="generate (watermarked) text → JSONL")
    g.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    g.add_argument("--prompts", help="file with one prompt per line (or JSONL with 'prompt'); - for stdin; or a "
                                     "shipped set: prompts, human (sketchwm.data.load_prompts)")
    g.add_argument("--out", default="-", help="output JSONL (default stdout); written atomically")
    g.add_argument("--append", action="store_true", help="add the new records after those already in --out "
                                                         "(still one atomic replace)")
    g.add_argument("--no-watermark", action="store_true", help="sample the base model")
    g.add_argument("--seed", type=nonneg_int, default=0, help="seed of the sampler's torch.Generator (default 0)")
    g.add_argument("--gen-length", type=positive_int, help="tokens to generate per text (default: the backend's)")
    g.add_argument("--steps", type=positive_int, help="denoising steps (default: the backend's)")
    g.add_argument("--block-length", type=positive_int, help="semi-autoregressive block length (default: the backend's)")
    g.add_argument("--temperature", type=nonneg_float, help="sampling temperature T >= 0 (0 = greedy)")
    g.add_argument("--remasking", help="which masked positions to commit first: a registered remasking rule "
                                       "(built in: low_confidence, random, entropy; default: the backend's)")
    g.add_argument("--batch-size", type=positive_int, default=16, help="prompts per forward batch (default 16)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_args(g)

    d = add("detect", cmd_detect, "", help="detect the watermark in text, JSONL or Parquet")
    d.add_argument("--input", required=True, help=f"the texts to detect, one of: {FORMATS_HELP}; - for stdin")
    d.add_argument("--format", choices=list(INPUT_FORMATS), default="auto",
                   help="what --input is (default auto: CSV/TSV by the extension .csv, .tsv or .tab; Parquet by its "
                        "magic bytes; JSONL when the first non-blank character is '{'; CSV/TSV when the first line "
                        "is a header with the text column; else one plain text; binary data is refused)")
    d.add_argument("--text-column", default="text", metavar="NAME",
                   help="the field or column holding the text, in JSONL, CSV, TSV and Parquet (default text)")
    d.add_argument("--out", help="write every input record with the detection columns added, atomically: Parquet for "
                                 "a .parquet/.pq name, else JSONL (with --executor ray: a new directory of Parquet "
                                 "files). Default: a table (or --json lines) on stdout")
    d.add_argument("--calibration", help="calibration JSON from `sketchwm calibrate` (default: analytic threshold)")
    d.add_argument("--alpha", type=probability, help="target false-positive rate in (0, 1) (default: the "
                                                      "calibration's with --calibration, else 0.01)")
    d.add_argument("--any-calibration-alpha", action="store_true",
                   help="accept an --alpha other than the calibration's (refused by default: the calibrated threshold "
                        "holds the calibration's alpha, not this one)")
    d.add_argument("--json", action="store_true", help="one JSON result per line on stdout")
    d.add_argument("--strict", action="store_true", help="stop at the first record without a string 'text', and exit 2 "
                                                         "if any text cannot be scored (default: report both in that "
                                                         "record's result and detect the rest)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.add_argument("--chunk-size", type=positive_int, default=4096,
                   help="records read and detected at a time (large inputs stream in bounded memory; the Ray batch size)")
    d.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local (default): this process; ray: Ray Data workers (needs --out DIR; pip install "
                        "'sketchwm[ray]')")
    d.add_argument("--ray-address", help="Ray cluster to run on (default: $RAY_ADDRESS; neither: a local Ray for this "
                                         "run)")
    d.add_argument("--workers", type=positive_int, help="Ray detector actors (default: the cluster's CPUs)")
    add_config_args(d)

    c = add("calibrate", cmd_calibrate, "", help="empirical thresholds from unwatermarked texts → JSON")
    c.add_argument("--out", required=True, help="output calibration JSON (written atomically)")
    c.add_argument("--input", help="unwatermarked texts (JSONL/plain); default: sample the model")
    c.add_argument("--model-id", help="label of the null texts' source (with --input)")
    c.add_argument("--n-samples", type=positive_int, default=200, help="model samples to calibrate on (default 200)")
    c.add_argument("--prompt-offset", type=nonneg_int, default=100, help="first prompt of the shipped split to use")
    c.add_argument("--gen-length", type=positive_int, help="tokens per sample (default: the backend's)")
    _add_alpha_arg(c)
    c.add_argument("--seed", type=nonneg_int, default=1, help="seed of the sampler (default 1)")
    c.add_argument("--batch-size", type=positive_int, default=50, help="prompts per forward batch (default 50)")
    c.add_argument("--strict", action="store_true", help="fail if any text cannot be scored (default: leave it out)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_args(c)

    pl = add("plugins", cmd_plugins, help="list registered components by kind")
    pl.add_argument("--json", action="store_true", help="print the listing as JSON")
    pl.add_argument("--no-cache", action="store_true", help="import every plugin instead of reading the cached listing")

    dm = add("demo", cmd_demo, "; default: a fresh random key per run (the public demo key with --seed)",
             help="the main job: generate, calibrate, detect, print TPR/FPR")
    dm.add_argument("--n-prompts", type=positive_int, default=20, help="watermarked/unwatermarked prompt pairs (default 20)")
    dm.add_argument("--n-null", type=positive_int, default=200, help="unwatermarked samples for calibration (default 200)")
    dm.add_argument("--gen-length", type=positive_int, default=128, help="tokens per sample (default 128)")
    _add_alpha_arg(dm)
    dm.add_argument("--seed", type=nonneg_int, help="seed of the sampler (default 0); without --key it also selects "
                                                    "the public demo key, so the run is reproducible")
    dm.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last line")
    dm.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_args(dm)

    from .plugin_index import add_plugin_commands

    # plugins add theirs through the hook sketchwm_register_commands (attack, bench, leaderboard, prior, ...)
    add_plugin_commands(sub, [common], _command_word(argv), all_commands=argv is None, plugins=plugins)
    return p


def _command_word(argv: Sequence[str] | None) -> str | None:
    """The sub-command named on the command line (its first word that is not an option), or None."""
    return next((a for a in argv or () if not a.startswith("-")), None)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@contextlib.contextmanager
def _warnings_as_lines():
    """Within a command, every :class:`sketchwm.errors.SketchwmWarning` (e.g. a watermark that cannot act
    under greedy decoding) is shown (the code that warns already warns once), through the one-line
    printer :func:`main` installs (:func:`_warning_printer`). Restored on exit."""
    from .errors import SketchwmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always", SketchwmWarning)
        yield


@contextlib.contextmanager
def _third_party_bars_off(program: bool):
    """While a command runs with stderr not a terminal (a log, a pipe, CI), third-party progress bars
    (Hugging Face's ``Loading weights``, downloads, any tqdm bar) are off: they would fill the log
    with carriage returns. sketchwm's own bars already show only on a terminal (``_progress``).

    ``program``: this process is the command, so the switches are environment variables set before
    anything imports those libraries (``HF_HUB_DISABLE_PROGRESS_BARS``, ``TQDM_DISABLE``; kept when
    already set). Otherwise (``main([...])`` called in-process) transformers' bars are switched off
    for the command and back on after it.
    """
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one
        terminal = False
    if terminal:
        yield
        return
    if program:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
        yield
        return
    hf = sys.modules.get("transformers.utils.logging")
    was_on = hf is not None and hf.is_progress_bar_enabled()
    if was_on:
        hf.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf.enable_progress_bar()


def _warning_printer(debug: bool) -> Callable[..., None]:
    """A :func:`warnings.showwarning` that prints one line, ``sketchwm: warning: <message>``, the
    format of the CLI's errors (``--debug`` adds the category and where it was raised)."""

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        where = f" [{category.__name__} at {filename}:{lineno}]" if debug else ""
        try:
            print(f"sketchwm: warning: {_one_line(message)}{where}", file=file or sys.stderr)
        except (OSError, ValueError):  # stderr closed: a warning must never fail the command
            pass

    return show


def main(argv: Sequence[str] | None = None, plugins: Sequence[Any] = ()) -> int:
    """Entry point of the ``sketchwm`` console script; returns the exit status.

    0: success. 2: the user's input, files or environment (one line on stderr). 1: a bug (traceback).
    130: interrupted (Ctrl-C); outputs are left as they were. ``plugins``: as for :func:`build_parser`.
    Warnings print as one line in the errors' format, ``sketchwm: warning: <message>``.
    """
    import warnings

    with _interrupt_handler():  # first: a Ctrl-C from here on exits 130 with its one line
        argv_list = list(sys.argv[1:] if argv is None else argv)
        saved = warnings.showwarning
        warnings.showwarning = _warning_printer("--debug" in argv_list)
        try:
            return _main(argv_list, plugins, program=argv is None)
        finally:
            warnings.showwarning = saved


@contextlib.contextmanager
def _interrupt_handler():
    """While a command runs, SIGINT raises :class:`sketchwm.errors.Interrupted` (a KeyboardInterrupt).

    Installed only over Python's own handler, in the main thread: a SIGINT that the caller ignores
    (a background job) or handles stays theirs. The previous handler is restored on exit.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    from .errors import Interrupted

    def raise_interrupted(signum: int, frame: Any) -> None:
        raise Interrupted()

    signal.signal(signal.SIGINT, raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _main(argv: list[str], plugins: Sequence[Any], program: bool = False) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # busy-waiting OpenMP threads starve a shared 2-core CPU
    argv = list(sys.argv[1:] if argv is None else argv)
    # detect encodes in batches with the Rust tokenizer's own thread pool; other commands fork workers
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true" if _command_word(argv) == "detect" else "false")
    debug = "--debug" in argv
    try:
        startup = _gc_paused_startup(program) if _command_word(argv) == "detect" else contextlib.nullcontext()
        with _warnings_as_lines(), _third_party_bars_off(program), startup:
            parser = build_parser(argv, plugins)
            try:
                args = parser.parse_args(argv)
            except SystemExit as exc:  # --help, --version, usage errors (exit 2)
                return int(exc.code or 0) if not isinstance(exc.code, str) else 2
            debug = bool(getattr(args, "debug", False))
            return int(args.func(args) or 0)
    except SketchwmError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"sketchwm: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sketchwm: interrupted; no output file was changed", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sketchwm detect ... | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except (OSError, MemoryError) as exc:  # the environment: permissions, full disk, out of memory
        if debug:
            import traceback

            traceback.print_exc()
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        hint = "lower --batch-size or --gen-length" if isinstance(exc, MemoryError) else "check the path, permissions and free space"
        print(f"sketchwm: error: {type(exc).__name__}: {_one_line(exc)}{where}: {hint}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: show it
        if _is_oom(exc):
            print(f"sketchwm: error: out of memory ({_one_line(exc)[:200]}): lower --batch-size or --gen-length",
                  file=sys.stderr)
            return 2
        import traceback

        traceback.print_exc()
        print("sketchwm: internal error (a bug in sketchwm or a plugin; please report it with the traceback above)",
              file=sys.stderr)
        return 1


def _is_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return oom is not None and isinstance(exc, oom)


if __name__ == "__main__":
    sys.exit(main())
