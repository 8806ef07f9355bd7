"""The detector's input paths: texts, streams of texts and lists of token ids, batched without a Python
loop over texts (one flat concatenation with offsets, padded by index arithmetic) and scored in
length-sorted groups while the next batch of texts is tokenised (:mod:`sketchwm.batching`).
:class:`InputPaths` is the part of :class:`sketchwm.detection.Detector` that turns input into padded
batches; the decision rule, thresholds and calibration stay in :mod:`sketchwm.detection`.
"""

from __future__ import annotations

import importlib
import itertools
import threading
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch

from .batching import flatten_ids_range, length_groups, pad_flat, prefetch
from .components import one_batch
from .detection_result import DetectionResult
from .errors import InputError


class InputPaths:
    """Input paths of :class:`sketchwm.detection.Detector` (a mixin: it reads the detector's ``scheme``,
    ``tokenizer``, ``thresholds`` and ``decide``)."""

    def detect(self, texts: Sequence[str], *, per_item: bool = False, progress: bool = False,
               index_offset: int = 0, batch: int = 2048) -> DetectionResult:
        """Detect in texts (see :meth:`detect_ids`), tokenising the next ``batch`` texts in a background
        thread while the current ones are scored (:meth:`detect_stream`).

        Args:
            per_item: False raises on the first text that cannot be scored; True scores the others and
                records the reason in ``DetectionResult.errors`` (batch use: one result per text).
            progress: a tqdm bar counting texts (on stderr).
            index_offset: added to the text indices named in error messages (a chunk of a stream).
            batch: texts per tokenisation call.

        Raises:
            InputError: a single string instead of a list; without ``per_item``, a text that cannot be
                scored.
        """
        if isinstance(texts, str):
            raise InputError("detect expects a list of texts, got a single string")
        if len(texts) == 0:
            raise InputError("no texts to detect")
        if not per_item:
            for i, t in enumerate(texts):
                if not isinstance(t, str) or not t.strip():
                    raise InputError(f"text {i + index_offset} is empty")
        parts = [texts[i : i + batch] for i in range(0, len(texts), batch)]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="detecting", unit="text")
        try:
            out = []
            for res in self.detect_stream(parts, per_item=per_item, index_offset=index_offset):
                out.append(res)
                if bar is not None:
                    bar.update(len(res))
        finally:
            if bar is not None:
                bar.close()
        return DetectionResult.concat(out)

    def detect_stream(self, batches: "Iterable[Sequence[Any]]", *, per_item: bool = True, index_offset: int = 0,
                      errors: "Iterable[Sequence[str | None] | None] | None" = None) -> Iterator[DetectionResult]:
        """Detect batch after batch of texts, tokenising batch k+1 in a background thread while batch k
        is scored (the fast tokenizer releases the GIL), one :class:`DetectionResult` per batch.

        Args:
            batches: an iterable of text lists (read lazily, one ahead of tokenisation).
            per_item: as for :meth:`detect`; an item that is not a non-empty string is an error.
            index_offset: index of the first text, for error messages (counted on across batches).
            errors: per batch, reasons known before tokenisation (e.g. a record without a text), or
                None; such texts are not tokenised and are reported with that reason.

        Raises:
            InputError: without ``per_item``, the first text that cannot be scored.
        """
        errs_iter = iter(errors) if errors is not None else itertools.repeat(None)

        def tokenized() -> Iterator[tuple[int, list[list[int]], list[str | None]]]:
            off = index_offset
            for texts, errs in zip(batches, errs_iter):
                lists, errs = self._tokenize_items(texts, off, errs)
                yield off, lists, errs
                off += len(texts)

        # the p-values' special functions (scipy.special, a few tenths of a second to import) load on a
        # thread of their own while the first batch is tokenised, instead of after it
        threading.Thread(target=_import_quietly, args=("scipy.special",), name="sketchwm-preload", daemon=True).start()
        for off, lists, errs in prefetch(tokenized(), depth=2):
            yield self.detect_ids(lists, per_item=per_item, index_offset=off, _errors=errs)

    def check_flat(self, flat: np.ndarray, lengths: np.ndarray, index_offset: int = 0,
                   id_range: tuple[int, int] | None = None) -> list[str | None] | None:
        """:meth:`check_ids` of every text of a flat concatenation, vectorised: None when all can be
        scored, else one reason (or None) per text.

        Args:
            flat: (T,) int64 ids; lengths: (B,) int64 (see :func:`sketchwm.batching.flatten_ids`).
            id_range: the smallest and largest id of ``flat`` when known
                (:func:`sketchwm.batching.flatten_ids_range`): inside [0, V) with every text long
                enough, nothing more is read.
        """
        V, m = self.scheme.vocab_size, self.scheme.min_tokens
        B = len(lengths)
        if id_range is not None and id_range[0] >= 0 and id_range[1] < V and B and int(lengths.min()) >= max(m, 1):
            return None
        lo = np.zeros(B, np.int64)
        hi = np.zeros(B, np.int64)
        nonempty = np.flatnonzero(lengths > 0)
        if len(nonempty):  # per-text min and max over consecutive segments of flat
            starts = (np.cumsum(lengths) - lengths)[nonempty]
            lo[nonempty] = np.minimum.reduceat(flat, starts)
            hi[nonempty] = np.maximum.reduceat(flat, starts)
        bad = (lengths < m) | (lengths == 0) | (lo < 0) | (hi >= V)  # (B,) bool
        if not bad.any():
            return None
        errors: list[str | None] = [None] * B
        for i in np.flatnonzero(bad).tolist():  # the bad texts only
            n, j = int(lengths[i]), i + index_offset
            if n == 0:
                errors[i] = f"text {j} is empty"
            elif n < m:
                errors[i] = f"text {j} has {n} tokens; at least {m} are needed for detection"
            else:
                errors[i] = f"text {j} has token id {int(hi[i]) if hi[i] >= V else int(lo[i])} outside the vocabulary [0, {V})"
        return errors

    def detect_ids(
        self, id_lists: "Sequence[Sequence[int]] | torch.Tensor", *, per_item: bool = False, progress: bool = False,
        chunk: int = 4096, index_offset: int = 0, _errors: list[str | None] | None = None,
    ) -> DetectionResult:
        """Detect in token-id lists.

        The lists are concatenated into one flat array (one C-level pass, no per-text tensors), checked
        vectorised, sorted by length and cut into groups of at most ``chunk`` texts and 2^21 padded
        cells, each padded by index arithmetic and scored in one vectorised call
        (:mod:`sketchwm.batching`).

        Args:
            id_lists: B lists (or arrays) of token ids; a (B, N) int64 tensor (every entry a token)
                goes to :meth:`detect_batch`.
            per_item: see :meth:`detect`; unscored texts get NaN statistics, ``is_watermarked`` False
                and their reason in ``errors``.
            progress: a tqdm bar counting texts.
            chunk: at most this many texts per vectorised scoring call (bounds memory).
            index_offset: added to the text indices named in error messages.

        A (B, N) int64 tensor (every entry a token) goes to :meth:`detect_batch`.

        The minimum-length rule applies to the text's length in tokens (``n_tokens``), not to the
        number of tokens the statistic scores (``n_scored``).

        Raises:
            InputError: no texts; ids that are not integers; without ``per_item``, an empty or too-short text (fewer than
                ``scheme.min_tokens`` tokens of text) or ids outside [0, V).
        """
        if torch.is_tensor(id_lists):  # a pre-tokenised (B, N) batch, every entry a token
            return self.detect_batch(id_lists)
        B = len(id_lists)
        if B == 0:
            raise InputError("no texts to detect")
        errors: list[str | None] = list(_errors) if _errors is not None else [None] * B
        score = torch.full((B,), float("nan"), dtype=torch.float64)
        z, p = score.clone(), score.clone()
        lengths = np.zeros(B, np.int64)
        n_scored = torch.zeros(B, dtype=torch.long)
        channels: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # name → (B,) p-values, (B,) z; NaN unscored
        ok = np.ones(B, dtype=bool)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=B, desc="detecting", unit="text")
        # pieces of at most 16,384 texts (bounds the flat copy), each read into an int64 array (the C
        # reader splits a large piece over torch's threads) and then scored; scoring a piece while
        # reading the next one would not overlap: the reader holds the GIL that the scorer's numpy
        # calls wait for
        step = max(chunk, 16384)
        done: list[str] = []
        for a in range(0, B, step):
            b = min(B, a + step)
            flat, lens, id_range = flatten_ids_range(id_lists[a:b])  # (T,), (b - a,), (lo, hi) or None
            lengths[a:b] = lens
            found = self.check_flat(flat, lens, index_offset + a, id_range)
            if found is not None:
                errors[a:b] = [e if e is not None else f for e, f in zip(errors[a:b], found)]
            if found is not None or _errors is not None:
                ok[a:b] = [e is None for e in errors[a:b]]
            if not per_item and not ok[a:b].all():
                raise InputError(next(e for e in errors[a:b] if e is not None))
            good = np.flatnonzero(ok[a:b])  # indices within the piece
            inside = None if found is not None or id_range is None else id_range  # every id of the piece in [0, V)
            done.append(self._score_piece(flat, lens, good, a, chunk, score, z, p, n_scored, channels, inside))
            if bar is not None:
                bar.update(b - a)
        if bar is not None:
            bar.close()
        method = next((m for m in reversed(done) if m), "")
        lengths_t = torch.from_numpy(lengths)
        analytic, calibrated = self.thresholds(lengths_t)
        thr, source, decide = self.decide(score, p, lengths_t, (analytic, calibrated))
        decide = decide & torch.from_numpy(ok)
        return DetectionResult(
            score=score, z=z, p_value=p, threshold=thr, is_watermarked=decide,
            n_tokens=lengths_t, threshold_source=source, alpha=self.alpha, key_fingerprint=self.key_fingerprint,
            scheme=self.scheme.name, p_value_method=method, errors=errors if per_item else None,
            tau_analytic=analytic, tau_calibrated=calibrated, n_scored=n_scored, channels=channels or None,
        )

    def _score_piece(self, flat: np.ndarray, lengths: np.ndarray, good: np.ndarray, start: int, chunk: int,
                     score: torch.Tensor, z: torch.Tensor, p: torch.Tensor, n_scored: torch.Tensor,
                     channels: dict[str, tuple[torch.Tensor, torch.Tensor]],
                     id_range: tuple[int, int] | None = None) -> str:
        """Score texts ``good`` of a flat piece (lengths (b,)) in length-sorted groups; write their
        statistics at ``start + index`` of the (B,) outputs (each channel's p-value and z into
        ``channels``, made NaN-filled on first sight); return the p-value method ("" if none).
        ``id_range``: the piece's id range when every id lies in [0, V): the scheme's checks then take
        it with the lengths (:func:`sketchwm.components.one_batch` ``known``) instead of a pass over
        each padded group."""
        method = ""
        offsets = np.cumsum(lengths) - lengths
        for g in length_groups(lengths[good], max_texts=chunk):
            sel = good[g]  # (b,) text indices in the piece, similar lengths
            ids, valid = pad_flat(flat, lengths, sel, offsets)  # (b, N) int64, (b, N) bool (padding 0)
            known = None if id_range is None else (torch.from_numpy(lengths[sel]), min(id_range[0], 0),
                                                   max(id_range[1], 0))  # a range holding the padding too
            with one_batch(ids, valid, self.scheme.vocab_size, known):
                s = self.scheme.score_ids(ids, valid)
            idx = torch.from_numpy(sel + start)
            score[idx], z[idx], p[idx] = s.score.cpu().double(), s.z.cpu().double(), s.p_value.cpu().double()
            n_scored[idx] = s.n_scored.cpu().long()
            for name, (cp, cz) in (s.channels or {}).items():
                if name not in channels:
                    channels[name] = (torch.full_like(p, float("nan")), torch.full_like(z, float("nan")))
                channels[name][0][idx], channels[name][1][idx] = cp.cpu().double(), cz.cpu().double()
            method = s.p_value_method
        return method


def _import_quietly(name: str) -> None:
    """Import module ``name`` (a preload: a failure here is left to the import that needs it)."""
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - the real import raises it where it matters
        pass
