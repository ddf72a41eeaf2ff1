"""The results of an analysis, as data: typed estimates, how a summary is read, the folder's
file names, and how a results folder is published (staged, hashed, swapped in whole).

This is the contract between the analysis (``stats``, ``workflows.analysis``, which write it)
and the report, ``select`` and the CLI (which read it), as ``records`` is between measurement
and choosing; so it sits before ``stats`` in the layers.

* :mod:`~ckptsel.results.estimate` — :class:`Estimate` and :func:`fmt`;
* :mod:`~ckptsel.results.summary` — reading a summary: level, interval method, ``D``'s start,
  the main table;
* :mod:`~ckptsel.results.layout` — the folder's file names;
* :mod:`~ckptsel.results.publish` — staging, the manifest and the atomic swap.
"""

from __future__ import annotations

from ckptsel.results import publish
from ckptsel.results.estimate import DIGITS, Estimate, fmt
from ckptsel.results.layout import (
    CHOICES_DIR,
    FIGURES_DIR,
    REPORT_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    TABLES_DIR,
)
from ckptsel.results.publish import MANIFEST_FILE
from ckptsel.results.summary import (
    INTERVAL_LABELS,
    SCHEMA,
    d_column,
    d_from,
    interval_label,
    level_percent,
    main_table_markdown,
    main_table_rows,
)

__all__ = [
    "CHOICES_DIR",
    "DIGITS",
    "FIGURES_DIR",
    "INTERVAL_LABELS",
    "MANIFEST_FILE",
    "REPORT_FILE",
    "RUN_FILE",
    "SCHEMA",
    "SUMMARY_FILE",
    "TABLES_DIR",
    "Estimate",
    "d_column",
    "d_from",
    "fmt",
    "interval_label",
    "level_percent",
    "main_table_markdown",
    "main_table_rows",
    "publish",
]
