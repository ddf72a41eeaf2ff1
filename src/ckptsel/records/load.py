"""Load and validate the two records tables (SPEC §2) into per-trajectory arrays.

Validation and test records are loaded by separate calls (:func:`load_validation`,
:func:`load_test`) so that choosing can run — and be frozen — before a single test outcome
is read. Every contract violation raises :class:`CkptselError` naming the file, trajectory,
step and item; validation items that are incomplete are excluded and counted, never skipped
silently.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ckptsel._util.locations import Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.records import cache, units
from ckptsel.records.checks import (
    NLL_CODED,
    Grid,
    TestNll,
    check_nll_values,
    check_test_nll,
    check_tokens_constant,
    checked,
    describe,
    distinct,
    items_digest,
    string_codes,
)
from ckptsel.records.codec import read_schema, read_table
from ckptsel.records.scan import read_rows
from ckptsel.records.schema import FINAL_STEPS_FILE, GENERATION_COLUMNS, MATCHED_WINDOW, NLL_COLUMNS, NLL_FILE, SPLITS
from ckptsel.records.weights import declared_final_steps


def uncached() -> contextlib.AbstractContextManager[None]:
    """Every load inside this block computes from the records files themselves, neither reading
    nor writing the caches (``verify``: a cache it cannot authenticate is never a source of what
    it checks): the caches' switch, for the stages outside ``records``."""
    return cache.uncached()


@dataclass
class ValidationData:
    """One trajectory's eligible validation pool, as arrays over (checkpoints × items)."""

    trajectory: str
    configuration: str
    task: str
    steps: np.ndarray  # (T,) ascending (averages' reserved negative steps first); steps[-1] is the final checkpoint
    item_ids: np.ndarray  # (n,) eligible items, sorted by id
    groups: np.ndarray  # (n,)
    correct: np.ndarray  # (T, n) bool
    answers: np.ndarray  # (T, n) int answer codes (equal code = equal answer string)
    nll: dict[int, np.ndarray]  # window -> (T, n) float64 nll_sum
    n_tokens: dict[int, np.ndarray]  # window -> (n,) int64
    exclusions: dict[str, int] = field(default_factory=dict)  # reason -> excluded items


@dataclass
class TestData:
    """One trajectory's test pool (every item is present for every checkpoint)."""

    trajectory: str
    configuration: str
    task: str
    steps: np.ndarray  # (T,)
    item_ids: np.ndarray  # (N,) sorted
    subtasks: np.ndarray  # (N,)
    correct: np.ndarray  # (T, N) bool
    answers: np.ndarray  # (T, N) int codes
    groups: np.ndarray | None = None  # (N,) cluster of each item (the `group` column)


# --------------------------------------------------------------------------- reading
def _read(records_dir: Path, kind: str, columns: dict[str, str], split: str | None) -> tuple[pa.Table, Path]:
    """Read one kind of records (single file, units or both), check its columns and types,
    keep one split; returns the table and the path that error messages name.

    String columns are read dictionary-encoded (an order of magnitude faster than plain
    strings on millions of rows) and stay so; :func:`string_codes` turns them into integers.
    """
    records_dir = as_location(records_dir)
    path = units.display_path(records_dir, kind)
    if not units.exists(records_dir, kind):
        name = units.SINGLE_FILES[kind]
        raise CkptselError(f"{records_dir / name}: records file not found (expected {name} or {units.UNITS_DIR}/{kind}/ in {records_dir})")
    single = units.single_file(records_dir, kind)
    if single is not None:
        schema = read_schema(single)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise CkptselError(f"{single}: missing column(s) {', '.join(missing)}")
        _check_splits(single)
    strings = [c for c, kind_ in columns.items() if kind_ == "string"]
    filters = [("split", "=", split)] if split else None
    table = read_rows(records_dir, kind, columns=list(columns), filters=filters, read_dictionary=strings)
    pa.default_memory_pool().release_unused()  # the read's scratch buffers: back to the system
    return checked(table, columns, path), path


