"""Pure array functions behind every rule, budget and diagnostic (no I/O, no pandas).

Shapes: ``T`` checkpoints (ascending step, the last is the final checkpoint), ``n`` items,
``P`` permutations/partitions/repetitions, ``B`` budgets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ckptsel._util import rng as streams


# --------------------------------------------------------------------------- hashing
def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays: a fixed, platform-independent hash.

    Used (instead of a NumPy RNG stream) so that the order of an item in permutation ``p``
    depends only on the seed, ``p`` and the item's id — not on which other items are present.
    """
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def string_keys(values: Sequence[str]) -> np.ndarray:
    """64-bit keys of strings (first 8 bytes of SHA-256, little-endian), deterministic across runs."""
    import hashlib

    sha = hashlib.sha256
    strings = values.tolist() if isinstance(values, np.ndarray) else values
    digests = b"".join([sha(v.encode()).digest()[:8] for v in strings])
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def hashed_ranks(item_keys: np.ndarray, seed: int, stream: int, reps: int) -> np.ndarray:
    """``(reps, n)`` hash values of each item for repetition ``p`` of a named stream."""
    rep = np.arange(reps, dtype=np.uint64)
    salt = splitmix64(splitmix64(np.uint64(seed) ^ splitmix64(np.uint64(stream))) + rep)
    return splitmix64(item_keys[None, :] ^ salt[:, None])


def permutations(item_keys: np.ndarray, seed: int, reps: int, stream: int = streams.PERMUTATIONS) -> np.ndarray:
    """``(reps, n)`` orders of the items: each row sorts the items by a per-row hash."""
    return argsort_rows(hashed_ranks(item_keys, seed, stream, reps))


def argsort_rows(h: np.ndarray) -> np.ndarray:
    """``(R, m)`` stable argsort of each row of ``h`` (R × m).

    When no row holds a repeated value every sort gives the stable order, so the (faster,
    vectorised) default sort is used and checked; rows with repeats fall back to the stable sort.
    """
    order = np.argsort(h, axis=1)
    ranked = np.take_along_axis(h, order, axis=1)
    if (ranked[:, 1:] == ranked[:, :-1]).any():
        return np.argsort(h, axis=1, kind="stable")
    return order


def first_of_orders(h: np.ndarray, budgets: Sequence[int]) -> np.ndarray:
    """``(n, B, P)`` bool: is item i among the first ``b`` items of row p of the orders
    ``argsort_rows(h)`` (hashes ``h``: P × n)? Found without the orders where a row's values are
    distinct: its first ``b`` items are those below its ``b``-th smallest value."""
    n_orders, n_items = h.shape
    b = np.asarray(budgets, dtype=np.int64)
    ranked = np.sort(h, axis=1)
    if n_items == 0 or (ranked[:, 1:] == ranked[:, :-1]).any():  # repeats: the stable orders
        pos = np.empty((n_orders, n_items), dtype=np.int64)
        np.put_along_axis(pos, argsort_rows(h), np.arange(n_items)[None, :], axis=1)
        return pos.T[:, None, :] < b[None, :, None]
    below = ranked[:, np.clip(b, 0, n_items - 1)].T  # (B, P) the b-th smallest value of each row
    return (h.T[:, None, :] < below[None, :, :]) | (b >= n_items)[None, :, None]


def one_variant_orders(item_keys: np.ndarray, group_codes: np.ndarray, group_keys: np.ndarray, seed: int, reps: int) -> np.ndarray:
    """``(reps, G)`` item indices: one variant per group, groups in a per-rep order.

    In repetition ``p`` each group keeps the variant with the smallest hash of (p, item id);
    the kept variants are ordered by a hash of (p, group key). ``group_codes[i]`` is item i's
    group in ``0..G-1`` and ``group_keys[g]`` the hash key of group g.
    """
    n_groups = len(group_keys)
    h_item = hashed_ranks(item_keys, seed, streams.ONE_VARIANT_ITEMS, reps)  # (P, n)
    # smallest hash within each group (the first variant on a tie): items grouped once, then a
    # per-group minimum of the hashes and of the positions that reach it
    by_group = np.argsort(group_codes, kind="stable")  # (n,) groups in order, items ascending
    starts = np.flatnonzero(np.r_[True, np.diff(group_codes[by_group]) != 0])  # (G,)
    if len(by_group) == 0 and n_groups == 0:
        return np.zeros((reps, 0), dtype=np.intp)
    if len(by_group) == 0 or len(starts) != n_groups:
        raise ValueError(f"one_variant_orders: every one of the {n_groups} groups needs an item")
    h_sorted = h_item[:, by_group]  # (P, n)
    lowest = np.minimum.reduceat(h_sorted, starts, axis=1)  # (P, G)
    sizes = np.diff(np.r_[starts, len(by_group)])
    at_min = h_sorted == np.repeat(lowest, sizes, axis=1)
    first = np.minimum.reduceat(np.where(at_min, np.arange(len(by_group)), len(by_group)), starts, axis=1)
    chosen = by_group[first]  # (P, G): column g = chosen item of group g
    h_group = hashed_ranks(group_keys, seed, streams.ONE_VARIANT_GROUPS, reps)  # (P, G)
    return np.take_along_axis(chosen, argsort_rows(h_group), axis=1)


