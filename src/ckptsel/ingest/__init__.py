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

__all__: list[str] = []  # other stages import from the defining modules
