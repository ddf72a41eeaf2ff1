"""Building a results folder's report: tables, figures and ``report.html`` from what
``ckptsel analyze`` wrote, its ``summary.json`` read back as a typed
:class:`ckptsel.results.Summary`.

Only the analysis outputs are read (``summary.json`` and ``tables/*.parquet``), never the
records, so a report can be rebuilt at any time without touching the frozen choices.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ckptsel._util.io import write_bytes, write_text
from ckptsel.errors import CkptselError
from ckptsel.report import html as rhtml
from ckptsel.report import tables as rtables
from ckptsel.results.layout import FIGURES_DIR, REPORT_FILE, RUN_FILE, SUMMARY_FILE, TABLES_DIR
from ckptsel.results.summary import Summary


def load_results(results_dir: Path) -> tuple[Summary, pd.DataFrame, pd.DataFrame]:
    """The typed summary (``summary.json``, checked), the per-configuration table and the
    checkpoint curves of a results folder."""
    results_dir = Path(results_dir)
    spath = results_dir / SUMMARY_FILE
    if not spath.is_file():
        raise CkptselError(f"{spath}: not found; run `ckptsel analyze RECORDS --out {results_dir}` first")
    summary = Summary.load(spath)
    frames = []
    for name in ("per_configuration", "checkpoint_curves"):
        path = results_dir / TABLES_DIR / f"{name}.parquet"
        if not path.is_file():
            raise CkptselError(f"{path}: not found; the results folder is incomplete (re-run `ckptsel analyze`)")
        frames.append(pd.read_parquet(path))
    return summary, frames[0], frames[1]


def write_report(
    results_dir: Path, formats: Iterable[str] = ("md", "tex", "csv", "png", "svg", "html"), trajectory: str | None = None
) -> dict[str, list[Path]]:
    """Write tables (md/tex/csv), figures (png/svg) and ``report.html`` into ``results_dir``.

    ``formats`` picks any of ``md tex csv`` (tables), ``png svg`` (figures) and ``html``;
    ``trajectory`` picks the trajectory of the within-trajectory figure (default: the first).
    Returns the written paths by kind.
    """
    from ckptsel.report import figures as figs  # matplotlib only when a report is built

    formats = tuple(formats)
    known = set(rtables.TABLE_FORMATS) | set(figs.FIGURE_FORMATS) | {"html"}
    unknown = sorted(set(formats) - known)
    if unknown:
        raise CkptselError(f"unknown report format(s) {unknown}; choose from {sorted(known)}")
    results_dir = Path(results_dir)
    summary, per_conf, curves = load_results(results_dir)
    written: dict[str, list[Path]] = {"tables": [], "figures": [], "html": []}
    table_formats = [f for f in formats if f in rtables.TABLE_FORMATS]
    if table_formats:
        written["tables"] = rtables.write_tables(summary, results_dir / TABLES_DIR, table_formats)
    figure_formats = [f for f in formats if f in figs.FIGURE_FORMATS]
    if figure_formats or "html" in formats:
        pngs: dict[str, bytes] = {}
        drawn = figs.all_figures(summary, per_conf, curves, trajectory)
        for name in set(figs.FIGURE_NAMES) - set(drawn):  # left out: no stale copy stays
            for fmt in figs.FIGURE_FORMATS:
                (results_dir / FIGURES_DIR / f"{name}.{fmt}").unlink(missing_ok=True)
        for name, fig in drawn.items():
            needed = figure_formats + (["png"] if "html" in formats and "png" not in figure_formats else [])
            rendered = {fmt: figs.figure_bytes(fig, fmt) for fmt in needed}  # each format drawn once
            for fmt in figure_formats:
                path = results_dir / FIGURES_DIR / f"{name}.{fmt}"
                write_bytes(path, rendered[fmt])
                written["figures"].append(path)
            if "html" in formats:
                pngs[name] = rendered["png"]
        if "html" in formats:
            notes = figs.figure_notes(summary, per_conf, curves)
            page = rhtml.render_html(summary, rtables.all_tables(summary), pngs, notes=notes, measured_by=_measured_by(results_dir))
            write_text(results_dir / REPORT_FILE, page)
            written["html"].append(results_dir / REPORT_FILE)
    return written


def _measured_by(results_dir: Path) -> list[str]:
    """``run.json``'s lines on what measured the records (none when it is absent or says none)."""
    import json

    try:
        lines = json.loads((results_dir / RUN_FILE).read_text()).get("measured_by", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [str(line) for line in lines] if isinstance(lines, list) else []
