"""The records contract's checks on loaded tables (SPEC §2), one home for each: column types
and nulls (:func:`checked`), a split's rows placed on a trajectory × step × item grid that
finds duplicated keys (:class:`Grid`), NLL values (:func:`check_nll_values`), and the test NLL
rows, complete over checkpoints × items with ``n_tokens`` constant (:class:`TestNll`,
:func:`check_test_nll`). :mod:`ckptsel.records.load` runs them on every load;
:func:`prove_test_nll` runs the same checks on one trajectory's pack when it is written, so a
reader of current packs need not read those rows again. Every failure is one
:class:`CkptselError` naming the file, trajectory, step and item.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ckptsel.errors import CkptselError
from ckptsel.records.schema import COMPLETE_WINDOW, MATCHED_WINDOW, NLL_COLUMNS, NLL_FILE, is_average_step

NLL_CODED = ("trajectory", "item_id")  # an NLL grid's configuration and task are never used


def checked(table: pa.Table, columns: dict[str, str], path: Path) -> pa.Table:
    """``table``'s ``columns``, checked (no nulls, the right types, no negative step) and cast
    to their SPEC types (string columns stay as they are, dictionary-encoded or not)."""
    out = {}
    for name, kind in columns.items():
        col = table.column(name)
        if col.null_count:
            r = pc.index(pc.is_null(col), True).as_py()
            where = ", ".join(f"{k} {table.column(k)[r].as_py()!r}" for k in ("trajectory", "step", "item_id") if k in table.column_names)
            hint = " (NaN/inf losses are not allowed)" if name == "nll_sum" else ""
            raise CkptselError(f"{path.name}: {where}: {name} is missing/NaN{hint} [{path}]")
        value_type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        ok = {
            "string": pa.types.is_string(value_type) or pa.types.is_large_string(value_type),
            "int64": pa.types.is_integer(value_type),
            "float64": pa.types.is_floating(value_type),
            "bool": pa.types.is_boolean(value_type),
        }[kind]
        if not ok:
            raise CkptselError(f"{path}: column {name!r} has type {value_type}, expected {kind}")
        if kind == "int64" and not value_type.equals(pa.int64()):
            col = col.cast(pa.int64())
        if kind == "float64" and not value_type.equals(pa.float64()):
            col = col.cast(pa.float64())
        if name == "step" and len(col) and pc.min(col).as_py() < 0:
            _check_negative_steps(table, col, path)
        out[name] = col
    return pa.table(out)


def _check_negative_steps(table: pa.Table, col: pa.ChunkedArray, path: Path) -> None:
    """Negative steps are the reserved steps of averages (:func:`~ckptsel.records.schema.average_step`);
    any other is refused, naming its row."""
    negative = np.unique(col.filter(pc.less(col, 0)).to_numpy())
    bad = [int(s) for s in negative if not is_average_step(int(s))]
    if bad:
        r = pc.index(col, pa.scalar(bad[0], col.type)).as_py()
        raise CkptselError(
            f"{describe(path, str(table.column('trajectory')[r].as_py()), bad[0])}: negative step (training steps are "
            f">= 0; an average's reserved step is -K for average-lastK, K <= 999, or -(10**6 + D·10**6) for ema-D) [{path}]"
        )


def string_codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of a string column (equal code = equal string; int32 for a dictionary
    column: half the memory of millions of rows) and the distinct values."""
    if isinstance(col, pa.ChunkedArray):
        chunks = col.chunks
        if not chunks:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
        if pa.types.is_dictionary(col.type):
            codes, values = _chunk_codes(chunks)
            # drop dictionary values that the split filter removed (O(n), no sort)
            used = np.zeros(len(values), dtype=bool)
            used[codes] = True
            if used.all():  # each row group's own dictionary: nothing to drop
                return codes, np.asarray(values.to_pylist(), dtype=object)
            remap = np.cumsum(used, dtype=np.int32) - 1
            values = np.asarray(values.filter(pa.array(used)).to_pylist(), dtype=object)
            return remap[codes], values  # int32 already: no second copy of the rows
        col = col.combine_chunks()
    enc = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), np.asarray(enc.dictionary.to_pylist(), dtype=object)


