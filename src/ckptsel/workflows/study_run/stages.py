"""The stages of ``ckptsel run``, in order (:data:`STAGES`), each a function of the
:class:`~ckptsel.workflows.study_run.context.StudyContext` and each idempotent, so a job killed
anywhere and run again continues and ends with the same records and the same ``summary.json``:

* :func:`prepare` — with ``[pool]``, split the fine-tuning file into train + validation
  (:func:`split`: :func:`ckptsel.data.split_file`, skipped when its lineage matches the file)
  and audit the train, validation and test questions for overlap (:func:`audit`, once); build
  the validation and test pools and write them (with their strata) under
  ``<workdir>/.ckptsel/``; check the study against the fingerprint of the recorded work and
  store it.
* :func:`train` — every trajectory of the configurations trained here that lacks its final
  checkpoint (:func:`ckptsel.train.train_study`; finished ones are skipped, others resume).
* :func:`measure` — every checkpoint of every trajectory (trained here, or existing run folders
  found by a glob), on both pools (:func:`ckptsel.measure.measure_run`, whose part cache skips
  what is recorded); with ``[averages]``, each trajectory's averages are written first, once it
  has all its checkpoints (:func:`write_averages`), and measured after its checkpoints;
  lm-eval sample folders are ingested (:func:`ingest`).
* :func:`analyze` — :func:`ckptsel.workflows.analyze` with the report.

With ``--watch`` (:func:`train_and_watch`) the ``train`` stage runs in a background thread while
the ``measure`` stage watches each trajectory trained here (:func:`ckptsel.workflows.
watch_and_select`), measuring each checkpoint as soon as its folder is in place and keeping the
trajectory's ``selection.json`` current; a trajectory's watch ends at its last checkpoint of the
grid. ``--only measure --watch`` watches runs that another process trains.

:func:`stages_to_run` reads ``--until`` / ``--only``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from ckptsel._util.io import write_text
from ckptsel.data.audit.files import write_audit
from ckptsel.data.audit.run import audit_pools
from ckptsel.data.pools import strata_counts
from ckptsel.data.split import split_file
from ckptsel.data.tasks import load_items
from ckptsel.errors import CkptselError
from ckptsel.ingest.lm_eval import ingest_lm_eval
from ckptsel.measure.run import measure_run
from ckptsel.measure.watch import WatchSettings
from ckptsel.records.schema import candidate_name, counted
from ckptsel.study.protocol import check_protocol, protocol_path
from ckptsel.train.average_write import average_run
from ckptsel.train.checkpoints import checkpoint_steps
from ckptsel.train.study import train_study
from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint
from ckptsel.workflows.analysis import AnalysisEvents
from ckptsel.workflows.analysis import analyze as analyze_records
from ckptsel.workflows.study_run.context import StudyContext, Trajectory
from ckptsel.workflows.study_run.fingerprint import check_fingerprint
from ckptsel.workflows.study_run.progress import live
from ckptsel.workflows.tracking import log_analysis, log_selection
from ckptsel.workflows.watching import watch_and_select

STAGES = ("prepare", "train", "measure", "analyze")


def stages_to_run(until: str | None = None, only: str | None = None) -> tuple[str, ...]:
    """The stages selected by ``--until`` / ``--only`` (one of them at most)."""
    for flag, value in (("--until", until), ("--only", only)):
        if value is not None and value not in STAGES:
            raise CkptselError(f"{flag} {value!r}: stages are {', '.join(STAGES)}")
    if until and only:
        raise CkptselError("give --until or --only, not both")
    if only:
        return (only,)
    if until:
        return STAGES[: STAGES.index(until) + 1]
    return STAGES


# --------------------------------------------------------------------------- prepare


def prepare(ctx: StudyContext) -> None:
    """Split (with ``[pool]``), check and store the fingerprint, write the pools, audit."""
    spec = ctx.spec
    if spec.split is not None:
        split(ctx)
    check_fingerprint(ctx)
    val, test = ctx.pools
    for name, items in (("validation", val), ("test", test)):
        rows = [{**asdict(it)} for it in items]
        write_text(spec.state_dir / "pools" / f"{name}.json", json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    strata = {"validation": strata_counts(val), "test": strata_counts(test)}
    write_text(spec.state_dir / "pools" / "strata.json", json.dumps(strata, indent=2) + "\n")
    ctx.log(
        f"prepare: validation {len(val)} items ({spec.validation.task}), "
        f"test {len(test)} items ({spec.test.task})" + (f"; strata {strata['test']}" if len(strata["test"]) > 1 else "")
    )
    if spec.split is not None:
        audit(ctx, val, test)


def split(ctx: StudyContext) -> None:
    """``[pool]``: the fine-tuning file into train + validation, unless its lineage matches."""
    sp, out = ctx.spec.split, ctx.split_dir
    lineage = out / "lineage.json"
    sha = hashlib.sha256(sp.file.read_bytes()).hexdigest()
    if lineage.is_file():
        lin = json.loads(lineage.read_text(encoding="utf-8"))
        same = lin.get("source_sha256") == sha and lin.get("seed") == sp.seed
        if same and lin.get("val_fraction") == sp.val_fraction:
            ctx.log("prepare: split is done (lineage matches the pool file)")
            return
    split_file(  # the study's own state folder: an interrupted split is simply redone
        sp.file, out, seed=sp.seed, val_fraction=sp.val_fraction, group_field=sp.group_field, force=True
    )
    ctx.log(f"prepare: split {sp.file.name} into train + validation ({out})")


def audit(ctx: StudyContext, val: list, test: list) -> None:
    """The overlap audit of train, validation and test questions (once)."""
    out = ctx.spec.state_dir / "audit"
    if (out / "audit.json").is_file():
        return
    st = ctx.spec.study
    train_items = [it.instruction for it in load_items(st.task, st.train)]
    res = audit_pools({"train": train_items, "validation": [it.instruction for it in val], "test": [it.instruction for it in test]})
    write_audit(res, out)
    ctx.log(f"prepare: overlap audit written to {out / 'audit.md'}")


# --------------------------------------------------------------------------- train, measure


def train(ctx: StudyContext, only: Sequence[str] | None = None) -> None:
    """Train (or resume) the trajectories trained here (``only``: these names)."""
    st = ctx.spec.study
    if not st.configurations:
        ctx.log("train: no configuration is trained here")
        return
    with live(ctx.console, "train", len(st.trajectories()) if only is None else 0) as advance:

        def log(m: str) -> None:  # train_study logs one line per trajectory
            ctx.log(f"train: {m}")
            advance()

        train_study(st, only=only, device=ctx.device, progress=False, log=log)


WATCH_POLL = 2.0  # seconds between listings of a run trained here (--watch)


def measure(ctx: StudyContext, only: Sequence[str] | None = None, watch: Callable[[], Callable[[float], None]] | None = None) -> None:
    """Measure every checkpoint of every trajectory (``only``: these names). ``watch``: the
    trajectories trained here are watched while they train, each watcher sleeping between
    polls with a sleep ``watch()`` makes (it raises when the training it waits for failed)."""
    trajs = [t for t in ctx.trajectories if only is None or t.name in only]
    with live(ctx.console, "measure", len(trajs) if only is None else 0) as advance:
        for t in trajs:
            if t.source == "lm_eval":
                ingest(ctx, t)
                advance()
                continue
            if watch is not None and t.source == "train":
                watch_trajectory(ctx, t, watch())
                if not write_averages(ctx, t):
                    advance()
                    continue
            else:
                write_averages(ctx, t)
            res = measure_run(t.folder, ctx.measure_config, **_measured_as(ctx, t))
            ctx.log(
                f"measure: {t.name}: {counted(res.steps)}, "
                f"{len(res.measured_steps)} measured, {len(res.reused_steps)} already "
                f"recorded ({res.seconds:.1f}s)" + (f"; {res.engines}" if res.engines else "")
            )
            advance()


def write_averages(ctx: StudyContext, t: Trajectory) -> bool:
    """``[averages]``: write the trajectory's averages beside its checkpoints
    (:func:`ckptsel.train.average_write.average_run`; those already there are kept), once it
    has every checkpoint (trained here: the whole grid), so ``measure_run`` measures them with
    its checkpoints. False when the study asks for none or the trajectory is still training."""
    asked = ctx.spec.averages
    if not asked:
        return False
    if t.source == "train" and not set(t.expected_steps) <= set(checkpoint_steps(t.folder)):
        ctx.log(f"measure: {t.name}: not trained to its last checkpoint yet; its averages are written once it is")
        return False
    answers = average_run(t.folder, asked["last"], asked["ema"])
    written = [a["name"] for a in answers if a["status"] != "already there"]
    if written:
        ctx.log(f"measure: {t.name}: averages {', '.join(written)} written")
    return True


def _measured_as(ctx: StudyContext, t: Trajectory) -> dict:
    """What ``measure_run`` and ``watch_and_select`` are told of trajectory ``t``: its items,
    the records folder, its names and the executor."""
    val, test = ctx.pools
    where = {"validation": val, "test": test, "out": ctx.records_dir, "trajectory": t.name}
    return {**where, "configuration": t.configuration, "executor": ctx.executor}


def watch_trajectory(ctx: StudyContext, t: Trajectory, sleep: Callable[[float], None]) -> None:
    """One trajectory trained here, measured checkpoint by checkpoint as its folders land
    (ckptsel's trainer renames a whole checkpoint folder into place: no settle time needed)."""
    final = t.expected_steps[-1] if t.expected_steps else None
    settings = WatchSettings(poll=WATCH_POLL, settle=0.0, until_step=final)
    status = watch_and_select(t.folder, ctx.measure_config, **_measured_as(ctx, t), settings=settings, sleep=sleep)
    ctx.log(
        f"measure: {t.name}: watched, {len(status.recorded)} checkpoints recorded as they "
        f"landed (final step {status.final_step})" + (f"; {status.engines}" if status.engines else "")
    )


class _Background(threading.Thread):
    """A stage in a background thread; the watchers' sleeps (:meth:`sleeper`) raise once it
    has failed or ended, so no watcher waits for checkpoints that will never come."""

    def __init__(self, work: Callable[[], None]) -> None:
        super().__init__(name="ckptsel-train", daemon=True)
        self.work, self.error = work, None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as err:  # noqa: BLE001 - raised in the main thread
            self.error = err

    def sleeper(self, polls_after: int = 5) -> Callable[[float], None]:
        """A watcher's sleep: raises once the training has failed, or once it has ended and
        the watcher has still not finished after ``polls_after`` more polls."""
        left = [polls_after]

        def sleep(seconds: float) -> None:
            if self.error is not None:
                raise CkptselError(f"--watch: training stopped ({self.error}); nothing more to watch")
            if not self.is_alive():
                left[0] -= 1
                if left[0] < 0:
                    raise CkptselError(
                        "--watch: training has ended but a trajectory's final checkpoint was "
                        "never complete; see its status.json in the records folder"
                    )
            time.sleep(seconds)

        return sleep


def train_and_watch(ctx: StudyContext, train_here: bool) -> None:
    """``--watch``: the ``measure`` stage watching the trajectories trained here while (with
    ``train_here``) the ``train`` stage runs in a background thread."""
    if not train_here:
        measure(ctx, watch=lambda: time.sleep)
        return
    quiet = copy.copy(ctx)
    quiet.console = None  # one live display at a time: the measure stage's
    trainer = _Background(lambda: train(quiet))
    trainer.start()
    try:
        measure(ctx, watch=trainer.sleeper)
    finally:
        trainer.join()
    if trainer.error is not None:
        raise trainer.error


def ingest(ctx: StudyContext, t: Trajectory) -> None:
    """lm-eval samples: ``<trajectory folder>/<split>/checkpoint-<step>/`` per split."""
    for split_name in ("validation", "test"):
        folders = sorted(p for p in (t.folder / split_name).glob("checkpoint-*") if p.is_dir())
        if not folders:
            raise CkptselError(f"{t.folder / split_name}: no checkpoint-<step>/ sample folders")
        task = ctx.spec.test.task if split_name == "test" else ctx.spec.validation.task
        ingest_lm_eval(
            folders,
            out=ctx.records_dir,
            trajectory=t.name,
            configuration=t.configuration,
            task=task,
            split=split_name,
            filter_name=t.filter,
            replace=True,  # a re-run
            note=lambda m: ctx.log(f"measure: {m}"),
        )
    ctx.log(f"measure: {t.name}: lm-eval samples ingested")


# --------------------------------------------------------------------------- analyze


def analyze(ctx: StudyContext) -> dict:
    """The analysis with the report, into the study's results folder (``[analysis]``), bound to
    the study's frozen protocol when it has one, then logged where ``[log]`` says."""
    out = ctx.spec.results_dir
    source = ctx.spec.source
    protocol = check_protocol(source)
    where = protocol_path(source)  # named in run.json for verify: absolute, or the URL
    where = where.resolve() if isinstance(where, Path) else where
    summary = analyze_records(
        ctx.records_dir,
        out,
        settings=ctx.analysis,
        report=True,
        events=_LoggedWarnings(ctx),
        protocol=protocol,
        protocol_file=None if protocol is None else str(where),
    )
    ctx.log(f"analyze: results in {out}; {summary.protocol.status}")
    log_results(ctx, out)
    return summary


class _LoggedWarnings(AnalysisEvents):
    """The analysis' warnings (a study that mixes engines) in the study's log; nothing else."""

    def __init__(self, ctx: StudyContext) -> None:
        self.ctx = ctx

    def warn(self, line: str) -> None:
        self.ctx.log(f"analyze: warning: {line}")


def log_results(ctx: StudyContext, out: Path) -> None:
    """The results (and, with a trajectory, its recommendation, registered with ``register``)
    to the trackers ``[log]`` names; the registration references the checkpoint's folder."""
    tracking = ctx.tracking
    if not tracking.to:
        return
    note = lambda line: ctx.log(f"log: {line}")  # noqa: E731
    if not tracking.trajectory:
        log_analysis(ctx.records_dir, out, tracking, note=note)
        return
    stat = ctx.analysis.stat
    settings = SelectSettings(seed=stat.seed, level=stat.level)
    selection = select_checkpoint(ctx.records_dir, tracking.trajectory, rule=tracking.rule, settings=settings)
    folder = ctx.trajectory(tracking.trajectory).folder
    checkpoint = folder / candidate_name(selection.recommendation.keep_step)  # checkpoint-<step>, or the average's folder
    # the folder even when it is gone: --register then names it (never "give --checkpoints")
    local = isinstance(checkpoint, Path)
    log_selection(selection, tracking, results_dir=out, note=note, checkpoint=checkpoint if local or checkpoint.is_dir() else None)
