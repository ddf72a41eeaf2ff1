"""Records folders (SPEC §2): the contract, the one checked Parquet codec, the units layout,
the reader, the one writer and the analysis's loaders — in the order data flows through them.

* :mod:`~ckptsel.records.schema` — file names, columns, dtypes, keys, row order, the matched
  window; contract frames (``coerce_*``, ``empty_*``) and plain names (``check_name``).
* :mod:`~ckptsel.records.codec` — the one checked Parquet read (page checksums verified) and
  write (records layout).
* :mod:`~ckptsel.records.units` — where single files and write-once units live.
* :mod:`~ckptsel.records.cache` — the speed layers behind one seam (derived, safe to delete):
  per-trajectory packs (``cache.pack``), the loaded-array cache (``cache.memo``) and its array
  codec (``cache.arrays``).
* :mod:`~ckptsel.records.provenance` — what measured each unit (engine + version, dtype,
  attention, batch size, device), in the unit's metadata; the study's provenance for ``analyze``.
* :mod:`~ckptsel.records.weights` — what checkpoint each unit was measured from (its
  weights' fingerprint, the run's final step then), in the unit's metadata.
* :mod:`~ckptsel.records.scan` — both forms read as one table (``read_rows``, ``read_frame``),
  each trajectory from its pack when current, else from its units.
* :mod:`~ckptsel.records.store` — every producer's writer (``write_unit``, ``upsert_records``,
  ``write_records``) and ``compact``.
* :mod:`~ckptsel.records.load` — the analysis's loaders: validation and test records by
  separate calls, validated into per-trajectory arrays.

Other packages import the names below from ``ckptsel.records``.
"""

from __future__ import annotations

from ckptsel.records.cache import uncached
from ckptsel.records.load import (
    TestData,
    ValidationData,
    find_trajectory,
    load_test,
    load_texts,
    load_validation,
)
from ckptsel.records.provenance import (
    UnitProvenance,
    canonical,
    describe,
    provenance_identity,
    provenance_lines,
    read_provenance,
    unit_provenance,
)
from ckptsel.records.scan import read_frame, read_rows
from ckptsel.records.schema import (
    COMPLETE_WINDOW,
    FINAL_STEPS_FILE,
    GENERATION_COLUMNS,
    GENERATION_KEY,
    GENERATIONS_FILE,
    MATCHED_WINDOW,
    NLL_COLUMNS,
    NLL_FILE,
    NLL_KEY,
    SPLITS,
    check_name,
    coerce_generations,
    coerce_nll,
    empty_generations,
    empty_nll,
)
from ckptsel.records.store import compact, upsert_records, write_records, write_unit
from ckptsel.records.units import UNITS_DIR, one_listing
from ckptsel.records.weights import CheckpointStamp, changed_files, recorded_stamps, short_digests

__all__ = [
    "COMPLETE_WINDOW",
    "CheckpointStamp",
    "FINAL_STEPS_FILE",
    "GENERATIONS_FILE",
    "GENERATION_COLUMNS",
    "GENERATION_KEY",
    "MATCHED_WINDOW",
    "NLL_COLUMNS",
    "NLL_FILE",
    "NLL_KEY",
    "SPLITS",
    "TestData",
    "UnitProvenance",
    "UNITS_DIR",
    "ValidationData",
    "canonical",
    "changed_files",
    "check_name",
    "coerce_generations",
    "coerce_nll",
    "compact",
    "describe",
    "empty_generations",
    "empty_nll",
    "find_trajectory",
    "one_listing",
    "load_test",
    "load_texts",
    "load_validation",
    "provenance_identity",
    "provenance_lines",
    "read_frame",
    "read_provenance",
    "recorded_stamps",
    "read_rows",
    "short_digests",
    "unit_provenance",
    "uncached",
    "upsert_records",
    "write_records",
    "write_unit",
]
