"""Records from lighteval's details files (``lighteval ... --save-details``), read with pyarrow only.

lighteval writes ``<output>/details/<model_name>/<timestamp>/details_<task>|<fewshot>_<timestamp>.parquet``,
one file per task, with three struct columns (``doc``, ``metric``, ``model_response``) and one row
per (document, sampling method). Conventions (SPEC §2 through
:mod:`~ckptsel.ingest.mapping`):

* DETAILS_DIR: any folder above the parquet files (the ``details`` folder, a model's folder, a
  timestamp folder) or the files themselves; where one model has several timestamps for a task,
  the newest is used and a note is printed;
* step: ``--steps`` (keys: the model name, i.e. the path between ``details/`` and the timestamp, or
  its last component), else ``checkpoint-<step>`` in that path (run lighteval with
  ``model_name=runs/<trajectory>/checkpoint-<step>``); trajectory: ``--trajectory``, else the folder
  above ``checkpoint-<step>``;
* item_id: ``doc.specific["item_id"]`` (or ``["id"]``) when the task stored the real id there —
  lighteval overwrites ``Doc.id`` with the row index within the split — else ``<task>-<row>``,
  the ``<task>-<index>`` id ckptsel's own task files get in file order; split, group, subtask:
  ``doc.specific`` when it has them (split: else ``--split``);
* task: the lighteval task name without its ``|<fewshot>`` suffix, and without a ``_<split>``
  suffix naming the row's split (one task per split, as lighteval's ids require, counts as one
  task); subtask: that name when it differs from ``--task``;
* correct: a 0/1 per-sample metric (``--metric``; default the one such metric on the rows, with
  ``extractive_match`` first when there are several);
* answer: the first of ``doc.specific["extracted_predictions"]`` (math-verify's normalized form)
  when the metric stored them; the argmax choice index for multiple-choice (log-likelihood)
  rows; else, through the mapping, ckptsel's extraction or the stripped generation.

NLL: a LOGPROBS metric over the reference (e.g. ``target_perplexity``) gives lighteval's
log-probability of ``choices[gold]`` given the query, which is not the contract's matched NLL:
lighteval moves the query's trailing whitespace into the continuation (so it scores a prompt
token), does not score the EOS that ends the response, and left-truncates long contexts instead
of cutting prompt+response at 512 tokens. So it is not written as NLL, and the matched-NLL rule is
unavailable on lighteval records (say so, and why, in one line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import pandas as pd

from ckptsel.errors import CkptselError
from ckptsel.ingest.inflate import check_record_size
from ckptsel.ingest.mapping import (
    CheckpointLog,
    Ingested,
    Notes,
    checked_note,
    digest,
    ingest_logs,
    log_field,
    log_object,
    lookup_step,
    newest_per_key,
    shown,
    step_in_path,
)
from ckptsel.records.schema import SPLITS

if TYPE_CHECKING:
    from ckptsel.ingest.mapping import Naming

DETAILS_RE = re.compile(r"^details_(?P<task>.+)_(?P<ts>\d{4}-\d{2}-\d{2}T[\d\-.:]+)\.parquet$")
FEWSHOT_RE = re.compile(r"\|\d+$")
# the default --metric where the rows have several 0/1 metrics: the first of these they have
PREFERRED_METRICS = ("extractive_match", "exact_match", "quasi_exact_match", "prefix_exact_match", "acc")
NOT_NLL = (
    "their LOGPROBS metric scores the reference differently from the matched NLL: the prompt's "
    "trailing whitespace is scored, the EOS is not, long contexts are cut on the left"
)


# --------------------------------------------------------------------------- finding the files
def _details_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("details_*.parquet") if DETAILS_RE.match(f.name))
            if not found:
                raise CkptselError(f"{p}: no details_<task>|<fewshot>_<timestamp>.parquet files (run lighteval with --save-details)")
            out.extend(found)
        elif p.is_file() and DETAILS_RE.match(p.name):
            out.append(p)
        else:
            raise CkptselError(f"{p}: not a lighteval details file or folder")
    return sorted(set(out))


def model_name(path: Path) -> str:
    """The model name part of a details file's path: between ``details/`` and the timestamp."""
    model_dir = path.parent.parent
    parts = model_dir.parts
    if "details" in parts:
        k = len(parts) - 1 - parts[::-1].index("details")
        return "/".join(parts[k + 1 :]) or model_dir.name
    return str(model_dir)


def newest_files(files: Sequence[Path], notes: Notes) -> dict[tuple[str, str], Path]:
    """``{(model name, task): newest file}`` (``files``: details files, named as lighteval does;
    the files passed over go to ``notes``)."""
    matches = [(f, DETAILS_RE.match(f.name)) for f in files]
    found = [((model_name(f), m.group("task")), m.group("ts"), f) for f, m in matches if m]

    def passed_over(key: tuple[str, str], used: Path, ignored: Path) -> None:
        notes.add("several details files for one task: the newest is used", f"{key[0]}: {key[1]}: using {used}, ignoring {ignored}")

    return newest_per_key(found, passed_over)


