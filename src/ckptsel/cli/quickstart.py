"""``ckptsel quickstart``: the whole pipeline on an embedded task and a tiny model, offline."""

from __future__ import annotations

from pathlib import Path

import typer


def quickstart(
    out: Path = typer.Option(
        Path("ckptsel-quickstart"), "--out", help="study folder (reused when it exists)"
    ),
    fast: bool = typer.Option(
        False, "--fast", help="fewer items and steps (about 2-4 minutes on 2 CPU cores)"
    ),
    device: str = typer.Option(None, "--device", help="cpu | cuda (default: cuda when available)"),
    workers: int = typer.Option(
        None,
        "--workers",
        help="parallel trajectory processes (default: 2 on a CPU, 1 on a GPU)",
    ),
) -> None:
    """The whole pipeline on an embedded task and a tiny model, offline, in minutes."""
    from ckptsel.sim import run_quickstart  # when run (see ckptsel.cli)

    run_quickstart(out, fast=fast, device=device, workers=workers)
