"""A run still training: each checkpoint measured once it is complete, and the selection kept
current (``ckptsel watch``; ``ckptsel run --watch`` watches the study's runs with it).

:func:`watch_and_select` is :func:`ckptsel.measure.watch_run` plus ``selection.json``: after
every recorded checkpoint, and once more when the watch ends, the answer of ``ckptsel select``
for the trajectory is written (atomically: one PUT on object stores) next to the watcher's
``status.json``, in the records folder (``<records>/watch/<trajectory>/``), never in the run
folder, which belongs to the trainer. Until the records can answer (a single checkpoint, or
too few validation items), the file says ``"state": "pending"`` and why. Until the run's final
checkpoint is recorded (still training, being written, or the watcher stopped or was killed
early) it says ``"status": "in progress"`` with ``final_step`` null and a provisional
recommendation, never that the last recorded checkpoint is the final one. Like the status, it
is derived from the records, so a watcher started again rewrites it from what is recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckptsel._util.io import write_text
from ckptsel._util.locations import Location
from ckptsel.choose.rules import SIGNAL_RULES
from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.progress import ProgressCallback
from ckptsel.measure.run import trajectory_name
from ckptsel.measure.watch import WatchSettings, WatchStatus, status_path, watch_run
from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint

SELECTION_FILE = "selection.json"


def selection_path(out: Path | Location | str, trajectory: str) -> Location:
    """Where the watcher of ``trajectory`` keeps ``selection.json`` in the records folder."""
    return status_path(out, trajectory).parent / SELECTION_FILE


def write_selection(
    records: Path | Location | str,
    trajectory: str,
    path: Path | Location | str,
    *,
    rule: str = "accuracy",
    settings: SelectSettings | None = None,
    watch: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write (and return) ``selection.json``: ``ckptsel select``'s answer for ``trajectory``
    from ``records`` (``"state": "selected"``), or ``"state": "pending"`` with the reason when
    the records cannot answer yet; ``watch`` (the watcher's state) is added as it is, and
    with it ``"status"``: ``"complete"`` once the run's final checkpoint is recorded, else
    ``"in progress"`` (see :func:`_run_status`)."""
    try:
        answer = select_checkpoint(records, trajectory, rule=rule, settings=settings)
        data: dict[str, Any] = {"state": "selected", "rule": rule, **answer.to_dict()}
    except CkptselError as err:
        data = {"state": "pending", "trajectory": trajectory, "rule": rule, "reason": str(err)}
    if watch is not None:
        data = _run_status(data, bool(watch.get("final")))
        data["watch"] = watch
    write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
    return data


def _run_status(data: dict[str, Any], final: bool) -> dict[str, Any]:
    """``data`` saying whether the run is complete: ``"status": "complete"`` once the watcher
    recorded its final checkpoint; else ``"in progress"`` — the final checkpoint is still
    being trained or written, or the watcher stopped early — with ``final_step`` null, the
    largest recorded step as ``last_recorded_step``, and the recommendation provisional
    (``keep_final`` null: the checkpoint it would keep may be beaten or become the final)."""
    if final:
        return {"status": "complete", **data}
    out = {"status": "in progress", **data}
    if "final_step" in out:
        out["last_recorded_step"] = out["final_step"]
        out["final_step"] = None
    rec = out.get("recommendation")
    if isinstance(rec, dict):
        out["recommendation"] = {**rec, "keep_final": None, "provisional": True}
    return out


def watch_and_select(
    run_dir: Path | Location | str,
    config: MeasureConfig,
    *,
    settings: WatchSettings | None = None,
    rule: str = "accuracy",
    select_settings: SelectSettings | None = None,
    selection: bool = True,
    status_file: Path | Location | str | None = None,
    on_status: Callable[[WatchStatus], None] | None = None,
    on_progress: ProgressCallback | None = None,
    on_selection: Callable[[dict[str, Any]], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    **where: Any,
) -> WatchStatus:
    """:func:`~ckptsel.measure.watch_run` (same arguments: ``where`` holds
    :func:`~ckptsel.measure.measure_run`'s keywords, ``validation``, ``test``, ``out``, ``base``,
    ``trajectory``, ...), keeping ``selection.json`` up to date when ``selection`` (see the
    module docstring); ``on_selection(data)`` hears each one written. Returns the watcher's
    final status."""
    if rule not in SIGNAL_RULES:  # bad input fails now, not as a 'pending' selection later
        raise CkptselError(f"unknown rule {rule!r}; choose from {list(SIGNAL_RULES)}")
    out = where["out"]
    name = where.pop("trajectory", None) or trajectory_name(run_dir)
    selection_at = selection_path(out, name)
    recorded: list[int] = []

    def select(final: bool) -> None:
        watch = {"recorded": sorted(recorded), "final": final}
        data = write_selection(out, name, selection_at, rule=rule, settings=select_settings, watch=watch)
        if on_selection is not None:
            on_selection(data)

    def after_checkpoint(step: int) -> None:
        recorded.append(int(step))
        if selection:
            select(False)

    status = watch_run(
        run_dir,
        config,
        settings=settings,
        trajectory=name,
        status_file=status_file,
        on_status=on_status,
        on_progress=on_progress,
        after_checkpoint=after_checkpoint,
        sleep=sleep,
        **where,
    )
    if selection:
        recorded[:] = status.recorded
        select(status.state == "done")
    return status


def describe(status: WatchStatus) -> str:
    """One line of the watcher's state, for a terminal."""
    parts = [f"{status.trajectory}: {status.state}", f"recorded {_steps(status.recorded)}"]
    for step, (done, total) in sorted(status.measuring.items()):
        parts.append(f"measuring step {step}: {done:,}/{total:,} (items generated + items scored)")
    if status.waiting:
        waiting = ", ".join(f"{s} ({why})" for s, why in sorted(status.waiting.items()))
        parts.append(f"waiting {waiting}")
    if status.missed:
        parts.append(f"missed (deleted before measured) {_steps(status.missed)}")
    if status.final_step is not None:
        parts.append(f"final step {status.final_step}")
    return "; ".join(parts)


def _steps(steps: list[int]) -> str:
    return "[" + ", ".join(str(s) for s in sorted(steps)) + "]" if steps else "none"


__all__ = ["SELECTION_FILE", "describe", "selection_path", "watch_and_select", "write_selection"]
