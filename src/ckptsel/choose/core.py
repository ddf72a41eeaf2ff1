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
    """64-bit keys of strings (first 8 bytes of SHA-256), deterministic across runs."""
    import hashlib

    return np.fromiter(
        (int.from_bytes(hashlib.sha256(v.encode()).digest()[:8], "little") for v in values),
        dtype=np.uint64,
        count=len(values),
    )


def hashed_ranks(item_keys: np.ndarray, seed: int, stream: int, reps: int) -> np.ndarray:
    """``(reps, n)`` hash values of each item for repetition ``p`` of a named stream."""
    rep = np.arange(reps, dtype=np.uint64)
    salt = splitmix64(splitmix64(np.uint64(seed) ^ splitmix64(np.uint64(stream))) + rep)
    return splitmix64(item_keys[None, :] ^ salt[:, None])


def permutations(
    item_keys: np.ndarray, seed: int, reps: int, stream: int = streams.PERMUTATIONS
) -> np.ndarray:
    """``(reps, n)`` orders of the items: each row sorts the items by a per-row hash."""
    h = hashed_ranks(item_keys, seed, stream, reps)
    return np.argsort(h, axis=1, kind="stable")


def one_variant_orders(
    item_keys: np.ndarray, group_codes: np.ndarray, group_keys: np.ndarray, seed: int, reps: int
) -> np.ndarray:
    """``(reps, G)`` item indices: one variant per group, groups in a per-rep order.

    In repetition ``p`` each group keeps the variant with the smallest hash of (p, item id);
    the kept variants are ordered by a hash of (p, group key). ``group_codes[i]`` is item i's
    group in ``0..G-1`` and ``group_keys[g]`` the hash key of group g.
    """
    n_groups = len(group_keys)
    h_item = hashed_ranks(item_keys, seed, streams.ONE_VARIANT_ITEMS, reps)  # (P, n)
    # smallest hash within each group: sort by (group, hash) and take the first of each group
    order = np.lexsort((h_item, np.broadcast_to(group_codes, h_item.shape)), axis=1)
    sorted_groups = group_codes[order]
    first = np.ones_like(sorted_groups, dtype=bool)
    first[:, 1:] = sorted_groups[:, 1:] != sorted_groups[:, :-1]
    chosen = order[first].reshape(reps, n_groups)  # column g = chosen item of group g
    h_group = hashed_ranks(group_keys, seed, streams.ONE_VARIANT_GROUPS, reps)  # (P, G)
    group_order = np.argsort(h_group, axis=1, kind="stable")
    return np.take_along_axis(chosen, group_order, axis=1)


# --------------------------------------------------------------------------- signals
def plurality_agreement(answers: np.ndarray) -> np.ndarray:
    """``(T, n)`` bool: does checkpoint c give item i's plurality answer over the grid?

    ``answers`` holds integer answer codes (equal code = equal normalized answer string; the
    empty answer is an answer like any other). Plurality ties go to the answer that occurs
    first in checkpoint order (ascending step).
    """
    answers = np.asarray(answers)
    # votes[c, i] = how many checkpoints gave the same answer as checkpoint c on item i
    votes = (answers[:, None, :] == answers[None, :, :]).sum(axis=1)
    first_best = np.argmax(votes == votes.max(axis=0, keepdims=True), axis=0)
    plurality = np.take_along_axis(answers, first_best[None, :], axis=0)[0]
    return answers == plurality[None, :]


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
    once so that exactly equal checkpoints always tie exactly.
    """

    def __init__(self, orders: np.ndarray, budgets: Sequence[int], n_items: int):
        self.n_orders = orders.shape[0]
        self.budgets = np.asarray(budgets, dtype=np.int64)
        pos = np.full((self.n_orders, n_items), np.iinfo(np.int64).max)
        ranks = np.broadcast_to(np.arange(orders.shape[1]), orders.shape)
        np.put_along_axis(pos, orders, ranks, axis=1)
        inside = pos.T[:, None, :] < self.budgets[None, :, None]  # (n, B, P)
        self.mask64 = inside.reshape(n_items, -1).astype(np.float64)
        self.mask32 = self.mask64.astype(np.float32)

    def sums(self, signal: np.ndarray) -> np.ndarray:
        """``(T, P, B)`` sums of ``signal`` (T × n) over each nested subset."""
        T = signal.shape[0]
        if signal.dtype.kind in "biu":
            flat = (signal.astype(np.float32) @ self.mask32).astype(np.float64)
        else:
            flat = weighted_sums(signal, self.mask64)
        return flat.reshape(T, len(self.budgets), self.n_orders).transpose(0, 2, 1)


def first_identical_row(signal: np.ndarray) -> np.ndarray:
    """``(T,)`` index of the first row equal to each row (itself when unique)."""
    same = (signal[:, None, :] == signal[None, :, :]).all(axis=2)
    return np.argmax(same, axis=1)


def weighted_sums(signal: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(T, R)`` = ``signal`` (T × n) @ ``weights`` (n × R) in float64, with identical checkpoint
    rows summed once so that exactly equal checkpoints tie exactly (float NLL sums)."""
    first = first_identical_row(signal)
    unique_rows = np.flatnonzero(first == np.arange(signal.shape[0]))
    out = np.zeros((signal.shape[0], weights.shape[1]))
    out[unique_rows] = signal[unique_rows] @ weights
    return out[first]


def prefix_sums(signal: np.ndarray, orders: np.ndarray, budgets: Sequence[int]) -> np.ndarray:
    """``(T, P, B)``: sum of ``signal[:, i]`` over the first ``n`` items of each order row."""
    return NestedSubsets(orders, budgets, signal.shape[1]).sums(signal)


# --------------------------------------------------------------------------- thinning
def thinned_indices(n_checkpoints: int, k: int) -> np.ndarray:
    """Every k-th checkpoint counted back from the final one (which is always kept)."""
    return np.arange(n_checkpoints - 1, -1, -k)[::-1]
