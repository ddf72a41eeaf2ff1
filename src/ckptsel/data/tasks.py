"""Tasks: the one place that knows each dataset's file format (SPEC §9).

Every loader turns a file into :class:`Item` objects with the same five meanings, so nothing
downstream (split, training, measurement) has to know which dataset it is handling:

* ``instruction`` goes into the Alpaca no-input prompt (:func:`format_prompt`);
* ``response`` is the supervised target (SFT) and the teacher-forced NLL target;
* ``reference`` is the gold answer the scorer in :mod:`ckptsel.data.scoring` compares against;
* ``group`` is the original question, shared by augmented variants (validation split and the
  one-variant-per-group sensitivity use it);
* ``subtask`` is a stratum (a commonsense task, a MATH subject, a MetaMathQA ``type``).

Formats (json list or jsonl, sniffed from the first character, for every task):

``gsm8k``
    ``question``, ``answer`` ending in ``#### N``. ``reference`` = N as written (``1,080``).
    ``response`` = the answer rewritten into the MetaMathQA training format: the calculator
    annotations ``<<16-3-4=9>>`` are removed (tool markup no MetaMath-trained model has seen)
    and the ``#### N`` line becomes ``The answer is: N``, so the NLL of a GSM8K test item is
    measured on text in the format the model was fine-tuned to produce.
``metamath``
    ``query``, ``response`` (ending ``The answer is: X``), optional ``type`` (-> subtask) and
    ``original_question`` (-> group). ``reference`` = X after the last marker.
``math``
    ``problem``, ``solution``, ``answer`` (derived from the solution's last ``\\boxed{}`` when
    the file has no ``answer`` field, as in the original MATH release), optional ``subject``
    (-> subtask), ``unique_id`` (-> item id). ``response`` = the solution as written.
``commonsense`` and the 8 tasks ``boolq``, ``piqa``, ``social_i_qa``, ``hellaswag``,
``winogrande``, ``ARC-Challenge``, ``ARC-Easy``, ``openbookqa``
    LLM-Adapters json: ``instruction``, ``input`` (appended after a blank line when not
    empty), ``output`` (-> response), ``answer`` (-> reference, a label of the task).
    The path is a file or a folder: a folder holding ``<task>/test.json`` per task loads
    every known task present (subtask = folder name, in the order above); a task folder
    itself loads its ``test.json`` (or its single ``test*.json``).

New tasks: ``register_task(name, family, loader)``; the loaders above are public
(``load_gsm8k``, ``load_metamath``, ``load_math``, ``load_commonsense``) so a new dataset in
one of these formats needs only a name, e.g.
``register_task("gsm-hard", "gsm8k", load_gsm8k)``.

Item ids come from the file when it has them (``unique_id``, ``item_id`` or ``id``), else
``<task>-<index>`` in file order (index from 0; a commonsense subtask names its own ids,
``boolq-17``, so ids agree whether a task is loaded alone or from the folder). Ids must be
unique; ``group`` defaults to the item id. Bad input raises :class:`CkptselError` naming the
file, the line (jsonl) or record index (json list), and the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel._util.io import read_json_records
from ckptsel._util.locations import Location
from ckptsel._util.nodecache import local_copy
from ckptsel.data.answers import FAMILIES
from ckptsel.data.answers import commonsense as commonsense_answers
from ckptsel.data.answers import gsm8k as gsm8k_answers
from ckptsel.data.answers import latex as math_answers
from ckptsel.errors import CkptselError

PROMPT_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that "
    "appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:"
)

COMMONSENSE_TASKS = (
    "boolq",
    "piqa",
    "social_i_qa",
    "hellaswag",
    "winogrande",
    "ARC-Challenge",
    "ARC-Easy",
    "openbookqa",
)

# fields that hold the question of a raw record, in the formats the loaders read (first found)
QUESTION_FIELDS = ("query", "question", "problem", "instruction")


def format_prompt(instruction: str) -> str:
    """The Alpaca no-input prompt: the same text at training, generation and NLL time."""
    return PROMPT_TEMPLATE.format(instruction=instruction)


@dataclass(frozen=True)
class Item:
    """One question of a pool, in the task-independent form every later stage uses."""

    item_id: str
    instruction: str
    reference: str
    response: str
    group: str
    subtask: str = ""


def item_hash(item: Any) -> str:
    """Content hash of an item, so an edited items file is re-measured, not reused."""
    blob = json.dumps(
        [item.item_id, item.instruction, item.response, item.reference, item.group, item.subtask]
    ).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


Loader = Callable[[Path, "Task"], list[Item]]


@dataclass(frozen=True)
class Task:
    """A registered task: how to load its files and which answer rules score it."""

    name: str
    family: str
    loader: Loader = field(repr=False)
    description: str = ""
    subtask: str = ""  # for one commonsense task: its label set / subtask name
    aliases: tuple[str, ...] = ()

    def load(self, path: str | Path) -> list[Item]:
        """Load the items of ``path`` (file or, for commonsense, folder)."""
        path = Path(path)
        if not path.exists():
            raise CkptselError(f"{path}: no such file or folder (task {self.name!r})")
        return self.loader(path, self)


TASKS: dict[str, Task] = {}
_LOOKUP: dict[str, Task] = {}


def register_task(
    name: str,
    family: str,
    loader: Loader,
    *,
    description: str = "",
    subtask: str = "",
    aliases: tuple[str, ...] = (),
    replace: bool = False,
) -> Task:
    """Add a task so ``load_items``/``--task`` accept it. ``loader(path, task)`` returns items;
    ``family`` picks the answer rules (``gsm8k``, ``math`` or ``commonsense``)."""
    if family not in FAMILIES:
        raise CkptselError(
            f"task {name!r}: unknown answer family {family!r} (known: {', '.join(FAMILIES)})"
        )
    task = Task(name, family, loader, description, subtask, tuple(aliases))
    keys = [name, *aliases]
    for key in keys:
        existing = _LOOKUP.get(key.lower())
        if existing is not None and not replace:
            raise CkptselError(
                f"task name {key!r} is already registered (as {existing.name!r}); "
                "pass replace=True to override it"
            )
    previous = TASKS.get(name)
    if previous is not None:  # replacing: drop the old task's aliases too
        for key in [k for k, v in _LOOKUP.items() if v is previous]:
            del _LOOKUP[key]
    TASKS[name] = task
    for key in keys:
        _LOOKUP[key.lower()] = task
    return task


def get_task(task: str) -> Task:
    """The registered task of a name or alias (case-insensitive); unknown -> CkptselError."""
    found = _LOOKUP.get(task.strip().lower())
    if found is None:
        raise CkptselError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)}")
    return found


def task_family(task: str) -> str:
    """Answer family of a task: ``gsm8k``, ``math`` or ``commonsense``."""
    return get_task(task).family


def load_items(task: str, path: str | Path | Location) -> list[Item]:
    """Items of a data file (or commonsense folder), in file order; a URL is read from this
    node's copy (:func:`ckptsel._util.nodecache.local_copy`)."""
    if isinstance(path, Location) or (isinstance(path, str) and "://" in path):
        path = local_copy(path)
    return get_task(task).load(path)