def _check_splits(path: Location) -> None:
    """Unknown split names are an error for the whole file (reads only the split column)."""
    info = path.info()
    where = os.path.realpath(path) if path.is_local else str(path)
    _check_splits_once(where, path.is_local, info.tag if info else "", info.size if info else -1)


@functools.lru_cache(maxsize=16)
def _check_splits_once(where: str, local: bool, _tag: str, _size: int) -> None:
    path = Location(Path(where)) if local else Location(where)
    splits = read_table(path, columns=["split"], read_dictionary=["split"]).column("split")
    _, values = string_codes(splits)
    unknown = sorted(set(values.tolist()) - set(SPLITS))
    if unknown:
        raise CkptselError(f"{path}: unknown split name(s) {unknown}; expected one of {list(SPLITS)}")


def _final_steps(records_dir: Location) -> dict[str, int]:
    """Expected final step per trajectory, when the study declares them."""
    for candidate in (records_dir / FINAL_STEPS_FILE, records_dir.parent / FINAL_STEPS_FILE):
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text())
                return {str(k): int(v) for k, v in data.items()}
            except (ValueError, AttributeError, TypeError) as err:
                raise CkptselError(f"{candidate}: expected a JSON object {{trajectory: step}} ({err})") from err
    return {}


def _place(grid: Grid, rows: np.ndarray, steps: np.ndarray, item_index: np.ndarray):
    """Map rows to (checkpoint index, item index) on this trajectory's grid."""
    return np.searchsorted(steps, grid.step[rows]), item_index[grid.item_code[rows]]


def _generation_matrices(g: Grid, rows, steps, item_index, item_ids, traj: str, item_field: str):
    """One trajectory's generation rows as (T, n) present/correct/answer-code matrices, plus
    a per-item column (``group`` or ``subtask``) that must not vary across checkpoints."""
    T, n = len(steps), len(item_ids)
    ci, ii = _place(g, rows, steps, item_index)
    present = np.zeros((T, n), dtype=bool)
    present[ci, ii] = True
    correct = np.zeros((T, n), dtype=bool)
    correct[ci, ii] = g.correct[rows]
    answers = np.full((T, n), -1, dtype=np.int64)
    answers[ci, ii] = g.codes["answer"][rows]
    codes = g.codes[item_field][rows]
    per_item = np.full(n, -1, dtype=np.int64)
    per_item[ii] = codes
    mismatch = per_item[ii] != codes
    if mismatch.any():
        i = int(ii[np.flatnonzero(mismatch)[0]])
        raise CkptselError(f"{describe(g.path, traj, item=str(item_ids[i]))}: {item_field!r} differs across checkpoints")
    return present, correct, answers, g.values[item_field][np.maximum(per_item, 0)]


def _item_groups(g: Grid, rows, steps, item_index, item_ids, traj: str) -> np.ndarray:
    """``(n,)`` the ``group`` of each item (must not vary across checkpoints)."""
    return _generation_matrices(g, rows, steps, item_index, item_ids, traj, "group")[3]


def _generation_grid(records_dir: Path, split: str) -> Grid:
    """One split of the generation records, validated and placed on its grid."""
    gen, gpath = _read(records_dir, "generations", GENERATION_COLUMNS, split)
    if gen.num_rows == 0:
        raise CkptselError(f"{gpath}: no {split} records")
    grid = Grid(gen, gpath)
    del gen
    return _released(grid)


def _trajectories(g: Grid, records_dir: Path):
    """Per trajectory: its name, rows, identity (``trajectory``, ``configuration``, ``task``,
    ``steps``: the fields every loaded record type starts with), steps, item columns and ids,
    with the declared final step checked."""
    expected = _final_steps(records_dir)
    _check_final_names(expected, g, records_dir)
    measured = declared_final_steps(records_dir)
    for t, traj in enumerate(g.trajs):
        rows = g.rows_of(t)
        configuration, task = g.attrs(rows, traj)
        steps, item_codes, item_index = g.axes(rows)
        _check_final(traj, steps, expected, g.path)
        _check_measured_final(traj, steps, measured, expected, g.path)
        identity = {"trajectory": str(traj), "configuration": configuration, "task": task, "steps": steps}
        yield traj, rows, identity, steps, item_index, g.items[item_codes]


