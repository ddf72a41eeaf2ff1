"""Report figures (matplotlib, no GUI): budget curves, per-configuration gains, matched half,
and within-trajectory checkpoint curves, drawn from the typed summary
(:class:`ckptsel.results.Summary`, or its ``summary.json`` dict) and the results tables.

Figures are built on :class:`matplotlib.figure.Figure` directly (never ``pyplot``), so no
interactive backend is touched and nothing global is kept between calls; each function
returns the figure so tests can read its axes labels. :func:`save_figure` writes PNG and SVG
atomically.
"""

from __future__ import annotations

import io as _io
from collections.abc import Iterable
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ckptsel._util.io import write_bytes
from ckptsel.choose.rules import ALL_RULES, H_BASELINE, MATCHED_HALF_RULES, RULE_ORDER, SIGNAL_RULES, shown_rule
from ckptsel.errors import CkptselError
from ckptsel.records.schema import step_text
from ckptsel.results.summary import Gains, Summary, budget_order

FIGURE_FORMATS = ("png", "svg")
RULE_STYLE = {r.name: {"color": r.color, "marker": r.marker, "label": r.label} for r in ALL_RULES.values()}


def summary_own_rules(summary: Summary) -> list[str]:
    """A researcher's own rules in a summary (those that are not built in), after the averages'
    fixed choices (drawn beside the rules that choose: their G and H)."""
    averages = [r for r in summary.gains.rules if r not in ALL_RULES and shown_rule(r) is not None]
    return [*averages, *(r for r in summary.gains.rules if r not in ALL_RULES and shown_rule(r) is None)]


def _style(rule: str) -> dict:
    """A rule's color, marker and legend (an average's: its name; a researcher's own rule: brown
    triangles, its name)."""
    spec = shown_rule(rule)
    if spec is not None:
        return {"color": spec.color, "marker": spec.marker, "label": spec.label}
    return {"color": "#8c564b", "marker": "v", "label": f"{rule} (yours)"}


def budget_curve_figure(summary: Summary | dict, quantity: str = "G", gains: Gains | None = None, title: str | None = None) -> Figure:
    """G_r(n) (or H_r(n)) per rule against the validation budget, with shaded pointwise intervals.

    ``gains`` is the block drawn (default: the study's; e.g. a task's). The x axis is
    categorical: the finite budgets, then "full" (the whole eligible pool, whose size differs by
    dataset) after a small gap, so it is not read as a point on a number line.
    """
    summary = Summary.coerce(summary)
    gains = summary.gains if gains is None else gains
    budget = gains.budget
    rules = [r for r in RULE_ORDER if r in budget] + [r for r in budget if r not in RULE_ORDER]
    labels: list[str] = []
    for r in rules:
        labels += [b for b in gains.labels(r) if b not in labels]
    labels = budget_order(labels)
    pos = {b: (i + 0.5 if b == "full" else i) for i, b in enumerate(labels)}
    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for k, r in enumerate(rules):
        cells = [(b, e.as_stored()) for b in labels if (e := gains.get(quantity, r, b)) is not None and e.mean is not None]
        st = _style(r)
        dodge = (k - (len(rules) - 1) / 2) * 0.06  # separates the error bars at "full"
        finite = [(pos[b], e) for b, e in cells if b != "full"]
        full = [(pos[b] + dodge, e) for b, e in cells if b == "full"]
        for part, ls in ((finite, "-"), (full, "none")):
            if not part:
                continue
            x = np.array([p[0] for p in part], dtype=float)
            m = np.array([p[1].mean for p in part])
            # an estimate without an interval (not estimable) draws its point and no band
            lo = np.array([np.nan if p[1].lo is None else p[1].lo for p in part], dtype=float)
            hi = np.array([np.nan if p[1].hi is None else p[1].hi for p in part], dtype=float)
            first = part is finite or not finite  # one legend entry per rule
            ax.plot(x, m, linestyle=ls, marker=st["marker"], color=st["color"], label=st["label"] if first else None)
            if len(part) > 1:
                ax.fill_between(x, lo, hi, color=st["color"], alpha=0.15, linewidth=0)
            elif np.isfinite(lo).all() and np.isfinite(hi).all():
                ax.errorbar(x, m, yerr=[m - lo, hi - m], color=st["color"], capsize=4, linestyle="none")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks([pos[b] for b in labels], labels)
    ax.set_xlabel("validation budget n (items; 'full' = whole eligible pool)")
    what = "G_r(n): gain over the final checkpoint" if quantity == "G" else "H_r(n): gain over matched-NLL selection"
    ax.set_ylabel(f"{what} (pp)")
    ax.set_title(title or f"{quantity}_r(n) by validation budget, {summary.level_percent}% intervals")
    if ax.get_legend_handles_labels()[0]:  # nothing to label when a rule set is empty
        ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3)
    return fig