# --------------------------------------------------------------------------- reading files


def _parse_file(path: Path, parse: Callable[[Any, str, int], Item]) -> list[Item]:
    """The items of a json list or jsonl file, ``parse(record, where, index)`` making each;
    ``where`` names the line (jsonl) or the record index (json list) for error messages.
    Item ids must be unique within the file."""
    data = read_json_records(path)
    items = [
        parse(record, where, index)
        for index, (where, record) in enumerate(zip(data.locations, data.records, strict=True))
    ]
    return _check_unique(items, data.locations, path)


def _field(record: Any, name: str, path: Path, where: str, *, required: bool = True) -> str | None:
    """A string field of a record (numbers are accepted and written as strings)."""
    if not isinstance(record, dict):
        raise CkptselError(f"{path}: {where}: expected a JSON object, got {type(record).__name__}")
    value = record.get(name)
    if value is None:
        if required:
            raise CkptselError(f"{path}: {where}: missing required field {name!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise CkptselError(
            f"{path}: {where}: field {name!r} must be a string, got {type(value).__name__}"
        )
    return str(value)


def _file_id(record: dict, path: Path, where: str, *names: str) -> str | None:
    for name in names:
        value = _field(record, name, path, where, required=False)
        if value is not None:
            if not value.strip():
                raise CkptselError(f"{path}: {where}: field {name!r} is empty")
            return value
    return None


