"""Tasks: the one place that knows each dataset's file format (SPEC §9).

Every loader turns a file into :class:`~ckptsel.data.taskdef.Item` objects with the same five
meanings, so nothing
downstream (split, training, measurement) has to know which dataset it is handling:

* ``instruction`` goes into the Alpaca no-input prompt (:func:`ckptsel.data.prompts.format_prompt`);
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
``gsm8k-raw``
    the same records, items and answer rule; ``response`` = the answer as written (calculator
    notes and ``#### N`` kept), for a run fine-tuned on raw GSM8K answers. Its own name, so
    its measurements never mix with ``gsm8k``'s.
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

New tasks: a task file, ``--task PATH.toml`` (no Python: which fields are what and the answer
rule; :mod:`ckptsel.data.taskdef`), read by :func:`get_task` like a name; or
``register_task(name, family, loader)`` in Python. The built-in tasks are definitions of the
same kind (:class:`~ckptsel.data.taskdef.Task`, with their item schema and answer rule); the
loaders above are public
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

import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location
from ckptsel._util.nodecache import local_copy
from ckptsel.data.answers import FAMILIES
from ckptsel.data.answers import commonsense as commonsense_answers
from ckptsel.data.answers import gsm8k as gsm8k_answers
from ckptsel.data.answers import latex as math_answers
from ckptsel.data.answers.rules import scorer_digest
from ckptsel.data.taskdef import Fields, Item, Loader, Task, field_value, file_id, parse_file, read_task_file
from ckptsel.errors import CkptselError

COMMONSENSE_TASKS = ("boolq", "piqa", "social_i_qa", "hellaswag", "winogrande", "ARC-Challenge", "ARC-Easy", "openbookqa")

# fields that hold the question of a raw record, in the formats the loaders read (first found)
QUESTION_FIELDS = ("query", "question", "problem", "instruction")


TASKS: dict[str, Task] = {}
_LOOKUP: dict[str, Task] = {}
# (a task file's path, its content) -> (its task, its scorer file's hash)
_FILES: dict[tuple[str, bytes], tuple[Task, str]] = {}
_STATS: dict[str, tuple[tuple[int, ...], int, Task]] = {}  # a --task value -> (stat, read at, task)
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within one mtime tick


def register_task(
    name: str,
    family: str,
    loader: Loader,
    *,
    description: str = "",
    subtask: str = "",
    aliases: tuple[str, ...] = (),
    replace: bool = False,
    fields: Fields | None = None,
    example: Mapping[str, Any] | None = None,
) -> Task:
    """Add a task so ``load_items``/``--task`` accept it. ``loader(path, task)`` returns items;
    ``family`` picks the answer rules (``gsm8k``, ``math`` or ``commonsense``); ``fields`` is
    its item schema and ``example`` an example record (``ckptsel tasks show``)."""
    if family not in FAMILIES:
        raise CkptselError(f"task {name!r}: unknown answer family {family!r} (known: {', '.join(FAMILIES)})")
    task = Task(name, family, loader, description, subtask, tuple(aliases), fields=fields, example=example)
    keys = [name, *aliases]
    for key in keys:
        existing = _LOOKUP.get(key.lower())
        if existing is not None and not replace:
            raise CkptselError(f"task name {key!r} is already registered (as {existing.name!r}); pass replace=True to override it")
    previous = TASKS.get(name)
    if previous is not None:  # replacing: drop the old task's aliases too
        for key in [k for k, v in _LOOKUP.items() if v is previous]:
            del _LOOKUP[key]
    TASKS[name] = task
    for key in keys:
        _LOOKUP[key.lower()] = task
    return task


def is_task_file(task: str) -> bool:
    """Whether a ``--task`` value names a task file (a path ending in ``.toml``)."""
    return isinstance(task, str) and task.strip().lower().endswith(".toml")


def _stamp(path: Path | None) -> tuple[int, ...]:
    """What a file's stat says of its content (() for no file or none there)."""
    if path is None:
        return ()
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _code_hash(task: Task) -> str:
    """The hash of a task file's scorer file now ("" without one, "-" when it is gone)."""
    code = task.rule.scorer_file
    try:
        return "" if code is None else scorer_digest(code)
    except OSError:
        return "-"


