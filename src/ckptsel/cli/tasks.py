"""``ckptsel tasks``: the tasks ``--task`` accepts; ``ckptsel tasks show NAME|PATH``: one task's
item schema, an example item's prompt as the model sees it, and its answer rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ckptsel.cli import options
from ckptsel.data import CHAT, TASKS, Item, Task, example_item, get_task, prompt_format
from ckptsel.errors import CkptselError


def tasks(ctx: typer.Context) -> None:
    """List the tasks --task accepts (built-in names; a task file PATH.toml is read the same
    way): name, aliases, answer rule, description. 'ckptsel tasks show NAME|PATH' shows one."""
    if ctx.invoked_subcommand is not None:
        return
    rows = [
        (task.name, ", ".join(task.aliases), f"{task.rule.extract} / {task.rule.compare}",
         task.description)
        for task in TASKS.values()
    ]  # fmt: skip
    table = [("task", "aliases", "answer (extract / compare)", "description"), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for row in table:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
    typer.echo(
        "\na task file: --task PATH.toml ([fields] and [answer]; see 'Tasks' in the docs); "
        "ckptsel tasks show NAME|PATH shows one"
    )


def render_prompt(item: Item, fmt: dict[str, Any]) -> tuple[str, str]:
    """``(format, text)``: the item's prompt exactly as the model is given it, in the prompt
    format of ``fmt`` (``--prompt-format``, ``--system-prompt``, ``--chat-template-args``,
    ``--tokenizer``: the chat template's owner). The one place where ``tasks show`` applies a
    prompt format."""
    form = prompt_format(fmt["prompt_format"], fmt["system_prompt"], fmt["chat_template_args"])
    tokenizer = None
    if fmt["tokenizer"]:
        from ckptsel.train import load_tokenizer  # only when a tokenizer is asked for

        tokenizer = load_tokenizer(fmt["tokenizer"])
    if form.kind == CHAT:
        if tokenizer is None:
            raise CkptselError("--prompt-format chat needs --tokenizer DIR (its chat template)")
        form = form.with_tokenizer(tokenizer, f"--tokenizer {fmt['tokenizer']}")
    return form.describe(), form.render(item.instruction, item, tokenizer)


PROMPT_FORMAT = options.OptionGroup(
    **options.PROMPT,
    tokenizer=(str, typer.Option(
        None, "--tokenizer", help="Tokenizer folder (a checkpoint) whose chat template renders it."
    )),
)  # fmt: skip


@options.with_groups
def show(
    task: str = typer.Argument(..., help="A task name (ckptsel tasks) or a task file PATH.toml."),
    items: Path = typer.Option(
        None, "--items", help="Items file to take the example from (default: the task's example)."
    ),
    index: int = typer.Option(0, "--index", help="Which item of --items (0: the first)."),
    fmt: dict[str, Any] = PROMPT_FORMAT,
) -> None:
    """Show a task: its fields (which field of an item record is the prompt, the response, the
    reference, the id, the group, the stratum), the prompt of an example item as the model
    sees it, and how its answer is extracted and compared."""
    found = get_task(task)
    _header(found)
    typer.echo("\nfields (item schema):")
    for role, names, note in found.fields.rows(found.name) if found.fields else []:
        typer.echo(f"  {role:<11}{names or '-'}" + (f"  ({note})" if note else ""))
    typer.echo("\nanswer:")
    for line in found.rule.describe():
        typer.echo(f"  {line}")
    item = example_item(task, items, index)
    if item is None:
        typer.echo("\nno example item: pass --items FILE to render one")
        return
    _example(found, item, f"{items}, item {index}" if items else "the task's example", fmt)


def _header(task: Task) -> None:
    aliases = f" (aliases: {', '.join(task.aliases)})" if task.aliases else ""
    typer.echo(f"task {task.name}{aliases}")
    if task.source:
        typer.echo(f"  task file {task.source} (content hash {task.digest})")
    else:
        typer.echo(f"  built-in, answer family {task.family}")
    if task.description:
        typer.echo(f"  {task.description}")


def _example(task: Task, item: Item, where: str, fmt: dict[str, Any]) -> None:
    rule = task.rule
    typer.echo(f"\nexample item ({where}):")
    typer.echo(f"  id {item.item_id!r}, group {item.group!r}, stratum {item.subtask!r}")
    gold = rule.normalize_reference(item.reference)
    typer.echo(f"  reference {item.reference!r} (normal form {gold!r})")
    name, text = render_prompt(item, fmt)
    typer.echo(f"\nprompt, as the model sees it ({name}):\n{text}")
    if item.response is None:
        typer.echo("\nresponse: none (the task has no response field: no SFT target, no NLL)")
        return
    typer.echo(f"\nresponse (the SFT and NLL target):\n{item.response}")
    subtask = item.subtask or task.subtask
    answer = rule.answer(item.response, subtask)
    verdict = "correct" if rule.is_correct(item.response, item.reference, subtask) else "wrong"
    typer.echo(f"\nthe response, scored as a generation: answer {answer!r}, {verdict}")