def _check_final_names(expected: dict[str, int], g: Grid, records_dir: Path) -> None:
    """A declared final step for a trajectory without records is an error, not ignored."""
    unknown = sorted(set(expected) - {str(t) for t in g.trajs})
    if unknown:
        raise CkptselError(
            f"{FINAL_STEPS_FILE} (beside {records_dir}): trajectory {unknown[0]!r} is declared but has no records in {g.path.name}"
        )


def _check_final(traj: str, steps: np.ndarray, expected: dict[str, int], path: Path) -> None:
    if traj in expected and steps[-1] != expected[traj]:
        raise CkptselError(
            f"{describe(path, traj)}: invalid trajectory — its final checkpoint (step "
            f"{expected[traj]}, declared in {FINAL_STEPS_FILE}) has no records; the largest "
            f"recorded step is {int(steps[-1])}"
        )


def _check_measured_final(traj: str, steps: np.ndarray, measured: dict[str, int], expected: dict[str, int], path: Path) -> None:
    """The run's final checkpoint, as its units declare it (the largest checkpoint of the run
    folder when it was measured: :mod:`ckptsel.records.weights`), must have records; a final
    step declared in ``final_steps.json`` takes precedence."""
    if traj in expected or traj not in measured or measured[traj] <= int(steps[-1]):
        return
    raise CkptselError(
        f"{describe(path, traj)}: its final checkpoint (step {measured[traj]}, the last in "
        f"its run folder when it was measured) has no records (last recorded: step "
        f"{int(steps[-1])}); measure it (ckptsel measure resumes where it stopped), or "
        f"declare the run's final step in {FINAL_STEPS_FILE}"
    )


# --------------------------------------------------------------------------- public loaders


class _NllTable:
    """The validation NLL rows, ready to be placed on each trajectory's grid."""

    def __init__(self, npath: Path, table: pa.Table, gen_items: np.ndarray):
        self.path = npath
        self.grid = Grid(table, npath, key_extra="window", coded=NLL_CODED)
        check_nll_values(table, self.grid, npath)
        self.windows = table.column("window").to_numpy()
        self.nll_sum = table.column("nll_sum").to_numpy()
        self.n_tokens = table.column("n_tokens").to_numpy()
        self.traj_index = {name: i for i, name in enumerate(self.grid.trajs)}
        # NLL item codes -> generation item codes (-1: the item has no generation record)
        self.to_gen = pd.Index(gen_items).get_indexer(self.grid.items)

    def has(self, traj: str) -> bool:
        """Whether ``traj`` has validation NLL rows (a measured trajectory beside ingested ones
        may; the rules that need NLL skip a trajectory that has none, and say so)."""
        return traj in self.traj_index

    def trajectory(self, traj: str, steps, item_index, item_ids, gpath: Path):
        """``(nll, n_tokens, present)`` per window for one trajectory's (T, n) grid."""
        nl = self.grid
        if traj not in self.traj_index:
            raise CkptselError(f"{describe(self.path, traj)}: no validation NLL records for this trajectory")
        nrows = nl.rows_of(self.traj_index[traj])
        nsteps = nl.axes(nrows)[0]
        if not np.array_equal(steps, nsteps):
            raise CkptselError(
                f"trajectory {traj!r}: generation and NLL tables disagree on its validation "
                f"checkpoints (only in {gpath.name}: {sorted(set(steps) - set(nsteps))}; only in "
                f"{self.path.name}: {sorted(set(nsteps) - set(steps))})"
            )
        T, n = len(steps), len(item_ids)
        index = item_index[self.to_gen]
        index[self.to_gen < 0] = -1
        nci, nii = np.searchsorted(steps, nl.step[nrows]), index[nl.item_code[nrows]]
        known = nii >= 0
        nll_by_w, tok_by_w, present_by_w = {}, {}, {}
        for w in distinct(self.windows[nrows]):
            sel = known & (self.windows[nrows] == w)
            r = nrows[sel]
            mat = np.zeros((T, n))
            mat[nci[sel], nii[sel]] = self.nll_sum[r]
            have = np.zeros((T, n), dtype=bool)
            have[nci[sel], nii[sel]] = True
            tok = np.full((T, n), -1, dtype=np.int64)
            tok[nci[sel], nii[sel]] = self.n_tokens[r]
            check_tokens_constant(tok, have, self.path, traj, item_ids, steps, int(w))
            nll_by_w[int(w)] = mat
            tok_by_w[int(w)] = np.where(have, tok, -1).max(axis=0)
            present_by_w[int(w)] = have
        if MATCHED_WINDOW not in nll_by_w:
            raise CkptselError(f"{describe(self.path, traj)}: no validation NLL rows with window={MATCHED_WINDOW}")
        return nll_by_w, tok_by_w, present_by_w


