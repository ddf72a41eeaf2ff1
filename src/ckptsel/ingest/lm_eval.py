"""Import generations evaluated elsewhere into records (SPEC §2: "what ``ingest`` produces"),
through the mapping every ingester shares (:mod:`~ckptsel.ingest.mapping`).

``lm-eval``: lm-evaluation-harness ``--log_samples`` output, ONE FOLDER PER CHECKPOINT
(``lm_eval ... --output_path evals/<trajectory>/checkpoint-<step>``; the harness writes
``<model_name>/samples_<task>_<timestamp>.jsonl`` inside it). Conventions:

* step: from the folder name ``checkpoint-<step>``; ``--step`` only for a single folder.
* trajectory: ``--trajectory``, else the name of the folders' common parent.
* split: ``--split`` (default ``test``); one split per invocation.
* task: ``--task``, else the lm-eval task when the folders hold one (several need ``--task``).
* item_id: ``<lm-eval task>-<doc_id>`` (``--id-prefix`` replaces the task name), which is
  the ``<task>-<index>`` id that ``ckptsel.data.tasks`` gives the same file in file order, so
  ingested generations line up with NLL records measured by ``ckptsel measure``.
* subtask: the lm-eval task name when it differs from ``--task`` (e.g. ``boolq`` under
  ``--task commonsense``), else empty.
* correct: the per-sample metric (``--metric``; default ``exact_match``, else ``acc``), which
  must be 0/1; answer: ``ckptsel.data.extract(task, response)`` when ``--task`` is a known
  ckptsel task, else the stripped response; for multiple-choice (log-likelihood) samples
  the answer is the index of the highest-scoring choice.
* several lm-eval tasks in the folders under one ``--task``: refused unless
  ``--lm-eval-task`` names the ones to read (the others are left out, with a note);
* the same item: a ``doc_id`` whose ``doc_hash`` differs between folders is refused (see the
  mapping; ``--allow-different-items``); ``reference``: the sample's ``target``, which the
  task's rule re-checks against the answer (``--rescore``);
* every field read is type-checked where it is read (``doc_id`` an integer or a string,
  ``filter`` and ``doc_hash`` strings, ...): one line naming the file and line;
* several filters in a file (gsm8k: ``strict-match``, ``flexible-extract``): ``--filter``
  names the one to keep; if a folder holds several files for one task, the newest
  timestamp is used and a note is printed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import pandas as pd

from ckptsel.data.answers.rules import AnswerRuleError
from ckptsel.data.scoring import extract
from ckptsel.data.tasks import task_label
from ckptsel.errors import CkptselError
from ckptsel.ingest.inflate import bounded_lines, open_gzip_text
from ckptsel.ingest.mapping import CheckpointLog, Ingested, Naming, Notes, checked_note, ingest_logs, known_task, log_field, newest_per_key
from ckptsel.train.checkpoints import CHECKPOINT_RE

SAMPLES_RE = re.compile(r"^samples_(?P<task>.+?)_(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.jsonl(?:\.gz)?$")
DEFAULT_METRICS = ("exact_match", "acc")


def find_sample_files(folder: Path, notes: Notes | None = None) -> dict[str, Path]:
    """``{lm-eval task: newest samples file}`` anywhere under ``folder`` (the files passed
    over go to ``notes``, said once per ingest; default: printed now)."""
    said = Notes(print) if notes is None else notes
    found = []
    for path in sorted(Path(folder).rglob("samples_*.jsonl*")):
        m = SAMPLES_RE.match(path.name)
        if m:
            found.append((m.group("task"), m.group("ts"), path))

    def passed_over(task: str, used: Path, ignored: Path) -> None:
        said.add("several samples files for one task: the newest is used", f"{folder}: {task}: using {used.name}, ignoring {ignored.name}")

    newest = newest_per_key(found, passed_over)
    if notes is None:
        said.say()
    return newest


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a samples file (``.jsonl`` or ``.jsonl.gz``), one per line."""
    if not Path(path).is_file():  # a FIFO would block the read forever
        raise CkptselError(f"{path}: not a regular file (a samples file is)")
    try:
        return _read_samples(path)
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        raise CkptselError(f"{path}: cannot read the samples file (corrupt or truncated? {err})") from err
    except UnicodeDecodeError as err:
        raise CkptselError(f"{path}: not a UTF-8 JSON Lines samples file ({err.reason} at byte {err.start})") from err


