"""Measure every checkpoint of a run into records (SPEC §2–3): generation + NLL, both splits.

:func:`measure_run` performs, in order: check the names and inputs (items, checkpoints, the
records already there) before the first write; then per checkpoint, load its part cache
(:mod:`ckptsel.measure.parts`), have an executor (:mod:`ckptsel.measure.executors`) measure
only what is missing, save the parts, and upsert the checkpoint's contract rows
(:func:`ckptsel.records.upsert_records`). Progress goes out as
:class:`~ckptsel.measure.progress.ProgressEvent` s; there is no UI code here. Every option
comes in one validated :class:`~ckptsel.measure.config.MeasureConfig`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors import open_executor
from ckptsel.measure.measurer import MeasureResult
from ckptsel.measure.parts import ItemPool, StepParts
from ckptsel.measure.progress import ProgressCallback, ProgressEvent
from ckptsel.measure.provenance import ProvenanceGate
from ckptsel.records import GENERATIONS_FILE, SPLITS, check_name, read_rows, upsert_records
from ckptsel.train import discover_checkpoints


def _check_trajectory_identity(
    table, out: Path, trajectory: str, configuration: str, config: MeasureConfig
) -> None:
    """A trajectory name already in ``out`` must keep its configuration and each split's task
    (else the mix would only surface at ``analyze``)."""
    if table is None or table.num_rows == 0:
        return
    cols = [c for c in ("trajectory", "configuration", "task", "split") if c in table.column_names]
    if len(cols) < 4:
        return
    df = table.select(cols).to_pandas().drop_duplicates()
    mine = df[df["trajectory"] == trajectory]
    checks = [("configuration", configuration, mine)] + [
        ("task", config.task_for(split), mine[mine["split"].astype(str) == split])
        for split in SPLITS
    ]
    for column, value, rows in checks:
        other = sorted(set(rows[column].astype(str)) - {value})
        if other:
            raise CkptselError(
                f"{out / GENERATIONS_FILE}: trajectory {trajectory!r} is already recorded with "
                f"{column} {other[0]!r}, not {value!r}; pick another --trajectory name"
            )


def measure_run(
    run_dir: Path,
    config: MeasureConfig,
    *,
    validation: Path,
    test: Path,
    out: Path,
    base: str | None = None,
    trajectory: str | None = None,
    configuration: str | None = None,
    on_progress: ProgressCallback | None = None,
    after_checkpoint: Callable[[int], None] | None = None,
    executor: Any = None,
    allow_mixed_engines: bool = False,
) -> MeasureResult:
    """Measure every checkpoint of ``run_dir`` on the validation and test items into ``out``.

    Everything (items, checkpoints, base models, records already in ``out``) is validated
    before the first write; bad input raises :class:`CkptselError`. Rows of other
    trajectories in ``out`` are kept. ``base`` overrides the adapters' base model;
    ``trajectory`` defaults to the run folder's name and ``configuration`` to the
    trajectory. ``on_progress(event)`` receives :class:`ProgressEvent` s;
    ``after_checkpoint(step)`` is called once a step's records are in the contract files
    (tests use it). ``executor`` says where checkpoints are measured: ``None``/``"local"``
    (this process), ``"ray"`` or an :class:`~ckptsel.measure.executors.ExecutorConfig`
    (a Ray cluster; results still come back here and are written by this process alone).
    Each unit records what measured it (:mod:`ckptsel.measure.provenance`); rows measured with
    a provenance the trajectory's records lack are refused before they are written, unless
    ``allow_mixed_engines`` (then the units say what was mixed).
    """
    t_start = time.perf_counter()
    run_dir, out = Path(run_dir), Path(out)
    trajectory = check_name("trajectory", trajectory or run_dir.resolve().name)
    configuration = check_name("configuration", configuration or trajectory)
    pool = ItemPool.load(config.task, validation, test, config.test_task)
    ckpts = discover_checkpoints(run_dir, base)
    read_rows(out, "nll", columns=["trajectory"], filters=[("trajectory", "=", trajectory)])
    _check_trajectory_identity(
        read_rows(out, "generations", columns=["trajectory", "configuration", "task", "split"],
                  filters=[("trajectory", "=", trajectory)]),
        out, trajectory, configuration, config,
    )
    result = MeasureResult(trajectory, configuration, [c.step for c in ckpts])
    emit = on_progress or (lambda event: None)
    emit(ProgressEvent("run", trajectory, total=len(ckpts) * pool.n_items * 2, units=len(ckpts)))
    units = [(ckpt, StepParts(out, trajectory, ckpt.step, config, pool)) for ckpt in ckpts]
    gate = ProvenanceGate(out, trajectory, config.only, allow_mixed_engines)
    if any(parts.n_todo for _, parts in units):
        gate.check_settings(config)  # before any model loads
    with open_executor(executor, config, ckpts, base, result) as measurer:
        # units come back in the executor's order (local: one by one; ray: as they finish);
        # the driver alone writes: parts files, then the checkpoint's contract rows
        for ckpt, parts, new in measurer.run(units, trajectory, configuration, emit):
            if new is not None:
                gate.admit_rows(*new)  # before anything is cached or recorded
                parts.add(*new)
                result.measured_steps.append(ckpt.step)
            else:
                result.reused_steps.append(ckpt.step)
            upsert_records(
                out,
                generations=parts.contract_generations(
                    config.task, trajectory, configuration, config.test_task
                ),
                nll=parts.contract_nll(trajectory),
                provenance=gate.units(parts),
            )
            emit(ProgressEvent("step_done", trajectory, step=ckpt.step, total=pool.n_items * 2))
            if after_checkpoint is not None:
                after_checkpoint(ckpt.step)
    result.measured_steps.sort()
    result.reused_steps.sort()
    result.seconds = time.perf_counter() - t_start
    return result