def configuration_gain_figure(per_configuration: pd.DataFrame, rules: Iterable[str] = SIGNAL_RULES) -> Figure:
    """Per-configuration G_r(full) (vs final) and H_r(full) (vs matched NLL), grouped by task."""
    df = per_configuration.sort_values(["task", "configuration"], kind="stable").reset_index(drop=True)
    rules = [r for r in rules if f"G|nested|{r}|full" in df.columns]
    n = len(df)
    panels = [("G", "G_r(full): gain over the final checkpoint (pp)")]
    if _has_h_columns(df, rules):  # no H panel without NLL records: it would be empty
        panels.append(("H", "H_r(full): gain over matched-NLL selection (pp)"))
    width = 10.0 if len(panels) == 2 else 6.0
    fig = Figure(figsize=(width, max(2.5, 0.45 * n + 1.6)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True, squeeze=False)[0])
    y = np.arange(n)[::-1]
    for ax, (q, xlabel) in zip(axes, panels, strict=True):
        for k, r in enumerate(rules):
            col = f"{q}|nested|{r}|full"
            if (q == "H" and r == H_BASELINE) or col not in df.columns:
                continue  # H_nll is 0 by definition; no H at all without NLL records
            st = _style(r)
            ax.plot(
                df[col].to_numpy(float), y + (k - 1) * 0.12, linestyle="none", marker=st["marker"], color=st["color"], label=st["label"]
            )
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        # task separators
        tasks = df["task"].to_numpy()
        for i in range(1, n):
            if tasks[i] != tasks[i - 1]:
                ax.axhline(y[i] + 0.5, color="grey", linewidth=0.6, linestyle="--")
    axes[0].set_yticks(y, [f"{t}: {c}" for t, c in zip(df["task"], df["configuration"], strict=True)], fontsize=8)
    axes[0].set_ylabel("configuration (grouped by task)")
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle("Per-configuration gains at the full validation pool (mean over seeds)")
    return fig


def _has_h_columns(per_configuration: pd.DataFrame, rules: Iterable[str] = SIGNAL_RULES) -> bool:
    """Whether some rule other than matched NLL has a per-configuration H(full) to draw."""
    cols = [f"H|nested|{r}|full" for r in rules if r != H_BASELINE]
    return any(c in per_configuration.columns and per_configuration[c].notna().any() for c in cols)


def _has_estimate(gains: Gains, quantity: str) -> bool:
    """Whether some rule has a ``quantity`` (G or H) estimate with a mean at some budget."""
    return any((e := gains.get(quantity, r, b)) is not None and e.mean is not None for r in gains.budget for b in gains.labels(r))


def _has_nll_curve(curves: pd.DataFrame) -> bool:
    return "validation_nll" in curves.columns and bool(curves["validation_nll"].notna().any())


