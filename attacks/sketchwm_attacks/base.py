"""Shared machinery of the attack plugins: the :class:`TextAttack` base, word helpers, composition.

Every attack here follows one contract (see :class:`sketchwm.components.Attack`):

* ``strength`` in [0, 1] has a documented, attack-specific meaning (mostly "fraction of words
  edited"); values outside [0, 1] raise :class:`sketchwm.errors.ConfigError`;
* randomness comes only from the ``torch.Generator`` passed to :meth:`TextAttack.apply`;
* the output carries, per text, the edit fraction the attack actually applied, the token-level
  Levenshtein distance to the input and the semantic similarity to the input
  (:mod:`sketchwm_attacks.metrics`).

A *word* is a whitespace-separated token (so "," in the default model's detokenised output
"the man , said" is a word). Word-level attacks rejoin words with single spaces, so runs of
whitespace and newlines in an edited text are normalised to one space.
"""

from __future__ import annotations

import math
import re
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import torch
from pydantic import Field

from sketchwm.components import Attack, AttackOutput, DLMBackend
from sketchwm.config import StrictModel
from sketchwm.errors import ConfigError, InputError

from . import metrics

__all__ = [
    # the attack base classes and composition
    "AttackParams", "TextAttack", "EditResult", "Pipeline", "compose",
    # word and sentence helpers, word lists
    "split_affixes", "match_case", "n_edits", "sample_positions", "split_sentences", "COMMON_WORDS", "STOPWORDS",
]