def has_validation_nll(records_dir: Path) -> bool:
    """Whether the study has validation NLL records (``ingest lm-eval`` alone gives none)."""
    if not units.exists(records_dir, "nll"):
        return False
    npath = units.single_file(records_dir, "nll")
    if npath is not None:
        if "split" not in read_schema(npath).names:
            raise CkptselError(f"{npath}: missing column(s) split")
        _check_splits(npath)
    rows = read_rows(records_dir, "nll", columns=["split"], filters=[("split", "=", "validation")])
    return rows is not None and rows.num_rows > 0


def _validation_nll(records_dir: Location, gen_items: np.ndarray) -> _NllTable | None:
    """The validation NLL rows, read once (``None`` when the study has none, as
    :func:`has_validation_nll` says)."""
    if not units.exists(records_dir, "nll"):
        return None
    table, npath = _read(records_dir, "nll", NLL_COLUMNS, "validation")
    nll = _NllTable(npath, table, gen_items) if table.num_rows else None
    del table
    return _released(nll)


def load_validation(records_dir: Path) -> list[ValidationData]:
    """Validation records of every trajectory, with eligibility applied (SPEC §2, §4).

    A study without any validation NLL records (e.g. generations imported from
    lm-evaluation-harness) is analysed without the matched-NLL rule: ``nll`` stays empty.
    A trajectory without NLL rows beside trajectories with them (an ingested harness's
    generations next to a measured run) is read the same way: its ``nll`` stays empty.
    """
    records_dir = as_location(records_dir)
    return cache.cached(
        records_dir,
        "validation",
        lambda: _released(_validation_records(records_dir)),
        cache.encode_validation,
        functools.partial(cache.decode_validation, make=ValidationData),
    )


def _released(result):
    """``result``, after Arrow's memory pool gave back what the dropped tables held (freed,
    its allocator would keep it from NumPy, which allocates elsewhere)."""
    pa.default_memory_pool().release_unused()
    return result