def _task_file(ref: str) -> Task:
    """The task a task file defines, parsed again only when its content (or its scorer file's)
    changed. The files are read again unless their stat is unchanged since a read made when
    they were already older than a clock tick (as git's racy-clean rule: a same-size edit
    within one mtime tick is never missed)."""
    if "://" in ref:
        raise CkptselError(f"{ref}: a task file must be a local path")
    path = Path(ref.strip()).expanduser()
    try:
        stamp = _stamp(path)
        if not stamp:
            raise OSError(ref)
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would hang the read
            raise CkptselError(f"{ref}: not a regular file (a task file is a TOML file)")
        seen = _STATS.get(ref)
        if seen is not None:
            full = stamp + _stamp(seen[2].rule.scorer_file)
            newest = max(full[2::4])
            if seen[0] == full and seen[1] - newest > _RACY_NS:
                return seen[2]
        read_ns = time.time_ns()
        key = (str(path.resolve()), path.read_bytes())
    except OSError:
        raise CkptselError(f"{ref}: task file not found") from None
    cached = _FILES.get(key)
    task = cached[0] if cached and cached[1] == _code_hash(cached[0]) else _parsed(path, key)
    _STATS[ref] = (stamp + _stamp(task.rule.scorer_file), read_ns, task)
    return task


def _parsed(path: Path, key: tuple[str, bytes]) -> Task:
    task = read_task_file(path)
    if task.name.lower() in _LOOKUP:
        raise CkptselError(f"{path}: name {task.name!r} is a built-in task's; give the task file another name")
    _FILES[key] = (task, _code_hash(task))
    return task


def get_task(task: str) -> Task:
    """The registered task of a name or alias (case-insensitive), or the task of a task file
    (``PATH.toml``, :func:`ckptsel.data.taskdef.read_task_file`); unknown -> CkptselError."""
    found = _LOOKUP.get(task.strip().lower())
    if found is not None:
        return found
    if is_task_file(task):
        return _task_file(task)
    raise CkptselError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)} (or a task file, PATH.toml)")


def task_ref(task: str) -> str:
    """The ``--task`` value as measurements keep it: a task file's absolute path (so another
    process, in another folder, reads the same file), a task name unchanged."""
    return get_task(task).source if is_task_file(task) else task


def task_label(task: str) -> str:
    """The name the records' ``task`` column carries: a task file's ``name``, a task name as
    given (so existing records keep theirs)."""
    return get_task(task).name if is_task_file(task) else task


def task_identity(task: str) -> str:
    """What names a task in measurement fingerprints: a task name as given; a task file's name
    and content hash (an edited task file is measured again, a moved one is not)."""
    return get_task(task).identity if is_task_file(task) else task


def task_family(task: str) -> str:
    """Answer family of a task: ``gsm8k``, ``math`` or ``commonsense`` ("" for a task file)."""
    return get_task(task).family


def load_items(task: str, path: str | Path | Location) -> list[Item]:
    """Items of a data file (or commonsense folder), in file order; a URL is read from this
    node's copy (:func:`ckptsel._util.nodecache.local_copy`)."""
    if isinstance(path, Location) or (isinstance(path, str) and "://" in path):
        path = local_copy(path)
    return get_task(task).load(path)


def example_item(task: str, items: str | Path | None = None, index: int = 0) -> Item | None:
    """An item of the task, read by its own loader: ``items``' item ``index`` when a file is
    given, else the task's example record (None when it has none)."""
    found = get_task(task)
    if items is not None:
        loaded = load_items(task, items)
        if not 0 <= index < len(loaded):
            raise CkptselError(f"{items}: no item {index} (it has {len(loaded)}, from 0)")
        return loaded[index]
    if found.example is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "example.json"
        path.write_text(json.dumps([dict(found.example)]), encoding="utf-8")
        try:
            return found.load(path)[0]
        except CkptselError as err:  # name the task's [example], not the temporary file
            detail = str(err).replace(f"{path}: ", "", 1)
            raise CkptselError(f"{found.source or found.name}: [example] {detail}") from None


