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

Shared hashes (``hashes="shared"``). The members share one Count-Sketch φ (the k_sk of the key
``key.subkey("global-sketch-family/shared")``) and differ only in their direction: member i is
direction index i of that key, u^{(i)} = PRF(k_dir, i) (seed paper §4.1; the multi-key attribution
of :mod:`sketchwm_builtin.global_sketch.attribution` uses the same family), decoy j is index K + j.
Given a text's integer sketch H = Φᵀx, the T_i = ⟨u^{(i)}, H⟩ are i.i.d. over members, which is the
spread test's model. Embedding tilts each text along its own member's u in the one batched step of
a single key (:meth:`GlobalSketchScheme.use_directions`: eq. 5's expected sketch does not depend on
u); detection reads all K + M weights c_i(v) of each distinct token in one pass
(:func:`sketchwm.components.distinct_token_sums` with K + M columns) and the exact background tail
of the member of largest z (any data-chosen member keeps min(1, K·p) valid), computed only where
Bernstein's bound on that tail leaves K·p below 4: elsewhere the family p-value is 1
(:mod:`sketchwm_builtin.shared_family`). The cost of a family is then about that of one key, where
separate hashes cost K + M.
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sketchwm.channels import ComposedScheme, Tilt
from sketchwm.components import DenoiseStep, MarginalReads, Marginals, SchemeScores, Strength
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError
from sketchwm.stats import normal_isf

from .global_sketch import GlobalSketchParams, GlobalSketchScheme
from .shared_family import SharedMemberStats

__all__ = ["GlobalSketchFamilyScheme", "GlobalSketchFamilyParams", "FamilyTestParams", "member_key", "decoy_key", "family_pvalues"]

#: domain of the member keys: ``key.subkey(MEMBER_DOMAIN.format(i=i))``
MEMBER_DOMAIN = "global-sketch-family/member={i}"
#: domain of the one key whose directions are the members under ``hashes="shared"``
SHARED_DOMAIN = "global-sketch-family/shared"


def member_key(key: Any, i: int) -> Any:
    """Member i's key: ``key.subkey("global-sketch-family/member=i")`` (HMAC-SHA256, domain-separated)."""
    return key.subkey(MEMBER_DOMAIN.format(i=int(i)))


def decoy_key(key: Any, j: int) -> Any:
    """Decoy j's key (detection only, never embedded): ``key.subkey("global-sketch-family/decoy=j")``."""
    return key.subkey(f"global-sketch-family/decoy={int(j)}")


class FamilyTestParams(StrictModel):
    """How many members a key family has and how it is tested (module doc, tests 1 and 2).

    Attributes:
        members: K, the number of member keys (1 = the plain global sketch under one derived key,
            with no spread test).
        correction: family-wise correction of the minimum member p-value: ``bonferroni``
            (min(1, K·p), valid under any dependence) or ``sidak`` (1 − (1 − p)^K, exact for
            independent members).
        spread_test: also require the evidence to favour one member (module doc, test 2).
        spread: the spread test's null: ``student`` (members' z i.i.d. with unknown spread) or
            ``normal`` (unit spread).
        decoys: M, detection-only keys whose z measure the text's spread for ``student`` (module doc).
    """

    members: int = Field(16, ge=1, le=1024)
    correction: Literal["bonferroni", "sidak"] = "bonferroni"
    spread_test: bool = True
    spread: Literal["student", "normal"] = "student"
    decoys: int = Field(32, ge=0, le=1024)

    @model_validator(mode="after")
    def _check(self) -> "FamilyTestParams":
        if self.members >= 2 and self.spread_test and self.spread == "student" and _dof(self.members, self.decoys) < 1:
            raise ValueError("spread='student' needs members >= 3 or decoys >= 2 (degrees of freedom for the spread)")
        return self


class GlobalSketchFamilyParams(FamilyTestParams):
    """Parameters of the key-family global sketch: :class:`FamilyTestParams` and

    Attributes:
        member: the ``global-sketch`` params every member uses (default: the shipped default). With
            separate hashes its ``order`` is ignored (the family tilts the marginals and never steers
            the order; at T = 0 the sampler warns); with shared hashes the drawn member steers it.
        hashes: ``per-member`` (default): each member is a full key (its own k_sk and k_dir), scored
            in K + M passes. ``shared``: one Count-Sketch, members differ in u only (module doc), at
            about the cost of one key.
        min_tokens: shortest text the detector accepts, in tokens (default 16).
    """

    member: GlobalSketchParams = GlobalSketchParams()
    hashes: Literal["per-member", "shared"] = "per-member"
    min_tokens: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _check_family(self) -> "GlobalSketchFamilyParams":
        if self.spread_test and self.members < 2:
            raise ValueError("spread_test needs members >= 2 (it compares the best member with the others); "
                             "set spread_test=false for a single member")
        return self


