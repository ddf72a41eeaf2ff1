"""A study's protocol frozen before training (pre-registration), and the check that it still holds.

The **protocol** is everything in the study file that decides choices and estimates: the parsed
TOML (pools, rules' budgets and permutations, seeds, interval method, configurations, …) less
the purely operational keys (:data:`OPERATIONAL`: where things are written, batch size, device,
the executor), plus the SHA-256 of every data file it names (``file`` / ``files`` keys; a
folder hashes its files in order). :func:`freeze` writes it with its SHA-256 and the time to
``<study file>.protocol.json`` beside the study file (a file to commit or share: the
pre-registration); :func:`check_protocol` recomputes it and refuses, naming every difference, a
study changed after freezing, and a protocol file edited after the fact (its content no longer
matches its own hash). ``ckptsel run`` checks before every stage and hands the record to the
analysis, which copies it into the results folder and fixes its analysis settings
(:func:`protocol_analysis`); ``verify`` checks that chain. A study file at a URL has its
protocol beside it at the URL, and its data files are hashed as read through the store.

**What the hash covers** (schema 2): everything the record asserts — the protocol, the base
model's identity (:func:`base_model_identity`: a local folder's config, tokenizer and weight
files by SHA-256, safetensors headers also on their own; a hub name with the revision the
local Hugging Face cache resolves it to, when it has one), the time it was frozen, whether that
was before training, and the evidence for it (:func:`training_evidence`: the checkpoint
folders under the study's runs folder then — none, before training — and whether the runner
had started). Editing any of them after the freeze no longer matches the hash.
:func:`check_protocol` also compares the evidence with the runs folder now: a checkpoint whose
modification time predates ``frozen_at`` contradicts "before training" and is refused.

**What it guarantees, and what not.** The SHA-256 is not a signature: anyone can rewrite a
record and hash it again. It makes an edit detectable against a copy of the record (or of its
hash) kept elsewhere — commit or share the protocol file when you freeze it; the results
folder keeps a copy and ``verify`` compares. Times come from this machine's clock and the
file system's modification times, which can be set: the check catches a protocol frozen after
training by a clock that was not tampered with, it cannot prove the clock. A protocol file of
schema 1 (a pre-release format whose hash covered the protocol alone) is refused: freeze the
study again. A record that reaches the analysis in memory without a schema-2 hash is never
reported as "before training".
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ckptsel._util.io import write_text
from ckptsel._util.locations import Location, as_location, is_url
from ckptsel.errors import CkptselError
from ckptsel.study.configuration import resolve_model, resolve_path

PROTOCOL_SUFFIX = ".protocol.json"
PROTOCOL_SCHEMA = 2  # the hash covers the whole record (schema 1, pre-release, is refused)
# what the record's SHA-256 covers (schema 2)
HASHED_KEYS = ("schema", "study_file", "frozen_at", "before_training", "protocol", "evidence")
# files of a base model folder that do not decide the model (not hashed)
_NOT_MODEL = ("README", "LICENSE", "NOTICE", "USE_POLICY")
# keys that do not decide choices or estimates: section -> keys (None: the whole section)
OPERATIONAL: dict[str, tuple[str, ...] | None] = {
    "executor": None,
    "log": None,  # experiment trackers (MLflow, W&B, Trackio)
    "measure": ("batch_size", "device"),
    "study": ("runs_dir", "records_dir", "results_dir"),
}


def protocol_path(study_file: str | Path | Location) -> Path | Location:
    """Where the frozen protocol of ``study_file`` lives: ``<study file>.protocol.json`` (a
    :class:`Location` beside a study file at a URL)."""
    if is_url(study_file):
        p = as_location(study_file)
        return p.parent / (p.name + PROTOCOL_SUFFIX)
    p = Path(study_file)
    return p.with_name(p.name + PROTOCOL_SUFFIX)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _sha256(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _file_digest(path: Location) -> str:
    """SHA-256 of a file, or of a folder's files (relative names and contents, in order), the
    bytes read through the file's store."""
    h = hashlib.sha256()
    if path.is_dir():
        names = sorted(path.listing(), key=lambda rel: rel.split("/"))  # as Path sorts
        files = [(rel, path / rel) for rel in names]
    else:
        files = [(path.name, path)]
    for name, f in files:
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _rule_files(rules: Any, root: Path | Location) -> dict[str, str]:
    """``{"rules.NAME.signal": sha256}`` of each ``[rules.NAME]``'s existing Python file."""
    out = {}
    for name, tab in rules.items() if isinstance(rules, dict) else ():
        signal = tab.get("signal") if isinstance(tab, dict) else None
        if isinstance(signal, str) and ":" in signal:
            path = as_location(resolve_path(root, signal.rpartition(":")[0].strip()))
            if path.exists():
                out[f"rules.{name}.signal"] = _file_digest(path)
    return out