# --------------------------------------------------------------------------- loaders

_CALCULATOR_RE = re.compile(r"<<[^<>]*>>")
_GSM8K_FINAL_RE = re.compile(r"\n?[ \t]*####[ \t]*(.*?)\s*$", re.DOTALL)


def gsm8k_response(answer: str) -> str:
    """A GSM8K ``answer`` in MetaMath training form: no ``<<...>>`` calculator annotations,
    and the final ``#### N`` line written ``The answer is: N``."""
    body = _CALCULATOR_RE.sub("", answer)
    return _GSM8K_FINAL_RE.sub(lambda m: f"\nThe answer is: {m.group(1)}", body, count=1)


def load_gsm8k(path: Path, task: Task) -> list[Item]:
    """GSM8K ``question``/``answer`` records (reusable for any task in that format); the
    response is the answer in MetaMath training form (:func:`gsm8k_response`)."""
    return _gsm8k_items(path, task, gsm8k_response)


def load_gsm8k_raw(path: Path, task: Task) -> list[Item]:
    """GSM8K records as :func:`load_gsm8k`, the response the answer as written (calculator
    notes and its ``#### N`` line kept): the NLL of a run trained on the raw format."""
    return _gsm8k_items(path, task, lambda answer: answer)


def _gsm8k_items(path: Path, task: Task, response: Callable[[str], str]) -> list[Item]:

    def item(record: Any, where: str, index: int) -> Item:
        question = field_value(record, "question", path, where)
        answer = field_value(record, "answer", path, where)
        if "####" not in answer:
            raise CkptselError(f"{path}: {where}: field 'answer' has no '#### N' final line")
        reference = gsm8k_answers.reference_span(answer)
        if not gsm8k_answers.is_numeric(gsm8k_answers.normalize_reference(reference)):
            raise CkptselError(f"{path}: {where}: field 'answer': final value {reference!r} is not a number")
        item_id = file_id(record, path, where, "item_id", "id") or f"{task.name}-{index}"
        return Item(item_id, question, reference, response(answer), item_id, task.subtask)

    return parse_file(path, item)


def load_metamath(path: Path, task: Task) -> list[Item]:
    """MetaMathQA ``query``/``response`` records; the gold is after the last marker."""

    def item(record: Any, where: str, index: int) -> Item:
        query = field_value(record, "query", path, where)
        response = field_value(record, "response", path, where)
        reference = math_answers.after_marker(response)
        if reference is not None:
            reference = reference.strip()
            while reference.endswith("."):
                reference = reference[:-1].rstrip()
        if not reference:
            raise CkptselError(f"{path}: {where}: field 'response' has no answer after 'The answer is:'")
        item_id = file_id(record, path, where, "item_id", "id") or f"{task.name}-{index}"
        group = field_value(record, "original_question", path, where, required=False) or item_id
        subtask = field_value(record, "type", path, where, required=False) or task.subtask
        return Item(item_id, query, reference, response, group, subtask)

    return parse_file(path, item)


