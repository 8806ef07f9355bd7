"""The main job: generate with and without the watermark on the default DLM, calibrate, detect, report.

Steps (``sketchwm demo``):
  1. ``n_prompts`` real English prompts from the shipped test split (``sketchwm.data``);
  2. generate one watermarked and one unwatermarked text per prompt (same seed);
  3. calibrate the (1−α) threshold τ_N on ``n_null`` unwatermarked model samples from *other*
     prompts, of the same length;
  4. detect both sides; report TPR / FPR at the calibrated and at the analytic threshold, median
     z-scores and p-values.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from .api import Watermarker
from .data import load_prompts
from .keys import WatermarkKey

__all__ = ["run_demo", "format_table", "DEMO_KEY"]

#: A PUBLIC key for reproducible demos only. Never use it to watermark real text.
DEMO_KEY = WatermarkKey(b"sketchwm public demo key -- not a secret")

def _rate(x: torch.Tensor) -> float:
    return float(x.double().mean()) if x.numel() else float("nan")


def run_demo(
    key: WatermarkKey | None = None,
    n_prompts: int = 20,
    n_null: int = 200,
    gen_length: int = 128,
    alpha: float = 0.01,
    seed: int = 0,
    config: dict | None = None,
    batch_size: int = 50,
    progress: bool = True,
    watermarker: Watermarker | None = None,
) -> dict[str, Any]:
    """Run the demo and return its figures (see module doc).

    Returns:
        dict with ``tpr``, ``fpr`` (calibrated threshold), ``tpr_analytic``, ``fpr_analytic``,
        median ``z``/``p_value`` per side, sizes, timings, key fingerprint, sample texts, and
        ``provenance`` (:meth:`Watermarker.provenance`: configuration, model, version, seeds).
    """
    key = key or DEMO_KEY
    wm = watermarker or Watermarker(key, config)
    t0 = time.perf_counter()
    prompts = load_prompts("prompts", n_prompts)
    null_prompts = load_prompts("prompts", n_null, offset=n_prompts)
    over: dict[str, Any] = {"gen_length": gen_length}
    if gen_length % wm.sampler(False).config.block_length:
        over["block_length"] = gen_length
    if wm.sampler(False).config.steps > gen_length:  # checked before building a sampler that would refuse it
        over["steps"] = gen_length
    t = time.perf_counter()
    marked = wm.generate(prompts, seed=seed, watermark=True, batch_size=batch_size, progress=progress, **over)
    t_gen = time.perf_counter() - t
    plain = wm.generate(prompts, seed=seed, watermark=False, batch_size=batch_size, progress=progress, **over)
    null = wm.generate(null_prompts, seed=seed + 1, watermark=False, batch_size=batch_size, progress=progress, **over)
    cal = wm.calibrate(null.texts, alpha=alpha, source=f"{n_null} unwatermarked samples of the model")
    det_cal = wm.detector(cal, alpha)
    det_an = wm.detector(None, alpha)
    t = time.perf_counter()
    r_wm = det_cal.detect(marked.texts)
    t_det = time.perf_counter() - t
    r_plain = det_cal.detect(plain.texts)
    a_wm, a_plain = det_an.detect(marked.texts), det_an.detect(plain.texts)
    return {
        "scheme": wm.scheme.name,
        "scheme_params": wm.scheme.params.model_dump(mode="json"),
        "backend": wm.backend.model_id,
        "key_fingerprint": key.fingerprint,
        "alpha": alpha,
        "n_prompts": n_prompts,
        "n_null": n_null,
        "gen_length": gen_length,
        "median_tokens_watermarked": statistics.median(r_wm.n_scored.tolist()),
        "tpr": _rate(r_wm.is_watermarked),
        "fpr": _rate(r_plain.is_watermarked),
        "tpr_analytic": _rate(a_wm.is_watermarked),
        "fpr_analytic": _rate(a_plain.is_watermarked),
        "median_z_watermarked": float(r_wm.z.median()),
        "median_z_unwatermarked": float(r_plain.z.median()),
        "median_p_watermarked": float(r_wm.p_value.median()),
        "median_p_unwatermarked": float(r_plain.p_value.median()),
        "calibrated_thresholds": [b.model_dump() for b in cal.bins],
        "seconds_generate_watermarked": round(t_gen, 2),
        "seconds_detect_watermarked": round(t_det, 3),
        "seconds_total": round(time.perf_counter() - t0, 1),
        "example_watermarked": marked.texts[0][:300],
        "example_unwatermarked": plain.texts[0][:300],
        "provenance": wm.provenance(watermark=True, seeds={"generate": seed, "calibrate": seed + 1}, **over),
    }


def format_table(res: dict[str, Any]) -> str:
    """A human-readable table of :func:`run_demo`'s figures."""
    a = res["alpha"]
    n = res["n_prompts"]
    rows = [
        ("", "watermarked", "unwatermarked"),
        (f"detected @ calibrated {a:.0%} FPR", f"{res['tpr']:.3f} (TPR)", f"{res['fpr']:.3f} (FPR)"),
        ("  (texts detected)", f"{round(res['tpr'] * n)} of {n}", f"{round(res['fpr'] * n)} of {n}"),
        (f"detected @ analytic bound α={a}", f"{res['tpr_analytic']:.3f}", f"{res['fpr_analytic']:.3f}"),
        ("median z", f"{res['median_z_watermarked']:.2f}", f"{res['median_z_unwatermarked']:.2f}"),
        ("median p-value", f"{res['median_p_watermarked']:.2e}", f"{res['median_p_unwatermarked']:.2e}"),
    ]
    w0 = max(len(r[0]) for r in rows)
    lines = [f"{r[0]:<{w0}}  {r[1]:>16}  {r[2]:>16}" for r in rows]
    head = (
        f"sketchwm demo — scheme {res['scheme']} on {res['backend']}, key {res['key_fingerprint']}\n"
        f"{res['n_prompts']} prompts × {res['gen_length']} tokens (median {res['median_tokens_watermarked']} scored); "
        f"threshold calibrated on {res['n_null']} unwatermarked samples\n"
    )
    ex = f"\nexample (watermarked): {res['example_watermarked'][:200]}…\n"
    if res["fpr"] > 0:  # one text of a few is a large rate: say what the rate promises
        ex = (f"\n(the FPR is read on {n} texts, so each false flag adds {1 / n:.3f}; the calibration promises "
              f"{a:.0%} in expectation, not on {n} texts)") + ex
    return head + "\n".join(lines) + ex
