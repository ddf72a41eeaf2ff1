"""``ckptsel verify``: recompute a results folder's frozen choices and results."""

from __future__ import annotations

import typer
from rich.markup import escape

from ckptsel.cli.options import parse_rules
from ckptsel.cli.output import console, json_flag, print_json
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.workflows.analysis import verify as run_verify


def verify(
    results_dir: str = typer.Argument(None, help="A results folder (or URL) written by `ckptsel analyze`."),
    records: str = typer.Option(None, "--records", help="Records folder or URL (default: the one analyzed)."),
    protocol: str = typer.Option(
        None,
        "--protocol",
        help="The study's frozen protocol file (STUDY.toml.protocol.json; default: the one the results name in run.json).",
    ),
    rules: list[str] = typer.Option(
        None, "--rule", help="Your own rule the analysis used, FILE.py:function or NAME=FILE.py:function (repeatable): the same file bytes."
    ),
    as_json: bool = json_flag("Print one JSON object: ok, the checks passed, the mismatch (exit code 1 still says it)."),
    conformance: bool = typer.Option(
        False,
        "--conformance",
        help="Check every cached conformance verdict under this user's key instead (one line "
        "each; exit 1 when one does not hold: that family is checked again at its next measure).",
    ),
) -> None:
    """Recompute the frozen choices and the results; exit 1 on any mismatch. A pre-registered
    study is checked as a chain: protocol (unedited, the one the results copied, its analysis
    settings used) → choices → results. With --conformance (and no RESULTS_DIR): the cached
    conformance verdicts, each entry's HMAC under this user's key."""
    if conformance:
        if results_dir is not None:
            raise CkptselError("give RESULTS_DIR or --conformance, not both")
        return _verify_conformance(as_json)
    if results_dir is None:
        raise CkptselError("give a RESULTS_DIR to verify (or --conformance)")
    if not as_json:
        for line in run_verify(results_dir, records, protocol, parse_rules(rules)):
            console.print(f"[green]ok[/green] {line}")
        return
    try:
        lines, error = run_verify(results_dir, records, protocol, parse_rules(rules)), None
    except VerificationError as err:
        lines, error = [], str(err)
    print_json("verify", {"results": results_dir, "ok": error is None, "checks": lines, "error": error})
    if error is not None:
        raise typer.Exit(VerificationError.exit_code)


def _verify_conformance(as_json: bool) -> None:
    """``verify --conformance``: the verdict cache's entries, each holding under the user's key
    or not (:func:`ckptsel.measure.check_cached_verdicts`); exit 1 when one does not."""
    from ckptsel.measure.conformance import check_cached_verdicts

    path, held, failed = check_cached_verdicts()
    error = None
    if failed:
        error = (
            f"{path}: {len(failed)} of {len(held) + len(failed)} cached conformance "
            f"verdict(s) do not hold under this user's key: {'; '.join(failed)}"
        )
    if as_json:
        print_json("verify", {"results": str(path), "ok": error is None, "checks": held, "error": error})
    else:
        for line in held or ([] if failed else [f"no cached conformance verdict in {path}"]):
            console.print(f"[green]ok[/green] {escape(line)}", soft_wrap=True, highlight=False)
    if error is not None:
        if as_json:
            raise typer.Exit(VerificationError.exit_code)
        raise VerificationError(error)
