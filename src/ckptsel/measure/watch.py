"""Measure a run while it trains: each checkpoint as soon as it is complete (``ckptsel watch``).

:func:`watch_run` polls a run folder (a local path or a URL: object stores have no change
events, so it polls in both cases), measures every checkpoint once it is complete, records it
exactly as ``ckptsel measure`` would (:class:`~ckptsel.measure.run.RunMeasurement`), keeps a
small status file up to date and returns when the run's final checkpoint is recorded.

**Complete**, for a folder named by the layout (``checkpoint-<n>``: HF Trainer, TRL, axolotl,
LLaMA-Factory; ``epoch_<n>`` / ``step_<n>``: torchtune), means all of these at one poll:

1. the marker, the file the trainer writes last (``trainer_state.json`` by default, any file
   with ``marker=``, none for torchtune), parses, and a Trainer's says ``global_step == n``;
2. the files a measurement reads are there and whole: adapter or model config, weights
   whose safetensors header parses with every tensor inside the file, every shard of an
   index (:func:`ckptsel.train.checkpoint_readiness`);
3. the folder's listing (names, sizes, modification times or ETags) is unchanged since a poll
   at least ``settle`` seconds earlier: callbacks that write after the marker
   (LLaMA-Factory's), uploads in any order (``aws s3 sync``), a marker written in place.

After measuring, the folder is listed again; if it changed meanwhile (a rewrite), its part
cache is dropped and it is measured again once it settles. A folder deleted before it was
measured (``save_total_limit``) is reported as missed.

**Final**: the marker says so (``should_training_stop``, or ``global_step >= max_steps``), or
the step reached ``until_step`` (``--until-step``, or the study's final step; the folders
after the first one at or past it are left alone). The watch ends
when the final checkpoint is recorded and no earlier folder is still being written; folders
that stayed incomplete are named in the status.

**Restarts**: the records are the truth. A watcher killed anywhere and started again
measures only what the part caches lack (nothing twice, nothing lost), as a re-run of
``ckptsel measure`` does. ``status.json`` (state, recorded steps, waiting steps and why, the
final step, the checkpoint being measured and how many of its units are done) is derived and
rewritten atomically (one PUT on object stores) after every poll, after every checkpoint
recorded (a poll may find several ready) and, while a checkpoint is measured, when it starts
and every ``progress_every`` seconds, in the records folder (``<records>/watch/<trajectory>/status.json``), never in the run
folder, which belongs to the trainer.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel._util import io
from ckptsel._util.checks import check_int, check_number
from ckptsel._util.locations import FileInfo, Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.progress import ProgressCallback, ProgressEvent
from ckptsel.measure.run import WATCH_DIR, MeasureSetup, RunMeasurement
from ckptsel.train.checkpoints import STATE_FILE, checkpoint_readiness, inspect_checkpoint, is_final_checkpoint, layout_pattern

STATUS_FILE = "status.json"


@dataclass(frozen=True)
class WatchSettings:
    """How :func:`watch_run` polls (validated here).

    ``poll``: seconds between listings; ``settle``: seconds a folder's listing must stay the
    same before it is measured; ``until_step``: the final step (else the marker says);
    ``marker``: the file a trainer writes last (``None``: no marker; torchtune);
    ``layout``: ``hf`` or ``torchtune``; ``timeout``: give up after this many seconds
    without finishing (``None``: never); ``progress_every``: seconds between rewrites of the
    status while a checkpoint is measured (its items done so far; a checkpoint's start and end
    are always written at once).
    """

    poll: float = 10.0
    settle: float = 20.0
    until_step: int | None = None
    marker: str | None = STATE_FILE
    layout: str = "hf"
    timeout: float | None = None
    progress_every: float = 10.0

    def __post_init__(self) -> None:
        check_number(self.poll, "--poll", low=0)
        check_number(self.progress_every, "progress_every", low=0)
        check_number(self.settle, "--settle", low=0)
        if self.timeout is not None:
            check_number(self.timeout, "--timeout", low=0)
        if self.until_step is not None:
            check_int(self.until_step, "--until-step", low=0)
        layout_pattern(self.layout)
        if self.marker is not None and (not self.marker or "/" in self.marker):
            raise CkptselError(f"--marker must be a file name, not {self.marker!r}")


@dataclass
class WatchStatus:
    """What the watcher knows; written to ``status.json`` after every poll."""

    trajectory: str
    run: str
    records: str
    state: str = "watching"  # watching | done | stopped
    recorded: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    missed: list[int] = field(default_factory=list)
    incomplete: dict[int, str] = field(default_factory=dict)
    final_step: int | None = None
    remeasured: list[int] = field(default_factory=list)
    polls: int = 0
    started: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    engines: str = ""  # at the end: "hf model started once (...), 9 checkpoints swapped ..."
    # the checkpoints being measured now: step -> [units done, units to measure] (units: items
    # generated plus items scored; a vLLM batch measures several steps at once)
    measuring: dict[int, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory": self.trajectory,
            "run": self.run,
            "records": self.records,
            "state": self.state,
            "recorded": sorted(self.recorded),
            "waiting": {str(k): v for k, v in sorted(self.waiting.items())},
            "missed": sorted(self.missed),
            "incomplete": {str(k): v for k, v in sorted(self.incomplete.items())},
            "final_step": self.final_step,
            "remeasured": sorted(self.remeasured),
            "measuring": {str(k): {"done": d, "total": t} for k, (d, t) in sorted(self.measuring.items())},
            "polls": self.polls,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": round(self.started, 3),
            "updated": round(self.updated, 3),
            **({"engines": self.engines} if self.engines else {}),
        }


def status_path(out: Path | Location | str, trajectory: str) -> Location:
    """Where the watcher of ``trajectory`` keeps its status in the records folder ``out``."""
    return as_location(out) / WATCH_DIR / trajectory / STATUS_FILE


def read_status(out: Path | Location | str, trajectory: str) -> dict[str, Any] | None:
    """The last status a watcher wrote (``None`` when there is none)."""
    try:
        return json.loads(status_path(out, trajectory).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise CkptselError(f"{status_path(out, trajectory)}: unreadable status ({err})") from err


def _signature(files: dict[str, FileInfo]) -> str:
    blob = json.dumps(sorted((k, v.size, v.tag) for k, v in files.items()))
    return hashlib.sha256(blob.encode()).hexdigest()


def list_folders(run: Location, layout: str) -> dict[int, tuple[str, dict[str, FileInfo]]]:
    """``{step: (folder name, {file name: FileInfo})}`` of the run's checkpoint folders, from
    one recursive listing (files directly inside each folder; dot files, temp files and
    ``tmp-checkpoint-*`` folders are not checkpoints)."""
    pattern = layout_pattern(layout)
    out: dict[int, tuple[str, dict[str, FileInfo]]] = {}
    for rel, info in run.listing().items():
        parts = rel.split("/")
        m = pattern.match(parts[0])
        if not m or not m.group(1).isdigit():
            continue
        entry = out.setdefault(int(m.group(1)), (parts[0], {}))
        if len(parts) == 2:
            entry[1][parts[1]] = info
    return out


class _Watch:
    """One watch: the poll loop's state (signatures seen, steps recorded, the final step).

    It owns the :class:`RunMeasurement` and hears it per checkpoint: the status (and
    ``after_checkpoint``, e.g. ``selection.json``) is current after every checkpoint recorded,
    not only after a poll's batch, and says which checkpoint is being measured and how far."""

    def __init__(
        self,
        run_dir: Path | Location | str,
        config: MeasureConfig,
        setup: MeasureSetup,
        settings: WatchSettings,
        status_file: Path | Location | str | None,
        hooks: _Hooks,
        clock: Callable[[], float],
    ) -> None:
        self.session = RunMeasurement(run_dir, config, setup, on_progress=self._progress, after_checkpoint=self._recorded)
        self.session.check_records()
        self.settings, self.base, self.hooks, self.clock = settings, setup.base, hooks, clock
        self.status_file = as_location(status_file) if status_file else status_path(setup.out, self.session.trajectory)
        self.run = self.session.run_dir
        self.status = WatchStatus(self.session.trajectory, str(self.run), str(self.session.out))
        self.seen: dict[int, tuple[str, float]] = {}  # step -> (signature, first seen at)
        self.done: dict[int, str] = {}  # step -> signature it was measured at
        self.batch: dict[int, tuple[str, dict[str, FileInfo], dict[str, Any]]] = {}
        self.published = 0.0  # clock of the last status written while measuring

    def poll(self) -> bool:
        """One poll: list, measure what is complete, update the status. True when finished."""
        st, now = self.status, self.clock()
        folders = list_folders(self.run, self.settings.layout)
        st.polls += 1
        st.waiting = {}
        st.missed = sorted(set(st.missed) | {s for s in self.seen if s not in folders and s not in self.done})
        ready = []
        until = self.settings.until_step  # folders after the first at or past it: left alone
        cap = min((s for s in folders if until is not None and s >= until), default=None)
        for step, (name, files) in sorted(folders.items()):
            if step in self.done or (cap is not None and step > cap):
                continue
            why = self._why_not(step, name, files, now)
            if why:
                st.waiting[step] = why
            else:
                ready.append((step, name, files))
        if ready:
            self._measure_ready(ready)
        finished = self._finished(folders)
        st.updated = self.clock()
        if finished:
            st.state = "done"
        self.publish()
        return finished

    def _measure_ready(self, ready: list[tuple[int, str, dict[str, FileInfo]]]) -> None:
        """What the units say of the run's final checkpoint: only what a marker (or
        --until-step) says; a run still training declares none. The checkpoints before the
        first final one go first, declaring none, so that each recorded one still answers a
        provisional selection (selection.json says it is in progress) while the final one is
        measured; the final one (and any after it) go next, declaring it."""
        final = [step for step, name, _ in ready if self._says_final(step, name)]
        first = min(final) if final else None
        before = [r for r in ready if first is None or r[0] < first]
        if before:
            self.session.run_final = (None, None)
            self._measure(before)
        if first is not None:
            self.session.run_final = (first, True)
            self._measure([r for r in ready if r[0] >= first])

    def _why_not(self, step: int, name: str, files: dict[str, FileInfo], now: float) -> str:
        """Why the folder cannot be measured now ('' when it can)."""
        sig = _signature(files)
        seen = self.seen.get(step)
        if seen is None or seen[0] != sig:
            self.seen[step] = (sig, now)
            return "being written" if seen is not None else "new"
        if now - seen[1] < self.settings.settle:
            return f"settling ({now - seen[1]:.0f}/{self.settings.settle:g} s unchanged)"
        ok, why, _ = checkpoint_readiness(self.run / name, step, files, self.settings.marker)
        return "" if ok else why

    def _says_final(self, step: int, name: str) -> bool:
        return is_final_checkpoint(self._state(name), step, self.settings.until_step)

    def _state(self, name: str) -> dict[str, Any]:
        marker = self.settings.marker
        return _marker_state(self.run / name / marker) if marker else {}

    def _measure(self, ready: list[tuple[int, str, dict[str, FileInfo]]]) -> None:
        """Measure and record the ready folders (each one heard by :meth:`_recorded` as soon
        as its records are written)."""
        ckpts = [inspect_checkpoint(self.run / name, step, self.run, self.base) for step, name, _ in ready]
        self.batch = {step: (name, files, self._state(name)) for step, name, files in ready}
        self.session.measure(ckpts)
        self.batch = {}

    def _recorded(self, step: int) -> None:
        """Step ``step``'s records are written: a folder that changed meanwhile goes back to
        waiting with its part cache dropped; else it is recorded, the status written at once
        and ``after_checkpoint`` told."""
        name, files, state = self.batch[step]
        st = self.status
        st.measuring.pop(step, None)
        now_files = list_folders(self.run, self.settings.layout).get(step, (name, {}))[1]
        if _signature(now_files) != _signature(files):
            self.session.forget(step)  # rewritten while being measured: measure again
            st.remeasured.append(step)
            self.seen[step] = (_signature(now_files), self.clock())
            return
        self.done[step] = _signature(files)
        if step not in st.recorded:
            st.recorded.append(step)
        st.waiting.pop(step, None)
        if is_final_checkpoint(state, step, self.settings.until_step):
            st.final_step = step if st.final_step is None else min(st.final_step, step)
        st.updated = self.clock()
        self.publish()
        if self.hooks.after_checkpoint is not None:
            self.hooks.after_checkpoint(step)

    def _progress(self, event: ProgressEvent) -> None:
        """The measurement's events: which checkpoint is measured and how far, in the status
        (written when a checkpoint starts, then at most every ``progress_every`` seconds)."""
        st = self.status
        if event.kind == "step" and event.step is not None and event.total:
            st.measuring[event.step] = [0, event.total]
            self.publish()
        elif event.kind == "items" and event.step in st.measuring:
            st.measuring[event.step][0] += event.done
            if self.clock() - self.published >= self.settings.progress_every:
                self.publish()
        if self.hooks.on_progress is not None:
            self.hooks.on_progress(event)

    def _finished(self, folders: dict[int, tuple[str, dict[str, FileInfo]]]) -> bool:
        """The final checkpoint is recorded and nothing before it is still being written
        (folders that stay incomplete are listed, not waited for)."""
        st = self.status
        if st.final_step is None:
            return False
        st.incomplete = {}
        for step, why in st.waiting.items():
            if step >= st.final_step:
                continue
            if why.startswith(("new", "being written", "settling")):
                return False
            st.incomplete[step] = why
        return True

    def publish(self) -> None:
        self.published = self.clock()
        io.write_text(self.status_file, json.dumps(self.status.to_dict(), indent=1) + "\n")
        if self.hooks.on_status is not None:
            self.hooks.on_status(self.status)


