"""Progress of a measurement run, reported as events (the runner has no UI code).

:func:`ckptsel.measure.measure_run` calls ``on_progress(event)`` with one
:class:`ProgressEvent` at a time; ``ckptsel measure`` renders them as progress bars
(:func:`ckptsel.cli.output.progress_bars`), other callers may log or ignore them.
Units are items generated plus items scored (each item counts twice per checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ProgressEvent:
    """One thing that happened in a run.

    * ``run``: the run starts; ``total`` = checkpoints × items × 2; ``units`` = checkpoints.
    * ``step``: checkpoint ``step`` starts; ``total`` = units to measure there (0: all reused).
    * ``items``: ``done`` more units of the current checkpoint are measured.
    * ``step_done``: checkpoint ``step`` is in the records (measured or reused); ``total`` =
      its units (items × 2).
    """

    kind: Literal["run", "step", "items", "step_done"]
    trajectory: str
    step: int | None = None
    total: int = 0
    done: int = 0
    units: int = 0


ProgressCallback = Callable[[ProgressEvent], None]