_AFFIX = re.compile(r"^(\W*)(.*?)(\W*)$", re.UNICODE | re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

#: Replacement / insertion vocabulary of the random-word attacks: 200 frequent English words
#: (function words, common nouns, verbs, adjectives), lower-case. Built in so that the attacks are
#: offline and deterministic; pass ``vocabulary=[...]`` as a resource to use another list.
COMMON_WORDS: tuple[str, ...] = tuple(
    """
    time year people way day man thing woman life child world school state family student group
    country problem hand part place case week company system program question work government
    number night point home water room mother area money story fact month lot right study book
    eye job word business issue side kind head house service friend father power hour game line
    end member law car city community name president team minute idea kid body information back
    parent face others level office door health person art war history party result change morning
    reason research girl guy moment air teacher force education be have do say get make go know
    take see come think look want give use find tell ask seem feel try leave call good new first
    last long great little own other old big high different small large next early young important
    few public bad same able the of and to a in for is on that by this with you it not or are at
    from his but they we an was all can her has there been if more when will would who so no
    also very often however too usually really early never always sometimes together likely simply
    quickly
    """.split()
)

#: Words the synonym and contextual substitutions never replace (function words): WordNet gives
#: nonsense "synonyms" for them ("a" → "angstrom"), and a masked LM's alternatives are ungrammatical.
STOPWORDS: frozenset[str] = frozenset(
    """
    a an the and or but if then else when while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further once here
    there where why how all any both each few more most other some such no nor not only own same so
    than too very s t can will just don should now i me my myself we our ours ourselves you your yours
    yourself yourselves he him his himself she her hers herself it its itself they them their theirs
    themselves what which who whom this that these those am is are was were be been being have has had
    having do does did doing would could might must shall may thou thee thy hath doth shalt
    """.split()
)


class AttackParams(StrictModel):
    """Parameters every attack in this package accepts.

    Attributes:
        similarity: compute the semantic similarity of each output to its input
            (sentence-transformers, :func:`sketchwm_attacks.metrics.semantic_similarity`); False
            fills NaN and skips loading the embedding model.
    """

    similarity: bool = True


@dataclass
class EditResult:
    """What an attack's :meth:`TextAttack._edit` returns.

    Attributes:
        texts: the edited texts, in input order.
        edit_fraction: per text, the fraction of units edited (see the attack's doc), >= 0.
        meta: JSON-serialisable extra metadata for the whole batch.
    """

    texts: list[str]
    edit_fraction: list[float]
    meta: dict[str, Any]


def n_edits(strength: float, n: int) -> int:
    """Number of units to edit: ``round(strength * n)`` (half away from zero), in [0, n]."""
    return max(0, min(n, int(math.floor(strength * n + 0.5))))


def sample_positions(n: int, k: int, generator: torch.Generator) -> list[int]:
    """k distinct positions of range(n), uniformly at random, in increasing order."""
    if k <= 0 or n <= 0:
        return []
    return sorted(torch.randperm(n, generator=generator)[:k].tolist())


def split_affixes(word: str) -> tuple[str, str, str]:
    """``"(Happy),"`` → ``("(", "Happy", "),")``: leading punctuation, core, trailing punctuation."""
    m = _AFFIX.match(word)
    return (m.group(1), m.group(2), m.group(3)) if m else ("", word, "")


def match_case(template: str, word: str) -> str:
    """Give ``word`` the capitalisation pattern of ``template`` (UPPER, Title or lower)."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def split_sentences(text: str) -> list[str]:
    """Split on whitespace following ``.``, ``!`` or ``?``; a text without such marks is one sentence.

    A regular expression, not nltk's Punkt tokenizer: Punkt's trained English parameters
    (``punkt_tab``) are downloaded data, absent offline (no PyPI or Debian package here ships them),
    and untrained Punkt knows no abbreviations either. The attacks need a deterministic split that
    keeps every word, which this is.
    """
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def _check_strength(strength: float) -> float:
    try:
        s = float(strength)
    except (TypeError, ValueError):
        raise ConfigError(f"attack strength must be a number in [0, 1], got {strength!r}") from None
    if not (0.0 <= s <= 1.0) or math.isnan(s):
        raise ConfigError(f"attack strength must be in [0, 1], got {strength}")
    return s


def _check_batch(texts: Sequence[str], strength: float) -> tuple[list[str], float]:
    """``(list(texts), strength as float)``; ConfigError: strength outside [0, 1]; InputError: a single string."""
    s = _check_strength(strength)
    if isinstance(texts, str):
        raise InputError("attack input must be a list of texts, not a single string")
    return list(texts), s


class TextAttack(Attack):
    """Base of this package's attacks: validation, empty batches, metrics.

    Subclasses implement :meth:`_edit`. Resources (keyword arguments of the constructor) understood
    by the attacks of this package:

    * ``backend``: a :class:`sketchwm.components.DLMBackend`; needed by the model-based attacks
      (contextual substitution, DLM paraphrase, stealing) and used for the token-level Levenshtein
      distance. When absent, model-based attacks build the registry's ``default`` backend.
    * ``tokenizer``: a tokenizer for the Levenshtein distance when no backend is given (else words).
    * ``vocabulary``: list of replacement/insertion words (random-word attacks).
    * ``human_texts``: list of human passages (copy-paste insertion).

    Args:
        params: dict or ``Params`` instance (validated; unknown fields raise ConfigError).
        **resources: see above.
    """

    Params: ClassVar[type[StrictModel]] = AttackParams
    #: True if the attack needs a DLM backend (built from the registry's default if not given).
    needs_backend: ClassVar[bool] = False

    # ------------------------------------------------------------------ resources
    def _resource(self, name: str, build: Callable[[], Any]) -> Any:
        """The constructor's resource ``name`` if given (not None), else ``build()``, called once and kept."""
        if self.resources.get(name) is not None:
            return self.resources[name]
        built = self.__dict__.setdefault("_built_resources", {})
        if name not in built:
            built[name] = build()
        return built[name]

    def _stolen_ids(self, default_reference: Callable[[], Sequence[str]] | None = None
                    ) -> tuple[list[list[int]], list[list[int]]]:
        """The thief's data of the stealing attacks: token ids (the backend's tokenizer) of the
        ``watermarked_texts`` resource and of the ``reference_texts`` one (unwatermarked samples of the
        same model; ``default_reference()`` when it is not given and a default exists).

        Raises:
            InputError: no watermarked texts, or no reference texts and no default.
        """
        wm, ref = self.resources.get("watermarked_texts"), self.resources.get("reference_texts")
        if wm and not ref and default_reference is not None:
            ref = default_reference()
        if not wm or not ref:
            ref_hint = ("reference_texts=[...] optional" if default_reference is not None
                        else "and reference_texts=[...], unwatermarked samples of the same model")
            raise InputError(f"{self.name} needs a fitted stealer=... or watermarked_texts=[...] ({ref_hint})")
        be = self.backend
        return be.encode(list(wm)), be.encode(list(ref))

    @property
    def backend(self) -> DLMBackend:
        """The DLM backend resource, or the registry's ``default`` backend (built once, lazily)."""

        def default() -> DLMBackend:
            from sketchwm.registry import get_registry

            return get_registry().build("backend", "default")

        return self._resource("backend", default)

    def _word_vocabulary(self, at_least: int) -> tuple[str, ...]:
        """The ``vocabulary`` resource (default :data:`COMMON_WORDS`) as sorted distinct non-blank words.

        Raises:
            InputError: fewer than ``at_least`` words.
        """
        vocab = self.resources.get("vocabulary") or COMMON_WORDS
        words = tuple(sorted(set(str(w) for w in vocab if str(w).strip())))
        if len(words) < at_least:
            need = "a non-empty vocabulary" if at_least == 1 else f"a vocabulary of at least {at_least} distinct words"
            raise InputError(f"{self.name} needs {need}")
        return words

    def _levenshtein_tokenizer(self) -> Any:
        if self.resources.get("tokenizer") is not None:
            return self.resources["tokenizer"]
        backend = self.resources.get("backend")
        if backend is None:
            backend = self.__dict__.get("_built_resources", {}).get("backend")
        return None if backend is None else backend.tokenizer

    # ------------------------------------------------------------------ the contract
    def apply(self, texts, strength, generator, *, token_ids=None, prompts=None) -> AttackOutput:
        """Edit ``texts`` with the given strength (arguments as :meth:`sketchwm.components.Attack.apply`;
        an empty list gives an empty output, an empty string stays empty).

        Returns:
            :class:`sketchwm.components.AttackOutput` with ``meta`` holding ``attack``, ``strength``,
            ``params``, ``levenshtein_unit`` and attack-specific entries.

        Raises:
            ConfigError: strength outside [0, 1].
            InputError: texts not a sequence of strings, ``token_ids``/``prompts`` of another length,
                or ``generator`` not a ``torch.Generator``.
        """
        texts, s = _check_batch(texts, strength)
        for t in texts:
            if not isinstance(t, str):
                raise InputError(f"attack input texts must be strings, got {type(t).__name__}")
        for label, extra in (("token_ids", token_ids), ("prompts", prompts)):
            if extra is not None and len(extra) != len(texts):
                raise InputError(f"{label} has {len(extra)} entries for {len(texts)} texts")
        if not isinstance(generator, torch.Generator):
            raise InputError("attacks need an explicit torch.Generator (e.g. torch.Generator().manual_seed(0))")
        meta: dict[str, Any] = {
            "attack": self.name,
            "strength": s,
            "params": self.params.model_dump(mode="json"),
        }
        if not texts:
            meta["levenshtein_unit"] = "none"
            return AttackOutput(texts=[], edit_fraction=[], levenshtein=[], similarity=[], meta=meta)
        res = self._edit(texts, s, generator, token_ids=token_ids, prompts=prompts)
        if len(res.texts) != len(texts) or len(res.edit_fraction) != len(texts):
            raise RuntimeError(f"attack '{self.name}' returned {len(res.texts)} texts for {len(texts)} inputs")
        tok = self._levenshtein_tokenizer()
        lev = metrics.token_levenshtein(texts, res.texts, tokenizer=tok)
        if getattr(self.params, "similarity", True):
            sim = metrics.semantic_similarity(texts, res.texts)
        else:
            sim = [float("nan")] * len(texts)
        meta.update(res.meta)
        meta["levenshtein_unit"] = "model-token" if tok is not None else "word"
        return AttackOutput(
            texts=res.texts,
            edit_fraction=[float(f) for f in res.edit_fraction],
            levenshtein=lev,
            similarity=sim,
            meta=meta,
        )

    @abstractmethod
    def _edit(
        self,
        texts: list[str],
        strength: float,
        generator: torch.Generator,
        *,
        token_ids: Sequence[Sequence[int]] | None,
        prompts: Sequence[str] | None,
    ) -> EditResult:
        """Edit a non-empty batch (strength already validated)."""


class WordAttack(TextAttack):
    """A :class:`TextAttack` that edits each text independently as a list of words.

    Subclasses implement :meth:`_edit_words` (words → edited words, edit fraction). One that draws
    words sets :attr:`min_vocabulary` > 0: the constructor then sets ``self.vocabulary`` (sorted
    distinct words of the ``vocabulary`` resource, default :data:`COMMON_WORDS`).

    Raises:
        InputError: a vocabulary of fewer than :attr:`min_vocabulary` words.
    """

    #: Words the attack needs in its vocabulary (0: it draws none, ``self.vocabulary`` is not set).
    min_vocabulary: ClassVar[int] = 0

    def __init__(self, params: Any = None, **resources: Any):
        super().__init__(params, **resources)
        if self.min_vocabulary > 0:
            self.vocabulary = self._word_vocabulary(self.min_vocabulary)

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        outs, fracs = [], []
        for text in texts:  # word edits are Python-level; the model-based attacks batch their forward passes
            words = text.split()
            if not words:
                outs.append(text)
                fracs.append(0.0)
                continue
            new_words, frac = self._edit_words(words, strength, generator)
            outs.append(" ".join(new_words))
            fracs.append(frac)
        return EditResult(outs, fracs, {})

    @abstractmethod
    def _edit_words(self, words: list[str], strength: float, generator: torch.Generator) -> tuple[list[str], float]:
        """Edit a non-empty word list → (new words, edit fraction)."""


class StageSpec(StrictModel):
    """One stage of a :class:`Pipeline`: a registered attack, its params, and its own strength (None: the
    strength given to :meth:`Pipeline.apply`)."""

    name: str
    params: dict[str, Any] = {}
    strength: float | None = Field(None, ge=0.0, le=1.0)


class PipelineParams(AttackParams):
    """Params of a :class:`Pipeline`.

    Attributes:
        stages: the attacks, in order (at least one).
        similarity: as for every attack; the similarity of the final output to the input is
            computed only when it and every stage's ``similarity`` are on.
    """

    stages: list[StageSpec] = []


class Pipeline(Attack):
    """Attacks applied in sequence; the output of one is the input of the next. Itself an :class:`Attack`.

    Each stage gets the strength given to :meth:`apply` (or its own, ``StageSpec.strength``) and
    draws from the same generator, so a pipeline is deterministic under a seed. Token ids are passed
    to the first stage only (later stages see edited texts). The combined edit fraction and
    Levenshtein distance are measured from the original input to the final output (word-level).

    Built three ways: :func:`compose` (stages already built); through a registry,
    ``registry.build("attack", NAME, {"stages": [{"name": ..., "params": ..., "strength": ...}]})``
    (the stages built through the same registry and context); or ``Pipeline(params)`` (stages built
    through the installed plugins). A composition is registered like any attack by subclassing
    with a ``name`` and default ``stages`` (see the tests); the suite itself registers none.

    Args:
        params: :class:`PipelineParams` (dict or model).
        attacks: the stages, already built (then ``params.stages``, if given, must name them in order).
        **resources: handed to the stages built from ``params`` (``backend``, ``human_texts``, ...).

    Raises:
        ConfigError: no stages, bad params, or ``attacks`` that do not match ``params.stages``.
    """

    name = "pipeline"
    Params = PipelineParams

    def __init__(self, params: Any = None, *, attacks: Sequence[Attack] | None = None, **resources: Any):
        super().__init__(params, **resources)
        specs = self.params.stages
        if attacks is None:
            from sketchwm.context import BuildContext
            from sketchwm.registry import get_registry

            reg = get_registry()
            attacks = [reg.build("attack", st.name, st.params, BuildContext(resources=resources)) for st in specs]
        attacks = list(attacks)
        if not specs:
            specs = [StageSpec(name=a.name, params=a.params.model_dump(mode="json")) for a in attacks]
            self.params = self.params.model_copy(update={"stages": specs})
        if not attacks:
            raise ConfigError(f"{self.display_name()} needs at least one attack")
        if [st.name for st in specs] != [a.name for a in attacks]:
            raise ConfigError(f"{self.display_name()}: stages {[st.name for st in specs]} do not match the attacks given "
                              f"{[a.name for a in attacks]}")
        self.attacks = attacks
        self.strengths = [st.strength for st in specs]

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Pipeline":
        """Build the stages of ``params`` through the context's registry, with the same context."""
        p = cls.parse_params(params)
        reg = context.require("registry", cls.display_name())
        attacks = [reg.build("attack", st.name, st.params, context) for st in p.stages]
        return cls(p, attacks=attacks)

    def apply(self, texts, strength, generator, *, token_ids=None, prompts=None) -> AttackOutput:
        """Run the stages in order (see class doc); ``meta["stages"]`` holds each stage's meta (arguments as
        :meth:`sketchwm.components.Attack.apply`).

        Raises:
            ConfigError: strength outside [0, 1]. InputError: ``texts`` is a single string (or as the stages raise).
        """
        original, s = _check_batch(texts, strength)
        cur, stages = original, []
        for i, attack in enumerate(self.attacks):
            st = s if self.strengths[i] is None else self.strengths[i]
            out = attack.apply(cur, st, generator, token_ids=token_ids if i == 0 else None, prompts=prompts)
            stages.append(out.meta)
            cur = out.texts
        frac = [metrics.word_edit_fraction(a, b) for a, b in zip(original, cur)]
        lev = metrics.token_levenshtein(original, cur, tokenizer=None)
        want_sim = all(getattr(a.params, "similarity", True) for a in [self, *self.attacks])
        sim = metrics.semantic_similarity(original, cur) if (want_sim and original) else [float("nan")] * len(original)
        meta = {"attack": self.name, "strength": s, "params": self.params.model_dump(mode="json"), "stages": stages,
                "levenshtein_unit": "word"}
        return AttackOutput(texts=list(cur), edit_fraction=frac, levenshtein=lev, similarity=sim, meta=meta)


def compose(*attacks: Attack, strengths: Sequence[float] | None = None) -> Pipeline:
    """``compose(a, b, c)`` → :class:`Pipeline` applying a, then b, then c (``strengths``: one per stage).

    Raises:
        ConfigError: no attacks, ``strengths`` of another length, or a strength outside [0, 1].
    """
    if strengths is not None and len(strengths) != len(attacks):
        raise ConfigError(f"pipeline has {len(attacks)} attacks but {len(strengths)} strengths")
    per = list(strengths) if strengths is not None else [None] * len(attacks)
    stages = [{"name": a.name, "params": a.params.model_dump(mode="json"), "strength": st} for a, st in zip(attacks, per)]
    return Pipeline({"stages": stages}, attacks=list(attacks))
