"""``global-sketch-family``: the global sketch embedded under one of K sub-keys, a defence against stealing.

Why. One fixed direction u_k over a position-free sketch is, to a thief, a per-token bias
c_k(v) = ⟨u_k, φ_k(v)⟩ that counting reveals (watermark stealing, Jovanović et al. 2024): a forger
who writes the most-boosted tokens into any text gets it flagged under the victim's key.

Embedding. The key k derives K member keys k_i = HMAC(k, "subkey/global-sketch-family/member=i")
(:meth:`sketchwm.keys.WatermarkKey.subkey`, domain-separated), each a full ``global-sketch`` key
(its own k_sk and k_dir, seed paper §4.1). Each text is embedded, unchanged (Alg. 1), under one
member m drawn uniformly at random per text from the sampler's generator (randomised key selection,
Aremu et al. 2025, arXiv 2507.07871). A thief who counts tokens over many texts estimates the
mixture c̄(v) = (1/K) Σ_i c_i(v), not any one member's c_i.

Detection, two tests.

1. *Family test* (the watermark is there): p_i is member i's own p-value (``global-sketch``'s
   ``score_ids``: the fixed-key background null by default, valid per key); the family p-value is
   the Bonferroni bound p_fam = min(1, K·min_i p_i) (Dunn 1961; or Šidák's 1 − (1 − min_i p_i)^K,
   exact for independent members), so P(p_fam ≤ α) ≤ α on text written without the key, for the
   one key held, whatever the dependence between members (Bonferroni).
2. *Spread test* (the evidence belongs to one member, as genuine embedding puts it; Gloaguen et
   al. 2025 test learned spoofs the same way): a forger who mixes the members raises every member's
   z by about the same amount; a genuine text raises one. With z_i each member's z, b the member
   of smallest p_i, m and s the mean and standard deviation (ddof 1) of the other K − 1 members' z:

   * ``spread="student"`` (default): t_b = (z_b − m) / (max(s, 1)·(1 + 1/(K − 1))^{1/2}), where s
     pools the other members' spread with that of M *decoy* keys k'_j = HMAC(k,
     "subkey/global-sketch-family/decoy=j") (``decoys``; never embedded, scored only to measure how
     far z spreads over keys the text does not favour): s² = (Σ_{i≠b}(z_i − m)² + Σ_j(z'_j − m')²)
     / ν with ν = (K − 2) + (M − 1) degrees of freedom (M − 1 → 0 when M < 2). When the members' z
     are i.i.d. N(μ, σ²) and the decoys' i.i.d. N(μ', σ²), any μ, μ', σ (the spoof null: a text that
     favours no member over the others; decoys are lifted by nothing a thief counted, but share the
     text's noise), (z_i − m_{−i}) / (s_{−i}(1 + 1/(K − 1))^{1/2}) is Student-t with ν degrees of
     freedom for each fixed i (the prediction-interval pivot), and max(s, 1) ≥ s only lowers it, so
     p_spread = min(1, K·P(T_ν ≥ t_b)) (Bonferroni over the choice of b) is conservative for every
     σ. Stolen tokens repeated through a text inflate σ well above 1: the studentised contrast
     scales with it, the unit-noise one does not. The decoys buy degrees of freedom: with K − 2
     alone the t tail costs power on short genuine texts. Needs ν ≥ 1.
   * ``spread="normal"``: d_b = (z_b − m) / (1 + 1/(K − 1))^{1/2}, ~ N(0, 1) when the members' noise
     has unit variance, p_spread = min(1, K·(1 − Φ(d_b))). More power on short genuine texts, but
     a forgery with σ > 1 passes it more often than its level.

The reported p-value is max(p_fam, p_spread) (``spread_test=True``; p_fam alone otherwise): it is
never below p_fam, so the per-key promise of test 1 holds unchanged, and a text is flagged at level
α only if both tests reject. The spread test does not make forged texts look *less* watermarked:
stolen tokens pasted into a genuine text raise every member, including the one that wrote it, and
leave d_b where the genuine evidence put it. What it does not stop: a thief who tells the members'
texts apart (clustering stolen texts by co-occurring boosted tokens, then stealing per cluster) and
forges one member; the larger K, the fewer texts per member and the harder the clustering.

``score`` is Φ⁻¹(1 − p) (a z-equivalent of the reported p-value, so ``score ≥ Φ⁻¹(1 − α)`` ⇔
``p ≤ α``), ``z`` the best member's z.
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sketchwm.channels import ComposedScheme
from sketchwm.components import DenoiseStep, MarginalReads, Marginals, SchemeScores, Strength
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError
from sketchwm.multiple_testing import bonferroni
from sketchwm.stats import normal_isf

from .global_sketch import GlobalSketchParams, GlobalSketchScheme

__all__ = ["GlobalSketchFamilyScheme", "GlobalSketchFamilyParams", "member_key", "decoy_key", "family_pvalues"]

#: domain of the member keys: ``key.subkey(MEMBER_DOMAIN.format(i=i))``
MEMBER_DOMAIN = "global-sketch-family/member={i}"


def member_key(key: Any, i: int) -> Any:
    """Member i's key: ``key.subkey("global-sketch-family/member=i")`` (HMAC-SHA256, domain-separated)."""
    return key.subkey(MEMBER_DOMAIN.format(i=int(i)))