def _data_files(data: dict, root: Path | Location) -> dict[str, str]:
    """``{"section.key[i]": sha256}`` of every existing file named by a ``file``/``files`` key,
    and ``{"rules.NAME.signal": sha256}`` of each of your own rules' Python file (a pre-registered
    rule is its code, not its name)."""
    out = _rule_files(data.get("rules"), root)
    for section, table in data.items():
        for row, tab in enumerate(table if isinstance(table, list) else [table]):
            if not isinstance(tab, dict):
                continue
            where = f"{section}[{row}]" if isinstance(table, list) else section
            for key in ("file", "files"):
                names = tab.get(key)
                for i, name in enumerate([names] if isinstance(names, str) else names or []):
                    path = as_location(resolve_path(root, str(name)))
                    if path.exists():
                        out[f"{where}.{key}" + (f"[{i}]" if key == "files" else "")] = _file_digest(path)
    return out


def _model_file(f: Location) -> dict[str, Any]:
    """A model file's size and SHA-256 (read in 16 MiB blocks, locally); a ``.safetensors``
    file's header (tensor names, dtypes, shapes, offsets) also by its own SHA-256, so a message
    can tell a layout change from a content change. The whole file is hashed, not a sample: a
    sample would miss an edit of a few weights; measured here ~0.7 GiB/s on one core (a 15 GiB
    model: ~20 s per freeze or check, small beside training it)."""
    h, size, head = hashlib.sha256(), 0, b""
    blocks = _blocks(f)
    for block in blocks:
        if size < 8 + 100_000_000 and f.name.endswith(".safetensors"):
            head = (head + block)[: 8 + 100_000_000]
        h.update(block)
        size += len(block)
    out: dict[str, Any] = {"size": size, "sha256": h.hexdigest()}
    if f.name.endswith(".safetensors") and len(head) >= 8:
        n = int.from_bytes(head[:8], "little")
        out["header_sha256"] = hashlib.sha256(head[: 8 + n]).hexdigest()
    return out


def _blocks(f: Location):
    if not f.is_local:
        yield f.read_bytes()
        return
    with open(f.local, "rb") as fh:
        yield from iter(lambda: fh.read(1 << 24), b"")


