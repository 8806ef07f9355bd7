"""Detection over a corpus: input records in, the same records out with the detection columns added.

Used by ``sketchwm detect --out FILE`` (the local executor) and ``sketchwm detect --executor ray``
(the same per-batch function, :func:`annotate_table`, run by Ray Data workers). An output row is the
input record with every field kept, except the columns the detector owns (:data:`OWNED_COLUMNS`),
which are written (replaced when the input has them):

========================  ==========  =========================================================
column                    type        meaning
========================  ==========  =========================================================
``status``                string      ``ok`` (scored) or ``error`` (see ``error``)
``error``                 string      why the record was not scored ("the record has 3 tokens; ...")
``score``                 float64     the scheme's statistic (S_k of the seed paper's eq. 2)
``z``                     float64     standardised statistic (combined scheme: the deciding channel's)
``p_value``               float64     p-value under the scheme's null (combined scheme: the combined one)
``threshold``             float64     threshold applied to ``score`` (null when the p-value decides)
``is_watermarked``        bool        the decision (:meth:`sketchwm.detection.Detector.decide`)
``n_tokens``              int64       tokens scored
``decided_by``            string      which threshold decided (:meth:`DetectionResult.explain`)
``deciding_channel``      string      the channel that decided (combined schemes; else null)
``explanation``           string      the verdict, the rule that decided and its numbers
``C_p_value``, ``C_z``    float64     each channel C's own p-value and z (combined schemes only)
``detection``             JSON        provenance: key fingerprint, scheme and params, backend,
                                      tokenizer, threshold source, α, p-value method, version,
                                      configuration source, calibration file, time
========================  ==========  =========================================================

Statistics of an unscored record are null. In Parquet ``detection`` is a JSON string (the same
for every row; dictionary-encoded, so stored once per row group) and also the file's schema
metadata ``sketchwm.detection``; in JSONL it is an object.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from pathlib import Path
from typing import Any, Iterator

import orjson

from .errors import InputError
from .io import RecordChunk, atomic_write, check_output_path

__all__ = ["OWNED_COLUMNS", "output_format", "detection_columns", "records_table", "annotate_table", "table_chunk",
           "ResultWriter", "RayDetectBatch", "detect_with_ray", "iter_results"]

OWNED_COLUMNS = ("status", "error", "score", "z", "p_value", "threshold", "is_watermarked", "n_tokens", "decided_by",
                 "deciding_channel", "explanation", "detection")
_CHANNEL_COLUMN = re.compile(r"^[A-Za-z0-9_]+_(?:p_value|z)$")  # a channel's p-value or z (DetectionResult.channel_column)
_POSITION = re.compile(r"^(?:text|line|row) \d+ ")
_RUN_FIELDS = ("threshold_source", "alpha", "key_fingerprint", "scheme", "p_value_method")


def output_format(path: str | Path) -> str:
    """``parquet`` for a ``.parquet``/``.pq`` path, else ``jsonl``."""
    return "parquet" if str(path).lower().endswith((".parquet", ".pq")) else "jsonl"


def detection_columns(res: Any, run: dict[str, Any]) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The per-record detection columns of a :class:`DetectionResult` and the run's provenance.

    Args:
        res: a per-item :class:`sketchwm.detection.DetectionResult` of B texts.
        run: provenance fields of the run (configuration source, calibration, time), merged into
            the result's provenance.

    Returns:
        (columns: name → list of B values, for every name of :data:`OWNED_COLUMNS` but
        ``detection``, then each channel's ``C_p_value`` and ``C_z`` for a combined scheme;
        detection: the provenance dict).
    """
    every = res.columns()  # vectorised: whole tensors to lists, no per-record dict
    cols = {c: every[c] for c in OWNED_COLUMNS if c != "detection"}
    cols.update({c: v for c, v in every.items() if _CHANNEL_COLUMN.match(c) and c not in OWNED_COLUMNS})
    # the row is the record: its position ("text 12", "line 13"), which depends on how the input was
    # split among workers, is left out, so every executor writes the same rows
    cols["error"] = [None if e is None else _POSITION.sub("the record ", e, count=1) for e in cols["error"]]
    first = {k: getattr(res, k) for k in _RUN_FIELDS} if len(res) else {}
    prov = {**(res.provenance or {}), **{k: first.get(k) for k in _RUN_FIELDS}, **run}
    if not prov.get("p_value_method"):
        prov["p_value_method"] = res.p_value_method
    return cols, prov