def _read_samples(path: Path) -> list[dict[str, Any]]:
    gz = str(path).endswith(".gz")
    rows: list[dict[str, Any]] = []
    with open_gzip_text(path) if gz else open(path, encoding="utf-8") as fh:
        for n, line in bounded_lines(fh, path):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError) as err:  # a number of 4300+ digits, deep nesting
                why = "nested too deeply" if isinstance(err, RecursionError) else err
                raise CkptselError(f"{path}:{n}: not valid JSON ({why})") from err
            if not isinstance(obj, dict):
                raise CkptselError(f"{path}:{n}: expected a JSON object per line")
            obj["_line"] = n
            rows.append(obj)
    return rows


def _as_float(x: Any) -> float | None:
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def response_of(sample: dict[str, Any], where: str) -> tuple[str, bool]:
    """(response, is_choice_index) from ``filtered_resps``: generated text, or for
    multiple-choice samples (``[[loglik, is_greedy], ...]``) the argmax choice index."""
    if "filtered_resps" not in sample:
        raise CkptselError(f"{where}: field filtered_resps missing")
    resp = sample["filtered_resps"]
    if isinstance(resp, str):
        return resp, False
    if not isinstance(resp, list) or not resp:
        raise CkptselError(f"{where}: field filtered_resps is empty or not a list")
    first = resp[0]
    if isinstance(first, str):
        return first, False
    if isinstance(first, list) and first and all(isinstance(x, str) for x in first) and len(resp) == 1:
        if len(first) == 2 and _as_float(first[0]) is not None and first[1] in ("True", "False"):
            pass  # a single [loglik, is_greedy] choice: handled below
        else:
            return first[0], False  # [["text"]]: one repeat
    scores = []
    for choice in resp:
        s = _as_float(choice[0]) if isinstance(choice, list) and choice else _as_float(choice)
        if s is None or math.isnan(s):
            raise CkptselError(f"{where}: filtered_resps is neither text nor [loglik, is_greedy] pairs")
        scores.append(s)
    return str(max(range(len(scores)), key=lambda i: (scores[i], -i))), True


def _correct(sample: dict[str, Any], metric: str | None, where: str) -> bool:
    names = [metric] if metric else [m for m in DEFAULT_METRICS if m in sample]
    if not names or names[0] not in sample:
        wanted = metric or " or ".join(DEFAULT_METRICS)
        raise CkptselError(f"{where}: per-sample metric {wanted} missing (choose one with --metric)")
    v = _as_float(sample[names[0]])
    if v is None or math.isnan(v) or v not in (0.0, 1.0):
        raise CkptselError(f"{where}: metric {names[0]}={sample[names[0]]!r} is not 0/1, so not a correctness")
    return v == 1.0


def _filter(sample: dict[str, Any], path: Path) -> str:
    """The sample's filter name (``none`` where it names none)."""
    name = log_field(sample, "filter", (str,), f"{path}:{sample['_line']}")
    return "none" if name is None else name


