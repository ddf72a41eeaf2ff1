"""Records from generations other tools made, written through the one records writer:

* :mod:`~ckptsel.ingest.mapping` — the mapping every harness shares (item id, split,
  step, trajectory, task, answer, correct → contract rows), the keywords every ingester takes
  (:class:`~ckptsel.ingest.mapping.Naming`) and what a harness lacks;
* :mod:`~ckptsel.ingest.lm_eval` — lm-evaluation-harness ``--log_samples`` output;
* :mod:`~ckptsel.ingest.inspect` — inspect_ai ``.eval``/``.json`` logs (read without
  inspect_ai);
* :mod:`~ckptsel.ingest.lighteval` — lighteval ``--save-details`` parquet files;
* :mod:`~ckptsel.ingest.logs` — one log of any of them, recognized and read (nothing
  written; ``ckptsel compare-logs``).
"""

from __future__ import annotations

from ckptsel.ingest.inspect import ingest_inspect
from ckptsel.ingest.lighteval import ingest_lighteval
from ckptsel.ingest.lm_eval import ingest_lm_eval, ingest_lm_eval_logs
from ckptsel.ingest.logs import LogOptions, read_logs
from ckptsel.ingest.mapping import check_same_items, names_line, to_records

__all__ = [
    "LogOptions",
    "check_same_items",
    "ingest_inspect",
    "ingest_lighteval",
    "ingest_lm_eval",
    "ingest_lm_eval_logs",
    "names_line",
    "read_logs",
    "to_records",
]
