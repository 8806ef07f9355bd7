"""Built-in cell kinds of ``sketchwm bench``, registered through the ``sketchwm_register_cell_kinds`` hook like any plugin.

===============  ==========  ====================================================================
kind             evidence    what the cell does
===============  ==========  ====================================================================
clean            texts       nothing: the unit's watermarked texts, their quality and the null splits
attack           texts       a registered attack at a strength on the unit's watermarked texts
spoof            texts       a thief of ``train_n`` stolen texts forges: the generation spoofer
                             (``steal-spoof``) writes new texts, a text spoofer edits human passages
scrub            texts       the ``steal-scrub`` stealer edits the unit's watermarked texts
theory-kl        theory      KL chain rule on a recorded sampling path (Theorem 5.1)
theory-fisher    theory      Fisher expansion of the tilt's KL at a scale (Corollary 5.3)
theory-sound     theory      per-key soundness on human text under fresh keys
theory-edit      theory      edit sensitivity bound after k edits (Theorem 5.6)
===============  ==========  ====================================================================
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from ..hookspecs import hookimpl
from ..quality import cross_sample_distinct, sample_repeats
from .cellkind import CellEvidence, CellKind, CellSpec, Scored, UnitScope, cell_data, text_rows
from .inputs import Attacks, CleanQuality, NullSplits, SpoofSetting, Theft, UnitScorer, UnitTexts, UnrelatedKeys
from .metric import CellData
from .plan import ALPHAS
from .theory import chain_rule_summary, edit_ratios, has_penalised_sketch

__all__ = ["BUILTIN_KINDS", "GENERATION_SPOOFER", "sketchwm_register_cell_kinds"]

#: the attack name of the spoof cells whose thief writes its own texts (every other spoofer edits human text)
GENERATION_SPOOFER = "steal-spoof"


def _generator(cell: Any) -> torch.Generator:
    """The cell's own randomness: seeded by its hash."""
    return torch.Generator().manual_seed(int(cell.hash, 16) % 2**62)


def _stealing_cells(scope: UnitScope, per_n: Any) -> list[CellSpec]:
    """``per_n(tn, identity)``'s cells for each ``stealing.train_n`` (none without ``stealing``)."""
    st = scope.cfg.stealing
    if st is None:
        return []
    ident = {"stealing": st.identity()}
    return [spec for tn in st.train_n for spec in per_n(st, tn, ident)]


class Clean(CellKind):
    """The unit's watermarked texts as generated: power, quality, speed; also writes the null splits' rows."""

    name, order, needs = "clean", 0, ("texts", "nulls", "scorer", "quality")

    def plan(self, scope: UnitScope) -> list[CellSpec]:
        return [CellSpec("none", 0.0, {}, scope.prompt_set.n)]

    def run(self, cell: Any, texts: UnitTexts, nulls: NullSplits, scorer: UnitScorer,
            quality: CleanQuality) -> CellEvidence:
        base, kw = texts.scored, {}
        kw["tokens_to_detect"] = scorer.tokens_to_detect(base.ids)
        kw["ppl"], kw["null_ppl"] = quality.ppl, quality.null_ppl
        if quality.diversity is not None:
            kw["diversity"] = np.array([cross_sample_distinct(d, 2) for d in quality.diversity])
            kw["null_diversity"] = np.array([cross_sample_distinct(d, 2) for d in quality.null_diversity])
            # (m, 2) per prompt: distinct texts, first-token match (written beside each diversity row)
            kw["extra"] = {"diversity": np.array([sample_repeats(d) for d in quality.diversity]),
                           "null_diversity": np.array([sample_repeats(d) for d in quality.null_diversity])}
        kw["gen_tokens_per_s"] = float(len(texts.texts) * cell.unit.length / max(texts.gen_seconds, 1e-9))
        kw["detect_tokens_per_s"] = float(base.n_tokens.sum()) / max(base.seconds, 1e-9)
        data = cell_data(cell, base, nulls, kl=texts.kl, **kw)
        rows = text_rows("null_cal", nulls.cal, {}) + text_rows("null_fpr", nulls.fpr, {"ppl": data.null_ppl})
        for row_type, values in (("diversity", data.diversity), ("null_diversity", data.null_diversity)):
            repeats = data.extra.get(row_type)  # (m, 2) or None
            for i, v in enumerate(values if values is not None else []):
                rows.append({"row_type": row_type, "text_index": i, "diversity": float(v),
                             **({"distinct_texts": float(repeats[i, 0]), "first_token_match": float(repeats[i, 1])}
                                if repeats is not None else {})})
        columns = {"tokens_to_detect": kw["tokens_to_detect"], "ppl": kw["ppl"], "kl": texts.kl_per_text,
                   "kl_sampled": texts.kl_sampled_per_text}
        return CellEvidence(data, base, columns, rows)


