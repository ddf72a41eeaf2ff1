"""Records from inspect_ai evaluation logs: ``.eval`` (the default) and ``.json`` logs, one log per
checkpoint, read WITHOUT inspect_ai installed.

A ``.eval`` log is a ZIP archive whose members are Zstandard-compressed (ZIP method 93), which
Python's ``zipfile`` cannot inflate before 3.14; the members are inflated here with pyarrow's zstd
codec (pyarrow is a ckptsel dependency), as a stream counted as it inflates: a member inflating
past 100x its compressed size (16 MiB at least), or a log past 100x its file size, or past 2 GiB,
is refused as a possible ZIP bomb (``$CKPTSEL_INFLATE_MAX_RATIO``, ``$CKPTSEL_INFLATE_MAX_BYTES``).
Members used: ``header.json`` (the eval spec: task, model, model args, generation config, metadata;
the status) and ``samples/<id>_epoch_<n>.json``.
A ``.json`` log is one object with the same fields and a ``samples`` list.

Conventions (SPEC §2 through :mod:`~ckptsel.ingest.mapping`):

* step: ``--steps`` (keys: the log's file name or path, or the model name), else ``step`` in the
  eval metadata (``inspect eval --metadata step=80``), else ``checkpoint-<step>`` in the model
  name (``hf/runs/sft/checkpoint-80``) or in the model args;
* trajectory: ``--trajectory``, else ``trajectory`` in the eval metadata, else the folder above
  ``checkpoint-<step>`` in the model name; configuration: ``--configuration``, else the
  metadata's ``configuration``, else the trajectory;
* item_id: the sample id; split, group, subtask: the sample metadata's ``split`` / ``group`` /
  ``subtask`` when present (split: else ``--split``);
* correct: the value of the scorer (``--scorer`` when samples carry several): ``C``/``I``
  (CORRECT/INCORRECT), true/false or 1/0; anything else (partial credit) is an error;
* answer: the score's ``answer`` (what the scorer extracted); text: the completion.

Not accepted: logs that did not finish (status other than ``success``), and several epochs
(ckptsel records one greedy answer per item). Samples that errored are left out, with a note.
inspect records no log-probabilities of the reference response (with ``logprobs=True`` only those
of the generated tokens), so ingested records have no matched NLL.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import pandas as pd

from ckptsel.errors import CkptselError
from ckptsel.ingest.inflate import MAX_BYTES_ENV, RATIO_ENV, check_record_size, inflate_limit
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

if TYPE_CHECKING:
    from ckptsel.ingest.mapping import Naming

ZSTD_METHOD = 93  # APPNOTE 6.3.7
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # ZIP local file header (30 bytes)
_CORRECT = {"C": True, "I": False}


# --------------------------------------------------------------------------- inflate limits
_CHUNK = 1 << 20


class _Budget:
    """What is left of one log's inflate limit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.left = inflate_limit(path.stat().st_size)
        self.total = self.left

    def read(self, stream: Any, name: str, compressed: int) -> bytes:
        """``stream`` read to its end in chunks, refused as soon as it passes the member's
        limit or what is left of the log's."""
        mine = inflate_limit(compressed)
        limit = min(mine, self.left)
        parts, size = [], 0
        while True:
            chunk = stream.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                what = (
                    f"{mine} bytes ({compressed} compressed)" if limit == mine else f"the {self.total} bytes the whole log may inflate to"
                )
                raise CkptselError(
                    f"{self.path}: member {name} inflates to more than {what}: refused as a "
                    f"possible ZIP bomb (${RATIO_ENV}, ${MAX_BYTES_ENV} raise the limits)"
                )
            parts.append(chunk)
        self.left -= size
        return b"".join(parts)


# --------------------------------------------------------------------------- reading a log
def _member(zf: zipfile.ZipFile, path: Path, name: str, budget: _Budget) -> bytes:
    """One member's bytes, inflated as a stream within ``budget`` (Zstandard members with
    pyarrow's codec)."""
    info = zf.getinfo(name)
    if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        with zf.open(name) as stream:
            return budget.read(stream, name, info.compress_size)
    if info.compress_type != ZSTD_METHOD:
        raise CkptselError(f"{path}: member {name} uses ZIP compression {info.compress_type}, not zstd")
    import pyarrow as pa

    if not pa.Codec.is_available("zstd"):
        raise CkptselError(f"{path}: this pyarrow build has no zstd codec; install pyarrow from PyPI")
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        head = fh.read(_LOCAL_HEADER.size)
        if len(head) < _LOCAL_HEADER.size or _LOCAL_HEADER.unpack(head)[0] != 0x04034B50:
            raise CkptselError(f"{path}: member {name}: bad ZIP local header (truncated file?)")
        name_len, extra_len = _LOCAL_HEADER.unpack(head)[-2:]
        fh.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
        raw = fh.read(info.compress_size)
    try:
        with pa.input_stream(pa.py_buffer(raw), compression="zstd") as stream:
            return budget.read(stream, name, len(raw))
    except (OSError, ValueError) as err:  # pyarrow raises ArrowIOError/ArrowInvalid
        raise CkptselError(f"{path}: member {name} cannot be inflated ({err})") from err


