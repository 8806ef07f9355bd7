"""``keyed-family``: any registered scheme embedded under one of K member keys per text, every channel of it.

Why. Every channel of a scheme under one fixed key is, to a thief, a fixed preference that counting
reveals: a per-token bias for the global sketch, a per-(context, token) bias for a context-keyed green
list or keyed sampling (watermark stealing, Jovanović et al. 2024). ``global-sketch-family``
(:mod:`.key_family`) answers that for the sketch alone; this wrapper applies the same structure to a
whole scheme, so every channel the inner scheme keys from its key is drawn per text.

Embedding. The key k derives K member keys k_i = ``key.subkey("keyed-family/member=i")`` (HMAC-SHA256,
domain-separated, :meth:`sketchwm.keys.WatermarkKey.subkey`); member i is the inner scheme
(``inner: {name, params}``, any registered scheme) built under k_i exactly as the registry builds it,
so each of its channels derives its own subkeys from k_i. Each text of a batch is embedded, unchanged,
under one member m drawn per text (randomised key selection, Aremu et al. 2025, arXiv 2507.07871):
m = PRF(k_sel, r ‖ h) mod K, with r 62 bits drawn from the sampler's generator (one draw per text, at
the first step), h a keyed hash of the text's prompt and k_sel = ``key.seed("keyed-family/select")``.
The member is a deterministic function of the generator's state and the prompt, and of the key, so a
fixed seed reproduces a text, and a seed known to others (a default seed) does not tell them the member
index. Each member processes only its texts' rows (its ``begin``, ``process_logits``, keyed
``sampling_uniforms`` and ``order_priority`` on a (B_m, ...) slice of the step), so the cost of a batch
is the inner scheme's once, not K times. A thief who counts over many texts estimates the mixture of
the K members' preferences, not any one member's.

Detection, two tests over the members' p-values (:func:`.key_family.family_pvalues`).

1. *Family test*: p_i is member i's own p-value (the inner scheme's ``score_ids`` under k_i, valid per
   key if the inner's is); p_fam = min(1, K·min_i p_i) (Bonferroni, Dunn 1961; or Šidák), so
   P(p_fam ≤ α) ≤ α on text written without the key, for the one key held, whatever the dependence
   between members and whatever the inner scheme combines.
2. *Spread test* (the evidence belongs to one member; Gloaguen et al. 2025 test learned spoofs the
   same way): a forger who mixes the members raises every member about equally, a genuine text one.
   The test of :mod:`.key_family` (``student`` with M decoy keys k'_j = ``key.subkey("keyed-family/decoy=j")``,
   never embedded, or ``normal``) is run on a per-member z: ``spread_z: probit`` (default) reads
   z_i = max(Φ⁻¹(1 − p_i), ``z_floor``), which is N(0, 1) below the floor's clip for an exact p-value
   and is defined for any inner scheme (a combined p-value's ``z`` field names one channel and is not
   comparable across members; a Bonferroni bound's point mass at p = 1 is clipped with the rest);
   ``spread_z: inner`` reads the inner scheme's own ``z`` (the global sketch's, as ``global-sketch-family``).

The reported p-value is max(p_fam, p_spread): never below p_fam, so the per-key promise of test 1
holds unchanged whatever the spread test reads; a text is flagged at α only if both reject. What it
does not stop: a thief who tells the members' texts apart (clustering stolen texts by what they
share) and forges one member; the larger K, the fewer texts per member.

``score`` is Φ⁻¹(1 − p) (so ``score ≥ Φ⁻¹(1 − α)`` ⇔ ``p ≤ α``), ``z`` the best member's spread z.
:attr:`SchemeScores.channels` holds ``family``: (p_fam, Φ⁻¹(1 − p_fam)) and, with the spread test,
``spread``: (max(p_fam, p_spread), the spread contrast t_b or d_b).
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sketchwm.components import DenoiseStep, Marginals, SchemeScores, Strength, WatermarkScheme
from sketchwm.config import ComponentSpec, StrictModel
from sketchwm.context import BuildContext
from sketchwm.prf import keyed_bits
from sketchwm.stats import normal_isf

from .key_family import family_pvalues

__all__ = ["KeyedFamilyParams", "KeyedFamilyScheme", "MEMBER_DOMAIN", "DECOY_DOMAIN", "SELECT_DOMAIN"]

#: domain of member i's key: ``key.subkey(MEMBER_DOMAIN.format(i=i))``
MEMBER_DOMAIN = "keyed-family/member={i}"
#: domain of decoy j's key (detection only): ``key.subkey(DECOY_DOMAIN.format(j=j))``
DECOY_DOMAIN = "keyed-family/decoy={j}"
#: domain of the member-selection seed: ``key.seed(SELECT_DOMAIN)``
SELECT_DOMAIN = "keyed-family/select"

_MASK32 = 0xFFFFFFFF


class KeyedFamilyParams(StrictModel):
    """Parameters of the keyed family.

    Attributes:
        inner: the scheme every member runs, ``{name, params}`` (any registered scheme but this one);
            default ``global-sketch-green`` with ``sampling: free`` and a single-key sketch (``family:
            {members: 1}``: this wrapper is the family, of every channel).
        members: K, member keys (1: the inner scheme under one derived key, no spread test).
        correction: ``bonferroni`` (min(1, K·p)) or ``sidak`` (1 − (1 − p)^K) over the members.
        spread_test: also require the evidence to favour one member (module doc, test 2).
        spread: ``student`` (members' z i.i.d. with unknown spread, decoys pooled) or ``normal``.
        decoys: M, detection-only keys whose z measure the spread for ``student``.
        spread_z: the per-member z the spread test reads: ``probit`` (Φ⁻¹(1 − p_i), clipped below at
            ``z_floor``) or ``inner`` (the inner scheme's ``z``).
        z_floor: the clip of ``probit`` z (p-values above Φ(−z_floor) read alike).
    """

    inner: ComponentSpec = ComponentSpec(name="global-sketch-green", params={"sampling": "free", "family": {"members": 1}})
    members: int = Field(16, ge=1, le=1024)
    correction: Literal["bonferroni", "sidak"] = "bonferroni"
    spread_test: bool = True
    spread: Literal["student", "normal"] = "student"
    decoys: int = Field(16, ge=0, le=1024)
    spread_z: Literal["probit", "inner"] = "probit"
    z_floor: float = Field(0.0, ge=-8.0, le=8.0)

    @model_validator(mode="after")
    def _check(self) -> "KeyedFamilyParams":
        if self.inner.name == "keyed-family":
            raise ValueError("inner must be another scheme, not keyed-family itself")
        if self.spread_test and self.members < 2:
            raise ValueError("spread_test needs members >= 2; set spread_test=false for a single member")
        if self.spread_test and self.spread == "student" and (self.members - 2) + (self.decoys - 1 if self.decoys >= 2 else 0) < 1:
            raise ValueError("spread='student' needs members >= 3 or decoys >= 2 (degrees of freedom for the spread)")
        return self


class KeyedFamilyScheme(WatermarkScheme):
    """An inner scheme under one of K member keys per text, detected by family and spread tests (module doc).

    Args:
        params: :class:`KeyedFamilyParams`.
        key: the :class:`sketchwm.keys.WatermarkKey`; member and decoy keys derive from it.
        vocab_size: V.
        device: where tables live.
        registry: builds the inner schemes (default: the installed registry).
        tokenizer_fingerprint: passed to the inner schemes' build context.
        **resources: passed to the inner schemes' build context as resources.

    Attributes:
        members: the K inner schemes, member i under ``key.subkey("keyed-family/member=i")``.
        decoys: the M decoy inner schemes (detection only; empty unless the studentised spread test is on).
        drawn: (B,) int64, the member each text of the last batch was embedded under (None before its
            first step); a benchmark's ground truth, never needed for detection.
        noise, reads, noise_required: the inner scheme's.

    Raises:
        ConfigError: bad params, an unknown inner scheme, or bad inner params.
        RegistryError: an unknown inner scheme name.
    """

    name = "keyed-family"
    Params = KeyedFamilyParams
    strength = Strength.none("a family of its inner scheme: set the inner scheme's strength in inner.params")

    def __init__(self, params: Any, key: Any, vocab_size: int, device="cpu", registry: Any = None,
                 tokenizer_fingerprint: str | None = None, **resources: Any):
        super().__init__(params, key, vocab_size, device)
        if registry is None:
            from sketchwm.registry import get_registry

            registry = get_registry()
        p = self.params
        ctx = BuildContext(registry=registry, vocab_size=vocab_size, device=device,
                           tokenizer_fingerprint=tokenizer_fingerprint, resources=resources)

        def build(k: Any) -> WatermarkScheme:
            return registry.build("scheme", p.inner.name, p.inner.params, ctx.replace(key=k))

        self.members = [build(key.subkey(MEMBER_DOMAIN.format(i=i))) for i in range(p.members)]
        n_decoys = p.decoys if p.spread_test and p.spread == "student" else 0
        self.decoys = [build(key.subkey(DECOY_DOMAIN.format(j=j))) for j in range(n_decoys)]
        first = self.members[0]
        self.noise = first.noise
        self.noise_required = getattr(first, "noise_required", True)
        self.min_tokens = first.min_tokens
        self._select_seed = key.seed(SELECT_DOMAIN)
        self.drawn: torch.Tensor | None = None
        self._begin: tuple[int, torch.Tensor, torch.Tensor] | None = None
        self._groups: list[tuple[int, torch.Tensor]] = []
        self._sub: dict[int, DenoiseStep] = {}  # member → its slice of the current step
        self._sub_of: DenoiseStep | None = None

    @classmethod
    def from_context(cls, params: Any, context: BuildContext) -> "KeyedFamilyScheme":
        """As :meth:`WatermarkScheme.from_context`; the inner schemes are built through the context's
        ``registry`` with its ``tokenizer_fingerprint`` and ``resources``."""
        key, V = cls._key_and_vocab(context)
        return cls(params, key, V, device=context.device, registry=context.registry,
                   tokenizer_fingerprint=context.tokenizer_fingerprint, **dict(context.resources))

    @property
    def reads(self):  # type: ignore[override]
        """The inner scheme's :class:`MarginalReads` (each member reads the rows of its own texts)."""
        return self.members[0].reads

    # ------------------------------------------------------------------ embedding
    def set_stop_token(self, token_id: int | None) -> None:
        """As :meth:`WatermarkScheme.set_stop_token`, for every member."""
        super().set_stop_token(token_id)
        for m in self.members:
            m.set_stop_token(token_id)

    def begin(self, batch_size: int, gen_length: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Forget the last batch's members; they are drawn at the first step (from its generator)."""
        self._begin = (gen_length, prompt_ids, prompt_mask)
        self.drawn, self._groups, self._sub, self._sub_of = None, [], {}, None

    def draw_members(self, generator: torch.Generator | None, prompt_ids: torch.Tensor,
                     prompt_mask: torch.Tensor) -> torch.Tensor:
        """The member of each text: (B,) int64 in [0, K) (module doc, embedding).

        Args:
            generator: the sampler's generator (one ``randint`` of B values is drawn from it), or None
                for fresh randomness from the operating system.
            prompt_ids: (B, P) int64 left-padded prompts; prompt_mask: (B, P) bool.
        """
        B = prompt_ids.shape[0]
        if generator is None:
            generator = torch.Generator().manual_seed(secrets.randbits(62))
        dev = generator.device if isinstance(generator, torch.Generator) else torch.device("cpu")
        r = torch.randint(0, 2**62, (B,), generator=generator, device=dev, dtype=torch.int64).cpu()  # (B,)
        ids, mask = prompt_ids.cpu().long(), prompt_mask.cpu().bool()
        P = ids.shape[1]
        from_right = (P - 1 - torch.arange(P, dtype=torch.int64))[None, :] % 4096  # (1, P): batch-independent
        h = torch.where(mask, keyed_bits(self._select_seed, ids * 4096 + from_right, stream=1),
                        torch.zeros_like(ids)).sum(1) & _MASK32  # (B,) keyed prompt hash
        x = keyed_bits(self._select_seed, r, stream=0)  # (B,) 32 bits of the generator's draw
        return keyed_bits(self._select_seed, (x << 31) ^ h, stream=2) % self.params.members  # (B,)

    def _draw(self, step: DenoiseStep) -> None:
        """Draw each text's member and start each member drawn on its texts."""
        B = step.tokens.shape[0]
        gen_length, prompt_ids, prompt_mask = self._begin or (step.tokens.shape[1], step.prompt_ids, step.prompt_mask)
        self.drawn = self.draw_members(step.generator, prompt_ids, prompt_mask).to(step.tokens.device)  # (B,)
        self._groups = []
        for m in torch.unique(self.drawn).tolist():
            idx = (self.drawn == m).nonzero(as_tuple=True)[0]  # (B_m,)
            self.members[m].begin(int(idx.numel()), gen_length, prompt_ids[idx], prompt_mask[idx])
            self._groups.append((m, idx))

    def _substep(self, step: DenoiseStep, m: int, idx: torch.Tensor) -> DenoiseStep:
        """Member m's slice of ``step`` (its texts' rows; copies), built once per step and reused by the
        hooks that follow ``process_logits`` on the same step."""
        if self._sub_of is not step:
            self._sub, self._sub_of = {}, step
        if m not in self._sub:
            mg = step.marginals
            sub = Marginals(mg.logits[idx], mg.positions[idx], mg.valid[idx], mg.targets[idx], mg.target_valid[idx],
                            None, mg.complete, mg.incremental_follows)
            self._sub[m] = DenoiseStep(step.step, step.total_steps, step.tokens[idx], step.masked[idx], sub,
                                       step.prompt_ids[idx], step.prompt_mask[idx], step.block, step.mask_token_id,
                                       step.generator, step.temperature)
        return self._sub[m]

    def process_logits(self, step: DenoiseStep) -> torch.Tensor:
        """Each text's target logits tilted by its own member: (B, K, V) float32."""
        if self.drawn is None or self.drawn.shape[0] != step.tokens.shape[0]:
            self._draw(step)
        if len(self._groups) == 1:  # one member for the whole batch: its hook on the step itself
            return self.members[self._groups[0][0]].process_logits(step)
        tilted = [(idx, self.members[m].process_logits(self._substep(step, m, idx))) for m, idx in self._groups]
        out = step.marginals.target_logits()  # (B, K, V)
        for idx, t in tilted:
            out[idx] = t.to(out.dtype)
        return out

    def sampling_uniforms(self, step: DenoiseStep) -> torch.Tensor | None:
        """Each text's member's keyed uniforms (B, K, V) float32, or None when the inner scheme draws
        none; a member that returns None for its texts gets uniforms from ``step.generator``. Called
        after :meth:`process_logits` on the same step."""
        if len(self._groups) == 1:
            return self.members[self._groups[0][0]].sampling_uniforms(step)
        parts = [(idx, self.members[m].sampling_uniforms(self._substep(step, m, idx))) for m, idx in self._groups]
        if all(u is None for _, u in parts):
            return None
        mg = step.marginals
        out = torch.empty((mg.targets.shape[0], mg.targets.shape[1], mg.logits.shape[-1]), dtype=torch.float32,
                          device=mg.logits.device)
        for idx, u in parts:
            out[idx] = u if u is not None else torch.rand((int(idx.numel()),) + tuple(out.shape[1:]),
                                                          generator=step.generator, device=out.device)
        return out

    def steers_order(self, temperature: float) -> bool:
        """The inner scheme's order rule (every member's is the same)."""
        return self.members[0].steers_order(temperature)

    def order_priority(self, step: DenoiseStep, x0: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """Each text's member's priority of its targets: (B, K) float32."""
        if len(self._groups) == 1:
            return self.members[self._groups[0][0]].order_priority(step, x0, confidence)
        out = torch.empty(x0.shape, dtype=torch.float32, device=x0.device)
        for m, idx in self._groups:
            out[idx] = self.members[m].order_priority(self._substep(step, m, idx), x0[idx], confidence[idx]).float()
        return out

    # ------------------------------------------------------------------ detection
    def _spread_z(self, scores: list[SchemeScores]) -> torch.Tensor:
        """(J, B) float64 per-scheme z the spread test reads (``spread_z``, module doc)."""
        if self.params.spread_z == "inner":
            return torch.stack([s.z.double().cpu() for s in scores])
        from scipy.special import ndtri

        p = np.stack([s.p_value.double().cpu().numpy() for s in scores])  # (J, B)
        z = -ndtri(np.clip(p, 1e-300, 1.0))  # Φ⁻¹(1 − p); −inf at p = 1, clipped below
        return torch.from_numpy(np.maximum(z, self.params.z_floor))

    def member_scores(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
        """Every member's p-value and spread z: ids (B, N) int64, valid (B, N) bool → p (K, B) float64,
        z (K, B) float64, n_scored (B,) int64 (member 0's), and the members' p-value method.

        Raises:
            InputError: ids outside [0, V) (as the inner scheme raises it).
        """
        outs = [m.score_ids(ids, valid) for m in self.members]
        return (torch.stack([o.p_value.double().cpu() for o in outs]), self._spread_z(outs), outs[0].n_scored.cpu(),
                outs[0].p_value_method)

    def score_ids(self, ids: torch.Tensor, valid: torch.Tensor) -> SchemeScores:
        """Family detection (module doc): p-value max(p_fam, p_spread) (B,) float64, score Φ⁻¹(1 − p),
        z the best member's spread z.

        Raises:
            InputError: wrong shapes or ids outside [0, V).
        """
        ids, valid = self.check_ids(ids, valid)
        p, z, n, method = self.member_scores(ids, valid)
        z_decoy = self._spread_z([d.score_ids(ids, valid) for d in self.decoys]) if self.decoys else None  # (M, B)
        q = self.params
        pv, best, d = family_pvalues(p, z, q.correction, q.spread_test, q.spread, z_decoy)
        p_fam = family_pvalues(p, z, q.correction, False, q.spread, z_decoy)[0] if q.spread_test else pv
        from scipy.special import ndtri

        def probit(x: torch.Tensor) -> torch.Tensor:  # Φ⁻¹(1 − x), finite at x = 1
            return torch.from_numpy(-ndtri(np.clip(x.numpy(), 1e-300, np.nextafter(1.0, 0.0))))

        how = (f"{q.correction} over {q.members} member keys of {q.inner.name} [{method}]"
               + (f" and the {q.spread} spread test on {q.spread_z} z" if q.spread_test else "")
               + (f" ({len(self.decoys)} decoy keys)" if self.decoys else ""))
        channels = {"family": (p_fam, probit(p_fam))}
        if q.spread_test:
            channels["spread"] = (pv, d)
        return SchemeScores(probit(pv), z.gather(0, best[None])[0], pv, n, how, channels)

    def analytic_threshold(self, alpha: float, n_tokens: int) -> float:
        """Φ⁻¹(1 − α) on ``score`` (⇔ p ≤ α)."""
        return normal_isf(alpha)

    def describe(self) -> dict[str, Any]:
        """Config plus the inner scheme's own description (no secrets)."""
        d = super().describe()
        d["inner_resolved"] = self.members[0].describe()
        return d
