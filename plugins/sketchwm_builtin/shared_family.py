"""Detection of a key family whose members share one Count-Sketch (``global-sketch-family`` with
``hashes: shared``, :mod:`sketchwm_builtin.key_family`): every member's and decoy's presence statistic
T_i = Σ_v c_i(v) x_v from one pass over each text's distinct tokens, its background-null moments and
the exact tail of the member each text is tested at (seed paper §4.1 for the direction family; the
background null: :mod:`sketchwm_builtin.global_sketch.null`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sketchwm.components import distinct_token_sums, gather_rows

from .global_sketch.null import BackgroundNull, length_moments

__all__ = ["SharedMemberStats", "BERNSTEIN_SKIP"]

#: the exact tail of a text's member is computed where K × Bernstein's bound on it is below this;
#: elsewhere the bound stands in for it and the family p-value min(1, K·bound) is 1 (valid: the bound
#: is at least the exact tail). On 6,000 Zipf texts with planted boosts the texts left to the bound
#: had exact family p-values of 0.47 and more (tests/test_shared_family.py checks that none below
#: 0.25 is left to it)
BERNSTEIN_SKIP = 4.0


class SharedMemberStats:
    """The statistics of K members and M decoys that are direction indices 0..K + M − 1 of one
    :class:`~sketchwm_builtin.global_sketch.GlobalSketchScheme` (``shared``): their int8 weight table
    c_i(v) (V + 1, K + M), one :class:`BackgroundNull` each, and the moments cached per length.

    Args:
        shared: the scheme whose directions the members are (its sketch, prior and ``null_margin``).
        members: K; decoys: M (detection only).
    """

    def __init__(self, shared: Any, members: int, decoys: int):
        self.shared, self.members, self.n_decoys = shared, int(members), int(decoys)
        self._nulls: list[BackgroundNull] | None = None  # members then decoys, built on first detection
        self._table: torch.Tensor | None = None  # (V + 1, K + M) int8 weights c_i(v), row V = 0
        self._keep: torch.Tensor | None = None  # (V + 1,) int8 the sketch's kept tokens
        self._term_bound = 0.0  # b of Bernstein's bound, set with the table
        self._moment_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # length → (K + M,) μ and σ²
        self._split: tuple[torch.Tensor, torch.Tensor] | None = None  # the table's member and decoy columns

    def method(self) -> str:
        """The members' p-value method, for :class:`SchemeScores`."""
        return (f"fixed-key background null of each member, exact tail P(T' >= T - {self.shared.params.null_margin:g} sd) "
                f"(token prior: {self.shared.prior_desc.get('source')}; one shared Count-Sketch)")

    def table(self) -> tuple[torch.Tensor, list[BackgroundNull]]:
        """The (V + 1, K + M) int8 weight table c_i(v) (members, then decoys; row V = 0) and each
        column's :class:`BackgroundNull`, built once."""
        if self._table is None:
            sh = self.shared
            c = sh.sketch.token_scores(sh.directions(torch.arange(self.members + self.n_decoys))).double()  # (K + M, V)
            self._nulls = [BackgroundNull(sh.sketch, c[i], sh._log_pi, sh._log1m_pi, sh.params.null_dispersion,
                                          sh.device) for i in range(c.shape[0])]
            self._keep = sh.sketch.keep_table().to(torch.int8).cpu()  # (V + 1,)
            # b of Bernstein's bound: the largest centred term |c_i(v)|·(the cap, for the capped sketch)
            self._term_bound = float(c.abs().max()) * (sh.sketch.cap if sh.sketch.counting == "capped" else 1)
            pad = torch.zeros(1, c.shape[0], dtype=torch.int8, device=c.device)
            self._table = torch.cat([c.round().to(torch.int8).T, pad]).contiguous().cpu()  # |c| ≤ d ≤ 127
            K = self.members
            self._split = (self._table[:, :K].contiguous(), self._table[:, K:].contiguous())
        return self._table, self._nulls

    def _moments(self, lengths: np.ndarray, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Background-null mean and variance of the columns ``rows`` of T (:meth:`BackgroundNull.moments`;
        default every column, K + M) for texts of ``lengths`` (B,) int64 tokens: (len(rows), B) float64
        each, one (b, V) × (V, K + M) product per batch of new lengths, cached per length."""
        table = self.table()[0]
        cache = self._moment_cache
        uniq, inverse = np.unique(lengths, return_inverse=True)
        todo = [int(n) for n in uniq.tolist() if int(n) not in cache]
        sh = self.shared
        c = table[:-1].to(torch.float64) if todo else None  # (V, K + M), only when a length is new
        for i in range(0, len(todo), 256):  # chunks of lengths: (chunk, V) float64 at a time
            ks = torch.tensor(todo[i:i + 256], dtype=torch.float64)
            mu, var = (m.numpy() for m in length_moments(ks, sh._log_pi.cpu(), sh._log1m_pi.cpu(), c, sh.sketch,
                                                         sh.params.null_dispersion))  # (b, K + M) each
            cache.update({n: (mu[j], var[j]) for j, n in enumerate(todo[i:i + 256])})
        if len(cache) > 65536:
            cache.clear()
        inverse = inverse.reshape(-1)
        mu = np.stack([cache[int(n)][0][rows] for n in uniq.tolist()], 1)[:, inverse]  # (len(rows), B)
        var = np.stack([cache[int(n)][1][rows] for n in uniq.tolist()], 1)[:, inverse]
        return mu, var

    def _bernstein(self, zs: np.ndarray, var: np.ndarray) -> np.ndarray:
        """Bernstein's bound on P(T' − μ ≥ x), x = zs·σ (zs = z − β, the shifted tail the exact p-value
        reads): exp(−x²/(2(σ² + b·x/3))) for x > 0, else 1, b = max_v |c_i(v)| (× the cap for the
        capped sketch) bounding each centred term (Boucheron, Lugosi & Massart 2013, §2.8). (B,) → (B,)
        float64, an upper bound on the exact tail."""
        b = self._term_bound
        x = zs * np.sqrt(np.maximum(var, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.exp(-np.square(x) / (2.0 * (np.maximum(var, 1e-12) + b * x / 3.0)))
        return np.where(x > 0, np.minimum(e, 1.0), 1.0)

    def _sums(self, ids: torch.Tensor, valid: torch.Tensor, table: torch.Tensor,
              rows: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """T (R, C) int64 of the columns of ``table`` (V + 1, C) int8 and n_d (R,) int64 for ids (B, N)
        in [0, V) where valid (B, N) bool, rows ``rows`` (R,) int64 (None: all, R = B): one pass over
        each text's distinct tokens (presence), or its first ``cap`` copies of each (capped)."""
        if self.shared.sketch.counting == "capped":  # T = Σ_v c_i(v) min(c_v, k): the first k copies of each id
            if rows is not None:
                ids, valid = gather_rows(ids, valid, rows)
            tok, x = self.shared.sketch.sparse_weights(ids, valid)  # (B, N), (B, N)
            return (table.to(torch.float64)[tok] * x.double()[..., None]).sum(1).round().long(), x.sum(1).round().long()
        return distinct_token_sums(ids, valid, table, self._keep, rows=rows)

    def scores(self, ids: torch.Tensor, valid: torch.Tensor, every: bool = False,
               decoys_where_fam_below_one: bool = False) -> tuple[torch.Tensor, ...]:
        """The statistics of ids (B, N) int64 with valid (B, N) bool, from one pass over each text's
        distinct tokens: members' p (K, B) float64 (each text's exact p-value at its member of largest
        z and 1 elsewhere; every member's with ``every``), members' z (K, B) float64, decoys' z (M, B)
        float64 or None, n_d (B,) int64 distinct kept tokens, and that member (B,) int64.

        ``decoys_where_fam_below_one`` (not with ``every``): the decoys' z only for the texts whose
        Bonferroni family p-value min(1, K·p) is below 1, 0 for the others. The family's p-value
        max(p_fam, p_spread) is 1 for those whatever the decoys read, so a Bonferroni family gets the
        same p-values for the cost of the members' columns on most unwatermarked text.

        Raises:
            InputError: ids outside [0, V).
        """
        table, nulls = self.table()
        ids, lengths = self.shared.sketch.check_ids(ids.cpu(), valid.cpu())
        valid = valid.cpu()
        K, M, ln = self.members, self.n_decoys, lengths.numpy()
        lazy = decoys_where_fam_below_one and M > 0 and not every
        T, n_d = self._sums(ids, valid, self._split[0] if lazy else table)  # (B, K) or (B, K + M), (B,)
        Tn = T.numpy().astype(np.float64).T  # (K or K + M, B)
        mu, var = self._moments(ln, slice(0, Tn.shape[0]))  # (K or K + M, B) each
        z = (Tn - mu) / np.sqrt(np.maximum(var, 1e-12))
        best = z[:K].argmax(0)  # (B,) the member each text is tested at (family_pvalues: any choice is valid)
        p = np.ones((K, T.shape[0]))  # the other members' p-values are not computed
        margin, cols = self.shared.params.null_margin, np.arange(T.shape[0])
        exact = np.ones(T.shape[0], dtype=bool)
        if not every:  # the exact tail only where Bernstein's bound leaves K·p below BERNSTEIN_SKIP
            bound = self._bernstein(z[best, cols] - margin, var[best, cols])  # (B,) >= the exact p
            exact = K * bound < BERNSTEIN_SKIP
            p[best[~exact], cols[~exact]] = bound[~exact]  # K·bound >= BERNSTEIN_SKIP: the family p-value is 1
        for i in (range(K) if every else np.unique(best[exact]).tolist()):  # members, each vectorised over its texts
            sel = cols if every else cols[(best == i) & exact]
            p[i, sel] = nulls[i].pvalue(Tn[i, sel], ln[sel], var[i, sel], margin)
        if lazy:  # the decoys' columns on the texts whose family p-value can be below 1
            z = np.concatenate([z, np.zeros((M, T.shape[0]))])  # (K + M, B): decoys 0 where not needed
            need = np.flatnonzero(K * p[best, cols] < 1.0)
            if len(need):
                # the rows read in place by the C pass (no gathered copy of the ids)
                Td = self._sums(ids, valid, self._split[1], rows=need)[0].numpy().astype(np.float64).T  # (M, b)
                mu_d, var_d = self._moments(ln[need], slice(K, K + M))  # (M, b) each
                z[K:, need] = (Td - mu_d) / np.sqrt(np.maximum(var_d, 1e-12))
        zt = torch.from_numpy(z)
        return torch.from_numpy(p), zt[:K], (zt[K:] if self.n_decoys else None), n_d, torch.from_numpy(best)
