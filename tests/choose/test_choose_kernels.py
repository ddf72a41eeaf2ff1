"""The fast kernels of ``ckptsel.choose.core`` against their plain definitions (random shapes,
repeated values and ties included): the frozen choices rest on them being the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ckptsel.choose import core
from ckptsel.choose.frozen import FrozenChoices
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.records.load import load_test, load_validation


def plain_plurality(answers: np.ndarray) -> np.ndarray:
    votes = (answers[:, None, :] == answers[None, :, :]).sum(axis=1)
    first_best = np.argmax(votes == votes.max(axis=0, keepdims=True), axis=0)
    return answers == np.take_along_axis(answers, first_best[None, :], axis=0)[0][None, :]


def plain_one_variant(keys, codes, group_keys, seed, reps):
    h = core.hashed_ranks(keys, seed, 2, reps)  # streams.ONE_VARIANT_ITEMS
    order = np.lexsort((h, np.broadcast_to(codes, h.shape)), axis=1)
    sorted_groups = codes[order]
    first = np.ones_like(sorted_groups, dtype=bool)
    first[:, 1:] = sorted_groups[:, 1:] != sorted_groups[:, :-1]
    chosen = order[first].reshape(reps, len(group_keys))
    group_order = np.argsort(core.hashed_ranks(group_keys, seed, 3, reps), axis=1, kind="stable")
    return np.take_along_axis(chosen, group_order, axis=1)


@pytest.mark.parametrize("trial", range(40))
def test_kernels_match_their_plain_definitions(trial):
    rng = np.random.default_rng(trial)
    for _ in range(25):
        T, n = int(rng.integers(1, 12)), int(rng.integers(1, 30))
        answers = rng.integers(-3, int(rng.integers(1, 5)), size=(T, n)) * 10 ** int(rng.integers(0, 17))
        np.testing.assert_array_equal(core.plurality_agreement(answers), plain_plurality(answers))
        flags = rng.integers(0, 2, size=(T, n)).astype(bool)
        np.testing.assert_array_equal(core.plurality_agreement(flags), plain_plurality(flags))

        signal = rng.integers(0, 3, size=(T, n)).astype(float)
        signal[:, : int(rng.integers(0, 5))] = 0.0  # rows alike in their first columns
        if rng.random() < 0.3:
            signal[rng.integers(0, T), rng.integers(0, n)] = np.nan  # equals no row, not even itself
        same = (signal[:, None, :] == signal[None, :, :]).all(axis=2)
        np.testing.assert_array_equal(core.first_identical_row(signal), np.argmax(same, axis=1))

        keys = rng.integers(0, 2**63, n).astype(np.uint64)
        if rng.random() < 0.3:
            keys[: n // 2] = keys[0]  # repeated hashes: the stable order decides
        reps, seed = int(rng.integers(1, 6)), int(rng.integers(0, 100))
        h = core.hashed_ranks(keys, seed, 1, reps)
        orders = np.argsort(h, axis=1, kind="stable")
        np.testing.assert_array_equal(core.permutations(keys, seed, reps), orders)
        budgets = sorted({int(b) for b in rng.integers(1, n + 1, 3)})
        pos = np.argsort(orders, axis=1)
        np.testing.assert_array_equal(core.first_of_orders(h, budgets), pos.T[:, None, :] < np.array(budgets)[None, :, None])
        nested = core.NestedSubsets(orders, budgets, n)
        np.testing.assert_array_equal(core.NestedSubsets.of_hashes(h, budgets).mask64, nested.mask64)

        n_groups = int(rng.integers(1, n + 1))
        codes = np.r_[np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)]
        rng.shuffle(codes)
        group_keys = rng.integers(0, 2**63, n_groups).astype(np.uint64)
        np.testing.assert_array_equal(
            core.one_variant_orders(keys, codes, group_keys, seed, reps), plain_one_variant(keys, codes, group_keys, seed, reps)
        )


@pytest.mark.parametrize("trial", range(20))
def test_ordered_sums_choose_as_sums_do(trial):
    """One product for many float signals: the same choices (and ties) as summing each alone."""
    rng = np.random.default_rng(100 + trial)
    n, reps = int(rng.integers(8, 60)), int(rng.integers(1, 8))
    orders = core.permutations(rng.integers(0, 2**63, n).astype(np.uint64), trial, reps)
    nested = core.NestedSubsets(orders, sorted({int(b) for b in rng.integers(1, n + 1, 3)}), n)
    signals = []
    for _ in range(4):
        T = int(rng.integers(1, 9))
        s = rng.random((T, n)) * 10.0 ** int(rng.integers(-3, 4))
        if T > 2:
            s[-1] = s[0]  # identical checkpoints tie exactly
            s[1, : n // 2] = s[0, : n // 2]  # equal on part of the items: exact ties on some subsets
        if rng.random() < 0.3:
            s = np.round(s, 1)  # many close and equal sums
        signals.append(s)
    firsts = [core.first_identical_row(s) for s in signals]
    for s, f, got in zip(signals, firsts, nested.ordered_sums(signals, firsts), strict=True):
        want = nested.sums(s, f)
        for maximize in (False, True):
            for rows in (np.arange(len(s)), np.arange(len(s))[::2]):
                np.testing.assert_array_equal(
                    core.tie_probabilities(got[rows], maximize).mean(axis=1), core.tie_probabilities(want[rows], maximize).mean(axis=1)
                )
    ints = [rng.integers(0, 2, (int(rng.integers(1, 6)), n)) for _ in range(3)]
    for s, got in zip(ints, nested.count_sums(ints), strict=True):
        np.testing.assert_array_equal(got, (s @ nested.mask64).reshape(len(s), -1, reps).transpose(0, 2, 1))


def test_frozen_vectors_group_the_table_by_trajectory():
    table = pd.DataFrame(
        {
            "trajectory": ["b", "a", "b", "a", "b"],
            "scheme": ["nested", "nested", "thin2", "nested", "nested"],
            "rule": ["nll", "accuracy", "nll", "accuracy", "accuracy"],
            "budget": ["32", "full", "32", "full", "32"],
            "step": [20, 10, 30, 30, 20],
            "prob": [1.0, 0.25, 1.0, 0.75, 1.0],
        }
    )
    frozen = FrozenChoices(table=table, settings=ChoiceSettings(), sha256="")
    a = frozen.vectors("a", np.array([10, 20, 30]))
    assert list(a) == [("nested", "accuracy", "full")]
    np.testing.assert_array_equal(a[("nested", "accuracy", "full")], [0.25, 0.0, 0.75])
    b = frozen.vectors("b", np.array([10, 20, 30]))
    assert list(b) == [("nested", "accuracy", "32"), ("nested", "nll", "32"), ("thin2", "nll", "32")]
    np.testing.assert_array_equal(b[("thin2", "nll", "32")], [0.0, 0.0, 1.0])
    with pytest.raises(Exception, match="no frozen choices"):
        frozen.vectors("c", np.array([10]))
    with pytest.raises(Exception, match="no test records"):
        frozen.vectors("b", np.array([10, 20]))


def test_canonical_bytes_equal_the_row_by_row_definition():
    """The hashed form built column-wise equals one f-string per row (floats as repr), for
    -0.0, NaN, tiny and huge values, negative and large steps, and an empty table."""
    import json

    from ckptsel.choose.frozen import COLUMNS, canonical_bytes

    def plain(table, settings):
        lines = [json.dumps(settings.to_dict(), sort_keys=True), ",".join(COLUMNS)]
        for r in table[COLUMNS].itertuples(index=False):
            lines.append(f"{r.trajectory},{r.scheme},{r.rule},{r.budget},{int(r.step)},{float(r.prob)!r}")
        return ("\n".join(lines) + "\n").encode()

    rng = np.random.default_rng(5)
    n = 400
    table = pd.DataFrame(
        {
            "trajectory": rng.choice(["a-s1", "b-s2", "c", "ü-é"], n),
            "scheme": rng.choice(["nested", "thin-2"], n),
            "rule": rng.choice(["accuracy", "nll", "final"], n),
            "budget": rng.choice(["32", "full"], n),
            "step": rng.integers(-5, 10**12, n),
            "prob": rng.choice([0.0, -0.0, np.nan, 1 / 3, 1e-05, 2.5e-300, 1.0, 0.1 + 0.2], n),
        }
    )
    settings = ChoiceSettings()
    assert canonical_bytes(table, settings) == plain(table, settings)
    assert canonical_bytes(table.head(0), settings) == plain(table.head(0), settings)
    assert canonical_bytes(table.iloc[7:], settings) == plain(table.iloc[7:], settings)


def test_pools_on_threads_give_the_one_thread_table(tmp_path, monkeypatch):
    """Validation pools chosen on several threads (map_threads) give the table one thread
    gives, row for row and bit for bit; map_threads keeps the order and re-raises errors."""
    from ckptsel._util import threads
    from ckptsel.choose.choices import choose, pools_of

    import recordsgen as rg

    gen, nll = rg.tables(rg.random_study(np.random.default_rng(8), n_configs=6, seeds=2, tasks=("a", "b", "c")))
    validation = load_validation(rg.write(tmp_path / "records", gen, nll))
    assert len(pools_of(validation)) == 3
    settings = ChoiceSettings(permutations=20)
    monkeypatch.setattr(threads, "WORKERS", 1)
    one = choose(validation, settings)
    monkeypatch.setattr(threads, "WORKERS", 3)
    pd.testing.assert_frame_equal(choose(validation, settings), one)
    assert threads.map_threads(lambda x: x * x, range(9), workers=3) == [x * x for x in range(9)]

    def fails(x):
        if x == 4:
            raise ValueError("four")
        return x

    with pytest.raises(ValueError, match="four"):
        threads.map_threads(fails, range(9), workers=2)


def test_scoring_on_one_thread_gives_the_threaded_scores(tmp_path):
    """score(workers=1) gives every value and per-question utility the threaded scoring (what
    analyze runs) gives, bit for bit."""
    from ckptsel.choose.choices import choose
    from ckptsel.choose.evaluate import score
    from ckptsel.choose.frozen import freeze, load_frozen

    import recordsgen as rg

    gen, nll = rg.tables(rg.random_study(np.random.default_rng(9), n_configs=5, seeds=2, tasks=("a", "b")))
    rec = rg.write(tmp_path / "records", gen, nll)
    validation = load_validation(rec)
    settings = ChoiceSettings(permutations=12)
    freeze(choose(validation, settings), settings, tmp_path / "choices")
    frozen, tests = load_frozen(tmp_path / "choices"), load_test(rec, validation)
    one, threaded = score(frozen, tests, workers=1), score(frozen, tests, workers=3)
    assert one.names == threaded.names and one.values.tobytes() == threaded.values.tobytes()
    assert list(one.utilities) == list(threaded.utilities) == ["a", "b"]
    for task, util in one.utilities.items():
        assert util.tobytes() == threaded.utilities[task].tobytes()