def _validation_records(records_dir: Location) -> list[ValidationData]:
    """:func:`load_validation`'s work (what :mod:`ckptsel.records.cache.memo` caches)."""
    g = _generation_grid(records_dir, "validation")
    gpath = g.path
    nll = _validation_nll(records_dir, g.items)

    out = []
    for traj, rows, identity, steps, item_index, item_ids in _trajectories(g, records_dir):
        present, corr, ans, groups = _generation_matrices(g, rows, steps, item_index, item_ids, traj, "group")
        gen_complete = present.all(axis=0)
        if nll is None or not nll.has(traj):  # no NLL at all, or none for this trajectory
            nll_by_w, tok_by_w, nll_present = {}, {}, {}
            eligible = gen_complete
            exclusions = {"missing_generation": int((~gen_complete).sum()), "missing_nll": 0, "empty_response": 0}
        else:
            nll_by_w, tok_by_w, nll_present = nll.trajectory(traj, steps, item_index, item_ids, gpath)
            nll_complete = nll_present[MATCHED_WINDOW].all(axis=0)
            empty = tok_by_w[MATCHED_WINDOW] == 0
            eligible = gen_complete & nll_complete & ~empty
            exclusions = {
                "missing_generation": int((~gen_complete).sum()),
                "missing_nll": int((gen_complete & ~nll_complete).sum()),
                "empty_response": int((gen_complete & nll_complete & empty).sum()),
            }
        if not eligible.any():
            raise CkptselError(
                f"{describe(gpath, traj)}: no eligible validation items (every item lacks a "
                f"generation or NLL record for some checkpoint, or has n_tokens == 0)"
            )
        keep = np.flatnonzero(eligible)
        windows_kept = {}
        tokens_kept = {}
        for w, mat in nll_by_w.items():
            if nll_present[w][:, keep].all():
                windows_kept[w] = mat[:, keep]
                tokens_kept[w] = tok_by_w[w][keep]
        out.append(
            ValidationData(
                **identity,
                item_ids=item_ids[keep].astype(str),
                groups=groups[keep].astype(str),
                correct=corr[:, keep],
                answers=ans[:, keep],
                nll=windows_kept,
                n_tokens=tokens_kept,
                exclusions=exclusions,
            )
        )
    if nll is not None:
        missing = sorted(set(nll.grid.trajs) - {v.trajectory for v in out})
        if missing:
            raise CkptselError(
                f"{nll.path}: trajectory {missing[0]!r} has validation NLL records but no generation records in {gpath.name}"
            )
    return out


_CHOOSING = [0]  # how many choices are being made now (a researcher's rule may be running)
_CHOOSING_LOCK = threading.Lock()


@contextlib.contextmanager
def validation_only():
    """While choices are made: this module's readers refuse test records (a researcher's rule
    runs inside, and sees validation records only)."""
    with _CHOOSING_LOCK:
        _CHOOSING[0] += 1
    try:
        yield
    finally:
        with _CHOOSING_LOCK:
            _CHOOSING[0] -= 1


def _refuse_test_while_choosing() -> None:
    if _CHOOSING[0]:
        raise CkptselError("test records are read only after the choices are frozen; a selection rule sees validation records only")


def load_test(records_dir: Path, validation: list[ValidationData] | None = None) -> list[TestData]:
    """Test records of every trajectory; every test item must exist for every checkpoint.

    When ``validation`` is given, each trajectory's test checkpoints must equal its
    validation checkpoints. Refused while choices are made (:func:`validation_only`).
    """
    _refuse_test_while_choosing()
    records_dir = as_location(records_dir)
    out = cache.cached(
        records_dir,
        "test",
        lambda: _released(_test_records(records_dir)),
        cache.encode_test,
        functools.partial(cache.decode_test, make=TestData),
    )
    if validation is not None:
        _match_validation(out, validation, units.display_path(records_dir, "generations"))
    return out


def _match_validation(tests: list[TestData], validation: list[ValidationData], gpath) -> None:
    """Every trajectory has test and validation records, on the same checkpoints."""
    val_steps = {v.trajectory: v.steps for v in validation}
    for t in tests:
        if t.trajectory not in val_steps:
            raise CkptselError(f"{describe(gpath, t.trajectory)}: test records but no validation records")
        if not np.array_equal(t.steps, val_steps[t.trajectory]):
            raise CkptselError(
                f"trajectory {t.trajectory!r}: validation and test records disagree on its checkpoints "
                f"(validation: {val_steps[t.trajectory].tolist()}, test: {t.steps.tolist()})"
            )
    missing = sorted(set(val_steps) - {t.trajectory for t in tests})
    if missing:
        raise CkptselError(f"{gpath}: trajectory {missing[0]!r} has validation but no test records")


