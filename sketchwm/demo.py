"""The main job: generate with and without the watermark on the default DLM, calibrate, detect, report.

Steps (``sketchwm demo``):
  0. a fresh random key (unless a key is given; a given ``seed`` without a key uses the public
     :data:`DEMO_KEY`, so the run is reproducible);
  1. ``n_prompts`` real English prompts from the shipped test split (``sketchwm.data``);
  2. generate one watermarked and one unwatermarked text per prompt (same seed);
  3. calibrate the (1−α) threshold τ_N on ``n_null`` unwatermarked model samples from *other*
     prompts, of the same length;
  4. detect both sides; report TPR / FPR at the calibrated and at the analytic threshold (as counts
     with their exact Clopper-Pearson 95% intervals), median z-scores and p-values.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from .api import Watermarker
from .data import load_prompts
from .keys import WatermarkKey

__all__ = ["run_demo", "format_table", "demo_key", "DEMO_KEY", "SHIPPED_MODEL", "clopper_pearson"]

#: A PUBLIC key for reproducible demos only. Never use it to watermark real text.
DEMO_KEY = WatermarkKey(b"sketchwm public demo key -- not a secret")
#: What the shipped default model is, for the demo's readers (4,813,242 parameters in its weights).
SHIPPED_MODEL = ("the shipped model is a 4.8 M-parameter model trained on CPU: its text is not fluent; the demo shows "
                 "detection, not quality")


def demo_key(key: WatermarkKey | None, seed: int | None) -> tuple[WatermarkKey, str]:
    """The demo's key and how it was chosen: ``key`` when given; else :data:`DEMO_KEY` when a ``seed``
    is given (a reproducible run); else a fresh random key (each run its own key, as in use)."""
    if key is not None:
        return key, "the given key"
    if seed is not None:
        return DEMO_KEY, "the public demo key"
    return WatermarkKey.generate(), "a fresh random key"


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial rate k/n: (lo, hi); (0, 1) when n = 0."""
    from scipy.stats import beta

    if n == 0:
        return 0.0, 1.0
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def _rate(x: torch.Tensor) -> float:
    return float(x.double().mean()) if x.numel() else float("nan")