# --------------------------------------------------------------------------- signals
def plurality_agreement(answers: np.ndarray) -> np.ndarray:
    """``(T, n)`` bool: does checkpoint c give item i's plurality answer over the grid?

    ``answers`` holds integer answer codes (equal code = equal normalized answer string; the
    empty answer is an answer like any other). Plurality ties go to the answer that occurs
    first in checkpoint order (ascending step).
    """
    answers = np.asarray(answers)
    n_ckpt, n_items = answers.shape
    if n_ckpt == 0 or n_items == 0:
        return np.zeros(answers.shape, dtype=bool)
    # per item, the checkpoints' answers sorted (stable: equal answers keep checkpoint order), so
    # every distinct answer is one run whose first element is its first checkpoint
    by_item = np.ascontiguousarray(answers.T)  # (n, T)
    ranked, order = _sorted_with_checkpoints(by_item)
    starts = np.ones(ranked.shape, dtype=bool)
    starts[1:] = ranked[1:] != ranked[:-1]
    starts[::n_ckpt] = True  # runs never cross items
    run_at = np.flatnonzero(starts)  # (R,) flat position of each run's first element
    votes = np.diff(np.r_[run_at, ranked.size])  # (R,) checkpoints giving the run's answer
    first = order[run_at]  # (R,) its first checkpoint
    # plurality: most votes, ties to the answer that occurs first (one key, unique per item)
    key = votes * (n_ckpt + 1) + (n_ckpt - first)
    best = np.maximum.reduceat(key, np.searchsorted(run_at, np.arange(0, ranked.size, n_ckpt)))  # (n,)
    best_first = n_ckpt - best % (n_ckpt + 1)  # (n,) first checkpoint of each item's plurality
    plurality = by_item[np.arange(n_items), best_first]
    return answers == plurality[None, :]


