"""The local executor: units in checkpoint order, measured in this process by one
:class:`~ckptsel.measure.measurer.Measurer` (the base model loaded once, LoRA adapters swapped
in place)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors.base import Emit, UnitResult, WorkUnit
from ckptsel.measure.measurer import Measurer
from ckptsel.measure.progress import ProgressEvent
from ckptsel.train import Checkpoint


class LocalExecutor:
    """Units in checkpoint order, measured in this process by one measurer."""

    def __init__(
        self, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: Any
    ) -> None:
        self.measurer = Measurer(config, ckpts, base, result)

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.measurer.__exit__(*exc)

    def run(
        self, units: Sequence[WorkUnit], trajectory: str, configuration: str, emit: Emit
    ) -> Iterator[UnitResult]:
        """``(checkpoint, parts, new rows or None when nothing was missing)`` per unit."""
        for ckpt, parts in units:
            emit(ProgressEvent("step", trajectory, step=ckpt.step, total=parts.n_todo))
            if not parts.n_todo:
                yield ckpt, parts, None
                continue

            def tick(n: int, _step: int = ckpt.step) -> None:
                emit(ProgressEvent("items", trajectory, step=_step, done=n))

            yield ckpt, parts, self.measurer.measure(ckpt, parts, trajectory, configuration, tick)
