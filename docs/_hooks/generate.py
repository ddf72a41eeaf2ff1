"""MkDocs hook: the reference pages' generated parts, built from the code at every build.

A page asks for a part with a marker line ``<!-- generated: NAME -->``; NAME is ``cli`` (the
Typer app's commands and options, through Typer's own Markdown generator), ``json-output``
(``ckptsel.cli.output.JSON_SCHEMAS``: what each command's ``--json`` prints), ``study-keys``
(``ckptsel.study.spec.SCHEMA``) or ``records-schema`` (``ckptsel.records.schema``). Nothing in
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


PARTS = {
    "cli": cli, "study-keys": study_keys, "records-schema": records_schema,
    "json-output": json_output,
}  # fmt: skip


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: PARTS[m.group(1)](), markdown)