class Attack(CellKind):
    """A registered attack (config ``attacks``) at one of its strengths on the first n watermarked texts."""

    name, order, needs = "attack", 10, ("texts", "nulls", "scorer", "attacks")

    def plan(self, scope: UnitScope) -> list[CellSpec]:
        n = scope.prompt_set.n
        return [CellSpec(a.name, st, a.params, min(n, a.n or n),
                         hashed_params=scope.attack_params[a.name, json.dumps(a.params, sort_keys=True)])
                for a in scope.cfg.attacks for st in a.strengths]

    def run(self, cell: Any, texts: UnitTexts, nulls: NullSplits, scorer: UnitScorer, attacks: Attacks) -> CellEvidence:
        return _edited(cell, texts, nulls, scorer, attacks.build(cell.attack, cell.attack_params))


class Scrub(CellKind):
    """The ``steal-scrub`` stealer of ``train_n`` stolen texts edits the watermarked texts to remove the mark."""

    name, order, needs = "scrub", 30, ("texts", "nulls", "scorer", "attacks", "theft")

    def plan(self, scope: UnitScope) -> list[CellSpec]:
        n = scope.prompt_set.n
        return _stealing_cells(scope, lambda st, tn, ident: [
            CellSpec("steal-scrub", s, {}, min(n, st.scrub_n or n), tn, ident) for s in st.scrub_strengths])

    def run(self, cell: Any, texts: UnitTexts, nulls: NullSplits, scorer: UnitScorer, attacks: Attacks,
            theft: Theft) -> CellEvidence:
        atk = attacks.build("steal-scrub", cell.attack_params, stealer=theft.stealer(cell.train_n))
        base = texts.scored
        return _edited(cell, texts, nulls, scorer, atk, reference_scores=base.scores[: cell.n],
                       reference_tokens=base.n_tokens[: cell.n],
                       reference_analytic={a: v[: cell.n] for a, v in base.analytic.items()})


def _edited(cell: Any, texts: UnitTexts, nulls: NullSplits, scorer: UnitScorer, atk: Any, **fields: Any) -> CellEvidence:
    """``atk`` applied to the first ``cell.n`` watermarked texts at the cell's strength, scored."""
    out = atk.apply(texts.texts[: cell.n], cell.strength, _generator(cell), prompts=texts.prompts[: cell.n])
    sc = scorer.score(out.texts)
    similarity = np.array(out.similarity, dtype=np.float64)
    return CellEvidence(cell_data(cell, sc, nulls, similarity=similarity, **fields), sc,
                        {"similarity": similarity, "edit_fraction": np.array(out.edit_fraction, dtype=np.float64)})


class Spoof(CellKind):
    """A thief of ``train_n`` stolen texts forges the watermark: the generation spoofer writes texts for
    prompts the watermark never saw, each text spoofer (``stealing.text_attacks``) edits human passages."""

    name, order = "spoof", 20
    needs = ("nulls", "scorer", "attacks", "theft", "human", "unrelated", "spoofing")

    def plan(self, scope: UnitScope) -> list[CellSpec]:
        cfg = scope.cfg

        def per_n(st: Any, tn: int, ident: dict) -> list[CellSpec]:
            out = []
            if st.generation:  # on null_fpr prompts
                out.append(CellSpec(GENERATION_SPOOFER, st.delta, {"delta": st.delta}, min(cfg.n_null_fpr, st.spoof_n),
                                    tn, ident))
            for ta in st.text_attacks:  # forged human passages
                name, params = (ta, {}) if isinstance(ta, str) else (ta.name, ta.params)
                out.append(CellSpec(name, st.budget, params, st.human_n * len(st.human), tn, ident))
            return out
        return _stealing_cells(scope, per_n)

    def run(self, cell: Any, nulls: NullSplits, scorer: UnitScorer, attacks: Attacks, theft: Theft,
            human: tuple[str, ...], unrelated: UnrelatedKeys, spoofing: SpoofSetting) -> CellEvidence:
        gen, columns = _generator(cell), {}
        if cell.attack == GENERATION_SPOOFER:
            out = theft.stealer(cell.train_n).spoof(spoofing.backend, spoofing.prompts[: cell.n], gen,
                                                    delta=cell.strength, sampler_config=spoofing.sampler_config)
        else:
            train, ref = theft.texts(cell.train_n)
            atk = attacks.build(cell.attack, cell.attack_params, watermarked_texts=train, reference_texts=ref)
            out = atk.apply(list(human[: cell.n]), cell.strength, gen)
            columns["edit_fraction"] = np.array(out.edit_fraction, dtype=np.float64)
        sc = scorer.score(out.texts)
        if unrelated.count:
            columns["unrelated_flagged"] = unrelated.rate(sc.ids)
        return CellEvidence(cell_data(cell, sc, nulls), sc, columns)


