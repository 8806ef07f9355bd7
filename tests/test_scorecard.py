"""``sketchwm scorecard`` on the code-built tiny model: every line's structure, and a scheme that embeds
nothing fails the power line against red-green-dlm while red-green-dlm passes it against the scheme that
embeds nothing (the lines can fail, and are not always FAIL).

Also the verdict rule (:func:`sketchwm.scorecard.lines.judge`): point rule, interval gate, and the quick
tier's decisive-only gating; and the Clopper-Pearson interval. Seeded; tiny sizes.
"""

from __future__ import annotations

import json
import math
import re
import types

import pandas as pd
import pytest

from sketchwm.components import Strength
from sketchwm.config import ComponentSpec
from sketchwm.hookspecs import hookimpl
from sketchwm.scorecard import Line, ScorecardConfig, Tier, clopper_pearson, format_line, judge, run_scorecard
from sketchwm.scorecard.promises import diversity_measures
from sketchwm.scorecard.run import members
from sketchwm.testing.schemes import plugin_registry
from sketchwm_baselines.red_green_dlm import RedGreenDLMScheme

pytestmark = pytest.mark.usefixtures("one_thread")

LINE = re.compile(r"^(PASS|FAIL|INFO)  (?:\[[\w-]+\] )?(\w[\w -]*): .+  (n/a|-?[\d.e+]+)( [\w/]+)?( \[[^\]]+\])?  \(n=\d+(; need (<=|>=) .+)?\)$")


class NoTiltScheme(RedGreenDLMScheme):
    """red-green-dlm's detector without its tilt: a watermark that embeds nothing (test only)."""

    name = "no-tilt-test"
    strength = Strength.none("embeds nothing (test scheme)")

    def tilt(self, step):
        return None


_plugin = types.ModuleType("no_tilt_plugin")
_plugin.sketchwm_register_schemes = hookimpl(lambda: [NoTiltScheme])


def _tier(**over) -> Tier:
    base = dict(name="test", length=32, steps=8, regimes=["mdlm-random-t1"], power_regimes=["mdlm-random-t1"],
                sweep_points=0, kl_budgets=[0.5], n_power=16, n_null_fpr=4, robustness=False, diversity_prompts=3,
                diversity_samples=3, steal_n=[12], forge_n=8, spoof_n=4, unrelated_keys=4, null_keys=3, null_texts=40,
                speed_batch=2, speed_repeats=1, userloop_n=4)
    return Tier(**{**base, **over})


def _config(scheme: str, tier: Tier, baseline: str = "red-green-dlm") -> ScorecardConfig:
    return ScorecardConfig(scheme=ComponentSpec(name=scheme), baselines=[ComponentSpec(name=baseline)],
                           backend=ComponentSpec(name="tiny"), prompts="tiny", human=["tiny"], tier=tier)


# ============================================================================ the verdict rule
def test_clopper_pearson_brackets_the_rate_and_is_exact_at_the_edges():
    assert clopper_pearson(0, 0) == (0.0, 1.0)
    lo, hi = clopper_pearson(0, 100)
    assert lo == 0.0 and hi == pytest.approx(0.0362, abs=1e-3)
    lo, hi = clopper_pearson(5, 100)
    assert lo < 0.05 < hi and hi == pytest.approx(0.1128, abs=1e-3)
    assert clopper_pearson(10, 10)[1] == 1.0


