"""``--workers N``: the ``train`` and ``measure`` stages per trajectory, in ``N`` spawned
processes. :func:`train_and_measure` skips the trajectories already trained and fully recorded
without starting a process (:func:`~ckptsel.workflows.study_run.plan.finished`), runs
:func:`trajectory_job` for each of the others in a process pool, and ingests lm-eval samples
here afterwards. Every trajectory's training is seeded on its own and the records store takes
per-trajectory units under a lock, so the records and ``summary.json`` are those of
``workers = 1``.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from ckptsel.errors import CkptselError
from ckptsel.study.spec import StudySpec
from ckptsel.workflows.study_run import stages
from ckptsel.workflows.study_run.context import StudyContext
from ckptsel.workflows.study_run.plan import finished
from ckptsel.workflows.study_run.progress import live, quiet_transformers


def check_workers(workers: Any, executor: Any) -> int:
    """``--workers``: an integer >= 1, and 1 with a Ray ``[executor]``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise CkptselError(f"--workers must be an integer >= 1, got {workers!r}")
    if workers > 1 and executor.kind == "ray":
        raise CkptselError(
            f"--workers {workers}: [executor] is ray, which spreads the measurement over its cluster itself; run with --workers 1"
        )
    return workers


def trajectory_job(spec: StudySpec, device: str | None, name: str, train: bool = True, measure: bool = True) -> list[str]:
    """Train (when it is trained here and ``train``) and measure (when ``measure``) one
    trajectory of ``spec``; returns its log lines. A top-level function so that spawned worker
    processes can run it: one torch thread each (tiny models gain nothing from more, and
    ``workers`` processes share the cores); the records store takes per-trajectory units
    under a lock, so trajectories measured in parallel never clobber each other."""
    import warnings

    import torch

    torch.set_num_threads(1)
    quiet_transformers()
    # peft asks transformers 5 for a deprecated attribute on every load: nothing a user can do,
    # and in a log it would be two lines per trajectory
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
    lines: list[str] = []
    ctx = StudyContext(spec, device=device, log=lines.append)
    if train and ctx.trajectory(name).source == "train":
        stages.train(ctx, only=[name])
    if measure:
        stages.measure(ctx, only=[name])
    return lines


def train_and_measure(ctx: StudyContext, workers: int, train: bool = True, measure: bool = True) -> None:
    """The ``train`` and/or ``measure`` stages per trajectory in ``workers`` spawned
    processes (:func:`trajectory_job`); lm-eval samples are ingested here afterwards."""
    trajs = [t for t in ctx.trajectories if t.source != "lm_eval"]
    done = finished(ctx, trajs) if measure else set()
    if done:
        ctx.log(f"train + measure: already done, skipped: {', '.join(sorted(done))}")
    todo = [t.name for t in trajs if t.name not in done]
    what = " + ".join(s for s, on in (("train", train), ("measure", measure)) if on)
    if todo:
        _run_jobs(ctx, todo, min(workers, len(todo)), what, train, measure)
    if measure:
        for t in ctx.trajectories:
            if t.source == "lm_eval":
                stages.ingest(ctx, t)


def _run_jobs(ctx: StudyContext, names: list[str], n: int, what: str, train: bool, measure: bool) -> None:
    """:func:`trajectory_job` for each of ``names`` in ``n`` spawned processes; their lines are
    logged here as each finishes."""
    label = f"{what} ({n} process{'es' if n > 1 else ''})"
    with live(ctx.console, label, len(names)) as advance:
        mp = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=n, mp_context=mp) as pool:
            futures = [pool.submit(trajectory_job, ctx.spec, ctx.device, name, train, measure) for name in names]
            try:
                for fut in as_completed(futures):
                    for line in fut.result():
                        ctx.log(line)
                    advance()
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
