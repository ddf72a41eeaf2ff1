"""A results folder and how its numbers are read: file names, estimates, formatting, main table.

``ckptsel analyze`` writes, and the report, the CLI and ``verify`` read, one folder:
``summary.json`` (:data:`SUMMARY_FILE`, byte-stable), ``run.json`` (provenance), ``choices/``
(frozen choices and their hash) and ``tables/``. Every estimate in it is an
:class:`Estimate` (percentage points, with its interval); :func:`fmt` is the one way a cell
is printed, so the terminal, Markdown, LaTeX and HTML show the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckptsel.analysis.intervals import label as interval_label
from ckptsel.defaults import BUDGETS, CONFIDENCE
from ckptsel.rules import RULE_ORDER

SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"  # provenance (paths, version): kept out of summary.json so it stays byte-stable
CHOICES_DIR = "choices"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"
REPORT_FILE = "report.html"
SCHEMA = 1
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


def level_percent(summary: dict) -> int:
    """The interval level of a summary in percent (the default level when it does not say)."""
    return int(round(summary.get("confidence", CONFIDENCE) * 100))


def d_from(summary: dict) -> int:
    """The budget D starts from: ``D = G(full) − G(d_from)`` (summary ``"D_from"``, else 32)."""
    return int(summary.get("D_from", BUDGETS[0]))


def d_column(summary: dict) -> str:
    """The main table's D column header, naming the budget D starts from."""
    return f"D_r (full − {d_from(summary)})"


# --------------------------------------------------------------------------- main table
def main_table_rows(summary: dict) -> list[tuple[str, str, str, str]]:
    """(rule, D_r, H_r(full), G_r(full)) formatted as 'mean [lo, hi]' in pp."""
    rows = []
    for rule in RULE_ORDER:
        full = summary["budget"].get(rule, {}).get("full", {})
        rows.append((rule, fmt(summary["D"].get(rule)), fmt(full.get("H")), fmt(full.get("G"))))
    return rows


def main_table_markdown(summary: dict) -> str:
    pop = summary["population"]
    lines = [
        f"Main table — {pop['trajectories']} trajectories in {pop['configurations']} configurations; "
        f"percentage points, {level_percent(summary)}% {interval_label(summary)} intervals "
        f"({summary['draws']} draws).",
        "",
        f"| rule | {d_column(summary)} | H_r(full) vs matched NLL | G_r(full) vs final |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r} | {d} | {h} | {g} |" for r, d, h, g in main_table_rows(summary)]
    return "\n".join(lines) + "\n"