def figure_notes(summary: Summary | dict, per_configuration: pd.DataFrame, curves: pd.DataFrame) -> list[str]:
    """One line for each figure or panel left out because it would have nothing to draw."""
    summary = Summary.coerce(summary)
    notes = []
    if not summary.population.has_nll:
        notes.append(
            "no NLL records: the matched-NLL rule and H are not computed, so the H figure, the "
            "per-configuration H panel and the NLL panel are left out"
        )
    else:
        if not _has_estimate(summary.gains, "H"):
            notes.append("no H estimate at any budget: the H figure is left out")
        elif not _has_h_columns(per_configuration):
            notes.append("no per-configuration H: its panel is left out")
        if not curves.empty and not _has_nll_curve(curves):
            notes.append("no validation NLL per checkpoint: the NLL panel is left out")
    if not _has_estimate(summary.gains, "G"):
        notes.append("no G estimate at any budget: the G figure is left out")
    if not any(f"MH|{r}|G_in" in per_configuration.columns for r in MATCHED_HALF_RULES):
        notes.append("no matched-half estimates: the matched-half figure is left out")
    if curves.empty:
        notes.append("no checkpoint curves: the within-trajectory figure is left out")
    return notes


def matched_half_figure(per_configuration: pd.DataFrame, summary: Summary | dict | None = None) -> Figure:
    """Selection-half gain G_in against complementary-half gain G_out, per configuration.

    Points above the diagonal would mean the rule does better on items it never saw; the
    vertical distance to the diagonal is the same-item optimism B.
    """
    summary = None if summary is None else Summary.coerce(summary)
    fig = Figure(figsize=(5.6, 5.0), layout="constrained")
    ax = fig.add_subplot()
    vals = []
    for r in MATCHED_HALF_RULES:
        gi, go = f"MH|{r}|G_in", f"MH|{r}|G_out"
        if gi not in per_configuration.columns:
            continue
        st = _style(r)
        x, yv = per_configuration[gi].to_numpy(float), per_configuration[go].to_numpy(float)
        vals += [x, yv]
        ax.plot(x, yv, linestyle="none", marker=st["marker"], color=st["color"], alpha=0.6, label=f"{st['label']}: configurations")
        mh = None if summary is None else summary.matched_half.get(r)
        if mh is not None and mh.G_in.mean is not None and mh.G_out.mean is not None:
            gi, go = mh.G_in.as_stored(), mh.G_out.as_stored()
            ax.errorbar(
                gi.mean,
                go.mean,
                xerr=[[gi.mean - gi.lo], [gi.hi - gi.mean]] if gi.estimable else None,
                yerr=[[go.mean - go.lo], [go.hi - go.mean]] if go.estimable else None,
                marker=st["marker"],
                markersize=10,
                color=st["color"],
                markeredgecolor="black",
                capsize=3,
                label=f"{st['label']}: mean, {summary.level_percent}% intervals",
            )
    finite = np.concatenate(vals) if vals else np.array([0.0])
    finite = finite[np.isfinite(finite)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    pad = 0.1 * max(hi - lo, 1.0)
    lim = (min(lo, 0.0) - pad, max(hi, 0.0) + pad)
    ax.plot(lim, lim, color="black", linewidth=0.8, linestyle="--", label="G_out = G_in (no optimism)")
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.axvline(0.0, color="grey", linewidth=0.5)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("G_in: gain on the half used to choose (pp)")
    ax.set_ylabel("G_out: gain on the complementary half (pp)")
    ax.set_title("Matched half: same-item optimism")
    ax.legend(fontsize=7, loc="upper left")
    return fig


def trajectory_figure(curves: pd.DataFrame, trajectory: str | None = None) -> Figure:
    """Test accuracy, validation accuracy and validation matched NLL per checkpoint of one trajectory."""
    if curves.empty:
        raise CkptselError("checkpoint_curves table is empty; no trajectory to plot")
    names = list(dict.fromkeys(curves["trajectory"]))
    trajectory = trajectory or names[0]
    if trajectory not in names:
        raise CkptselError(
            f"trajectory {trajectory!r} not in the results (known: {', '.join(names[:10])}{' …' if len(names) > 10 else ''})"
        )
    d = curves[curves["trajectory"] == trajectory].sort_values("step")
    averages, d = d[d["step"] < 0], d[d["step"] >= 0]  # averages: a marker each, beside the final step
    steps = d["step"].to_numpy()
    has_nll = _has_nll_curve(d)
    fig = Figure(figsize=(7.0, 5.6 if has_nll else 3.4), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1, sharex=True) if has_nll else (fig.add_subplot(), None)
    ax1.plot(steps, d["test_accuracy"], marker="o", color="#1f77b4", label="test accuracy")
    ax1.plot(steps, d["validation_accuracy"], marker="s", color="#ff7f0e", label="validation accuracy (eligible pool)")
    ax1.axvline(steps[-1], color="grey", linestyle=":", linewidth=1.0, label="final checkpoint")
    for (_, a), marker in zip(averages.iterrows(), "*PXh8p", strict=False):
        ax1.scatter(
            [steps[-1]], [a["test_accuracy"]], marker=marker, s=90, color="#17becf", zorder=3, label=f"{step_text(a['step'])} (test)"
        )
    ax1.set_ylabel("accuracy (%)")
    ax1.legend(fontsize=8, loc="best")
    ax1.grid(alpha=0.3)
    task = d["task"].iloc[0] if "task" in d else ""
    fig.suptitle(f"Within-trajectory curves: {trajectory} ({task})")
    if ax2 is None:  # no NLL records: no NLL panel
        ax1.set_xlabel("training step (checkpoint)")
        return fig
    ax2.plot(steps, d["validation_nll"], marker="^", color="#d62728", label="validation matched NLL (per token)")
    ax2.axvline(steps[-1], color="grey", linestyle=":", linewidth=1.0)
    ax2.set_xlabel("training step (checkpoint)")
    ax2.set_ylabel("matched NLL (nats / token)")
    ax2.legend(fontsize=8, loc="best")
    ax2.grid(alpha=0.3)
    return fig


def figure_bytes(fig: Figure, fmt: str, dpi: int = 110) -> bytes:
    """The figure rendered as ``png`` or ``svg`` bytes."""
    buf = _io.BytesIO()
    # fixed metadata keeps SVG output stable between runs
    # and a fixed hash salt replaces the random ids of clip paths and glyphs
    meta = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "ckptsel"}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=meta)
    return buf.getvalue()


