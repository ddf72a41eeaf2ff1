"""The names of a results folder's files: what ``ckptsel analyze`` writes and the report, the
CLI and ``verify`` read. ``summary.json`` is byte-stable (it is the serialisation of the typed
summary); ``run.json`` holds the provenance (paths, version) so that it stays so.
"""

from __future__ import annotations

SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"  # provenance (paths, version): kept out of summary.json so it stays byte-stable
PROTOCOL_FILE = "protocol.json"  # a copy of the frozen protocol the analysis was bound to
CHOICES_DIR = "choices"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"
REPORT_FILE = "report.html"