def decoy_key(key: Any, j: int) -> Any:
    """Decoy j's key (detection only, never embedded): ``key.subkey("global-sketch-family/decoy=j")``."""
    return key.subkey(f"global-sketch-family/decoy={int(j)}")


class GlobalSketchFamilyParams(StrictModel):
    """Parameters of the key-family global sketch.

    Attributes:
        members: K, the number of member keys (1 = the plain global sketch under one derived key,
            with no spread test).
        member: the ``global-sketch`` params every member uses (default: the shipped default); its
            ``order`` is ignored: the family tilts the marginals and never steers the order (at T = 0
            the sampler warns).
        correction: family-wise correction of the minimum member p-value: ``bonferroni``
            (min(1, K·p), valid under any dependence) or ``sidak`` (1 − (1 − p)^K, exact for
            independent members).
        spread_test: also require the evidence to favour one member (module doc, test 2).
        spread: the spread test's null: ``student`` (members' z i.i.d. with unknown spread) or
            ``normal`` (unit spread).
        decoys: M, detection-only keys whose z measure the text's spread for ``student`` (module doc).
    """

    members: int = Field(16, ge=1, le=1024)
    member: GlobalSketchParams = GlobalSketchParams()
    correction: Literal["bonferroni", "sidak"] = "bonferroni"
    spread_test: bool = True
    spread: Literal["student", "normal"] = "student"
    decoys: int = Field(32, ge=0, le=1024)
    min_tokens: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _check(self) -> "GlobalSketchFamilyParams":
        if self.spread_test and self.members < 2:
            raise ValueError("spread_test needs members >= 2 (it compares the best member with the others); "
                             "set spread_test=false for a single member")
        if self.spread_test and self.spread == "student" and _dof(self.members, self.decoys) < 1:
            raise ValueError("spread='student' needs members >= 3 or decoys >= 2 (degrees of freedom for the spread)")
        return self


def _dof(K: int, M: int) -> int:
    """ν = (K − 2) + (M − 1 when M ≥ 2): the studentised spread test's degrees of freedom."""
    return (K - 2) + (M - 1 if M >= 2 else 0)


