"""``ckptsel run STUDY.toml``: a whole study (split, train, measure, analyze) as one job."""

from __future__ import annotations

from typing import Any

import typer

from ckptsel._util.extras import require_ml
from ckptsel._util.locations import as_location
from ckptsel.cli.options import LOG, log_settings, with_groups
from ckptsel.cli.output import console, err_console, json_flag, print_json
from ckptsel.measure.cost import check_probe, named_gpu
from ckptsel.study.protocol import check_protocol, protocol_status
from ckptsel.study.spec import load_spec
from ckptsel.workflows.study_run.job import StudyRun
from ckptsel.workflows.study_run.plan import format_dry_run
from ckptsel.workflows.study_run.stages import stages_to_run


@with_groups
def run(
    study_file: str = typer.Argument(..., help="study.toml or its URL (schema 2)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan (trajectories x checkpoints x items) only"),
    until: str = typer.Option(None, "--until", help="stop after this stage: prepare, train, measure, analyze"),
    only: str = typer.Option(None, "--only", help="run only this stage"),
    workdir: str = typer.Option(
        None, "--workdir", help="runs, records, results and state (default: the file's folder; a study file at a URL needs one)"
    ),
    set_: list[str] = typer.Option(None, "--set", help="override a key: SECTION.KEY=VALUE (repeatable)"),
    device: str = typer.Option(
        None,
        "--device",
        help="cpu | cuda (default: cuda if any); with --dry-run also a benchmarked GPU (h200) whose measured rate times the work",
    ),
    probe: bool = typer.Option(
        False, "--probe", help="with --dry-run: time a few items through the base model here, for the time estimate (loads it once)"
    ),
    workers: int = typer.Option(1, "--workers", help="processes that train + measure trajectories side by side"),
    watch: bool = typer.Option(False, "--watch", help="measure each checkpoint as soon as it lands, while training goes on"),
    log: dict[str, Any] = LOG,
    trajectory: str = typer.Option(None, "--trajectory", help="Whose recommended checkpoint --register registers."),
    as_json: bool = json_flag(
        "At the end, print one JSON object (the stages run, where the records and results are, "
        "the summary; with --dry-run the plan); the log goes to stderr."
    ),
) -> None:
    """Run or resume a whole study; every stage skips what is already done. With --log (or the
    study file's [log] table) the results go to MLflow / W&B / Trackio after analyze."""
    stages = stages_to_run(until, only)
    if not dry_run and {"train", "measure"} & set(stages):  # refused before prepare writes
        require_ml("ckptsel run (its train and measure stages; --until prepare and --only analyze run without them)")
    rate_device, named = device, dry_run and named_gpu(device)
    check_probe(probe, dry_run, device)
    if named:  # a dry run for a benchmarked GPU: its part keys, no GPU looked for here
        device = "cuda"
    elif device:  # a device that cannot run is said before any stage starts
        from ckptsel.train.models import pick_device

        pick_device(device)
    record = check_protocol(study_file, tuple(set_ or ()))
    spec = load_spec(study_file, overrides=set_ or (), workdir=workdir)
    status = protocol_status(record)
    typer.echo(f"{as_location(study_file).name}: {status}", err=as_json)
    tracking = log_settings(log, check=False, trajectory=trajectory)
    job = StudyRun(  # with --json, stdout is the JSON alone
        spec,
        device=device,
        log=lambda m: typer.echo(m, err=as_json),
        workers=workers,
        console=err_console if as_json else console,
        tracking=tracking,
        check_device=not named,
    )
    answer = {
        "study": study_file,
        "protocol": status,
        "stages": list(stages),
        "dry_run": dry_run,
        "plan": None,
        "cost": None,
        "records_dir": str(job.context.records_dir),
        "results_dir": str(spec.results_dir),
        "summary": None,
    }
    if dry_run:
        planned = job.dry_run(form=lambda p: p, rate_device=rate_device, probe=probe)
        if as_json:
            print_json("run", {**answer, "plan": planned.rows, "cost": planned.cost.to_dict()})
            return
        typer.echo(format_dry_run(planned))
        typer.echo(f"stages: {', '.join(stages)}")
        return
    summary = job.run(stages, watch=watch)
    if as_json:
        print_json("run", {**answer, "summary": None if summary is None else summary.to_dict()})
