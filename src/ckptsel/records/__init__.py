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

Other stages import each name from the module that defines it (``ckptsel.records.load``,
``ckptsel.records.store``, …); this package serves ``write_unit``, the writer for a user's own
measurement.
"""

from __future__ import annotations

from ckptsel.records.store import write_unit

__all__ = ["write_unit"]
