"""Where checkpoints are measured: this process (``local``) or a Ray cluster (``ray``).

An executor takes the run's *units* — one checkpoint each, with its part cache
(:class:`~ckptsel.measure.parts.StepParts`) — and gives back, unit by unit, the new part rows
it measured (``None`` when the unit was already recorded). It never writes: the driver
(:func:`ckptsel.measure.run.measure_run`) merges the rows into the parts and writes the
records, one unit at a time, in one place. So records do not depend on the executor, a worker
that dies only costs a retried unit, and a driver killed and re-run continues from what is
recorded.

* :mod:`~ckptsel.measure.executors.base` — :class:`ExecutorConfig`, the unit types, the Ray import;
* :mod:`~ckptsel.measure.executors.local` — one measurer in this process;
* :mod:`~ckptsel.measure.executors.ray_actors` — long-lived actors on a Ray cluster, each
  holding a measurer (Ray is an optional extra, imported only when used).

Both measure units in batches by one rule (:func:`~ckptsel.measure.measurer.batch_units`: a
LoRA trajectory's adapters on vLLM together, every other unit alone) and hand each unit back
as its batch ends.

Pick one with :class:`ExecutorConfig` (or just ``"local"`` / ``"ray"``) and
:func:`open_executor`.
"""

from __future__ import annotations

from typing import Any

from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors.base import ExecutorConfig
from ckptsel.measure.executors.local import LocalExecutor
from ckptsel.measure.executors.ray_actors import RayExecutor
from ckptsel.train.checkpoints import Checkpoint

__all__ = ["open_executor"]


def open_executor(
    executor: ExecutorConfig | str | None, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: Any
) -> LocalExecutor | RayExecutor:
    """The executor named by ``executor`` (a context manager with ``run``)."""
    ex = ExecutorConfig.coerce(executor)
    if ex.kind == "local":
        return LocalExecutor(config, ckpts, base, result)
    return RayExecutor(ex, config, ckpts, base, result)
