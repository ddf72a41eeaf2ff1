"""``ckptsel verify``: recompute a results folder's frozen choices and results."""

from __future__ import annotations

import typer

from ckptsel.cli.output import console, print_json
from ckptsel.errors import VerificationError
from ckptsel.workflows import verify as run_verify


def verify(
    results_dir: str = typer.Argument(
        ..., help="A results folder (or URL) written by `ckptsel analyze`."
    ),
    records: str = typer.Option(
        None, "--records", help="Records folder or URL (default: the one analyzed)."
    ),
    protocol: str = typer.Option(
        None, "--protocol",
        help="The study's frozen protocol file (STUDY.toml.protocol.json; default: the one the "
        "results name in run.json).",
    ),  # fmt: skip
    as_json: bool = typer.Option(
        False, "--json",
        help="Print one JSON object: ok, the checks passed, the mismatch (exit code 1 still says it).",
    ),  # fmt: skip
) -> None:
    """Recompute the frozen choices and the results; exit 1 on any mismatch. A pre-registered
    study is checked as a chain: protocol (unedited, the one the results copied, its analysis
    settings used) → choices → results."""
    if not as_json:
        for line in run_verify(results_dir, records, protocol):
            console.print(f"[green]ok[/green] {line}")
        return
    try:
        lines, error = run_verify(results_dir, records, protocol), None
    except VerificationError as err:
        lines, error = [], str(err)
    print_json("verify", {"results": results_dir, "ok": error is None, "checks": lines, "error": error})
    if error is not None:
        raise typer.Exit(VerificationError.exit_code)
