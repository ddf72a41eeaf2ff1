"""Whether a task can tell checkpoints apart at all: its signal against its noise (after
Heineman et al. 2025, "Signal and Noise", arXiv 2508.13144), from the test accuracies of the
checkpoints (descriptive: nothing is chosen on them).

Per task, in percentage points of test accuracy:

* **noise** — how much a trajectory's score moves between its last checkpoints: the standard
  deviation (``ddof=1``) of each trajectory's test accuracy over its last ``last`` checkpoints
  (all of them when it has fewer; a trajectory with one checkpoint has none), root-mean-square
  over the task's trajectories;
* **signal** — how far apart the configurations end: the standard deviation (``ddof=1``) across
  configurations of each configuration's final-checkpoint test accuracy (the mean over its
  trajectories), with two or more configurations;
* **ratio** — signal / noise. Well above 1, the configurations' differences stand out of the
  checkpoint-to-checkpoint wobble; near or below 1, a choice between late checkpoints is mostly
  noise on this task.

:func:`signal_and_noise` takes per-trajectory accuracy curves and returns one
:class:`~ckptsel.results.summary.TaskSignal` per task.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ckptsel.defaults import NOISE_CHECKPOINTS
from ckptsel.results.estimate import stored_value
from ckptsel.results.summary import TaskSignal


def signal_and_noise(
    curves: Sequence[np.ndarray], configurations: Sequence[str], tasks: Sequence[str], last: int = NOISE_CHECKPOINTS
) -> dict[str, TaskSignal]:
    """``{task: TaskSignal}`` of test-accuracy ``curves`` (one ``(T_j,)`` array per trajectory,
    checkpoints in step order, pp) with each trajectory's configuration and task."""
    if last < 2:
        raise ValueError("the noise needs the last 2 or more checkpoints")
    out = {}
    for task in sorted(set(tasks)):
        mine = [j for j, t in enumerate(tasks) if t == task]
        tails = [np.asarray(curves[j], dtype=np.float64)[-last:] for j in mine]
        spreads = np.array([np.std(a, ddof=1) for a in tails if len(a) >= 2])
        noise = float(np.sqrt(np.mean(spreads**2))) if len(spreads) else None
        finals: dict[str, list[float]] = {}
        for j in mine:
            finals.setdefault(configurations[j], []).append(float(np.asarray(curves[j])[-1]))
        means = np.array([np.mean(v) for _, v in sorted(finals.items())])
        signal = float(np.std(means, ddof=1)) if len(means) >= 2 else None
        ratio = signal / noise if signal is not None and noise is not None and noise > 0 else None
        out[task] = TaskSignal(stored_value(signal), stored_value(noise), stored_value(ratio), len(means), len(spreads))
    return out
