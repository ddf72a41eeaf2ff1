"""Measurement: checkpoints -> records (generation answers + teacher-forced NLL).

Public entry points (torch/transformers are imported only inside the functions):

* :class:`MeasureConfig` — the measurement options, validated once (defaults from
  :mod:`ckptsel.defaults`).
* :func:`measure_run` — every ``checkpoint-<step>/`` of a run dir into a records dir
  (resumable through :mod:`ckptsel.measure.parts`, appends to records shared with other
  runs, progress as :class:`ProgressEvent` s).
* :func:`measure_model` — one model already in memory (Trainer callback) -> record frames.
* :func:`discover_checkpoints` — the validated checkpoints of a run dir.
* :class:`ExecutorConfig` — where ``measure_run`` measures: this process (``local``) or a Ray
  cluster (``ray``; :mod:`ckptsel.measure.executors`, Ray imported only then).

Records are written through :mod:`ckptsel.records` (``records.upsert_records``).
"""

from __future__ import annotations

from ckptsel.measure.checkpoints import Checkpoint, discover_checkpoints
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors import ExecutorConfig
from ckptsel.measure.progress import ProgressEvent
from ckptsel.measure.runner import MeasureResult, measure_model, measure_run

__all__ = [
    "Checkpoint",
    "ExecutorConfig",
    "MeasureConfig",
    "MeasureResult",
    "ProgressEvent",
    "discover_checkpoints",
    "measure_model",
    "measure_run",
]