def load_math(path: Path, task: Task) -> list[Item]:
    """MATH / MATH-500 ``problem``/``solution``/``answer`` records."""

    def item(record: Any, where: str, index: int) -> Item:
        problem = field_value(record, "problem", path, where)
        solution = field_value(record, "solution", path, where)
        answer = field_value(record, "answer", path, where, required=False)
        if answer is None:
            answer = math_answers.last_boxed(solution)
            if answer is None:
                raise CkptselError(f"{path}: {where}: missing required field 'answer' (and the solution has no \\boxed{{}} answer)")
        if not answer.strip():
            raise CkptselError(f"{path}: {where}: field 'answer' is empty")
        item_id = file_id(record, path, where, "unique_id", "item_id", "id") or f"{task.name}-{index}"
        subject = field_value(record, "subject", path, where, required=False) or task.subtask
        return Item(item_id, problem, answer.strip(), solution, item_id, subject)

    return parse_file(path, item)


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
        instruction = field_value(record, "instruction", path, where)
        extra = field_value(record, "input", path, where, required=False)
        if extra and extra.strip():
            instruction = f"{instruction}\n\n{extra}"
        output = field_value(record, "output", path, where)
        answer = commonsense_answers.normalize_reference(field_value(record, "answer", path, where))
        if not label.fullmatch(answer):
            allowed = commonsense_answers.LABEL_PATTERNS.get(subtask.lower()) or commonsense_answers.ANY_LABEL
            raise CkptselError(f"{path}: {where}: field 'answer' {answer!r} is not a label of {subtask or 'commonsense'} ({allowed})")
        item_id = file_id(record, path, where, "item_id", "id") or f"{prefix}-{index}"
        return Item(item_id, instruction, answer, output, item_id, subtask)

    return parse_file(path, item)


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
            raise CkptselError(f"{path}: no {task.subtask}/ folder (expected {task.subtask}/test.json)")
        return _load_commonsense_file(_commonsense_test_file(folder), task.subtask)
    own = _commonsense_name(path.name)
    folders = {_commonsense_name(p.name): p for p in path.iterdir() if p.is_dir() and _commonsense_name(p.name)}
    if not folders and own:
        folders = {own: path}
    if not folders:
        raise CkptselError(f"{path}: no commonsense task folders (expected <task>/test.json for any of {', '.join(COMMONSENSE_TASKS)})")
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


_ID_NOTE = "else <task>-<index> in file order"


def _gsm8k_fields(response: str) -> Fields:
    """GSM8K's item schema, ``response`` saying how the answer is written as the response."""
    return Fields(
        prompt=("question",),
        reference="answer",
        response="answer",
        id=("item_id", "id"),
        notes=(("response", response), ("reference", "N of the answer's final '#### N' line (a number)"), ("id", _ID_NOTE)),
    )


_BUILTIN_FIELDS = {
    "gsm8k": _gsm8k_fields("the answer without <<...>> calculator notes, its '#### N' line written 'The answer is: N'"),
    "gsm8k-raw": _gsm8k_fields("the answer as written: its <<...>> calculator notes and its '#### N' line kept"),
    "metamath": Fields(
        prompt=("query",),
        reference="response",
        response="response",
        id=("item_id", "id"),
        group="original_question",
        stratum="type",
        notes=(("reference", "the text after the response's last 'The answer is:'"), ("id", _ID_NOTE)),
    ),
    "math": Fields(
        prompt=("problem",),
        reference="answer",
        response="solution",
        id=("unique_id", "item_id", "id"),
        stratum="subject",
        notes=(("reference", "else the solution's last \\boxed{...}"), ("id", _ID_NOTE)),
    ),
    "commonsense": Fields(
        prompt=("instruction", "input"),
        reference="answer",
        response="output",
        id=("item_id", "id"),
        notes=(
            ("reference", "a label of the task (true|false, solution1|2, answer1-5, ending1-4, option1|2)"),
            ("id", "else <subtask>-<index> in file order"),
            ("stratum", "the task folder's name (boolq, piqa, ...)"),
        ),
    ),
}
_BUILTIN_EXAMPLES: dict[str, dict[str, Any]] = {
    "gsm8k": {
        "question": "Tom has 3 apples and buys 4 more. How many apples does he have now?",
        "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7",
    },
    "metamath": {
        "query": "Tom has 3 apples and buys 4 more. How many apples does he have now?",
        "response": "He has 3 + 4 = 7 apples.\nThe answer is: 7",
        "type": "GSM_Rephrased",
        "original_question": "Tom has 3 apples and buys 4 more. How many does he have?",
    },
    "math": {
        "problem": "What is $\\frac{1}{2} + \\frac{1}{3}$?",
        "solution": "$\\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6}$, so the answer is $\\boxed{\\frac{5}{6}}$.",
        "answer": "\\frac{5}{6}",
        "subject": "Prealgebra",
        "unique_id": "test/prealgebra/1.json",
    },
}
_COMMONSENSE_EXAMPLES: dict[str, tuple[str, str]] = {  # task -> (instruction, answer)
    "boolq": ("Please answer the following question with true or false, question: is the sun a star?\n\nAnswer format: true/false", "true"),
    "piqa": (
        "Please choose the correct solution to the question: keep bread fresh\n\n"
        "Solution1: seal it in a bag\n\nSolution2: leave it in the sun\n\n"
        "Answer format: solution1/solution2",
        "solution1",
    ),
    "social_i_qa": (
        "Please choose the correct answer to the question: Ann thanked Tom. Why?"
        "\n\nAnswer1: he helped her Answer2: he left Answer3: he slept\n\n"
        "Answer format: answer1/answer2/answer3",
        "answer1",
    ),
    "hellaswag": (
        "Please choose the correct ending to complete the given sentence: He opens "
        "the door and\n\nEnding1: walks in. Ending2: the door eats him. Ending3: "
        "sky. Ending4: blue.\n\nAnswer format: ending1/ending2/ending3/ending4",
        "ending1",
    ),
    "winogrande": (
        "Please choose the correct answer to fill in the blank to complete the given "
        "sentence: The cup fell off the table because _ was tilted.\n\n"
        "Option1: the table Option2: the cup\n\nAnswer format: option1/option2",
        "option1",
    ),
    "ARC-Challenge": (
        "Please choose the correct answer to the question: Which is a gas at room "
        "temperature?\n\nAnswer1: oxygen Answer2: iron Answer3: ice Answer4: "
        "salt\n\nAnswer format: answer1/answer2/answer3/answer4",
        "answer1",
    ),
    "ARC-Easy": (
        "Please choose the correct answer to the question: What do plants need to "
        "grow?\n\nAnswer1: light Answer2: sand Answer3: plastic Answer4: glass\n\n"
        "Answer format: answer1/answer2/answer3/answer4",
        "answer1",
    ),
    "openbookqa": (
        "Please choose the correct answer to the question: A magnet attracts\n\n"
        "Answer1: iron Answer2: wood Answer3: glass Answer4: paper\n\n"
        "Answer format: answer1/answer2/answer3/answer4",
        "answer1",
    ),
}