@dataclass(frozen=True)
class _Hooks:
    """What the caller of :func:`watch_run` hears."""

    on_status: Callable[[WatchStatus], None] | None = None
    on_progress: ProgressCallback | None = None
    after_checkpoint: Callable[[int], None] | None = None


def _marker_state(marker: Location) -> dict[str, Any]:
    try:
        state = json.loads(marker.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def watch_run(
    run_dir: Path | Location | str,
    config: MeasureConfig,
    *,
    settings: WatchSettings | None = None,
    status_file: Path | Location | str | None = None,
    on_status: Callable[[WatchStatus], None] | None = None,
    on_progress: ProgressCallback | None = None,
    after_checkpoint: Callable[[int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    **where: Any,
) -> WatchStatus:
    """Watch ``run_dir`` and measure each checkpoint into ``out`` once complete (see the
    module docstring); returns the final status (``state`` ``done``, or ``stopped`` after
    ``settings.timeout``). ``where``: what :func:`~ckptsel.measure.run.measure_run` takes as
    keywords (``validation``, ``test`` and ``out``; ``base``, ``trajectory``,
    ``configuration``, ``executor``, ``allow_mixed_engines``: a
    :class:`~ckptsel.measure.run.MeasureSetup`), plus ``status_file`` (default
    :func:`status_path`), ``on_status(status)`` after every poll (a live display) and
    ``after_checkpoint(step)`` once a step is recorded (e.g. to keep ``selection.json``
    current). The run folder need not exist yet."""
    settings = settings or WatchSettings()
    hooks = _Hooks(on_status, on_progress, after_checkpoint)
    watch = _Watch(run_dir, config, MeasureSetup(**where), settings, status_file, hooks, clock)
    session = watch.session
    deadline = None if settings.timeout is None else clock() + settings.timeout
    with session:
        while not watch.poll():
            if deadline is not None and clock() >= deadline:
                watch.status.state = "stopped"
                watch.publish()
                break
            sleep(settings.poll)
    if session.result.engines:  # counted when the session closes: its models and engines
        watch.status.engines = session.result.engines
        watch.publish()
    return watch.status
