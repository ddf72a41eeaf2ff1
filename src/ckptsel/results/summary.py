"""How a summary's numbers are read: its schema version, interval level and method, the budget
``D`` starts from, and the main table (rule × D, H(full), G(full)).
"""

from __future__ import annotations

from ckptsel.choose import RULE_ORDER
from ckptsel.defaults import BUDGETS, CONFIDENCE
from ckptsel.results.estimate import fmt

SCHEMA = 1


# how each interval method's configuration intervals are named in captions
# (the methods themselves: ckptsel.stats.intervals.METHODS)
INTERVAL_LABELS = {
    "percentile": "configuration-bootstrap",
    "cr2": "configuration cluster-robust t (CR2, Bell–McCaffrey df)",
    "wild": "configuration wild-bootstrap-t (Webb weights)",
}


def interval_label(summary: dict) -> str:
    """How a summary's configuration intervals were made, for captions."""
    return INTERVAL_LABELS[summary.get("interval", "percentile")]


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
