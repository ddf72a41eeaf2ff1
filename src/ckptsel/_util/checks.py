"""The one validator of settings values: integers, numbers, levels, seeds and choices.

Every settings object (``ChoiceSettings``, ``StatSettings``, ``MeasureConfig``,
``ExecutorConfig``, ``SelectSettings``, …) checks its fields here in ``__post_init__``, so the
CLI, a study file and a Python caller get the same one-line :class:`CkptselError`, naming the
option, before any work starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

from ckptsel.errors import CkptselError

MAX_SEED = 2**63 - 1
MAX_STEP = 2**63 - 1  # records store steps as int64 (every reader of a step checks it)


def _range(low, high) -> str:
    if low is not None and high is not None:
        return f"between {low} and {high}"
    return f">= {low}" if low is not None else f"<= {high}"


def check_int(value, what: str, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` within ``[low, high]`` (booleans are not integers)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise CkptselError(f"{what} must be an integer {_range(low, high)} (got {value!r})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise CkptselError(f"{what} must be an integer {_range(low, high)} (got {value!r})")
    return int(value)


def check_number(value, what: str, *, low: float | None = None, high: float | None = None) -> float:
    """``value`` as a finite ``float`` within ``[low, high]``."""
    ok = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    if not ok or (low is not None and value < low) or (high is not None and value > high):
        raise CkptselError(f"{what} must be a number {_range(low, high)} (got {value!r})")
    return float(value)


def check_level(value, what: str = "--confidence") -> float:
    """A probability strictly between 0 and 1 (an interval level, a target)."""
    ok = not isinstance(value, bool) and isinstance(value, Real) and 0.0 < value < 1.0
    if not ok:
        raise CkptselError(f"{what} must be between 0 and 1 (got {value!r})")
    return float(value)


def check_seed(value, what: str = "--seed") -> int:
    """A seed: an integer between 0 and 2**63 - 1 (NumPy's and SplitMix64's range)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= value <= MAX_SEED:
        raise CkptselError(f"{what} must be between 0 and 2**63 - 1 (got {value!r})")
    return int(value)


def check_choice(value, what: str, choices: Iterable[str]) -> str:
    """One of ``choices``."""
    known = tuple(choices)
    if value not in known:  # None among the choices: the option may be left out
        names = ", ".join(str(k) for k in known if k is not None)
        raise CkptselError(f"{what} must be one of {names}, not {value!r}")
    return value