# ---------------------------------------------------------------------------------------------- theory
class _Theory(CellKind):
    """Base of the theory checks (:mod:`sketchwm.bench.theory`): on the first regime, key 0 and the scheme's
    default strength only, for the schemes ``theory.schemes`` names (every scheme when it names none)."""

    evidence = "theory"

    def plan(self, scope: UnitScope) -> list[CellSpec]:
        th = scope.cfg.theory
        if (th is None or scope.key != 0 or scope.regime != 0 or not scope.at_default
                or not (th.schemes is None or scope.label in th.schemes or scope.scheme_name in th.schemes)):
            return []
        ident = {"theory": th.model_dump(mode="json"), "theory_metrics": list(scope.theory_metrics)}
        return [CellSpec("none", strength, {}, n, 0, ident) for strength, n in self.cells(th)]

    def cells(self, th: Any) -> list[tuple[float, int]]:
        """(strength, n) of each cell of the check under the config's ``theory`` spec ``th``."""
        raise NotImplementedError

    @staticmethod
    def evidence_of(cell: Any, extra: dict[str, Any], note: str) -> CellEvidence:
        """A theory cell's evidence: no texts, ``extra`` and ``note`` in ``CellData.extra``."""
        sc = Scored.empty(ALPHAS)
        e = sc.scores
        return CellEvidence(CellData(kind=cell.kind, attack=cell.attack, strength=cell.strength, scores=e, p_values=e,
                                     n_tokens=sc.n_tokens, analytic=sc.analytic, null_cal=e, null_fpr=e,
                                     null_fpr_analytic=sc.analytic, extra={**extra, "note": note}), sc)


class TheoryKL(_Theory):
    """KL chain rule (Theorem 5.1): chain-rule KL against the path log-likelihood ratio of the same texts."""

    name, order, needs = "theory-kl", 40, ("path",)

    def cells(self, th: Any) -> list[tuple[float, int]]:
        return [(0.0, th.n_texts)]

    def run(self, cell: Any, path: dict[str, Any]) -> CellEvidence:
        if "kl_sum" not in path:
            return self.evidence_of(cell, {}, path["note"])
        return self.evidence_of(cell, {"chain": chain_rule_summary(path["kl_sum"], path["log_ratio"])}, path["note"])


class TheoryFisher(_Theory):
    """Fisher expansion (Corollary 5.3, eq. 16): KL of the tilt scaled by the cell's strength against ½s²Var."""

    name, order, needs = "theory-fisher", 41, ("path",)

    def cells(self, th: Any) -> list[tuple[float, int]]:
        return [(s, th.n_texts) for s in th.fisher_scales]

    def run(self, cell: Any, path: dict[str, Any]) -> CellEvidence:
        if "kl_sum" not in path:
            return self.evidence_of(cell, {}, path["note"])
        i = path["scales"].index(cell.strength)
        return self.evidence_of(cell, {"fisher": (float(path["fisher_kl"][i]), float(path["fisher_half_var"][i]))},
                                path["note"])


class TheorySound(_Theory):
    """Per-key soundness: false-positive rates on human text under ``n_keys`` fresh keys."""

    name, order, needs = "theory-sound", 42, ("soundness",)

    def cells(self, th: Any) -> list[tuple[float, int]]:
        return [(0.0, th.n_human)] if th.n_keys else []

    def run(self, cell: Any, soundness: np.ndarray) -> CellEvidence:
        from .theory import soundness_summary

        return self.evidence_of(cell, {"sound": {a: soundness_summary(soundness, a) for a in (0.01, 0.05)}}, "")


class TheoryEdit(_Theory):
    """Edit sensitivity (Lemma 5.5, Theorem 5.6): observed score change after k edits against the bound."""

    name, order, needs = "theory-edit", 43, ("scheme", "path", "vocab")

    def cells(self, th: Any) -> list[tuple[float, int]]:
        return [(float(k), min(th.n_texts, th.n_edit)) for k in th.edit_counts]

    def run(self, cell: Any, scheme: Any, path: dict[str, Any], vocab: np.ndarray) -> CellEvidence:
        no_bound = "no sketch with a penalised score: Theorem 5.6 does not apply"
        if not has_penalised_sketch(scheme):
            return self.evidence_of(cell, {}, no_bound)
        if "ids" not in path:
            return self.evidence_of(cell, {}, path["note"])
        ids = [x for x in path["ids"][: cell.n] if len(x)]
        r = edit_ratios(scheme, ids, int(cell.strength), vocab, int(cell.hash, 16) % 2**32)
        return self.evidence_of(cell, {}, no_bound) if r is None else self.evidence_of(cell, {"edit": r}, "")


BUILTIN_KINDS: tuple[type[CellKind], ...] = (Clean, Attack, Spoof, Scrub, TheoryKL, TheoryFisher, TheorySound, TheoryEdit)


@hookimpl
def sketchwm_register_cell_kinds() -> list[type]:
    """The built-in cell kinds (see module table)."""
    return list(BUILTIN_KINDS)