def _test_records(records_dir: Location) -> list[TestData]:
    """:func:`load_test`'s work on the records alone (what :mod:`ckptsel.records.cache.memo` caches)."""
    # The test NLL rows are checked, never used as values: when every trajectory's NLL pack
    # carries the proof its writer computed with this module's checks, only the proofs are
    # read. Else the NLL rows come first and only their grid is kept, so the (larger) NLL
    # table is never in memory together with the generation grid.
    proofs = _test_nll_proofs(records_dir)
    test_nll = _test_nll_table(records_dir) if proofs is None else None
    g = _generation_grid(records_dir, "test")
    gpath = g.path
    test_nll_steps = _test_nll_steps(records_dir, test_nll) if proofs is None else _proven_steps(proofs)
    only_nll = sorted(set(test_nll_steps) - {str(t) for t in g.trajs})
    if only_nll:
        raise CkptselError(
            f"{records_dir / NLL_FILE}: trajectory {only_nll[0]!r} has test NLL records but no test generation records in {gpath.name}"
        )
    out = []
    for traj, rows, identity, steps, item_index, item_ids in _trajectories(g, records_dir):
        if traj in test_nll_steps and not np.array_equal(steps, test_nll_steps[traj]):
            raise CkptselError(
                f"trajectory {traj!r}: generation and NLL tables disagree on its test checkpoints "
                f"(generations: {steps.tolist()}, nll: {test_nll_steps[traj].tolist()})"
            )
        if proofs is None:
            check_test_nll(test_nll, traj, steps, item_ids)
        elif not _proof_holds(proofs.get(str(traj)), item_ids):  # the rows name what is wrong
            check_test_nll(_test_nll_table(records_dir), traj, steps, item_ids)
        if len(item_ids) < 2:
            raise CkptselError(
                f"{describe(gpath, traj)}: only {len(item_ids)} test item; the test pool must have at "
                f"least 2 (the matched-half diagnostic splits it in two halves, SPEC §5)"
            )
        present, corr, ans, subtasks = _generation_matrices(g, rows, steps, item_index, item_ids, traj, "subtask")
        if not present.all():
            c, i = np.argwhere(~present)[0]
            raise CkptselError(
                f"{describe(gpath, traj, int(steps[c]), str(item_ids[i]))}: test item missing for "
                f"this checkpoint (test items must be recorded for every checkpoint)"
            )
        out.append(
            TestData(
                **identity,
                item_ids=item_ids.astype(str),
                subtasks=subtasks.astype(str),
                correct=corr,
                answers=ans,
                groups=_item_groups(g, rows, steps, item_index, item_ids, traj).astype(str),
            )
        )
    _check_test_pools(out, gpath)
    return out


# --------------------------------------------------------------------------- test NLL
def _test_nll_steps(records_dir: Path, table: TestNll | None = None) -> dict[str, np.ndarray]:
    """Checkpoints of each trajectory in the test NLL rows (optional; for consistency).

    The rows are validated like validation NLL rows (SPEC §2): types, NaN/inf, negative or
    impossible values, duplicated keys; :func:`check_test_nll` checks each trajectory's items.
    """
    table = table or _test_nll_table(records_dir)
    if table is None:
        return {}
    grid = table.grid
    return {str(name): grid.axes(grid.rows_of(t))[0] for t, name in enumerate(grid.trajs)}


def _test_nll_proofs(records_dir: Location) -> dict[str, dict | None] | None:
    """Per trajectory with NLL units, its proven test NLL (``None``: none): from its pack's
    proof when the pack is current, else proven here from its own units, one trajectory at a
    time (:func:`~ckptsel.records.checks.prove_test_nll`, the same checks on a trajectory's
    rows: they are never all in memory at once); ``None`` when any proof fails or cannot be
    made (the rows are then read whole and checked, which names what is wrong), and for a
    single NLL file and ``verify``."""
    if cache.bypassed() or units.single_file(records_dir, "nll") is not None:
        return None
    nll_units = units.list_units(records_dir, "nll")
    if not nll_units:
        return None
    found = cache.proofs(records_dir, "nll", nll_units)
    for traj, proof in found.items():
        if proof is None or not _proof_usable(traj, proof):
            proof = _units_proof(records_dir, traj)  # (read on the reader's threads)
            if proof is None or not _proof_usable(traj, proof):
                return None  # (the trajectories after it are not proven for nothing)
        found[traj] = proof["test"]
    return found


