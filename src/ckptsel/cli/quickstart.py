"""``ckptsel quickstart``: the whole pipeline on an embedded task and a tiny model, offline."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer

from ckptsel._util.extras import require_ml
from ckptsel.cli.output import console


def quickstart(
    out: Path = typer.Option(Path("ckptsel-quickstart"), "--out", help="study folder (reused when it exists)"),
    fast: bool = typer.Option(False, "--fast", help="fewer items and steps (about 2-4 minutes on 2 CPU cores)"),
    device: str = typer.Option(None, "--device", help="cpu | cuda (default: cuda when available)"),
    workers: int = typer.Option(None, "--workers", help="parallel trajectory processes (default: 2 on a CPU, 1 on a GPU)"),
) -> None:
    """The whole pipeline on an embedded task and a tiny model, offline, in minutes."""
    require_ml("ckptsel quickstart")  # it trains and measures a tiny model
    # the first line comes before torch and transformers load (seconds on a busy machine)
    say(f"quickstart{' --fast' if fast else ''}: study folder {out.resolve()}; loading torch…")
    with warnings.catch_warnings(record=True) as caught:
        # library warnings (transformers' FutureWarnings, …) would break the live display:
        # collected here and shown once each at the end
        warnings.simplefilter("default")
        try:
            from ckptsel.sim.quickstart import run_quickstart  # when run (see ckptsel.cli)

            run_quickstart(out, fast=fast, device=device, workers=workers, console=console)
        finally:
            show_warnings(caught)


def say(line: str) -> None:
    """One whole line on the console (a log gets it at once: rich flushes each print)."""
    console.print(line, soft_wrap=True, markup=False, highlight=False)


def show_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Each distinct library warning once (category, message, where), after the run."""
    seen = dict.fromkeys(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught)
    if seen:
        say(f"{len(seen)} library warning{'s' if len(seen) > 1 else ''} during the run:")
        for line in seen:
            say(f"  {line}")
