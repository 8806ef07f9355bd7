"""The first screen's ranking (:mod:`sketchwm.bench.ranking`) on hand-made curves: the stated rule orders
the rows, overlapping intervals form tie groups with a sentence on what would separate them, schemes
never detected share one group, schemes the rule gives no figure are not ranked."""

from __future__ import annotations

import math

import pandas as pd

from sketchwm.bench.matched import Curve, Estimate, Point
from sketchwm.bench.ranking import rankings, ranking_md, which_to_use

NAN = float("nan")


def _curve(name: str, ttd: Estimate, logppl: float = 2.0, tpr: float = 0.9, regime: str = "r") -> Curve:
    stats = {"tpr": Estimate(tpr, tpr - 0.1, min(1.0, tpr + 0.1), n=24), "kl": Estimate(0.1, 0.09, 0.11),
             "ttd": ttd, "logppl": Estimate(logppl, logppl - 0.1, logppl + 0.1), "diversity": Estimate(0.8, 0.7, 0.9),
             "pmin": Estimate(1e-6, NAN, NAN)}
    return Curve(regime, name, "", [Point(name, NAN, True, stats)], min_tokens=8)


def _rows() -> pd.DataFrame:
    return pd.DataFrame({"row_type": ["summary"], "cell_kind": ["clean"], "metric": ["detect-throughput"],
                         "regime": ["r"], "scheme": ["a"], "value": [2.5e6]})


def test_groups_ties_and_unranked_rows():
    cs = [_curve("c", Estimate(40, 36, 44, n=24)), _curve("b", Estimate(24, 18, 34, n=24)),
          _curve("a", Estimate(16, 12, 20, n=24)), _curve("d", Estimate(math.inf, math.inf, math.inf, n=24)),
          _curve("e", Estimate(20, 16, 24, n=24), logppl=3.0),  # log-PPL +50%: no setting within 10%
          _curve("f", Estimate(math.inf, math.inf, math.inf, n=24), tpr=0.5)]
    refs = {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}}
    (r,) = rankings(_rows(), cs, refs)
    assert [(x.scheme, x.group) for x in r.rows] == [("a", 1), ("b", 1), ("c", 2), ("d", 3), ("f", 3), ("e", None)]
    assert r.rows[0].figures["detect tokens/s (cold)"] == 2.5e6  # the cell's own timing, named so
    assert r.ties == ["a and b would separate at about 2.2× the texts per setting (about 54 instead of 24), "
                      "if the difference of 8 holds"]
    md = ranking_md([r])
    assert "| 1= | a |" in md and "| 3= | d |" in md and "| – | e |" in md
    assert "inf (median text not detected)" in md and "n/a (no setting within +10% log-PPL)" in md
    advice = which_to_use([r], "a")
    assert advice.startswith("**r**: a = b (16 [12, 20] tokens to detect, tied; a at KL/token 0.100 [0.090, 0.110])")
    assert "group 1" in advice
    assert "is not on this board" in which_to_use([r], "zz")


def test_a_floor_tie_and_the_rule_without_an_oracle():
    cs = [_curve("a", Estimate(8, 8, 12, n=24)), _curve("b", Estimate(8, 8, 8, n=24))]
    (r,) = rankings(_rows(), cs, {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}})
    assert "detector's minimum of 8 tokens" in r.ties[0]
    (r,) = rankings(_rows(), cs, {"r": {}})  # no oracle: TPR at equal KL ranks, higher first
    assert r.higher and r.key.startswith("TPR") and "no oracle" in r.rule


