"""Records folders (SPEC §2): the contract, the one writer and the one reader, side by side.

* :mod:`ckptsel.records.schema` — file names, columns, dtypes, keys, the matched window.
* :mod:`ckptsel.records.write` — every producer's writer (``measure``, ``ingest``, the Trainer
  callback, ``simulate``): one row order and row-group size, write-once per-checkpoint units
  (``write_unit``), plain trajectory/configuration names.
* :mod:`ckptsel.records.dataset` — the units layout, reading both forms together
  (``read_rows``, ``read_frame``) and ``compact`` (back to the single-file form).
* :mod:`ckptsel.records.read` — the analysis's loaders: validation and test records by
  separate calls, validated into per-trajectory arrays.

``from ckptsel import records`` gives the names of all three (``records.load_validation``,
``records.upsert_records``, ``records.MATCHED_WINDOW``, …).
"""

from __future__ import annotations

from ckptsel.records.dataset import (
    UNITS_DIR,
    compact,
    list_units,
    read_frame,
    read_rows,
    unit_path,
)
from ckptsel.records.read import (
    TestData,
    ValidationData,
    find_trajectory,
    has_validation_nll,
    load_test,
    load_validation,
)
from ckptsel.records.schema import (
    COMPLETE_WINDOW,
    FINAL_STEPS_FILE,
    GENERATION_COLUMNS,
    GENERATION_KEY,
    GENERATION_OPTIONAL,
    GENERATIONS_FILE,
    MATCHED_WINDOW,
    NLL_COLUMNS,
    NLL_FILE,
    NLL_KEY,
    SPLITS,
)
from ckptsel.records.write import (
    RECORDS_ORDER,
    RECORDS_ROW_GROUP,
    check_name,
    coerce_generations,
    coerce_nll,
    empty_generations,
    empty_nll,
    read_table,
    records_lock,
    upsert_records,
    write_records,
    write_unit,
)

__all__ = [
    "find_trajectory",
    "COMPLETE_WINDOW",
    "FINAL_STEPS_FILE",
    "GENERATIONS_FILE",
    "GENERATION_COLUMNS",
    "GENERATION_KEY",
    "GENERATION_OPTIONAL",
    "MATCHED_WINDOW",
    "NLL_COLUMNS",
    "NLL_FILE",
    "NLL_KEY",
    "RECORDS_ORDER",
    "RECORDS_ROW_GROUP",
    "SPLITS",
    "TestData",
    "UNITS_DIR",
    "ValidationData",
    "check_name",
    "coerce_generations",
    "compact",
    "coerce_nll",
    "empty_generations",
    "empty_nll",
    "has_validation_nll",
    "list_units",
    "load_test",
    "load_validation",
    "read_frame",
    "read_rows",
    "read_table",
    "records_lock",
    "unit_path",
    "upsert_records",
    "write_records",
    "write_unit",
]