def details_by_model(details: Sequence[Path], notes: Notes) -> dict[str, list[Path]]:
    """``{model name: its newest details file per task}`` under the folders or files named
    (one model name per checkpoint; the files passed over go to ``notes``)."""
    by_model: dict[str, list[Path]] = {}
    for (model, _), path in newest_files(_details_files(details), notes).items():
        by_model.setdefault(model, []).append(path)
    return by_model


# --------------------------------------------------------------------------- one file
def _read(path: Path) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not Path(path).is_file():  # a FIFO would block the read forever
        raise CkptselError(f"{path}: not a regular file (a details file is)")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise CkptselError(f"{path}: not a readable parquet file ({err})") from err
    missing = [c for c in ("doc", "metric", "model_response") if c not in table.column_names]
    if missing:
        raise CkptselError(f"{path}: not a lighteval details file (no column(s) {missing})")
    _check_cells(table, path)
    return table.to_pylist()


def _check_cells(table: Any, path: Path) -> None:
    """Refuse a details file with a string or binary cell past the line limit
    (:func:`~ckptsel.ingest.inflate.check_record_size`), before its rows become Python
    objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def leaves(column: Any, name: str) -> Iterator[tuple[str, Any]]:
        kind = column.type
        if pa.types.is_struct(kind):
            for i in range(kind.num_fields):
                field = kind.field(i)
                yield from leaves(pc.struct_field(column, [i]), f"{name}.{field.name}")
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            yield from leaves(pc.list_flatten(column), f"{name}[]")
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
            yield name, column

    for name in table.column_names:
        for leaf, values in leaves(table.column(name), name):
            longest = pc.max(pc.binary_length(values)).as_py()
            if longest is not None:
                check_record_size(int(longest), f"{path}: column {leaf}")


def _metric_values(rows: list[dict]) -> dict[str, list[float]]:
    """Numeric per-sample metric values by name (nested metrics such as ``ppl`` are not)."""
    out: dict[str, list[float]] = {}
    for r in rows:
        for name, v in (r["metric"] or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(name, []).append(float(v))
    return out


def _pick_metric(path: Path, rows: list[dict], metric: str | None) -> str:
    values = _metric_values(rows)
    if metric is not None:
        if metric not in values:
            raise CkptselError(f"{path}: per-sample metric {metric!r} not found (the rows have {sorted(values)})")
        return metric
    binary = [m for m, vs in values.items() if all(v in (0.0, 1.0) for v in vs)]
    if len(binary) == 1:
        return binary[0]
    preferred = [m for m in PREFERRED_METRICS if m in binary]
    if preferred:
        return preferred[0]
    raise CkptselError(f"{path}: no single 0/1 per-sample metric among {sorted(values)}; choose one with --metric")


def harness_task(name: str, split: str | None) -> str:
    """``tiny_gsm_validation|0`` → ``tiny_gsm`` (for a validation row)."""
    name = FEWSHOT_RE.sub("", name)
    if split and name.endswith(f"_{split}"):
        name = name[: -len(split) - 1]
    return name


def _answer(doc: dict, resp: dict, where: str) -> tuple[str | None, str | None]:
    """(answer, text) of one scored row."""
    texts = log_field(resp, "text", (list,), f"{where}: model_response") or []
    if texts:
        spec = doc.get("specific") or {}
        preds = log_field(spec, "extracted_predictions", (list,), f"{where}: doc.specific")
        answer = None if preds is None else (str(preds[0]) if len(preds) else "")
        return answer, str(texts[0])
    logprobs = resp.get("logprobs") or []
    if len(logprobs) > 1:  # multiple choice: the highest-scoring choice
        best = str(max(range(len(logprobs)), key=lambda i: (logprobs[i], -i)))
        return best, best
    return None, None


def _rows(path: Path, rows: list[dict], metric: str, split_of: Callable[[str], str | None]) -> Iterator[dict]:
    seen: dict[tuple[str | None, str], int] = {}
    for n, r in enumerate(rows):
        value = (r["metric"] or {}).get(metric)
        if value is None:
            continue  # a row of another sampling method (e.g. LOGPROBS for a perplexity metric)
        where = f"{path}: row {n}"
        doc = log_object(r["doc"] or {}, where, "column doc")
        resp = log_object(r["model_response"] or {}, where, "column model_response")
        if value not in (0.0, 1.0):
            raise CkptselError(f"{path}: row {n}: metric {metric}={value!r} is not 0/1, so not a correctness")
        if len(resp.get("text") or []) > 1:
            raise CkptselError(f"{path}: row {n}: several generations per document; ckptsel records one greedy answer")
        spec = log_object(doc.get("specific") or {}, where, "doc.specific")
        for key, kinds in (("split", (str,)), ("group", (str, int)), ("subtask", (str,)), ("item_id", (str, int)), ("id", (str, int))):
            log_field(spec, key, kinds, f"{where}: doc.specific")
        log_field(doc, "task_name", (str,), f"{where}: doc")
        split = spec.get("split") or split_of(str(doc.get("task_name") or ""))
        name = harness_task(str(doc.get("task_name") or ""), split)
        real = spec.get("item_id", spec.get("id"))
        item = str(real) if real is not None else f"{name}-{doc.get('id')}"
        if (split, item) in seen:
            raise CkptselError(f"{path}: rows {seen[(split, item)]} and {n} both score item {item!r}")
        seen[(split, item)] = n
        answer, text = _answer(doc, resp, where)
        gold = _gold(doc, where)
        yield {
            "item_id": item,
            "answer": answer,
            "correct": value == 1.0,
            "text": text,
            "harness_task": name,
            "split": split,
            "group": None if spec.get("group") is None else str(spec["group"]),
            "subtask": None if spec.get("subtask") is None else str(spec["subtask"]),
            "content": digest([doc.get("query"), gold]),
            "reference": str(gold[0]) if resp.get("text") and len(gold) == 1 else None,
        }


def _gold(doc: dict, where: str) -> list:
    """The document's gold choices (``choices[gold_index]``), type-checked."""
    choices = log_field(doc, "choices", (list,), f"{where}: doc") or []
    index = doc.get("gold_index")
    indexes = index if isinstance(index, list) else ([] if index is None else [index])
    for i in indexes:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(choices):
            raise CkptselError(f"{where}: doc.gold_index {shown(index)} is not an index of its {len(choices)} choices")
    log_field(doc, "query", (str,), f"{where}: doc")
    return [choices[i] for i in indexes]