def _commonsense_example(name: str) -> dict[str, Any]:
    instruction, answer = _COMMONSENSE_EXAMPLES[name]
    return {"instruction": instruction, "input": "", "output": f"the correct answer is {answer}", "answer": answer}


def _register_builtin() -> None:
    # name, family, loader, description, aliases, the example's fields (the commonsense
    # subtasks: their own, below)
    builtin = (
        ("gsm8k", "gsm8k", load_gsm8k, "GSM8K jsonl (question, answer '#### N')", (), "gsm8k"),
        ("gsm8k-raw", "gsm8k", load_gsm8k_raw, "GSM8K as gsm8k, the NLL target the answer as written (<<...>>, '#### N')", (), "gsm8k"),
        ("metamath", "gsm8k", load_metamath, "MetaMathQA (query, response, type, original_question)", ("metamathqa",), "metamath"),
        (
            "math",
            "math",
            load_math,
            "MATH / MATH-500 (problem, solution, answer, subject, level, unique_id)",
            ("math500", "math-500"),
            "math",
        ),
    )
    for name, family, loader, description, aliases, example in builtin:
        fields, shown = _BUILTIN_FIELDS[name], _BUILTIN_EXAMPLES[example]
        register_task(name, family, loader, description=description, aliases=aliases, fields=fields, example=shown)
    register_task(
        "commonsense",
        "commonsense",
        load_commonsense,
        description="LLM-Adapters commonsense json, one task file or a folder of 8 tasks",
        fields=_BUILTIN_FIELDS["commonsense"],
        example=_commonsense_example("boolq"),
    )
    aliases = {"ARC-Challenge": ("arc_challenge",), "ARC-Easy": ("arc_easy",), "social_i_qa": ("siqa", "social_iqa")}
    for name in COMMONSENSE_TASKS:
        register_task(
            name,
            "commonsense",
            load_commonsense,
            description=f"LLM-Adapters {name} (commonsense subtask)",
            subtask=name,
            aliases=aliases.get(name, ()),
            fields=_BUILTIN_FIELDS["commonsense"],
            example=_commonsense_example(name),
        )


_register_builtin()
