"""The ``ckptsel`` command line: :mod:`~ckptsel.cli.app` holds the Typer app, its command
table and the error handling (bad input: one line, exit code 2); every command is a function
in the module named after it (``split``, ``audit``, ``measure``, ``ingest``, ``analyze``,
``verify``, ``simulate``, ``train``, ``quickstart``, ``report``, ``selection`` for ``select``,
``compare``, ``plan``, ``run``, ``records``); :mod:`~ckptsel.cli.output` holds what several of
them print (the console, progress bars, the select/compare/plan tables).

A command module imports at its top what ``ckptsel --help`` loads anyway (the foundation,
records, data, study, choose, results, stats, workflows, rich's console and tables); the stage
that does a command's work (train, measure, report, sim; matplotlib) is imported inside the
command, so that ``--help`` does not pay for every stage."""

from __future__ import annotations

from ckptsel.cli.app import app

# ``app`` stays although only tests import it: without it, ``ckptsel.cli.app`` would be the
# submodule, and ``from ckptsel.cli import app`` would quietly give a module, not the Typer app
__all__ = ["app"]
