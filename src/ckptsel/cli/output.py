"""What the commands print, shared: the console, the measurement progress bars, the tables
of ``select``, ``compare`` and ``plan``, and the JSON object each reporting command prints
with ``--json`` (:func:`json_flag`, :data:`JSON_SCHEMAS`, :func:`print_json`) (the options
several commands share are in :mod:`~ckptsel.cli.options`).

The measurement runner has no UI code: it reports :class:`ckptsel.measure.ProgressEvent` s,
which :func:`progress_bars` renders as rich progress bars (one for the run, one for the
checkpoint being measured, each with its items/s).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from ckptsel.records.schema import candidate_name, step_text
from ckptsel.results.estimate import fmt

if TYPE_CHECKING:
    from ckptsel.results.summary import KeepTable
    from ckptsel.workflows.advise.selection import Selection

# Piped to a file or a program, rich would wrap every line at 80 columns and fold the numbers
# in a table's cells; such a stream gets a width no line reaches, so each keeps its numbers whole.
PIPED_WIDTH = 10_000


def _console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width, or :data:`PIPED_WIDTH` when the
    stream is not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty())
    return Console(stderr=stderr, width=PIPED_WIDTH if piped else None)


console = _console()
err_console = _console(stderr=True)  # what a --json command says besides its JSON object


# --------------------------------------------------------------------------- measure


@contextlib.contextmanager
def progress_bars(enabled: bool = True) -> Iterator[Callable[[Any], None]]:
    """A ``measure_run`` progress callback that draws rich bars (none when not ``enabled``)."""
    from rich.progress import (  # only when measuring (see ckptsel.cli)
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, disable=not enabled, transient=False) as bar:
        state: dict[str, Any] = {}
        steps: dict[int, dict[str, Any]] = {}  # per checkpoint being measured: its bar, counts

        def rate(done: int, since: float) -> str:
            return f"{done / max(time.perf_counter() - since, 1e-9):.1f} items/s"

        def on_event(ev: Any) -> None:
            # a batch of checkpoints (several adapters in one vLLM call) sends its events
            # interleaved: each checkpoint keeps its own bar, found by its step
            if ev.kind == "run":
                state.update(t0=time.perf_counter(), done=0, recorded=0, units=0)
                state.update(name=ev.trajectory, n_units=ev.units)
                state["overall"] = bar.add_task(ev.trajectory, total=ev.total, rate="")
            elif ev.kind == "step":
                total = max(ev.total, 1)
                label = f"step {ev.step}" if ev.step >= 0 else candidate_name(ev.step)  # an average
                task = bar.add_task(f"  {label}", total=total, rate="")
                steps[ev.step] = dict(task=task, t0=time.perf_counter(), done=0, total=total)
            elif ev.kind == "items":
                state["done"] += ev.done
                step = steps.get(ev.step)
                if step is not None:
                    step["done"] += ev.done
                    bar.update(step["task"], advance=ev.done, rate=rate(step["done"], step["t0"]))
                bar.update(state["overall"], advance=ev.done, rate=rate(state["done"], state["t0"]))
            elif ev.kind == "step_done":
                state["recorded"] += ev.total
                state["units"] += 1
                units = f"{state['name']} ({state['units']}/{state['n_units']} checkpoints)"
                bar.update(state["overall"], completed=state["recorded"], description=units)
                step = steps.pop(ev.step, None)
                if step is not None:
                    bar.update(step["task"], completed=step["total"])
                    bar.remove_task(step["task"])

        yield on_event


# --------------------------------------------------------------------------- select


def _clusters(clusters: int | None, items: int) -> str:
    """Text naming the clusters when items share groups (resampled together), else empty."""
    return f" in {clusters} clusters" if clusters is not None and clusters < items else ""


def _named(step: str) -> str:
    """A step key of a probabilities map in words (an average's reserved step by its name)."""
    return step_text(int(step)) if step.lstrip("-").isdigit() else step


def _first_checkpoint(steps) -> int:
    return next((s for s in steps if s >= 0), steps[0])


def _averages_said(steps) -> str:
    """`` and average-last3, ema-0.9`` when the candidates include averages."""
    names = [step_text(s) for s in steps if s < 0]
    return f" and {', '.join(names)}" if names else ""


def print_selection(result: Selection) -> None:
    """The human-readable form of :func:`ckptsel.workflows.select_checkpoint`'s answer."""
    s = result.settings
    level = int(round(s.level * 100))
    table = Table(
        title=f"{result.trajectory} ({result.task}): checkpoints {_first_checkpoint(result.steps)}…{result.final_step}{_averages_said(result.steps)} "
        f"(final = {result.final_step}), {result.validation_items} eligible validation items"
        + _clusters(result.validation_clusters, result.validation_items)
        + (f", {result.test_items} test items" if result.test_items else ", no test records")
    )
    for col in (
        "rule",
        "full-pool choice",
        "budget curve (n → step, prob.)",
        f"split-validation gain, pp ({level}%)",
        f"test gain, pp ({level}%)",
    ):
        table.add_column(col)
    for rule, r in result.rules.items():
        choice = ", ".join(f"{_named(st)} ({p:.2f})" if p < 1 else _named(st) for st, p in r.probabilities.items())
        curve = "; ".join(f"{c.budget} → {step_text(c.most_likely_step)} ({c.probability:.2f})" for c in r.budget_curve)
        test = None if r.test is None else r.test.estimate
        table.add_row(rule, choice, curve, fmt(r.split_validation.estimate), fmt(test))
    console.print(table)
    rec = result.recommendation
    what = (
        "keep the final checkpoint" if rec.keep_final else f"keep {'checkpoint ' if rec.keep_step >= 0 else ''}{step_text(rec.keep_step)}"
    )
    colour = "yellow" if rec.keep_final else "green"
    console.print(f"[bold {colour}]recommendation: {what}[/bold {colour}] (step {rec.keep_step}) — {rec.reason}.")
    _print_best(result, level)
    _print_checks(result)
    console.print(
        f"split validation: choose on one random half of the eligible validation pool (items sharing a group "
        f"kept on one side), score accuracy on the other half ({s.partitions} partitions, both directions); interval: {s.draws} question-bootstrap draws "
        f"× {s.bootstrap_partitions} partitions, the choice redone on each."
    )


def _print_checks(result: Selection) -> None:
    """The degenerate checkpoints (one answer to most items) and what was skipped, when any."""
    check = result.answer_check
    if check is not None and check.flagged:
        steps = "; ".join(check.describe(st) for st in check.flagged)
        console.print(
            f"[bold red]degenerate checkpoint(s)[/bold red] ({check.rule_words}): {steps} — "
            "its accuracy comes from the items whose gold answer is the one it gives; "
            + (
                "--allow-degenerate lets it be recommended."
                if check.settings.allow
                else "it is never recommended (--allow-degenerate keeps it, saying so)."
            ),
            soft_wrap=True,
        )
    fb = result.fallback
    if fb is not None and any(fb.shares.values()):
        shares = ", ".join(f"{st}: {100 * x:.0f}%" for st, x in fb.shares.items())
        console.print(
            "correct validation answers found only by the answer rule's fallback (e.g. gsm8k's last "
            f"number without 'The answer is'), by step: {shares}"
            + (" — counted wrong here (--strict-answers)." if fb.strict else "; --strict-answers counts them wrong."),
            soft_wrap=True,
        )
    for line in result.notes:
        console.print(f"note: {line}.", soft_wrap=True)


def print_keep_table(keep: KeepTable, notes: tuple[str, ...] = ()) -> None:
    """Which checkpoint to keep per trajectory (``select --all``; ``summary.json``'s keep);
    ``notes``: lines said once for the table (rules skipped, degenerate checkpoints)."""
    level = int(round(float(keep.settings["level"]) * 100))
    table = Table(title=f"which checkpoint to keep: rule {keep.rule}, {len(keep.trajectories)} trajectories")
    for col in ("trajectory", "configuration", "final", "chosen", f"split-validation gain, pp ({level}%)", "keep"):
        table.add_column(col, no_wrap=col != "chosen")
    for row in keep.trajectories:
        what = f"{row.keep_step} (final)" if row.keep_final else f"{row.keep_step}"
        chosen = ", ".join(map(str, row.choice)) or "–"
        table.add_row(row.trajectory, row.configuration, str(row.final_step), chosen, fmt(row.gain), what)
    console.print(table)
    kept = [r for r in keep.trajectories if not r.keep_final]
    console.print(
        f"{len(kept)} of {len(keep.trajectories)} trajectories keep an earlier checkpoint: its "
        f"split-validation gain over the final one is resolved above 0; the others keep the final checkpoint."
    )
    for row in keep.trajectories:
        if not row.choice:
            console.print(f"{row.trajectory}: {row.reason}", soft_wrap=True)
    if keep.provisional is not None:
        console.print(f"This table was {keep.provisional}.", soft_wrap=True)
    for line in notes:
        console.print(f"note: {line}", soft_wrap=True)


def _print_best(result: Selection, level: int) -> None:
    """The plausibly-best set and the selection-corrected estimate, when present."""
    pb, ce = result.plausibly_best, result.chosen_estimate
    if pb is not None:
        console.print(
            f"plausibly best ({level}% model confidence set: a truly best checkpoint is left out "
            f"with probability ≤ {1 - pb.level:.2g}): steps [bold]{', '.join(map(step_text, pb.steps))}"
            f"[/bold] — the validation data cannot tell these apart"
            + (
                f" (steps {', '.join(map(step_text, pb.kept_by_exact_test))} kept: an exact paired test against the "
                "most accurate one cannot reject at this size)."
                if pb.kept_by_exact_test
                else "."
            )
        )
    if ce is not None:
        console.print(
            f"accuracy of step {', '.join(map(step_text, ce.steps))} (highest validation accuracy) on new "
            f"items, corrected for having been chosen: [bold]{ce.mean:.2f}%[/bold] "
            f"[{ce.lo:.2f}, {ce.hi:.2f}] ({level}%, "
            + ("exact Clopper-Pearson: no variance to approximate" if ce.exact else "Andrews-Kitagawa-McCloskey hybrid")
            + "); the "
            f"naive {ce.naive_mean:.2f}% [{ce.naive_lo:.2f}, {ce.naive_hi:.2f}] is "
            f"{ce.naive_mean - ce.mean:+.2f} pp optimistic."
        )


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def print_comparison(result: dict) -> None:
    """The human-readable form of :func:`ckptsel.workflows.compare_checkpoints`'s answer."""
    a, b = result["a"], result["b"]
    level = int(round(result["settings"]["level"] * 100))
    name_a = f"{a['trajectory']}@{step_text(a['step'])}"
    name_b = f"{b['trajectory']}@{step_text(b['step'])}"
    table = Table(title=f"A = {name_a}  vs  B = {name_b}  (paired, same items)")
    for col in ("split", "items (clusters)", "acc A %", "acc B %", f"A − B pp [{level}%]", "✓✓/A/B/✗✗", "McNemar p"):
        table.add_column(col, no_wrap=col in ("split", "items (clusters)"))
    for split, r in result["splits"].items():
        if r is None:
            table.add_row(split, "no records", "–", "–", "–", "–", "–")
            continue
        t = r["table"]
        diff = fmt(r["difference"])  # the stored estimate, printed like every other
        table.add_row(
            split,
            f"{r['items']} ({r['clusters']})",
            f"{r['accuracy_a']:.2f}",
            f"{r['accuracy_b']:.2f}",
            diff,
            f"{t['both_correct']} / {t['only_a']} / {t['only_b']} / {t['both_wrong']}",
            _p(r["mcnemar_p"]) + (" (clustered)" if "mcnemar_method" in r else ""),
        )
    console.print(table)
    console.print(
        "✓✓/A/B/✗✗: items both right / only A right / only B right / both wrong; McNemar p: exact "
        "two-sided binomial test on the discordant items."
    )
    for split, r in result["splits"].items():
        if r and "mcnemar_method" in r:
            console.print(
                f"{split}: items share groups ({r['items']} items in {r['clusters']} clusters), so its McNemar p "
                "is the clustered test (exact sign-flip test of whole clusters' only A − only B; Durkalski "
                "et al. 2003); the plain McNemar test would treat the items as independent "
                f"(p = {_p(r['mcnemar_p_items'])}) and reject a true null too often."
            )
    for split, r in result["splits"].items():
        for side, name in (("a", name_a), ("b", name_b)):
            ans = (r or {}).get("answers", {}).get(side)
            if ans and ans["degenerate"]:
                console.print(
                    f"[bold red]{split}: {side.upper()} = {name} is degenerate[/bold red]: it gives one answer to "
                    f"{100 * ans['most_common_share']:.0f}% of its {ans['items']} {split} items and is right on "
                    f"{100 * ans['most_common_right']:.0f}% of those, so its accuracy comes from the items whose "
                    "gold answer is the one it gives.",
                    soft_wrap=True,
                )
    for split, r in result["splits"].items():
        shares = [(side, (r or {}).get("answers", {}).get(side, {}).get("fallback_right")) for side in ("a", "b")]
        if any(x is not None for _, x in shares):
            console.print(
                f"{split}: correct answers found only by the answer rule's fallback (e.g. gsm8k's last number "
                "without 'The answer is'): " + ", ".join(f"{side.upper()} {100 * x:.0f}%" for side, x in shares if x is not None) + ".",
                soft_wrap=True,
            )
    for split, r in result["splits"].items():
        if r and (r["not_shared"]["only_in_a"] or r["not_shared"]["only_in_b"]):
            console.print(
                f"{split}: compared on the {r['items']} shared items; "
                f"{r['not_shared']['only_in_a']} item(s) "
                f"only in A's pool and {r['not_shared']['only_in_b']} only in B's were left out."
            )
    console.print(
        "Interval: Newcombe's score interval of a paired difference when every item is its own "
        f"group, else {result['settings']['draws']} bootstrap draws of whole clusters (items "
        "sharing a group are resampled together). A difference reads resolved only when its "
        "interval excludes 0 and the exact McNemar test rejects; one containing 0 is unresolved, "
        "not 'no difference'."
    )


def print_log_comparison(result: dict) -> None:
    """The human-readable form of :func:`ckptsel.workflows.compare_logs`'s answer."""
    a, b, settings = result["a"], result["b"], result["settings"]
    level = int(round(settings["level"] * 100))
    console.print(f"A = {a['log']} ({a['harness']}, {a['samples']} samples)")
    console.print(f"B = {b['log']} ({b['harness']}, {b['samples']} samples)")
    correction = {"holm": "Holm", "bh": "BH"}[settings["correction"]]
    table = Table(title="A vs B (paired, same samples)")
    for col in (
        "task",
        "split",
        "items (clusters)",
        "acc A %",
        "acc B %",
        f"A − B pp [{level}%]",
        "✓✓/A/B/✗✗",
        "McNemar p",
        f"{correction} p",
        "items needed",
    ):
        table.add_column(col, no_wrap=col in ("task", "split", "items (clusters)"))
    for r in result["comparisons"]:
        t = r["table"]
        note = r.get("items_needed_note") or ""  # "over N items" past the search; else "–"
        needed = str(r["items_needed"]) if r["items_needed"] is not None else (note if note.startswith("over") else "–")
        table.add_row(
            r["task"],
            r["split"],
            f"{r['items']} ({r['clusters']})",
            f"{r['accuracy_a']:.2f}",
            f"{r['accuracy_b']:.2f}",
            fmt(r["difference"]),
            f"{t['both_correct']} / {t['only_a']} / {t['only_b']} / {t['both_wrong']}",
            _p(r["mcnemar_p"]) + (" (clustered)" if "mcnemar_method" in r else ""),
            _p(r["mcnemar_p_adjusted"]),
            needed,
        )
    console.print(table)
    for r in result["comparisons"]:
        gone = r["not_shared"]
        if gone["only_in_a"] or gone["only_in_b"]:
            console.print(
                f"{r['task']}: compared on the {r['items']} shared samples; {gone['only_in_a']} "
                f"only in A and {gone['only_in_b']} only in B were left out."
            )
        if r.get("different_items"):
            console.print(
                f"{r['task']}: {r['different_items']} shared id(s) name different items in the "
                "two logs, paired anyway (--allow-different-items)."
            )
    if settings.get("rescore"):
        console.print("Correctness: re-scored with the task's rule, not the logs' (--rescore).")
    console.print(
        "✓✓/A/B/✗✗: samples both right / only A / only B / both wrong. McNemar p: exact binomial "
        "test on the discordant samples (clustered: sign flips of whole groups, when samples "
        f"share groups); {correction} p: adjusted across the {len(result['comparisons'])} "
        f"comparison(s); a difference whose {correction} p is above {1 - settings['level']:.3g} "
        f"reads unresolved. Interval: Newcombe's score interval (samples in groups: "
        f"{settings['draws']} bootstrap draws of whole groups); one containing 0 is unresolved. Items needed: independent items from which on the exact "
        f"McNemar test at this level keeps {int(100 * settings['power'])}% power at the observed "
        "discordance (its power is not monotone in the items)."
    )


# --------------------------------------------------------------------------- plan


def print_plan(pilot: dict | None, closed: dict | None) -> None:
    """The human-readable form of :func:`ckptsel.workflows.plan_from_pilot` and
    :func:`ckptsel.workflows.closed_form` (either may be None)."""
    if pilot is not None:
        _print_pilot_plan(pilot)
    if closed is not None:
        _print_closed_form(closed)


def _print_pilot_plan(pilot: dict) -> None:
    s = pilot["settings"]
    trajs = pilot["trajectories"]
    calibrated = s["method"] == "calibrated"
    how = f"promise at {100 * s['level']:g}% confidence" if calibrated else f"{s['method']} resampling (not calibrated)"
    table = Table(
        title=f"plan from pilot records: rule {pilot['rule']}, {len(trajs)} trajectory(ies), "
        f"pilot {pilot['pilot_items']} items (smallest), {how}, {s['draws']} draws per budget"
    )
    cols = ["budget", "× pilot", "E gain over final, pp", "P(beats final)", "P(worse than final)", "P(keeps final)"]
    if calibrated:
        cols += ["P(beats) if the pilot were exact", "plan"]
    for col in cols:
        table.add_column(col, justify="right")
    marks = {pilot["smallest_budget"]: "smallest (estimate)", pilot["safe_budget"]: "safe (promised)"}
    if pilot["smallest_budget"] == pilot["safe_budget"]:
        marks = {pilot["safe_budget"]: "safe = smallest"}
    for r in pilot["rows"]:
        x = f"{r['extrapolation']:.2f}" + ("*" if r["extrapolation"] > 1 else "")
        cells = [str(r["budget"]), x, f"{r['gain']:+.2f}", f"{r['p_beat']:.3f}", f"{r['p_worse']:.3f}", f"{r['p_final']:.3f}"]
        if calibrated:
            cells += [f"{r['p_beat_point']:.3f}", marks.get(r["budget"], "")]
        table.add_row(*cells)
    console.print(table)
    answer = pilot["answer"]
    console.print(f"[bold]{answer}[/bold]." if pilot["reaches_target"] else f"[bold red]{answer}[/bold red].")
    if calibrated:
        small, safe = pilot["smallest_budget"], pilot["safe_budget"]
        console.print(
            f"Smallest budget whose estimate reaches {s['target']:g} (the pilot taken as exact; "
            f"not guaranteed): {small if small is not None else 'none'}; safe budget (promised): "
            f"{safe if safe is not None else 'none'}. Power left on the table: "
            f"{pilot['power_left']['note']}."
        )
        console.print(
            "The promise holds for every truth the pilot cannot rule out at that confidence "
            "(checkpoints not confidently better than the final one are taken as ties), so a "
            "pilot that cannot tell a gain from noise gets no plan: measure a larger pilot, or "
            "keep the final checkpoint."
        )
    else:
        console.print(
            "Truth = accuracy on the pilot pool; budgets above the pilot size (*) extrapolate "
            "(the pilot's differences are taken as exact), and a small pilot makes truly equal "
            "checkpoints look different, so P(beats final) is optimistic there."
        )


def _print_closed_form(closed: dict) -> None:
    table = Table(
        title=f"closed form: candidate better than final by δ = {closed['delta']:g} pp, "
        f"agreement {closed['agreement']:g} (discordant {closed['discordant']:.3f})"
    )
    for col in ("budget", "P(rule picks the better)", "E gain, pp", "paired SE, pp", "paired MDE, pp"):
        table.add_column(col, justify="right")
    for r in closed["rows"]:
        mde = f"{r['mde']:.2f}" + ("" if r["detectable"] else "*")
        table.add_row(str(r["budget"]), f"{r['p_pick']:.3f}", f"{r['gain']:+.2f}", f"{r['se']:.2f}", mde)
    console.print(table)
    console.print(
        f"planned budget (paired MDE = {closed['delta']:g} pp at level {closed['level']:.2f}, "
        f"power {closed['target']:.2f}): [bold]{closed['budget_mde']}[/bold] items; below it a "
        f"real gain of {closed['delta']:g} pp cannot be told from noise (* = MDE above δ). "
        f"P(pick) ≥ {closed['target']:.2f} alone needs {closed['budget_to_pick']}; the McNemar "
        f"budget is {closed['budget_for_test']} (normal approximation)."
    )


# --------------------------------------------------------------------------- --json
# One schema per command: the keys of the JSON object ``--json`` prints on stdout, in order,
# with what each holds. docs/reference/json.md is generated from this table and the tests
# check every command's object against it; with --json everything else goes to stderr.
_SELECTION_KEYS = {
    "trajectory": "the trajectory",
    "configuration": "its configuration",
    "task": "its task",
    "steps": "its checkpoints' steps",
    "final_step": "the final checkpoint's step",
    "validation_items": "eligible validation items",
    "validation_clusters": "validation clusters (items sharing a group count once)",
    "validation_exclusions": "validation items left out, by reason",
    "test_items": "test items (null: no test records)",
    "settings": "partitions, draws, bootstrap_partitions, permutations, seed, level",
    "rules": "per rule: choice (steps, probabilities), budget_curve, split_validation and test gains (estimates in pp)",
    "recommendation": "rule, keep_step, keep_final, reason",
    "plausibly_best": "the model confidence set of the most accurate checkpoints (or null)",
    "chosen_estimate": "the chosen checkpoint's accuracy corrected for having been chosen (or null)",
    "answer_check": "per step the share of eligible validation items given its most common answer "
    "(most_common_share) and the share of those it is right on (most_common_right); flagged: the "
    "degenerate steps, never recommended without allow_degenerate; threshold",
    "fallback": "where the trajectory recorded its generated texts (else null): per step the share of "
    "its correct validation answers that only the answer rule's fallback found (fallback_right), "
    "strict_answers (--strict-answers: they were counted wrong), and when an earlier checkpoint is "
    "kept, the rule's choice and split-validation gain with them counted wrong (strict_choice, "
    "strict_gain)",
    "notes": "what was left out for this trajectory and why (a rule skipped), one line each",
}
_KEEP_KEYS = {
    "rule": "the rule of the recommendations",
    "settings": "the select settings that made them",
    "trajectories": "one row per trajectory: trajectory, configuration, final_step, keep_step, "
    "keep_final, choice (the rule's full-pool choice), gain (its split-validation gain over the "
    "final checkpoint, pp; null when select cannot answer), reason",
}
JSON_SCHEMAS: dict[str, dict[str, str]] = {
    "select": _SELECTION_KEYS,
    "select --all": {
        **_KEEP_KEYS,
        "selections": "per trajectory select answers, the select --json object of each",
        "notes": "lines said once for the table: trajectories a rule skips, degenerate checkpoints",
    },
    "compare": {
        "a": "checkpoint A: trajectory, step",
        "b": "checkpoint B: trajectory, step",
        "settings": "draws, seed, level",
        "splits": "validation and test (null without test records): items, clusters, accuracies, "
        "difference (A − B, pp, with interval), the 2×2 table, McNemar p, items not shared, answers "
        "(per side: the share of its items given its most common answer, the share of those it is "
        "right on, degenerate; fallback_right where texts were recorded: the share of its correct "
        "answers only the answer rule's fallback found)",
    },
    "compare-logs": {
        "a": "log A: log (its path), harness (inspect, lm-eval or lighteval), samples",
        "b": "log B: the same",
        "settings": "draws, seed, level, correction (holm or bh), power (of items_needed), "
        "allow_different_items, rescore (correctness by the task's rule)",
        "comparisons": "one per task both logs hold: split, task, items, clusters, accuracies, "
        "difference (A − B, pp, with interval), the 2×2 table, McNemar p (clustered when samples "
        "share groups), samples not shared, different_items (shared ids naming different items, "
        "paired by --allow-different-items), mcnemar_p_adjusted (across tasks; the difference's "
        "verdict follows it), items_needed (from the exact McNemar test's power; null when none), "
        "items_needed_power (that power), items_needed_note (why there is none)",
    },
    "plan": {
        "pilot": "the plan from pilot records (null without them): settings, rows per budget, answer; "
        "planned_budget = safe_budget (the promise reaches the target), smallest_budget (the pilot "
        "taken as exact reaches it: not guaranteed), power_left (extra_items, the estimate and the "
        "promise at each, note)",
        "closed_form": "the closed-form plan (null without --delta/--agreement): rows per budget, budgets",
        "figure": "the figure's path (null: none written)",
    },
    "measure": {
        "trajectory": "the trajectory measured",
        "configuration": "its configuration",
        "records": "the records folder or URL",
        "steps": "its checkpoints' steps",
        "measured_steps": "the checkpoints measured now",
        "reused_steps": "the checkpoints already recorded (nothing measured)",
        "generated_items": "items generated now",
        "scored_items": "items whose NLL was scored now",
        "seconds": "wall-clock seconds",
        "engines": "how the weights got in, in words (empty when nothing was loaded)",
        "prompt_format": "the prompt format measured with, in words (empty when nothing was measured)",
    },
    "measure --dry-run": {
        "trajectory": "the trajectory that would be measured",
        "records": "the records folder or URL",
        "steps": "its checkpoints' steps",
        "cost": "what measuring what the records lack would cost: the run --dry-run cost object",
    },
    "analyze": {
        "results": "the results folder or URL",
        "summary_file": "summary.json's path",
        "report_file": "report.html's path (null with --no-report)",
        "choices_sha256": "the frozen choices' SHA-256",
        "summary": "summary.json's object (docs: Results and summary.json), the keep table last",
    },
    "budgets": {
        "source": "the records or results folder the lists are of",
        "out": "where the lists were written (budget_items.parquet, budget_items.json; null: nowhere)",
        "settings": "permutations, seed, budgets",
        "pools": "per validation pool: pool (its id), items, groups, digest (of its item ids), budgets (per "
        "scheme, nested and one_variant: each budget's label and size), trajectories",
    },
    "verify": {
        "results": "the results folder or URL",
        "ok": "true when everything was reproduced; false on a mismatch (exit code 1)",
        "checks": "one line per check that passed",
        "error": "the mismatch (null when ok)",
    },
    "watch": {
        "trajectory": "the trajectory watched",
        "done": "true once the final checkpoint is recorded; false when --timeout stopped it (exit code 1)",
        "status": "status.json's object: state, recorded, waiting, missed, incomplete, final_step, measuring, …",
        "status_file": "where status.json is",
        "selection": "selection.json's object as last written (null with --no-select)",
        "selection_file": "where selection.json is (null with --no-select)",
    },
    "run": {
        "study": "the study file",
        "protocol": "whether its protocol was frozen before training",
        "stages": "the stages run",
        "dry_run": "true with --dry-run (nothing run)",
        "plan": "with --dry-run: per trajectory, checkpoints, trained, items, generations to do and done (null otherwise)",
        "cost": "with --dry-run: what is left costs: generations, nll_items, prompt_tokens, generation_tokens (at most), "
        "nll_tokens, max_new_tokens, counted (how), seconds (null: no estimate), rate (tokens_per_s, source), note (null otherwise)",
        "records_dir": "the study's records folder",
        "results_dir": "the study's results folder",
        "summary": "summary.json's object when the analyze stage ran (else null)",
    },
    "average": {
        "run_dir": "the run folder",
        "averages": "one per average: name (average-lastK, ema-DECAY), folder, method (mean or ema), k (its sources), "
        "decay (null for a mean), kind (lora or full), steps (its sources' steps), status (written, already there, "
        "written again, replaced)",
    },
}


def json_flag(help: str = "Print one JSON object.") -> Any:
    """The ``--json`` flag of a reporting command (off by default; ``help``: what the command
    prints then, through :func:`print_json`)."""
    return typer.Option(False, "--json", help=help)


def print_json(command: str, data: dict) -> None:
    """``command --json``'s output: ``data`` as one indented JSON object on stdout, its keys
    exactly the command's :data:`JSON_SCHEMAS` (a difference is a bug, said loudly)."""
    import json

    if list(data) != list(JSON_SCHEMAS[command]):
        raise RuntimeError(f"{command} --json: keys {list(data)} differ from its schema {list(JSON_SCHEMAS[command])}")
    typer.echo(json.dumps(data, indent=1, allow_nan=False))
