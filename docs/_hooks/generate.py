"""The reference pages' generated parts, written into the pages by ``python scripts/gen_docs.py``
and checked at every docs build by this file as an MkDocs hook.

A generated part sits between two marker lines, ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->``; NAME is ``cli`` (the Typer app's commands and options,
through Typer's own Markdown generator), ``json-output`` (``ckptsel.cli.output.JSON_SCHEMAS``:
what each command's ``--json`` prints), ``study-keys`` (``ckptsel.study.spec.SCHEMA``),
``records-schema`` (``ckptsel.records.schema``), ``tasks`` (every task's item schema and answer
rule, ``ckptsel.data.TASKS``) or ``task-file`` (a task file's keys and the named answer rules).
Nothing between the markers is written by hand: ``scripts/gen_docs.py`` writes it from the code
(:func:`regenerate`), so a reader of the repository sees the reference without building the
site; the hook renders every page from the same generator and warns (an error under ``mkdocs
build --strict``) when a page's committed part is not what the code generates, so the built site
equals the tree. Only ckptsel and its core dependencies are imported (no MkDocs, no [docs]
extra), and nothing depends on the terminal: Typer's Markdown has no width and no colour.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:  # a checkout that was not pip-installed
    sys.path.insert(0, str(SRC))

START = re.compile(r"^<!-- generated: ([a-z-]+) -->$")
END = re.compile(r"^<!-- end generated: ([a-z-]+) -->$")
MARKERISH = re.compile(r"^\s*<!--\s*(end\s+)?generated\b")  # a marker line, well formed or not
COMMAND = "python scripts/gen_docs.py"


def _escape_html(text: str) -> str:
    """``<step>`` outside code spans and fences would be read as an HTML tag: escape it."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            parts = line.split("`")
            line = "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))
        out.append(line)
    return "\n".join(out)


# what Typer, Click and Rich read from the terminal, pinned while the CLI reference is made
# (Typer's Markdown does not read them today; pinned so that a future version cannot make the
# committed page depend on the terminal that wrote it)
TERMINAL = {
    "COLUMNS": "100",
    "LINES": "50",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "FORCE_COLOR": None,
    "TTY_COMPATIBLE": None,
    "TTY_INTERACTIVE": None,
}


def _set_environment(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def _plain_terminal():
    saved = {key: os.environ.get(key) for key in TERMINAL}
    try:
        _set_environment(TERMINAL)
        yield
    finally:
        _set_environment(saved)


def cli() -> str:
    import typer
    from typer.cli import get_docs_for_click

    from ckptsel.cli import app

    with _plain_terminal():
        command = typer.main.get_command(app)
        ctx = typer.Context(command, info_name="ckptsel", color=False, terminal_width=100)
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
            rows.append(f"| {f'`[{table}]`' if i == 0 else ''} | `{key}` | {kind} | {_cell(meaning)} |")
    return "\n".join(rows)


def records_schema() -> str:
    from ckptsel.records import schema as s

    def table(columns: dict[str, str], key: tuple[str, ...], optional: dict | None = None) -> str:
        rows = ["| column | dtype | key |", "|---|---|---|"]
        for name, dtype in {**columns, **(optional or {})}.items():
            mark = "key" if name in key else ("optional" if name in (optional or {}) else "")
            rows.append(f"| `{name}` | {dtype} | {mark} |")
        return "\n".join(rows)

    return "\n\n".join(
        [
            f"**`{s.GENERATIONS_FILE}`** (and `generations` units), one row per ({', '.join(s.GENERATION_KEY)}):",
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
        ]
    )


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
    answer rule, from ``ckptsel.data.tasks.TASKS``."""
    from ckptsel.data.tasks import TASKS

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
        out.append(f"### `{task.name}`{aliases}\n\n{_cell(task.description)}\n\n" + "\n".join(rows) + f"\n\n**Answer rule:** {rule}")
    return "\n\n".join(out)


def task_file() -> str:
    """The keys of a task file and the named extraction and comparison rules, from
    ``ckptsel.data.taskdef.TASK_FILE_KEYS``, ``EXTRACT_RULES`` and ``COMPARE_RULES``."""
    from ckptsel.data.answers.rules import COMPARE_RULES, EXTRACT_RULES
    from ckptsel.data.taskdef import TASK_FILE_KEYS

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


class MarkerError(ValueError):
    """A page's markers that cannot be read: one line naming the page and the line."""


def parts(text: str, where: str) -> list[tuple[str, int, int]]:
    """The generated parts of a page, ``(NAME, start line, end line)`` (0-based indexes of the
    two marker lines), checked: every start has its end, no part inside another, known names,
    no marker line misspelt outside a part."""
    found, open_ = [], None
    for i, line in enumerate(text.split("\n")):
        start, end = START.match(line), END.match(line)
        at = f"{where}, line {i + 1}"
        if start:
            if open_:
                raise MarkerError(
                    f"{at}: a generated part starts inside '{open_[0]}' (line "
                    f"{open_[1] + 1}), whose <!-- end generated: {open_[0]} --> is missing"
                )
            if start[1] not in PARTS:
                raise MarkerError(f"{at}: no generated part '{start[1]}' (there are: {', '.join(PARTS)})")
            open_ = (start[1], i)
        elif end:
            if not open_ or end[1] != open_[0]:
                opened = f"'{open_[0]}' is open" if open_ else "no part is open"
                raise MarkerError(f"{at}: <!-- end generated: {end[1]} --> where {opened}")
            found.append((open_[0], open_[1], i))
            open_ = None
        elif open_ is None and MARKERISH.match(line):
            raise MarkerError(f"{at}: not a marker line: write <!-- generated: NAME --> or <!-- end generated: NAME --> exactly")
    if open_:
        raise MarkerError(
            f"{where}, line {open_[1] + 1}: <!-- generated: {open_[0]} --> has no <!-- end generated: {open_[0]} --> after it"
        )
    return found


def generate(name: str, cache: dict[str, str] | None = None) -> str:
    """The Markdown of part ``name``, from the code (``cache`` keeps each part made once)."""
    cache = {} if cache is None else cache
    if name not in cache:
        text = PARTS[name]().strip("\n")
        if any(START.match(line) or END.match(line) for line in text.split("\n")):
            raise MarkerError(f"generated part '{name}' holds a marker line")
        cache[name] = text
    return cache[name]


def fill(text: str, where: str, cache: dict[str, str] | None = None, markers: bool = True) -> str:
    """``text`` with every generated part as the code generates it now, between its markers (a
    blank line either side), or without the markers (``markers=False``: what the site shows)."""
    lines = text.split("\n")
    for name, start, end in reversed(parts(text, where)):
        body = generate(name, cache).split("\n")
        lines[start : end + 1] = [lines[start], "", *body, "", lines[end]] if markers else body
    return "\n".join(lines)


def _shown(page: Path, docs: Path) -> str:
    return str(page.relative_to(docs.parent)) if page.is_relative_to(docs.parent) else str(page)


def marked_pages(docs: Path) -> list[Path]:
    """The pages under ``docs`` with a generated part (a marker line, well formed or not)."""
    if not docs.is_dir():
        raise MarkerError(f"{docs}: {'not a folder' if docs.exists() else 'no such folder'}")
    out = []
    for page in sorted(docs.rglob("*.md")):
        if not page.is_file():  # a folder named *.md, a FIFO (reading it would wait forever)
            raise MarkerError(f"{_shown(page, docs)}: not a regular file")
        try:
            text = page.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise MarkerError(f"{_shown(page, docs)}: cannot be read as UTF-8 text ({type(exc).__name__})") from None
        if any(MARKERISH.match(line) for line in text.split("\n")):
            out.append(page)
    if not out:
        raise MarkerError(f"{docs}: no page has a <!-- generated: NAME --> part")
    return out


def regenerate(docs: Path) -> dict[Path, tuple[str, str]]:
    """Every page of ``docs`` that has generated parts: ``(text now, text with its parts as the
    code generates them)``; every page is checked before any is returned (MarkerError)."""
    cache: dict[str, str] = {}
    out = {}
    for page in marked_pages(docs):
        text = page.read_text(encoding="utf-8")
        out[page] = (text, fill(text, _shown(page, docs), cache))
    return out


LOG = logging.getLogger("mkdocs.hooks.generate")


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The page as the site shows it: its generated parts from the code, without the markers; a
    warning (an error under ``--strict``) when the committed parts are not those."""
    where = f"docs/{page.file.src_path}" if page is not None else "page"
    cache: dict[str, str] = {}
    try:
        current = fill(markdown, where, cache)
    except MarkerError as exc:
        from mkdocs.exceptions import PluginError  # only ever run by MkDocs

        raise PluginError(str(exc)) from None
    if current != markdown:
        LOG.warning(f"{where}: its generated reference is not what the code generates: run {COMMAND}")
    return fill(markdown, where, cache, markers=False)