_TYPES = {"status": "string", "error": "string", "score": "float64", "z": "float64", "p_value": "float64",
          "threshold": "float64", "is_watermarked": "bool_", "n_tokens": "int64", "decided_by": "string",
          "deciding_channel": "string", "explanation": "string", "detection": "string"}


def _arrow_column(values: list[Any]) -> Any:
    """A pyarrow array of JSON-like values; a field whose values Arrow cannot type together, or types as
    something Parquet cannot hold (a struct without fields, from an empty object), becomes a string
    column (strings kept, other values as JSON text)."""
    import pyarrow as pa

    try:
        arr = pa.array(values)
        if not _empty_struct(arr.type):
            return arr
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    return pa.array([v if v is None or isinstance(v, str) else orjson.dumps(v, default=str).decode() for v in values],
                    pa.string())


def _empty_struct(t: Any) -> bool:
    """Whether Arrow type ``t`` holds a struct without fields (Parquet cannot write one)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return t.num_fields == 0 or any(_empty_struct(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _empty_struct(t.value_type)
    return False


def _owned_array(values: Any, type_name: str) -> Any:
    """A pyarrow array of ``type_name`` (``string``, ``float64``, ``int64`` or ``bool_``) from a
    sequence of Python values, None as null.

    Built from buffers (numpy for the values, ``np.packbits`` for validity) rather than
    ``pa.array``, which imports pandas (about half a second of the command's start-up) to ask
    whether the values are a pandas object.
    """
    import numpy as np
    import pyarrow as pa

    values = list(values)
    n = len(values)
    valid = np.fromiter((v is not None for v in values), bool, n)
    nulls = n - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if type_name == "string":
        enc = [b"" if v is None else str(v).encode("utf-8") for v in values]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, enc), np.int64, n), out=offsets[1:])
        big = offsets[-1] > np.iinfo(np.int32).max
        typ = pa.large_string() if big else pa.string()
        arr = pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets if big else offsets.astype(np.int32)),
                                             pa.py_buffer(b"".join(enc))], null_count=nulls)
        return arr.cast(pa.string()) if big else arr
    if type_name == "bool_":
        bits = np.packbits(np.fromiter((bool(v) for v in values), bool, n), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [bitmap, pa.py_buffer(bits)], null_count=nulls)
    dtype = {"float64": np.float64, "int64": np.int64}[type_name]
    data = np.fromiter((0 if v is None else v for v in values), dtype, n)
    return pa.Array.from_buffers(getattr(pa, type_name)(), n, [bitmap, pa.py_buffer(data)], null_count=nulls)


def records_table(records: list[dict[str, Any]]) -> Any:
    """JSON records → a ``pyarrow.Table`` with one column per field (first-seen order); a field missing
    from a record is null; the columns the detector owns are left out."""
    import pyarrow as pa

    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r))
    cols = {k: _arrow_column([r.get(k) for r in records]) for k in names if k not in OWNED_COLUMNS}
    return pa.table(cols)


def annotate_table(table: Any, cols: dict[str, list[Any]], detection: dict[str, Any]) -> Any:
    """``table`` (the input records) without the owned columns, then the detection columns; an input column
    whose type holds a struct without fields (Parquet cannot write one) is kept as JSON text."""
    import pyarrow as pa

    keep = [c for c in table.column_names if c not in OWNED_COLUMNS and c not in cols]
    out = table.select(keep)
    for i, name in enumerate(keep):  # a struct without fields (an empty object in JSONL) cannot go to Parquet
        if _empty_struct(out.schema.field(i).type):
            out = out.set_column(i, name, _arrow_column(out.column(i).to_pylist()))
    n = out.num_rows if keep else len(next(iter(cols.values())))
    arrays = [_owned_array(v, _TYPES.get(c, "float64")) for c, v in cols.items()]
    arrays.append(_owned_array([json.dumps(detection, sort_keys=True)] * n, "string"))
    names = [*cols, "detection"]
    if keep:
        for name, arr in zip(names, arrays):
            out = out.append_column(name, arr)
        return out
    return pa.table(dict(zip(names, arrays)))


class ResultWriter:
    """Write detection results, chunk by chunk, to JSONL or Parquet (by the path's suffix), atomically:
    the file appears, complete, when the writer is closed without error (:func:`sketchwm.io.atomic_write`).

    Use as a context manager; :meth:`write` takes a :class:`RecordChunk` and its per-item result.

    Raises:
        InputError: the output cannot be written; a JSONL input whose later records add a field or
            change a field's type that Parquet cannot hold in one schema (names the field).
    """

    def __init__(self, path: str | Path, fmt: str | None = None):
        self.path = check_output_path(path)
        self.fmt = fmt or output_format(path)
        self._stack = contextlib.ExitStack()
        self._fh: Any = None
        self._pq: Any = None
        self._schema: Any = None
        self.rows = 0

    def __enter__(self) -> "ResultWriter":
        self._fh = self._stack.enter_context(atomic_write(self.path, "wb"))
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        if self._pq is not None and exc[0] is None:
            self._pq.close()
        return self._stack.__exit__(*exc)

    def write(self, chunk: RecordChunk, cols: dict[str, list[Any]], detection: dict[str, Any]) -> None:
        """Append the records of ``chunk`` with their detection columns."""
        if self.fmt == "jsonl":
            rows = chunk.records if chunk.records is not None else chunk.table.to_pylist()
            det = orjson.dumps(detection, default=str)
            names = list(cols)
            opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
            parts = []
            for i, rec in enumerate(rows):
                row = {k: v for k, v in rec.items() if k not in OWNED_COLUMNS and k not in cols}
                for c in names:
                    row[c] = cols[c][i]
                parts.append(orjson.dumps(row, default=str, option=opts)[:-1] + b',"detection":' + det + b"}\n")
            self._fh.write(b"".join(parts))
        else:
            import pyarrow.parquet as pq

            table = chunk.table if chunk.table is not None else records_table(chunk.records)
            out = annotate_table(table, cols, detection)
            if self._pq is None:
                meta = {b"sketchwm.detection": json.dumps(detection, sort_keys=True).encode()}
                self._schema = out.schema.with_metadata(meta)
                self._pq = pq.ParquetWriter(self._fh, self._schema)
            out = self._conform(out)
            self._pq.write_table(out)
        self.rows += len(chunk)

    def _conform(self, table: Any) -> Any:
        """``table`` in the schema of the first chunk (missing columns null, types cast)."""
        import pyarrow as pa

        if table.schema.equals(self._schema, check_metadata=False):
            return table.replace_schema_metadata(self._schema.metadata)
        extra = [c for c in table.column_names if self._schema.get_field_index(c) < 0]
        if extra:
            raise InputError(f"field {extra[0]!r} first appears after the first {self.rows} records, so it is not in the "
                             "Parquet schema: raise --chunk-size, or write JSONL (--out FILE.jsonl)")
        arrays = []
        for f in self._schema:
            if f.name not in table.column_names:
                arrays.append(pa.nulls(table.num_rows, f.type))
                continue
            col = table.column(f.name)
            try:
                arrays.append(col.cast(f.type) if col.type != f.type else col)
            except (pa.ArrowException, TypeError):
                raise InputError(f"field {f.name!r} changes type after the first {self.rows} records ({f.type} → "
                                 f"{col.type}): write JSONL (--out FILE.jsonl) instead") from None
        return pa.Table.from_arrays(arrays, schema=self._schema)


class RayDetectBatch:
    """The detector as a Ray Data callable class: built once per worker (the watermarker, its scheme
    and the per-key tables), then called on each batch (a ``pyarrow.Table`` of input records).

    Args:
        key: the :class:`sketchwm.keys.WatermarkKey` (sent to the workers with the job).
        config: the watermark configuration to detect with.
        calibration: a calibration's JSON text, or None (analytic threshold).
        alpha: target false-positive rate.
        run: provenance fields of the run (:func:`detection_columns`).
        text_field: the column holding the texts.
    """

    def __init__(self, key: Any, config: dict[str, Any], calibration: str | None, alpha: float, run: dict[str, Any],
                 text_field: str = "text"):
        from .api import Watermarker
        from .detection import Calibration

        self.wm = Watermarker(key, config)
        cal = Calibration.model_validate_json(calibration) if calibration else None
        self.detector = self.wm.detector(cal, alpha)
        self.provenance = self.wm.detection_provenance()
        self.run, self.text_field = run, text_field

    def __call__(self, table: Any) -> Any:
        chunk = table_chunk(table, self.text_field)
        res = next(self.detector.detect_stream([chunk.texts], errors=[chunk.errors]))
        res.provenance = self.provenance
        cols, det = detection_columns(res, self.run)
        return annotate_table(table, cols, det)


def table_chunk(table: Any, text_field: str = "text", start: int = 0) -> RecordChunk:
    """A :class:`RecordChunk` of a ``pyarrow.Table`` (a record without a string text is marked)."""
    import pyarrow as pa

    n = table.num_rows
    texts: list[Any] = [None] * n
    if text_field in table.column_names:
        col = table.column(text_field)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            texts = col.to_pylist()
    errors = [None if isinstance(t, str) else f"row {start + i + 1} has no string field {text_field!r}"
              for i, t in enumerate(texts)]
    return RecordChunk(texts, errors, start, table=table)


def detect_with_ray(input_path: str, out: str, *, key: Any, config: dict[str, Any], calibration: str | None,
                    alpha: float, fmt: str, run: dict[str, Any], batch_size: int = 4096, workers: int | None = None,
                    address: str | None = None) -> tuple[int, dict[str, Any]]:
    """Detect over ``input_path`` (JSONL or Parquet, a file or a directory) with Ray Data and write
    Parquet files to the directory ``out``; returns the number of records written and
    ``{"cpus": the cluster's CPUs, "workers": detector actors}``.

    Reads with ``ray.data.read_json`` (JSONL; Arrow's reader) or ``ray.data.read_parquet``, runs
    :class:`RayDetectBatch` with ``map_batches`` on ``workers`` actors (default: the cluster's CPUs
    less one), keeps the input order, and writes with ``write_parquet``. The actors together reserve
    at most the cluster's CPUs less one half, and reading and writing tasks half a CPU each, so the
    pipeline cannot stall with every CPU held by an actor waiting for input. Connects to the cluster at
    ``address`` (default ``$RAY_ADDRESS``; without either, a local Ray is started for the run) unless
    Ray is already initialised in this process.

    Raises:
        InputError: Ray is not installed; a text input (Ray reads JSONL and Parquet); ``out`` exists
            and is not an empty directory.
    """
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'sketchwm[ray]'") from None
    if fmt not in ("jsonl", "parquet"):
        raise InputError(f"--executor ray reads JSONL or Parquet, not {fmt}: convert the input to Parquet, or drop "
                         "--executor ray")
    outp = Path(out)
    if outp.exists() and (not outp.is_dir() or any(outp.iterdir())):
        raise InputError(f"--out {out} exists: --executor ray writes a directory of Parquet files; pass a new or empty one")
    if not ray.is_initialized():
        import os

        ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    import logging

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    import inspect

    io_args = {"num_cpus": 0.5}  # reading and writing are I/O: half a CPU each, so they never wait for the actors
    read = ray.data.read_parquet if fmt == "parquet" else functools.partial(ray.data.read_json, lines=True)
    named = "num_cpus" in inspect.signature(ray.data.read_parquet if fmt == "parquet" else ray.data.read_json).parameters
    ds = read(input_path, **(io_args if named else {"ray_remote_args": io_args}))
    cpus = float(ray.cluster_resources().get("CPU", 1))
    n = workers or max(1, int(cpus) - 1)
    ds = ds.map_batches(RayDetectBatch, batch_format="pyarrow", batch_size=batch_size, concurrency=n,
                        num_cpus=min(1.0, max(0.05, (cpus - 0.5) / n)),  # the actors leave half a CPU for I/O
                        fn_constructor_kwargs={"key": key, "config": config, "calibration": calibration, "alpha": alpha,
                                               "run": run})
    ds.write_parquet(str(outp), ray_remote_args=io_args)
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in outp.glob("*.parquet"))
    return rows, {"cpus": cpus, "workers": n}


def iter_results(chunks: Iterator[RecordChunk], detector: Any) -> Iterator[tuple[RecordChunk, Any]]:
    """(chunk, per-item result) for each chunk, tokenising the next chunk while this one is scored
    (:meth:`sketchwm.detection.Detector.detect_stream`)."""
    import collections

    pending: collections.deque = collections.deque()  # chunks handed to the tokenising thread, not yet scored
    last: list[RecordChunk] = []

    def texts() -> Iterator[list[Any]]:
        for c in chunks:
            pending.append(c)
            last[:] = [c]
            yield c.texts

    def errors() -> Iterator[list[str | None]]:  # read right after texts() in the same thread (zip)
        while True:
            yield last[0].errors

    for res in detector.detect_stream(texts(), errors=errors(), index_offset=0):
        yield pending.popleft(), res