def test_judge_point_rule_interval_gate_and_decisive_only():
    spoof = lambda k, n: Line("forgery: x", k / n, *clopper_pearson(k, n), n, 0.05, "<=", "rate", gate_on_interval=0.10)  # noqa: E731
    assert judge(spoof(1, 200), False).status == "PASS"  # 0.5%, upper bound 2.7%
    assert judge(spoof(4, 100), False).status == "PASS"  # 4%, upper bound 9.9%
    assert judge(spoof(6, 100), False).status == "FAIL"  # 6%
    assert judge(spoof(1, 20), False).status == "FAIL"  # 5%, but the upper bound is 25%
    assert judge(spoof(0, 10), True).status == "INFO"  # [0, 0.31]: not decisive
    assert judge(spoof(0, 200), True).status == "PASS"  # [0, 0.018]
    assert judge(spoof(30, 50), True).status == "FAIL"  # [0.45, 0.74]
    power = Line("power: y", 0.5, 0.3, 0.7, 16, 0.8, ">=")
    assert judge(power, False).status == "FAIL" and judge(power, True).status == "FAIL"
    power = Line("power: y", 0.9, 0.7, 1.0, 16, 0.8, ">=")
    assert judge(power, False).status == "PASS" and judge(power, True).status == "INFO"
    assert judge(Line("n: z", float("nan"), threshold=1.0), False).status == "FAIL"
    assert judge(Line("n: z", float("nan"), threshold=1.0), True).status == "INFO"
    assert judge(Line("n: z", 3.0), False).status == "INFO"  # no threshold: reported only


def test_format_line():
    s = format_line(judge(Line("forgery: pair thief, N=50", 0.01, 0.0, 0.05, 100, 0.05, "<=", "rate", gate_on_interval=0.1), False))
    assert s == "PASS  forgery: pair thief, N=50  0.010 [0.000, 0.050]  (n=100; need <= 0.050, bound <= 0.100)"
    assert LINE.match(s)


def test_diversity_measures():
    groups = [[[1, 2, 3], [1, 2, 3], [4, 5, 6]], [[7, 8], [9, 8], [7, 1]]]
    m = diversity_measures(groups)
    assert m["distinct"].tolist() == [2.0, 3.0]
    assert m["first_token"].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert m["self_bleu"][0] > m["self_bleu"][1] >= 0.0


def test_budgets_outside_a_sweep_are_read_only_against_the_scheme():
    from sketchwm.bench.matched import Curve, Estimate, Point
    from sketchwm.scorecard.promises import at_kl_conservative

    pt = lambda kl, tpr: Point(f"s[{kl}]", kl, False, {"kl": Estimate(kl, kl, kl), "tpr": Estimate(tpr, tpr - 0.1, tpr)})  # noqa: E731
    c = Curve("r", "s", "delta", [pt(0.01, 0.5), pt(0.05, 0.9)])
    assert at_kl_conservative(c, "tpr", 0.03, "scheme").mean == pytest.approx(0.7)  # inside: interpolated
    assert at_kl_conservative(c, "tpr", 0.1, "scheme").mean == 0.9  # strongest setting: a lower bound
    assert not at_kl_conservative(c, "tpr", 0.001, "scheme").ok
    assert at_kl_conservative(c, "tpr", 0.001, "reference").mean == 0.5  # weakest setting: an upper bound
    assert not at_kl_conservative(c, "tpr", 0.1, "reference").ok


def test_development_and_report_splits_partition_the_prompts_by_document():
    from sketchwm.data import load, load_prompts, load_records

    dev, rep = load("prompts-development"), load("prompts-report")
    assert not set(dev) & set(rep) and sorted(dev + rep) == sorted(load("prompts"))
    docs, report = {}, set(rep)
    for r in load_records("prompts"):
        docs.setdefault(r["doc_id"], set()).add("report" if r["text"] in report else "development")
    assert all(len(v) == 1 for v in docs.values())  # no document feeds both
    assert min(len(dev), len(rep)) > 400 and load_prompts("prompts-report", 3) == rep[:3]


def test_quick_sweeps_the_default_and_the_weaker_settings_below_it():
    from sketchwm.registry import get_registry
    from sketchwm.scorecard.run import _strengths

    reg = get_registry()
    assert _strengths(reg, "red-green-dlm", {}, 3) == [0.5, 1.0, 2.0]  # grid 0.5, 1, 2, 3; default 2
    assert _strengths(reg, "red-green-dlm", {"delta": 3.0}, 3) == [1.0, 2.0, 3.0]
    assert _strengths(reg, "red-green-dlm", {"delta": 0.5}, 3) == [0.5, 1.0, 2.0]  # topped up from above
    assert _strengths(reg, "red-green-dlm", {"delta": 1.5}, 2) == [1.0, 1.5]  # an off-grid default is swept
    assert _strengths(reg, "red-green-dlm", {}, 0) is None and _strengths(reg, "aar-gumbel", {}, 3) is None


