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

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location, as_location
from ckptsel.data.prompts import CHAT
from ckptsel.data.tasks import task_label
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import run_tokenizer, tokenizer_source
from ckptsel.measure.config import MeasureConfig, MeasureSpec
from ckptsel.measure.executors import open_executor
from ckptsel.measure.measurer import MeasureResult
from ckptsel.measure.parts import ItemPool, StepParts
from ckptsel.measure.progress import ProgressCallback, ProgressEvent
from ckptsel.measure.provenance import ProvenanceGate
from ckptsel.records.scan import read_rows
from ckptsel.records.schema import FINAL_STEPS_FILE, GENERATIONS_FILE, NLL_FILE, SPLITS, check_name
from ckptsel.records.store import upsert_records
from ckptsel.records.units import UNITS_DIR
from ckptsel.records.weights import CheckpointStamp, changed_files, recorded_stamps, short_digests
from ckptsel.study.configuration import default_configuration
from ckptsel.train.average_read import find_averages
from ckptsel.train.checkpoints import (
    STATE_FILE,
    Checkpoint,
    discover_checkpoints,
    files_fingerprint,
    function_digests,
    is_final_checkpoint,
    weights_fingerprint,
)
from ckptsel.train.formats import read_run_format


def _check_trajectory_identity(table, out: Location, trajectory: str, configuration: str, spec: MeasureSpec) -> None:
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
        ("task", task_label(spec.task_for(split)), mine[mine["split"].astype(str) == split]) for split in SPLITS
    ]
    for column, value, rows in checks:
        other = sorted(set(rows[column].astype(str)) - {value})
        if other:
            keep = f"pass --configuration {other[0]} to keep it, or " if column == "configuration" else ""
            raise CkptselError(
                f"{out / GENERATIONS_FILE}: trajectory {trajectory!r} is already recorded with "
                f"{column} {other[0]!r}, not {value!r}; {keep}pick another --trajectory name"
            )


def trajectory_name(run_dir: Path | Location | str) -> str:
    """A run's default trajectory name: its folder's name (a local path resolved first)."""
    run_dir = as_location(run_dir)
    return run_dir.local.resolve().name if run_dir.is_local else run_dir.name


@dataclass(frozen=True)
class MeasureSetup:
    """What a run is measured against and recorded into, and who measures it: the arguments
    of :func:`measure_run` that every layer above :class:`RunMeasurement` passes on as they
    are (``watch_run`` and ``watch_and_select`` take them as keywords too).

    ``validation`` and ``test``: the item files; ``out``: the records folder; ``base``:
    overrides the adapters' base model; ``trajectory`` (default: the run folder's name) and
    ``configuration`` (default: the trajectory less its seed, ``cfgA-s42`` → ``cfgA``:
    :func:`~ckptsel.study.default_configuration`); ``executor``: where checkpoints are measured
    (see :func:`measure_run`); ``allow_mixed_engines``: admit rows measured with a
    provenance the trajectory's records lack (the units say what was mixed); ``replace``:
    measure again, and record in place of the old rows, a checkpoint whose weights or files differ from
    those its records were measured from (else that is refused).
    """

    validation: Path | Location | str
    test: Path | Location | str
    out: Path | Location | str
    base: str | None = None
    trajectory: str | None = None
    configuration: str | None = None
    executor: Any = None
    allow_mixed_engines: bool = False
    replace: bool = False


def _short(fingerprint: str) -> str:
    return fingerprint[: len("sha256:") + 12]


def _differs(recorded: CheckpointStamp, now: CheckpointStamp) -> tuple[str, str] | None:
    """``None`` when a recorded stamp agrees with the checkpoint now (the files compared only
    when both name them), else what each says, in words."""
    if recorded.weights != now.weights:
        return f"weights {_short(recorded.weights or '')}", f"weights {_short(now.weights or '')}"
    if recorded.files and now.files and recorded.files != now.files:
        names = ", ".join(changed_files(recorded, now)) or "its files"
        return (f"files {_short(recorded.files)} (weights the same)", f"other {names} ({_short(now.files)})")
    return None


