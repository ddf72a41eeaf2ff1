"""Measurement: checkpoints -> records (generation answers + teacher-forced NLL).

Modules, in the order a measurement flows through them (torch/transformers are imported only
inside functions):

* :mod:`~ckptsel.measure.config` — :class:`MeasureConfig`, the measurement options, validated once:
  :class:`MeasureSpec` (what is measured; names the part files) and :class:`RunSettings` (how);
* :mod:`~ckptsel.measure.tokens` — which tokens are fed, scored and stopped at;
* :mod:`~ckptsel.measure.passes` — one forward per item on a Hugging Face model, shared by the
  NLL and greedy decoding;
* :mod:`~ckptsel.measure.backends` — the engines (``hf`` model holder, optional ``vllm``);
* :mod:`~ckptsel.measure.frames` — contract record frames from texts and scores;
* :mod:`~ckptsel.measure.parts` — the per-checkpoint part cache that makes runs resumable, and
  what is left to measure and record at a checkpoint (:func:`left_to_measure`);
* :mod:`~ckptsel.measure.progress` — progress events (no UI code here);
* :mod:`~ckptsel.measure.measurer` — :class:`Measurer` (one checkpoint's missing rows) and
  :func:`measure_model` (a model already in memory, e.g. the Trainer callback);
* :mod:`~ckptsel.measure.executors` — where units run: this process or Ray actors;
* :mod:`~ckptsel.measure.provenance` — what each unit records about how it was measured, and
  the rule that refuses to mix provenances in a trajectory (``--allow-mixed-engines``);
* :mod:`~ckptsel.measure.run` — :func:`measure_run`: every ``checkpoint-<step>/`` of a run
  into a records folder (local paths or URLs); :class:`RunMeasurement`, the same one
  checkpoint batch at a time;
* :mod:`~ckptsel.measure.watch` — :func:`watch_run`: a run still training, each checkpoint
  measured as soon as it is complete.

Other harnesses' logs (lm-eval, inspect, lighteval) become records in :mod:`ckptsel.ingest`.
"""

from __future__ import annotations

from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.measurer import measure_model
from ckptsel.measure.run import measure_run

__all__ = ["MeasureConfig", "measure_model", "measure_run"]
