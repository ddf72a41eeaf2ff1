"""The records contract (SPEC §2): the one place that names the columns of the two tables.

Every producer (``measure``, ``ingest``, ``simulate``, the Trainer callback) writes these
columns and every consumer (``records``) validates them.
"""

from __future__ import annotations

GENERATIONS_FILE = "generations.parquet"
NLL_FILE = "nll.parquet"

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
