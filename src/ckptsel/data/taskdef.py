"""The one task definition type — data, not code — for the built-in tasks and a task file alike.

A :class:`Task` says which fields of an item record are what (:class:`Fields`: the prompt, the
response, the reference answer, the id, the group, the stratum), how its items file is read
(its loader) and how an answer is extracted and compared (:class:`~ckptsel.data.answers.rules.AnswerRule`).
The built-in tasks (:mod:`ckptsel.data.tasks`) are such definitions with loaders of their own
formats; a task file is the same thing written in TOML (:func:`read_task_file`)::

    name = "firstword"
    [fields]
    prompt = "q"            # or a list: ["instruction", "input"], joined by a blank line
    response = "target"     # optional: without it, no SFT target and no NLL target
    reference = "gold"
    id = "uid"              # optional (default <name>-<index>); group, stratum optional too
    [answer]
    extract = '^\\s*(\\S+)' # a rule name or a regex
    compare = "exact"

Its items file is a JSON list or JSON Lines (sniffed from the first character); a field name may
be a dotted path into nested objects (``doc.question``). The task file's identity is its content
hash (:attr:`Task.digest`, with the scorer file's source when there is one): measurements name
it, so an edited task file is measured again rather than reused.

A task file is data: reading or showing it runs no code. Only ``[answer] scorer =
"score.py:function"`` (a Python file beside it) is code, imported only when answers are judged.
Every value is checked where it is read, naming the file and the key.

Every item becomes an :class:`Item` with the same meanings whatever the task: ``instruction`` is
the prompt's text (the prompt format is applied around it later), ``response`` the supervised and
the NLL target (``None`` when the task has none), ``reference`` the gold answer, ``group`` the
original question (default: the item id), ``subtask`` the stratum.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel._util.io import read_json_records
from ckptsel.data.answers.rules import FAMILY_RULES, AnswerRule, BoundedRegex, scorer_digest
from ckptsel.errors import CkptselError

ROLES: dict[str, str] = {
    "prompt": "the question: the text inside the prompt format (a field, or a list of fields "
    "joined by a blank line; the first is required, empty later ones are left out)",
    "response": "the supervised (SFT) target and the teacher-forced NLL target (optional: without it the task has neither)",
    "reference": "the gold answer the answer rule compares with (required)",
    "id": "the item id (default: <task>-<index> in file order); ids must be unique",
    "group": "the original question shared by paraphrases (default: the item id)",
    "stratum": "the stratum, recorded as the item's subtask (default: none)",
}
TASK_FILE_KEYS: dict[str, dict[str, str]] = {
    "": {
        "name": "the task's name, recorded in the records' task column (letters, digits, '_', '-', '.'; not a built-in task's name)",
        "description": "one line shown by 'ckptsel tasks'",
    },
    "fields": {
        **ROLES,
        "reference_regex": "a regex over the reference field's text whose first match (group 1 "
        "when it has a group, else the whole match) is the gold answer: e.g. reference = "
        "response = \"answer\" with '####\\s*(.+?)\\s*$' takes GSM8K's final number from the "
        "raw answer (an item without a match is refused)",
    },
    "answer": {
        "extract": "a rule name (see below) or a regex (default: whole; label when compare = 'labels')",
        "group": "the regex group that is the answer (default: 1 when the pattern has a group, else the whole match)",
        "select": "first | last: which regex match (default: first)",
        "compare": "a comparison rule (see below; default: exact)",
        "tolerance": "numeric: largest absolute difference still correct (default 0)",
        "labels": "labels: the allowed answers (a list of strings)",
        "scorer": "'score.py:function' instead of compare: a Python file beside the task file "
        "(a relative path inside its folder), function(answer, reference) -> bool; runs code, "
        "imported only when answers are judged (measure, tasks show --score), never to show the "
        "task; a module:function is refused (import it from such a file)",
    },
    "example": {"<field>": "an example item record, shown by 'ckptsel tasks show'"},
}
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Item:
    """One question of a pool, in the task-independent form every later stage uses."""

    item_id: str
    instruction: str
    reference: str
    response: str | None
    group: str
    subtask: str = ""


def item_hash(item: Any) -> str:
    """Content hash of an item, so an edited items file is re-measured, not reused."""
    blob = json.dumps([item.item_id, item.instruction, item.response, item.reference, item.group, item.subtask]).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Fields:
    """Which fields of an item record hold what (a task's item schema). ``notes`` say, per
    role, how a built-in task derives the value."""

    prompt: tuple[str, ...]
    reference: str
    response: str | None = None
    id: tuple[str, ...] = ()
    group: str | None = None
    stratum: str | None = None
    notes: tuple[tuple[str, str], ...] = ()
    reference_regex: str = ""

    def rows(self, task_name: str) -> list[tuple[str, str, str]]:
        """``(role, field(s), note)`` per role, for ``ckptsel tasks show`` and the docs."""
        notes = dict(self.notes)
        if self.reference_regex:
            notes.setdefault("reference", f"the match of reference_regex '{self.reference_regex}'")
        defaults = {
            "response": "none: no SFT target, no NLL target",
            "id": f"none: {task_name}-<index>",
            "group": "none: the item id",
            "stratum": "none",
        }
        names = {
            "prompt": " + ".join(self.prompt),
            "response": self.response,
            "reference": self.reference,
            "id": " | ".join(self.id),
            "group": self.group,
            "stratum": self.stratum,
        }
        return [(role, names[role] or "", notes.get(role) or ("" if names[role] else defaults[role])) for role in ROLES]


Loader = Callable[[Path, "Task"], list[Item]]


@dataclass(frozen=True)
class Task:
    """A task: how to load its files (``loader``), its item schema (``fields``) and which answer
    rule scores it (``answer``; default: its answer family's). ``source`` is the task file
    ("" for a built-in task), ``digest`` its content hash, ``example`` an example item record."""

    name: str
    family: str
    loader: Loader = field(repr=False)
    description: str = ""
    subtask: str = ""  # for one commonsense task: its label set / subtask name
    aliases: tuple[str, ...] = ()
    fields: Fields | None = None
    answer: AnswerRule | None = None
    source: str = ""
    digest: str = ""
    example: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.answer is None:
            object.__setattr__(self, "answer", FAMILY_RULES[self.family])

    @property
    def rule(self) -> AnswerRule:
        """The answer rule (never None after construction)."""
        assert self.answer is not None
        return self.answer

    @property
    def has_response(self) -> bool:
        """Whether items carry a response (an SFT and NLL target)."""
        return self.fields is None or self.fields.response is not None

    @property
    def identity(self) -> str:
        """What names the task in measurement fingerprints: the name of a built-in task, the
        name and content hash of a task file."""
        return f"{self.name}@{self.digest}" if self.source else self.name

    def load(self, path: str | Path) -> list[Item]:
        """Load the items of ``path`` (file or, for commonsense, folder)."""
        path = Path(path)
        if not path.exists():
            raise CkptselError(f"{path}: no such file or folder (task {self.name!r})")
        return self.loader(path, self)


# --------------------------------------------------------------------------- reading records


def parse_file(path: Path, parse: Callable[[Any, str, int], Item]) -> list[Item]:
    """The items of a json list or jsonl file, ``parse(record, where, index)`` making each;
    ``where`` names the line (jsonl) or the record index (json list) for error messages.
    Item ids must be unique within the file."""
    data = read_json_records(path)
    items = [parse(record, where, index) for index, (where, record) in enumerate(zip(data.locations, data.records, strict=True))]
    return check_unique(items, data.locations, path)


def _lookup(record: dict, name: str) -> Any:
    """``record[name]``, else the dotted path ``a.b`` into nested objects (None when absent)."""
    if name in record:
        return record[name]
    value: Any = record
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def field_value(record: Any, name: str, path: Path, where: str, *, required: bool = True) -> str | None:
    """A string field of a record (numbers are accepted and written as strings)."""
    if not isinstance(record, dict):
        raise CkptselError(f"{path}: {where}: expected a JSON object, got {type(record).__name__}")
    value = _lookup(record, name)
    if value is None:
        if required:
            raise CkptselError(f"{path}: {where}: missing required field {name!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise CkptselError(f"{path}: {where}: field {name!r} must be a string, got {type(value).__name__}")
    return str(value)


def file_id(record: dict, path: Path, where: str, *names: str) -> str | None:
    """The item id of the first of ``names`` the record has (None when it has none)."""
    for name in names:
        value = field_value(record, name, path, where, required=False)
        if value is not None:
            if not value.strip():
                raise CkptselError(f"{path}: {where}: field {name!r} is empty")
            return value
    return None


def check_unique(items: list[Item], wheres: list[str], path: Path) -> list[Item]:
    """``items``, refused when empty or when an id repeats (naming both places)."""
    if not items:
        raise CkptselError(f"{path}: no items")
    seen: dict[str, str] = {}
    for item, where in zip(items, wheres, strict=True):
        if item.item_id in seen:
            raise CkptselError(f"{path}: {where}: duplicate item id {item.item_id!r} (first at {seen[item.item_id]})")
        seen[item.item_id] = where
    return items


def load_fields(path: Path, task: Task) -> list[Item]:
    """Items of a JSON list / JSON Lines file read through ``task.fields`` (a task file's
    loader); each reference is checked against the answer rule (a label, a number)."""
    fields, rule = task.fields, task.rule
    assert fields is not None
    derive = BoundedRegex(fields.reference_regex, f"{task.source}: [fields] reference_regex") if fields.reference_regex else None

    def item(record: Any, where: str, index: int) -> Item:
        first = field_value(record, fields.prompt[0], path, where) or ""
        if not first.strip():
            raise CkptselError(f"{path}: {where}: field {fields.prompt[0]!r} is empty")
        more = [field_value(record, n, path, where, required=False) for n in fields.prompt[1:]]
        prompt = "\n\n".join([first, *(m for m in more if m and m.strip())])
        reference = field_value(record, fields.reference, path, where) or ""
        if derive is not None:
            reference = _derived_reference(derive, reference, path, where, fields.reference)
        problem = rule.reference_problem(reference)
        if problem:
            raise CkptselError(f"{path}: {where}: field {fields.reference!r} {problem}")
        response = field_value(record, fields.response, path, where) if fields.response else None
        item_id = file_id(record, path, where, *fields.id) or f"{task.name}-{index}"
        group = fields.group and field_value(record, fields.group, path, where, required=False)
        stratum = fields.stratum and field_value(record, fields.stratum, path, where, required=False)
        return Item(item_id, prompt, reference, response, group or item_id, stratum or "")

    return parse_file(path, item)


def _derived_reference(derive: BoundedRegex, text: str, path: Path, where: str, name: str) -> str:
    """The gold answer ``reference_regex`` finds in the reference field's ``text``."""
    try:
        found = derive.find(text, min(derive.groups, 1))
    except CkptselError as err:
        raise CkptselError(f"{path}: {where}: field {name!r}: {err}") from None
    if not found or not found.strip():
        raise CkptselError(f"{path}: {where}: field {name!r}: {derive.key} {derive.pattern!r} finds no answer in {text[:60]!r}")
    return found.strip()


# --------------------------------------------------------------------------- task files


def _table(data: dict, key: str, path: Path) -> dict[str, Any]:
    """``data[key]`` as a table whose keys are all known (:data:`TASK_FILE_KEYS`)."""
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise CkptselError(f"{path}: {key} must be a table ([{key}])")
    known = TASK_FILE_KEYS[key]
    extra = sorted(set(table) - set(known)) if key != "example" else []
    if extra:
        raise CkptselError(f"{path}: [{key}] unknown key {extra[0]!r} (known: {', '.join(known)})")
    return table


def _names(value: Any, path: Path, key: str, *, many: bool = False) -> tuple[str, ...]:
    """A field name (or, where ``many``, a list of them) of ``[fields] key``."""
    values = value if many and isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v.strip() for v in values):
        kind = "a field name or a list of field names" if many else "a field name"
        raise CkptselError(f"{path}: [fields] {key}: must be {kind}, got {value!r}")
    names = tuple(v.strip() for v in values)
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise CkptselError(f"{path}: [fields] {key}: field {twice!r} is listed twice")
    return names


def _fields(table: dict[str, Any], path: Path) -> Fields:
    for key in ("prompt", "reference"):
        if key not in table:
            raise CkptselError(f"{path}: [fields] needs {key!r} (the field that holds the {key})")

    def one(key: str) -> str | None:
        return _names(table[key], path, key)[0] if key in table else None

    fields = Fields(
        prompt=_names(table["prompt"], path, "prompt", many=True),
        reference=one("reference") or "",
        response=one("response"),
        id=(one("id") or "",) if "id" in table else (),
        group=one("group"),
        stratum=one("stratum"),
        reference_regex=_reference_regex(table.get("reference_regex"), path),
    )
    for role in ("reference", "response"):
        named = getattr(fields, role)
        if named in fields.prompt:
            raise CkptselError(
                f"{path}: [fields] prompt: names {named!r}, the {role} field (the model would be "
                f"shown the {'answer' if role == 'reference' else 'target'})"
            )
    return fields


def _reference_regex(value: Any, path: Path) -> str:
    """``[fields] reference_regex``, compiled to check it ("" when absent)."""
    if value is None:
        return ""
    try:
        BoundedRegex(value, "[fields] reference_regex")
    except CkptselError as err:
        raise CkptselError(f"{path}: {err}") from None
    return value


def _answer(table: dict[str, Any], path: Path) -> AnswerRule:
    settings = dict(table)
    settings.update(origin=str(path), scorer_base=str(path.resolve().parent))
    if "scorer" in settings and "compare" in settings:
        raise CkptselError(f"{path}: [answer] give compare or scorer, not both")
    if "labels" in settings:
        if not isinstance(settings["labels"], list):
            raise CkptselError(f"{path}: [answer] labels: must be a list of strings")
        settings["labels"] = tuple(settings["labels"])
    if "extract" not in settings:
        settings["extract"] = "label" if settings.get("compare") == "labels" else "whole"
    try:
        return AnswerRule(**settings)
    except CkptselError as err:
        raise CkptselError(f"{path}: {err}") from None


def read_task_file(path: str | Path) -> Task:
    """The task a TOML task file defines (module docstring); bad content raises
    :class:`CkptselError` naming the file and the key."""
    path = Path(path)
    if not path.is_file():
        raise CkptselError(f"{path}: task file not found")
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise CkptselError(f"{path}: invalid TOML: {err}") from None
    extra = sorted(set(data) - {*TASK_FILE_KEYS[""], "fields", "answer", "example"})
    if extra:
        raise CkptselError(f"{path}: unknown key {extra[0]!r} (known: name, description, [fields], [answer], [example])")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise CkptselError(f"{path}: name: a task name of letters, digits, '_', '-', '.' is needed, got {name!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise CkptselError(f"{path}: description: must be a string")
    if "fields" not in data:
        raise CkptselError(f"{path}: needs a [fields] table (prompt, reference, ...)")
    fields = _fields(_table(data, "fields", path), path)
    answer = _answer(_table(data, "answer", path), path)
    example = _table(data, "example", path) or None
    code = answer.scorer_file
    digest = hashlib.sha256(raw + (scorer_digest(code).encode() if code is not None else b""))
    return Task(
        name,
        "",
        load_fields,
        description,
        fields=fields,
        answer=answer,
        source=str(path.resolve()),
        digest=digest.hexdigest()[:16],
        example=example,
    )