def _chunk_codes(chunks: list[pa.DictionaryArray]) -> tuple[np.ndarray, pa.Array]:
    """``(rows,)`` int32 codes into one dictionary for dictionary chunks that each have their
    own (a unit's, a row group's), in order of first appearance across the chunks' dictionaries
    (as ``unify_dictionaries`` orders them); the dictionaries are hashed once, a run of chunks
    with an equal dictionary (a trajectory's units list the same items) counted once."""
    firsts, starts, last, total = [], np.empty(len(chunks), dtype=np.int32), None, 0
    for i, c in enumerate(chunks):
        d = c.dictionary
        if last is None or not (d is last or d.equals(last)):
            firsts.append(d)
            last, start = d, total
            total += len(d)
        starts[i] = start
    enc = pc.dictionary_encode(pa.chunked_array(firsts, type=chunks[0].dictionary.type).combine_chunks())
    entry = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    lengths = np.fromiter((len(c) for c in chunks), dtype=np.int64, count=len(chunks))
    if all(len(c.dictionary) == 1 for c in chunks):  # one value per chunk (a pack's trajectory,
        return np.repeat(entry[starts], lengths), enc.dictionary  # configuration, task): no pass over rows
    where = np.repeat(starts, lengths)  # (rows,) each row's chunk's first entry, then its own
    where += np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks])
    return entry[where], enc.dictionary


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of integers (NLL windows: millions of rows, a few values) by
    counting when their range is small, without sorting or hashing the rows."""
    if len(values) == 0:
        return np.unique(values)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 1_000_000:
        return np.unique(values)
    return (np.flatnonzero(np.bincount(values - lo, minlength=hi - lo + 1)) + lo).astype(values.dtype)


def _small_int_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of integer values in ascending order (O(n) via bincount when the range is small)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 50_000_000:
        codes, uniques = pd.factorize(values, sort=True)
        return codes.astype(np.int64), np.asarray(uniques)
    shifted = values - lo if lo else values
    present = np.bincount(shifted, minlength=hi - lo + 1) > 0
    remap = np.cumsum(present, dtype=np.int64) - 1
    return remap[shifted], np.flatnonzero(present) + lo


def _key_parts(columns: list[np.ndarray], outer: int) -> list[tuple[np.ndarray, int]]:
    """Integer key columns as order-preserving codes and their spans ``(codes, n)``, codes in
    ``[0, n)``, for a grid key of ``outer`` × the spans: the offsets from each column's
    smallest value (one subtraction) while that key stays far below 2**63, else dense codes."""
    lows = [int(c.min()) if len(c) else 0 for c in columns]
    spans = [int(c.max()) - lo + 1 if len(c) else 1 for c, lo in zip(columns, lows, strict=True)]
    if outer * math.prod(spans) < 2**62:
        return [(c - lo if lo else c, n) for c, lo, n in zip(columns, lows, spans, strict=True)]
    return [(codes, len(values)) for codes, values in map(_small_int_codes, columns)]


def describe(path: Path, traj: str, step: int | None = None, item: str | None = None) -> str:
    parts = [f"{path.name}: trajectory {traj!r}"]
    if step is not None:
        parts.append(f"step {step}")
    if item is not None:
        parts.append(f"item {item!r}")
    return ", ".join(parts)


class Grid:
    """Rows of one split placed on a (trajectory) × (step) × (item) grid via integer codes.

    Rows are sorted once by the combined key, which both finds duplicated keys and makes
    every trajectory's rows one contiguous slice.
    """

    def __init__(self, table: pa.Table, path: Path, key_extra: str | None = None, coded: tuple[str, ...] | None = None):
        """``coded``: the string columns to code (default every one but ``split``)."""
        self.path = path  # the table itself is not kept: its arrays go when the caller drops it
        self.codes: dict[str, np.ndarray] = {}
        self.values: dict[str, np.ndarray] = {}
        for name in table.column_names:  # the split column is constant after filtering
            if coded is not None and name not in coded:
                continue
            if name != "split" and pa.types.is_dictionary(table.column(name).type):
                self.codes[name], self.values[name] = string_codes(table.column(name))
        self.traj_code, self.trajs = self.codes["trajectory"], self.values["trajectory"]
        self.item_code, self.items = self.codes["item_id"], self.values["item_id"]
        self.step = table.column("step").to_numpy()
        self.correct = table.column("correct").to_numpy(zero_copy_only=False) if "correct" in table.column_names else None
        # rank of each item id as a string: trajectories list their items in id order
        self.item_rank = np.empty(len(self.items), dtype=np.int64)
        self.item_rank[np.argsort(self.items.astype(str), kind="stable")] = np.arange(len(self.items))
        parts = _key_parts([self.step] + ([table.column(key_extra).to_numpy()] if key_extra else []), len(self.trajs) * len(self.items))
        key = self.traj_code.astype(np.int64)  # built in place: one (rows,) int64 at a time
        key *= parts[0][1]
        key += parts[0][0]
        key *= len(self.items)
        key += self.item_code
        for codes, span in parts[1:]:
            key *= span
            key += codes
        del parts
        # records are written sorted by this key: then the stable sort is the identity
        if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
            index = np.int32 if len(key) < 2**31 else np.int64  # half the memory of int64 rows
            self.order, sorted_key = np.arange(len(key), dtype=index), key
        else:
            self.order = np.argsort(key, kind="stable")
            sorted_key = key[self.order]
        dup = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
        if len(dup):
            r = self.order[dup[0] + 1]
            more = f", {key_extra} {int(table.column(key_extra)[int(r)].as_py())}" if key_extra else ""
            raise CkptselError(
                f"{describe(path, self.trajs[self.traj_code[r]], int(self.step[r]), self.items[self.item_code[r]])}"
                f"{more}: duplicated record (the key must be unique)"
            )
        in_order = self.traj_code if sorted_key is key else self.traj_code[self.order]
        self.bounds = np.searchsorted(in_order, np.arange(len(self.trajs) + 1))

    def rows_of(self, t: int) -> np.ndarray:
        """Rows of trajectory ``t``, sorted by step then item code."""
        return self.order[self.bounds[t] : self.bounds[t + 1]]

    def axes(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This trajectory's steps (ascending), item codes (in id order) and code -> column map."""
        s = self.step[rows]
        steps = s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s
        present = np.zeros(len(self.items), dtype=bool)
        present[self.item_code[rows]] = True
        codes = np.flatnonzero(present)
        codes = codes[np.argsort(self.item_rank[codes], kind="stable")]
        index = np.full(len(self.items), -1)
        index[codes] = np.arange(len(codes))
        return steps, codes, index

    def attrs(self, rows: np.ndarray, traj: str) -> tuple[str, str]:
        """The trajectory's configuration and task, which must be single-valued."""
        out = []
        for name in ("configuration", "task"):
            codes = self.codes[name][rows]
            # one value: min == max (no sort of the rows); several: name them
            used = codes[:1] if len(codes) and codes.min() == codes.max() else np.unique(codes)
            if len(used) != 1:
                raise CkptselError(
                    f"{describe(self.path, traj)}: several values of {name!r}: {[str(v) for v in self.values[name][used][:5]]}"
                )
            out.append(str(self.values[name][used[0]]))
        return out[0], out[1]