def test_the_quick_tier_compares_with_its_own_baselines_unless_named():
    from sketchwm.config import ComponentSpec
    from sketchwm.scorecard.config import TIERS, ScorecardConfig

    quick = ScorecardConfig(tier=TIERS["quick"])
    assert [b.name for b in quick.comparison()] == TIERS["quick"].baselines
    full = ScorecardConfig(tier=TIERS["full"], baselines=[ComponentSpec(name="dmark")])
    assert [b.name for b in full.comparison()] == ["dmark"]


def test_against_a_reference_only_a_pass_that_fails_or_vanishes_regresses():
    from sketchwm.scorecard.lines import compare, line_key

    def ln(promise, status, subject=None):
        return {"promise": promise, "status": status, "detail": {"subject": subject} if subject else {}}

    ref = [ln("diversity: distinct texts per prompt − unwatermarked, r1 (4.00 vs 4.00)", "PASS"),
           ln("forgery: word thief, paste-in, N=50", "FAIL"), ln("null: worst of 10 keys, p <= 0.01, d", "PASS"),
           ln("diversity: pairwise self-BLEU − unwatermarked, r1 (0.1 vs 0.1)", "PASS", "red-green-dlm"),
           ln("speed: detection on token ids", "INFO")]
    assert line_key(ref[0]) == "diversity: distinct texts per prompt − unwatermarked, r1"
    assert line_key(ref[3]).startswith("[red-green-dlm] ")
    now = [ln("diversity: distinct texts per prompt − unwatermarked, r1 (3.50 vs 4.00)", "FAIL"),
           ln("forgery: word thief, paste-in, N=50", "PASS"),
           ln("diversity: pairwise self-BLEU − unwatermarked, r1 (0.2 vs 0.1)", "PASS", "red-green-dlm"),
           ln("speed: detection on token ids", "FAIL")]
    regressed, improved = compare(now, ref)
    assert regressed == ["diversity: distinct texts per prompt − unwatermarked, r1: PASS -> FAIL",
                         "null: worst of 10 keys, p <= 0.01, d: PASS -> missing"]
    assert improved == ["forgery: word thief, paste-in, N=50: FAIL -> PASS"]
    assert compare(ref, ref) == ([], [])


def test_members_reads_the_family_size_from_nested_params():
    assert members({"members": 16}) == 16
    assert members({"inner": {"name": "x"}, "family": {"members": 8}}) == 8
    assert members({"delta": 1.0}) == 1


# ============================================================================ the machinery on the tiny model
@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """The scorecard of a scheme that embeds nothing, every promise, tiny sizes."""
    out = tmp_path_factory.mktemp("scorecard")
    card = run_scorecard(_config("no-tilt-test", _tier()), out, registry=plugin_registry(_plugin))
    return card, out


def test_every_line_is_structured_and_written(broken):
    card, out = broken
    promises = {ln.promise.split(":")[0] for ln in card.lines}
    assert promises == {"forgery", "diversity", "power", "null", "speed", "user loop"}
    for line in card.text().splitlines():
        assert LINE.match(line), line
    data = json.loads((out / "scorecard.json").read_text())
    assert data["tier"] == "test" and len(data["lines"]) == len(card.lines)
    assert all({"promise", "figure", "lo", "hi", "n", "status", "threshold"} <= set(d) for d in data["lines"])
    assert (out / "scorecard.txt").read_text().strip() == card.text()
    df = pd.read_parquet(out / "scorecard.parquet")
    assert len(df) == len(card.lines) and set(df["status"]) <= {"PASS", "FAIL", "INFO"}
    thieves = {ln.detail.get("attack") for ln in card.lines if ln.promise.startswith("forgery") and "attack" in ln.detail}
    assert thieves == {"spoof-insert", "spoof-substitute", "spoof-pair-insert", "spoof-pair-substitute", "spoof-adaptive",
                       "steal-spoof"}
    for ln in card.lines:
        if ln.unit == "rate" and not math.isnan(ln.figure):
            assert ln.lo <= ln.figure <= ln.hi and ln.n > 0


