"""One decision rule everywhere: ``sketchwm bench`` flags exactly the texts a calibrated ``Detector`` flags
(per-length τ_N bins, strict ``score > τ_N``, ``score >= τ_α``)."""

from __future__ import annotations

import numpy as np

from sketchwm.bench.metric import CellData, calibrated, decisions, threshold
from sketchwm.detection import Detector, calibrate
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry

V = 500


class _Tok:
    """A tokenizer stand-in: the texts are already ids (only the fingerprint is read)."""

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(V)}


def _texts(rng: np.random.Generator, n: int) -> list[list[int]]:
    lengths = rng.choice([20, 40, 70, 100, 150, 300], size=n)  # several calibration bins
    return [rng.integers(0, 60, int(k)).tolist() for k in lengths]  # a small range: discrete, tied scores


def test_bench_decides_as_the_calibrated_detector():
    rng = np.random.default_rng(0)
    for name in ("global-sketch", "unigram"):
        params = {"prior": {"source": "uniform"}} if name == "global-sketch" else {}
        scheme = get_registry().create("scheme", name, params, WatermarkKey(b"decision-rule-test-key-000000001"), V)
        det = Detector(scheme, _Tok(), "fp", alpha=0.01)
        null = _texts(rng, 1200)
        cal = calibrate(det, null, "test", alpha=0.01)
        assert len(cal.bins) >= 3  # the rule really is per length
        held = _texts(rng, 400)
        want = Detector(scheme, _Tok(), "fp", alpha=0.01, calibration=cal).detect_ids(held)
        cal_res = det.detect_ids(null)
        res = det.detect_ids(held)
        n_held = np.array([len(x) for x in held])
        cell = CellData(kind="clean", attack="none", strength=0.0, scores=res.score.numpy(), p_values=res.p_value.numpy(),
                        n_tokens=n_held, analytic={0.01: res.tau_analytic.numpy()}, null_cal=cal_res.score.numpy(),
                        null_fpr=np.zeros(0), null_fpr_analytic={}, null_cal_tokens=np.array([len(x) for x in null]))
        got, note = decisions(cell, cell.scores, 0.01, cell.analytic[0.01], n_held)
        assert note == ""
        assert got.tolist() == want.is_watermarked.tolist(), name
        # τ_N per text: the length bins' thresholds differ, and the bench applies the detector's
        assert len({b.tau for b in cal.bins}) > 1, name
        tau, _ = calibrated(cell, 0.01, n_held)
        np.testing.assert_array_equal(tau, want.tau_calibrated.numpy())
        np.testing.assert_array_equal(threshold(cell, 0.01, cell.analytic[0.01], n_held)[0], want.threshold.numpy())
