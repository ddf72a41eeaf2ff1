"""The ``ckptsel`` Typer app: the command table, and bad input turned into one clear line with
exit code 2 (:class:`~ckptsel.errors.CkptselError`). Each command is a module-level function
in the module named after it."""

from __future__ import annotations

import gc
import inspect
import sys
from collections.abc import Callable

import typer
from rich.markup import escape

from ckptsel import __version__
from ckptsel._util.extras import missing_module_line
from ckptsel.cli import (
    analyze,
    audit,
    average,
    budgets,
    compare,
    ingest,
    measure,
    plan,
    protocol,
    quickstart,
    records,
    report,
    run,
    selection,
    simulate,
    split,
    tasks,
    train,
    verify,
    watch,
)
from ckptsel.errors import CkptselError

__all__ = ["COMMANDS", "GROUPS", "app", "command_help", "command_named", "main"]

# The commands in the order `ckptsel --help` lists them.
COMMANDS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("split", split.split),
    ("audit", audit.audit),
    ("measure", measure.measure),
    ("watch", watch.watch),
    ("analyze", analyze.analyze),
    ("verify", verify.verify),
    ("budgets", budgets.budgets),
    ("simulate", simulate.simulate),
    ("train", train.train),
    ("average", average.average),
    ("quickstart", quickstart.quickstart),
    ("report", report.report),
    ("select", selection.select),
    ("compare", compare.compare),
    ("compare-logs", compare.compare_logs),
    ("plan", plan.plan),
    ("run", run.run),
)
# Command groups (listed after the commands): (name, help, its subcommands).
# A group named in GROUP_DEFAULTS runs that function when given no subcommand (`ckptsel tasks`).
GROUPS: tuple[tuple[str, str, tuple[tuple[str, Callable[..., None]], ...]], ...] = (
    (
        "ingest",
        "Import generations evaluated by other tools.",
        (("lm-eval", ingest.lm_eval), ("inspect", ingest.inspect), ("lighteval", ingest.lighteval)),
    ),
    ("records", "Maintain records folders.", (("compact", records.compact),)),
    ("tasks", "List the tasks, or show one (its fields, a prompt, its answer rule).", (("show", tasks.show),)),
    (
        "protocol",
        "Freeze a study's protocol before training (pre-registration), and check it.",
        (("freeze", protocol.freeze_protocol), ("check", protocol.check)),
    ),
)


def command_help(command: Callable[..., None]) -> str:
    """A command's ``--help`` text from its docstring: each paragraph's lines joined into one
    (the terminal wraps them; a docstring's line breaks would break lines mid-sentence) and
    Rich's markup escaped, so ``[log]`` and ``[executor]`` print as written."""
    paragraphs = (inspect.getdoc(command) or "").split("\n\n")
    return "\n\n".join(escape(" ".join(p.split())) for p in paragraphs)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ckptsel {__version__}")
        raise typer.Exit()


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Which SFT checkpoint to keep, and what the validation data used to choose it is worth.",
)


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, help="Print ckptsel's version and exit."
    ),
) -> None:
    """Which SFT checkpoint to keep, and what the validation data used to choose it is worth."""


for _name, _command in COMMANDS:
    app.command(_name, help=command_help(_command))(_command)
GROUP_DEFAULTS: dict[str, Callable[..., None]] = {"tasks": tasks.tasks}
for _name, _help, _subcommands in GROUPS:
    _group = typer.Typer(no_args_is_help=_name not in GROUP_DEFAULTS, help=_help)
    if _name in GROUP_DEFAULTS:
        _group.callback(invoke_without_command=True)(GROUP_DEFAULTS[_name])
    for _sub, _command in _subcommands:
        _group.command(_sub, help=command_help(_command))(_command)
    app.add_typer(_group, name=_name)


def command_named(args: list[str]) -> str:
    """``ckptsel`` and the command (and subcommand) ``args`` name, for a message."""
    words = [str(a) for a in args[:2]]
    names = dict(COMMANDS).keys() | {g[0] for g in GROUPS}
    if not words or words[0] not in names:
        return "ckptsel"
    subs = {s for g in GROUPS if g[0] == words[0] for s, _ in g[2]}
    return "ckptsel " + " ".join(words if len(words) > 1 and words[1] in subs else words[:1])


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``argv=None``: the process's own arguments, and the process ends
    when the command does)."""
    try:
        app(args=argv, standalone_mode=True)
    except CkptselError as err:
        typer.secho(f"error: {err}", err=True, fg=typer.colors.RED)
        sys.exit(err.exit_code)
    except ModuleNotFoundError as err:  # an optional package (torch: the [ml] extra) missing
        line = missing_module_line(err, command_named(sys.argv[1:] if argv is None else argv))
        if line is None:
            raise
        typer.secho(f"error: {line}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except OSError as err:  # a local path the system refuses (name too long, read-only, ...)
        where = f"{err.filename}: " if err.filename else ""
        typer.secho(f"error: {where}{err.strerror or err}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    finally:
        if argv is None:
            # the interpreter's final garbage collection walks every object torch and
            # transformers created (about a second, measured); the process is ending, so
            # freeze them out of its reach. Exit handlers and flushes still run.
            gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    main()