def test_a_scheme_that_embeds_nothing_fails_power_and_the_baseline_passes_against_it(broken, tmp_path):
    card, _ = broken
    power = [ln for ln in card.lines if ln.promise.startswith("power")]
    assert power and all(ln.status == "FAIL" for ln in power), [format_line(ln) for ln in power]
    assert not card.passed
    real = run_scorecard(_config("red-green-dlm", _tier(), baseline="no-tilt-test"), tmp_path, only={"power"},
                         registry=plugin_registry(_plugin))
    power = [ln for ln in real.lines if ln.promise.startswith("power")]
    assert power and all(ln.status == "PASS" for ln in power), [format_line(ln) for ln in power]


def test_scorecard_command_comes_from_the_harness_plugin(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHWM_CACHE_DIR", str(tmp_path))
    from sketchwm.cli import build_parser, main
    from sketchwm.plugin_index import describe_commands

    assert describe_commands()["scorecard"]["plugin"] == "builtin-metrics"
    with pytest.raises(SystemExit) as exc:
        build_parser(["scorecard", "--help"]).parse_args(["scorecard", "--help"])
    assert exc.value.code == 0 and "--quick" in capsys.readouterr().out
    assert main(["scorecard", "--quick", "--only", "nonsense"]) == 2
    assert "unknown promise" in capsys.readouterr().err


def test_the_user_loop_line_comes_with_the_engine_in_the_same_regime(broken):
    """Beside the user loop's TPR, the engine's in the same regime on the same prompts, as an INFO reference."""
    card, _ = broken
    loop = [ln for ln in card.lines if ln.promise.startswith("user loop")]
    assert [ln.promise.split(":")[1].split(",")[0].strip() for ln in loop] == [
        "LogitsTilter in a LLaDA-style loop", "the engine in the same regime (reference)"]
    ref = loop[1]
    assert ref.status == "INFO" and ref.n == loop[0].n and 0.0 <= ref.figure <= 1.0


def test_a_run_of_some_promises_keeps_the_earlier_lines_of_the_others(tmp_path):
    """``--only`` into a folder holding a scorecard of the same scheme and tier: the promises it ran are
    replaced, the others' lines kept in promise order and marked with the run that measured them; a
    scorecard of another scheme is not mixed in; a file that is not a scorecard is an error."""
    from sketchwm.errors import InputError
    from sketchwm.scorecard.run import Scorecard, promise_of

    cfg = _config("global-sketch", _tier())
    old = Scorecard(cfg, [Line("forgery: word thief, paste-in, N=50", 0.0, 0.0, 0.1, 24, 0.05, "<=", "rate", "PASS"),
                          Line("null: worst of 3 keys, p <= 0.01, tiny", 0.01, n=40, threshold=0.02, status="PASS"),
                          Line("user loop: LogitsTilter, TPR", 0.5, n=4, threshold=0.95, direction=">=", status="FAIL")],
                    {"total": 1.0})
    old.write(tmp_path)
    new = Scorecard(cfg, [Line("null: worst of 3 keys, p <= 0.01, tiny", 0.0, n=40, threshold=0.02, status="PASS")],
                    {"total": 2.0})
    assert new.keep_earlier(tmp_path / "scorecard.json", {"null"}) == 2
    assert [promise_of(ln.promise) for ln in new.lines] == ["forgery", "null", "user-loop"]
    assert new.lines[1].figure == 0.0 and "earlier_run" not in new.lines[1].detail  # this run's null line
    assert new.lines[0].detail["earlier_run"]["package_version"] and new.lines[0].threshold == 0.05
    assert math.isnan(new.lines[2].lo) and not new.passed  # the kept FAIL still fails the card
    other = Scorecard(_config("red-green-dlm", _tier()), [], {})
    assert other.keep_earlier(tmp_path / "scorecard.json", {"null"}) == 0 and other.lines == []
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a scorecard"):
        new.keep_earlier(tmp_path / "bad.json", {"null"})
