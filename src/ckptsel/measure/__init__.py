"""Measurement: checkpoints -> records (generation answers + teacher-forced NLL).

Public entry points (torch/transformers are imported only inside the functions):

* :func:`measure_run` — every ``checkpoint-<step>/`` of a run dir into a records dir
  (resumable, appends to records shared with other runs).
* :func:`measure_model` — one model already in memory (Trainer callback) -> record frames.
* :func:`upsert_records` — add record frames to a records dir atomically, keeping other rows.
* :func:`discover_checkpoints` — the validated checkpoints of a run dir.
"""

from __future__ import annotations

from ckptsel.measure.checkpoints import Checkpoint, discover_checkpoints
from ckptsel.measure.runner import MeasureResult, MeasureSettings, measure_model, measure_run
from ckptsel.measure.store import upsert_records

__all__ = [
    "Checkpoint",
    "MeasureResult",
    "MeasureSettings",
    "discover_checkpoints",
    "measure_model",
    "measure_run",
    "upsert_records",
]