def _content(sample: dict[str, Any], where: str) -> str | None:
    """What the sample's document is: lm-eval's ``doc_hash``, else a digest of its ``doc``."""
    found = log_field(sample, "doc_hash", (str,), where)
    if found or sample.get("doc") is None:
        return found or None
    # lm-eval's own doc_hash (older versions wrote none): sha256 of the doc as it dumps it
    blob = json.dumps(sample["doc"], indent=2, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def samples_to_rows(
    samples: Sequence[dict[str, Any]],
    *,
    path: Path,
    lm_task: str,
    task: str | None = None,
    filter_name: str | None = None,
    metric: str | None = None,
    id_prefix: str | None = None,
) -> pd.DataFrame:
    """Generation rows (without trajectory/configuration/step/split) from one samples file."""
    filters = sorted({_filter(s, path) for s in samples})
    if filter_name is None:
        if len(filters) > 1:
            raise CkptselError(f"{path}: several filters {filters}; choose one with --filter")
        chosen = filters[0] if filters else "none"
    else:
        if filter_name not in filters:
            raise CkptselError(f"{path}: filter {filter_name!r} not found (file has {filters})")
        chosen = filter_name
    is_known = known_task(task)
    label = task_label(task) if is_known else task  # a task file: its name
    rows, seen = [], {}
    for s in samples:
        if _filter(s, path) != chosen:
            continue
        where = f"{path}:{s['_line']}"
        doc = str(log_field(s, "doc_id", (int, str), where, required=True))
        if doc in seen:
            raise CkptselError(f"{where}: doc_id {doc} repeated (first at line {seen[doc]})")
        seen[doc] = s["_line"]
        text, is_choice = response_of(s, where)
        if is_choice or not is_known:
            answer = text.strip()
        else:
            try:
                answer = extract(task, text)
            except AnswerRuleError as err:  # a task file's regex past its time bound
                raise err.at(f"{id_prefix or lm_task}-{doc}") from None
        raw = s.get("resps")
        while isinstance(raw, list) and raw:
            raw = raw[0]
        target = log_field(s, "target", (str, int, float, list), where)
        rows.append(
            {
                "item_id": f"{id_prefix or lm_task}-{doc}",
                "answer": answer,
                "correct": _correct(s, metric, where),
                "text": raw if isinstance(raw, str) and not is_choice else text,
                "content": _content(s, where),
                "reference": target if isinstance(target, str) and not is_choice else None,
                "subtask": "" if lm_task in (task, label) else lm_task,
            }
        )
    if not rows:
        raise CkptselError(f"{path}: no samples for filter {chosen!r}")
    return pd.DataFrame(rows)


def step_of(folder: Path, step: int | None, n_folders: int) -> int:
    """The checkpoint step of a samples folder: ``checkpoint-<step>`` or ``--step``."""
    if step is not None:
        if n_folders != 1:
            raise CkptselError("--step applies to a single SAMPLES_DIR; name folders checkpoint-<step> instead")
        return step
    m = CHECKPOINT_RE.match(Path(folder).name)
    if not m or not m.group(1).isdigit():
        raise CkptselError(f"{folder}: cannot tell the step; name the folder checkpoint-<step> or pass --step")
    return int(m.group(1))


class SampleOptions(TypedDict, total=False):
    """How a samples file becomes rows (:func:`samples_to_rows`' keywords, each optional):
    the ckptsel ``task``, the lm-eval ``filter_name`` kept, the 0/1 ``metric``, the item ids'
    ``id_prefix``."""

    task: str | None
    filter_name: str | None
    metric: str | None
    id_prefix: str | None


def file_log(path: Path, step: int, **read: Unpack[SampleOptions]) -> CheckpointLog:
    """One ``samples_<task>_<timestamp>.jsonl`` file as a :class:`CheckpointLog` at ``step``."""
    path = Path(path)
    m = SAMPLES_RE.match(path.name)
    if not m:
        raise CkptselError(f"{path}: not an lm-eval samples_<task>_<timestamp>.jsonl file")
    lm_task = m.group("task")
    df = samples_to_rows(read_samples(path), path=path, lm_task=lm_task, **read)
    return CheckpointLog(str(path), step, df.assign(harness_task=lm_task))


def folder_logs(folder: Path, step: int, *, notes: Notes | None = None, **read: Unpack[SampleOptions]) -> list[CheckpointLog]:
    """The newest samples file of each lm-eval task under ``folder`` (one checkpoint's
    ``--log_samples`` output), one :class:`CheckpointLog` each, at ``step``."""
    files = find_sample_files(folder, notes)
    if not files:
        raise CkptselError(f"{folder}: no samples_<task>_<timestamp>.jsonl file (run lm_eval with --log_samples)")
    if read.get("id_prefix") and len(files) > 1:
        raise CkptselError(f"{folder}: --id-prefix needs a single lm-eval task, found {sorted(files)}")
    return [file_log(path, step, **read) for path in files.values()]


class LmEvalOptions(Naming, total=False):
    """:func:`ingest_lm_eval_logs`' keywords besides ``out``: those every ingester takes
    (:class:`~ckptsel.ingest.mapping.Naming`) and lm-eval's own (``step``, ``metric``,
    ``filter_name``, ``id_prefix``, ``lm_eval_tasks``), each optional."""

    step: int | None
    metric: str | None
    filter_name: str | None
    id_prefix: str | None
    lm_eval_tasks: Sequence[str] | None


def ingest_lm_eval(folders: Sequence[Path], *, out: Path | str, **options: Unpack[LmEvalOptions]) -> pd.DataFrame:
    """Read lm-eval samples (one folder per checkpoint) and write them into ``out``.

    ``options``: :class:`LmEvalOptions`, as :func:`ingest_lm_eval_logs` takes them: the
    keywords every ingester takes (:class:`~ckptsel.ingest.mapping.Naming`; the trajectory
    defaults to the folders' common parent) and lm-eval's own. Everything is read and checked
    before anything is written (through the mapping shared by every ingester,
    :mod:`~ckptsel.ingest.mapping`). ``lm_eval_tasks``: which lm-eval tasks to read
    when the folders hold several (:func:`chosen_tasks`). Returns the rows written
    (:func:`ingest_lm_eval_logs` returns the whole :class:`~ckptsel.ingest.mapping.Ingested`).
    """
    return ingest_lm_eval_logs(folders, out=out, **options).generations


def ingest_lm_eval_logs(
    folders: Sequence[Path],
    *,
    out: Path | str,
    step: int | None = None,
    metric: str | None = None,
    filter_name: str | None = None,
    id_prefix: str | None = None,
    lm_eval_tasks: Sequence[str] | None = None,
    **naming: Unpack[Naming],
) -> Ingested:
    """:func:`ingest_lm_eval`, returning what was written, the names and what the logs lack."""
    if not folders:
        raise CkptselError("no SAMPLES_DIR given")
    note = checked_note(naming)
    folders = [Path(f) for f in folders]
    for f in folders:
        if not f.is_dir():
            raise CkptselError(f"{f}: samples folder not found")
    if naming.get("trajectory") is None:
        parents = {f.resolve().parent.name for f in folders}
        if len(parents) != 1:
            raise CkptselError(f"folders have different parents {sorted(parents)}; pass --trajectory")
        naming["trajectory"] = parents.pop()
    logs, steps, notes = [], {}, Notes(note)
    for f in folders:
        st = step_of(f, step, len(folders))
        if st in steps:
            raise CkptselError(f"{f}: step {st} also given by {steps[st]}")
        steps[st] = f
        found = folder_logs(f, st, task=naming.get("task"), filter_name=filter_name, metric=metric, id_prefix=id_prefix, notes=notes)
        logs.extend(found)
    logs = chosen_tasks(logs, naming.get("task"), lm_eval_tasks, notes)
    notes.say()
    return ingest_logs(logs, out=out, harness="lm-eval", **naming)


def chosen_tasks(logs: list[CheckpointLog], task: str | None, named: Sequence[str] | None, notes: Notes) -> list[CheckpointLog]:
    """The logs of the lm-eval tasks to file under ``--task``: with several lm-eval tasks in the
    folders, ``named`` (``--lm-eval-task``) says which (the others are left out, noted); without
    it they are refused, naming them and ``--task`` (without ``--task``, the mapping refuses
    several tasks in one trajectory)."""
    found = sorted({str(log.rows["harness_task"].iloc[0]) for log in logs})
    if named:
        missing = [t for t in named if t not in found]
        if missing:
            raise CkptselError(
                f"--lm-eval-task {missing[0]}: no samples of that lm-eval task in the folders (they hold {', '.join(found)})"
            )
        left = [t for t in found if t not in named]
        if left:
            notes.add("lm-eval tasks not named by --lm-eval-task are left out", ", ".join(left))
        return [log for log in logs if str(log.rows["harness_task"].iloc[0]) in named]
    if task and len(found) > 1:
        raise CkptselError(
            f"{logs[0].source}: the folders hold lm-eval tasks {found[0]!r} and {found[1]!r}"
            + (f" (and {len(found) - 2} more)" if len(found) > 2 else "")
            + f"; --task {task} would file them all under one task: name the lm-eval task(s) "
            "to read with --lm-eval-task (repeatable; one other than --task becomes a subtask)"
        )
    return logs