def family_pvalues(p: torch.Tensor, z: torch.Tensor, correction: str = "bonferroni",
                   spread_test: bool = True, spread: str = "student",
                   z_decoy: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The family's p-value from its members' p-values and z-scores (module doc, tests 1 and 2).

    Args:
        p: (K, B) float64 member p-values (each valid for its own key).
        z: (K, B) float64 member z-scores.
        correction: ``bonferroni`` or ``sidak``.
        spread_test: combine with the spread test.
        spread: ``student`` or ``normal``, the spread test's null (module doc).
        z_decoy: (M, B) float64 decoy z-scores pooled into the spread for ``student`` (None: M = 0).

    Returns:
        (p_value (B,) float64 = max(p_fam, p_spread) or p_fam, best (B,) int64 member of smallest
        p_i, d (B,) float64 the spread contrast (t_b or d_b), NaN when K is too small for it).

    Raises:
        ConfigError: unknown correction or spread, or the spread test with too few members (and decoys).
    """
    K = p.shape[0]
    p_min, best = p.min(0)  # (B,), (B,)
    if correction == "bonferroni":
        p_fam = bonferroni(p_min[None], m=K, dim=0)[0]  # the smallest of K: min(1, K·p_min)
    elif correction == "sidak":
        p_fam = -torch.expm1(K * torch.log1p(-p_min.clamp(max=1.0 - 1e-16)))  # 1 − (1 − p)^K without cancellation
        p_fam = torch.where(p_min >= 1.0, torch.ones_like(p_fam), p_fam)
    else:
        raise ConfigError(f"unknown family-wise correction {correction!r} (bonferroni | sidak)")
    if spread not in ("student", "normal"):
        raise ConfigError(f"unknown spread test {spread!r} (student | normal)")
    M = 0 if z_decoy is None else z_decoy.shape[0]
    if K < 2 or (spread == "student" and _dof(K, M) < 1):
        if spread_test:
            raise ConfigError(f"the {spread} spread test needs at least {2 if spread == 'normal' else 3} members "
                              "(or, for student, 2 members and 2 decoys)")
        return p_fam, best, torch.full_like(p_fam, float("nan"))
    from scipy import stats

    zc = z - z.mean(0)  # (K, B) centred per text (no cancellation in the sums below)
    z_best = zc.gather(0, best[None])[0]  # (B,)
    m_rest = (zc.sum(0) - z_best) / (K - 1)  # (B,) mean of the other members
    d = (z_best - m_rest) / math.sqrt(1.0 + 1.0 / (K - 1))  # (B,) unit-noise contrast
    if spread == "student":
        ss = (zc.square().sum(0) - z_best.square() - (K - 1) * m_rest.square()).clamp(min=0.0)  # (B,) other members
        if M >= 2:
            ss = ss + (z_decoy - z_decoy.mean(0)).square().sum(0)  # (B,) + the decoys' own spread
        nu = _dof(K, M)
        d = d / (ss / nu).sqrt().clamp(min=1.0)  # (B,) t_b: scaled by max(s, 1)
        tail = stats.t.sf(d.cpu().numpy(), nu)  # P(T_ν ≥ t_b)
    else:
        tail = stats.norm.sf(d.cpu().numpy())  # 1 − Φ(d_b)
    if not spread_test:
        return p_fam, best, d
    p_spread = bonferroni(torch.from_numpy(np.asarray(tail))[None], m=K, dim=0)[0].to(p_fam)  # over the choice of b
    return torch.maximum(p_fam, p_spread), best, d


class GlobalSketchFamilyScheme(ComposedScheme):
    """The global sketch under one of K member keys per text, detected by family and spread tests.

    See the module doc for the construction and its guarantees.

    Args:
        params: :class:`GlobalSketchFamilyParams`.
        key: the :class:`sketchwm.keys.WatermarkKey`; member keys derive from it (:func:`member_key`).
        vocab_size: V.
        device: where tables live.
        registry, tokenizer_fingerprint: passed to every member (:class:`GlobalSketchScheme`).

    Attributes:
        members: the K member :class:`GlobalSketchScheme` instances.
        decoys: the M decoy :class:`GlobalSketchScheme` instances (detection only; empty unless
            the studentised spread test is on).
        drawn: (B,) int64, the member each text of the last generated batch was embedded under
            (None before the first step of a generation); a benchmark's ground truth, never needed
            for detection.

    Raises:
        ConfigError: bad params (as :class:`GlobalSketchScheme`).
    """

    name = "global-sketch-family"
    Params = GlobalSketchFamilyParams
    strength = Strength("member.delta", (0.25, 0.5, 0.75, 1.0))  # every member's δ; default 0.75
    reads = MarginalReads.masked(incremental=True)  # the members' reads

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu", registry: Any = None,
                 tokenizer_fingerprint: str | None = None):
        super().__init__(params, key, vocab_size, device)
        # the family tilts and never steers the order (it has no order_priority of its own): its members tilt alone
        member = {**self.params.member.model_dump(mode="json"), "order": "off"}
        self.members = [GlobalSketchScheme(member, member_key(key, i), vocab_size, device, registry=registry,
                                           tokenizer_fingerprint=tokenizer_fingerprint)
                        for i in range(self.params.members)]
        n_decoys = self.params.decoys if self.params.spread_test and self.params.spread == "student" else 0
        self.decoys = [GlobalSketchScheme(member, decoy_key(key, j), vocab_size, device, registry=registry,
                                          tokenizer_fingerprint=tokenizer_fingerprint) for j in range(n_decoys)]
        self.prior_fingerprint = self.members[0].prior_fingerprint
        self.drawn: torch.Tensor | None = None
        self._begin: tuple[int, int, torch.Tensor, torch.Tensor] | None = None
        self._groups: list[tuple[int, torch.Tensor]] = []

    # ------------------------------------------------------------------ embedding
    def parts(self) -> list[GlobalSketchScheme]:
        """The members: each is told the stop token (:meth:`ComposedScheme.set_stop_token`)."""
        return self.members

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Forget the last batch's members; they are drawn at the first step (from its generator), and
        each drawn member starts on its own texts then."""
        self._begin = (batch_size, gen_length, prompt_ids, prompt_mask)
        self.drawn, self._groups = None, []

    def _draw(self, step: DenoiseStep) -> None:
        """Draw one member per text, uniformly, from the step's generator (a fresh one if None), and
        start each member drawn on its texts."""
        B = step.tokens.shape[0]
        gen = step.generator
        if gen is None:
            gen = torch.Generator().manual_seed(secrets.randbits(62))
        dev = gen.device if isinstance(gen, torch.Generator) else step.tokens.device
        self.drawn = torch.randint(self.params.members, (B,), generator=gen, device=dev).to(step.tokens.device)  # (B,)
        _, gen_length, prompt_ids, prompt_mask = self._begin or (B, step.tokens.shape[1], step.prompt_ids, step.prompt_mask)
        self._groups = []
        for m in torch.unique(self.drawn).tolist():
            idx = (self.drawn == m).nonzero(as_tuple=True)[0]  # (B_m,)
            self.members[m].begin(int(idx.numel()), gen_length, prompt_ids[idx], prompt_mask[idx])
            self._groups.append((m, idx))

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Each text's target logits tilted by its own member (eq. 7 of the seed paper): (B, K, V)."""
        if self.drawn is None or self.drawn.shape[0] != step.tokens.shape[0]:
            self._draw(step)
        mg = step.marginals
        if len(self._groups) == 1:  # one member for the whole batch: its hook on the step itself
            return self.members[self._groups[0][0]].process_logits(step)
        tilted = []
        for m, idx in self._groups:  # one member's texts at a time: (B_m, ...) slices (copies)
            sub = Marginals(mg.logits[idx], mg.positions[idx], mg.valid[idx], mg.targets[idx], mg.target_valid[idx],
                            None, mg.complete, mg.incremental_follows)
            sub_step = DenoiseStep(step.step, step.total_steps, step.tokens[idx], step.masked[idx], sub,
                                   step.prompt_ids[idx], step.prompt_mask[idx], step.block, step.mask_token_id,
                                   step.generator)
            tilted.append((idx, self.members[m].process_logits(sub_step)))  # (B_m, K, V)
        out = mg.target_logits()  # (B, K, V)
        for idx, t in tilted:
            out[idx] = t
        return out

    # ------------------------------------------------------------------ detection
    def member_scores(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
        """Every member's p-value and z: ids (B, N) int64, valid (B, N) bool → p (K, B) float64,
        z (K, B) float64, n_scored (B,) int64, and the members' p-value method.

        Raises:
            InputError: ids outside [0, V).
        """
        outs = [m.score_ids(ids, valid) for m in self.members]  # K passes of O(B·N) each
        return (torch.stack([o.p_value.double() for o in outs]), torch.stack([o.z.double() for o in outs]),
                outs[0].n_scored, outs[0].p_value_method)

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Family detection for ids (B, N) with valid (B, N) (module doc): p-value max(p_fam, p_spread),
        score Φ⁻¹(1 − p) (float64, +inf-safe for p near 0), z the best member's z.

        Raises:
            InputError: ids outside [0, V).
        """
        p, z, n, method = self.member_scores(ids, valid)
        z_decoy = torch.stack([d.score_ids(ids, valid).z.double() for d in self.decoys]) if self.decoys else None  # (M, B)
        pv, best, _ = family_pvalues(p, z, self.params.correction, self.params.spread_test, self.params.spread, z_decoy)
        from scipy.special import ndtri

        score = torch.from_numpy(-ndtri(np.clip(pv.cpu().numpy(), 1e-300, 1.0))).to(pv)  # Φ⁻¹(1 − p)
        z_best = z.gather(0, best[None])[0]
        how = (f"{self.params.correction} over {self.params.members} member keys of "
               f"[{method}]"
               + (f" and the {self.params.spread} spread test" if self.params.spread_test else "")
               + (f" ({len(self.decoys)} decoy keys)" if self.decoys else ""))
        return SchemeScores(score, z_best, pv, n, how)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Φ⁻¹(1 − α) on ``score`` (⇔ p ≤ α)."""
        return normal_isf(alpha)

    def describe(self) -> dict[str, Any]:
        """Config plus the members' resolved prior."""
        d = super().describe()
        d["resolved_prior"] = self.members[0].prior_desc
        return d