def _hub_revision(name: str) -> str | None:
    """The commit the local Hugging Face cache resolves hub model ``name`` to (its ``main``
    ref), or None where the cache has none; nothing is downloaded."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub")
    ref = Path(hub) / ("models--" + name.replace("/", "--")) / "refs" / "main"
    try:
        return ref.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def base_model_identity(value: str, root: Path | Location) -> dict[str, Any]:
    """What the study's ``base_model`` is: a folder (local or at a URL) by every file that
    decides the model (config, tokenizer, weights; not READMEs or licences) —
    ``{"folder": name, "files": {rel: {size, sha256[, header_sha256]}}}`` — or a hub name
    with its resolved revision when the local cache knows it (``{"hub": name, "revision": …}``)."""
    where = resolve_model(root, value)
    folder = as_location(where)
    if not is_url(where) and not folder.exists():  # not a local path: a hub name
        return {"hub": value, "revision": _hub_revision(value)}
    if not folder.is_dir():
        return {"folder": value, "files": {folder.name: _model_file(folder)}}
    names = sorted(folder.listing(), key=lambda rel: rel.split("/"))
    keep = [
        rel
        for rel in names
        if not any(part.startswith(".") for part in rel.split("/")) and not rel.split("/")[-1].upper().startswith(_NOT_MODEL)
    ]
    return {"folder": value, "files": {rel: _model_file(folder / rel) for rel in keep}}


def _checkpoints(runs_dir: Path) -> list[Path]:
    """The checkpoint folders under a runs folder (``<run>/checkpoint-<step>``), sorted."""
    if not runs_dir.is_dir():
        return []
    return sorted(p for run in runs_dir.iterdir() if run.is_dir() for p in run.iterdir() if p.is_dir() and p.name.startswith("checkpoint-"))


def training_evidence(runs_dir: str | Path | None, started: bool) -> dict[str, Any]:
    """What the freeze saw of training: the runs folder (local), the checkpoint folders in it
    (``run/checkpoint-<step>``) and whether the runner had started (``started``)."""
    if runs_dir is None or is_url(runs_dir):
        return {"runs_dir": None if runs_dir is None else str(runs_dir), "checkpoints": [], "work_started": started}
    runs = Path(runs_dir).resolve()
    found = [p.relative_to(runs).as_posix() for p in _checkpoints(runs)]
    return {"runs_dir": str(runs), "checkpoints": found, "work_started": started}


def _study_data(study_file: str | Path | Location) -> tuple[dict, Path | Location]:
    """The parsed study file and the folder its relative paths start from."""
    path = as_location(study_file)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise CkptselError(f"{path}: cannot read the study file ({err})") from err
    return data, (path.parent if is_url(path) else path.local.resolve().parent)


def protocol_content(study_file: str | Path | Location) -> dict[str, Any]:
    """The protocol of ``study_file`` (module docstring): ``{"study": …, "data_files": …}``
    (a record adds ``"base_model"``: :func:`base_model_identity`)."""
    data, root = _study_data(study_file)
    kept = {}
    for section, table in data.items():
        drop = OPERATIONAL.get(section, ())
        if drop is None:
            continue
        kept[section] = {k: v for k, v in table.items() if k not in drop} if isinstance(table, dict) else table
    return {"study": kept, "data_files": _data_files(data, root)}


def freeze(
    study_file: str | Path | Location, *, started: bool = False, force: bool = False, runs_dir: str | Path | None = None
) -> dict[str, Any]:
    """Write the protocol of ``study_file`` with the base model's identity, the time (UTC) and
    the evidence of training so far (:func:`training_evidence` of ``runs_dir``, default: the
    study's ``runs_dir`` beside the file), all under one SHA-256. ``started`` records that work
    already existed; "before training" is recorded only when nothing had started and the runs
    folder held no checkpoint. An existing protocol is kept unless ``force``."""
    out = protocol_path(study_file)
    if out.exists() and not force:
        old = json.loads(out.read_text(encoding="utf-8"))
        raise CkptselError(
            f"{out} exists (frozen at {old.get('frozen_at')}, hash {str(old.get('sha256'))[:12]}); "
            "a protocol is frozen once (--force replaces it, and says so in its time)"
        )
    protocol = protocol_content(study_file)
    data, root = _study_data(study_file)
    protocol["base_model"] = base_model_identity(str(data.get("study", {}).get("base_model", "")), root)
    if runs_dir is None:
        runs_dir = resolve_path(root, str(data.get("study", {}).get("runs_dir", "runs")))
    evidence = training_evidence(runs_dir, started)
    record = {
        "schema": PROTOCOL_SCHEMA,
        "study_file": as_location(study_file).name,
        "frozen_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "before_training": not started and not evidence["checkpoints"],
        "protocol": protocol,
        "evidence": evidence,
    }
    record["sha256"] = record_hash(record)
    write_text(out, protocol_json(record))
    return record


def record_hash(record: dict[str, Any]) -> str:
    """The SHA-256 a protocol record claims: of its :data:`HASHED_KEYS`."""
    return _sha256({k: record.get(k) for k in HASHED_KEYS})


def covers_time(record: dict[str, Any]) -> bool:
    """Whether the record's hash covers ``frozen_at`` and ``before_training`` (schema 2; every
    record :func:`read_protocol` returns; a record handed over in memory may lack it)."""
    return record.get("schema") == PROTOCOL_SCHEMA


def protocol_json(record: dict[str, Any]) -> str:
    """The bytes of a protocol file (also its copy in a results folder)."""
    return json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_protocol(path: str | Path | Location) -> dict[str, Any]:
    """A protocol file's record, checked: :class:`CkptselError` when it is unreadable or was
    edited after it was frozen (its content no longer hashes to its recorded SHA-256; schema 2:
    any hashed key, ``frozen_at`` and ``before_training`` included)."""
    path = as_location(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        schema, claimed = record.get("schema", 1), record["sha256"]
        if schema == 1 and isinstance(record["protocol"], dict):
            raise CkptselError(
                f"{path}: a schema-1 protocol record (pre-release; its hash covers the protocol "
                "alone) is no longer read: freeze the study again (ckptsel protocol freeze "
                "STUDY.toml --force)"
            )
        if schema != PROTOCOL_SCHEMA or not isinstance(record["protocol"], dict):
            raise ValueError(f"schema {schema!r}")
        now = record_hash(record)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise CkptselError(f"{path}: not a protocol file ({err})") from err
    if now != claimed:
        raise CkptselError(
            f"{path}: the protocol file was edited after it was frozen (its content hashes to "
            f"{now[:12]}, not the recorded {str(claimed)[:12]})"
        )
    return record


def protocol_analysis(record: dict[str, Any]) -> dict[str, Any]:
    """The ``[analysis]`` table of a frozen protocol's study as it was frozen (empty when it has
    none): the analysis settings it fixes, over the defaults
    (:class:`ckptsel.workflows.analysis.AnalysisSettings` parses it)."""
    table = record["protocol"]["study"].get("analysis", {})
    return dict(table) if isinstance(table, dict) else {}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def protocol_diff(before: dict, now: dict) -> list[str]:
    """``key: old -> new`` for every leaf that differs (added and removed keys included)."""
    a, b = _flat(before), _flat(now)
    return [
        f"{k}: {json.dumps(a.get(k, '<absent>'))} -> {json.dumps(b.get(k, '<absent>'))}"
        for k in sorted(set(a) | set(b))
        if a.get(k, "<absent>") != b.get(k, "<absent>")
    ]


def check_protocol(study_file: str | Path | Location, overrides: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The frozen protocol record of ``study_file`` when it still holds, None when the study is
    not pre-registered; :class:`CkptselError` naming the differences when the study changed
    after freezing, when the protocol file was edited after the fact, or when ``overrides``
    (``SECTION.KEY=VALUE``, ``run --set``) touch a protocol key."""
    path = protocol_path(study_file)
    if not path.exists():
        if not as_location(study_file).is_file():
            raise CkptselError(f"study file not found: {study_file}")
        return None
    for o in overrides:
        section, _, key = o.split("=", 1)[0].strip().partition(".")
        drop = OPERATIONAL.get(section, ())
        if drop is not None and key not in drop:
            raise CkptselError(
                f"--set {o}: {study_file} has a frozen protocol ({path.name}); only operational "
                f"keys may be overridden ({', '.join(_operational_keys())})"
            )
    record = read_protocol(path)
    claimed = record["sha256"]
    frozen = {k: v for k, v in record["protocol"].items() if k != "base_model"}
    diffs = protocol_diff(frozen, protocol_content(study_file))
    if diffs:
        raise CkptselError(
            f"{study_file}: the study differs from its protocol frozen at {record.get('frozen_at')} "
            f"(hash {claimed[:12]}):\n  " + "\n  ".join(diffs) + "\nundo the change (a "
            "pre-registered protocol is not changed after the fact)"
        )
    if covers_time(record):
        _check_base_model(study_file, record)
        _check_evidence(record)
    return record


