"""The records contract (SPEC §2): the one place that names the files, columns, dtypes, keys
and row order of a records folder, and turns frames into contract frames.

Every producer (``measure``, ``ingest``, ``simulate``, the Trainer callback) writes these
columns through :mod:`ckptsel.records.store` and every consumer reads them through
:mod:`ckptsel.records.scan` and :mod:`ckptsel.records.load`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa

from ckptsel.errors import CkptselError

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
KINDS = ("generations", "nll", "texts")
TEXT_COLUMNS: dict[str, str] = {"trajectory": "string", "step": "int64", "split": "string", "item_id": "string", "text": "string"}
UNIT_COLUMNS = {"generations": GENERATION_COLUMNS, "nll": NLL_COLUMNS, "texts": TEXT_COLUMNS}
_ARROW = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}


def arrow_schema(kind: str) -> pa.Schema:
    """The Arrow schema of a unit of ``kind`` (contract columns and types)."""
    return pa.schema([(c, _ARROW[t]) for c, t in UNIT_COLUMNS[kind].items()])


# --------------------------------------------------------------------------- candidates that are not steps
# An average of a run's checkpoints (``ckptsel average``: ``average-lastK/``, ``ema-D/``) is
# recorded under a reserved negative ``step`` beside the run's checkpoints, so the final
# checkpoint stays the largest step, every key stays (trajectory, step, split, item_id), and a
# reader that knows only training steps (0.1.0: "negative step") refuses the rows loudly.
# ``average-lastK`` is step -K (2 <= K <= 999); ``ema-D`` is step -(10**6 + D * 10**6), D in
# (0, 1) with at most six decimals.
AVERAGE_SPAN = 1_000_000
MAX_AVERAGED = 999  # the most checkpoints an average-lastK names
_AVERAGE_RE = re.compile(r"^average-last([1-9][0-9]{0,2})$")
_EMA_RE = re.compile(r"^ema-(0\.[0-9]{1,6})$")


def average_step(name: str) -> int:
    """The reserved step of the average folder ``name`` (``average-last3`` -> -3, ``ema-0.9`` ->
    -1900000); a name that is not an average ckptsel can record is refused."""
    if m := _AVERAGE_RE.fullmatch(name):
        k = int(m.group(1))
        if k >= 2:
            return -k
    elif (m := _EMA_RE.fullmatch(name)) and 0 < (micro := round(float(m.group(1)) * AVERAGE_SPAN)) < AVERAGE_SPAN:
        if candidate_name(-(AVERAGE_SPAN + micro)) == name:  # one spelling per decay: ema-0.9, not ema-0.90
            return -(AVERAGE_SPAN + micro)
    raise CkptselError(
        f"{name!r} is not an average ckptsel can record (average-lastK with 2 <= K <= 999, or ema-D with D in (0, 1), at most six decimals)"
    )


def is_average_step(step: int) -> bool:
    """Whether ``step`` is one :func:`average_step` gives (every other negative step is invalid)."""
    s = -int(step)
    return 2 <= s <= MAX_AVERAGED or AVERAGE_SPAN < s < 2 * AVERAGE_SPAN


def candidate_name(step: int) -> str:
    """What a recorded ``step`` names: ``checkpoint-<step>``, ``average-lastK`` or ``ema-D``."""
    step = int(step)
    if step >= 0:
        return f"checkpoint-{step}"
    if not is_average_step(step):
        raise CkptselError(f"step {step}: negative, and not a recorded average's step")
    s = -step
    return f"average-last{s}" if s <= MAX_AVERAGED else f"ema-{(s - AVERAGE_SPAN) / AVERAGE_SPAN!r}"


def candidate_step(name: int | str) -> int:
    """The recorded step a user's name for a candidate means: ``75``, ``checkpoint-75``,
    ``average-last3`` (-3) or ``ema-0.9`` (the inverse of :func:`candidate_name`); anything else
    is refused in one line."""
    if isinstance(name, bool) or not isinstance(name, (int, np.integer, str)):
        name = repr(name)
    text = str(name).strip()
    if m := re.fullmatch(r"(?:checkpoint-)?([0-9]{1,18})", text):
        return int(m.group(1))
    if re.fullmatch(r"-[0-9]{1,18}", text):
        step = int(text)
        if is_average_step(step):
            return step
    elif re.fullmatch(r"average-last[0-9]{1,18}|ema-[0-9]{0,18}(?:\.[0-9]{1,18})?", text):
        return average_step(text)  # its own message when K or D is out of range
    raise CkptselError(f"{name!r} is not a checkpoint (a step, checkpoint-<step>, average-lastK or ema-D)")


def step_text(step: int) -> str:
    """A candidate in a sentence: its step (``75``), or the average's name (``average-last3``)."""
    return str(int(step)) if step >= 0 else candidate_name(step)


def counted(steps) -> str:
    """``10 checkpoints``, or ``10 checkpoints and 1 average(s)`` (averages at negative steps)."""
    averages = n_averages(steps)
    return f"{len(steps) - averages} checkpoints" + (f" and {averages} average(s)" if averages else "")


def n_averages(steps) -> int:
    """How many of a trajectory's ascending ``steps`` are averages (they come first)."""
    return int((np.asarray(steps) < 0).sum())


def average_rule_name(step: int) -> str:
    """The fixed-choice rule that keeps the average at ``step``: ``mean_last3``, ``ema_0_9``."""
    name = candidate_name(step)
    if name.startswith("average-last"):
        return "mean_last" + name[len("average-last") :]
    return "ema_" + name[len("ema-") :].replace(".", "_")


RECORDS_ORDER = ("split", "trajectory", "step", "item_id", "window")  # row order of every file
RECORDS_ROW_GROUP = 262_144  # rows per Parquet row group
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@,-]*$")


def empty_generations(with_text: bool = True) -> pd.DataFrame:
    """A zero-row generations frame with the contract dtypes."""
    cols = dict(GENERATION_COLUMNS)
    if with_text:
        cols.update(GENERATION_OPTIONAL)
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


def empty_nll() -> pd.DataFrame:
    """A zero-row NLL frame with the contract dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in NLL_COLUMNS.items()})


def check_name(kind: str, name: str) -> str:
    """Trajectory/configuration names become folder names: keep them plain."""
    if not _NAME_RE.match(name):
        raise CkptselError(f"{kind} name {name!r} must start with a letter/digit and use only letters, digits and ._+=@,-")
    return name


def coerce_generations(df: pd.DataFrame) -> pd.DataFrame:
    """Contract columns in contract order and dtypes (+ ``text`` when present)."""
    cols = dict(GENERATION_COLUMNS)
    if "text" in df.columns:
        cols.update(GENERATION_OPTIONAL)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise CkptselError(f"generation rows lack column(s) {missing}")
    return df[list(cols)].astype(cols).reset_index(drop=True)


def coerce_nll(df: pd.DataFrame) -> pd.DataFrame:
    """Contract columns in contract order and dtypes."""
    missing = [c for c in NLL_COLUMNS if c not in df.columns]
    if missing:
        raise CkptselError(f"NLL rows lack column(s) {missing}")
    return df[list(NLL_COLUMNS)].astype(NLL_COLUMNS).reset_index(drop=True)