def _check_unique(items: list[Item], wheres: list[str], path: Path) -> list[Item]:
    if not items:
        raise CkptselError(f"{path}: no items")
    seen: dict[str, str] = {}
    for item, where in zip(items, wheres, strict=True):
        if item.item_id in seen:
            raise CkptselError(
                f"{path}: {where}: duplicate item id {item.item_id!r} "
                f"(first at {seen[item.item_id]})"
            )
        seen[item.item_id] = where
    return items


# --------------------------------------------------------------------------- loaders

_CALCULATOR_RE = re.compile(r"<<[^<>]*>>")
_GSM8K_FINAL_RE = re.compile(r"\n?[ \t]*####[ \t]*(.*?)\s*$", re.DOTALL)


def gsm8k_response(answer: str) -> str:
    """A GSM8K ``answer`` in MetaMath training form: no ``<<...>>`` calculator annotations,
    and the final ``#### N`` line written ``The answer is: N``."""
    body = _CALCULATOR_RE.sub("", answer)
    return _GSM8K_FINAL_RE.sub(lambda m: f"\nThe answer is: {m.group(1)}", body, count=1)


def load_gsm8k(path: Path, task: Task) -> list[Item]:
    """GSM8K ``question``/``answer`` records (reusable for any task in that format)."""

    def item(record: Any, where: str, index: int) -> Item:
        question = _field(record, "question", path, where)
        answer = _field(record, "answer", path, where)
        if "####" not in answer:
            raise CkptselError(f"{path}: {where}: field 'answer' has no '#### N' final line")
        reference = gsm8k_answers.reference_span(answer)
        if not gsm8k_answers.is_numeric(gsm8k_answers.normalize_reference(reference)):
            raise CkptselError(
                f"{path}: {where}: field 'answer': final value {reference!r} is not a number"
            )
        item_id = _file_id(record, path, where, "item_id", "id") or f"{task.name}-{index}"
        return Item(item_id, question, reference, gsm8k_response(answer), item_id, task.subtask)

    return _parse_file(path, item)


def load_metamath(path: Path, task: Task) -> list[Item]:
    """MetaMathQA ``query``/``response`` records; the gold is after the last marker."""

    def item(record: Any, where: str, index: int) -> Item:
        query = _field(record, "query", path, where)
        response = _field(record, "response", path, where)
        reference = math_answers.after_marker(response)
        if reference is not None:
            reference = reference.strip()
            while reference.endswith("."):
                reference = reference[:-1].rstrip()
        if not reference:
            raise CkptselError(
                f"{path}: {where}: field 'response' has no answer after 'The answer is:'"
            )
        item_id = _file_id(record, path, where, "item_id", "id") or f"{task.name}-{index}"
        group = _field(record, "original_question", path, where, required=False) or item_id
        subtask = _field(record, "type", path, where, required=False) or task.subtask
        return Item(item_id, query, reference, response, group, subtask)

    return _parse_file(path, item)


def load_math(path: Path, task: Task) -> list[Item]:
    """MATH / MATH-500 ``problem``/``solution``/``answer`` records."""

    def item(record: Any, where: str, index: int) -> Item:
        problem = _field(record, "problem", path, where)
        solution = _field(record, "solution", path, where)
        answer = _field(record, "answer", path, where, required=False)
        if answer is None:
            answer = math_answers.last_boxed(solution)
            if answer is None:
                raise CkptselError(
                    f"{path}: {where}: missing required field 'answer' "
                    "(and the solution has no \\boxed{} answer)"
                )
        if not answer.strip():
            raise CkptselError(f"{path}: {where}: field 'answer' is empty")
        item_id = (
            _file_id(record, path, where, "unique_id", "item_id", "id") or f"{task.name}-{index}"
        )
        subject = _field(record, "subject", path, where, required=False) or task.subtask
        return Item(item_id, problem, answer.strip(), solution, item_id, subject)

    return _parse_file(path, item)


def _commonsense_name(name: str) -> str | None:
    """Canonical commonsense task name of a folder/task name (case-insensitive)."""
    lowered = name.lower()
    for known in COMMONSENSE_TASKS:
        if known.lower() == lowered:
            return known
    return None


