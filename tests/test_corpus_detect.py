"""Detection at corpus scale: input formats (JSONL with a byte-order mark, plain text starting with '{',
Parquet), per-record marking of bad records, output files that keep every input field, the
vectorised id batching and the windowed tokenisation of long texts.

Runs the CLI's ``main()`` in-process on the tiny random BERT saved to a directory (see ``cli_tiny``).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from cli_tiny import tiny_args
from cli_tiny import generated, keyfile, model_dir, run  # noqa: F401 - shared fixtures

def json_rows(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines()]


def test_bom_prefixed_jsonl_keeps_records_and_their_configuration(tmp_path, keyfile, generated, capsys):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + generated.read_bytes())
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", bom, "--json")
    assert code == 0, err
    rows = json_rows(out)
    assert len(rows) == 4 and all(r["is_watermarked"] for r in rows)  # the recorded (non-default) configuration
    assert rows[0]["provenance"]["config_source"] == "records"
    _, plain, _ = run(capsys, "detect", "--key", keyfile, "--input", generated, "--json")
    assert [r["score"] for r in rows] == [r["score"] for r in json_rows(plain)]
    # the output file keeps every field of every record
    dst = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", bom, "--out", dst)
    assert code == 0, err and "wrote 4 results" in err
    recs = [json.loads(x) for x in generated.read_text().splitlines()]
    outs = [json.loads(x) for x in dst.read_text().splitlines()]
    for r, o in zip(recs, outs):
        assert {k: o[k] for k in r if k != "n_tokens"} == {k: v for k, v in r.items() if k != "n_tokens"}
        assert o["status"] == "ok" and o["is_watermarked"] and o["detection"]["config_source"] == "records"
    import gc  # the start-up's pause of the garbage collector does not outlive an in-process command

    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_format_text_reads_a_text_starting_with_a_brace(tmp_path, keyfile, model_dir, capsys):
    from sketchwm.testing import tiny_texts

    p = tmp_path / "brace.txt"
    p.write_text("{ " + tiny_texts(1, 60, seed=1)[0] + "\n")
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", p, *tiny_args(model_dir))
    assert code == 2 and "not valid JSON" in err  # auto: looks like JSONL
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", p, "--format", "text", "--json", *tiny_args(model_dir))
    assert code == 0, err
    rows = json_rows(out)
    assert len(rows) == 1 and rows[0]["status"] == "ok" and rows[0]["n_tokens"] >= 16


def test_record_without_text_is_marked_and_the_rest_detected(tmp_path, keyfile, generated, capsys):
    recs = [json.loads(x) for x in generated.read_text().splitlines()]
    bad = dict(recs[1])
    del bad["text"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in [recs[0], bad, {**recs[2], "text": 7}, recs[3]]))
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", mixed, "--json", "--chunk-size", "3")
    assert code == 0, err
    rows = json_rows(out)
    assert [r["status"] for r in rows] == ["ok", "error", "error", "ok"]
    assert "line 2 has no string field 'text'" in rows[1]["error"] and rows[1]["score"] is None
    assert "line 3" in rows[2]["error"]
    assert rows[0]["is_watermarked"] and rows[3]["is_watermarked"]
    code, out, err = run(capsys, "detect", "--key", keyfile, "--input", mixed, "--json", "--strict")
    assert code == 2 and "line 2 has no string field 'text'" in err and "--strict" in err
    dst = tmp_path / "mixed.parquet"
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", mixed, "--out", dst)
    assert code == 0, err
    t = pq.read_table(dst)
    assert t.column("status").to_pylist() == ["ok", "error", "error", "ok"]
    assert t.column("error").to_pylist()[1] == "the record has no string field 'text'"
    assert t.column("text").to_pylist() == [recs[0]["text"], None, "7", recs[3]["text"]]  # mixed types: a string column


def test_parquet_in_and_out_keep_every_column_and_match_jsonl(tmp_path, keyfile, generated, capsys):
    recs = [json.loads(x) for x in generated.read_text().splitlines()]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [10, 11, 12, 13], "text": [r["text"] for r in recs],
                             "provenance": [json.dumps(r["provenance"]) for r in recs],
                             "tokenizer": [r["tokenizer"] for r in recs], "ts": pa.array([1.5, 2.5, None, 4.0])}), src)
    dst = tmp_path / "out.parquet"
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", src, "--out", dst, "--chunk-size", "3")
    assert code == 0, err
    t = pq.read_table(dst)
    assert t.column_names[:5] == ["id", "text", "provenance", "tokenizer", "ts"]
    assert t.column("id").to_pylist() == [10, 11, 12, 13] and t.column("ts").to_pylist() == [1.5, 2.5, None, 4.0]
    assert all(t.column("is_watermarked").to_pylist())  # configuration read from the provenance column
    det = json.loads(t.column("detection")[0].as_py())
    assert det["config_source"] == "records" and det["key_fingerprint"] and "created" in det
    assert json.loads(t.schema.metadata[b"sketchwm.detection"]) == det
    _, out, _ = run(capsys, "detect", "--key", keyfile, "--input", generated, "--json")
    assert t.column("score").to_pylist() == [r["score"] for r in json_rows(out)]
    back = tmp_path / "back.jsonl"  # Parquet in, JSONL out
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", src, "--out", back)
    assert code == 0, err
    rows = [json.loads(x) for x in back.read_text().splitlines()]
    assert [r["id"] for r in rows] == [10, 11, 12, 13] and [r["score"] for r in rows] == t.column("score").to_pylist()


def test_failed_detect_leaves_the_output_untouched(tmp_path, keyfile, model_dir, capsys):
    p = tmp_path / "short.jsonl"
    p.write_text(json.dumps({"text": "too short"}) + "\n")
    dst = tmp_path / "keep.parquet"
    dst.write_bytes(b"precious")
    code, _, err = run(capsys, "detect", "--key", keyfile, "--input", p, "--out", dst, *tiny_args(model_dir))
    assert code == 2 and "at least" in err and dst.read_bytes() == b"precious"


# ---------------------------------------------------------------- batching
def test_detect_ids_on_lists_equals_detect_batch_and_marks_bad_texts(tiny, key):
    from sketchwm.api import Watermarker
    from sketchwm.batching import pad_ids

    wm = Watermarker(key, {"scheme": {"name": "global-sketch", "params": {"prior": {"source": "uniform"}}}}, backend=tiny)
    det = wm.detector()
    g = torch.Generator().manual_seed(0)
    V = wm.scheme.vocab_size
    lists = [torch.randint(0, V, (int(n),), generator=g).tolist() for n in torch.randint(16, 90, (40,), generator=g)]
    ids, valid = pad_ids(lists)
    a, b = det.detect_ids(lists, chunk=7), det.detect_batch(ids, valid)
    torch.testing.assert_close(a.score, b.score)
    assert torch.equal(a.is_watermarked, b.is_watermarked) and torch.equal(a.n_tokens, b.n_tokens)
    bad = list(lists)
    bad[3], bad[5], bad[8] = [], [1, 2], [0] * 20 + [V]
    r = det.detect_ids(bad, per_item=True, index_offset=100)
    assert r.errors[3] == "text 103 is empty" and "text 105 has 2 tokens" in r.errors[5]
    assert f"token id {V} outside the vocabulary" in r.errors[8]
    ok = [i for i in range(40) if i not in (3, 5, 8)]
    torch.testing.assert_close(r.score[ok], a.score[ok])
    assert torch.isnan(r.score[[3, 5, 8]]).all() and not r.is_watermarked[[3, 5, 8]].any()


def test_pad_ids_handles_ragged_empty_and_arrays():
    from sketchwm.batching import length_groups, pad_ids

    ids, valid = pad_ids([[5, 6, 7], [], [1], np.array([9, 8])])
    assert ids.tolist() == [[5, 6, 7], [0, 0, 0], [1, 0, 0], [9, 8, 0]] and valid.sum(1).tolist() == [3, 0, 1, 2]
    lengths = np.array([5, 1000, 3, 7, 2000, 4])
    groups = length_groups(lengths, max_texts=3, max_cells=2100)
    assert sorted(np.concatenate(groups).tolist()) == list(range(6))
    assert all(len(g) == 1 or len(g) * lengths[g].max() <= 2100 for g in groups) and all(len(g) <= 3 for g in groups)


def test_flat_batching_views_runs_of_equal_lengths_and_refuses_non_integers():
    from sketchwm.batching import flatten_ids, pad_flat
    from sketchwm.errors import InputError

    lists = [[1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12]]
    flat, lengths = flatten_ids(lists)
    assert flat.dtype == np.int64 and flat.tolist() == list(range(1, 13)) and lengths.tolist() == [2, 3, 3, 3, 1]
    run, valid = pad_flat(flat, lengths, np.array([1, 2, 3]))  # consecutive, equal lengths: a view of flat
    assert run.tolist() == [[3, 4, 5], [6, 7, 8], [9, 10, 11]] and bool(valid.all())
    assert np.shares_memory(run.numpy(), flat)
    gathered, valid = pad_flat(flat, lengths, np.array([3, 1, 4]))  # not consecutive: gathered and padded
    assert gathered.tolist() == [[9, 10, 11], [3, 4, 5], [12, 0, 0]] and valid.sum(1).tolist() == [3, 3, 1]
    assert flatten_ids([(1, 2), range(3, 5)])[0].tolist() == [1, 2, 3, 4]  # other sequences
    for bad in ([[1, 2.5]], [[1, "a"]], [[2**70]]):
        with pytest.raises(InputError, match="lists of integers"):
            flatten_ids(bad)


@pytest.mark.parametrize("which", ["tiny", "default"])
def test_long_text_windows_give_the_ids_of_the_whole_text(which, default_tokenizer):
    from sketchwm.batching import TextEncoder
    from sketchwm.testing import tiny_texts, tiny_tokenizer

    tok = tiny_tokenizer() if which == "tiny" else default_tokenizer
    text = "\n".join(tiny_texts(300, 40, seed=2)) + " Ünïcode, ‘quotes’ and  double  spaces."
    whole = tok(text, add_special_tokens=False)["input_ids"]
    short = [tok(t, add_special_tokens=False)["input_ids"] for t in ("a short one", text[:100])]
    assert len(text) > 10 * 4096
    before = tok.backend_tokenizer.truncation
    got = TextEncoder(tok, window=4096, overlap=512).encode([text, "a short one", text[:100]])
    assert [list(x) for x in got] == [whole, *short]
    assert tok.backend_tokenizer.truncation == before  # the caller's tokenizer is left as it was


def test_prefetch_propagates_errors_and_stops_early():
    from sketchwm.batching import prefetch

    def gen():
        yield 1
        yield 2
        raise ValueError("boom")

    it = prefetch(gen())
    assert next(it) == 1 and next(it) == 2
    with pytest.raises(ValueError, match="boom"):
        next(it)
    seen = []

    def endless():
        i = 0
        while True:
            seen.append(i)
            yield i
            i += 1

    for x in prefetch(endless(), depth=2):
        if x == 3:
            break
    assert len(seen) < 10


@pytest.mark.parametrize("source", ["max(calibrated, analytic)", "analytic", "calibrated", "p-value"])
def test_result_columns_equal_the_records(source):
    from sketchwm.detection_result import DetectionResult

    g = torch.Generator().manual_seed(1)
    B = 12
    score = torch.randn(B, generator=g, dtype=torch.float64) * 3
    p = torch.rand(B, generator=g, dtype=torch.float64) * 0.05
    ta = torch.full((B,), 2.3263, dtype=torch.float64) if source != "calibrated" and source != "p-value" else None
    tc = torch.rand(B, generator=g, dtype=torch.float64) * 4 if "calibrated" in source else None
    thr = ta if tc is None else (tc if ta is None else torch.maximum(ta, tc))
    flags = p <= 0.01 if thr is None else score >= thr  # disagrees with p <= alpha on some texts
    errors = [None] * B
    errors[4], errors[9] = "text 4 is empty", "text 9 has 3 tokens; at least 16 are needed for detection"
    res = DetectionResult(score=score, z=score * 0.9, p_value=p, threshold=thr if thr is not None else torch.full((B,), float("nan")),
                          is_watermarked=flags & torch.tensor([e is None for e in errors]), n_tokens=torch.arange(B) + 10,
                          threshold_source=source, alpha=0.01, key_fingerprint="k", scheme="s", p_value_method="normal (Phi)",
                          errors=errors, tau_analytic=ta, tau_calibrated=tc, n_scored=torch.arange(B))
    recs = res.to_records()
    cols = res.columns()
    assert any(r.get("explanation") for r in recs) or source == "p-value"  # the test covers explanations
    def same(v):  # NaN compares unequal to itself
        return "nan" if isinstance(v, float) and v != v else v

    for name, values in cols.items():
        assert [same(v) for v in values] == [same(r.get(name)) for r in recs], name


def test_c_flattening_equals_the_python_path(monkeypatch):
    """sketchwm._fastids (built by pip where a C compiler exists) gives the arrays and errors of the
    pure-Python path: compact and multi-digit ints, negatives, bools, empty lists."""
    import shutil

    import sketchwm.batching as batching
    from sketchwm.errors import InputError

    if batching._flatten_into is None:
        assert shutil.which("cc") is None and shutil.which("gcc") is None, \
            "a C compiler is here but sketchwm._fastids was not built (pip install -e . builds it)"
        pytest.skip("no C compiler: the optional extension is not built")
    rng = np.random.default_rng(0)
    lists = [rng.integers(-(2**62), 2**62, n).tolist() for n in (0, 1, 7, 300)]
    lists += [[0, 1, -1, 2**30 - 1, 2**30, -(2**30), 2**63 - 1, -(2**63), True, False], [],
              [np.int64(5), np.int32(-7), np.uint16(9)]]
    fast_into = batching._flatten_into
    fast, lengths, rng_fast = batching.flatten_ids_range(lists)
    monkeypatch.setattr(batching, "_flatten_into", None)
    slow, lengths2, rng_slow = batching.flatten_ids_range(lists)
    assert fast.dtype == slow.dtype == np.int64 and np.array_equal(fast, slow) and np.array_equal(lengths, lengths2)
    assert rng_fast == rng_slow == (int(slow.min()), int(slow.max())) == (-(2**63), 2**63 - 1)
    assert batching.flatten_ids_range([[], []])[2] is None
    monkeypatch.undo()
    for bad in ([[1, 2.5]], [[1, "a"]], [[2**70]], [[1], [2, 3.5], [4]]):
        with pytest.raises(InputError, match="lists of integers"):
            batching.flatten_ids(bad)
    # the threaded read (>= 2^16 ids, torch's threads): equal to the Python path, and an item it does not
    # read (a multi-digit int, a bool, a numpy integer, a float) deep in the input sends the whole input
    # through the general loop, with its values or its error
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    big = [rng.integers(0, 2**30, int(n)).tolist() for n in rng.integers(0, 700, 400)]
    for odd in (None, 2**40, True, np.int64(7), 2.5):
        lists = [list(x) for x in big]
        if odd is not None:
            lists[-3].append(odd)
        monkeypatch.setattr(batching, "_flatten_into", fast_into)
        try:
            fast, lengths, rng_fast = batching.flatten_ids_range(lists)
        except InputError:
            assert isinstance(odd, float)
            continue
        monkeypatch.setattr(batching, "_flatten_into", None)
        slow, lengths2, rng_slow = batching.flatten_ids_range(lists)
        assert sum(map(len, lists)) >= 2**16 and np.array_equal(fast, slow) and np.array_equal(lengths, lengths2), odd
        assert rng_fast == rng_slow == (int(slow.min()), int(slow.max())), odd  # the range the read saw


def test_ids_summary_range_holds_every_valid_id():
    """``ids_summary``: the exact valid range when padding lies outside it (masked reduction), the whole
    batch's range when it all lies in [0, V) and V is given (a range holding every valid id), so the
    range check against [0, V) decides the same either way."""
    import torch

    from sketchwm.components import ids_summary

    ids = torch.tensor([[3, 9, 200], [1, 2, 7]])
    valid = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    assert ids_summary(ids, valid)[1:] == (1, 9)
    assert ids_summary(ids, valid, 100)[1:] == (1, 9)  # padding 200 outside [0, 100): masked pass
    assert ids_summary(ids, valid, 300)[1:] == (1, 200)  # all inside [0, 300): the whole range
    assert ids_summary(torch.tensor([[-5, 4, 2]]), torch.tensor([[0, 1, 1]], dtype=torch.bool), 10)[1:] == (2, 4)
    assert ids_summary(ids.float(), valid)[1:] == (1, 9)
    assert ids_summary(ids, valid)[0].tolist() == [2, 1]
