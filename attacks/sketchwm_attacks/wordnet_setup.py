"""Lay out WordNet 3.0 where nltk finds it, from the Debian packages, offline. Idempotent.

nltk's ``WordNetCorpusReader`` (nltk 3.10) reads, from a directory ``corpora/wordnet/`` under one
of ``nltk.data.path``: ``data.{noun,verb,adj,adv}``, ``index.{noun,verb,adj,adv}``,
``index.sense``, ``{noun,verb,adj,adv}.exc`` and ``lexnames``. Debian's ``wordnet-base`` ships the
first ones in ``/usr/share/wordnet``, ``wordnet-sense-index`` ships ``index.sense``; nobody ships
``lexnames``, which this module writes from the table of WordNet's ``lexnames(5WN)`` manual page
(file number, lexicographer file name, syntactic category 1 noun / 2 verb / 3 adjective / 4 adverb).

Usage::

    python -m sketchwm_attacks.wordnet_setup [--source /usr/share/wordnet] [--target DIR] [--no-apt]

The default target is ``<sys.prefix>/nltk_data`` (the virtual environment's, which nltk searches).
Run as root with the Debian files missing, it installs ``wordnet-base wordnet-sense-index`` with
apt-get; otherwise it stops with a one-line error saying what to install.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sketchwm.errors import ModelFileError, SketchwmError

__all__ = ["LEXNAMES", "setup_wordnet", "load_wordnet", "main"]

DEBIAN_DIR = Path("/usr/share/wordnet")
DEBIAN_PACKAGES = ("wordnet-base", "wordnet-sense-index")
_POS = ("noun", "verb", "adj", "adv")
REQUIRED = tuple(f"data.{p}" for p in _POS) + tuple(f"index.{p}" for p in _POS) + ("index.sense",) + tuple(
    f"{p}.exc" for p in _POS
)

#: The 45 lexicographer files of WordNet 3.0 (lexnames(5WN)): (number, name, syntactic category).
LEXNAMES: tuple[tuple[int, str, int], ...] = tuple(
    (i, name, {"noun": 1, "verb": 2, "adj": 3, "adv": 4}[name.split(".")[0]])
    for i, name in enumerate(
        """adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute
        noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group
        noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession
        noun.process noun.quantity noun.relation noun.shape noun.state noun.substance noun.time
        verb.body verb.change verb.cognition verb.communication verb.competition verb.consumption
        verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession
        verb.social verb.stative verb.weather adj.ppl""".split()
    )
)


def _lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{cat}\n" for i, name, cat in LEXNAMES)


def _missing(source: Path) -> list[str]:
    return [f for f in REQUIRED if not (source / f).is_file()]


def default_target() -> Path:
    """``<sys.prefix>/nltk_data``, a directory nltk always searches."""
    return Path(sys.prefix) / "nltk_data"


def setup_wordnet(source: Path = DEBIAN_DIR, target: Path | None = None, allow_apt: bool = True, quiet: bool = False) -> Path:
    """Copy WordNet into ``target/corpora/wordnet`` and write ``lexnames``; skip what is already there.

    Args:
        source: directory with the Debian WordNet files.
        target: an nltk data directory (default :func:`default_target`).
        allow_apt: install the Debian packages with apt-get when files are missing and we are root.
        quiet: print nothing.

    Returns:
        The ``corpora/wordnet`` directory.

    Raises:
        ModelFileError: files missing and apt-get not possible (not root, ``allow_apt`` False, or it failed).
    """
    source = Path(source)
    missing = _missing(source)
    if missing and allow_apt and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *DEBIAN_PACKAGES]):
            if not quiet:
                print("+", " ".join(cmd), flush=True)
            if subprocess.run(cmd, env=env, check=False).returncode != 0:
                raise ModelFileError(f"'{' '.join(cmd)}' failed; install {' '.join(DEBIAN_PACKAGES)} by hand")
        missing = _missing(source)
    if missing:
        raise ModelFileError(
            f"WordNet files missing in {source}: {', '.join(missing)}; install the Debian packages "
            f"{' and '.join(DEBIAN_PACKAGES)} (apt-get install {' '.join(DEBIAN_PACKAGES)}) or pass --source"
        )
    dest = (Path(target) if target is not None else default_target()) / "corpora" / "wordnet"
    dest.mkdir(parents=True, exist_ok=True)
    copied = 0
    for name in REQUIRED:
        src, dst = source / name, dest / name
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            shutil.copyfile(src, dst)  # copyfile: owned by the running user, as nltk needs
            copied += 1
    lex = dest / "lexnames"
    if not lex.exists() or lex.read_text() != _lexnames_text():
        lex.write_text(_lexnames_text())
        copied += 1
    if not quiet:
        print(f"WordNet ready in {dest} ({copied} file(s) written)")
    return dest


_WN: Any = None


def load_wordnet() -> Any:
    """nltk's ``wordnet`` corpus reader, loaded (cached).

    Raises:
        ModelFileError: WordNet is not laid out where nltk finds it.
    """
    global _WN
    if _WN is None:
        target = str(default_target())
        try:
            import nltk

            if target not in nltk.data.path:
                nltk.data.path.append(target)
            from nltk.corpus import wordnet as wn

            wn.ensure_loaded()
        except (LookupError, OSError) as exc:
            first = str(exc).strip().splitlines()
            raise ModelFileError(
                "WordNet for nltk is not installed; run `python -m sketchwm_attacks.wordnet_setup` "
                f"(needs Debian {' + '.join(DEBIAN_PACKAGES)}) [{first[1] if len(first) > 1 else first[0] if first else exc}]"
            ) from None
        _WN = wn
    return _WN


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see module doc). Returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m sketchwm_attacks.wordnet_setup", description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEBIAN_DIR, help="directory with the Debian WordNet files")
    ap.add_argument("--target", type=Path, default=None, help=f"nltk data directory (default {default_target()})")
    ap.add_argument("--no-apt", action="store_true", help="never call apt-get")
    ap.add_argument("--check", action="store_true", help="after setup, load WordNet with nltk and print a synonym")
    args = ap.parse_args(argv)
    try:
        setup_wordnet(args.source, args.target, allow_apt=not args.no_apt)
        if args.check:
            if args.target is not None:
                import nltk

                nltk.data.path.insert(0, str(args.target))
            wn = load_wordnet()
            syn = sorted({l.name() for s in wn.synsets("happy") for l in s.lemmas()})
            print(f"nltk wordnet: {len(list(wn.all_synsets()))} synsets; happy -> {', '.join(syn)}")
    except SketchwmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
