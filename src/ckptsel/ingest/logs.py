"""One evaluation log of any harness ckptsel reads, recognized and read as
:class:`~ckptsel.ingest.mapping.CheckpointLog` s through that harness's own reader
(nothing written; ``ckptsel compare-logs``):

* an inspect_ai ``.eval``/``.json`` log, or a folder of them (one log per task);
* an lm-eval ``--log_samples`` folder (one samples file per task), or one
  ``samples_<task>_<timestamp>.jsonl`` file;
* a lighteval ``--save-details`` folder or details file of one model.

A folder is read as lm-eval when it holds ``samples_*.jsonl`` files, else as lighteval when it
holds ``details_*.parquet`` files, else as inspect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ckptsel.errors import CkptselError
from ckptsel.ingest.inspect import find_inspect_logs, inspect_checkpoint
from ckptsel.ingest.lighteval import DETAILS_RE, details_by_model, lighteval_checkpoint
from ckptsel.ingest.lm_eval import SAMPLES_RE, file_log, folder_logs
from ckptsel.ingest.mapping import CheckpointLog, Notes

HARNESSES = ("inspect", "lm-eval", "lighteval")
NOT_A_LOG = (
    "not an evaluation log ckptsel reads (an inspect .eval/.json log or folder of them, an "
    "lm-eval --log_samples folder or samples file, a lighteval details folder or file)"
)


@dataclass(frozen=True)
class LogOptions:
    """What picks the correctness in a log where it holds several: inspect's ``scorer``,
    lm-eval's and lighteval's ``metric``, lm-eval's ``filter_name`` (None: the reader's
    default); ``task``: a ckptsel task whose answer rule normalizes lm-eval's answers;
    ``rescore``: correctness by that task's rule, not the log's (see
    :func:`~ckptsel.ingest.mapping.check_correctness`)."""

    scorer: str | None = None
    metric: str | None = None
    filter_name: str | None = None
    task: str | None = None
    rescore: bool = False


def detect_harness(path: Path) -> str:
    """Which harness wrote ``path`` (one of :data:`HARNESSES`; see the module)."""
    path = Path(path)
    if path.is_file():
        if path.suffix in (".eval", ".json"):
            return "inspect"
        if SAMPLES_RE.match(path.name):
            return "lm-eval"
        if DETAILS_RE.match(path.name):
            return "lighteval"
        raise CkptselError(f"{path}: {NOT_A_LOG}")
    if not path.is_dir():
        raise CkptselError(f"{path}: evaluation log not found")
    if any(SAMPLES_RE.match(f.name) for f in path.rglob("samples_*.jsonl*")):
        return "lm-eval"
    if any(DETAILS_RE.match(f.name) for f in path.rglob("details_*.parquet")):
        return "lighteval"
    if any(f.suffix in (".eval", ".json") for f in path.iterdir()):
        return "inspect"
    raise CkptselError(f"{path}: {NOT_A_LOG}")


def _lighteval(path: Path, step: int, options: LogOptions, notes: Notes) -> list[CheckpointLog]:
    models = details_by_model([path], notes)
    if len(models) != 1:
        raise CkptselError(f"{path}: details of {len(models)} models ({', '.join(sorted(models))}); name one model's folder")
    model, files = next(iter(models.items()))
    log, _ = lighteval_checkpoint(model, files, steps={model: step}, metric=options.metric)
    return [log]


def read_logs(path: Path, step: int, options: LogOptions, note: Callable[[str], None] = print) -> tuple[str, list[CheckpointLog]]:
    """``(harness, one CheckpointLog per task log)`` of the evaluation log at ``path``, each at
    ``step`` (whatever the log says of its checkpoint); notes go to ``note``."""
    path = Path(path)
    harness = detect_harness(path)
    notes = Notes(note)
    if harness == "inspect":
        logs = [inspect_checkpoint(f, steps={f.name: step}, scorer=options.scorer, notes=notes) for f in find_inspect_logs([path])]
    elif harness == "lm-eval":
        read = {"task": options.task, "filter_name": options.filter_name, "metric": options.metric}
        if path.is_file():
            logs = [file_log(path, step, **read)]
        else:
            logs = folder_logs(path, step, notes=notes, **read)
    else:
        logs = _lighteval(path, step, options, notes)
    notes.say()
    return harness, logs
