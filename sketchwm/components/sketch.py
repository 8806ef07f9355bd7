"""The sketch contract: a keyed linear text sketch h(y) = Φᵀx(y)/√n (paper Def. 2.3, §4.1, eq. 5)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch

from ..errors import InputError
from .component import Component
from .cpu import serial_on_cpu
from .expected_sketch import capped_column_sums, capped_expected_weights, expected_weights_stopping
from .token_sums import ids_summary, sort_rows

__all__ = ["Sketch"]


class Sketch(Component):
    """A keyed linear sketch of a token sequence (paper Def. 2.3 and §4.1).

    The sketch is defined by a token feature map φ: V → R^D, seen as a matrix Φ (V, D). For a text
    y of N tokens, ``h(y) = Φᵀ c(y) / √N`` where c(y) ∈ N^V counts the tokens. Subclasses implement
    the two linear maps :meth:`project` (Φᵀ) and :meth:`token_scores` (Φ); everything else (sketch
    of ids, expected sketch of eq. 5) is built on them.

    Args:
        params: validated ``Params``.
        key: the sketch key k_sk (a :class:`sketchwm.keys.WatermarkKey`).
        vocab_size: V, number of token ids (the model's logit dimension).
        token_prior: π_tok as non-negative float64 counts or probabilities, shape (V,), or None.
        device: where tables live.
    """

    kind = "sketch"

    def __init__(self, params, key, vocab_size: int, token_prior: torch.Tensor | None = None, device="cpu"):
        self._init_table_owner(params, vocab_size, device)

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Sketch":
        """``cls(params, key, vocab_size, token_prior, device)`` from the context (key and V required)."""
        return cls(params, *cls._key_and_vocab(context), context.token_prior, context.device, **dict(context.resources))

    @property
    @abstractmethod
    def dim(self) -> int:
        """D, the sketch dimension."""

    @property
    def width(self) -> int:
        """w, the bucket count used to scale λ = γ√w (paper §4.1). Defaults to D."""
        return self.dim

    @abstractmethod
    def project(self, weights: torch.Tensor) -> torch.Tensor:
        """Φᵀ weights: (B, V) float → (B, D) float32 (unnormalised, Σ_v weights_v φ(v))."""

    @abstractmethod
    def token_scores(self, r: torch.Tensor) -> torch.Tensor:
        """Φ r: (B, D) float → (B, V) float32, the per-token inner products ⟨r, φ(v)⟩ (eq. 6 without 1/√N)."""

    def report(self) -> dict[str, Any]:
        """Diagnostics of the built tables (e.g. sign imbalance); JSON-serialisable."""
        return {}

    # ---------------------------------------------------------------- derived operations
    def counts(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Token counts c(y): ids (B, N) int64 (+ valid (B, N) bool) → (B, V) float32.

        Raises:
            InputError: ids outside [0, V).
        """
        ids = ids.to(self.device)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            bad = int(ids.max()) if int(ids.max()) >= self.vocab_size else int(ids.min())
            raise InputError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        w = torch.ones(ids.shape, dtype=torch.float32, device=self.device)
        if valid is not None:
            w = w * valid.to(self.device, torch.float32)
        out = torch.zeros(ids.shape[0], self.vocab_size, dtype=torch.float32, device=self.device)
        return out.scatter_add_(1, ids, w)

    #: True when the sketch has the count sketch's geometry (paper Def. 2.3): every kept token's feature
    #: φ(v) has one ±1 entry in each of d rows of ``width`` buckets, so ‖h‖² is close to d. The penalised
    #: score's scale λ = γ√w and its uniform threshold τ_α = (2/λ) log(1/α) (eq. 19) are set for that
    #: geometry: eq. 18 is the worst case of the conditional bound (eq. 17) over ‖h‖², attained at
    #: ‖h‖² = τ/λ, and is only useful when ‖h‖² is on that scale. False (the default): the sketch
    #: declares no such geometry, a score whose threshold needs it (``ScoreFunction.threshold_needs_geometry``)
    #: has no analytic τ_α on it, and the detector decides on the key-randomised p-value (exact, or a
    #: proven bound) or on the calibrated τ_N alone.
    count_geometry: ClassVar[bool] = False
    #: ``count`` (the paper's sketch of token counts), ``presence`` (of the set of distinct tokens) or
    #: ``capped`` (of the counts capped at ``cap`` = k, x_v = min(c_v, k); ``presence`` is k = 1).
    counting: str = "count"
    cap: int = 1
    #: (V,) bool, False for tokens whose feature φ(v) is zero, or None (every token counts).
    keep: torch.Tensor | None = None

    def weights(self, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the sketch sums and its normaliser: counts (B, V) → x (B, V) float32, n (B,) float32.

        ``count``: x = c(y) (kept tokens), n = Σ_v x_v = N. ``presence``: x_v = 1[c_v(y) > 0] (kept
        tokens), n = number of distinct kept tokens; ``capped``: x_v = min(c_v(y), k), n = Σ_v x_v. h(y) = Φᵀx / √n.
        """
        x = counts.float().clamp(max=float(self.cap)) if self.counting != "count" else counts.float()  # presence: cap 1
        if self.keep is not None:
            x = x * self.keep.to(x.device, x.dtype)[None, :]
        return x, x.sum(1)

    def sparse_weights(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`weights` without the (B, V) table: x(y) as weights on the text's own positions.

        Returns tok (B, N) int64 in [0, V] (V on padding) and x (B, N) float32 such that
        Σ_j x[b, j]·e_{tok[b, j]} equals row b of ``weights(counts(ids, valid))[0]`` and
        x.sum(1) its n. ``count``: tok = ids, x = keep. ``presence``: each row is sorted
        (:func:`sort_rows`) and only the first copy of every kept token gets weight 1; ``capped``:
        the first k copies (rank within the run of equal ids < k). Costs O(B·N)
        memory and one row sort, not O(B·V).

        Raises:
            InputError: ids outside [0, V).
        """
        ids = self.check_ids(ids, valid)[0]
        V = self.vocab_size
        tok = ids if valid is None else torch.where(valid.to(self.device), ids, V)  # (B, N), V = padding
        keep_ext = self.keep_table()  # (V + 1,) float32, 0 on the padding id V
        if self.counting not in ("presence", "capped"):
            return tok, keep_ext[tok]
        tok = sort_rows(tok)
        first = torch.ones(tok.shape, dtype=torch.bool, device=tok.device)
        first[:, 1:] = tok[:, 1:] != tok[:, :-1]
        if self.cap > 1:  # copies of rank < k within each run of equal ids (run start by a running max)
            pos = torch.arange(tok.shape[1], device=tok.device).expand_as(tok)
            first = pos - torch.cummax(torch.where(first, pos, torch.zeros_like(pos)), 1).values < self.cap
        return tok, torch.where(first, keep_ext[tok], 0.0)

    def check_ids(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, N) on the sketch's device, after checking the valid ones lie in [0, V), and the
        lengths (B,) int64 (valid tokens per row; see :func:`ids_summary`).

        Raises:
            InputError: a valid id outside [0, V) (names it).
        """
        ids = ids.to(self.device)
        lengths, lo, hi = ids_summary(ids, None if valid is None else valid.to(self.device), self.vocab_size)
        if lo < 0 or hi >= self.vocab_size:
            raise InputError(f"token id {hi if hi >= self.vocab_size else lo} is outside the vocabulary [0, {self.vocab_size})")
        return ids, lengths

    def keep_table(self) -> torch.Tensor:
        """(V + 1,) float32: 1 on kept tokens, 0 on excluded ones and on the padding id V (cached)."""
        t = self.__dict__.get("_keep_ext")
        if t is None or t.device != self.device:
            t = torch.ones(self.vocab_size + 1, dtype=torch.float32, device=self.device)
            if self.keep is not None:
                t[: self.vocab_size] = self.keep.to(self.device, torch.float32)
            t[self.vocab_size] = 0.0
            self.__dict__["_keep_ext"] = t
        return t

    def project_sparse(self, tok: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Φᵀx from :meth:`sparse_weights`' (tok, x), both (B, N) → (B, D) float32.

        Default: through a dense (B, V) scatter and :meth:`project`; sketches with per-token
        tables override it with an O(B·N) scatter.
        """
        dense = torch.zeros(tok.shape[0], self.vocab_size + 1, dtype=torch.float32, device=tok.device)
        dense.scatter_add_(1, tok, x.float())
        return self.project(dense[:, : self.vocab_size])

    def sketch(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """h_k(y) = Φᵀ x(y) / √n (paper §4.1; x, n from :meth:`weights`): ids (B, N) int64 → (B, D) float32.

        Rows with n = 0 give a zero sketch. Exactly invariant to permutations of the tokens of a
        row; with ``presence`` also to adding copies of tokens already present.

        Raises:
            InputError: ids outside [0, V).
        """
        x, n = self.weights(self.counts(ids, valid))  # (B, V), (B,)
        return self.project(x) / n.clamp_min(1.0).sqrt()[:, None]

    def expected_sketch(
        self, frozen_counts: torch.Tensor, marginal_mass: torch.Tensor, n_tokens: torch.Tensor | float
    ) -> torch.Tensor:
        """Expected sketch ĥ_{k,t} of eq. (5) for ``count``: Φᵀ(c_F + Σ_{i∈M_t} p_i) / √N.

        Args:
            frozen_counts: (B, V) float, counts of the unmasked tokens (F_t).
            marginal_mass: (B, V) float, Σ_{i∈M_t} p_i^{(t)}(v).
            n_tokens: N, the final text length, scalar or (B,) tensor.

        Returns:
            (B, D) float32.
        """
        n = torch.as_tensor(n_tokens, dtype=torch.float32, device=self.device).reshape(-1, 1)
        return self.project(frozen_counts + marginal_mass) / n.sqrt()

    def expected_weights(
        self, frozen_counts: torch.Tensor, probs: torch.Tensor, valid: torch.Tensor, n_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """E[x(Y)] under the independent masked marginals (eq. 5 and its presence analogue).

        ``count``: E[x] = c_F + Σ_{i∈M} p_i (eq. 5), n̂ = N. ``presence``: E[x_v] = 1 if v is frozen,
        else 1 − Π_{i∈M}(1 − p_i(v)) (independent positions), n̂ = Σ_v E[x_v] (a plug-in for the
        random number of distinct tokens, see :mod:`sketchwm_builtin.global_sketch.embed`).

        Args:
            frozen_counts: (B, V) float32 counts of the unmasked tokens.
            probs: (B, M, V) float32 masked marginals; OVERWRITTEN for ``presence`` (log(1 − p)).
            valid: (B, M) bool, which rows of ``probs`` are masked positions.
            n_tokens: N (the generation length).

        Returns:
            w_hat (B, V) float32, n_hat (B,) float32, and for ``presence`` log_absent (B, V) float32 =
            Σ_{i∈M} log(1 − p_i(v)) (None for ``count``).
        """
        if self.counting == "count":
            mass = torch.bmm(valid.to(probs.dtype)[:, None, :], probs)[:, 0]  # (B, V) Σ_{i∈M} p_i
            return (*self.weights_from_sums(frozen_counts, mass, n_tokens), None)
        if self.counting == "capped":  # the (B, cap, V) column statistics of capped_column_sums
            logits = probs.clamp_min(1e-30).log()
            return (*self.weights_from_sums(frozen_counts, capped_column_sums(logits, valid.float(), self.cap), n_tokens), None)
        log1m = probs.clamp_(max=1 - 1e-6).neg_().log1p_()  # (B, M, V) log(1 − p_i(v)), in place
        log_absent = torch.bmm(valid.to(probs.dtype)[:, None, :], log1m)[:, 0]  # (B, V)
        return (*self.weights_from_sums(frozen_counts, log_absent, n_tokens), log_absent)

    def weights_from_sums(self, frozen_counts: torch.Tensor, sums: torch.Tensor,
                          n_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """E[x(Y)] and n̂ from the column sums of the masked marginals (eq. 5 and its presence analogue).

        Args:
            frozen_counts: (B, V) float32 counts of the unmasked tokens.
            sums: (B, V) float32, Σ_{i∈M} p_i(v) for ``count``, Σ_{i∈M} log(1 − p_i(v)) for
                ``presence`` (:func:`sketchwm.marginal_sums.masked_marginal_sums` computes both);
                not modified.
            n_tokens: N (the generation length).

        Returns:
            w_hat (B, V) float32 (0 on excluded tokens) and n_hat (B,) float32: N for ``count``,
            Σ_v E[x_v] (at least 1) for ``presence``.
        """
        keep = None if self.keep is None else self.keep_table()[None, : self.vocab_size].to(sums.device)  # (1, V)
        with serial_on_cpu(sums.device):  # (B, V) ops only
            if self.counting == "count":
                w = sums.add(frozen_counts)
                if keep is not None:
                    w.mul_(keep)
                return w, torch.full((w.shape[0],), float(n_tokens), device=w.device)
            if self.counting == "capped":  # E[min(f + C, k)], sums (B, k, V) of capped_column_sums
                w = capped_expected_weights(frozen_counts, sums).float().mul_(1.0 if keep is None else keep)
                return w, w.sum(1).clamp_min(1.0)
            w = torch.expm1(sums).neg_().masked_fill_(frozen_counts > 0, 1.0)  # (B, V)
            if keep is not None:
                w.mul_(keep)
            return w, w.sum(1).clamp_min(1.0)

    def expected_weights_stopping(
        self, tokens: torch.Tensor, masked: torch.Tensor, probs: torch.Tensor, positions: torch.Tensor,
        valid: torch.Tensor, eos: int, rows: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """E[x(Y_{<L})] of the text cut at its first EOS, under independent marginals, and its derivative.

        :func:`sketchwm.components.expected_sketch.expected_weights_stopping` on this sketch: the model,
        the arguments (shapes, which are overwritten) and the returns are documented there.
        """
        return expected_weights_stopping(self, tokens, masked, probs, positions, valid, eos, rows)
