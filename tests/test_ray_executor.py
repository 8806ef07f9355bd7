"""``sketchwm detect --executor ray`` on a local Ray cluster (2 CPUs) equals the local run, row for row."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")

from cli_tiny import GEN_SMALL, save_tiny_model, tiny_args  # noqa: E402
from sketchwm.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_executor_equals_the_local_run(tmp_path, capsys, local_ray):
    model = save_tiny_model(tmp_path / "model")
    key = tmp_path / "wm.key"
    assert main(["keygen", "--out", str(key)]) == 0
    gen = tmp_path / "gen.jsonl"
    prompts = [a for p in ("the water", "one day", "we can", "a man said", "it was", "people") for a in ("--prompt", p)]
    assert main(["generate", "--key", str(key), *prompts, "--out", str(gen), *GEN_SMALL, *tiny_args(model)]) == 0
    recs = [json.loads(x) for x in gen.read_text().splitlines()]
    recs[2] = {k: v for k, v in recs[2].items() if k != "text"}  # a record without text: marked in both runs
    recs[4] = dict(recs[4], text="too short")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"i": i, **r}) + "\n" for i, r in enumerate(recs)))
    local, dist = tmp_path / "local.parquet", tmp_path / "ray-out"
    assert main(["detect", "--key", str(key), "--input", str(inp), "--out", str(local), "--chunk-size", "4"]) == 0
    code = main(["detect", "--key", str(key), "--input", str(inp), "--out", str(dist), "--executor", "ray",
                 "--chunk-size", "4", "--workers", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    a, b = pq.read_table(local), pq.read_table(dist)
    assert b.num_rows == a.num_rows == 6 and b.column("i").to_pylist() == list(range(6))  # the input order
    for col in ("i", "text", "status", "error", "score", "z", "p_value", "threshold", "is_watermarked", "n_tokens",
                "decided_by", "explanation"):
        assert b.column(col).to_pylist() == a.column(col).to_pylist(), col
    assert a.column("status").to_pylist() == ["ok", "ok", "error", "ok", "error", "ok"]
    da, db = (json.loads(t.column("detection")[0].as_py()) for t in (a, b))
    assert {k: v for k, v in da.items() if k != "created"} == {k: v for k, v in db.items() if k != "created"}