class TestNll:
    """The test NLL rows, validated and placed on a (trajectory, step, item, window) grid."""

    def __init__(self, npath: Path, table: pa.Table):
        self.path = npath
        self.grid = Grid(table, npath, key_extra="window", coded=NLL_CODED)
        check_nll_values(table, self.grid, npath)
        self.windows = table.column("window").to_numpy()
        self.window_values = distinct(self.windows)
        self.n_tokens = table.column("n_tokens").to_numpy()


def prove_test_nll(parts: dict[str, pa.Table]) -> dict:
    """What one trajectory's NLL pack (its rows per split) proves of its test rows under this
    module's checks (a pack carries it: :func:`ckptsel.records.cache.pack.prove`): ``test`` is
    ``None`` without test rows, else their checkpoints and the digest of their items when the
    rows pass every check :class:`TestNll` and :func:`check_test_nll` make of them (columns and
    types, no NaN/inf or negative values, unique keys, every window present complete over the
    rows' own checkpoints × items, ``n_tokens`` constant across checkpoints); no proof (``{}``)
    when one fails."""
    rows = parts.get("test")
    if rows is None or rows.num_rows == 0:
        return {"test": None}
    path = Path(NLL_FILE)
    try:
        strings = [c for c, kind in NLL_COLUMNS.items() if kind == "string"]
        table = rows.select(list(NLL_COLUMNS))
        for name in strings:
            i = table.column_names.index(name)
            table = table.set_column(i, name, pc.dictionary_encode(table.column(name)))
        nll = TestNll(path, checked(table, NLL_COLUMNS, path))
        del table
        if len(nll.grid.trajs) != 1:
            return {}
        traj = str(nll.grid.trajs[0])
        steps, codes, _ = nll.grid.axes(nll.grid.rows_of(0))
        item_ids = nll.grid.items[codes].astype(str)
        check_test_nll(nll, traj, steps, item_ids)
    except (CkptselError, pa.ArrowException, KeyError, ValueError):
        return {}
    test = {"trajectory": traj, "steps": [int(x) for x in steps], "items": items_digest(item_ids)}
    return {"test": test}