def _sorted_with_checkpoints(by_item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``by_item`` (n × T) sorted stably, flattened: ``(n·T,)`` values and the
    ``(n·T,)`` checkpoint each came from. Integer codes sort as one key ``code·T + checkpoint``
    (unique in a row, so any sort is the stable one); other values by a stable argsort."""
    T = by_item.shape[1]
    bound = np.iinfo(np.int64).max // (2 * T + 2)
    if by_item.dtype.kind in "iu" and -bound < int(by_item.min()) and int(by_item.max()) < bound:
        key = by_item.astype(np.int64) * T + np.arange(T)
        key.sort(axis=1)
        ranked = key // T
        return ranked.ravel(), (key - ranked * T).ravel()
    order = np.argsort(by_item, axis=1, kind="stable")
    return np.take_along_axis(by_item, order, axis=1).ravel(), order.ravel()


def answer_concentration(answers: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per checkpoint (row of ``answers``, ``(T, n)`` integer answer codes; ``correct`` the
    same shape): ``(share, precision, top)``, each ``(T,)`` — the share of the ``n`` items given
    the checkpoint's most common answer (the empty answer counts like any other, as for
    agreement), the share of those items that answer is right on, and its code. A tie for the
    most common answer goes to the one right on fewer items (the flag errs towards saying);
    ``n == 0`` gives shares of 0. Sort-based: no (T × distinct answers) table."""
    answers = np.asarray(answers)
    correct = np.asarray(correct, dtype=bool)
    T, n = answers.shape
    if T == 0 or n == 0:
        zeros = np.zeros(T)
        return zeros, zeros.copy(), np.zeros(T, dtype=answers.dtype)
    order = np.argsort(answers, axis=1, kind="stable")
    ranked = np.take_along_axis(answers, order, axis=1).ravel()
    right = np.take_along_axis(correct, order, axis=1).ravel().astype(np.int64)
    starts = np.ones(T * n, dtype=bool)
    starts[1:] = ranked[1:] != ranked[:-1]
    starts[::n] = True  # runs never cross checkpoints
    run_at = np.flatnonzero(starts)
    counts = np.diff(np.r_[run_at, T * n])  # (R,) items given the run's answer
    hits = np.add.reduceat(right, run_at)  # (R,) of them right
    row = run_at // n
    # per checkpoint: most items first, then fewest right (one key, the largest wins)
    key = counts * (n + 1) + (n - hits)
    best_key = np.maximum.reduceat(key, np.searchsorted(run_at, np.arange(0, T * n, n)))
    best = np.flatnonzero(key == best_key[row])
    best = best[np.r_[True, row[best][1:] != row[best][:-1]]]  # the first such run of each row
    share = counts[best] / n
    precision = hits[best] / counts[best]
    return share, precision, ranked[run_at[best]]


def degenerate_checkpoints(
    answers: np.ndarray, correct: np.ndarray, share: float, min_items: int, precision: float, distinct: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(flagged, shares, precisions)`` (each ``(T,)``): a checkpoint is flagged when it gives
    one answer to ``share`` or more of its ``n >= min_items`` items — and to at least twice the
    ``1/K`` a checkpoint answering at random among the ``K`` answers of the grid (``distinct``,
    default: those of ``answers``) would give its most common one, so a few-label task needs
    more — and that answer is right on under ``precision`` of the items it is given
    (:data:`ckptsel.defaults.DEGENERATE_SHARE`)."""
    shares, precisions, _ = answer_concentration(answers, correct)
    answers = np.asarray(answers)
    k = len(np.unique(answers)) if distinct is None else distinct
    bar = max(share, 2.0 / max(k, 1))
    flagged = (answers.shape[1] >= min_items) & (shares >= bar) & (precisions < precision)
    return flagged, shares, precisions


# --------------------------------------------------------------------------- rules
def tie_probabilities(scores: np.ndarray, maximize: bool = True) -> np.ndarray:
    """Selection probabilities along axis 0: uniform over the exactly tied best checkpoints."""
    best = scores.max(axis=0, keepdims=True) if maximize else scores.min(axis=0, keepdims=True)
    tied = scores == best
    return tied / tied.sum(axis=0, keepdims=True)


class NestedSubsets:
    """Nested subsets — the first ``n`` items of each order row, for every budget ``n`` — as
    0/1 masks, so that the score of every checkpoint on every subset is one matrix product.

    Integer signals (correct / agreeing counts) are summed in float32, which is exact below
    2**24 items; float signals (NLL sums) in float64, with identical checkpoint rows summed
    once so that exactly equal checkpoints always tie exactly. :meth:`count_sums` and
    :meth:`ordered_sums` sum many signals (e.g. every trajectory of a pool) in one product.
    """

    def __init__(self, orders: np.ndarray, budgets: Sequence[int], n_items: int):
        pos = np.full((orders.shape[0], n_items), np.iinfo(np.int64).max)
        ranks = np.broadcast_to(np.arange(orders.shape[1]), orders.shape)
        np.put_along_axis(pos, orders, ranks, axis=1)
        budgets = np.asarray(budgets, dtype=np.int64)
        self._set(pos.T[:, None, :] < budgets[None, :, None], budgets)

    @classmethod
    def of_hashes(cls, h: np.ndarray, budgets: Sequence[int]) -> NestedSubsets:
        """The subsets of the orders ``argsort_rows(h)`` (``h``: P × n hashes), without sorting
        the items (:func:`first_of_orders`)."""
        subsets = cls.__new__(cls)
        subsets._set(first_of_orders(h, budgets), np.asarray(budgets, dtype=np.int64))
        return subsets

    def _set(self, inside: np.ndarray, budgets: np.ndarray) -> None:
        """The masks from ``inside`` ``(n, B, P)``: is item i in the subset of budget b, order p?"""
        n_items, _, self.n_orders = inside.shape
        self.budgets = budgets
        self.mask64 = inside.reshape(n_items, -1).astype(np.float64)  # (n, B·P)
        self.mask32 = inside.reshape(n_items, -1).astype(np.float32)

    def _unflatten(self, flat: np.ndarray) -> np.ndarray:
        """``(T, B·P)`` C-ordered sums → the ``(T, P, B)`` view of them."""
        return flat.reshape(flat.shape[0], len(self.budgets), self.n_orders).transpose(0, 2, 1)

    def sums(self, signal: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
        """``(T, P, B)`` sums of ``signal`` (T × n) over each nested subset.

        ``first`` (float signals only): :func:`first_identical_row` of ``signal``, when known.
        """
        if signal.dtype.kind in "biu":
            return self.count_sums([signal])[0].astype(np.float64)
        return self._unflatten(weighted_sums(signal, self.mask64, first))

    def count_sums(self, signals: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``(T_k, P, B)`` float32 sums of each integer signal ``(T_k, n)``: one float32 product for
        all of them (exact: every partial sum is an integer below 2**24)."""
        rows = np.concatenate([np.asarray(s, dtype=np.float32) for s in signals])  # (ΣT_k, n)
        flat = rows @ self.mask32  # (ΣT_k, B·P)
        ends = np.cumsum([s.shape[0] for s in signals])
        return [self._unflatten(flat[end - s.shape[0] : end]) for s, end in zip(signals, ends, strict=True)]

    def ordered_sums(self, signals: Sequence[np.ndarray], firsts: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``(T_k, P, B)`` sums of float signals ``(T_k, n)`` (``firsts``: their
        :func:`first_identical_row`), choosing exactly as :meth:`sums` does, in fewer products.

        The distinct rows of all the signals go through one float64 product. Its sums may differ
        from :meth:`sums` in the last bits (the additions come in another order), never in how a
        signal's rows compare on any subset: every order of summing n terms is within
        ``E = γ_n Σ|x|`` of the exact sum, so two rows whose sums here differ by more than ``4E``
        compare the same way in both. A signal whose distinct rows come closer than that (twice
        that, for safety) on some subset is summed again by :meth:`sums`; identical rows get
        identical sums either way. So the largest/smallest rows and exact ties, on the subsets and
        on any subset of the rows (thinning), are those of :meth:`sums`.
        """
        unique = [np.flatnonzero(f == np.arange(len(f))) for f in firsts]
        flat = np.concatenate([a[u] for a, u in zip(signals, unique, strict=True)]) @ self.mask64  # (ΣU_k, B·P)
        ends = np.cumsum([len(u) for u in unique])
        out = []
        for a, f, u, end in zip(signals, firsts, unique, ends, strict=True):
            mine = flat[end - len(u) : end]  # (U, B·P)
            n = a.shape[1]
            err = 2.0 * (n * 2.0**-53 / (1.0 - n * 2.0**-53)) * np.abs(a).sum(axis=1).max(initial=0.0)
            apart = len(u) < 2 or bool((np.diff(np.sort(mine, axis=0), axis=0) > 8.0 * err).all())
            if not apart:  # too close to tell (or not finite): the sums of :meth:`sums`
                out.append(self.sums(a, f))
                continue
            sums = np.zeros((a.shape[0], mine.shape[1]))
            sums[u] = mine
            out.append(self._unflatten(sums[f]))
        return out


def first_identical_row(signal: np.ndarray) -> np.ndarray:
    """``(T,)`` index of the first row equal to each row (itself when unique; 0 for a row that
    equals no row, not even itself, i.e. holds a NaN).

    Row pairs are screened on their first few columns; only pairs that pass are compared whole.
    """
    T = signal.shape[0]
    head = signal[:, :4]
    i, j = np.nonzero((head[:, None, :] == head[None, :, :]).all(axis=2))
    i, j = i[j <= i], j[j <= i]
    same = (signal[i] == signal[j]).all(axis=1)
    first = np.full(T, T)
    np.minimum.at(first, i[same], j[same])
    first[first == T] = 0
    return first


def weighted_sums(signal: np.ndarray, weights: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
    """``(T, R)`` = ``signal`` (T × n) @ ``weights`` (n × R) in float64, with identical checkpoint
    rows summed once so that exactly equal checkpoints tie exactly (float NLL sums).

    ``first``: :func:`first_identical_row` of ``signal``, when the caller already has it."""
    first = first_identical_row(signal) if first is None else first
    unique_rows = np.flatnonzero(first == np.arange(signal.shape[0]))
    out = np.zeros((signal.shape[0], weights.shape[1]))
    out[unique_rows] = signal[unique_rows] @ weights
    return out[first]


def prefix_sums(signal: np.ndarray, orders: np.ndarray, budgets: Sequence[int]) -> np.ndarray:
    """``(T, P, B)``: sum of ``signal[:, i]`` over the first ``n`` items of each order row."""
    return NestedSubsets(orders, budgets, signal.shape[1]).sums(signal)


# --------------------------------------------------------------------------- thinning
def thinned_indices(n_checkpoints: int, k: int, first: int = 0) -> np.ndarray:
    """Every k-th checkpoint counted back from the final one (which is always kept), of the rows
    ``first`` to ``n_checkpoints - 1`` (the rows before ``first``, averages, are never kept)."""
    return np.arange(n_checkpoints - 1, first - 1, -k)[::-1]


def agreement_with_checkpoints(answers: np.ndarray, first: int = 0) -> np.ndarray:
    """``(T, n)`` bool: does row c give item i's plurality answer over the checkpoint rows
    ``first:`` (:func:`plurality_agreement`)? The rows before ``first`` (averages) are scored
    against the checkpoints' plurality and never vote."""
    if first == 0:
        return plurality_agreement(answers)
    answers = np.asarray(answers)
    voters = answers[first:]
    if voters.shape[0] == 0 or voters.shape[1] == 0:
        return np.zeros(answers.shape, dtype=bool)
    plural = voters[np.argmax(plurality_agreement(voters), axis=0), np.arange(voters.shape[1])]  # (n,)
    return answers == plural[None, :]
