"""The ``ckptsel`` command line. Each command lives in ``ckptsel.cli.<name>`` and
registers itself on the app; this module only assembles them and turns bad input into one
clear message with exit code 2."""

from __future__ import annotations

import gc
import importlib
import sys

import typer

from ckptsel.errors import CkptselError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Which SFT checkpoint to keep, and what the validation data used to choose it is worth.",
)

# One line per command module; each defines ``register(app)``.
COMMAND_MODULES = (
    "ckptsel.cli.data",
    "ckptsel.cli.measure",
    "ckptsel.cli.analysis",
    "ckptsel.cli.simulate",
    "ckptsel.cli.train",
    "ckptsel.cli.report",
    "ckptsel.cli.practitioner",
    "ckptsel.cli.records",
    "ckptsel.cli.run",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``argv=None``: the process's own arguments, and the process ends
    when the command does)."""
    try:
        app(args=argv, standalone_mode=True)
    except CkptselError as err:
        typer.secho(f"error: {err}", err=True, fg=typer.colors.RED)
        sys.exit(err.exit_code)
    finally:
        if argv is None:
            # the interpreter's final garbage collection walks every object torch and
            # transformers created (about a second, measured); the process is ending, so
            # freeze them out of its reach. Exit handlers and flushes still run.
            gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    main()
