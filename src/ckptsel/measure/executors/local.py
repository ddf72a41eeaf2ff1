"""The local executor: units in checkpoint order, measured in this process by one
:class:`~ckptsel.measure.measurer.Measurer` (the base model loaded once, LoRA adapters swapped
in place; on vLLM, a trajectory's adapters measured in one batch)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors.base import Emit, UnitResult, WorkUnit
from ckptsel.measure.measurer import Measurer
from ckptsel.measure.progress import ProgressEvent
from ckptsel.train.checkpoints import Checkpoint


class LocalExecutor:
    """Units in checkpoint order, measured in this process by one measurer."""

    def __init__(self, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: Any) -> None:
        self.measurer = Measurer(config, ckpts, base, result)

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.measurer.__exit__(*exc)

    def run(self, units: Sequence[WorkUnit], trajectory: str, configuration: str, emit: Emit) -> Iterator[UnitResult]:
        """``(checkpoint, parts, new rows or None when nothing was missing)`` per unit, in
        order. Adapter checkpoints measured by vLLM go in batches
        (:meth:`~ckptsel.measure.measurer.Measurer.batches`: their requests in one call), each
        unit handed back, and so recorded, as its batch ends."""
        for batch in self.measurer.batches(units):
            for ckpt, parts in batch:
                emit(ProgressEvent("step", trajectory, step=ckpt.step, total=parts.n_todo))
            if len(batch) == 1 and not batch[0][1].n_todo:
                yield batch[0][0], batch[0][1], None
                continue

            def tick(n: int, _step: int) -> None:
                emit(ProgressEvent("items", trajectory, step=_step, done=n))

            ticks = [functools.partial(tick, _step=c.step) for c, _ in batch]
            rows = self.measurer.measure_many(batch, trajectory, configuration, ticks)
            for (ckpt, parts), new in zip(batch, rows, strict=True):
                yield ckpt, parts, new
