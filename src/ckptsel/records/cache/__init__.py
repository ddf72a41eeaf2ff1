"""The records' speed layers, behind one seam: everything here is derived from the
records, safe to delete, and never a source of truth; the contract
(:mod:`~ckptsel.records.schema` → :mod:`~ckptsel.records.codec` → :mod:`~ckptsel.records.store`
→ :mod:`~ckptsel.records.load`) reads the same without it, only slower.

* :mod:`~ckptsel.records.cache.pack` — per-trajectory packs: a trajectory's units in one
  derived file, used only while it lists the units' current versions (or their contents).
* :mod:`~ckptsel.records.cache.memo` — the loaded-array cache, keyed by the records' versions.
* :mod:`~ckptsel.records.cache.arrays` — the loaded records as named arrays (what memo stores).

The records modules call the cache only through the names below (the seam);
``tests/project/test_architecture.py`` checks who imports it.
"""

from __future__ import annotations

from ckptsel.records.cache.arrays import decode_test, decode_validation, encode_test, encode_validation
from ckptsel.records.cache.memo import array_json, bypassed, cached, code_digest, filling, json_array, uncached
from ckptsel.records.cache.pack import (
    PACK_ERRORS,
    PACKED_KINDS,
    by_trajectory,
    current,
    pack_bytes,
    pack_metadata,
    pack_path,
    proofs,
    prove,
    remove_pack,
    rows_hold,
    same_units,
    trusted,
    unit_metadata,
    units_metadata,
    write_pack,
)

__all__ = [
    "PACKED_KINDS",
    "PACK_ERRORS",
    "array_json",
    "by_trajectory",
    "bypassed",
    "cached",
    "code_digest",
    "current",
    "decode_test",
    "decode_validation",
    "encode_test",
    "encode_validation",
    "filling",
    "json_array",
    "pack_bytes",
    "pack_metadata",
    "pack_path",
    "proofs",
    "prove",
    "remove_pack",
    "rows_hold",
    "same_units",
    "trusted",
    "uncached",
    "unit_metadata",
    "units_metadata",
    "write_pack",
]
