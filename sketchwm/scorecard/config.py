"""What a scorecard run measures: the scheme, the baselines it is compared with, and the tier's sizes.

Two shipped tiers (:data:`TIERS`): ``quick`` (a CI regression guard: small n, gated only on decisive
lines, compared with a committed run by ``--against``) and ``full`` (the sizes the promises name: ≥ 96
texts per setting at 128 tokens, 12 prompts × 8 seeds, N up to 1,000 stolen texts). The power, robustness and forgery lines run as a benchmark
grid (:meth:`ScorecardConfig.bench_config`, a :class:`sketchwm.bench.config.BenchConfig`) on the report
split of the shipped prompts (``prompts-report``, :mod:`sketchwm.data`); nothing is tuned on it.
"""

from __future__ import annotations

from pydantic import Field

from ..config import DEFAULT_SCHEME, ComponentSpec, StrictModel

__all__ = ["Tier", "ScorecardConfig", "TIERS", "ROBUSTNESS_EDITS", "KL_BUDGETS"]

#: The standard edits of the robustness line: (attack, strength) — 30% synonym substitution, half the words
#: reordered, 30% human text inserted, one round of re-masking and re-sampling with the unwatermarked DLM.
ROBUSTNESS_EDITS: tuple[tuple[str, float], ...] = (
    ("substitute-synonym", 0.3), ("reorder-words", 0.5), ("insert-human", 0.3), ("paraphrase-dlm", 0.3),
)
#: KL/token budgets (nats) of the power line.
KL_BUDGETS: tuple[float, ...] = (0.1, 0.2)


class Tier(StrictModel):
    """Sizes of one scorecard run.

    Attributes:
        name: ``quick``, ``full`` or a custom name (stored in the results).
        decisive_only: gate only on lines whose interval is decisive; the others print INFO.
        length: generated tokens per text; steps: denoising steps (fitted to the regime's blocks).
        regimes: decoding regimes of the diversity line (names of :data:`sketchwm.bench.config.REGIMES`).
        power_regimes: the regimes of the power and robustness lines (a subset of ``regimes``).
        sweep_points: strengths per swept scheme: 0 = its declared grid; k > 0 = the default and the k − 1
            grid settings just below it (weaker: lower KL), or above it where the grid has too few below;
            the KL budgets of the power line lie below most defaults.
        baselines: the comparison set of this tier (None: the config's ``baselines``).
        kl_budgets: KL/token budgets (nats) of the power line (default :data:`KL_BUDGETS`).
        n_power: watermarked texts per setting; n_null_cal / n_null_fpr: unwatermarked texts for the
            conformal 1%-FPR threshold and its check.
        robustness: run the standard edits (:data:`ROBUSTNESS_EDITS`).
        diversity_prompts, diversity_samples: prompts × seeds of the diversity line, for one key.
        steal_n: numbers N of stolen texts; forge_n: forged passages per held-out domain;
            spoof_n: texts of the generation spoofer; unrelated_keys: keys unrelated to the victim's.
        null_keys: keys of the null line; null_texts: human passages per held-out domain (None: all).
        speed_batch, speed_repeats: prompts per timed generation, interleaved repeats.
        speed_tokens: token ids of the detection workload (texts of 256 ids drawn from a Zipf law over V).
        userloop_n: texts of the user-loop line.
    """

    name: str = "custom"
    decisive_only: bool = False
    length: int = Field(128, ge=8)
    steps: int = Field(64, ge=1)
    regimes: list[str] = ["mdlm-random-t1", "llada-blocks-t0.5"]
    power_regimes: list[str] = ["mdlm-random-t1", "llada-blocks-t0.5"]
    sweep_points: int = Field(0, ge=0)
    baselines: list[str] | None = None
    kl_budgets: list[float] = Field(list(KL_BUDGETS), min_length=1)
    n_power: int = Field(96, ge=2)
    n_null_cal: int = Field(99, ge=1)
    n_null_fpr: int = Field(50, ge=1)
    robustness: bool = True
    diversity_prompts: int = Field(12, ge=1)
    diversity_samples: int = Field(8, ge=2)
    steal_n: list[int] = Field([50, 200, 1000], min_length=1)
    forge_n: int = Field(100, ge=1)
    spoof_n: int = Field(50, ge=1)
    unrelated_keys: int = Field(20, ge=0)
    null_keys: int = Field(20, ge=1)
    null_texts: int | None = Field(None, ge=1)
    speed_batch: int = Field(16, ge=1)
    speed_repeats: int = Field(3, ge=1)
    speed_tokens: int = Field(1 << 20, ge=256)
    userloop_n: int = Field(96, ge=1)


#: The shipped tiers.
TIERS: dict[str, Tier] = {
    "quick": Tier(name="quick", decisive_only=True, length=48, steps=12, power_regimes=["mdlm-random-t1"],
                  sweep_points=3, baselines=["red-green-dlm"], n_power=16, n_null_cal=99, n_null_fpr=8,
                  robustness=True, diversity_prompts=4, diversity_samples=4, steal_n=[50], forge_n=24, spoof_n=8,
                  unrelated_keys=10, null_keys=10, null_texts=200, speed_batch=8, speed_repeats=2,
                  speed_tokens=1 << 18, userloop_n=8),
    "full": Tier(name="full", steps=32, sweep_points=3),
}


class ScorecardConfig(StrictModel):
    """A scorecard run: one scheme spec against a comparison set, at one tier.

    Attributes:
        scheme: the scheme under test (default: the shipped default).
        baselines: the comparison set (the power line compares with the best of them that keeps its
            diversity; the robustness line with ``red-green-dlm`` where it is one of them).
        backend: the model (``default``, the stand-in; ``tiny`` is the code-built test model).
        prompts: prompt source of every generation (default the report split).
        human: human-text domains the thieves forge and the null line reads.
        tier: the sizes (:class:`Tier`).
        key_seed: HMAC seed every key of the run derives from (:func:`sketchwm.bench.plan.derive_key`).
        seed: seed of every generator (derived per use); batch_size: generation batch size.
        adaptive_clusters: members the adaptive thief assumes (None: the scheme's ``members``, else 1).
    """

    scheme: ComponentSpec = ComponentSpec(name=DEFAULT_SCHEME)
    baselines: list[ComponentSpec] = [ComponentSpec(name="red-green-dlm"), ComponentSpec(name="unigram"),
                                      ComponentSpec(name="aar-gumbel")]
    backend: ComponentSpec = ComponentSpec(name="default")
    prompts: str = "prompts-report"
    human: list[str] = ["heldout-manpages", "heldout-culture"]
    tier: Tier = TIERS["quick"]
    key_seed: str = "sketchwm-scorecard"
    seed: int = 0
    batch_size: int = Field(16, ge=1)
    adaptive_clusters: int | None = Field(None, ge=1)

    def comparison(self) -> list[ComponentSpec]:
        """The baselines this run compares with: the tier's names where it sets them (params from ``baselines``
        where a baseline of that name is there), else ``baselines``."""
        if self.tier.baselines is None:
            return list(self.baselines)
        given = {b.name: b for b in self.baselines}
        return [given.get(n, ComponentSpec(name=n)) for n in self.tier.baselines]

    def scheme_label(self) -> str:
        """The scheme's label in the results (its name; ``-under-test`` appended if a baseline has the same name)."""
        return self.scheme.name + ("-under-test" if any(b.name == self.scheme.name for b in self.comparison()) else "")