def save_figure(fig: Figure, out_dir: Path, name: str, formats: Iterable[str] = FIGURE_FORMATS) -> dict[str, Path]:
    """Write ``name.png`` / ``name.svg`` atomically; return ``{format: path}``."""
    out = {}
    for fmt in formats:
        if fmt not in FIGURE_FORMATS:
            raise CkptselError(f"unknown figure format {fmt!r}; choose from {list(FIGURE_FORMATS)}")
        path = Path(out_dir) / f"{name}.{fmt}"
        write_bytes(path, figure_bytes(fig, fmt))
        out[fmt] = path
    return out


def all_figures(
    summary: Summary | dict, per_configuration: pd.DataFrame, curves: pd.DataFrame, trajectory: str | None = None
) -> dict[str, Figure]:
    """Every report figure with something to draw, by file stem, in reading order (what is
    left out, and why: :func:`figure_notes`)."""
    summary = Summary.coerce(summary)
    figs = {}
    if _has_estimate(summary.gains, "G"):
        figs["budget_curves_G"] = budget_curve_figure(summary, "G")
    if _has_estimate(summary.gains, "H"):
        figs["budget_curves_H"] = budget_curve_figure(summary, "H")
    figs["configuration_gains"] = configuration_gain_figure(per_configuration, [*SIGNAL_RULES, *summary_own_rules(summary)])
    if any(f"MH|{r}|G_in" in per_configuration.columns for r in MATCHED_HALF_RULES):
        figs["matched_half"] = matched_half_figure(per_configuration, summary)
    if not curves.empty:
        figs["trajectory_curves"] = trajectory_figure(curves, trajectory)
    return figs


FIGURE_NAMES = ("budget_curves_G", "budget_curves_H", "configuration_gains", "matched_half", "trajectory_curves")