def run_demo(
    key: WatermarkKey | None = None,
    n_prompts: int = 20,
    n_null: int = 200,
    gen_length: int = 128,
    alpha: float = 0.01,
    seed: int | None = None,
    config: dict | None = None,
    batch_size: int = 50,
    progress: bool = True,
    watermarker: Watermarker | None = None,
) -> dict[str, Any]:
    """Run the demo and return its figures (see module doc).

    Args:
        key: the key; None: a fresh random key, or :data:`DEMO_KEY` when ``seed`` is given.
        seed: the sampler's seed (None: 0, with a fresh key).
        progress: one tqdm bar over every denoising step of the run, with the time left.

    Returns:
        dict with ``tpr``, ``fpr`` (calibrated threshold) and their counts (``n_detected_watermarked``,
        ``n_detected_unwatermarked``) and 95% Clopper-Pearson intervals (``tpr_interval``,
        ``fpr_interval``), ``tpr_analytic``, ``fpr_analytic``, median ``z``/``p_value`` per side, sizes,
        timings, key fingerprint and ``key_source``, sample texts, and ``provenance``
        (:meth:`Watermarker.provenance`: configuration, model, version, seeds).
    """
    key, key_source = demo_key(watermarker.key if watermarker is not None else key, seed)
    seed = 0 if seed is None else seed
    wm = watermarker or Watermarker(key, config)
    t0 = time.perf_counter()
    prompts = load_prompts("prompts", n_prompts)
    null_prompts = load_prompts("prompts", n_null, offset=n_prompts)
    over: dict[str, Any] = {"gen_length": gen_length}
    if gen_length % wm.sampler(False).config.block_length:
        over["block_length"] = gen_length
    if wm.sampler(False).config.steps > gen_length:  # checked before building a sampler that would refuse it
        over["steps"] = gen_length
    bar = None
    if progress:
        from tqdm.auto import tqdm

        steps = wm.sampler(False, **over).config.steps
        bar = tqdm(total=(2 * n_prompts + n_null) * steps, desc=f"demo: sampling {2 * n_prompts + n_null} texts",
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} elapsed, about {remaining} left")
    tick = bar.update if bar is not None else False
    try:
        t = time.perf_counter()
        marked = wm.generate(prompts, seed=seed, watermark=True, batch_size=batch_size, progress=tick, **over)
        t_gen = time.perf_counter() - t
        plain = wm.generate(prompts, seed=seed, watermark=False, batch_size=batch_size, progress=tick, **over)
        null = wm.generate(null_prompts, seed=seed + 1, watermark=False, batch_size=batch_size, progress=tick, **over)
    finally:
        if bar is not None:
            bar.close()
    cal = wm.calibrate(null.texts, alpha=alpha, source=f"{n_null} unwatermarked samples of the model")
    det_cal = wm.detector(cal, alpha)
    det_an = wm.detector(None, alpha)
    t = time.perf_counter()
    r_wm = det_cal.detect(marked.texts)
    t_det = time.perf_counter() - t
    r_plain = det_cal.detect(plain.texts)
    a_wm, a_plain = det_an.detect(marked.texts), det_an.detect(plain.texts)
    k_wm, k_plain = int(r_wm.is_watermarked.sum()), int(r_plain.is_watermarked.sum())
    return {
        "scheme": wm.scheme.name,
        "scheme_params": wm.scheme.params.model_dump(mode="json"),
        "backend": wm.backend.model_id,
        "shipped_model": wm.config.backend.name == "default" and not wm.config.backend.params.get("path"),
        "key_fingerprint": key.fingerprint,
        "key_source": key_source,
        "alpha": alpha,
        "n_prompts": n_prompts,
        "n_null": n_null,
        "gen_length": gen_length,
        "median_tokens_watermarked": statistics.median(r_wm.n_scored.tolist()),
        "tpr": _rate(r_wm.is_watermarked),
        "fpr": _rate(r_plain.is_watermarked),
        "n_detected_watermarked": k_wm,
        "n_detected_unwatermarked": k_plain,
        "tpr_interval": clopper_pearson(k_wm, len(r_wm)),
        "fpr_interval": clopper_pearson(k_plain, len(r_plain)),
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
    (tl, th), (fl, fh) = res["tpr_interval"], res["fpr_interval"]
    rows = [
        ("", "watermarked", "unwatermarked"),
        (f"detected @ calibrated α={a:g}", f"{res['n_detected_watermarked']} of {n}",
         f"{res['n_detected_unwatermarked']} of {n}"),
        ("  95% interval of the rate", f"[{tl:.2f}, {th:.2f}]", f"[{fl:.2f}, {fh:.2f}]"),
        (f"detected @ analytic bound α={a:g}", f"{round(res['tpr_analytic'] * n)} of {n}",
         f"{round(res['fpr_analytic'] * n)} of {n}"),
        ("median z", f"{res['median_z_watermarked']:.2f}", f"{res['median_z_unwatermarked']:.2f}"),
        ("median p-value", f"{res['median_p_watermarked']:.2e}", f"{res['median_p_unwatermarked']:.2e}"),
    ]
    w0 = max(len(r[0]) for r in rows)
    lines = [f"{r[0]:<{w0}}  {r[1]:>16}  {r[2]:>16}" for r in rows]
    head = (
        f"sketchwm demo — scheme {res['scheme']} on {res['backend']}, key {res['key_fingerprint']} "
        f"({res.get('key_source', 'the given key')})\n"
        + (f"{SHIPPED_MODEL}\n" if res.get("shipped_model") else "")
        + f"{res['n_prompts']} prompts × {res['gen_length']} tokens (median {res['median_tokens_watermarked']} scored); "
        f"threshold calibrated on {res['n_null']} unwatermarked samples\n"
    )
    note = (f"\n{n} texts per side cannot measure a false-positive rate of {a:g} (one false flag reads as "
            f"{1 / n:.2g}): the intervals say which rates these counts rule out; {a:g} is what the calibration "
            "promises on average over keys and runs.")
    ex = f"\nexample (watermarked): {res['example_watermarked'][:200]}…\n"
    return head + "\n".join(lines) + note + ex
