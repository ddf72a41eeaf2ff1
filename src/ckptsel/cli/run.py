"""``ckptsel run STUDY.toml``: a whole study (split, train, measure, analyze) as one job."""

from __future__ import annotations

from typing import Any

import typer

from ckptsel._util.locations import as_location
from ckptsel.cli.options import LOG, log_settings, with_groups
from ckptsel.cli.output import console
from ckptsel.study import check_protocol, load_spec, protocol_status
from ckptsel.workflows import StudyRun, stages_to_run


@with_groups
def run(
    study_file: str = typer.Argument(
        ..., help="study.toml or its URL (schema 2; schema 1 works too)"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the plan (trajectories x checkpoints x items) only"
    ),
    until: str = typer.Option(
        None, "--until", help="stop after this stage: prepare, train, measure, analyze"
    ),
    only: str = typer.Option(None, "--only", help="run only this stage"),
    workdir: str = typer.Option(
        None, "--workdir",
        help="runs, records, results and state (default: the file's folder; a study file at a "
        "URL needs one)",
    ),  # fmt: skip
    set_: list[str] = typer.Option(
        None, "--set", help="override a key: SECTION.KEY=VALUE (repeatable)"
    ),
    device: str = typer.Option(None, "--device", help="cpu | cuda (default: cuda if any)"),
    workers: int = typer.Option(
        1, "--workers", help="processes that train + measure trajectories side by side"
    ),
    watch: bool = typer.Option(
        False, "--watch", help="measure each checkpoint as soon as it lands, while training goes on"
    ),
    log: dict[str, Any] = LOG,
    trajectory: str = typer.Option(
        None, "--trajectory", help="Whose recommended checkpoint --register registers."
    ),
) -> None:
    """Run or resume a whole study; every stage skips what is already done. With --log (or the
    study file's [log] table) the results go to MLflow / W&B / Trackio after analyze."""
    if device:  # a device that cannot run is said before any stage starts
        from ckptsel.train import pick_device

        pick_device(device)
    stages = stages_to_run(until, only)
    record = check_protocol(study_file, tuple(set_ or ()))
    spec = load_spec(study_file, overrides=set_ or (), workdir=workdir)
    typer.echo(f"{as_location(study_file).name}: {protocol_status(record)}")
    tracking = log_settings(log, check=False, trajectory=trajectory)
    job = StudyRun(
        spec, device=device, log=lambda m: typer.echo(m), workers=workers, console=console,
        tracking=tracking,
    )  # fmt: skip
    if dry_run:
        typer.echo(job.dry_run())
        typer.echo(f"stages: {', '.join(stages)}")
        return
    job.run(stages, watch=watch)
