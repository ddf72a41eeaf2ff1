"""``python -m ckptsel`` and the ``ckptsel`` console script: a long command says its first line
before the command line's modules load (seconds on a busy machine), then the Typer app runs."""

from __future__ import annotations

import sys

__all__ = ["main"]

# commands that work for minutes: their first line comes before anything heavy is imported
EARLY_LINES = {"quickstart": "quickstart: starting (loading ckptsel, torch and transformers)…"}


def main() -> None:
    """Run the command line on the process's arguments (see :func:`ckptsel.cli.main`)."""
    args = sys.argv[1:]
    line = EARLY_LINES.get(args[0]) if args else None
    if line and not {"--help", "-h"} & set(args):
        print(line, flush=True)
    from ckptsel.cli.app import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
