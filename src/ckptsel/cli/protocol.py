"""``ckptsel protocol freeze|check STUDY.toml``: pre-register a study's protocol before training,
and check later that it still holds."""

from __future__ import annotations

import typer

from ckptsel.study.protocol import check_protocol, freeze, protocol_path, protocol_status
from ckptsel.study.spec import STATE_DIR, load_spec


def freeze_protocol(
    study_file: str = typer.Argument(..., help="study.toml or its URL (schema 2)"),
    workdir: str = typer.Option(
        None,
        "--workdir",
        help="the study's workdir (default: the file's folder; a study file at a URL needs one), to tell whether work has started",
    ),
    force: bool = typer.Option(False, "--force", help="replace an existing protocol"),
) -> None:
    """Write STUDY.toml.protocol.json: the protocol, the base model's files by SHA-256, the time
    and what the runs folder held then (checkpoints: none, before training), under one SHA-256."""
    spec = load_spec(study_file, workdir=workdir)  # a protocol is frozen for a valid study only
    started = (spec.workdir / STATE_DIR / "fingerprint.json").exists()
    record = freeze(study_file, started=started, force=force, runs_dir=spec.study.runs_dir)
    typer.echo(f"{protocol_path(study_file)}: {protocol_status(record)}")
    typer.echo(f"sha256 {record['sha256']}")


def check(study_file: str = typer.Argument(..., help="study.toml (or its URL) with a frozen protocol")) -> None:
    """Check that STUDY.toml, its data files and its base model still match the frozen protocol,
    and that no checkpoint predates a protocol frozen "before training" (exit 2 naming the
    difference)."""
    typer.echo(f"{study_file}: {protocol_status(check_protocol(study_file))}")
