"""The records contract (SPEC §2): the one place that names the files and columns of a records
folder.

Every producer (``measure``, ``ingest``, ``simulate``, the Trainer callback) writes these
columns through :mod:`ckptsel.records.write` and every consumer reads them through
:mod:`ckptsel.records.read`.
"""

from __future__ import annotations

GENERATIONS_FILE = "generations.parquet"
NLL_FILE = "nll.parquet"
FINAL_STEPS_FILE = "final_steps.json"  # optional: expected final step per trajectory

SPLITS = ("validation", "test")
MATCHED_WINDOW = 512  # tokens: prompt+response truncated to this; remaining response tokens scored
COMPLETE_WINDOW = 0  # ``window == 0`` marks the complete-response NLL control

# column -> pandas/pyarrow dtype name
GENERATION_COLUMNS: dict[str, str] = {
    "trajectory": "string",
    "configuration": "string",
    "task": "string",
    "step": "int64",
    "split": "string",
    "item_id": "string",
    "group": "string",
    "subtask": "string",
    "answer": "string",
    "correct": "bool",
}
GENERATION_OPTIONAL: dict[str, str] = {"text": "string"}
GENERATION_KEY = ("trajectory", "step", "split", "item_id")

NLL_COLUMNS: dict[str, str] = {
    "trajectory": "string",
    "step": "int64",
    "split": "string",
    "item_id": "string",
    "nll_sum": "float64",
    "n_tokens": "int64",
    "window": "int64",
}
NLL_KEY = ("trajectory", "step", "split", "item_id", "window")