def _record(data: bytes, path: Path, member: str) -> Any:
    """One member of an ``.eval`` log (the header, a sample) parsed, unless past the line
    limit (:func:`~ckptsel.ingest.inflate.check_record_size`)."""
    check_record_size(len(data), f"{path}: member {member}")
    return _json(data, path, member)


def _json(data: bytes | str, path: Path, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else err
        raise CkptselError(f"{path}: {what} is not valid JSON ({why})") from err


def read_inspect_log(path: Path) -> tuple[dict, list[dict]]:
    """``(header, samples)`` of an inspect log (``.eval`` or ``.json``), as plain JSON objects."""
    path = Path(path)
    if not path.is_file():
        what = "not a regular file (a FIFO would block the read)" if path.exists() else "not found"
        raise CkptselError(f"{path}: inspect log {what}")
    if path.suffix == ".json":
        log = _json(path.read_bytes(), path, "the log")
        if not isinstance(log, dict) or "eval" not in log:
            raise CkptselError(f"{path}: not an inspect log (no 'eval' field)")
        samples = log_field(log, "samples", (list,), str(path)) or []
        return log, [log_object(x, f"{path}: sample {k}", "the sample") for k, x in enumerate(samples)]
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            if "header.json" not in names:
                raise CkptselError(f"{path}: no header.json in the log: the evaluation is still running or was interrupted")
            budget = _Budget(path)
            header = _record(_member(zf, path, "header.json", budget), path, "header.json")
            samples = [
                log_object(_record(_member(zf, path, n, budget), path, n), f"{path}: member {n}", "the sample")
                for n in sorted(names)
                if n.startswith("samples/") and n.endswith(".json")
            ]
    except (zipfile.BadZipFile, OSError) as err:
        raise CkptselError(f"{path}: not a readable .eval log ({err})") from err
    if not isinstance(header, dict) or "eval" not in header:
        raise CkptselError(f"{path}: not an inspect log (header.json has no 'eval' field)")
    return header, samples


def find_inspect_logs(paths: Sequence[Path]) -> list[Path]:
    """The log files named, and the ``.eval``/``.json`` logs inside folders named."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix == ".eval" or (f.suffix == ".json" and f.name != "logs.json"))
            if not found:
                raise CkptselError(f"{p}: no inspect logs (.eval or .json) in this folder")
            out.extend(found)
        elif p.suffix in (".eval", ".json"):
            out.append(p)
        elif p.exists():
            raise CkptselError(f"{p}: not an inspect log (.eval or .json)")
        else:
            raise CkptselError(f"{p}: inspect log not found")
    return out


# --------------------------------------------------------------------------- one log
def _model_names(ev: dict) -> list[str]:
    """The model as the log names it: ``hf/<path>`` and ``<path>``."""
    model = str(ev.get("model") or "")  # checked a string by _eval_spec
    names = [model]
    if "/" in model:
        names.append(model.split("/", 1)[1])
    return names


def _step_and_trajectory(path: Path, ev: dict, steps: Mapping[str, int] | None) -> tuple[int, str | None]:
    meta = ev.get("metadata") or {}
    found = [step_in_path(n) for n in _model_names(ev)]
    args = ev.get("model_args") or {}
    found += [step_in_path(str(v)) for v in args.values() if isinstance(v, str)]
    found = [f for f in found if f is not None]
    folder_traj = found[0][1] if found else None
    traj = str(meta["trajectory"]) if meta.get("trajectory") else folder_traj
    explicit = lookup_step(steps, [path.name, str(path), *_model_names(ev)])
    if explicit is not None:
        return explicit, traj
    if "step" in meta:
        value = meta["step"]
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CkptselError(f"{path}: eval metadata step {value!r} is not a non-negative integer")
        return value, traj
    if found:
        return found[0][0], traj
    raise CkptselError(
        f"{path}: cannot tell the checkpoint's step: no 'step' in the eval metadata and no "
        f"checkpoint-<step> in the model name {ev.get('model')!r}; pass --steps"
    )


def _where(path: Path, sample: dict) -> str:
    """``<log>: sample <id>`` (the id as the log writes it, cut short)."""
    return f"{path}: sample {shown(sample.get('id'), 40)}"


def _scorer(path: Path, samples: list[dict], scorer: str | None) -> str:
    names = sorted({k for s in samples for k in log_object(s.get("scores") or {}, _where(path, s), "field scores")})
    if scorer is not None:
        if scorer not in names:
            raise CkptselError(f"{path}: scorer {scorer!r} not found (the samples have {names})")
        return scorer
    if len(names) != 1:
        if not names:
            raise CkptselError(f"{path}: the samples carry no scores (run the eval with a scorer)")
        raise CkptselError(f"{path}: several scorers {names}; choose one with --scorer")
    return names[0]


def _correct(value: Any, where: str, scorer: str) -> bool:
    if isinstance(value, str) and value in _CORRECT:
        return _CORRECT[value]
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return value == 1
    raise CkptselError(
        f"{where}: score {value!r} of scorer {scorer} is not a correctness (C/I, true/false or 0/1); "
        "choose a scorer that grades right/wrong with --scorer"
    )


def _attached(value: Any, attachments: dict) -> Any:
    """``value`` with inspect's ``attachment://<hash>`` strings replaced by what they name."""
    if isinstance(value, str) and value.startswith("attachment://"):
        return attachments.get(value[len("attachment://") :], value)
    if isinstance(value, list):
        return [_attached(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: _attached(v, attachments) for k, v in value.items()}
    return value


# what a chat message or content part is, without what differs between runs of one sample
_RUN_KEYS = frozenset({"id", "source", "metadata", "internal", "model"})


def _item_content(value: Any) -> Any:
    if isinstance(value, list):
        return [_item_content(v) for v in value]
    if isinstance(value, dict):
        return {k: _item_content(v) for k, v in value.items() if k not in _RUN_KEYS}
    return value


def _completion(sample: dict, where: str) -> str | None:
    output = log_object(sample.get("output") or {}, where, "field output")
    text = _attached(output.get("completion"), sample.get("attachments") or {})
    return text if isinstance(text, str) else None


def _sample(s: dict, path: Path, scorer: str) -> tuple[str, dict, dict]:
    """``(where, score, metadata)`` of one sample, every field the rows read type-checked."""
    sid = log_field(s, "id", (str, int), f"{path}: a sample")
    if sid is None:
        raise CkptselError(f"{path}: a sample has no id")
    where = f"{path}: sample {sid!r}"
    scores = log_object(s.get("scores") or {}, where, "field scores")
    score = scores.get(scorer)
    if score is None:
        raise CkptselError(f"{where}: no score from scorer {scorer}")
    score = log_object(score, where, f"the score of scorer {scorer}")
    meta = log_object(s.get("metadata") or {}, where, "field metadata")
    for key, kinds in (("split", (str,)), ("group", (str, int)), ("subtask", (str,))):
        log_field(meta, key, kinds, f"{where}: metadata")
    log_field(score, "answer", (str, int, float), f"{where}: score {scorer}")
    log_field(s, "target", (str, list), where)
    if not isinstance(s.get("attachments") or {}, dict):
        raise CkptselError(f"{where}: field attachments is not an object")
    return where, score, meta


def _sample_rows(path: Path, samples: list[dict], scorer: str, task: str) -> Iterator[dict]:
    for s in samples:
        where, score, meta = _sample(s, path, scorer)
        attachments = s.get("attachments") or {}
        answer, target = score.get("answer"), _attached(s.get("target"), attachments)
        item = _item_content([_attached(s.get("input"), attachments), target])
        yield {
            "item_id": str(s["id"]),
            "answer": None if answer is None else str(answer),
            "correct": _correct(score.get("value"), where, scorer),
            "text": _completion(s, where),
            "harness_task": task,
            "split": meta.get("split"),
            "group": None if meta.get("group") is None else str(meta["group"]),
            "subtask": meta.get("subtask"),
            "content": digest(item),
            "reference": target if isinstance(target, str) else None,
        }


def _greedy(ev: dict) -> bool:
    config = ev.get("model_generate_config") or {}
    return config.get("temperature") == 0 or (ev.get("model_args") or {}).get("do_sample") is False


def _epoch(sample: dict, path: Path) -> int:
    """The sample's epoch (1 where it says none), an integer."""
    value = log_field(sample, "epoch", (int,), _where(path, sample))
    return 1 if value is None else value


def _eval_spec(header: dict, path: Path) -> dict:
    """The log's eval spec, each field read from it type-checked."""
    ev = log_object(header["eval"], str(path), "field eval")
    for key, kinds in (("task", (str,)), ("model", (str,))):
        log_field(ev, key, kinds, f"{path}: eval")
    for key in ("metadata", "model_args", "model_generate_config"):
        log_object(ev.get(key) or {}, f"{path}: eval", f"field {key}")
    meta = ev.get("metadata") or {}
    log_field(meta, "trajectory", (str, int), f"{path}: eval metadata")
    log_field(meta, "configuration", (str, int), f"{path}: eval metadata")
    return ev


def inspect_checkpoint(
    path: Path, *, steps: Mapping[str, int] | None = None, scorer: str | None = None, notes: Notes | None = None
) -> CheckpointLog:
    """One inspect log as a :class:`CheckpointLog` (its samples mapped, not yet written);
    what it has to say goes to ``notes`` (said once per ingest; default: printed now)."""
    said = Notes(print) if notes is None else notes
    path = Path(path)
    header, samples = read_inspect_log(path)
    ev = _eval_spec(header, path)
    status = header.get("status")
    if status != "success":
        raise CkptselError(
            f"{path}: the log's status is {status!r}, not 'success' (the evaluation did not finish); re-run it or `inspect eval-retry` it"
        )
    epochs = sorted({_epoch(s, path) for s in samples})
    if epochs and epochs != [1]:
        raise CkptselError(f"{path}: samples of epochs {epochs}; ckptsel records one greedy answer per item (run with epochs=1)")
    failed = [str(s.get("id"))[:40] for s in samples if s.get("error")]
    if failed:
        said.add(
            "samples that errored in inspect are left out",
            f"{path}: {len(failed)} ({', '.join(failed[:5])}{', ...' if len(failed) > 5 else ''})",
        )
        samples = [s for s in samples if not s.get("error")]
    if not _greedy(ev):
        said.add(
            "the log does not record greedy decoding (temperature 0, or do_sample=false for hf "
            "models); accuracy and agreement assume one greedy answer per item",
            str(path),
        )
    step, trajectory = _step_and_trajectory(path, ev, steps)
    task = str(ev.get("task") or "inspect")
    rows = pd.DataFrame(list(_sample_rows(path, samples, _scorer(path, samples, scorer), task)))
    if rows.empty:
        raise CkptselError(f"{path}: no scored samples")
    if notes is None:
        said.say()
    meta = ev.get("metadata") or {}
    conf = meta.get("configuration")
    return CheckpointLog(str(path), step, rows, trajectory=trajectory, configuration=conf and str(conf))


def ingest_inspect(
    logs: Sequence[Path], *, out: Path | str, steps: Mapping[str, int] | None = None, scorer: str | None = None, **naming: Unpack[Naming]
) -> Ingested:
    """Read inspect logs (one per checkpoint; files or folders of them) into ``out``.

    ``naming``: the keywords every ingester takes (:class:`~ckptsel.ingest.mapping.Naming`).
    Everything is read and checked before anything is written. Returns what was written and
    what the logs lack (:attr:`Ingested.unavailable`).
    """
    note = checked_note(naming)
    files = find_inspect_logs(logs)
    if not files:
        raise CkptselError("no inspect LOGS given")
    notes = Notes(note)
    mapped = [inspect_checkpoint(f, steps=steps, scorer=scorer, notes=notes) for f in files]
    named = {str(Path(p)) for p in logs}
    mapped = newest_logs(mapped, [m for m in mapped if m.source not in named], notes)
    notes.say()
    return ingest_logs(mapped, out=out, harness="inspect", **naming)


def newest_logs(mapped: list[CheckpointLog], in_folders: list[CheckpointLog], notes: Notes) -> list[CheckpointLog]:
    """``mapped`` less the older of the logs found in folders that evaluate one checkpoint on
    one task (a log folder keeps every run: a rerun, a ``.json`` log beside an ``.eval``):
    the newest is used (inspect names its logs ``<created>_<task>_<id>``), the others are
    noted. Logs named one by one are all kept (two of one checkpoint: an error)."""

    def key(log: CheckpointLog) -> tuple[str, int, str]:
        return (str(log.trajectory), log.step, str(log.rows["harness_task"].iloc[0]))

    def passed_over(k: tuple[str, int, str], used: Path, ignored: Path) -> None:
        notes.add(
            "several logs of one checkpoint and task in a folder: the newest is used",
            f"{k[0]} step {k[1]} ({k[2]}): using {used}, ignoring {ignored}",
        )

    found = [(key(m), Path(m.source).name.split("_", 1)[0], Path(m.source)) for m in in_folders]
    kept = {str(p) for p in newest_per_key(found, passed_over).values()}
    dropped = {m.source for m in in_folders} - kept
    return [m for m in mapped if m.source not in dropped]
