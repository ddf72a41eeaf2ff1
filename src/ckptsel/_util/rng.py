"""The one table of random streams: every random draw in ckptsel comes from a named stream.

Two kinds of streams, each numbered on its own:

* **hash streams** salt the SplitMix64 hashes of :func:`ckptsel.choose.core.hashed_ranks`, which
  order items by a hash of (seed, stream, repetition, item id) — so an item's place does not
  depend on which other items are present;
* **generator streams** key NumPy generators, ``np.random.default_rng([seed, stream, *more])``
  (:func:`generator`); the ``more`` keys (task, chunk, budget, …) are documented where used.

A number is never reused for another purpose within its kind: two quantities that must share
draws (paired differences) use the same stream on purpose, and no others do.
"""

from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------- hash streams
PERMUTATIONS = 1  # nested validation orders of the eligible pool (SPEC §4)
ONE_VARIANT_ITEMS = 2  # which variant of each group a one-variant repetition keeps (SPEC §6)
ONE_VARIANT_GROUPS = 3  # the order of the groups in that repetition
MATCHED_HALF = 4  # the test-pool halves of the matched-half diagnostic (SPEC §5)
SELECT_HALVES = 7  # ``select``'s split-validation partitions of the validation pool

# --------------------------------------------------------------------------- generator streams
CONFIGURATION_DRAWS = 1  # configuration bootstrap counts ([seed, 1, family])
QUESTION_DRAWS = 2  # test-question bootstrap counts ([seed, 2, task, chunk])
WILD_WEIGHTS = 3  # Webb weights of the wild cluster bootstrap ([seed, 3, family])
SELECT_VALIDATION_DRAWS = 5  # ``select``: validation-question weights ([seed, 5])
SELECT_TEST_DRAWS = 6  # ``select``: test-question weights ([seed, 6])
PAIRED_DRAWS = 8  # ``compare``: clustered paired bootstrap ([seed, 8, split, chunk])
PLAN_DRAWS = 9  # ``plan``: pilot resamples ([seed, 9, trajectory, budget, chunk(, half)])
PLAN_HALVES = 10  # ``plan --method split``: the pilot's two halves ([seed, 10, trajectory])
PLAN_PROMISE = 11  # ``plan --method calibrated``: fresh-set noise ([seed, 11, trajectory, 0]), critical value ([..., 1])
SELECT_WINNER = 12  # ``select``: MCS bootstrap ([0, 12, 0], a fixed stream whatever --seed)
# the sign-flip test beyond 16 units (stats.exact.sign_flip_p): configurations ([seed, 13, 0, family]),
# test-question clusters ([seed, 13, 1, task index + 1]; pooled: [seed, 13, 1, 0]), joint ([seed, 13, 2, source])
SIGN_FLIPS = 13

# sub-streams of PAIRED_DRAWS: one per split, so the two splits never share draws
COMPARE_SPLITS = {"validation": 1, "test": 2}


def generator(seed: int, stream: int, *more: int) -> np.random.Generator:
    """The NumPy generator of ``stream`` (and its sub-keys ``more``) for ``seed``."""
    return np.random.default_rng([seed, stream, *more])