def _units_proof(records_dir: Location, traj: str) -> dict | None:
    """What ``traj``'s test NLL rows, read from its units, prove (as a pack's proof would)."""
    filters = [("split", "=", "test"), ("trajectory", "=", traj)]
    strings = [c for c, kind in NLL_COLUMNS.items() if kind == "string"]
    rows = read_rows(records_dir, "nll", columns=list(NLL_COLUMNS), filters=filters, read_dictionary=strings)
    return cache.prove("nll", {} if rows is None else {"test": rows})


def _proof_usable(traj: str, proof: dict) -> bool:
    """A proof by this code, of rows that name the trajectory whose pack holds them."""
    if proof.get("code") != cache.code_digest() or "test" not in proof:
        return False
    return proof["test"] is None or proof["test"].get("trajectory") == traj


def _proven_steps(proofs: dict[str, dict | None]) -> dict[str, np.ndarray]:
    """:func:`_test_nll_steps` from the proofs."""
    return {traj: np.asarray(p["steps"], dtype=np.int64) for traj, p in proofs.items() if p is not None}


def _proof_holds(proof: dict | None, item_ids: np.ndarray) -> bool:
    """Whether a trajectory's proven test NLL rows (their checkpoints already compared) are
    what :func:`check_test_nll` accepts: none, or exactly the generations' items."""
    return proof is None or proof["items"] == items_digest(item_ids)


def _test_nll_table(records_dir: Path) -> TestNll | None:
    if not units.exists(records_dir, "nll"):
        return None
    table, npath = _read(records_dir, "nll", NLL_COLUMNS, "test")
    if table.num_rows == 0:
        return None
    nll = TestNll(npath, table)
    del table
    return _released(nll)


def load_texts(records_dir: Path, trajectory: str, split: str, steps=None) -> pd.DataFrame | None:
    """The recorded generated texts (the contract's optional ``text``) of one trajectory's
    ``split`` (``steps``: only those checkpoints): a frame of ``step``, ``item_id``, ``text`` (a
    unit's text over the single file's for the same row), or None when none was recorded. The
    choice never reads them; ``select``, ``compare`` and the keep table read them to say which
    answers only an answer rule's fallback found; a researcher's rule may read the validation
    split's (:func:`text_matrix`). Test texts are refused while choices are made."""
    if split != "validation":
        _refuse_test_while_choosing()
    records_dir = as_location(records_dir)
    key = [("split", "=", split), ("trajectory", "=", trajectory)]
    if steps is not None:
        key.append(("step", "in", [int(s) for s in steps]))
    columns = ["step", "item_id", "text"]
    parts, places = [], []
    single = units.single_file(records_dir, "generations")
    if single is not None and "text" in read_schema(single).names:
        parts.append(read_table(single, columns=columns, filters=key))
        places.append(single)
    unit_texts = read_rows(records_dir, "texts", columns=columns, filters=key)
    if unit_texts is not None:
        parts.append(unit_texts)
        places.append(records_dir / units.UNITS_DIR / "texts")
    for part, where in zip(parts, places, strict=True):
        kind = part.schema.field("text").type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
            raise CkptselError(f"{where}: column 'text' has type {kind}, expected string")
    frames = [p.to_pandas() for p in parts if p.num_rows]
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    df = df[df["text"].notna()].drop_duplicates(["step", "item_id"], keep="last")
    return df if len(df) else None


