"""``ckptsel train STUDY.toml``: train (or resume) every trajectory of a study, or check them."""

from __future__ import annotations

import typer
from rich.table import Table

from ckptsel.cli.output import console
from ckptsel.study.spec import load_study


def train(
    study_file: str = typer.Argument(..., help="study.toml (or its URL) listing base model, data, configurations, seeds"),
    check: bool = typer.Option(False, "--check", help="only report each trajectory's status; exit 1 if any is invalid"),
    only: list[str] = typer.Option(None, "--only", help="train only these trajectories (repeatable)"),
    device: str = typer.Option(None, "--device", help="cpu | cuda (default: cuda when available)"),
    workdir: str = typer.Option(None, "--workdir", help="where runs go (default: the file's folder; a study file at a URL needs one)"),
) -> None:
    """Train (or resume) every trajectory of a study: RUN_DIR/<configuration>-s<seed>/checkpoint-<step>/."""
    from ckptsel.train.models import pick_device
    from ckptsel.train.study import study_status, train_study  # when run (see ckptsel.cli)

    if device:  # a device that cannot train is said before the study is read
        pick_device(device)
    study = load_study(study_file, workdir=workdir)
    if not check:
        train_study(study, only=only or None, device=device, log=console.print)
    statuses = study_status(study)
    table = Table(title=f"study {study.name}: trajectories")
    for col in ("trajectory", "checkpoints", "final", "expected", "status"):
        table.add_column(col)
    for st in statuses:
        table.add_row(
            st.trajectory,
            str(len(st.steps)),
            str(st.steps[-1]) if st.steps else "-",
            str(st.expected_final_step),
            "[green]valid[/green]" if st.valid else f"[red]INVALID[/red]: {st.reason}",
        )
    console.print(table)
    if any(not st.valid for st in statuses):
        raise typer.Exit(code=1)
