"""``ckptsel tasks``: the tasks ``--task`` accepts; ``ckptsel tasks show NAME|PATH``: one task's
item schema, an example item's prompt as the model sees it, and its answer rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ckptsel.cli import options
from ckptsel.data.prompts import CHAT, PromptFormat, prompt_format
from ckptsel.data.taskdef import Item, Task
from ckptsel.data.tasks import TASKS, example_item, get_task
from ckptsel.errors import CkptselError


def tasks(ctx: typer.Context) -> None:
    """List the tasks --task accepts (built-in names; a task file PATH.toml is read the same
    way): name, aliases, answer rule, description. 'ckptsel tasks show NAME|PATH' shows one."""
    if ctx.invoked_subcommand is not None:
        return
    rows = [(task.name, ", ".join(task.aliases), f"{task.rule.extract} / {task.rule.compare}", task.description) for task in TASKS.values()]
    table = [("task", "aliases", "answer (extract / compare)", "description"), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for row in table:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
    typer.echo("\na task file: --task PATH.toml ([fields] and [answer]; see 'Tasks' in the docs); ckptsel tasks show NAME|PATH shows one")


def render_prompt(item: Item, fmt: dict[str, Any]) -> tuple[str, str, list[str]]:
    """``(format, text, token lines)``: the item's prompt exactly as the model is given it, in
    the prompt format of ``fmt`` (``--prompt-format``, ``--system-prompt``,
    ``--chat-template-args``, ``--bos``, ``--tokenizer``: the chat template's owner and the
    tokens'), and what its token ids say (:func:`token_lines`). The one place where ``tasks
    show`` applies a prompt format."""
    form = prompt_format(fmt["prompt_format"], fmt["system_prompt"], fmt["chat_template_args"])
    form = form.with_bos(fmt["bos"], "--bos")
    tokenizer = None
    if fmt["tokenizer"]:
        from ckptsel.train.models import load_tokenizer  # only when a tokenizer is asked for

        tokenizer = load_tokenizer(fmt["tokenizer"])
    if form.kind == CHAT:
        if tokenizer is None:
            raise CkptselError("--prompt-format chat needs --tokenizer DIR (its chat template)")
        form = form.with_tokenizer(tokenizer, f"--tokenizer {fmt['tokenizer']}")
    text = form.render(item.instruction, item, tokenizer)
    return form.describe(), text, token_lines(form, text, tokenizer, fmt["prompt_format"])


HEAD_IDS = 8  # token ids shown at the head of a prompt


def token_lines(form: PromptFormat, text: str, tokenizer: Any, spec: str | None) -> list[str]:
    """What ``tasks show`` says of a rendered prompt besides its text: a final newline (shown
    as ⏎), a template file's own final newline dropped, and, with a tokenizer, the head of
    the token ids the model is fed, the BOS count and the special tokens by name."""
    lines = ["(the prompt ends with a newline, shown as ⏎)"] if text.endswith("\n") else []
    if form.kind == "template" and spec and _ends_in_newline(Path(spec)):
        lines.append(f"(the final newline of {spec}, as editors save a file, is dropped; end the file with a blank line to keep one)")
    if tokenizer is None:
        lines.append(
            "token ids: pass --tokenizer DIR to see them (with the BOS "
            + ("the tokenizer adds)" if form.adds_special_tokens else "the template writes)")
        )
        return lines
    ids = form.encode_prompts(tokenizer, [text])[0]
    head = " ".join(map(str, ids[:HEAD_IDS])) + (" …" if len(ids) > HEAD_IDS else "")
    lines.append(f"token ids ({len(ids)}, first {min(len(ids), HEAD_IDS)}): {head}")
    bos_id = getattr(tokenizer, "bos_token_id", None)
    how = {
        "template": "the text as the template renders it",
        "tokenizer": "the tokenizer's special tokens added",
        "template+tokenizer": "the template's, then the tokenizer's special tokens added",
    }[form.bos_source]
    if bos_id is None:
        lines.append(f"BOS: none (the tokenizer has no BOS token); --bos {form.bos_source}: {how}")
    else:
        n_bos = sum(1 for i in ids if i == bos_id)
        lines.append(f"BOS: {n_bos} ({tokenizer.bos_token!r}); --bos {form.bos_source}: {how}")
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    named = [tokenizer.convert_ids_to_tokens(i) for i in ids if i in special]
    lines.append("special tokens: " + (" ".join(named) if named else "none"))
    note = form.bos_note(tokenizer)
    lines += [f"warning: {note}"] if note else []
    return lines


def _ends_in_newline(path: Path) -> bool:
    try:
        return path.read_bytes().endswith(b"\n")
    except OSError:
        return False


def _shown(text: str) -> str:
    """A prompt as printed: a final newline made visible (⏎)."""
    return text[:-1] + "⏎" if text.endswith("\n") else text


PROMPT_FORMAT = options.OptionGroup(
    **options.PROMPT,
    bos=(
        str,
        typer.Option(
            None,
            "--bos",
            help="Who wrote the run's BOS: template (a chat run's default: "
            "apply_chat_template(tokenize=True), trl), tokenizer (alpaca's and a template "
            "file's default) or template+tokenizer (tokenizer(apply_chat_template(..., "
            "tokenize=False)): two when the template writes one). A run states it in its "
            'prompt_format.json as "bos".',
        ),
    ),
    tokenizer=(
        str,
        typer.Option(
            None, "--tokenizer", help="Tokenizer folder (a checkpoint) whose chat template renders it and whose token ids are shown."
        ),
    ),
)


@options.with_groups
def show(
    task: str = typer.Argument(..., help="A task name (ckptsel tasks) or a task file PATH.toml."),
    items: Path = typer.Option(None, "--items", help="Items file to take the example from (default: the task's example)."),
    index: int = typer.Option(0, "--index", help="Which item of --items (0: the first)."),
    score: bool = typer.Option(
        False,
        "--score",
        help="Judge the example with the task file's scorer: runs its code (without it, a scorer is named, never imported or called).",
    ),
    fmt: dict[str, Any] = PROMPT_FORMAT,
) -> None:
    """Show a task: its fields (which field of an item record is the prompt, the response, the
    reference, the id, the group, the stratum), the prompt of an example item as the model
    sees it, and how its answer is extracted and compared."""
    found = get_task(task)
    item = example_item(task, items, index)
    judged = _judged(found, item, score)  # before anything is printed: a failure is one line
    prompt = render_prompt(item, fmt) if item is not None else None
    _header(found)
    typer.echo("\nfields (item schema):")
    for role, names, note in found.fields.rows(found.name) if found.fields else []:
        typer.echo(f"  {role:<11}{names or '-'}" + (f"  ({note})" if note else ""))
    typer.echo("\nanswer:")
    for line in found.rule.describe():
        typer.echo(f"  {line}")
    if item is None:
        typer.echo("\nno example item: pass --items FILE to render one")
        return
    where = f"{items}, item {index}" if items else "the task's example"
    _example(found, item, where, prompt, judged)


def _header(task: Task) -> None:
    aliases = f" (aliases: {', '.join(task.aliases)})" if task.aliases else ""
    typer.echo(f"task {task.name}{aliases}")
    if task.source:
        typer.echo(f"  task file {task.source} (content hash {task.digest})")
        code = task.rule.runs_code
        typer.echo(f"  runs code: {code} ({task.rule.scorer_file})" if code else "  runs no code")
    else:
        typer.echo(f"  built-in, answer family {task.family}")
    if task.description:
        typer.echo(f"  {task.description}")


def _judged(task: Task, item: Item | None, score: bool) -> str:
    """The example's response scored as a generation, in one line ("" without a response); a
    task file's scorer is run only when ``score`` (``--score``) asks for it."""
    if item is None or item.response is None:
        return ""
    rule, subtask = task.rule, item.subtask or task.subtask
    answer = rule.answer(item.response, subtask)
    if rule.runs_code and not score:
        return (
            f"the response, scored as a generation: answer {answer!r}; not judged: the scorer "
            f"runs code ({rule.runs_code}), pass --score to run it"
        )
    verdict = "correct" if rule.is_correct(item.response, item.reference, subtask) else "wrong"
    return f"the response, scored as a generation: answer {answer!r}, {verdict}"


def _example(task: Task, item: Item, where: str, prompt: tuple[str, str, list[str]], judged: str) -> None:
    rule = task.rule
    typer.echo(f"\nexample item ({where}):")
    typer.echo(f"  id {item.item_id!r}, group {item.group!r}, stratum {item.subtask!r}")
    gold = rule.normalize_reference(item.reference)
    typer.echo(f"  reference {item.reference!r} (normal form {gold!r})")
    name, text, tokens = prompt
    typer.echo(f"\nprompt, as the model sees it ({name}):\n{_shown(text)}")
    for line in tokens:
        typer.echo(f"  {line}")
    if item.response is None:
        typer.echo("\nresponse: none (the task has no response field: no SFT target, no NLL)")
        return
    typer.echo(f"\nresponse (the SFT and NLL target):\n{item.response}")
    typer.echo(f"\n{judged}")
