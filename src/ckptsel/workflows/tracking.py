"""Where ``analyze``, ``select`` and ``run`` send their results besides the results folder:
MLflow, W&B or Trackio (``--log``, the study file's ``[log]`` table), and the recommended
checkpoint registered there (``--register NAME``).

:class:`LogSettings` says where; :func:`log_analysis` logs a results folder (and, with
``register`` or ``trajectory``, that trajectory's ``select`` answer and its registration);
:func:`log_selection` logs a ``select`` answer alone. Every tracker package is imported before
the work starts (:meth:`LogSettings.check`: a missing one is one line with its install hint), and
logging never writes into the results folder, so ``summary.json`` is the same with or without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ckptsel.choose.rules import AVERAGE_RULE_RE, SIGNAL_RULES
from ckptsel.errors import CkptselError
from ckptsel.records.scan import read_frame
from ckptsel.records.schema import candidate_name
from ckptsel.trackers.base import TRACKERS, Logged, LogTarget, check_model_name, check_trackers, require
from ckptsel.trackers.log import log_results
from ckptsel.workflows.advise.selection import Selection, SelectSettings, select_checkpoint

# a study file's [log] table (typed by ckptsel.study's SCHEMA)
LOG_KEYS = ("to", "run_id", "run_name", "project", "tracking_uri", "register", "trajectory", "rule")


@dataclass(frozen=True)
class LogSettings:
    """Where results are logged.

    ``to``: tracker names (``mlflow``, ``wandb``, ``trackio``); ``run_ids``: the run to log into,
    per tracker (the training run: an MLflow or W&B run id, a Trackio run name), else a new run
    ``ckptsel-<run_name>`` linked to ``run_name``; ``project``: MLflow experiment / W&B or Trackio
    project; ``tracking_uri``: MLflow's; ``register``: the model name the recommended checkpoint
    is registered under; ``trajectory``: whose recommendation (default: the records' only one);
    ``rule``: the rule the recommendation follows; ``checkpoints``: the folder holding
    ``<trajectory>/checkpoint-<step>`` (the registration references the folder when it is there).
    """

    to: tuple[str, ...] = ()
    run_ids: Mapping[str, str] = field(default_factory=dict)
    run_name: str | None = None
    project: str | None = None
    tracking_uri: str | None = None
    register: str | None = None
    trajectory: str | None = None
    rule: str = "accuracy"
    checkpoints: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "to", check_trackers(list(self.to)))
        object.__setattr__(self, "run_ids", dict(self.run_ids))
        for name in self.run_ids:
            if name not in self.to:
                raise CkptselError(f"--run-id for {name}, which is not logged to (--log {name})")
        if self.rule not in SIGNAL_RULES and not AVERAGE_RULE_RE.fullmatch(self.rule):
            raise CkptselError(f"unknown rule {self.rule!r}; use one of {', '.join(SIGNAL_RULES)} (or an average's: mean_last3, ema_0_9)")
        if self.register is not None:
            check_model_name(self.register)

    @classmethod
    def build(cls, to: list[str] | tuple[str, ...] | None, run_id: list[str] | None = None, **kwargs: Any) -> LogSettings:
        """From CLI values: ``run_id`` entries are ``ID`` (one tracker) or ``TRACKER=ID``."""
        to = check_trackers(list(to or ()))
        ids: dict[str, str] = {}
        for value in run_id or ():
            name, sep, rid = value.partition("=")
            if sep and name in TRACKERS:
                ids[name] = rid
            elif len(to) == 1:
                ids[to[0]] = value
            else:
                raise CkptselError(f"--run-id {value!r}: with several --log, write TRACKER=ID (e.g. mlflow={value})")
        return cls(to=to, run_ids=ids, **kwargs)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "[log]") -> LogSettings:
        """From a study file's ``[log]`` table (:data:`LOG_KEYS`); errors name ``where``."""
        rest = dict(table)
        to, run_id = rest.pop("to", []), rest.pop("run_id", None)
        unknown = sorted(set(rest) - set(LOG_KEYS))
        if unknown:
            raise CkptselError(f"{where}: unknown key(s) {unknown}; known: {', '.join(LOG_KEYS)}")
        try:
            return cls.build(list(to), [run_id] if run_id else None, **rest)
        except CkptselError as err:
            raise CkptselError(f"{where}: {err}") from err

    def merged(self, other: LogSettings) -> LogSettings:
        """``other``'s values where given (the command line over the study file)."""
        changes = {
            k: getattr(other, k)
            for k in ("run_name", "project", "tracking_uri", "register", "trajectory", "checkpoints")
            if getattr(other, k) is not None
        }
        to = check_trackers([*self.to, *other.to])
        return replace(self, to=to, run_ids={**self.run_ids, **other.run_ids}, **changes)

    def check(self) -> LogSettings:
        """Import every tracker package now (a missing one: one line with its install hint)."""
        if self.register and not self.to:
            raise CkptselError("--register needs --log mlflow|wandb|trackio (or [log] to)")
        for name in self.to:
            require(name)
        return self

    def for_records(self, records_dir: Path) -> LogSettings:
        """With ``register`` and no ``trajectory``: the records' only trajectory (else one error
        naming them), so that the question is settled before any work."""
        if self.register and not self.trajectory:
            return replace(self, trajectory=_only_trajectory(records_dir))
        return self

    def targets(self) -> dict[str, LogTarget]:
        return {
            name: LogTarget(
                run_id=self.run_ids.get(name),
                run_name=self.run_name,
                project=self.project,
                tracking_uri=self.tracking_uri if name == "mlflow" else None,
            )
            for name in self.to
        }


def _only_trajectory(records_dir: Path) -> str:
    names = sorted(read_frame(Path(records_dir), "generations")["trajectory"].unique())
    if len(names) != 1:
        shown = ", ".join(names[:10]) + (" …" if len(names) > 10 else "")
        raise CkptselError(f"--register: the records hold {len(names)} trajectories ({shown}); say whose checkpoint with --trajectory")
    return str(names[0])


def _checkpoint(settings: LogSettings, selection: Selection) -> Path | None:
    if settings.checkpoints is None:
        return None
    # the folder even when it is not there: --register then names it (never a silent None)
    return settings.checkpoints / selection.trajectory / candidate_name(selection.recommendation.keep_step)


def log_selection(
    selection: Selection | dict,
    settings: LogSettings,
    *,
    results_dir: Path | None = None,
    checkpoint: Path | None = None,
    note: Callable[[str], None] = print,
) -> list[Logged]:
    """Log a ``select`` answer (with ``results_dir``: and that analysis) where ``settings`` say,
    registering the recommended checkpoint when ``settings.register`` is set."""
    if not settings.to:
        return []
    if checkpoint is None and isinstance(selection, Selection):
        checkpoint = _checkpoint(settings, selection)
    return log_results(
        results_dir,
        settings.to,
        selection=selection,
        register=settings.register,
        checkpoint=checkpoint,
        targets=settings.targets(),
        note=note,
    )


def log_analysis(
    records_dir: Path,
    results_dir: Path,
    settings: LogSettings,
    *,
    select_settings: SelectSettings | None = None,
    note: Callable[[str], None] = print,
) -> list[Logged]:
    """Log an ``analyze`` results folder where ``settings`` say. With ``settings.register`` (or
    ``settings.trajectory``) the trajectory's ``select`` answer is logged too, and with
    ``register`` its recommended checkpoint is registered."""
    if not settings.to:
        return []
    selection = None
    if settings.register or settings.trajectory:
        trajectory = settings.for_records(records_dir).trajectory
        selection = select_checkpoint(records_dir, str(trajectory), rule=settings.rule, settings=select_settings)
    if selection is None:
        return log_results(results_dir, settings.to, targets=settings.targets(), note=note)
    return log_selection(selection, settings, results_dir=results_dir, note=note)
