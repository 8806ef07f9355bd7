"""Forgery with a stolen watermark: write the tokens a key boosts into human text.

The thief (Jovanović et al. 2024, "Watermark Stealing in Large Language Models", §3, with
document instead of token frequencies) holds N texts of the watermarked model and N samples of the
same open model without the watermark. For each token v it compares the fraction of watermarked
documents that contain v, f_w(v), with the fraction of unwatermarked ones, f_b(v), by the
two-proportion z statistic (pooled, with ``smoothing`` pseudo-documents a):

    s(v) = (f_w − f_b) / (p̄(1 − p̄)(1/N_w + 1/N_b))^{1/2},   p̄ = (n_w(v) + n_b(v) + a) / (N_w + N_b + 2a),   (1)

over tokens seen in at least ``min_docs`` watermarked documents; the tokens of largest s are the
stolen boosted tokens (:class:`DocFrequencyStealer`). Document frequency matches a presence
statistic (a token counts once per text) and is robust to one text repeating a word.

The *adaptive* thief (:class:`ClusteredStealer`) is built against key families (randomised key
selection, Aremu et al. 2025, arXiv 2507.07871): texts made under different member keys boost
different tokens, so it keeps the F most boosted tokens of (1), clusters the stolen texts by which
of them they contain (k-means on the centred, L2-normalised presence rows; Lloyd 1982 via
scikit-learn), and steals per cluster with (1) on that cluster's texts against all reference
texts. Each forgery draws one cluster at random and uses only its tokens.

Registered attacks (the input texts are the passages to forge, e.g. human text; strength s is the
budget: ``round(s · n)`` words edited of the n-word passage; ``edit_fraction`` = edited / n):

* ``spoof-insert`` — insert stolen words at uniformly random gaps;
* ``spoof-substitute`` — replace uniformly random words with stolen words.

Stolen words are the stealer's tokens that are whole words (decode to letters only and encode back
to the one token), most boosted first, skipping words the passage already holds (a presence
sketch counts a token once). Params ``clusters`` > 1 gives the adaptive thief.

Resources: ``backend`` (its tokenizer; default: the registry's ``default``), and either
``stealer`` (a fitted :class:`DocFrequencyStealer` or :class:`ClusteredStealer`) or
``watermarked_texts`` (list of str) with ``reference_texts`` (list of str, unwatermarked samples of
the same model; required).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np
import torch
from pydantic import Field

from sketchwm.config import StrictModel
from sketchwm.errors import InputError

from .base import AttackParams, EditResult, TextAttack, n_edits, sample_positions

__all__ = ["DocFrequencyConfig", "two_proportion_z", "top_positive", "DocFrequencyBase", "DocFrequencyStealer", "ClusteredStealer", "StolenInsertion", "StolenSubstitution",
           "document_frequency"]


class DocFrequencyConfig(StrictModel):
    """Attributes:
    smoothing: a, pseudo-documents in the pooled proportion of eq. (1).
    min_docs: a token must occur in at least this many watermarked documents to be scored.
    """

    smoothing: float = Field(0.5, gt=0.0)
    min_docs: int = Field(2, ge=1)


def document_frequency(docs: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """n(v): how many of the documents contain token v, (V,) int64 (each document counts a token once).

    Raises:
        InputError: a token id outside [0, V).
    """
    parts = [torch.unique(torch.as_tensor(list(d), dtype=torch.long)) for d in docs if len(d)]
    if not parts:
        return torch.zeros(vocab_size, dtype=torch.long)
    flat = torch.cat(parts)
    if int(flat.min()) < 0 or int(flat.max()) >= vocab_size:
        raise InputError(f"token id outside the vocabulary [0, {vocab_size})")
    return torch.bincount(flat, minlength=vocab_size)


def two_proportion_z(cw: torch.Tensor, cb: torch.Tensor, nw: int, nb: int, smoothing: float) -> torch.Tensor:
    """The pooled two-proportion z statistic of eq. (1): (cw/nw − cb/nb) / (p̄(1 − p̄)(1/nw + 1/nb))^{1/2},
    p̄ = (cw + cb + a)/(nw + nb + 2a), for document counts cw, cb (same shape, float64) out of nw and
    nb documents; returns a float64 tensor of that shape (Jovanović et al. 2024, with document counts).
    """
    pooled = (cw + cb + smoothing) / (nw + nb + 2 * smoothing)
    se = (pooled * (1 - pooled) * (1.0 / nw + 1.0 / nb)).sqrt()
    return (cw / nw - cb / nb) / se


def top_positive(score: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """Indices of the positive entries of ``score`` (n,), highest first, ties in index order (at most ``k``): (k',) int64."""
    order = torch.argsort(score, descending=True, stable=True)
    order = order[score[order] > 0]
    return order if k is None else order[:k]


class DocFrequencyBase:
    """Shared part of the document-frequency stealers (eq. (1) over tokens, or over pairs in
    :class:`sketchwm_attacks.thieves.PairStealer`): V, the config and the sizes of the two sets.

    Args:
        vocab_size: V.
        config: :class:`DocFrequencyConfig` or dict.

    Attributes:
        n_watermarked: N_w (0 until fitted).
    """

    #: what the stealer steals, for its error messages
    what: ClassVar[str] = "document-frequency stealing"

    def __init__(self, vocab_size: int, config: "DocFrequencyConfig | dict | None" = None):
        self.vocab_size = int(vocab_size)
        self.config = config if isinstance(config, DocFrequencyConfig) else DocFrequencyConfig.model_validate(config or {})
        self.n_watermarked = 0

    def _sizes(self, watermarked: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> tuple[int, int]:
        """(N_w, N_b), the numbers of watermarked and of reference texts.

        Raises:
            InputError: either set is empty.
        """
        nw, nb = len(watermarked), len(reference)
        if nw == 0 or nb == 0:
            raise InputError(f"{self.what} needs watermarked and reference texts")
        return nw, nb


class DocFrequencyStealer(DocFrequencyBase):
    """Per-token boost estimate of eq. (1) of the module doc.

    Args:
        vocab_size: V.
        config: :class:`DocFrequencyConfig` or dict.

    Attributes (after :meth:`fit`):
        token_score: (V,) float64 s(v); −inf for tokens in fewer than ``min_docs`` watermarked texts.
        n_watermarked: N_w.
    """

    def __init__(self, vocab_size: int, config: "DocFrequencyConfig | dict | None" = None):
        super().__init__(vocab_size, config)
        self.token_score: torch.Tensor | None = None

    def fit(self, watermarked: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> "DocFrequencyStealer":
        """Learn s(v) from token-id lists of watermarked and of unwatermarked texts.

        Raises:
            InputError: an empty set, or ids outside [0, V).
        """
        nw, nb = self._sizes(watermarked, reference)
        V, a = self.vocab_size, self.config.smoothing
        cw = document_frequency(watermarked, V).double()  # (V,)
        cb = document_frequency(reference, V).double()  # (V,)
        s = two_proportion_z(cw, cb, nw, nb, a)  # (V,)
        self.token_score = torch.where(cw >= self.config.min_docs, s, torch.full_like(s, float("-inf")))
        self.n_watermarked = nw
        return self

    def ranked(self, k: int | None = None) -> torch.Tensor:
        """Token ids with s(v) > 0, most boosted first (at most ``k``): (k',) int64.

        Raises:
            InputError: not fitted.
        """
        if self.token_score is None:
            raise InputError("the stealer has not been fitted (call fit first)")
        return top_positive(self.token_score, k)


class ClusteredStealer:
    """The adaptive thief against key families (module doc): cluster, then steal per cluster.

    Args:
        vocab_size: V.
        n_clusters: K, how many member keys the thief assumes.
        n_features: F, the globally most boosted tokens the clustering looks at.
        config: :class:`DocFrequencyConfig` for the global and the per-cluster stealers.
        seed: k-means seed.

    Attributes (after :meth:`fit`):
        labels: (N_w,) int64 cluster of each stolen text.
        stealers: one fitted :class:`DocFrequencyStealer` per non-empty cluster.
        global_stealer: the stealer of all texts (the features' source).
    """

    def __init__(self, vocab_size: int, n_clusters: int, n_features: int = 300,
                 config: "DocFrequencyConfig | dict | None" = None, seed: int = 0):
        if n_clusters < 1 or n_features < 1:
            raise InputError("the clustered stealer needs n_clusters >= 1 and n_features >= 1")
        self.vocab_size, self.n_clusters, self.n_features, self.seed = int(vocab_size), int(n_clusters), int(n_features), int(seed)
        self.config = config
        self.labels: torch.Tensor | None = None
        self.stealers: list[DocFrequencyStealer] = []
        self.global_stealer: DocFrequencyStealer | None = None
        self.n_watermarked = 0

    def fit(self, watermarked: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> "ClusteredStealer":
        """Cluster the stolen texts by their boosted tokens and fit one stealer per cluster.

        Raises:
            InputError: empty sets or ids outside [0, V).
        """
        from sklearn.cluster import KMeans

        glob = DocFrequencyStealer(self.vocab_size, self.config).fit(watermarked, reference)
        feats = glob.ranked(self.n_features)  # (F,)
        col = torch.full((self.vocab_size,), -1, dtype=torch.long)
        col[feats] = torch.arange(feats.numel())
        X = np.zeros((len(watermarked), max(1, feats.numel())), dtype=np.float64)  # (N, F) presence
        for r, d in enumerate(watermarked):  # per document: building the presence matrix
            c = col[torch.as_tensor(list(d), dtype=torch.long)]
            X[r, c[c >= 0].numpy()] = 1.0
        X -= X.mean(0, keepdims=True)
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        k = min(self.n_clusters, len(watermarked))
        labels = KMeans(n_clusters=k, n_init=10, random_state=self.seed).fit_predict(X) if k > 1 else np.zeros(len(X), int)
        self.labels = torch.as_tensor(labels, dtype=torch.long)
        self.stealers = []
        for c in range(k):
            docs = [d for d, lab in zip(watermarked, labels) if lab == c]
            if docs:
                self.stealers.append(DocFrequencyStealer(self.vocab_size, self.config).fit(docs, reference))
        self.global_stealer, self.n_watermarked = glob, len(watermarked)
        return self


class StolenWordParams(AttackParams):
    """Attributes:
    stealer: :class:`DocFrequencyConfig` of a stealer fitted from resources.
    clusters: 1 = the plain thief; > 1 = the adaptive thief with this many clusters
        (:class:`ClusteredStealer`), each forgery using one random cluster's tokens.
    n_features: F of the adaptive thief.
    """

    stealer: DocFrequencyConfig = DocFrequencyConfig()
    clusters: int = Field(1, ge=1)
    n_features: int = Field(300, ge=1)


class _StolenWordSpoof(TextAttack):
    """Shared part of the stolen-word spoofers: the stealer and the stolen words (module doc)."""

    Params = StolenWordParams
    needs_backend: ClassVar[bool] = True

    @property
    def stealer(self) -> "DocFrequencyStealer | ClusteredStealer":
        """The ``stealer`` resource, or one fitted from ``watermarked_texts`` and ``reference_texts``."""
        return self._resource("stealer", self._fit)

    def _fit(self) -> "DocFrequencyStealer | ClusteredStealer":
        w_ids, r_ids = self._stolen_ids()
        be, p = self.backend, self.params
        if p.clusters > 1:
            return ClusteredStealer(be.vocab_size, p.clusters, p.n_features, p.stealer).fit(w_ids, r_ids)
        return DocFrequencyStealer(be.vocab_size, p.stealer).fit(w_ids, r_ids)

    def _word_lists(self) -> list[list[str]]:
        """Per cluster (one list for the plain thief), the stolen whole words, most boosted first."""
        def build() -> list[list[str]]:
            st, be = self.stealer, self.backend
            stealers = st.stealers if isinstance(st, ClusteredStealer) else [st]
            out = []
            for s in stealers:
                words, seen = [], set()
                for t in s.ranked(4000).tolist():  # per candidate token: decoding to a word
                    w = be.decode([t]).strip()
                    if w.isalpha() and w.lower() not in seen and be.encode([w])[0] == [t]:
                        words.append(w)
                        seen.add(w.lower())
                out.append(words)
            if not any(out):
                raise InputError(f"{self.name}: the stealer found no boosted whole-word token")
            return out

        return self._resource("_stolen_words", build)

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        lists = self._word_lists()
        outs, fracs, used = [], [], []
        for text in texts:  # word edits are Python-level, one passage at a time
            words = text.split()
            n = len(words)
            k = n_edits(strength, n) if n else 0
            c = int(torch.randint(len(lists), (1,), generator=generator)) if len(lists) > 1 else 0
            present = {w.strip(".,;:!?\"'()").lower() for w in words}
            stolen = [w for w in lists[c] if w.lower() not in present][:k]
            outs.append(" ".join(self._place(words, stolen, generator)) if stolen else text)
            fracs.append(len(stolen) / n if n else 0.0)
            used.append(c)
        return EditResult(outs, fracs, {"stealer_n": self.stealer.n_watermarked, "clusters": len(lists), "cluster": used})

    def _place(self, words: list[str], stolen: list[str], generator: torch.Generator) -> list[str]:
        raise NotImplementedError


class StolenInsertion(_StolenWordSpoof):
    """Forge by inserting ``round(s · n)`` stolen words at uniformly random gaps (module doc)."""

    name = "spoof-insert"

    def _place(self, words, stolen, generator):
        gaps = torch.randint(len(words) + 1, (len(stolen),), generator=generator).tolist()
        at: dict[int, list[str]] = {}
        for g, w in zip(gaps, stolen):
            at.setdefault(g, []).append(w)
        out: list[str] = []
        for i in range(len(words) + 1):
            out.extend(at.get(i, []))
            if i < len(words):
                out.append(words[i])
        return out


class StolenSubstitution(_StolenWordSpoof):
    """Forge by replacing ``round(s · n)`` uniformly random words with stolen words (module doc)."""

    name = "spoof-substitute"

    def _place(self, words, stolen, generator):
        out = list(words)
        for pos, w in zip(sample_positions(len(words), len(stolen), generator), stolen):
            out[pos] = w
        return out
