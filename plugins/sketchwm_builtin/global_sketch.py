"""``global-sketch``: the global sketch watermark of the seed paper (Alg. 1 and 2).

Embedding (Alg. 1): at each denoising step with η_t > 0,
  1. expected sketch ĥ_{k,t} from the frozen tokens and the masked marginals (eq. 5),
  2. residual gradient r_{k,t} = u_k − λĥ_{k,t} (the score's ½∇_h S at ĥ),
  3. per-token score a_{k,t}(v) = ⟨r_{k,t}, φ_k(v)⟩ / √N (eq. 6),
  4. exponential tilt p̃_i ∝ p_i · exp(η_t a_{k,t}) of every masked marginal (eq. 7), done in
     logit space: logits + η_t a (the sampler's softmax/Gumbel-max normalises).
η_t = δ·√N·s(t) with a schedule s: ``constant`` (1), ``late`` (1 only in the last fraction of
steps) or ``ramp`` (linear from 1/T to 1). The √N makes δ the typical logit shift per unit of
⟨r, φ(v)⟩, independent of the length.

Detection (Alg. 2): h_k(y) (§4.1), the score function's statistic and key-randomised p-value.

Keys (§4.1): k = (k_sk, k_dir) derived from one secret; the Rademacher direction u_k comes from
k_dir. A *key family* shares k_sk and gives member i the direction u^{(i)} = PRF(k_dir, i), so K
members are ranked for one text with a single matrix product (:meth:`GlobalSketchScheme.attribute`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from sketchwm.components import DenoiseStep, SchemeScores, WatermarkScheme
from sketchwm.config import ComponentSpec, StrictModel
from sketchwm.errors import ConfigError, InputError
from sketchwm.hookspecs import hookimpl
from sketchwm.prf import keyed_signs

__all__ = ["GlobalSketchScheme", "GlobalSketchParams", "PriorSpec", "Attribution", "resolve_prior"]


class PriorSpec(StrictModel):
    """Where the token prior π_tok for sign balancing (eq. 4) comes from.

    Attributes:
        source: ``auto`` (the packaged training-corpus counts when they match the vocabulary, else
            uniform), ``packaged`` (named counts shipped with sketchwm), ``file`` (a ``.pt``/``.npy``
            of V counts, e.g. estimated from unwatermarked model samples), ``uniform`` (no balancing).
        name: packaged counts name (``source="packaged"``).
        path: counts file (``source="file"``).
        sha256: expected SHA-256 of the counts (checked when given), so the detector rebuilds
            identical tables.
    """

    source: Literal["auto", "packaged", "file", "uniform"] = "auto"
    name: str = "default-train"
    path: str = ""
    sha256: str = ""


def _counts_digest(counts: torch.Tensor) -> str:
    return hashlib.sha256(counts.to(torch.float64).cpu().numpy().tobytes()).hexdigest()


def resolve_prior(spec: PriorSpec, vocab_size: int) -> tuple[torch.Tensor | None, dict[str, Any]]:
    """Load π_tok counts for ``spec``.

    Returns:
        (counts (V,) float64 or None for uniform, description dict with ``source`` and ``sha256``).

    Raises:
        ConfigError: missing/unknown counts, wrong length, or SHA-256 mismatch.
    """
    counts: torch.Tensor | None = None
    desc: dict[str, Any] = {"source": spec.source}
    if spec.source in ("auto", "packaged"):
        try:
            from sketchwm.data import load_token_counts

            counts = torch.as_tensor(load_token_counts(spec.name), dtype=torch.float64)
            desc.update(source="packaged", name=spec.name)
        except (ImportError, ValueError, FileNotFoundError, OSError) as exc:
            if spec.source == "packaged":
                raise ConfigError(f"packaged token counts '{spec.name}' are not available: {exc}") from None
            counts = None
        if counts is not None and counts.numel() != vocab_size:
            if spec.source == "packaged":
                raise ConfigError(f"packaged token counts '{spec.name}' have {counts.numel()} entries, vocabulary has {vocab_size}")
            counts = None
        if counts is None:
            desc = {"source": "uniform"}
    elif spec.source == "file":
        p = Path(spec.path)
        if not p.exists():
            raise ConfigError(f"token prior file not found: {p}")
        if p.suffix == ".npy":
            import numpy as np

            counts = torch.from_numpy(np.load(p)).to(torch.float64)
        else:
            counts = torch.as_tensor(torch.load(p, map_location="cpu", weights_only=True), dtype=torch.float64)
        counts = counts.flatten()
        if counts.numel() != vocab_size:
            raise ConfigError(f"token prior file {p} has {counts.numel()} entries, vocabulary has {vocab_size}")
        desc.update(path=str(p))
    if counts is not None:
        digest = _counts_digest(counts)
        if spec.sha256 and spec.sha256 != digest:
            raise ConfigError(f"token prior SHA-256 mismatch: config expects {spec.sha256[:12]}…, found {digest[:12]}…")
        desc["sha256"] = digest
    return counts, desc


class GlobalSketchParams(StrictModel):
    """Parameters of the global sketch watermark.

    Attributes:
        sketch: registered sketch and its params (default Count-Sketch d=4, w=256, D=1024).
        score: registered score function and params (default penalised score, γ=0.05). The
            penalty's gradient −λĥ pushes down the tokens the text already holds many of (function
            words), which costs fluency: on the default DLM (40 prompts × 128 tokens), γ=0.05 gave
            median z 5.8 at 1.9× the unwatermarked oracle perplexity and 9.8 at 2.4× (δ=1), where
            γ=0.25 gave 4.5 at 2.3× (δ=0.3) and 7.7 at 3.4× (δ=0.5) (README, "Choosing δ and γ"). With γ=1 the
            analytic threshold of eq. 19 is unreachable below ~100 tokens (S_k <= d(2√N − γ√w)
            when no token repeats); with γ=0.05 it is τ_α = 11.5 at α = 1%.
        delta: δ in η_t = δ·√N·s(t) (0 disables embedding). Default 0.5 (see ``score``).
        schedule: η_t schedule ``constant`` | ``late`` | ``ramp``.
        late_fraction: for ``late``: fraction of the last steps with η_t > 0.
        prior: token prior π_tok for sign balancing (eq. 4).
        direction_index: which member of the key family this key's direction is (0 by default).
        p_value: p-value method of the score function (``exact`` is the key-randomised closed form).
        min_tokens: shortest text the detector accepts.
    """

    sketch: ComponentSpec = ComponentSpec(name="count-sketch", params={"d": 4, "w": 256})
    score: ComponentSpec = ComponentSpec(name="penalized", params={"gamma": 0.05})
    delta: float = Field(0.5, ge=0)
    schedule: Literal["constant", "late", "ramp"] = "constant"
    late_fraction: float = Field(0.5, gt=0, le=1)
    prior: PriorSpec = PriorSpec()
    direction_index: int = Field(0, ge=0)
    p_value: Literal["exact", "bound", "uniform-bound", "normal", "monte-carlo"] = "exact"
    min_tokens: int = Field(16, ge=1)


@dataclass
class Attribution:
    """Multi-key attribution of texts.

    Attributes:
        indices: (B, top) int64, family indices ranked by score (best first).
        scores: (B, top) float64, their scores.
        z: (B, top) float64.
        p_value: (B, top) float64, per-key key-randomised p-values.
        p_value_fwer: (B, top) float64, Bonferroni family-wise-corrected p-values (min(1, K·p)).
        n_keys: K.
    """

    indices: torch.Tensor
    scores: torch.Tensor
    z: torch.Tensor
    p_value: torch.Tensor
    p_value_fwer: torch.Tensor
    n_keys: int


class GlobalSketchScheme(WatermarkScheme):
    """Global sketch watermark for masked DLMs (seed paper Alg. 1 embedding, Alg. 2 detection).

    Args:
        params: :class:`GlobalSketchParams`.
        key: :class:`sketchwm.keys.WatermarkKey`; k_sk and k_dir are derived from it.
        vocab_size: V.
        device: where tables live.
        registry: registry to resolve the sketch/score names (default: installed plugins).

    Raises:
        ConfigError: bad params, unknown sketch/score, prior that does not match V.
    """

    name = "global-sketch"
    Params = GlobalSketchParams
    #: eq. 5 reads the other positions only through Σ_{i∈M_t} p_i, and eq. 7 adds the same (B, V)
    #: shift at every position: the engine may pass the masked rows packed and tilt only the sampled ones.
    packed_marginals = True

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu", registry: Any = None):
        super().__init__(params, key, vocab_size, device)
        from sketchwm.registry import get_registry

        reg = registry or get_registry()
        p = self.params
        self.min_tokens = p.min_tokens
        prior, self.prior_desc = resolve_prior(p.prior, self.vocab_size)
        k_sk, k_dir = key.subkey("k_sk"), key.subkey("k_dir")
        self._dir_seed = k_dir.seed("direction")
        self.sketch = reg.create("sketch", p.sketch.name, p.sketch.params, k_sk, self.vocab_size, prior, self.device)
        self.score_fn = reg.create("score", p.score.name, p.score.params, self.sketch.dim, self.sketch.width)
        self.u = self.directions(torch.tensor([p.direction_index]))[0]  # (D,)
        self._n_total: int | None = None

    # ------------------------------------------------------------------ keys
    def directions(self, indices: torch.Tensor) -> torch.Tensor:
        """Rademacher directions u^{(i)} of key-family members: indices (K,) int64 → (K, D) float32 ±1."""
        D = self.sketch.dim
        idx = indices.to(torch.int64).to(self.device)
        counter = idx[:, None] * D + torch.arange(D, dtype=torch.int64, device=self.device)[None, :]
        return keyed_signs(self._dir_seed, counter)

    # ------------------------------------------------------------------ embedding
    def eta(self, step: int, total_steps: int, n_tokens: int) -> float:
        """η_t = δ·√N·s(t) for 0-based ``step`` of ``total_steps``."""
        p = self.params
        if p.schedule == "constant":
            s = 1.0
        elif p.schedule == "late":
            s = 1.0 if step >= (1.0 - p.late_fraction) * total_steps else 0.0
        else:
            s = (step + 1) / total_steps
        return p.delta * math.sqrt(n_tokens) * s

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Remember N = gen_length for η_t and the 1/√N normalisation."""
        self._n_total = gen_length

    def _softmax_into_buffer(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax(logits, -1) written into a buffer reused across steps (no fresh (B, G, V) allocation,
        whose page faults cost as much as the softmax itself on CPU). The buffer is overwritten at the
        next step; callers must not keep the result."""
        flat = getattr(self, "_probs_buf", None)
        n = logits.numel()
        if flat is None or flat.numel() < n or flat.device != logits.device or flat.dtype != logits.dtype:
            flat = torch.empty(n, dtype=logits.dtype, device=logits.device)
            self._probs_buf = flat
        buf = flat[:n].view(logits.shape)  # the packed path shrinks (B, M, V) step by step: reuse the storage
        try:
            return torch.ops.aten._softmax.out(logits, -1, False, out=buf)
        except (RuntimeError, AttributeError):  # an exotic backend without the out= kernel
            return torch.softmax(logits, dim=-1)

    def token_gradient(self, logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """a_{k,t}(v) of eq. (6) for every token, from the state.

        Args:
            logits: (B, G, V) float32 marginals as logits.
            tokens: (B, G) int64 current tokens.
            masked: (B, G) bool, M_t.

        Returns:
            (B, V) float32.
        """
        B, N = tokens.shape
        if float(masked.float().mean()) > 0.5:
            probs = self._softmax_into_buffer(logits)  # (B, G, V)
            mass = torch.bmm(masked.to(probs.dtype)[:, None, :], probs)[:, 0]  # (B, V) = Σ_{i∈M_t} p_i
        else:  # few masked positions: softmax only those rows
            b_idx, g_idx = masked.nonzero(as_tuple=True)
            probs = torch.softmax(logits[b_idx, g_idx], dim=-1)  # (M, V)
            mass = torch.zeros(B, logits.shape[-1], dtype=probs.dtype, device=logits.device).index_add_(0, b_idx, probs)
        return self.gradient_from_mass(mass, tokens, masked)

    def packed_token_gradient(self, masked_logits: torch.Tensor, masked_valid: torch.Tensor, tokens: torch.Tensor,
                              masked: torch.Tensor) -> torch.Tensor:
        """a_{k,t}(v) of eq. (6) from packed masked marginals (see ``DenoiseStep.masked_logits``).

        Args:
            masked_logits: (B, M, V) float32, the marginals of the masked positions as logits.
            masked_valid: (B, M) bool, False on padding rows.
            tokens: (B, G) int64 current tokens; masked: (B, G) bool, M_t.

        Returns:
            (B, V) float32, equal to :meth:`token_gradient` on the unpacked state.
        """
        probs = self._softmax_into_buffer(masked_logits)  # (B, M, V)
        mass = torch.bmm(masked_valid.to(probs.dtype)[:, None, :], probs)[:, 0]  # (B, V) = Σ_{i∈M_t} p_i
        return self.gradient_from_mass(mass, tokens, masked)

    def gradient_from_mass(self, mass: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """a_{k,t}(v) of eq. (6) from the masked marginal mass.

        Args:
            mass: (B, V) float32, Σ_{i∈M_t} p_i(v).
            tokens: (B, G) int64 current tokens; masked: (B, G) bool, M_t.

        Returns:
            (B, V) float32: the expected sketch ĥ (eq. 5) from the frozen counts plus ``mass``, the
            residual r = ∂S/∂h at ĥ (u_k − λĥ for the penalised score), mapped to tokens, / √N.
        """
        B, N = tokens.shape
        frozen = self.sketch.counts(tokens.clamp(0, self.vocab_size - 1), ~masked)  # (B, V)
        h_hat = self.sketch.expected_sketch(frozen, mass, N)  # (B, D), eq. 5
        r = self.score_fn.residual(self.u, h_hat)  # (B, D)
        return self.sketch.token_scores(r) / math.sqrt(N)  # (B, V), eq. 6

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Exponential tilt of eq. (7) in logit space: logits + η_t a_{k,t}, (B, G, V) (or (B, K, V)
        on the sampled rows when the engine packs the masked marginals into ``step.masked_logits``).

        Modifies ``step.logits`` in place (one pass, no new (B, G, V) tensor) and returns it.
        """
        N = step.tokens.shape[1]
        eta = self.eta(step.step, step.total_steps, N)
        if eta == 0.0:
            return step.logits
        if step.masked_logits is not None:  # packed masked rows; step.logits holds the sampled rows
            a = self.packed_token_gradient(step.masked_logits, step.masked_valid, step.tokens, step.masked)
        else:
            a = self.token_gradient(step.logits, step.tokens, step.masked)  # (B, V)
        return step.logits.add_((eta * a)[:, None, :])  # (B, G, V), or (B, K, V) on the sampled rows

    # ------------------------------------------------------------------ detection
    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """h_k(y), score, z and key-randomised p-value for ids (B, N) with valid (B, N)."""
        ids, valid = ids.to(self.device), valid.to(self.device)
        h = self.sketch.sketch(ids, valid)  # (B, D)
        n = valid.sum(1)
        out = self.score_fn.p_values(self.u, h, method=self.params.p_value, n_tokens=n)
        return SchemeScores(out.score.double(), out.z.double(), out.p_value.double(), n.long(), out.p_value_method)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """τ_α of the score function (eq. 19 for the penalised score)."""
        return self.score_fn.analytic_threshold(alpha, n_tokens)

    def attribute(self, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, top: int = 5, chunk: int = 8192) -> Attribution:
        """Rank K key-family members for each text (beyond the paper).

        One matrix product per chunk of keys: scores (B, K) = score(U, h) with U (K, D) the members'
        directions. p-values are exact key-randomised per member (they share the pmf of ⟨u, H⟩
        given h); ``p_value_fwer`` is Bonferroni-corrected over the K members.

        Args:
            ids, valid: (B, N) as in :meth:`score_ids`.
            n_keys: K (up to 100,000 and more; memory is O(chunk·D)).
            top: how many best members to return.

        Raises:
            InputError: n_keys < 1.
        """
        from .scores import _int_sketch, rademacher_sum_pvalue

        if n_keys < 1:
            raise InputError("n_keys must be >= 1")
        ids, valid = ids.to(self.device), valid.to(self.device)
        h = self.sketch.sketch(ids, valid).double()  # (B, D)
        n = valid.sum(1)
        B = h.shape[0]
        top = min(top, n_keys)
        best_s = torch.full((B, 0), float("-inf"), dtype=torch.float64, device=self.device)
        best_i = torch.zeros((B, 0), dtype=torch.long, device=self.device)
        for start in range(0, n_keys, chunk):  # chunks of keys, each one matrix product
            idx = torch.arange(start, min(n_keys, start + chunk), device=self.device)
            U = self.directions(idx).double()  # (k, D)
            s = self.score_fn.score(U, h)  # (B, k)
            cat_s = torch.cat([best_s, s], 1)
            cat_i = torch.cat([best_i, idx[None, :].expand(B, -1)], 1)
            best_s, pos = cat_s.topk(min(top, cat_s.shape[1]), dim=1)
            best_i = torch.gather(cat_i, 1, pos)
        U_top = self.directions(best_i.flatten()).double().view(B, top, -1)  # (B, top, D)
        ip = torch.einsum("bkd,bd->bk", U_top, h)
        z = ip / h.norm(dim=1, keepdim=True).clamp_min(1e-300)
        H = _int_sketch(h, n)
        if H is not None:
            x = torch.einsum("bkd,bd->bk", U_top, H.double()).round().long()
            p = rademacher_sum_pvalue(H, x)
        else:
            from scipy.stats import norm

            p = torch.from_numpy(norm.sf(z.cpu().numpy())).to(self.device)
        return Attribution(best_i, best_s, z, p, (p * n_keys).clamp(max=1.0), n_keys)

    def describe(self) -> dict[str, Any]:
        """Config plus the resolved prior (source and SHA-256) and the sketch report."""
        d = super().describe()
        d["resolved_prior"] = self.prior_desc
        d["sketch_report"] = self.sketch.report()
        return d


@hookimpl
def sketchwm_register_schemes() -> list[type]:
    """Register the global sketch watermark."""
    return [GlobalSketchScheme]