def _commonsense_test_file(folder: Path) -> Path:
    """``test.json`` of a task folder, else its single ``test*.json`` (hellaswag's subset)."""
    exact = folder / "test.json"
    if exact.is_file():
        return exact
    candidates = sorted(p for p in folder.glob("test*.json") if p.is_file())
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise CkptselError(f"{folder}: no test.json (or test*.json) in this task folder")
    names = ", ".join(p.name for p in candidates)
    raise CkptselError(f"{folder}: several test files ({names}); pass the file itself")


def _load_commonsense_file(path: Path, subtask: str) -> list[Item]:
    label = commonsense_answers.label_regex(subtask)
    prefix = subtask or "commonsense"

    def item(record: Any, where: str, index: int) -> Item:
        instruction = _field(record, "instruction", path, where)
        extra = _field(record, "input", path, where, required=False)
        if extra and extra.strip():
            instruction = f"{instruction}\n\n{extra}"
        output = _field(record, "output", path, where)
        answer = commonsense_answers.normalize_reference(_field(record, "answer", path, where))
        if not label.fullmatch(answer):
            allowed = (
                commonsense_answers.LABEL_PATTERNS.get(subtask.lower())
                or commonsense_answers.ANY_LABEL
            )
            raise CkptselError(
                f"{path}: {where}: field 'answer' {answer!r} is not a label of "
                f"{subtask or 'commonsense'} ({allowed})"
            )
        item_id = _file_id(record, path, where, "item_id", "id") or f"{prefix}-{index}"
        return Item(item_id, instruction, answer, output, item_id, subtask)

    return _parse_file(path, item)


def load_commonsense(path: Path, task: Task) -> list[Item]:
    """LLM-Adapters commonsense: one file, one task folder, or the folder of all tasks."""
    if path.is_file():
        subtask = task.subtask or _commonsense_name(path.parent.name) or ""
        return _load_commonsense_file(path, subtask)
    if task.subtask:  # one task: its folder inside a commonsense root, or the folder itself
        inside = [p for p in path.iterdir() if p.is_dir() and _commonsense_name(p.name)]
        folder = next((p for p in inside if _commonsense_name(p.name) == task.subtask), None)
        if folder is None and _commonsense_name(path.name) == task.subtask:
            folder = path
        if folder is None:
            raise CkptselError(
                f"{path}: no {task.subtask}/ folder (expected {task.subtask}/test.json)"
            )
        return _load_commonsense_file(_commonsense_test_file(folder), task.subtask)
    own = _commonsense_name(path.name)
    folders = {
        _commonsense_name(p.name): p
        for p in path.iterdir()
        if p.is_dir() and _commonsense_name(p.name)
    }
    if not folders and own:
        folders = {own: path}
    if not folders:
        raise CkptselError(
            f"{path}: no commonsense task folders (expected <task>/test.json for any of "
            f"{', '.join(COMMONSENSE_TASKS)})"
        )
    items: list[Item] = []
    for name in COMMONSENSE_TASKS:
        if name in folders:
            items.extend(_load_commonsense_file(_commonsense_test_file(folders[name]), name))
    seen: set[str] = set()
    for item in items:  # ids from different files must not collide either
        if item.item_id in seen:
            raise CkptselError(f"{path}: duplicate item id {item.item_id!r} across task files")
        seen.add(item.item_id)
    return items


def _register_builtin() -> None:
    register_task(
        "gsm8k", "gsm8k", load_gsm8k, description="GSM8K jsonl (question, answer '#### N')"
    )
    register_task(
        "metamath",
        "gsm8k",
        load_metamath,
        description="MetaMathQA (query, response, type, original_question)",
        aliases=("metamathqa",),
    )
    register_task(
        "math",
        "math",
        load_math,
        description="MATH / MATH-500 (problem, solution, answer, subject, level, unique_id)",
        aliases=("math500", "math-500"),
    )
    register_task(
        "commonsense",
        "commonsense",
        load_commonsense,
        description="LLM-Adapters commonsense json, one task file or a folder of 8 tasks",
    )
    aliases = {
        "ARC-Challenge": ("arc_challenge",),
        "ARC-Easy": ("arc_easy",),
        "social_i_qa": ("siqa", "social_iqa"),
    }
    for name in COMMONSENSE_TASKS:
        register_task(
            name,
            "commonsense",
            load_commonsense,
            description=f"LLM-Adapters {name} (commonsense subtask)",
            subtask=name,
            aliases=aliases.get(name, ()),
        )


_register_builtin()
