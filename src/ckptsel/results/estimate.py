"""An estimate and how it is printed: :class:`Estimate` (percentage points, with its interval;
*unresolved* when the interval contains 0) and :func:`fmt`, the one way a cell is printed, so
the terminal, Markdown, LaTeX and HTML show the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DIGITS = 6  # decimals stored in summary.json


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval; ``unresolved`` when the interval contains 0 (or is
    missing). Values are kept as computed; :meth:`to_dict` rounds them for ``summary.json``."""

    mean: float | None
    lo: float | None
    hi: float | None

    @property
    def unresolved(self) -> bool:
        if not (_finite(self.lo) and _finite(self.hi)):
            return True
        return bool(self.lo <= 0.0 <= self.hi)

    def to_dict(self) -> dict:
        """``{"mean", "lo", "hi", "unresolved"}``, rounded to :data:`DIGITS` (None if not finite)."""

        def r(x):
            return round(float(x) + 0.0, DIGITS) if _finite(x) else None

        return {"mean": r(self.mean), "lo": r(self.lo), "hi": r(self.hi), "unresolved": self.unresolved}

    @classmethod
    def from_dict(cls, d: dict | None) -> Estimate | None:
        """An estimate read back from ``summary.json`` (None when absent or without a mean).

        ``unresolved`` is then recomputed from the stored (rounded) bounds.
        """
        if not isinstance(d, dict) or d.get("mean") is None:
            return None
        return cls(d["mean"], d.get("lo"), d.get("hi"))


# --------------------------------------------------------------------------- formatting
def fmt(e: Estimate | dict | None, *, mean: bool = True, unit: str = "", mark: bool = True) -> str:
    """``"+1.23 [-0.40, +2.10] unresolved"`` (pp, two decimals); "–" when there is no estimate.

    ``mean=False`` prints the interval only, ``unit`` follows the mean (e.g. ``" pp"``), and
    ``mark=False`` leaves out the "unresolved" mark. A dict keeps its stored ``unresolved`` flag.
    """
    if isinstance(e, Estimate):
        e = e.to_dict()
    if not e or e.get("mean") is None:
        return "–"
    text = f"[{e['lo']:+.2f}, {e['hi']:+.2f}]"
    if mean:
        text = f"{e['mean']:+.2f}{unit} {text}"
    return text + (" unresolved" if mark and e["unresolved"] else "")
