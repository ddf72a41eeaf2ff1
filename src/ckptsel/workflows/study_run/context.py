"""What every stage of a study run works from, built once: :class:`StudyContext` holds the loaded
study file (``StudySpec``), the device, the checked ``[executor]``, where lines go (``log``,
``console``), and derives on first use the parsed ``[analysis]``
(:class:`~ckptsel.workflows.analysis.AnalysisSettings`), the validation and test pools, the
:class:`~ckptsel.measure.MeasureConfig` and the study's :class:`Trajectory` s (trained here, or
found by each external configuration's glob, seed read from the folder name by
:func:`ckptsel.study.seed_of`).

The pools and the trajectories are derived lazily because, with ``[pool]``, they read the
split's files, which the ``prepare`` stage writes first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location, as_location
from ckptsel._util.nodecache import local_copy
from ckptsel.choose.rules import user_rule
from ckptsel.data.pools import build_pools
from ckptsel.data.tasks import load_items
from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors.base import ExecutorConfig
from ckptsel.study.configuration import seed_of
from ckptsel.study.spec import StudySpec  # seed_of: its old home, kept
from ckptsel.train.models import pick_device
from ckptsel.workflows.analysis import AnalysisSettings
from ckptsel.workflows.study_run.progress import Log
from ckptsel.workflows.tracking import LogSettings


@dataclass(frozen=True)
class Trajectory:
    """One trajectory of the study and where its checkpoints are (or will be)."""

    name: str
    configuration: str
    source: str  # "train" | "runs" | "lm_eval"
    folder: Path | Location  # runs found at a URL: a Location
    expected_steps: tuple[int, ...] = ()  # trained here: the checkpoint grid
    filter: str | None = None  # lm-eval filter


class StudyContext:
    """A loaded study and the inputs its stages share (each built once, on first use)."""

    def __init__(
        self,
        spec: StudySpec,
        *,
        device: str | None = None,
        log: Log = print,
        console: Any = None,
        tracking: LogSettings | None = None,
        check_device: bool = True,
    ) -> None:
        """``[executor]`` is checked here, before anything runs; ``tracking``: the command
        line's ``--log`` options, over ``[log]`` (:attr:`tracking`); ``console``: a rich console
        for the live display (shown only when it is a terminal); ``check_device=False``: the
        device is not looked for here (a dry run's named GPU, whose part keys it still reads)."""
        self.spec, self.device, self.log, self.console = spec, device, log, console
        self.check_device = check_device
        try:
            self.executor = ExecutorConfig.coerce(spec.executor)
        except CkptselError as err:
            raise CkptselError(f"{spec.source}: [executor]: {err}") from err
        self._given_tracking = tracking
        self.split_dir = spec.state_dir / "split"  # ``--dry-run``: a temporary folder instead

    @cached_property
    def tracking(self) -> LogSettings:
        """Where the results are logged (the study file's ``[log]``, then the command line's);
        the tracker packages imported and the registered trajectory settled on first use
        (:class:`~ckptsel.workflows.StudyRun` asks at once; worker processes never do)."""
        tracking = LogSettings.from_table(self.spec.log, f"{self.spec.source}: [log]")
        if self._given_tracking is not None:
            tracking = tracking.merged(self._given_tracking)
        if tracking.register and not tracking.trajectory:
            names = [t.name for t in self.trajectories]
            if len(names) != 1:
                raise CkptselError(
                    f"{self.spec.source}: [log] register: the study has {len(names)} "
                    'trajectories; say whose checkpoint with trajectory = "NAME" (--trajectory)'
                )
            tracking = replace(tracking, trajectory=names[0])
        return tracking.check()

    @cached_property
    def analysis(self) -> AnalysisSettings:
        """The study's ``[analysis]`` and ``[rules.NAME]`` (a researcher's rules, their files
        beside the study file, imported now), parsed and checked once (an error names the study file)."""
        rules = []
        for name, table in self.spec.rules.items():
            if not isinstance(self.spec.source, Path):
                raise CkptselError(f"{self.spec.source}: [rules.{name}]: a rule's file must be beside a study file on this machine")
            try:
                rules.append(
                    user_rule(
                        table["signal"],
                        name=name,
                        base=self.spec.source.parent,
                        owner="study file",
                        **{k: v for k, v in table.items() if k != "signal"},
                    )
                )
            except CkptselError as err:
                raise CkptselError(f"{self.spec.source}: [rules.{name}]: {err}") from None
        return AnalysisSettings.from_table({**self.spec.analysis, "rules": rules}, f"{self.spec.source}: [analysis]")

    @property
    def records_dir(self) -> Path | Location:
        return self.spec.study.records_root

    @property
    def validation_spec(self) -> Any:
        """The validation pool spec; with ``[pool]`` its file is the split's validation part."""
        v = self.spec.validation
        if not v.files and self.spec.split is not None:
            ext = self.spec.split.file.suffix or ".jsonl"
            return replace(v, files=(self.split_dir / f"validation{ext}",))
        return v

    @cached_property
    def pools(self) -> tuple[list, list]:
        """(validation items, test items)."""
        return build_pools(self.validation_spec, self.spec.test)

    @cached_property
    def measure_config(self) -> MeasureConfig:
        m = dict(self.spec.study.measure)
        if self.device is not None:
            m["device"] = self.device
        m.setdefault("device", pick_device())
        v, t = self.spec.validation.task, self.spec.test.task
        # on Ray the GPUs are the workers', not this process's: checked where the models run
        check_here = self.executor.kind != "ray" and self.check_device
        return MeasureConfig(task=v, test_task=t if t != v else None, check_here=check_here, **m)

    def n_train(self) -> int:
        """Training items (0 when nothing is trained here or the file is not there yet)."""
        st = self.spec.study
        if not st.configurations or st.train is None or not st.train.exists():
            return 0
        return len(load_items(st.task, st.train))

    @cached_property
    def trajectories(self) -> tuple[Trajectory, ...]:
        """Trained-here trajectories, then those found by each external configuration's glob."""
        st = self.spec.study
        n = self.n_train() if any(c.epochs is not None for c in st.configurations) else 0
        out = [Trajectory(name, cfg.name, "train", st.run_root / name, tuple(cfg.save_steps(n))) for name, cfg, _seed in st.trajectories()]
        for ext in self.spec.external:
            out += _external(ext)
        names = [t.name for t in out]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise CkptselError(f"trajectory names occur twice: {dup} (two folders, one seed?)")
        return tuple(out)

    def trajectory(self, name: str) -> Trajectory:
        return next(t for t in self.trajectories if t.name == name)


def _external(ext: Any) -> list[Trajectory]:
    """The trajectories of one external configuration (``runs`` or ``lm_eval`` glob; a URL
    pattern is listed on its store, lm-eval folders there read from this node's copy)."""
    folders = [f for f in as_location(ext.pattern).glob() if f.is_dir()]
    if not folders:
        raise CkptselError(f"configuration {ext.name!r}: {ext.kind} = {ext.pattern!r} matches no folder")
    out = []
    for loc in folders:
        seed = seed_of(loc.name)
        if seed is None:
            raise CkptselError(f"configuration {ext.name!r}: cannot read a seed from folder {loc} (name it ...-s<seed> or ..._seed<seed>)")
        f = loc.local if loc.is_local else (local_copy(loc) if ext.kind == "lm_eval" else loc)
        out.append(Trajectory(f"{ext.name}-s{seed}", ext.name, ext.kind, f, (), ext.filter))
    return out