def _dof(K: int, M: int) -> int:
    """ν = (K − 2) + (M − 1 when M ≥ 2): the studentised spread test's degrees of freedom."""
    return (K - 2) + (M - 1 if M >= 2 else 0)


def family_pvalues(p: torch.Tensor, z: torch.Tensor, correction: str = "bonferroni",
                   spread_test: bool = True, spread: str = "student",
                   z_decoy: torch.Tensor | None = None,
                   best: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The family's p-value from its members' p-values and z-scores (module doc, tests 1 and 2).

    Args:
        p: (K, B) float64 member p-values (each valid for its own key).
        z: (K, B) float64 member z-scores.
        correction: ``bonferroni`` or ``sidak``.
        spread_test: combine with the spread test.
        spread: ``student`` or ``normal``, the spread test's null (module doc).
        z_decoy: (M, B) float64 decoy z-scores pooled into the spread for ``student`` (None: M = 0).
        best: (B,) int64, the member each text is tested at, chosen from the data in any way (None: the
            member of smallest p_i). p_fam = min(1, K·p_best) ≥ min(1, K·min_i p_i) stays valid, and
            the spread test is Bonferroni over the choice; the other members' p-values are not read.

    Returns:
        (p_value (B,) float64 = max(p_fam, p_spread) or p_fam, best (B,) int64 member of smallest
        p_i, d (B,) float64 the spread contrast (t_b or d_b), NaN when K is too small for it).

    Raises:
        ConfigError: unknown correction or spread, or the spread test with too few members (and decoys).
    """
    K = p.shape[0]
    if correction not in ("bonferroni", "sidak"):
        raise ConfigError(f"unknown family-wise correction {correction!r} (bonferroni | sidak)")
    if spread not in ("student", "normal"):
        raise ConfigError(f"unknown spread test {spread!r} (student | normal)")
    from scipy.special import ndtr, stdtr

    # numpy on (K, B): torch's small ops wait on its thread pool, and every step here is elementwise
    pn, zn = p.detach().cpu().numpy().astype(np.float64), z.detach().cpu().numpy().astype(np.float64)
    best_n = pn.argmin(0) if best is None else best.cpu().numpy().astype(np.int64)  # (B,)
    cols = np.arange(pn.shape[1])
    p_min = pn[best_n, cols]  # (B,)
    if correction == "bonferroni":
        p_fam = np.minimum(1.0, K * p_min)  # the smallest of K: min(1, K·p_min) (Dunn 1961)
    else:  # 1 − (1 − p)^K without cancellation
        p_fam = np.where(p_min >= 1.0, 1.0, -np.expm1(K * np.log1p(-np.minimum(p_min, 1.0 - 1e-16))))

    def out(pv: np.ndarray, d: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.from_numpy(pv), torch.from_numpy(best_n), torch.from_numpy(d)

    M = 0 if z_decoy is None else z_decoy.shape[0]
    if K < 2 or (spread == "student" and _dof(K, M) < 1):
        if spread_test:
            raise ConfigError(f"the {spread} spread test needs at least {2 if spread == 'normal' else 3} members "
                              "(or, for student, 2 members and 2 decoys)")
        return out(p_fam, np.full_like(p_fam, np.nan))
    zc = zn - zn.mean(0)  # (K, B) centred per text (no cancellation in the sums below)
    z_best = zc[best_n, cols]  # (B,)
    m_rest = (zc.sum(0) - z_best) / (K - 1)  # (B,) mean of the other members
    d = (z_best - m_rest) / math.sqrt(1.0 + 1.0 / (K - 1))  # (B,) unit-noise contrast
    if spread == "student":
        ss = np.maximum(np.square(zc).sum(0) - z_best ** 2 - (K - 1) * m_rest ** 2, 0.0)  # (B,) other members
        if M >= 2:
            zd = z_decoy.detach().cpu().numpy().astype(np.float64)
            ss = ss + np.square(zd - zd.mean(0)).sum(0)  # (B,) + the decoys' own spread
        nu = _dof(K, M)
        d = d / np.maximum(np.sqrt(ss / nu), 1.0)  # (B,) t_b: scaled by max(s, 1)
        tail = np.ones_like(d)  # P(T_ν ≥ t_b), needed where p_fam < 1 (elsewhere max(p_fam, ·) is 1)
        need = p_fam < 1.0
        tail[need] = stdtr(nu, -d[need])
    else:
        tail = ndtr(-d)  # 1 − Φ(d_b)
    if not spread_test:
        return out(p_fam, d)
    p_spread = np.minimum(1.0, K * tail)  # Bonferroni over the choice of b
    return out(np.maximum(p_fam, p_spread), d)


class GlobalSketchFamilyScheme(ComposedScheme):
    """The global sketch under one of K member keys per text, detected by family and spread tests.

    See the module doc for the construction and its guarantees.

    Args:
        params: :class:`GlobalSketchFamilyParams`.
        key: the :class:`sketchwm.keys.WatermarkKey`; member keys derive from it (:func:`member_key`,
            or the one key of :data:`SHARED_DOMAIN` with shared hashes).
        vocab_size: V.
        device: where tables live.
        registry, tokenizer_fingerprint: passed to every member (:class:`GlobalSketchScheme`).

    Attributes:
        members: the K member :class:`GlobalSketchScheme` instances (per-member hashes; empty with
            shared hashes, where :attr:`shared` carries every member as a direction index).
        decoys: the M decoy :class:`GlobalSketchScheme` instances (per-member hashes, detection only;
            empty unless the studentised spread test is on).
        shared: with shared hashes, the one :class:`GlobalSketchScheme` whose direction indices
            0..K − 1 are the members and K..K + M − 1 the decoys; else None.
        shared_stats: with shared hashes, their :class:`SharedMemberStats` (detection); else None.
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
        p = self.params
        self.n_decoys = p.decoys if p.spread_test and p.spread == "student" else 0
        build = dict(registry=registry, tokenizer_fingerprint=tokenizer_fingerprint)
        self.members, self.decoys, self.shared, self.shared_stats = [], [], None, None
        if p.hashes == "shared":
            self.shared = GlobalSketchScheme(p.member.model_dump(mode="json"), key.subkey(SHARED_DOMAIN), vocab_size,
                                             device, **build)
            self._directions = self.shared.directions(torch.arange(p.members))  # (K, D) float32 ±1
            self.shared_stats = SharedMemberStats(self.shared, p.members, self.n_decoys)
        else:
            # the family tilts and never steers the order (it has no order_priority of its own): its members tilt alone
            member = {**p.member.model_dump(mode="json"), "order": "off"}
            self.members = [GlobalSketchScheme(member, member_key(key, i), vocab_size, device, **build)
                            for i in range(p.members)]
            self.decoys = [GlobalSketchScheme(member, decoy_key(key, j), vocab_size, device, **build)
                           for j in range(self.n_decoys)]
        first = self.shared or self.members[0]
        self.sketch, self.prior_fingerprint, self.prior_desc = first.sketch, first.prior_fingerprint, first.prior_desc
        self.drawn: torch.Tensor | None = None
        self._begin: tuple[int, int, torch.Tensor, torch.Tensor] | None = None
        self._groups: list[tuple[int, torch.Tensor]] = []

    # ------------------------------------------------------------------ embedding
    def parts(self) -> list[GlobalSketchScheme]:
        """The schemes that generate: the members, or the shared scheme (each is told the stop token,
        :meth:`ComposedScheme.set_stop_token`)."""
        return [self.shared] if self.shared is not None else self.members

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Forget the last batch's members; they are drawn at the first step (from its generator), and
        each drawn member starts on its own texts then (the shared scheme starts now)."""
        self._begin = (batch_size, gen_length, prompt_ids, prompt_mask)
        self.drawn, self._groups = None, []
        if self.shared is not None:
            self.shared.begin(batch_size, gen_length, prompt_ids, prompt_mask)

    def _draw(self, step: DenoiseStep) -> None:
        """Draw one member per text, uniformly, from the step's generator (a fresh one if None), and
        start each member drawn on its texts (shared hashes: give each text its member's direction)."""
        B = step.tokens.shape[0]
        gen = step.generator
        if gen is None:
            gen = torch.Generator().manual_seed(secrets.randbits(62))
        dev = gen.device if isinstance(gen, torch.Generator) else step.tokens.device
        self.drawn = torch.randint(self.params.members, (B,), generator=gen, device=dev).to(step.tokens.device)  # (B,)
        if self.shared is not None:
            self.shared.use_directions(self._directions.to(self.drawn.device)[self.drawn])  # (B, D)
            return
        _, gen_length, prompt_ids, prompt_mask = self._begin or (B, step.tokens.shape[1], step.prompt_ids, step.prompt_mask)
        self._groups = []
        for m in torch.unique(self.drawn).tolist():
            idx = (self.drawn == m).nonzero(as_tuple=True)[0]  # (B_m,)
            self.members[m].begin(int(idx.numel()), gen_length, prompt_ids[idx], prompt_mask[idx])
            self._groups.append((m, idx))

    def tilt(self, step: DenoiseStep) -> Tilt:
        """:meth:`process_logits` as a value (a combined scheme's ``rows`` channel; shared hashes
        only): the tilted target rows (B, K, V) float32 and the step's coverage (B,) or None.

        Raises:
            ConfigError: separate hashes (their members tilt groups of texts one at a time).
        """
        if self.shared is None:
            raise ConfigError("a family with hashes='per-member' is not a channel; use hashes='shared'")
        if self.drawn is None or self.drawn.shape[0] != step.tokens.shape[0]:
            self._draw(step)
        return self.shared.tilt(step)

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Each text's target logits tilted by its own member (eq. 7 of the seed paper): (B, K, V)."""
        if self.shared is not None:
            return self.tilt(step).logits
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

    def steers_order(self, temperature: float) -> bool:
        """Shared hashes: as the member params' ``order`` (the drawn member's gradient ranks the
        positions, :meth:`GlobalSketchScheme.steers_order`); separate hashes: False."""
        return self.shared is not None and self.shared.steers_order(temperature)

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """The shared scheme's priority (B, K) float32 (:meth:`GlobalSketchScheme.order_priority`)."""
        if self.shared is None:
            return super().order_priority(step, x0, confidence)
        return self.shared.order_priority(step, x0, confidence)

    # ------------------------------------------------------------------ detection
    def member_scores(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
        """Every member's p-value and z: ids (B, N) int64, valid (B, N) bool → p (K, B) float64,
        z (K, B) float64, n_scored (B,) int64, and the members' p-value method.

        Raises:
            InputError: ids outside [0, V).
        """
        if self.shared is not None:
            p, z, _, n, _ = self.shared_stats.scores(ids, valid, every=True)
            return p, z, n, self.shared_stats.method()
        outs = [m.score_ids(ids, valid) for m in self.members]  # K passes of O(B·N) each
        return (torch.stack([o.p_value.double() for o in outs]), torch.stack([o.z.double() for o in outs]),
                outs[0].n_scored, outs[0].p_value_method)

    def member_token_weights(self) -> torch.Tensor:
        """c_i(v) = ⟨u^{(i)}, φ_i(v)⟩ of every member and token: (K, V) float64 (0 on excluded tokens), the
        per-token boosts a counting thief estimates the mean of (module doc)."""
        if self.shared is not None:
            return self.shared_stats.table()[0][:-1, : self.params.members].T.to(torch.float64)
        return torch.stack([m.token_weights() for m in self.members])

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Family detection for ids (B, N) with valid (B, N) (module doc): p-value max(p_fam, p_spread),
        score Φ⁻¹(1 − p) (float64, +inf-safe for p near 0), z the best member's z.

        Raises:
            InputError: ids outside [0, V).
        """
        best = None  # per-member hashes: the member of smallest p
        if self.shared is not None:  # shared hashes: the member of largest z
            # decoys only where the family p-value can be below 1 (the same p-values, bonferroni only)
            p, z, z_decoy, n, best = self.shared_stats.scores(
                ids, valid, decoys_where_fam_below_one=self.params.correction == "bonferroni")
            method = self.shared_stats.method()
        else:
            p, z, n, method = self.member_scores(ids, valid)
            z_decoy = torch.stack([d.score_ids(ids, valid).z.double() for d in self.decoys]) if self.decoys else None  # (M, B)
        pv, best, _ = family_pvalues(p, z, self.params.correction, self.params.spread_test, self.params.spread, z_decoy,
                                     best)
        from scipy.special import ndtri

        score = torch.from_numpy(-ndtri(np.clip(pv.cpu().numpy(), 1e-300, 1.0))).to(pv)  # Φ⁻¹(1 − p)
        z_best = z.gather(0, best[None])[0]
        how = (f"{self.params.correction} over {self.params.members} member keys of "
               f"[{method}]"
               + (f" and the {self.params.spread} spread test" if self.params.spread_test else "")
               + (f" ({self.n_decoys} decoy keys)" if self.n_decoys else ""))
        dev = ids.device
        return SchemeScores(score.to(dev), z_best.to(dev), pv.to(dev), n.to(dev), how)

    def attribute(self, ids: torch.Tensor, valid: torch.Tensor, n_keys: int, **kw: Any) -> Any:
        """Shared hashes: rank direction indices of the shared key (members are 0..K − 1, so a text's
        top index is the member that wrote it); arguments, result and errors as
        :meth:`GlobalSketchScheme.attribute`. Separate hashes: the first member's directions.

        Raises:
            InputError: as :meth:`GlobalSketchScheme.attribute`.
        """
        return (self.shared or self.members[0]).attribute(ids, valid, n_keys, **kw)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Φ⁻¹(1 − α) on ``score`` (⇔ p ≤ α)."""
        return normal_isf(alpha)

    def describe(self) -> dict[str, Any]:
        """Config plus the members' resolved prior."""
        d = super().describe()
        d["resolved_prior"] = self.prior_desc
        return d
