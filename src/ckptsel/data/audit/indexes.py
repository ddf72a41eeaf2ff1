"""Candidate search for the two similarity checks: :class:`JaccardIndex` (exact character
n-gram Jaccard >= t, AllPairs prefix filter) and :class:`SharedGramIndex` (pairs sharing a
non-template word n-gram), with the all-pairs reference the tests compare against."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import numpy as np

from ckptsel.data.audit.grams import threshold_fraction

TEMPLATE_FRACTION = 0.05  # a word 5-gram in >= 5% of a pool's questions is boilerplate
TEMPLATE_MIN_COUNT = 20  # ... and in at least this many (small pools keep their content)
MAX_WORD_PAIRS = 20_000_000  # budget of (first, second) pairs enumerated by the word check


def _ceil_frac(t: Fraction, n: int) -> int:
    return -((-t.numerator * n) // t.denominator)


def brute_force_jaccard_pairs(sa: list[frozenset[str]], sb: list[frozenset[str]], threshold: float) -> list[tuple[int, int, float]]:
    """All-pairs reference for :func:`jaccard_pairs` (same exact comparison); for tests."""
    t = threshold_fraction(threshold)
    out = []
    for i, x in enumerate(sa):
        for j, y in enumerate(sb):
            inter = len(x & y)
            union = len(x) + len(y) - inter
            if union and inter * t.denominator >= t.numerator * union:
                out.append((i, j, inter / union))
    return out


class JaccardIndex:
    """Exact search for sets with Jaccard >= t against a fixed pool (AllPairs prefix filter).

    Global order of grams: grams absent from the pool first (no query can share them with a
    pool set, so their order among themselves is irrelevant), then the pool's grams by
    (document frequency in the pool, gram). Under any total order, sets x, y with
    J(x, y) >= t share a gram among the first ``|x| - ceil(t|x|) + 1`` of x and the first
    ``|y| - ceil(t|y|) + 1`` of y; only the pool's prefixes are indexed, each query probes
    with its own prefix, and every candidate is verified exactly. Queries are streamed, so
    memory grows with the pool, not with the (large) fine-tuning set."""

    def __init__(self, pool: list[frozenset[str]], threshold: float) -> None:
        self.t = threshold_fraction(threshold)
        self.pool = pool
        df: Counter[str] = Counter()
        for y in pool:
            df.update(y)
        ordered = sorted(df)  # tie-break by the gram itself: a total order
        ordered.sort(key=df.__getitem__)  # stable: (df, gram), rarest first
        self.rank = {g: k for k, g in enumerate(ordered)}
        self.vocab = frozenset(self.rank)
        self.index: dict[int, list[int]] = defaultdict(list)
        for j, y in enumerate(pool):
            for r in self._prefix(y):
                self.index[r].append(j)

    def _prefix(self, x: frozenset[str]) -> list[int]:
        n = len(x)
        p = n - _ceil_frac(self.t, n) + 1  # prefix length
        s = x & self.vocab
        k = p - (n - len(s))  # prefix places left after the grams the pool lacks
        if k <= 0:
            return []
        return sorted(map(self.rank.__getitem__, s))[:k]

    def query(self, x: frozenset[str]) -> list[tuple[int, float]]:
        """(j, J) for every pool set with Jaccard(x, pool[j]) >= t, sorted by j."""
        cands: set[int] = set()
        for r in self._prefix(x):
            cands.update(self.index.get(r, ()))
        if not cands:
            return []
        t, nx = self.t, len(x)
        lo, hi = _ceil_frac(t, nx), (nx * t.denominator) // t.numerator  # size filter
        out = []
        for j in sorted(cands):
            y = self.pool[j]
            if not lo <= len(y) <= hi:
                continue
            inter = len(x & y)
            union = nx + len(y) - inter
            if inter * t.denominator >= t.numerator * union:
                out.append((j, inter / union))
        return out


def jaccard_pairs(sa: Iterable[frozenset[str]], sb: list[frozenset[str]], threshold: float) -> list[tuple[int, int, float]]:
    """All (i, j, J) with Jaccard(sa[i], sb[j]) >= threshold, exactly (see
    :class:`JaccardIndex`); ``sa`` may be a generator."""
    index = JaccardIndex(sb, threshold)
    return [(i, j, jac) for i, x in enumerate(sa) for j, jac in index.query(x)]


class SharedGramIndex:
    """Pairs sharing >= 1 n-gram with a fixed pool: feed query sets with :meth:`add`, then
    :meth:`pairs` builds all pairs with one numpy outer product per shared gram.

    Two guards keep this linear-ish on prompt-formatted data. *Template* n-grams — in at least
    ``template_fraction`` (and at least ``TEMPLATE_MIN_COUNT``) of the questions of either
    pool, like the "please answer the following question with true or false" of the
    commonsense files — are instruction boilerplate, not content, and are ignored. And pairs are
    enumerated for the rarest grams first up to ``max_pairs`` (sum over grams of the two
    document frequencies' product); grams past that budget still count for the item totals but
    not for the pair list, and the result says how many were left out."""

    def __init__(self, pool: list[frozenset[str]], n_real: int | None = None) -> None:
        self.n_pool = len(pool)
        self.n_real = len(pool) if n_real is None else n_real  # items after it are planted
        self.post_b: dict[str, list[int]] = defaultdict(list)
        for j, y in enumerate(pool):
            for g in y:
                self.post_b[g].append(j)
        self.vocab = frozenset(self.post_b)
        self.post_a: dict[str, list[int]] = defaultdict(list)
        self.n_a = 0

    def add(self, i: int, x: frozenset[str]) -> None:
        self.n_a = max(self.n_a, i + 1)
        for g in x & self.vocab:  # only grams that the pool has
            self.post_a[g].append(i)

    def pairs(self, template_fraction: float = TEMPLATE_FRACTION, max_pairs: int = MAX_WORD_PAIRS) -> dict[str, Any]:
        """``i, j, count`` arrays (pairs and their number of distinct shared non-template
        n-grams, sorted by (i, j)), ``items_a``/``items_b`` (items with a shared non-template
        n-gram; real items of the pool only), ``template`` ([gram, df_a, df_b] ignored) and
        ``dropped`` (non-template grams left out of the pair list by ``max_pairs``)."""
        grams = list(self.post_a)
        n_real = self.n_real

        def real(js: list[int]) -> list[int]:
            return js if n_real == self.n_pool else [j for j in js if j < n_real]

        df_a = np.array([len(self.post_a[g]) for g in grams], dtype=np.int64)
        df_b = np.array([len(real(self.post_b[g])) for g in grams], dtype=np.int64)
        limit_a = max(template_fraction * self.n_a, TEMPLATE_MIN_COUNT)
        limit_b = max(template_fraction * n_real, TEMPLATE_MIN_COUNT)
        is_template = (df_a >= limit_a) | (df_b >= limit_b)
        template = sorted(
            ([grams[k], int(df_a[k]), int(df_b[k])] for k in np.flatnonzero(is_template)), key=lambda t: (-(t[1] + t[2]), t[0])
        )
        content = np.flatnonzero(~is_template)
        # item totals over every non-template shared gram (exact, linear in the postings)
        with_real = [k for k in content if df_b[k] > 0]
        items_a = np.unique(np.concatenate([[]] + [self.post_a[grams[k]] for k in with_real]))
        items_b = np.unique(np.concatenate([[]] + [real(self.post_b[grams[k]]) for k in content]))
        # pair enumeration, rarest (smallest product) first, within the budget
        products = df_a[content] * df_b[content]
        order = content[np.lexsort((content, products))]
        within = np.cumsum(df_a[order] * df_b[order]) <= max_pairs
        kept = order[within]
        nb = max(self.n_pool, 1)
        codes = [
            (
                np.asarray(self.post_a[grams[k]], dtype=np.int64)[:, None] * nb + np.asarray(self.post_b[grams[k]], dtype=np.int64)[None, :]
            ).ravel()
            for k in kept
        ]
        if codes:
            uniq, counts = np.unique(np.concatenate(codes), return_counts=True)
        else:
            uniq = counts = np.zeros(0, dtype=np.int64)
        return {
            "i": uniq // nb,
            "j": uniq % nb,
            "count": counts.astype(np.int64),
            "items_a": int(items_a.size),
            "items_b": int(items_b.size),
            "template": template,
            "dropped": int(order.size - kept.size),
        }


def shared_ngram_pairs(
    sa: Iterable[frozenset[str]], sb: list[frozenset[str]], *, template_fraction: float = TEMPLATE_FRACTION, max_pairs: int = MAX_WORD_PAIRS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs sharing >= 1 non-template n-gram: arrays ``(i, j, number of distinct shared
    n-grams)``, sorted by (i, j) (see :class:`SharedGramIndex` for the two guards)."""
    index = SharedGramIndex(sb)
    for i, x in enumerate(sa):
        index.add(i, x)
    out = index.pairs(template_fraction, max_pairs)
    return out["i"], out["j"], out["count"]