def _check_base_model(study_file, record: dict[str, Any]) -> None:
    """One line naming the first base-model file (or hub revision) that is not as frozen."""
    data, root = _study_data(study_file)
    value = str(data.get("study", {}).get("base_model", ""))
    then, now = record["protocol"].get("base_model") or {}, base_model_identity(value, root)
    if then == now:
        return
    when = f"the protocol frozen at {record.get('frozen_at')} (hash {record['sha256'][:12]})"
    if "files" in then and "files" in now:
        folder = as_location(resolve_model(root, value))
        a, b = then["files"], now["files"]
        rel = next(r for r in sorted(set(a) | set(b)) if a.get(r) != b.get(r))
        what = (
            "added"
            if rel not in a
            else "removed"
            if rel not in b
            else "tensor layout changed"
            if a[rel].get("header_sha256") != b[rel].get("header_sha256")
            else "content changed"
        )
        where = folder / rel if folder.is_dir() else folder
        raise CkptselError(f"{where}: base model file {what} since {when}; restore it")
    raise CkptselError(f"{study_file}: base model {json.dumps(now)} is not the one pinned by {when} ({json.dumps(then)})")


def _check_evidence(record: dict[str, Any]) -> None:
    """A record that says "before training" against the runs folder now: no checkpoint then,
    and none whose modification time predates ``frozen_at`` now (a clock check, not a proof)."""
    if not record.get("before_training"):
        return
    evidence = record.get("evidence") or {}
    if evidence.get("checkpoints") or evidence.get("work_started"):
        raise CkptselError(
            f"{record.get('study_file')}: the protocol says before training, but "
            f"its own evidence lists work ({evidence.get('checkpoints')[:1]})"
        )
    runs = evidence.get("runs_dir")
    if not isinstance(runs, str) or is_url(runs):
        return
    frozen = datetime.fromisoformat(record["frozen_at"]).timestamp()
    for ckpt in _checkpoints(Path(runs)):
        mtime = ckpt.stat().st_mtime
        if mtime < frozen:
            at = datetime.fromtimestamp(mtime, UTC).replace(microsecond=0).isoformat()
            raise CkptselError(
                f"{ckpt}: written at {at}, before the protocol was frozen at {record['frozen_at']}, "
                "which says before training (freeze again to record that work had started)"
            )


def _operational_keys() -> list[str]:
    return [f"{s}.*" if keys is None else f"{s}.{k}" for s, keys in OPERATIONAL.items() for k in (keys or ("",))]


def protocol_status(record: dict[str, Any] | None) -> str:
    """One line for reports: frozen (when, hash, before training or not) or not pre-registered.
    "before training" only where the hash covers it (schema 2)."""
    if record is None:
        return "not pre-registered"
    head = f"protocol frozen at {record['frozen_at']} (hash {record['sha256'][:12]})"
    if not covers_time(record):
        return f"{head}, time not covered by the hash"
    return f"{head}, {'before training' if before_training(record) else 'after work had started'}"


def before_training(record: dict[str, Any] | None) -> bool:
    """Whether ``record`` says, under its hash, that it was frozen before training."""
    return record is not None and covers_time(record) and bool(record.get("before_training"))