def run_complete(ckpt: Checkpoint) -> bool | None:
    """Whether ``ckpt`` says it is its run's last (its ``trainer_state.json``: see
    :func:`ckptsel.train.is_final_checkpoint`); ``None`` without a readable state."""
    try:
        state = json.loads((ckpt.path / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return is_final_checkpoint(state, ckpt.step) if isinstance(state, dict) else None


WATCH_DIR = "watch"  # a watcher's status and selection.json, per trajectory
RECORDS_ENTRIES = frozenset({UNITS_DIR, GENERATIONS_FILE, NLL_FILE, FINAL_STEPS_FILE, WATCH_DIR})


def check_records_folder(out: Location) -> None:
    """Refuse (one line, nothing written) a local ``--out`` that holds files of the user's and
    no records: measuring there would put ``units/`` and caches beside them. Dot entries
    (caches, locks, ``.DS_Store``) are ignored; a URL is not listed."""
    if not out.is_local or not out.local.is_dir():
        return
    names = sorted(p.name for p in out.local.iterdir() if not p.name.startswith("."))
    if names and not RECORDS_ENTRIES & set(names):
        raise CkptselError(
            f"{out}: not a records folder: it holds {names[0]!r}"
            f"{f' and {len(names) - 1} more' if len(names) > 1 else ''} and no records; "
            "measure into a new or empty folder (--out)"
        )


class _TemplateOnly:
    """What a run's tokenizer says of its chat template, read from its files without loading
    it or copying its folder (``tokenizer_config.json``'s ``chat_template``,
    ``chat_template.jinja`` or ``chat_template.json``; a folder at a URL is read where it is):
    the tokenizer of the first checkpoint that ships one, else the base. A hub name is loaded
    from the local Hugging Face cache."""

    def __init__(self, ckpts: list[Checkpoint], base: str | None) -> None:
        ref = tokenizer_source(ckpts, base)  # read where it is, not copied here
        loc = as_location(ref)
        folder = loc if not loc.is_local or loc.local.is_dir() else None
        if folder is None:  # a hub name
            from transformers import AutoTokenizer

            self.chat_template = AutoTokenizer.from_pretrained(str(ref)).chat_template
            return
        config = folder / "tokenizer_config.json"
        try:
            blob = json.loads(config.read_text()) if config.is_file() else {}
        except (OSError, ValueError):
            blob = {}
        found = blob.get("chat_template") if isinstance(blob, dict) else None
        for name in ("chat_template.jinja", "chat_template.json"):
            found = found or ((folder / name).is_file() and name)
        self.chat_template = str(found) if found else None  # a list: named templates


class RunMeasurement:
    """One run being measured into a records folder, checkpoint by checkpoint.

    Built once from a :class:`MeasureSetup`: names checked, items loaded, the records already
    in ``out`` checked. Then :meth:`measure` measures the checkpoints it is given (what their
    part caches lack) and records them; the executor opens on first use and stays open until
    :meth:`close` (the base model stays loaded), so a watcher (:mod:`ckptsel.measure.watch`)
    can hand it checkpoints as they become complete. :func:`measure_run` hands it all of a
    run's at once.
    """

    def __init__(
        self,
        run_dir: Path | Location | str,
        config: MeasureConfig,
        setup: MeasureSetup,
        *,
        on_progress: ProgressCallback | None = None,
        after_checkpoint: Callable[[int], None] | None = None,
    ) -> None:
        self.run_dir, self.out = as_location(run_dir), as_location(setup.out)
        self.trajectory = check_name("trajectory", setup.trajectory or trajectory_name(self.run_dir))
        self.configuration = check_name("configuration", setup.configuration or default_configuration(self.trajectory))
        self.config, self.base, self.executor = config, setup.base, setup.executor
        self.pool = ItemPool.load(config.measured.task, setup.validation, setup.test, config.measured.test_task)
        self.emit = on_progress or (lambda event: None)
        self.after_checkpoint = after_checkpoint
        self.result = MeasureResult(self.trajectory, self.configuration, [])
        self.ckpts: list[Checkpoint] = []  # every checkpoint handed in (the executor's list)
        self.allow_mixed_engines = setup.allow_mixed_engines
        self._gate: ProvenanceGate | None = None  # read from the records at the first measure
        self._open: Any = None
        self.replace = setup.replace
        self.weights: dict[int, str] = {}  # step -> fingerprint of the weights measured
        self.files: dict[int, dict[str, str]] = {}  # step -> its other files' digests
        self.bases: dict[str, dict[str, str]] = {}  # the adapters' base models': read once
        self.replacing: set[int] = set()  # steps whose earlier records are dropped at the write
        self.rewritten: set[int] = set()  # steps the watcher saw rewritten (replaced, no flag)
        # what the run folder says of its final checkpoint: (its step, whether that checkpoint
        # says it is the last); measure_run: its largest; the watcher sets it per poll (only a
        # checkpoint that says it is final); else the largest checkpoint handed in
        self.run_final: tuple[int | None, bool | None] | None = None
        self._format_bound = False  # the prompt format resolved (at the first measure)
        self._forgotten: set[int] = set()

    def check_records(self) -> None:
        """``out`` is a records folder (or new, or empty), and the trajectory's records there
        are readable and keep its configuration and tasks (before the first write)."""
        out, traj = self.out, self.trajectory
        check_records_folder(out)
        read_rows(out, "nll", columns=["trajectory"], filters=[("trajectory", "=", traj)])
        _check_trajectory_identity(
            read_rows(out, "generations", columns=["trajectory", "configuration", "task", "split"], filters=[("trajectory", "=", traj)]),
            out,
            traj,
            self.configuration,
            self.config.measured,
        )

    def parts(self, step: int) -> StepParts:
        """A checkpoint's part cache: only rows measured from its weights and files as they
        are now (once :meth:`check_weights` has fingerprinted them)."""
        now = self._stamp_files(step)
        checkpoint = None if now.weights is None else files_fingerprint({"weights": now.weights, "files": now.files or ""})
        return StepParts(self.out, self.trajectory, step, self.config, self.pool, checkpoint)

    def bind_format(self, ckpts: list[Checkpoint]) -> None:
        """Resolve the prompt format once, before any part file is named: the stated one, else
        what the run folder records, else alpaca — refused in one line when the run's
        tokenizer has a chat template and nothing says how the run was trained
        (:meth:`MeasureConfig.bind_format`)."""
        if self._format_bound or not ckpts:
            return
        cfg, recorded = self.config, read_run_format(self.run_dir)
        stated = cfg.measured.fmt
        chat = any(f is not None and f.kind == CHAT for f in (stated, recorded))
        tokenizer = None
        if chat or any(f is not None and f.kind == "template" for f in (stated, recorded)):
            tokenizer = run_tokenizer(ckpts, self.base)  # chat: its template; a file: its BOS
        elif stated is None and recorded is None:
            tokenizer = _TemplateOnly(ckpts, self.base)
        self.config = cfg.bind_format(tokenizer, recorded, where=str(self.run_dir))
        bound = self.config.measured.prompt  # the run's one format, from here on
        # every item's prompt rendered now, before any model loads (a failing item, or a
        # template under which every prompt is the same, is refused in one line)
        bound.check_items([it for items in self.pool.splits.values() for it in items], tokenizer)
        if bound.kind == "template":
            bound.check_bos(tokenizer)  # a template file's own BOS text: refused before a model
        note = bound.bos_note(tokenizer) if chat else ""  # two BOS or one: unsaid, assumed
        self.result.prompt_format = bound.describe() + (f"; warning: {note}" if note else "")
        self._format_bound = True
        for step in sorted(self._forgotten):  # rewritten before the part files had a name
            self.drop_parts(step)

    def measure(self, ckpts: list[Checkpoint]) -> None:
        """Measure what ``ckpts`` lack and record them (one checkpoint's units at a time)."""
        self.bind_format(ckpts)
        traj, config, emit, res = self.trajectory, self.config, self.emit, self.result
        self.check_weights(ckpts)  # before anything is measured, reused or written
        self.ckpts.extend(c for c in ckpts if c not in self.ckpts)
        res.steps.extend(c.step for c in ckpts if c.step not in res.steps)
        emit(ProgressEvent("run", traj, total=len(ckpts) * self.pool.n_items * 2, units=len(ckpts)))
        units = [(ckpt, self.parts(ckpt.step)) for ckpt in ckpts]
        gate = self._provenance_gate(any(parts.n_todo for _, parts in units))
        if self._open is None:
            self._open = open_executor(self.executor, config, self.ckpts, self.base, res)
            self._open.__enter__()
        # units come back in the executor's order (local: one by one; ray: as they finish);
        # the driver alone writes: parts files, then the checkpoint's contract rows
        for ckpt, parts, new in self._open.run(units, traj, self.configuration, emit):
            if new is not None:
                gate.admit_rows(*new)  # before anything is cached or recorded
                parts.add(*new)
                res.measured_steps.append(ckpt.step)
            else:
                res.reused_steps.append(ckpt.step)
            upsert_records(
                self.out,
                generations=parts.contract_generations(config.measured.task, traj, self.configuration, config.measured.test_task),
                nll=parts.contract_nll(traj),
                provenance=gate.units(parts),
                checkpoint=self._stamp(ckpt.step),
                replace=ckpt.step in self.replacing,
            )
            self.replacing.discard(ckpt.step)
            emit(ProgressEvent("step_done", traj, step=ckpt.step, total=self.pool.n_items * 2))
            if self.after_checkpoint is not None:
                self.after_checkpoint(ckpt.step)

    def check_weights(self, ckpts: list[Checkpoint]) -> None:
        """Fingerprint each checkpoint's weights and the other files that define its function
        (:func:`~ckptsel.train.function_digests`) and compare them with those its records were
        measured from: a difference (a replaced checkpoint, an edited config or tokenizer,
        another run under this trajectory name) is refused in one line, for every checkpoint
        before any is measured, unless ``replace`` (or the watcher saw the folder rewritten):
        then its part cache is dropped and its records are replaced. Records without a
        fingerprint are accepted as before; records stamped with the weights alone (before
        the files were) are compared on the weights."""
        for ckpt in ckpts:
            if ckpt.step not in self.weights:
                self.weights[ckpt.step] = weights_fingerprint(ckpt.path)
                self.files[ckpt.step] = function_digests(ckpt, self.bases)
        recorded = recorded_stamps(self.out, self.trajectory, [c.step for c in ckpts])
        for ckpt in ckpts:
            now = self._stamp_files(ckpt.step)
            why = next((w for s in recorded.get(ckpt.step, []) if (w := _differs(s, now))), None)
            if why is None:
                continue
            if not (self.replace or ckpt.step in self.rewritten):
                raise CkptselError(
                    f"{self.out}: trajectory {self.trajectory!r} step {ckpt.step} is recorded "
                    f"from {why[0]}, but {ckpt.path} holds {why[1]} (replaced or edited, or "
                    "another run under this name); refusing to reuse or mix them (pass "
                    "--replace to measure it again, or use another --trajectory or --out)"
                )
            self.replacing.add(ckpt.step)
            self.drop_parts(ckpt.step)

    def _stamp_files(self, step: int) -> CheckpointStamp:
        """What the weights and files of ``step`` are now (a stamp's fingerprints)."""
        digests = self.files.get(step)
        if digests is None:
            return CheckpointStamp(self.weights.get(step))
        return CheckpointStamp(self.weights.get(step), None, None, files_fingerprint(digests), short_digests(digests))

    def _stamp(self, step: int) -> CheckpointStamp:
        """What the units of ``step`` say of the checkpoint they were measured from."""
        final = self.run_final
        if final is None:  # the largest checkpoint's step (an average's reserved step is negative)
            final = (max((c.step for c in self.ckpts if c.step >= 0), default=None), None)
        now = self._stamp_files(step)
        return CheckpointStamp(now.weights, None if final[0] is None else int(final[0]), final[1], now.files, now.file_digests)

    def drop_parts(self, step: int) -> None:
        """Delete a checkpoint's part cache."""
        parts = self.parts(step)
        for path in (parts.gen_path, parts.nll_path):
            path.unlink(missing_ok=True)

    def _provenance_gate(self, will_measure: bool) -> ProvenanceGate:
        """The trajectory's provenance rule (read once); the settings are checked against it
        before the first model loads."""
        if self._gate is None:
            self._gate = ProvenanceGate(self.out, self.trajectory, self.config.runtime.only, self.allow_mixed_engines)
            self._settings_checked = False
        if will_measure and not self._settings_checked:
            self._gate.check_settings(self.config)
            self._settings_checked = True
        return self._gate

    def forget(self, step: int) -> None:
        """Drop a checkpoint's part cache (its folder was rewritten: measure it afresh, its
        records replaced)."""
        if self._format_bound:
            self.drop_parts(step)
        else:
            self._forgotten.add(step)
        self.weights.pop(step, None)
        self.files.pop(step, None)
        self.rewritten.add(step)
        self.ckpts = [c for c in self.ckpts if c.step != step]

    def close(self, *exc: object) -> None:
        if self._open is not None:
            opened, self._open = self._open, None
            opened.__exit__(*(exc or (None, None, None)))

    def __enter__(self) -> RunMeasurement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(*exc)


def measure_run(
    run_dir: Path | Location | str,
    config: MeasureConfig,
    *,
    validation: Path | Location | str,
    test: Path | Location | str,
    out: Path | Location | str,
    base: str | None = None,
    trajectory: str | None = None,
    configuration: str | None = None,
    on_progress: ProgressCallback | None = None,
    after_checkpoint: Callable[[int], None] | None = None,
    executor: Any = None,
    allow_mixed_engines: bool = False,
    replace: bool = False,
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
    ``run_dir``, ``out``, the item files and ``base`` may be URLs (``s3://...``): checkpoints
    and base are then copied once per node into its cache (:mod:`ckptsel._util.nodecache`),
    and records are written as objects. Each unit records what measured it
    (:mod:`ckptsel.measure.provenance`); rows measured with a provenance the trajectory's
    records lack are refused before they are written, unless ``allow_mixed_engines`` (then the
    units say what was mixed). Each unit also records the fingerprint of the weights it was
    measured from and the run's final step (:mod:`ckptsel.records.weights`); a checkpoint
    whose weights or files differ from its records' is refused before anything is written, unless
    ``replace`` (then it is measured again and its records replaced). The run's averages
    (``average-lastK/``, ``ema-D/``, written by ``ckptsel average``:
    :func:`~ckptsel.train.average_read.find_averages`) are measured after its checkpoints, on
    the same items and settings, and recorded at their reserved negative steps
    (:func:`~ckptsel.records.schema.average_step`); the final checkpoint stays the largest
    step.
    """
    t_start = time.perf_counter()
    setup = MeasureSetup(
        validation=validation,
        test=test,
        out=out,
        base=base,
        trajectory=trajectory,
        configuration=configuration,
        executor=executor,
        allow_mixed_engines=allow_mixed_engines,
        replace=replace,
    )
    session = RunMeasurement(run_dir, config, setup, on_progress=on_progress, after_checkpoint=after_checkpoint)
    ckpts = discover_checkpoints(session.run_dir, base)
    averages = find_averages(session.run_dir, ckpts, base)  # measured after the checkpoints
    session.run_final = (ckpts[-1].step, run_complete(ckpts[-1]))
    session.check_records()
    with session:
        session.measure(ckpts + averages)
    result = session.result
    result.measured_steps.sort()
    result.reused_steps.sort()
    result.seconds = time.perf_counter() - t_start
    return result
