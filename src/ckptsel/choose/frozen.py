from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ckptsel._util.io import write_parquet, write_text
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.errors import CkptselError, VerificationError

CHOICES_FILE = "choices.parquet"
HASH_FILE = "choices.sha256"
COLUMNS = ["trajectory", "scheme", "rule", "budget", "step", "prob"]


# --------------------------------------------------------------------------- freezing
def canonical_bytes(table: pd.DataFrame, settings: ChoiceSettings) -> bytes:
    """The hashed form: settings as JSON, then one CSV row per choice, floats as ``repr``.

    Built column-wise (Arrow joins the fields of every row at once; each distinct probability
    is ``repr``-ed once, told apart by its bits so that ``-0.0`` stays ``-0.0``)."""
    t = table[COLUMNS]
    head = json.dumps(settings.to_dict(), sort_keys=True) + "\n" + ",".join(COLUMNS) + "\n"
    if len(t) == 0:
        return head.encode()
    fields = [_strings(t[c]) for c in COLUMNS[:4]]
    fields.append(pa.array(t["step"].to_numpy(dtype=np.int64)).cast(pa.string()))
    bits = np.ascontiguousarray(t["prob"].to_numpy(dtype=np.float64)).view(np.int64)
    distinct, which = np.unique(bits, return_inverse=True)
    fields.append(pa.array([f"{v!r}\n" for v in distinct.view(np.float64).tolist()]).take(which.ravel()))
    rows = pc.binary_join_element_wise(*fields, ",")  # no nulls: one contiguous run of bytes
    if isinstance(rows, pa.ChunkedArray):
        rows = rows.combine_chunks()
    width = np.dtype(np.int64 if pa.types.is_large_string(rows.type) else np.int32)
    offsets = np.frombuffer(rows.buffers()[1], dtype=width, count=len(rows) + 1, offset=width.itemsize * rows.offset)
    return head.encode() + bytes(memoryview(rows.buffers()[2])[offsets[0] : offsets[-1]])


def _strings(col: pd.Series) -> pa.Array:
    """``str`` of every value of ``col`` as an Arrow string array (a string column as it is)."""
    if isinstance(col.dtype, pd.StringDtype):
        arr = pa.array(col)
        if arr.null_count == 0:
            return arr.cast(pa.string())
    return pa.array(col.astype(str).to_numpy(dtype=object), type=pa.string())


def choices_hash(table: pd.DataFrame, settings: ChoiceSettings) -> str:
    return hashlib.sha256(canonical_bytes(table, settings)).hexdigest()


def freeze(table: pd.DataFrame, settings: ChoiceSettings, out_dir: Path) -> str:
    """Write the choices and their SHA-256 (of the canonical form). Returns the hash."""
    out_dir = Path(out_dir)
    digest = choices_hash(table, settings)
    stored = table[COLUMNS].copy()
    write_parquet(out_dir / CHOICES_FILE, stored)
    write_text(out_dir / HASH_FILE, json.dumps({"sha256": digest, "settings": settings.to_dict(), "rows": len(stored)}, indent=1) + "\n")
    return digest


@dataclass(frozen=True)
class FrozenChoices:
    """Choices read back from disk after their hash was checked. Only :func:`load_frozen` makes one."""

    table: pd.DataFrame
    settings: ChoiceSettings
    sha256: str

    def vectors(self, trajectory: str, steps: np.ndarray) -> dict[tuple[str, str, str], np.ndarray]:
        """``(scheme, rule, budget) -> (T,)`` selection probabilities over ``steps``."""
        rows, key_codes, keys = self._by_trajectory.get(trajectory, (None, None, None))
        if rows is None:
            raise CkptselError(f"trajectory {trajectory!r} has test records but no frozen choices")
        row_steps = self._steps[rows]
        col = np.searchsorted(steps, row_steps)
        if (col >= len(steps)).any() or not np.array_equal(steps[np.minimum(col, len(steps) - 1)], row_steps):
            raise CkptselError(f"trajectory {trajectory!r}: frozen choices name checkpoints that have no test records")
        mats = np.zeros((len(keys), len(steps)))
        mats[key_codes, col] = self._probs[rows]
        return {key: mats[i] for i, key in enumerate(keys)}

    @cached_property
    def _steps(self) -> np.ndarray:
        return self.table["step"].to_numpy()

    @cached_property
    def _probs(self) -> np.ndarray:
        return self.table["prob"].to_numpy()

    @cached_property
    def _by_trajectory(self) -> dict[str, tuple[np.ndarray, np.ndarray, list[tuple[str, str, str]]]]:
        """Per trajectory: its rows (in table order), each row's key code and the keys, in string
        order (one pass over the table for all trajectories)."""
        if self.table.empty:
            return {}
        traj, traj_names = pd.factorize(self.table["trajectory"])
        parts = [pd.factorize(self.table[c]) for c in ("scheme", "rule", "budget")]
        dims = [len(uniques) for _, uniques in parts]
        used, key = np.unique(np.ravel_multi_index([codes for codes, _ in parts], dims), return_inverse=True)
        names = [
            tuple(str(uniques[c]) for (_, uniques), c in zip(parts, cs, strict=True))
            for cs in zip(*np.unravel_index(used, dims), strict=True)
        ]
        rank = np.argsort(np.array(["\x00".join(k) for k in names]), kind="stable")  # (K,) string order
        key_rank = np.empty_like(rank)
        key_rank[rank] = np.arange(len(rank))
        key = key_rank[key]  # (rows,) each row's key, numbered in string order
        by_traj = np.argsort(traj, kind="stable")
        bounds = np.searchsorted(traj[by_traj], np.arange(len(traj_names) + 1))
        out = {}
        for t, name in enumerate(traj_names):
            rows = by_traj[bounds[t] : bounds[t + 1]]
            codes, inv = np.unique(key[rows], return_inverse=True)
            out[str(name)] = (rows, inv, [names[rank[c]] for c in codes])
        return out


def load_frozen(out_dir: Path) -> FrozenChoices:
    """Read frozen choices and verify their SHA-256 before anyone may use them."""
    out_dir = Path(out_dir)
    path, hpath = out_dir / CHOICES_FILE, out_dir / HASH_FILE
    if not path.is_file() or not hpath.is_file():
        raise CkptselError(f"{out_dir}: frozen choices not found ({CHOICES_FILE} and {HASH_FILE})")
    try:
        meta = json.loads(hpath.read_text(encoding="utf-8"))
        settings = ChoiceSettings(**meta["settings"])
        stored = str(meta["sha256"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, CkptselError) as err:
        raise VerificationError(f"{hpath}: not a readable choices hash file ({type(err).__name__}: {err})") from err
    try:
        table = pd.read_parquet(path)
        digest = choices_hash(table, settings)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise VerificationError(f"{path}: not readable frozen choices ({err})") from err
    if digest != stored:
        raise VerificationError(f"{path}: SHA-256 {digest} does not match the frozen hash {stored} in {hpath.name}")
    return FrozenChoices(table=table, settings=settings, sha256=digest)