def _has_reference_logprob(rows: list[dict]) -> bool:
    return any(len((r["model_response"] or {}).get("logprobs") or []) == 1 and not (r["model_response"] or {}).get("text") for r in rows)


def lighteval_checkpoint(
    model: str,
    files: Sequence[Path],
    *,
    steps: Mapping[str, int] | None = None,
    splits: Mapping[str, str] | None = None,
    metric: str | None = None,
) -> tuple[CheckpointLog, bool]:
    """The details files of one model (checkpoint) as a :class:`CheckpointLog`, and whether they
    hold a log-probability of the reference (which is not written as NLL; see the module)."""
    found = step_in_path(model)
    step = lookup_step(steps, [model, model.rsplit("/", 1)[-1]])
    if step is None:
        if found is None:
            raise CkptselError(
                f"{files[0]}: cannot tell the checkpoint's step: no checkpoint-<step> in the model name {model!r}; pass --steps"
            )
        step = found[0]

    def split_of(task_name: str) -> str | None:
        bare = FEWSHOT_RE.sub("", task_name)
        return (splits or {}).get(task_name, (splits or {}).get(bare))

    frames, reference = [], False
    for path in files:
        rows = _read(path)
        if not rows:
            raise CkptselError(f"{path}: no rows")
        frames.append(pd.DataFrame(list(_rows(path, rows, _pick_metric(path, rows, metric), split_of))))
        reference = reference or _has_reference_logprob(rows)
    source = str(files[0].parent) if len(files) > 1 else str(files[0])
    log = CheckpointLog(source, step, pd.concat(frames, ignore_index=True), trajectory=found[1] if found else None)
    return log, reference


def ingest_lighteval(
    details: Sequence[Path],
    *,
    out: Path | str,
    splits: Mapping[str, str] | None = None,
    steps: Mapping[str, int] | None = None,
    metric: str | None = None,
    **naming: Unpack[Naming],
) -> Ingested:
    """Read lighteval details (folders or files; one model name per checkpoint) into ``out``.

    ``naming``: the keywords every ingester takes (:class:`~ckptsel.ingest.mapping.Naming`).
    ``splits`` maps lighteval task names to ``validation``/``test`` for documents whose
    ``specific`` does not say (default: ``split``). Everything is read and checked before
    anything is written. Returns what was written and what the details lack.
    """
    note = checked_note(naming)
    for name, s in (splits or {}).items():
        if s not in SPLITS:
            raise CkptselError(f"split {s!r} for lighteval task {name!r}: use validation or test")
    notes = Notes(note)
    by_model = details_by_model(details, notes)
    notes.say()
    if not by_model:
        raise CkptselError("no lighteval DETAILS_DIR given")
    mapped, reference = [], False
    for model, files in by_model.items():
        log, ref = lighteval_checkpoint(model, files, steps=steps, splits=splits, metric=metric)
        mapped.append(log)
        reference = reference or ref
    nll_reason = NOT_NLL if reference else None
    return ingest_logs(mapped, out=out, harness="lighteval", nll_reason=nll_reason, **naming)