def test_a_regime_out_of_the_quality_bound_is_ranked_at_equal_kl():
    """Every scheme of a regime out of the quality bound (low temperature): MarkMyWords' rule cannot rank
    them, so TPR at equal KL does, and the table's rule says why; a scheme without that figure is not
    ranked, and its note says where its sweep lies."""
    cs = [_curve("a", Estimate(16, 12, 20, n=24), logppl=3.0, tpr=0.5),
          _curve("b", Estimate(20, 16, 24, n=24), logppl=3.5, tpr=0.9)]
    (r,) = rankings(_rows(), cs, {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}})
    assert r.higher and r.key.startswith("TPR") and "cannot rank them" in r.rule
    assert [(x.scheme, x.group) for x in r.rows] == [("b", 1), ("a", 2)]
    assert which_to_use([r], "a").startswith("**r**: b")
    # one scheme within the bound is not a ranking either
    cs.append(_curve("c", Estimate(24, 20, 28, n=24), tpr=0.7))
    (r,) = rankings(_rows(), cs, {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}})
    assert r.key.startswith("TPR") and [x.scheme for x in r.rows] == ["b", "c", "a"]


def test_the_advice_names_a_regime_where_no_scheme_is_ranked():
    """No scheme with a ranking figure at all: no rank, and the advice says so instead of failing."""
    cs = [_curve("a", Estimate(16, 12, 20, n=24), logppl=3.0, tpr=NAN),
          _curve("b", Estimate(20, 16, 24, n=24), logppl=3.5, tpr=NAN)]
    (r,) = rankings(_rows(), cs, {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}})
    assert all(x.group is None for x in r.rows)
    advice = which_to_use([r], "a")
    assert advice.startswith("**r**: no scheme is ranked") and "the default a is not ranked" in advice


def test_a_side_by_side_speed_measurement_replaces_the_cells_timings(tmp_path):
    """``detect-speed.json`` (benchmarks/perf_detect_board.py) in the results folder feeds the speed column,
    per scheme and the same in every regime, and the page says where it was measured; a scheme it did not
    time reads n/a rather than a cell's cold timing; a file that is not the benchmark's JSON is an error."""
    import json

    import pytest

    from sketchwm.bench.leaderboard import read_speed
    from sketchwm.errors import InputError

    cs = [_curve("a", Estimate(16, 12, 20, n=24)), _curve("b", Estimate(40, 36, 44, n=24))]
    tps, how = read_speed(tmp_path)
    assert tps is None and "cold call" in how
    (tmp_path / "detect-speed.json").write_text(json.dumps({
        "tokens_per_s": {"a": 4.0e7}, "tokens": 65536, "length": 128, "repeats": 5, "threads": 2,
        "machine": {"cpu": "Test CPU", "cpus": 2, "torch": "2.13.0+cpu"}}))
    tps, how = read_speed(tmp_path)
    assert tps == {"a": 4.0e7} and "Test CPU" in how and "side by side" in how
    (r,) = rankings(_rows(), cs, {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}}, tps)
    speed = {x.scheme: x.figures["detect tokens/s"] for x in r.rows}
    assert speed["a"] == 4.0e7 and math.isnan(speed["b"])
    assert "| 40M |" in ranking_md([r]) and "n/a" in ranking_md([r])
    (tmp_path / "detect-speed.json").write_text("{}")
    with pytest.raises(InputError, match="perf_detect_board"):
        read_speed(tmp_path)


def test_the_advice_names_the_hardest_and_easiest_scheme_to_forge():
    """With spoof rates in the rows, the paragraph names the scheme thieves forge least and most."""
    cs = [_curve("a", Estimate(16, 12, 20, n=24)), _curve("b", Estimate(24, 18, 30, n=24))]
    (r,) = rankings(_rows(), cs, {"r": {"logppl": Estimate(2.0, 1.9, 2.1)}})
    r.rows[0].figures["spoof rate"] = (Estimate(0.6, 0.5, 0.7, n=100), "word N=1,000")
    r.rows[1].figures["spoof rate"] = (Estimate(0.03, 0.0, 0.07, n=100), "pair N=1,000")
    advice = which_to_use([r], "b")
    assert "b is the hardest to forge (spoof rate 0.03 [0.00, 0.07]) and a the easiest (0.60 [0.50, 0.70])" in advice
