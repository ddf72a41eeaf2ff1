"""``ckptsel run STUDY.toml`` as one object: :class:`StudyRun`, a thin facade over the stage
functions (:mod:`~ckptsel.workflows.study_run.stages`), the worker pool
(:mod:`~ckptsel.workflows.study_run.workers`), the fingerprint and the plan, all working from one
:class:`~ckptsel.workflows.study_run.context.StudyContext`. :meth:`StudyRun.run` runs the
selected stages in order, checking the study's frozen protocol (when it has one) before every
stage and its fingerprint before each resumed one; with
``workers > 1`` the ``train`` and ``measure`` stages run together, per trajectory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ckptsel._util.extras import ML_HINT, missing_ml
from ckptsel._util.locations import is_url
from ckptsel.errors import CkptselError
from ckptsel.study.protocol import check_protocol
from ckptsel.study.spec import StudySpec
from ckptsel.train.models import check_lora_targets
from ckptsel.workflows.study_run import stages as st
from ckptsel.workflows.study_run.context import StudyContext, Trajectory
from ckptsel.workflows.study_run.fingerprint import check_fingerprint, fingerprint
from ckptsel.workflows.study_run.plan import DryRunPlan, dry_run_plan, finished, format_dry_run, plan
from ckptsel.workflows.study_run.workers import check_workers, train_and_measure


class StudyRun:
    """A loaded study file and its stages."""

    def __init__(self, spec: StudySpec, *, workers: int = 1, **context: Any) -> None:
        """``workers``: processes that train + measure trajectories (1: this process, stage
        by stage); ``context``: :class:`StudyContext`'s keywords (``device``, ``log``,
        ``console``: a rich console for the live display, shown only when it is a terminal;
        ``tracking``: the command line's ``--log`` options, over the file's ``[log]``).
        ``[executor]``, ``[log]`` and ``workers`` are checked here, before anything runs."""
        self.context = StudyContext(spec, **context)
        self.context.tracking  # noqa: B018 - [log] checked (and its packages imported) now
        self.workers = check_workers(workers, self.context.executor)
        self.context.analysis  # noqa: B018 - [analysis] parsed and checked now, not after training

    # ---------------------------------------------------------------- inputs
    @property
    def spec(self) -> StudySpec:
        return self.context.spec

    @property
    def records_dir(self) -> Path:
        return self.context.records_dir

    def pools(self) -> tuple[list, list]:
        """(validation items, test items), built once."""
        return self.context.pools

    def measure_config(self) -> Any:
        return self.context.measure_config

    def trajectories(self) -> list[Trajectory]:
        """Trained-here trajectories, then those found by each external configuration's glob."""
        return list(self.context.trajectories)

    # ---------------------------------------------------------------- fingerprint, plan
    def fingerprint(self) -> dict[str, Any]:
        return fingerprint(self.context)

    def check_fingerprint(self, write: bool = True) -> None:
        check_fingerprint(self.context, write)

    def finished(self, trajectories: Sequence[Trajectory]) -> set[str]:
        return finished(self.context, trajectories)

    def plan(self) -> list[dict[str, Any]]:
        """Per trajectory: checkpoints (existing or to train), items, generations to do/done."""
        return plan(self.context)

    def dry_run(
        self, form: Callable[[DryRunPlan], Any] = format_dry_run, *, cost: bool = True, rate_device: str | None = None, probe: bool = False
    ) -> Any:
        """The ``--dry-run`` table (``form``: how the :class:`DryRunPlan` — the :meth:`plan` rows
        and, with ``cost``, what measuring them costs, timed at ``rate_device``'s measured rate or
        by a ``probe`` here: :func:`~ckptsel.workflows.study_run.plan.dry_run_plan` — is given
        back; the table and its cost lines by default), writing nothing: the pool file is split into a temporary
        folder when the study's own split is not there yet (the validation pool is its part);
        every check the real run makes before its first step is made (the study file, ``[analysis]``,
        the LoRA target modules against the base model's skeleton, the fingerprint)."""
        base = self.spec.study.base_model
        configs = self.spec.study.configurations
        if missing := missing_ml():  # the plan itself needs neither
            self.context.log(
                f"dry run: LoRA target modules not checked ({' and '.join(missing)} not installed; the run needs them: {ML_HINT})"
            )
        elif is_url(base) or not all([check_lora_targets(base, c) for c in configs]):
            self.context.log(f"dry run: LoRA target modules not checked ({base} is not here)")
        if self.spec.split is None or (self.context.split_dir / "lineage.json").is_file():
            self.check_fingerprint(write=False)
            return form(dry_run_plan(self.context, cost, rate_device, probe))
        with tempfile.TemporaryDirectory(prefix="ckptsel-dry-run-") as tmp:
            self.context.split_dir = Path(tmp)
            try:
                st.split(self.context)
                self.check_fingerprint(write=False)
                return form(dry_run_plan(self.context, cost, rate_device, probe))
            finally:
                self.context.split_dir = self.spec.state_dir / "split"
                self.context.__dict__.pop("pools", None)  # built from the temporary split

    # ---------------------------------------------------------------- stages
    def prepare(self) -> None:
        st.prepare(self.context)

    def train(self, only: Sequence[str] | None = None) -> None:
        st.train(self.context, only)

    def measure(self, only: Sequence[str] | None = None) -> None:
        st.measure(self.context, only)

    def train_and_measure(self, train: bool = True, measure: bool = True) -> None:
        train_and_measure(self.context, self.workers, train, measure)

    def analyze(self) -> dict:
        return st.analyze(self.context)

    def run(self, stages: Sequence[str] = st.STAGES, watch: bool = False) -> dict | None:
        """Run ``stages`` in order; with ``workers > 1`` train and measure together, per
        trajectory (:meth:`train_and_measure`); with ``watch``, measure each checkpoint of the
        trajectories trained here as soon as it lands (:func:`~ckptsel.workflows.study_run.
        stages.train_and_watch`)."""
        summary = None
        together = self.workers > 1
        if watch and (together or "measure" not in stages):
            raise CkptselError("--watch measures while training: use it with --workers 1 and a measure stage")
        for stage in st.STAGES:
            if stage not in stages:
                continue
            check_protocol(self.spec.source)  # a frozen protocol still holds, before every stage
            if stage != "prepare":  # a resumed stage still checks the study first
                self.check_fingerprint(write=False)
            if watch and stage in ("train", "measure"):
                if stage == "measure":  # the train stage runs beside it
                    st.train_and_watch(self.context, train_here="train" in stages)
            elif together and stage in ("train", "measure"):
                if stage == "measure" and "train" in stages:
                    continue  # done with the train stage
                self.train_and_measure(train="train" in stages, measure="measure" in stages)
            elif stage == "analyze":
                summary = self.analyze()
            else:
                getattr(self, stage)()
        return summary