def items_digest(item_ids: np.ndarray) -> str:
    """SHA-256 of a trajectory's test item ids, in order (what a proof names)."""
    return hashlib.sha256(json.dumps([str(i) for i in item_ids]).encode("utf-8")).hexdigest()


def check_test_nll(test_nll: TestNll | None, traj: str, steps: np.ndarray, item_ids: np.ndarray) -> None:
    """One trajectory's test NLL rows: every item of its test generations, for every checkpoint
    and window, with ``n_tokens`` constant across checkpoints (SPEC §2)."""
    if test_nll is None:
        return
    grid = test_nll.grid
    where = np.flatnonzero(grid.trajs == traj)
    if not len(where):
        return
    rows = grid.rows_of(int(where[0]))
    # each distinct item id looked up once, then spread over the rows by its code
    known = pd.Index(item_ids).get_indexer(grid.items)[grid.item_code[rows]]
    if (known < 0).any():
        r = int(rows[np.flatnonzero(known < 0)[0]])
        raise CkptselError(
            f"{describe(test_nll.path, traj, int(grid.step[r]), str(grid.items[grid.item_code[r]]))}: "
            f"test NLL record for an item with no test generation records"
        )
    T, n = len(steps), len(item_ids)
    if _complete_and_constant(test_nll, rows, T, n):
        return
    ci = np.searchsorted(steps, grid.step[rows])
    windows = test_nll.windows[rows]
    for w in test_nll.window_values:  # the study's few windows; this trajectory's are checked
        sel = windows == w
        if not sel.any():
            continue
        have = np.zeros((T, n), dtype=bool)
        have[ci[sel], known[sel]] = True
        tok = np.full((T, n), -1, dtype=np.int64)
        tok[ci[sel], known[sel]] = test_nll.n_tokens[rows[sel]]
        if not have.all():
            c, i = np.argwhere(~have)[0]
            raise CkptselError(
                f"{describe(test_nll.path, traj, int(steps[c]), str(item_ids[i]))}, window {int(w)}: "
                f"test NLL record missing (test items must be recorded for every checkpoint)"
            )
        check_tokens_constant(tok, have, test_nll.path, traj, item_ids, steps, int(w))


def _complete_and_constant(test_nll: TestNll, rows: np.ndarray, T: int, n: int) -> bool:
    """The common case, proven without building (T, n) matrices: a trajectory with one row per
    (checkpoint, item, window) of every window the study has (its keys are unique, its
    checkpoints those of its generations and its items among theirs, all checked before: so
    T × n × W rows means none is missing) whose ``n_tokens`` agree across checkpoints (its rows
    are sorted by checkpoint, then item and window: each checkpoint's block lists the same
    items and windows). ``False``: the full check finds what is wrong."""
    W = len(test_nll.window_values)
    if not len(rows) or len(rows) != T * n * W:
        return False
    tok = test_nll.n_tokens[rows].reshape(T, n * W)
    return bool((tok == tok[:1]).all())


def check_nll_values(nll: pa.Table, grid: Grid, path: Path) -> None:
    values = nll.column("nll_sum").to_numpy()
    tokens = nll.column("n_tokens").to_numpy()
    for bad, problem in (
        (~np.isfinite(values), lambda r: f"nll_sum is {values[r]} (NaN/inf losses are not allowed)"),
        (values < 0, lambda r: f"nll_sum is {values[r]} (a sum of -log p is never negative)"),
        (tokens < 0, lambda r: f"negative n_tokens ({int(tokens[r])})"),
    ):
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            where = describe(path, grid.trajs[grid.traj_code[r]], int(grid.step[r]), grid.items[grid.item_code[r]])
            raise CkptselError(f"{where}: {problem(r)}")
    windows = nll.column("window").to_numpy()
    if ((windows != MATCHED_WINDOW) & (windows != COMPLETE_WINDOW) & (windows < 0)).any():
        raise CkptselError(f"{path}: negative window values")


def check_tokens_constant(tok, have, path, traj, item_ids, steps, window) -> None:
    hi = np.where(have, tok, np.iinfo(np.int64).min).max(axis=0)
    lo = np.where(have, tok, np.iinfo(np.int64).max).min(axis=0)
    differ = have.any(axis=0) & (hi != lo)
    if differ.any():
        i = int(np.flatnonzero(differ)[0])
        vals = sorted({int(v) for v in tok[have[:, i], i]})
        raise CkptselError(
            f"{describe(path, traj, item=str(item_ids[i]))}, window {window}: n_tokens differ "
            f"across checkpoints ({vals}); the scored response must be the same for every checkpoint"
        )
