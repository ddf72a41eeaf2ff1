"""``analyze`` and ``verify``: records → frozen choices → test scores → statistics → files.

The order is structural: validation records are loaded and the choices written and hashed
*before* :func:`ckptsel.records.load_test` is called, and scoring only accepts choices read
back through :func:`ckptsel.choose.load_frozen`, which checks the hash. The results folder's
names and the typed :class:`ckptsel.results.Summary` (whose ``to_dict()`` is ``summary.json``)
are defined in :mod:`ckptsel.results`; ``verify`` reads the stored summary back through it.
The analysis' settings are one :class:`AnalysisSettings` (a study's ``[analysis]``, or
``ckptsel analyze``'s options), what it tells as it runs goes to one :class:`AnalysisEvents`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ckptsel import defaults
from ckptsel._util.io import write_csv, write_parquet, write_text
from ckptsel._util.locations import Location, as_location
from ckptsel._util.threads import single_threaded
from ckptsel.choose.budgets import INDEX_FILE, ITEMS_FILE, write_budget_items
from ckptsel.choose.choices import averages_of, choose
from ckptsel.choose.evaluate import score
from ckptsel.choose.frozen import choices_hash, freeze, load_frozen
from ckptsel.choose.rules import UserRule, bind_rules
from ckptsel.choose.settings import ChoiceSettings, budget_notes
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.records.load import ValidationData, ValidationExtras, load_test, load_validation, uncached, validation_only
from ckptsel.records.provenance import provenance_lines
from ckptsel.records.schema import MATCHED_WINDOW, step_text
from ckptsel.records.units import one_listing
from ckptsel.results import publish
from ckptsel.results.layout import CHOICES_DIR, PROTOCOL_FILE, RUN_FILE, SUMMARY_FILE, TABLES_DIR
from ckptsel.results.summary import KeepTable, Preregistration, Summary
from ckptsel.stats.estimates import StatSettings, summarize
from ckptsel.study.protocol import before_training, protocol_analysis, protocol_json, protocol_status, read_protocol
from ckptsel.workflows.advise.comparison import fallback_matrix, fallback_shares
from ckptsel.workflows.advise.selection import (
    SelectSettings,
    answer_checks,
    degenerate_lines,
    keep_provisional,
    keep_settings,
    nll_skip_line,
    nll_skipped,
    select_all,
)

ANALYSIS_KEYS = ("permutations", "draws", "seed", "level", "interval", "budgets")  # [analysis]'s keys


@dataclass(frozen=True)
class AnalysisSettings:
    """What decides an analysis' choices and estimates, checked once: the choices' settings
    (nested permutations, seed, finite validation budgets: :class:`~ckptsel.choose.ChoiceSettings`)
    and the statistics' (bootstrap draws, seed, level, interval method:
    :class:`~ckptsel.stats.StatSettings`), one seed for both. Every default is
    :mod:`ckptsel.defaults`'. ``given_budgets``: the budgets as given, repeats kept (only for
    :func:`~ckptsel.choose.budget_notes`; not compared)."""

    choice: ChoiceSettings = field(default_factory=ChoiceSettings)
    stat: StatSettings = field(default_factory=StatSettings)
    given_budgets: tuple[int, ...] | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.given_budgets is None:
            object.__setattr__(self, "given_budgets", self.choice.budgets)
        if self.choice.seed != self.stat.seed:
            raise CkptselError(f"one seed for choices and statistics, not {self.choice.seed} and {self.stat.seed}")

    @classmethod
    def of(
        cls,
        *,
        permutations: int = defaults.PERMUTATIONS,
        draws: int = defaults.DRAWS,
        seed: int = defaults.SEED,
        level: float = defaults.CONFIDENCE,
        interval: str = defaults.INTERVAL,
        budgets: Any = defaults.BUDGETS,
        rules: Any = (),
    ) -> AnalysisSettings:
        """The settings of these values (the keys of a study's ``[analysis]``; ``rules``: a
        researcher's own, :class:`~ckptsel.choose.rules.UserRule` s bound to their functions), each
        checked by the settings object that uses it (one clear error)."""
        stat = StatSettings(draws, seed, level, interval)
        choice = ChoiceSettings(permutations=permutations, seed=seed, budgets=tuple(budgets), rules=tuple(rules))
        return cls(choice, stat, tuple(int(b) for b in budgets))

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, where: str) -> AnalysisSettings:
        """A study's ``[analysis]`` table (absent keys: the defaults); an error names ``where``
        (e.g. ``"<study file>: [analysis]"``)."""
        try:
            return cls.of(**dict(table or {}))
        except (CkptselError, TypeError, ValueError) as err:
            raise CkptselError(f"{where}: {err}") from err

    def to_dict(self) -> dict[str, Any]:
        """``[analysis]``'s keys and values (budgets: a sorted list without repeats), what a
        frozen protocol is compared with."""
        c, s = self.choice, self.stat
        return {
            "permutations": c.permutations,
            "draws": s.draws,
            "seed": s.seed,
            "level": s.level,
            "interval": s.interval,
            "budgets": list(c.budgets),
        }

    @property
    def keep(self) -> SelectSettings:
        """The keep table's ``select`` settings (:func:`~ckptsel.workflows.advise.selection.keep_settings`)."""
        return keep_settings(self.stat.seed, self.stat.level, self.stat.draws, self.choice.permutations)


def analysis_differences(fixed: AnalysisSettings, used: Mapping[str, Any]) -> list[str]:
    """``analysis.key: protocol -> used`` for every setting of ``fixed`` (a frozen protocol's,
    :meth:`AnalysisSettings.to_dict`) that ``used`` (the same keys) does not hold as it froze it."""
    want = fixed.to_dict()
    used = {**used, "budgets": sorted(set(used["budgets"]))}
    return [f"analysis.{k}: {want[k]!r} -> {used[k]!r}" for k in ANALYSIS_KEYS if want[k] != used[k]]


def protocol_settings(record: Mapping[str, Any], where: str = "protocol") -> AnalysisSettings:
    """The analysis settings a frozen protocol fixes: its study's ``[analysis]`` over the
    defaults (:func:`ckptsel.study.protocol_analysis`)."""
    return AnalysisSettings.from_table(protocol_analysis(dict(record)), f"{where}: [analysis]")


class AnalysisEvents:
    """What an analysis tells as it runs, one method per kind of line; here each says nothing
    (:data:`QUIET`): a caller overrides those it shows.

    * :meth:`phase` — each phase as it starts (loading, choosing, freezing, scoring, bootstrap,
      keep table, outputs, report);
    * :meth:`note` — what the analysis does with the settings that a reader would not guess
      (repeated budgets used once, budgets larger than a pool skipped; nothing is cut silently)
      and what measured the records (:func:`ckptsel.records.provenance_lines`);
    * :meth:`warn` — a study that mixes provenances (default: :meth:`note`).
    """

    def phase(self, line: str) -> None:
        """A phase starts."""

    def note(self, line: str) -> None:
        """A note."""

    def warn(self, line: str) -> None:
        """A warning (default: a note)."""
        self.note(line)


QUIET = AnalysisEvents()  # says nothing


def by_name(validation: list[ValidationData]) -> list[ValidationData]:
    """``validation`` sorted by trajectory: what summary.json lists per trajectory (keep rows,
    exclusions, warnings) comes in this order, not in the order the records are stored in."""
    return sorted(validation, key=lambda v: v.trajectory)


def population(validation: list[ValidationData]) -> dict:
    """Who is in the study: counted from validation records only (safe before freezing)."""
    exclusions: dict[str, int] = {}
    for v in validation:
        for reason, count in v.exclusions.items():
            exclusions[reason] = exclusions.get(reason, 0) + count
    sizes = [len(v.item_ids) for v in validation]
    ckpts = [len(v.steps) for v in validation]
    return {
        "trajectories": len(validation),
        "nll_records": any(MATCHED_WINDOW in v.nll for v in validation),
        "configurations": len({v.configuration for v in validation}),
        "tasks": sorted({v.task for v in validation}),
        "checkpoints": {"min": int(min(ckpts)), "max": int(max(ckpts))},
        "validation_items": {"min": int(min(sizes)), "max": int(max(sizes))},
        "validation_exclusions": {
            "total": int(sum(exclusions.values())),
            **dict(sorted(exclusions.items())),
            "by_trajectory": {v.trajectory: int(sum(v.exclusions.values())) for v in by_name(validation) if sum(v.exclusions.values())},
        },
    }


def freeze_choices(
    records_dir: Path,
    out_dir: Path,
    settings: ChoiceSettings,
    events: AnalysisEvents = QUIET,
    validation: list[ValidationData] | None = None,
) -> tuple[list, str]:
    """Step 1: choose on validation records only (``validation``: those records, when already
    loaded), write and hash the choices (``events.phase`` hears each phase as it starts)."""
    if validation is None:
        events.phase("loading validation records…")
        validation = load_validation(records_dir)
    settings = replace(settings, averages=averages_of(validation))  # each a fixed choice and a candidate
    events.phase(f"choosing on validation ({settings.permutations} permutations per trajectory)…")
    with validation_only():  # a researcher's rule runs inside: test records are refused
        table = choose(validation, settings, ValidationExtras(records_dir))
    events.phase("freezing the choices (written and hashed before any test record is read)…")
    digest = freeze(table, settings, Path(out_dir) / CHOICES_DIR)
    write_budget_items(Path(out_dir) / CHOICES_DIR, validation, settings)  # the items behind each budget
    return validation, digest


def evaluate_frozen(
    records_dir: Path, out_dir: Path, validation: list, stat: StatSettings, events: AnalysisEvents = QUIET, checks: dict | None = None
) -> tuple[Summary, dict[str, pd.DataFrame]]:
    """Step 2: read the frozen choices back (hash checked), then — only then — the test records;
    score the choices on them and summarize (the summary, and the descriptive tables with the
    checkpoint curves last); ``events.phase`` hears each phase as it starts; ``checks``: the
    trajectories' :func:`~ckptsel.workflows.advise.selection.answer_checks`, when made."""
    frozen = load_frozen(Path(out_dir) / CHOICES_DIR)
    events.phase("scoring the frozen choices on test records…")
    tests = load_test(records_dir, validation)
    scored = score(frozen, tests)
    events.phase(f"bootstrap intervals ({stat.draws} draws, {stat.interval})…")
    pop = population(validation)
    pop["test_items"] = scored.test_items
    summary, tables = summarize(
        scored,
        stat,
        pop,
        permutations=frozen.settings.permutations,
        partitions=frozen.settings.permutations,  # score() partitions the test pool as often
        choices_sha256=frozen.sha256,
    )
    tables["checkpoint_curves"] = checkpoint_curves(validation, scored)
    said = record_warnings(validation, checks)
    if said:
        summary = replace(summary, warnings=(*(summary.warnings or ()), *said))
    return summary, tables


def record_warnings(validation: list[ValidationData], checks: dict | None = None) -> list[str]:
    """What the records themselves warrant saying beside the numbers (summary.json's warnings,
    the terminal, report.html): trajectories the NLL rule skips (no NLL records beside others
    that have them) and degenerate checkpoints (one answer to most items; the keep table
    never keeps one)."""
    ordered = by_name(validation)
    skipped = nll_skipped(ordered)
    return ([nll_skip_line(skipped)] if skipped else []) + degenerate_lines(ordered, checks=checks)


def checkpoint_curves(validation: list[ValidationData], scored) -> pd.DataFrame:
    """Per checkpoint: test accuracy, and validation accuracy / matched NLL on the eligible pool
    (one row per trajectory × checkpoint, trajectories in ``validation`` order)."""
    counts = [len(v.steps) for v in validation]

    def each(name: str) -> np.ndarray:  # a per-trajectory label, once per checkpoint
        return np.repeat(np.array([getattr(v, name) for v in validation], dtype=object), counts)

    def nll_curve(v: ValidationData) -> np.ndarray:  # (T,)
        nll = v.nll.get(MATCHED_WINDOW)
        if nll is None:
            return np.full(len(v.steps), np.nan)
        return nll.sum(axis=1) / v.n_tokens[MATCHED_WINDOW].sum()

    return pd.DataFrame(
        {
            "trajectory": each("trajectory"),
            "configuration": each("configuration"),
            "task": each("task"),
            "step": np.concatenate([v.steps.astype(np.int64) for v in validation]),
            "test_accuracy": np.concatenate([scored.test_accuracy[v.trajectory] for v in validation]),
            "validation_accuracy": np.concatenate([100.0 * v.correct.mean(axis=1) for v in validation]),
            "validation_nll": np.concatenate([nll_curve(v) for v in validation]),
        }
    )


def summary_json(summary: Summary | dict) -> str:
    """The bytes of ``summary.json``: ``summary.to_dict()`` (a dict as it is), indented."""
    data = summary.to_dict() if isinstance(summary, Summary) else summary
    return json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"


def analyze(
    records_dir: Path,
    out_dir: Path,
    *,
    settings: AnalysisSettings | None = None,
    report: bool = False,
    force: bool = False,
    events: AnalysisEvents = QUIET,
    protocol: dict[str, Any] | None = None,
    protocol_file: str | None = None,
    **options: Any,
) -> Summary:
    """The whole analysis (returns the typed summary); writes ``summary.json``, frozen choices and tables (and, with
    ``report``, figures and ``report.html``) into ``out_dir``.

    ``settings``: the analysis' :class:`AnalysisSettings` (a study's parsed ``[analysis]``);
    or its values as ``options`` (``permutations``, ``draws``, ``seed``, ``level``, ``interval``,
    ``budgets``: :meth:`AnalysisSettings.of`, the defaults for those not given), not both.
    ``interval`` names the interval method (``ckptsel.stats.METHODS``; ``"percentile"``
    reproduces the paper's numbers); summary.json records it unless it is ``"percentile"``, and
    ``verify`` reads it back. ``budgets`` are the finite validation budgets ("full" is always
    added); ``D`` is ``G(full) − G(smallest budget)``. Non-default budgets are hashed with the
    frozen choices and recorded in summary.json (``"budgets"``, ``"D_from"``); ``verify``
    reproduces with them.

    Everything is built in a staging folder beside ``out_dir`` (the choices are frozen and read
    back there before any test record is loaded), a manifest of SHA-256s is written last, and
    the folder is swapped in atomically (:mod:`ckptsel.results.publish`): bad input or a kill never
    leaves a half-written or mixed results folder. ``force`` allows a non-empty ``out_dir``
    that is not a results folder (its files are kept, never overwritten).
    ``events`` (:class:`AnalysisEvents`; default: :data:`QUIET`) hears each phase as it starts,
    the notes (settings a reader would not guess, what measured the records: also in
    ``run.json``) and the warnings (a study that mixes provenances).
    ``protocol``: the study's frozen protocol record (:func:`ckptsel.study.check_protocol`), or
    None (not pre-registered). A frozen protocol fixes the analysis settings (a difference is
    refused before any work), is copied into the folder (``protocol.json``) and named in
    ``summary.json`` (``"protocol"``: frozen when, hash, before training), with its file's place
    ``protocol_file`` in ``run.json`` for ``verify``; otherwise summary.json says "not
    pre-registered".
    """
    if settings is None:  # the settings objects check every value before any work (one clear error each)
        settings = AnalysisSettings.of(**options)
    elif options:
        raise CkptselError(f"analyze: give settings or {', '.join(sorted(options))}, not both")
    if protocol is not None:
        _refuse_unprotocolled(protocol, settings.to_dict(), protocol_file)
    with single_threaded():
        return _analyze(records_dir, as_location(out_dir), settings, report, force, events, Bound(protocol, protocol_file))


@dataclass(frozen=True)
class Bound:
    """The protocol an analysis is bound to (None: not pre-registered) and where its file is."""

    record: dict[str, Any] | None = None
    file: str | None = None

    @property
    def preregistration(self) -> Preregistration:
        r = self.record
        if r is None:
            return Preregistration()
        return Preregistration(protocol_status(r), r["sha256"], r.get("frozen_at"), before_training(r))


def _refuse_unprotocolled(record: dict, used: dict, where: str | None) -> None:
    diffs = analysis_differences(protocol_settings(record, where or "protocol"), used)
    if diffs:
        raise CkptselError(
            f"the analysis settings differ from the protocol frozen at {record.get('frozen_at')} "
            f"(hash {record['sha256'][:12]}{', ' + where if where else ''}):\n  " + "\n  ".join(diffs)
        )


REPORT_META = {"formats": ["md", "tex", "csv", "png", "svg", "html"], "trajectory": None}


def _analyze(
    records_dir: Path, out_dir: Location, settings: AnalysisSettings, report: bool, force: bool, events: AnalysisEvents, bound: Bound
) -> Summary:
    """The pipeline: load validation → choose → freeze → load frozen → load test → score →
    summarize → keep table → write (→ report), in a staging folder published at the end."""
    meta = {"report": REPORT_META} if report else None
    if out_dir.is_local:
        staging = publish.staged(out_dir.local, force=force, meta=meta)
    else:  # built here, then uploaded file by file with the manifest last
        staging = publish.staged_url(out_dir, force=force, meta=meta)
    with staging as stage, one_listing():  # a refused --out is said before anything else
        provenance = provenance_lines(records_dir)
        for line in provenance[0]:
            events.note(line)
        for line in provenance[1]:
            events.warn(line)
        events.phase("loading validation records…")
        validation = load_validation(records_dir)
        freeze_choices(records_dir, stage, settings.choice, events, validation)
        for line in budget_notes(settings.given_budgets, [len(v.item_ids) for v in validation]):
            events.note(line)
        checks = answer_checks(validation)  # the warnings' and the keep table's, made once
        summary, tables = evaluate_frozen(records_dir, stage, validation, settings.stat, events, checks)
        events.phase("choosing the checkpoint to keep per trajectory (select)…")
        keep = keep_table(records_dir, validation, settings.keep, checks)
        events.phase("writing summary.json and the tables…")
        summary = _with_keep(summary, keep, records_dir, validation, bound.preregistration)
        if bound.record is not None:
            write_text(stage / PROTOCOL_FILE, protocol_json(bound.record))
        write_outputs(stage, records_dir, summary, tables, provenance, bound.file)
        if report:
            from ckptsel.report.build import write_report

            events.phase("writing the report (tables, figures, report.html)…")
            write_report(stage, formats=REPORT_META["formats"])
    return summary


def _with_keep(
    summary: Summary, keep: KeepTable | None, records_dir: Path, validation: list[ValidationData], protocol: Preregistration | None
) -> Summary:
    """``summary`` with its keep table and protocol, and the warning of kept checkpoints whose
    correct answers rest on an answer rule's fallback (:func:`fallback_lines`)."""
    said = fallback_lines(records_dir, validation, keep)
    if said:
        summary = replace(summary, warnings=(*(summary.warnings or ()), *said))
    return replace(summary, protocol=protocol, keep=keep)


def fallback_lines(records_dir: Path, validation: list[ValidationData], keep: KeepTable | None) -> list[str]:
    """One line naming the trajectories whose kept checkpoint (the final one without a keep
    table) has :data:`ckptsel.defaults.FALLBACK_NOTE_SHARE` or more of its correct validation
    answers found only by the answer rule's fallback, read off the recorded texts of that
    checkpoint and the final one (none recorded: nothing said)."""
    kept = {r.trajectory: r.keep_step for r in keep.trajectories} if keep is not None else {}
    found = []
    for v in by_name(validation):
        final = int(v.steps[-1])
        step = kept.get(v.trajectory, final)
        fb = fallback_matrix(records_dir, v.trajectory, v.task, v.steps, v.item_ids, "validation", sorted({step, final}))
        if fb is None:
            continue
        shares = fallback_shares(v.correct, fb)
        share = float(shares[list(v.steps).index(step)])
        if share >= defaults.FALLBACK_NOTE_SHARE:
            also = "" if step == final else f" (the final step {final}: {100 * float(shares[-1]):.0f}%)"
            found.append(f"{v.trajectory!r} keeps {'step ' if step >= 0 else ''}{step_text(step)}: {100 * share:.0f}%{also}")
    if not found:
        return []
    shown = "; ".join(found[:10]) + (f"; and {len(found) - 10} more" if len(found) > 10 else "")
    return [
        "correct validation answers found only by the answer rule's fallback (gsm8k: no 'The answer "
        f"is' or '####' marker, the last number taken) make {100 * defaults.FALLBACK_NOTE_SHARE:.0f}% "
        f"or more of a kept checkpoint's: {shown}; `ckptsel select --strict-answers` counts them wrong"
    ]


def keep_table(records_dir: Path, validation: list[ValidationData], settings: SelectSettings, checks: dict | None = None) -> KeepTable:
    """Which checkpoint to keep per trajectory (``summary.json``'s ``"keep"``): ``ckptsel
    select --all`` with ``settings`` — for ``analyze``, ``select``'s own defaults with the
    analysis' seed and level (:func:`~ckptsel.workflows.advise.selection.keep_settings`); for ``verify``,
    the settings the stored table records."""
    keep = select_all(records_dir, settings=settings, validation=validation, keep_only=True, checks=checks).keep
    return replace(keep, provisional=keep_provisional(settings))


def write_tables(stage: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Each table as Parquet and CSV in the results folder's tables folder."""
    for name, df in tables.items():
        write_parquet(stage / TABLES_DIR / f"{name}.parquet", df)
        write_csv(stage / TABLES_DIR / f"{name}.csv", df)


def write_outputs(
    stage: Path,
    records_dir: Path,
    summary: Summary,
    tables: dict,
    provenance: tuple[list[str], list[str]] | None = None,
    protocol_file: str | None = None,
) -> None:
    """Tables (``tables``; none when :func:`write_tables` wrote them), ``summary.json`` and
    ``run.json`` of a results folder (choices are already there); ``provenance``:
    :func:`ckptsel.records.provenance_lines` (read when not given); ``protocol_file``: where
    the frozen protocol lives (in ``run.json``, for ``verify``)."""
    tdir = stage / TABLES_DIR
    write_tables(stage, tables)
    write_text(tdir / "main.md", summary.main_table_markdown())
    write_text(stage / SUMMARY_FILE, summary_json(summary))
    from ckptsel import __version__

    records = as_location(records_dir)
    where = str(records.local.resolve()) if records.is_local else str(records)
    lines, warnings = provenance if provenance is not None else provenance_lines(records_dir)
    run = {"records_dir": where, "ckptsel": __version__, "measured_by": lines, "provenance_warnings": warnings}
    if protocol_file is not None:
        run["protocol_file"] = protocol_file
    write_text(stage / RUN_FILE, json.dumps(run, indent=1) + "\n")


def verify(
    results_dir: Path | Location | str,
    records_dir: Path | Location | str | None = None,
    protocol_file: Path | Location | str | None = None,
    rules: tuple[UserRule, ...] = (),
) -> list[str]:
    """Recompute choices and results; raise :class:`VerificationError` on any mismatch. A
    results folder at a URL is verified from a local copy of what its manifest names (the
    messages name the URL). A pre-registered analysis is checked as a chain: the protocol file
    (``protocol_file``, default: the one ``run.json`` names) is unedited and the one the results
    copied, the choices and the statistics used the settings it froze, then the choices and the
    results are recomputed. ``rules``: a researcher's rules the analysis used, named again
    (:func:`~ckptsel.choose.rules.user_rule`; their files must be the bytes it hashed): code
    named only in a results folder is never run."""
    results = as_location(results_dir)
    with single_threaded():
        if results.is_local:
            return _verify(results.local, records_dir, protocol_file, rules)
        with tempfile.TemporaryDirectory(prefix=".ckptsel-verify-") as tmp:
            local = str(Path(tmp) / "results")
            try:
                lines = _verify(publish.fetch_results(results, Path(local)), records_dir, protocol_file, rules)
            except CkptselError as err:
                raise type(err)(str(err).replace(local, str(results))) from err
            return [line.replace(local, str(results)) for line in lines]


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise CkptselError(f"{path}: {what} not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise VerificationError(f"{path}: not a readable JSON {what} ({err})") from err
    if not isinstance(data, dict):
        raise VerificationError(f"{path}: {what} is not a JSON object")
    return data


def _read_summary(path: Path) -> Summary:
    """The stored summary, checked key by key (a malformed one fails verification)."""
    data = _read_json(path, "summary")
    try:
        return Summary.from_dict(data, path)
    except CkptselError as err:
        raise VerificationError(str(err)) from err


def _verify(results_dir: Path, records_dir: Path | None, protocol_file=None, rules: tuple[UserRule, ...] = ()) -> list[str]:
    spath = results_dir / SUMMARY_FILE
    if not spath.is_file():
        raise CkptselError(f"{spath}: no summary to verify")
    stored = _read_summary(spath)
    run_path = results_dir / RUN_FILE
    run = _read_json(run_path, "run record") if run_path.is_file() else {}
    if records_dir is None:
        if not run_path.is_file():
            raise CkptselError(f"{run_path}: not found; pass the records directory explicitly")
        records_dir = run.get("records_dir")
        if not isinstance(records_dir, str):
            raise VerificationError(f"{run_path}: no records_dir string; pass --records explicitly")
    records_dir = as_location(records_dir)
    frozen = load_frozen(results_dir / CHOICES_DIR)  # raises when the stored hash is off
    chain = _protocol_chain(results_dir, stored, frozen.settings, protocol_file or run.get("protocol_file"))
    with uncached():  # from the records themselves: a cache verify cannot authenticate is not read
        validation = load_validation(records_dir)
        with validation_only():
            bound = replace(frozen.settings, rules=bind_rules(frozen.settings.rules, tuple(rules)))
            again = choose(validation, bound, ValidationExtras(records_dir))
        digest = choices_hash(again, frozen.settings)
        if digest != frozen.sha256:
            raise VerificationError(
                f"choices recomputed from {records_dir} have SHA-256 {digest}, but the frozen choices "
                f"in {results_dir / CHOICES_DIR} have {frozen.sha256}"
            )
        stat = _stored_stat(stored, spath)
        summary, tables = evaluate_frozen(records_dir, results_dir, validation, stat)
        provenance = provenance_lines(records_dir)
        keep = None
        if stored.keep is not None:  # summaries written before the keep table have none
            keep = keep_table(records_dir, validation, _stored_keep_settings(stored.keep, spath))
    summary = _with_keep(summary, keep, records_dir, validation, stored.protocol)  # protocol: _protocol_chain
    kept, again_dict = stored.to_dict(), summary.to_dict()
    if summary_json(again_dict) != summary_json(kept):
        diff = _first_difference(kept, again_dict)
        raise VerificationError(f"{spath}: recomputed results differ from the stored summary at {diff}")
    lines = [*chain, f"choices: SHA-256 {digest} matches", f"results: {spath} reproduced exactly"]
    lines += publish.check_manifest(results_dir)
    lines.append(_recompute_files(results_dir, summary, tables, again, frozen.settings, provenance, validation))
    lines.append(_check_run(run_path, run, records_dir, provenance, stored))
    return lines


def _stored_keep_settings(keep: KeepTable, spath: Path) -> SelectSettings:
    """The ``select`` settings a stored keep table says made it (a table made by ckptsel 0.1.0,
    with fewer draws and bootstrap partitions than ``select``'s defaults, is recomputed with
    its own)."""
    try:
        return SelectSettings(**keep.settings)
    except (CkptselError, TypeError) as err:
        raise VerificationError(f"{spath}: keep table settings unreadable ({err})") from err


def _stored_stat(stored: Summary, spath: Path) -> StatSettings:
    try:
        draws, seed, level = stored.draws, stored.seed, float(stored.level)
        return StatSettings(draws=draws, seed=seed, level=level, interval=stored.interval_method)
    except CkptselError as err:
        raise VerificationError(f"{spath}: settings (draws, seed, confidence, interval) unreadable ({err})") from err


def _protocol_chain(results_dir: Path, stored: Summary, choice_settings, protocol_file) -> list[str]:
    """The first links of the chain protocol → choices → results: the protocol file is unedited
    and is the one copied into the results, and the choices and the statistics used the analysis
    settings it froze (a summary that was not pre-registered says so, and has no copy)."""
    copy_path = results_dir / PROTOCOL_FILE
    said = stored.protocol
    if said is None or not said.frozen:
        if copy_path.is_file():
            raise VerificationError(f"{copy_path}: a protocol copy, but {SUMMARY_FILE} says the analysis was not pre-registered")
        return [f"protocol: {said.status if said else 'not recorded (an older summary)'}"]
    try:
        copy = read_protocol(copy_path)
    except CkptselError as err:
        raise VerificationError(str(err)) from err
    if copy["sha256"] != said.sha256 or copy.get("frozen_at") != said.frozen_at:
        raise VerificationError(
            f"{copy_path}: protocol {copy['sha256'][:12]} frozen at {copy.get('frozen_at')}, but "
            f"{SUMMARY_FILE} names {said.sha256[:12]} frozen at {said.frozen_at}"
        )
    used = dict(
        permutations=choice_settings.permutations,
        seed=stored.seed,
        draws=stored.draws,
        level=stored.level,
        interval=stored.interval_method,
        budgets=list(choice_settings.budgets),
    )
    try:
        fixed = protocol_settings(copy, str(copy_path))
    except CkptselError as err:
        raise VerificationError(str(err)) from err
    diffs = analysis_differences(fixed, used)
    if choice_settings.seed != stored.seed:
        diffs.append(f"seed: choices {choice_settings.seed} -> statistics {stored.seed}")
    if diffs:
        raise VerificationError(
            f"{results_dir}: the analysis did not use the settings its protocol ({said.sha256[:12]}) froze:\n  " + "\n  ".join(diffs)
        )
    if said != Bound(copy).preregistration:  # what the summary says is what the copy says
        raise VerificationError(
            f"{results_dir / SUMMARY_FILE}: its protocol block says {said.status!r} (before "
            f"training: {said.before_training}), the protocol copy {protocol_status(copy)!r}"
        )
    return [
        _protocol_file_line(copy, protocol_file),
        f"protocol → choices: {said.status}; the choices and statistics used the analysis settings it froze",
    ]


def _protocol_file_line(copy: dict, protocol_file) -> str:
    """The protocol file as it is now, against the copy the results hold."""
    if protocol_file is None:
        return f"protocol: the copy in {PROTOCOL_FILE} (no protocol file named; pass --protocol)"
    where = as_location(protocol_file)
    if not where.exists():
        return f"protocol: {where} not found; checked the copy in {PROTOCOL_FILE}"
    try:
        now = read_protocol(where)  # an edited protocol file fails here
    except CkptselError as err:
        raise VerificationError(str(err)) from err
    if now != copy:
        raise VerificationError(
            f"{where}: the protocol file ({now['sha256'][:12]}, frozen at {now.get('frozen_at')}) "
            f"is not the one the results were bound to ({copy['sha256'][:12]}, frozen at "
            f"{copy.get('frozen_at')})"
        )
    return f"protocol: {where} unedited, SHA-256 {copy['sha256']} matches the results' copy"


def _budget_files(files: dict) -> list[str]:
    """The budget item lists a results folder's manifest names (``choices/``)."""
    return [f"{CHOICES_DIR}/{name}" for name in (ITEMS_FILE, INDEX_FILE) if f"{CHOICES_DIR}/{name}" in files]


def _recompute_files(results_dir: Path, summary: Summary, tables: dict, choices, settings, provenance, validation) -> str:
    """Rebuild every file the analysis writes from the recomputed results in a scratch folder —
    the report in all of :data:`REPORT_META`'s formats whenever the folder holds a report,
    whatever its manifest says — and compare: each rebuilt file must be in the folder and its
    manifest with the same bytes (Parquet: the same content; ``report.html``, PNG and SVG are
    byte-deterministic here: fixed metadata, no dates, fixed hash salt), and the manifest may
    name no file the analysis does not write. ``run.json`` is checked by :func:`_check_run`."""
    files = publish.read_manifest(results_dir) or {}
    meta = publish.read_manifest_meta(results_dir).get("report")
    with tempfile.TemporaryDirectory(prefix=".ckptsel-verify-") as tmp:
        scratch = Path(tmp)
        freeze(choices, settings, scratch / CHOICES_DIR)
        listed = _budget_files(files)
        if listed:  # (results written before the lists have none)
            write_budget_items(scratch / CHOICES_DIR, validation, settings)
        write_outputs(scratch, scratch, summary, tables, provenance)
        core = set(publish.manifest_files(scratch))
        reported = meta is not None or _has_report(results_dir, files)
        if reported:
            _rebuild_report(scratch, results_dir, meta)
        expected = set(publish.manifest_files(scratch)) - {RUN_FILE}
        if summary.protocol is not None and summary.protocol.frozen:
            expected.add(PROTOCOL_FILE)  # checked by _protocol_chain
        for rel in sorted(expected | {RUN_FILE}):
            if rel not in files:
                what = "missing" if not (results_dir / rel).exists() else "not in its manifest"
                hint = (
                    ""
                    if rel in core or rel == PROTOCOL_FILE
                    else (
                        " (a report is checked whole: every one of "
                        f"{','.join(REPORT_META['formats'])}; `ckptsel report` without --formats rebuilds it)"
                    )
                )
                raise VerificationError(f"{results_dir / rel}: a file this analysis writes is {what}{hint}")
        extra = sorted(set(files) - expected - {RUN_FILE})
        if extra:
            raise VerificationError(f"{results_dir / extra[0]}: listed in {publish.MANIFEST_FILE}, but not a file this analysis writes")
        for rel in sorted(expected - {PROTOCOL_FILE}):
            _compare_file(results_dir, scratch, rel, files[rel])
    report = "with the report in every format" if reported else "no report"
    return f"files: all {len(expected)} files the analysis writes recomputed and identical, {report} (Parquet tables compared by content)"


def _has_report(results_dir: Path, files: dict[str, str]) -> bool:
    """Whether the folder (or its manifest) holds anything only a report writes."""
    from ckptsel.results.layout import FIGURES_DIR, REPORT_FILE

    if (results_dir / REPORT_FILE).exists() or (results_dir / FIGURES_DIR).exists():
        return True
    return any(rel == REPORT_FILE or rel.startswith(FIGURES_DIR + "/") or rel.endswith(".tex") for rel in files)


def _rebuild_report(scratch: Path, results_dir: Path, meta) -> None:
    from ckptsel.report.build import write_report

    trajectory = meta.get("trajectory") if isinstance(meta, dict) else None
    if trajectory is not None and not isinstance(trajectory, str):
        raise VerificationError(f"{results_dir / publish.MANIFEST_FILE}: report trajectory {trajectory!r} is not a name")
    try:
        write_report(scratch, formats=REPORT_META["formats"], trajectory=trajectory)
    except CkptselError as err:
        raise VerificationError(f"{results_dir}: the report cannot be rebuilt ({err})") from err


def _compare_file(results_dir: Path, scratch: Path, rel: str, recorded: str) -> None:
    digest = publish.sha256_file(scratch / rel)
    if digest != recorded and rel.endswith(".parquet") and _same_frame(results_dir / rel, scratch / rel):
        digest = recorded  # same data, other Parquet encoding (e.g. an older pyarrow)
    if digest != recorded:
        raise VerificationError(
            f"{results_dir / rel}: recomputed file has SHA-256 {digest}, the stored one {recorded} (the first file that differs)"
        )


def _check_run(run_path: Path, run: dict, records_dir: Location, provenance, stored: Summary) -> str:
    """``run.json`` against what verify recomputed: what measured the records and their
    warnings, the protocol file named exactly when the analysis was bound to one, no other keys."""
    from ckptsel import __version__

    if not run_path.is_file():
        raise VerificationError(f"{run_path}: not found (a file this analysis writes)")
    known = {"records_dir", "ckptsel", "measured_by", "provenance_warnings", "protocol_file"}
    unknown = sorted(set(run) - known)
    if unknown:
        raise VerificationError(f"{run_path}: key {unknown[0]!r} is not one the analysis writes")
    lines, warnings = provenance
    for key, value in (("measured_by", lines), ("provenance_warnings", warnings)):
        if run.get(key) != value:
            raise VerificationError(f"{run_path}: {key} {run.get(key)!r} differs from the records' own provenance {value!r}")
    bound = stored.protocol is not None and stored.protocol.frozen
    if bound != isinstance(run.get("protocol_file"), str):
        said = "names no protocol file" if bound else "names a protocol file"
        raise VerificationError(f"{run_path}: {said}, but {SUMMARY_FILE} says {stored.protocol.status if stored.protocol else 'nothing'}")
    version = run.get("ckptsel")
    if not isinstance(version, str) or not isinstance(run.get("records_dir"), str):
        raise VerificationError(f"{run_path}: ckptsel and records_dir must be strings")
    note = "" if version == __version__ else f" (written by ckptsel {version}, verified by {__version__})"
    return f"run: {run_path} matches the records' provenance{note}"


def _same_frame(a: Path, b: Path) -> bool:
    try:
        return pd.read_parquet(a).equals(pd.read_parquet(b))
    except (OSError, ValueError):
        return False


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}/{k} (present in only one)"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
    return f"{path}: stored {a!r}, recomputed {b!r}"
