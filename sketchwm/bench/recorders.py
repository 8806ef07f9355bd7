"""The benchmark's KL recorder: a sampler observer that measures the per-token KL of a scheme's tilt.

Implements the per-row term of the seed paper's KL chain rule (Theorem 5.1): KL(p̃‖p) of the
distribution a token is drawn from under the watermark, p̃ = softmax of the scheme's logits, against
the model's, p = softmax of the untilted logits, at every sampled row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..observers import TiltObserver

__all__ = ["KLRecorder", "kl_rows", "per_text_mean"]


def kl_rows(base: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """KL(softmax(out)‖softmax(base)) per row: base, out (M, V) logits → (M,) float64 nats."""
    lp, lq = torch.log_softmax(base.double(), -1), torch.log_softmax(out.double(), -1)  # (M, V)
    return (lq.exp() * (lq - lp).nan_to_num(0.0, 0.0, 0.0)).sum(-1)


def per_text_mean(idx: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Mean of ``rows`` (M,) float64 per text index ``idx`` (M,) int64 → (n,) float64, NaN for a text with no row."""
    cnt = np.bincount(idx, minlength=n)
    return np.where(cnt > 0, np.bincount(idx, weights=rows, minlength=n) / np.maximum(cnt, 1), np.nan)


class KLRecorder(TiltObserver):
    """Records KL(p̃‖p) in nats of every sampled row of the generations it observes.

    Rows: each step's valid target rows (``step.marginals.target_valid``), the marginals tokens are
    drawn from. Per step, one tensor is appended to each list:

    Attributes:
        kl: (M,) float64, KL(softmax(l̃)‖softmax(l)) of the untilted logits l and the tilted l̃.
        kl_sampled: (M,) float64, the same between the distributions tokens are drawn from,
            softmax(l̃/T) against softmax(l/T) at the step's temperature T (equal to ``kl`` where T is
            1, unknown, or 0: at greedy decoding only the argmax is drawn).
        text: (M,) int64, the index of each row's text among all texts observed so far (the batch
            row plus the texts of the batches before it).
    """

    def __init__(self) -> None:
        self.kl: list[torch.Tensor] = []
        self.kl_sampled: list[torch.Tensor] = []
        self.text: list[torch.Tensor] = []
        self._offset = 0

    def on_tilt(self, step: Any, before: torch.Tensor, after: torch.Tensor, uniforms: torch.Tensor | None) -> None:
        rows = step.marginals.target_valid  # (B, K)
        kl = kl_rows(before[rows], after[rows])  # (M,)
        self.kl.append(kl.cpu())
        T = getattr(step, "temperature", None)
        tempered = T is not None and T > 0.0 and T != 1.0
        self.kl_sampled.append((kl_rows(before[rows] / T, after[rows] / T) if tempered else kl).cpu())
        self.text.append(rows.nonzero()[:, 0].cpu() + self._offset)  # (M,)

    def on_end(self, output: Any) -> None:
        self._offset += int(output.ids.shape[0])

    def per_text(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(every row's KL (M,), mean KL per text (n,), mean sampled KL per text (n,)) float64, NaN for
        a text with no sampled row; None when no row was recorded."""
        if not self.kl:
            return None
        idx = torch.cat(self.text).numpy()
        rows = torch.cat(self.kl).numpy()
        return rows, per_text_mean(idx, rows, n), per_text_mean(idx, torch.cat(self.kl_sampled).numpy(), n)