def text_matrix(records_dir: Path, trajectory: str, split: str, steps: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """``(T, n)`` object array of the generated texts of ``trajectory`` at ``steps`` ``(T,)`` on
    ``item_ids`` ``(n,)`` (:func:`load_texts`; None where none was recorded)."""
    return _text_grid(load_texts(records_dir, trajectory, split, steps), steps, item_ids)


def _text_grid(df: pd.DataFrame | None, steps: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    out = np.full((len(steps), len(item_ids)), None, dtype=object)
    return out if df is None else _on_grid(out, df, df["text"].to_numpy(dtype=object), steps, item_ids)


def _on_grid(out: np.ndarray, df: pd.DataFrame, values: np.ndarray, steps: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """``out`` ``(T, n)`` with each row of ``df`` (its ``step`` and ``item_id``) holding its
    ``values`` entry; rows of other steps or items left out."""
    rows = pd.Index(np.asarray(steps, dtype=np.int64)).get_indexer(df["step"].to_numpy(dtype=np.int64))
    cols = pd.Index(np.asarray(item_ids).astype(str)).get_indexer(df["item_id"].astype(str).to_numpy())
    keep = (rows >= 0) & (cols >= 0)
    out[rows[keep], cols[keep]] = values[keep]
    return out


SCORE_PREFIX = "score_"  # optional per-item score columns of generation records: score_<name>, numbers


def score_matrix(records_dir: Path, trajectory: str, split: str, name: str, steps: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """``(T, n)`` float64 of the generation records' optional column ``score_<name>`` (a reward
    model's or a judge's score per generation, written by whoever made the records) of
    ``trajectory``'s ``split`` at ``steps`` on ``item_ids``; NaN where a row has none. A missing
    or non-numeric column is one line. Test scores are refused while choices are made."""
    if split != "validation":
        _refuse_test_while_choosing()
    records_dir = as_location(records_dir)
    column = SCORE_PREFIX + name
    where = units.display_path(records_dir, "generations")
    key = [("split", "=", split), ("trajectory", "=", trajectory), ("step", "in", [int(s) for s in steps])]
    try:
        table = read_rows(records_dir, "generations", columns=["step", "item_id", column], filters=key)
    except CkptselError:
        table = None
    if table is None or column not in table.schema.names:
        raise CkptselError(f"{where}: no per-item score column {column!r} for trajectory {trajectory!r}")
    kind = table.schema.field(column).type
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
        raise CkptselError(f"{where}: column {column!r} has type {kind}, expected numbers")
    df = table.to_pandas()
    values = df[column].to_numpy(dtype=np.float64, na_value=np.nan)
    return _on_grid(np.full((len(steps), len(item_ids)), np.nan), df, values, steps, item_ids)


class ValidationExtras:
    """What a researcher's rule may read of the validation records beyond the arrays of
    :class:`ValidationData`: the generated texts (:meth:`texts`; a trajectory's are read once
    for its grid and its thinned grids, the last few trajectories' kept) and the optional
    per-item score columns (:meth:`scores`). Never the test split."""

    def __init__(self, records_dir: Path) -> None:
        self.records_dir = records_dir
        self._frames = functools.lru_cache(maxsize=4)(lambda trajectory: load_texts(records_dir, trajectory, "validation"))

    def texts(self, trajectory: str, steps: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
        """``(T, n)`` object array of the generated texts (None where none was recorded)."""
        return _text_grid(self._frames(trajectory), steps, item_ids)

    def scores(self, trajectory: str, name: str, steps: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
        """``(T, n)`` float64 of the column ``score_<name>`` (:func:`score_matrix`)."""
        return score_matrix(self.records_dir, trajectory, "validation", name, steps, item_ids)


def find_trajectory(loaded: list, trajectory: str, split: str, records_dir: Path):
    """The :class:`ValidationData` / :class:`TestData` of one trajectory, or one clear error."""
    for x in loaded:
        if x.trajectory == trajectory:
            return x
    names = [x.trajectory for x in loaded]
    raise CkptselError(
        f"{as_location(records_dir)}: trajectory {trajectory!r} has no {split} records "
        f"(known: {', '.join(names[:10])}{' …' if len(names) > 10 else ''})"
    )


# --------------------------------------------------------------------------- checks


def _check_test_pools(tests: list[TestData], path: Path) -> None:
    """Trajectories of one task share one test pool (the question bootstrap resamples it)."""
    first: dict[str, TestData] = {}
    for t in tests:
        ref = first.setdefault(t.task, t)
        if not np.array_equal(ref.item_ids, t.item_ids):
            extra = sorted(set(t.item_ids) ^ set(ref.item_ids))[:3]
            raise CkptselError(
                f"{path.name}: trajectories {ref.trajectory!r} and {t.trajectory!r} of task "
                f"{t.task!r} have different test items (e.g. {extra}); trajectories of one task "
                f"must be scored on the same test pool"
            )
