"""Reports a person reads: paper-style tables, figures and one self-contained HTML page,
all generated from a results folder written by ``ckptsel analyze``.

* :mod:`~ckptsel.report.tables` — the paper's tables (Markdown, LaTeX, CSV);
* :mod:`~ckptsel.report.figures` — budget curves, per-configuration gains, matched half
  (matplotlib, imported only when a figure is made);
* :mod:`~ckptsel.report.html` — the self-contained ``report.html`` and the claims in words;
* :mod:`~ckptsel.report.terminal` — the main table in a terminal;
* :mod:`~ckptsel.report.build` — ``write_report``: all of them from a results folder.

Only the analysis outputs are read (``summary.json``, as a typed
:class:`ckptsel.results.Summary`, and ``tables/*.parquet``), never the records, so a report can
be rebuilt at any time without touching the frozen choices. Every function taking a summary
also accepts its ``summary.json`` dict (checked through ``Summary.from_dict``).
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
