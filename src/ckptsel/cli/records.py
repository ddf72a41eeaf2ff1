"""``ckptsel records compact``: maintenance of records folders (the single-file form)."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel.errors import CkptselError
from ckptsel.records.store import compact as compact_records


def compact(records_dir: Path = typer.Argument(..., help="Records folder (units and/or single files).")) -> None:
    """Write RECORDS_DIR's records as the single files generations.parquet (with the
    texts as its text column) and nll.parquet, then remove the per-checkpoint units.
    Run it when no producer is writing into the folder (e.g. to ship one file)."""
    if not Path(records_dir).is_dir():
        raise CkptselError(f"{records_dir}: records folder not found")
    written = compact_records(records_dir)
    if not written:
        raise CkptselError(f"{records_dir}: no records to compact")
    typer.echo("wrote " + ", ".join(str(p) for p in written))
