"""MkDocs hook: the reference pages' generated parts, built from the code at every build.

A page asks for a part with a marker line ``<!-- generated: NAME -->``; NAME is ``cli`` (the
Typer app's commands and options, through Typer's own Markdown generator), ``json-output``
(``ckptsel.cli.output.JSON_SCHEMAS``: what each command's ``--json`` prints), ``study-keys``
(``ckptsel.study.spec.SCHEMA``), ``records-schema`` (``ckptsel.records.schema``), ``tasks``
(every task's item schema and answer rule, ``ckptsel.data.TASKS``) or ``task-file`` (a task
file's keys and the named answer rules). Nothing in
these parts is written by hand, so they cannot drift from the code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:  # a checkout that was not pip-installed
    sys.path.insert(0, str(SRC))

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _escape_html(text: str) -> str:
    """``<step>`` outside code spans and fences would be read as an HTML tag: escape it."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            parts = line.split("`")
            line = "`".join(
                p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;")
                for i, p in enumerate(parts)
            )
        out.append(line)
    return "\n".join(out)


def cli() -> str:
    import typer
    from typer.cli import get_docs_for_click

    from ckptsel.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="ckptsel")
    text = get_docs_for_click(obj=command, ctx=ctx, name="ckptsel", title="ckptsel")
    text = text.split("\n", 1)[1]  # the page has its own title
    text = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.MULTILINE)
    return _escape_html(text.replace("\\[", "["))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def study_keys() -> str:
    from ckptsel.study.spec import SCHEMA

    rows = ["| table | key | type | meaning |", "|---|---|---|---|"]
    for table, keys in SCHEMA.items():
        for i, (key, (types, meaning)) in enumerate(keys.items()):
            kind = " or ".join(t.__name__ for t in types)
            rows.append(
                f"| {f'`[{table}]`' if i == 0 else ''} | `{key}` | {kind} | {_cell(meaning)} |"
            )
    return "\n".join(rows)


def records_schema() -> str:
    from ckptsel.records import schema as s

    def table(columns: dict[str, str], key: tuple[str, ...], optional: dict | None = None) -> str:
        rows = ["| column | dtype | key |", "|---|---|---|"]
        for name, dtype in {**columns, **(optional or {})}.items():
            mark = "key" if name in key else ("optional" if name in (optional or {}) else "")
            rows.append(f"| `{name}` | {dtype} | {mark} |")
        return "\n".join(rows)

    return "\n\n".join([
        f"**`{s.GENERATIONS_FILE}`** (and `generations` units), one row per "
        f"({', '.join(s.GENERATION_KEY)}):",
        table(s.GENERATION_COLUMNS, s.GENERATION_KEY, s.GENERATION_OPTIONAL),
        f"**`{s.NLL_FILE}`** (and `nll` units), one row per ({', '.join(s.NLL_KEY)}); "
        f"`window` is {s.MATCHED_WINDOW} for the matched NLL and {s.COMPLETE_WINDOW} for the "
        "complete-response control:",
        table(s.NLL_COLUMNS, s.NLL_KEY),
        "**`texts` units** (the generated texts, kept for re-scoring; analysis never reads them):",
        table(s.TEXT_COLUMNS, s.GENERATION_KEY),
        f"Splits: {', '.join(f'`{x}`' for x in s.SPLITS)}. Row order of every file: "
        f"{', '.join(f'`{x}`' for x in s.RECORDS_ORDER)}. Optional `{s.FINAL_STEPS_FILE}`: "
        "the expected final step of each trajectory.",
    ])  # fmt: skip


def json_output() -> str:
    from ckptsel.cli.output import JSON_SCHEMAS

    parts = []
    for command, keys in JSON_SCHEMAS.items():
        rows = [f"## `ckptsel {command} --json`", "", "| key | holds |", "|---|---|"]
        rows += [f"| `{key}` | {_cell(holds)} |" for key, holds in keys.items()]
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def tasks() -> str:
    """Every registered task: its item schema (which record field is which role) and its
    answer rule, from ``ckptsel.data.TASKS``."""
    from ckptsel.data import TASKS

    out = []
    for task in TASKS.values():
        aliases = f" (aliases: {', '.join(f'`{a}`' for a in task.aliases)})" if task.aliases else ""
        rows = ["| role | field(s) of an item record | how / default |", "|---|---|---|"]
        for role, names, note in task.fields.rows(task.name) if task.fields else []:
            parts = re.split(r"( \+ | \| )", names) if names else []
            words = {" + ": " + ", " | ": " or "}
            shown = "".join(words.get(p) or f"`{p}`" for p in parts) or "—"
            rows.append(f"| {role} | {shown} | {_cell(note)} |")
        rule = "<br>".join(_cell(line) for line in task.rule.describe())
        out.append(
            f"### `{task.name}`{aliases}\n\n{_cell(task.description)}\n\n"
            + "\n".join(rows) + f"\n\n**Answer rule:** {rule}"
        )
    return "\n\n".join(out)


def task_file() -> str:
    """The keys of a task file and the named extraction and comparison rules, from
    ``ckptsel.data.TASK_FILE_KEYS``, ``EXTRACT_RULES`` and ``COMPARE_RULES``."""
    from ckptsel.data import COMPARE_RULES, EXTRACT_RULES, TASK_FILE_KEYS

    rows = ["| table | key | meaning |", "|---|---|---|"]
    for table, keys in TASK_FILE_KEYS.items():
        for i, (key, meaning) in enumerate(keys.items()):
            where = (f"`[{table}]`" if table else "top level") if i == 0 else ""
            rows.append(f"| {where} | `{key}` | {_cell(meaning)} |")
    rules = ["| `extract` rule | the answer is |", "|---|---|"]
    rules += [f"| `{k}` | {_cell(v)} |" for k, v in EXTRACT_RULES.items()]
    compares = ["| `compare` rule | correct when |", "|---|---|"]
    compares += [f"| `{k}` | {_cell(v)} |" for k, v in COMPARE_RULES.items()]
    return "\n\n".join(["\n".join(rows), "\n".join(rules), "\n".join(compares)])


PARTS = {
    "cli": cli,
    "study-keys": study_keys,
    "records-schema": records_schema,
    "tasks": tasks,
    "task-file": task_file,
    "json-output": json_output,
}


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: PARTS[m.group(1)](), markdown)
