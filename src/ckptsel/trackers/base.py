"""What ckptsel logs to an experiment tracker, whichever tracker it is.

A results folder (``ckptsel analyze --out``) and, optionally, a selection (the object
``ckptsel select --json`` prints) become one :class:`Payload`:

* metrics: a headline of at most :data:`HEADLINE_MAX` (:func:`headline_metrics`: the main
  rule's G, H, D with lo/hi, the recommendation, the chosen step per trajectory or their
  summary) logged as metrics, and every estimate in ``summary.json`` in the artifact files
  ``metrics.csv``/``metrics.json`` (the frozen choices at the full budget in ``choices.csv``),
  as flat numbers named
  ``ckptsel/<summary path>/{mean,lo,hi,unresolved}``; the budget block reads quantity first
  (``budget → accuracy → full → G`` is ``ckptsel/G/accuracy/full/mean``), the rest keeps the
  summary's path (``ckptsel/D/agreement/lo``, ``ckptsel/matched_half/oracle/B/hi``,
  ``ckptsel/by_task/gsm8k/G/nll/full/mean``, ``ckptsel/question_bootstrap/G/last/32/mean``);
  ``unresolved`` is 1 when the interval contains 0 (or there is none); an estimate whose interval
  is not estimable (e.g. one configuration) has no ``lo``/``hi`` and ``not_estimable`` = 1 (the
  reason is in the main table and ``summary.json``), one too small a design cannot resolve
  has ``cannot_resolve`` = 1 (and ``unresolved`` = 1); the headline keeps ``not_estimable``
  beside mean, lo and hi. A selection adds
  ``ckptsel/select/<rule>/{split_validation,test}/…`` and ``ckptsel/select/keep_step``;
* settings and provenance (flat strings named ``ckptsel.<name>``): seed, draws, interval level and
  method, permutations, the population, the frozen-choices SHA-256, the summary's SHA-256, the
  records folder and a SHA-256 over its record files, the ckptsel version, the warnings;
* the main table (rule, quantity, mean, lo, hi, unresolved) and files: ``summary.json``,
  ``run.json``, ``manifest.json``, ``choices/choices.sha256``, ``tables/*.md|csv``, ``report.html``
  and the PNG figures (those two when the folder has them: ``analyze --report``).

With ``--register NAME`` the recommended checkpoint becomes a :class:`Registration`: a model
version / artifact named NAME with alias :data:`ALIAS` and the evidence in its description.
Each tracker's module (``mlflow``, ``wandb``, ``trackio``) turns these (one :class:`LogJob`:
payload, :class:`LogTarget`, registration) into that tool's calls; its package is imported only
then (:func:`require`), with a one-line install hint when missing. W&B and Trackio share W&B's
media and artifact classes, so their media and artifacts are built here once (:func:`media`,
:func:`results_artifact`, :func:`model_artifact`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from ckptsel._util.locations import Location, as_location
from ckptsel.choose.rules import SIGNAL_RULES
from ckptsel.errors import CkptselError
from ckptsel.records.schema import GENERATIONS_FILE, NLL_FILE, candidate_name, step_text
from ckptsel.records.units import UNITS_DIR
from ckptsel.report.build import load_results
from ckptsel.report.tables import all_tables
from ckptsel.results.estimate import fmt
from ckptsel.results.layout import CHOICES_DIR, FIGURES_DIR, REPORT_FILE, RUN_FILE, SUMMARY_FILE, TABLES_DIR
from ckptsel.results.publish import MANIFEST_FILE
from ckptsel.results.summary import Summary

TRACKERS = ("mlflow", "wandb", "trackio")
ALIAS = "ckptsel-recommended"
PREFIX = "ckptsel"
# tracker -> (module to import, pip extra)
_PACKAGES = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb"), "trackio": ("trackio", "trackio")}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def require(tracker: str) -> ModuleType:
    """The tracker's package, imported now; a missing one is one line with the install hint."""
    if tracker not in _PACKAGES:
        raise CkptselError(f"unknown tracker {tracker!r}; choose from {', '.join(TRACKERS)}")
    module, extra = _PACKAGES[tracker]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise CkptselError(f"--log {tracker} needs the {module} package ({err}): pip install 'ckptsel[{extra}]'") from err


def check_trackers(trackers: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Known tracker names, each once, in the order given."""
    out: list[str] = []
    for t in trackers:
        if t not in TRACKERS:
            raise CkptselError(f"unknown tracker {t!r} for --log; choose from {', '.join(TRACKERS)}")
        if t not in out:
            out.append(t)
    return tuple(out)


def read_summary(results_dir: Path) -> dict:
    """``summary.json`` of a results folder, read back checked as the typed
    :class:`~ckptsel.results.Summary` and handed on as its dict (the file's own tree, which the
    metric names follow path for path)."""
    return load_results(Path(results_dir))[0].to_dict()


# --------------------------------------------------------------------------- metrics
def _is_estimate(node: Any) -> bool:
    return isinstance(node, dict) and {"mean", "lo", "hi"} <= set(node)


def _estimates(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    if _is_estimate(node):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _estimates(value, (*path, str(key)))


def metric_path(path: tuple[str, ...]) -> tuple[str, ...]:
    """A summary path as a metric path: ``budget/<rule>/<n>/<Q>`` reads ``<Q>/<rule>/<n>``."""
    p = list(path)
    if "budget" in p:
        k = p.index("budget")
        if len(p) == k + 4:
            p = [*p[:k], p[k + 3], p[k + 1], p[k + 2]]
    return tuple(p)


def metric_name(path: tuple[str, ...], stat: str) -> str:
    """``ckptsel/<path>/<stat>`` with characters trackers refuse replaced by ``_``."""
    name = "/".join((PREFIX, *path, stat))
    return re.sub(r"[^0-9A-Za-z_\-. :/]", "_", name)


def _estimate_metrics(est: dict, path: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for stat in ("mean", "lo", "hi"):
        v = est.get(stat)
        if v is not None and math.isfinite(float(v)):
            out[metric_name(path, stat)] = float(v)
    if est.get("unresolved") is not None:
        out[metric_name(path, "unresolved")] = 1.0 if est["unresolved"] else 0.0
    if est.get("not_estimable"):
        out[metric_name(path, "not_estimable")] = 1.0
    if est.get("cannot_resolve"):
        out[metric_name(path, "cannot_resolve")] = 1.0
    return out


HEADLINE_STATS = ("mean", "lo", "hi", "not_estimable")  # an estimate's stats in the headline


def summary_metrics(summary: dict) -> dict[str, float]:
    """Every estimate of a summary as flat metrics (see the module for the names)."""
    out: dict[str, float] = {}
    for path, est in _estimates(summary):
        out.update(_estimate_metrics(est, metric_path(path)))
    return out


def selection_metrics(selection: dict) -> dict[str, float]:
    """A selection's gains (split-validation and test, per rule) and the recommended step."""
    out: dict[str, float] = {}
    for rule, block in (selection.get("rules") or {}).items():
        for part in ("split_validation", "test"):
            if _is_estimate(block.get(part)):
                out.update(_estimate_metrics(block[part], ("select", rule, part)))
    rec = selection.get("recommendation") or {}
    if rec.get("keep_step") is not None:
        out[metric_name(("select",), "keep_step")] = float(rec["keep_step"])
        out[metric_name(("select",), "keep_final")] = 1.0 if rec.get("keep_final") else 0.0
    return out


HEADLINE_MAX = 20  # metrics a person reads in a tracker; the rest is in metrics.csv/json


def _claims(summary: dict, rule: str) -> dict[str, float]:
    """G(full), H(full) and D of ``rule``: mean, lo, hi (what the estimate has), and
    ``not_estimable`` = 1 for one without an interval."""
    out: dict[str, float] = {}
    cell = ((summary.get("budget") or {}).get(rule) or {}).get("full") or {}
    for quantity, est in (("G", cell.get("G")), ("H", cell.get("H")), ("D", (summary.get("D") or {}).get(rule))):
        if _is_estimate(est):
            path = (quantity, rule, "full") if quantity != "D" else (quantity, rule)
            out.update({k: v for k, v in _estimate_metrics(est, path).items() if k.rsplit("/", 1)[1] in HEADLINE_STATS})
    return out


def _selection_headline(selection: dict) -> dict[str, float]:
    """The recommended step and its rule's split-validation and test gains (mean, lo, hi;
    ``not_estimable`` when one has no interval)."""
    full = selection_metrics(selection)
    rule = (selection.get("recommendation") or {}).get("rule")
    keep = [metric_name(("select",), "keep_step"), metric_name(("select",), "keep_final")]
    keep += [metric_name(("select", str(rule), part), stat) for part in ("split_validation", "test") for stat in HEADLINE_STATS]
    return {k: full[k] for k in keep if k in full}


def choice_metrics(choices: pd.DataFrame | None, rule: str, room: int) -> dict[str, float]:
    """The main rule's chosen step per trajectory (``ckptsel/choice/<trajectory>/step``) when
    ``room`` allows, else their summary: trajectories, and the fraction kept at the final step."""
    if choices is None or choices.empty:
        return {}
    mine = choices[choices["rule"] == rule]
    if mine.empty:
        return {}
    if len(mine) <= room:
        return {metric_name(("choice", str(t)), "step"): float(s) for t, s in zip(mine["trajectory"], mine["step"], strict=True)}
    return {
        metric_name(("choices", rule), "trajectories"): float(len(mine)),
        metric_name(("choices", rule), "final_fraction"): float(mine["final"].mean()),
    }


def headline_metrics(summary: dict | None, selection: dict | None, choices: pd.DataFrame | None = None) -> dict[str, float]:
    """At most :data:`HEADLINE_MAX` metrics: the three claims (G, H, D with lo and hi) of the
    main rule (the recommendation's, else the first signal rule), the recommendation, and the
    chosen checkpoint per trajectory (or their summary when there are many)."""
    rule = str(((selection or {}).get("recommendation") or {}).get("rule") or SIGNAL_RULES[0])
    out = _claims(summary, rule) if summary is not None else {}
    if selection is not None:
        out.update(_selection_headline(selection))
    out.update(choice_metrics(choices, rule, HEADLINE_MAX - len(out)))
    return dict(list(out.items())[:HEADLINE_MAX])


def full_choices(results_dir: Path, curves: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """The frozen choices at the full budget: trajectory, rule, step (the most probable; the
    first of a tie), and whether it is the trajectory's final step; None without choices."""
    path = Path(results_dir) / CHOICES_DIR / "choices.parquet"
    if not path.is_file():
        return None
    c = pd.read_parquet(path)
    c = c[(c["budget"] == "full") & (c["scheme"] == "nested")]
    c = c.sort_values(["trajectory", "rule", "prob", "step"], ascending=[True, True, False, True])
    c = c.drop_duplicates(["trajectory", "rule"])[["trajectory", "rule", "step", "prob"]]
    final = None if curves is None else curves.groupby("trajectory")["step"].max()
    c["final"] = c["trajectory"].map(final) == c["step"] if final is not None else False
    return c.reset_index(drop=True)


def metrics_files(metrics: dict[str, float], choices: pd.DataFrame | None) -> tuple[Path, ...]:
    """Every metric (``metrics.csv``, ``metrics.json``) and the choices (``choices.csv``) in a
    fresh temporary folder, for the run's artifacts."""
    folder = Path(tempfile.mkdtemp(prefix="ckptsel-"))
    table = pd.DataFrame({"metric": list(metrics), "value": list(metrics.values())})
    table.to_csv(folder / "metrics.csv", index=False)
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    out = [folder / "metrics.csv", folder / "metrics.json"]
    if choices is not None:
        choices.to_csv(folder / "choices.csv", index=False)
        out.append(folder / "choices.csv")
    return tuple(out)


# --------------------------------------------------------------------------- provenance
def records_sha256(records_dir: str | Path | Location) -> str | None:
    """SHA-256 over the record files' names and bytes (single files and units; not the packs,
    caches or locks, which come and go), at a path or a URL alike, or None when the folder
    is not there any more."""
    root = as_location(records_dir)
    if not root.is_dir():
        return None
    names = [GENERATIONS_FILE, NLL_FILE]
    units = root / UNITS_DIR
    if units.is_dir():
        rels = [r for r in units.listing() if r.endswith(".parquet") and not any(p.startswith(".") for p in r.split("/"))]
        names += [f"{UNITS_DIR}/{r}" for r in sorted(rels, key=lambda r: r.split("/"))]
    h = hashlib.sha256()
    for name in names:
        f = root / name
        if f.is_file():
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def summary_params(summary: dict, results_dir: Path, named: str | None = None) -> dict[str, str]:
    """Settings, population and provenance as flat ``ckptsel.<name>`` strings; ``named``: the
    results folder's URL when ``results_dir`` is a local copy of it."""
    pop = summary.get("population") or {}
    run = _read_json(Path(results_dir) / RUN_FILE)
    params: dict[str, Any] = {
        "schema": summary.get("schema"),
        "seed": summary.get("seed"),
        "draws": summary.get("draws"),
        "confidence": summary.get("confidence"),
        "interval": summary.get("interval", "percentile"),
        "permutations": summary.get("permutations"),
        "partitions": summary.get("partitions"),
        "budgets": ",".join(map(str, summary["budgets"])) if summary.get("budgets") else None,
        "choices_sha256": summary.get("choices_sha256"),
        "protocol": (summary.get("protocol") or {}).get("status"),
        "protocol_sha256": (summary.get("protocol") or {}).get("sha256"),
        "summary_sha256": hashlib.sha256((Path(results_dir) / SUMMARY_FILE).read_bytes()).hexdigest(),
        "trajectories": pop.get("trajectories"),
        "configurations": pop.get("configurations"),
        "tasks": ",".join(pop.get("tasks") or []),
        "test_items": pop.get("test_items"),
        "nll_records": pop.get("nll_records"),
        "results_dir": named or str(Path(results_dir).resolve()),
        "records_dir": run.get("records_dir"),
        "records_sha256": records_sha256(run["records_dir"]) if run.get("records_dir") else None,
        "version": run.get("ckptsel"),
        "warnings": " | ".join(summary.get("warnings") or []) or None,
    }
    return {f"{PREFIX}.{k}": _text(v) for k, v in params.items() if v is not None and v != ""}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


# --------------------------------------------------------------------------- the payload
@dataclass(frozen=True)
class Payload:
    """Everything logged for one results folder and/or one selection."""

    results_dir: Path | None
    summary: dict | None
    metrics: dict[str, float]  # the headline (at most HEADLINE_MAX)
    params: dict[str, str]
    main_table: pd.DataFrame | None  # rule, quantity, mean, lo, hi, unresolved
    files: tuple[tuple[Path, str], ...]  # (file, folder under the run's artifacts)
    figures: tuple[Path, ...] = ()
    report: Path | None = None
    selection: dict | None = None
    all_metrics: dict[str, float] = field(default_factory=dict)  # in metrics.csv/json
    choices: pd.DataFrame | None = None  # the frozen choices at the full budget

    @property
    def choices_sha256(self) -> str:
        return str((self.summary or {}).get("choices_sha256", ""))


def _files(results_dir: Path) -> tuple[tuple[Path, str], ...]:
    names = [SUMMARY_FILE, RUN_FILE, MANIFEST_FILE, REPORT_FILE, f"{CHOICES_DIR}/choices.sha256"]
    out = [(results_dir / n, "/".join((PREFIX, *Path(n).parts[:-1]))) for n in names]
    tables = results_dir / TABLES_DIR
    if tables.is_dir():
        out += [(p, f"{PREFIX}/{TABLES_DIR}") for p in sorted(tables.iterdir()) if p.suffix in (".md", ".csv")]
    figures = results_dir / FIGURES_DIR
    if figures.is_dir():
        out += [(p, f"{PREFIX}/{FIGURES_DIR}") for p in sorted(figures.glob("*.png"))]
    return tuple((p, sub) for p, sub in out if p.is_file())


def build_payload(results_dir: Path | None, selection: dict | None = None, named: str | None = None) -> Payload:
    """The :class:`Payload` of a results folder and/or a selection (at least one of them);
    ``named``: the folder's URL when ``results_dir`` is a local copy of it."""
    if results_dir is None:
        if selection is None:
            raise CkptselError("nothing to log: give a results folder or a selection")
        metrics = selection_metrics(selection)
        files = tuple((p, PREFIX) for p in metrics_files(metrics, None))
        return Payload(
            results_dir=None,
            summary=None,
            metrics=headline_metrics(None, selection),
            params=selection_params(selection),
            main_table=None,
            files=files,
            selection=selection,
            all_metrics=metrics,
        )
    results_dir = Path(results_dir)
    summary, _, curves = load_results(results_dir)
    summary = summary.to_dict()
    metrics = summary_metrics(summary)
    params = summary_params(summary, results_dir, named)
    if selection is not None:
        metrics.update(selection_metrics(selection))
        params.update(selection_params(selection))
    choices = full_choices(results_dir, curves)
    table = next(t for t in all_tables(summary) if t.name == "main_table").numbers
    figures = results_dir / FIGURES_DIR
    report = results_dir / REPORT_FILE
    extra = tuple((p, PREFIX) for p in metrics_files(metrics, choices))
    return Payload(
        results_dir=results_dir,
        summary=summary,
        metrics=headline_metrics(summary, selection, choices),
        all_metrics=metrics,
        choices=choices,
        params=params,
        main_table=table.reset_index(drop=True),
        files=_files(results_dir) + extra,
        figures=tuple(sorted(figures.glob("*.png"))) if figures.is_dir() else (),
        report=report if report.is_file() else None,
        selection=selection,
    )


def selection_params(selection: dict) -> dict[str, str]:
    """The selection's trajectory, rule, steps, settings and reason as ``ckptsel.select.*``."""
    rec = selection.get("recommendation") or {}
    settings = selection.get("settings") or {}
    params = {
        "select.trajectory": selection.get("trajectory"),
        "select.configuration": selection.get("configuration"),
        "select.steps": ",".join(map(str, selection.get("steps") or [])) or None,
        "select.validation_items": selection.get("validation_items"),
        "select.test_items": selection.get("test_items"),
        **{f"select.{k}": v for k, v in settings.items()},
        "select.rule": rec.get("rule"),
        "select.keep_step": rec.get("keep_step"),
        "select.final_step": selection.get("final_step"),
        "select.reason": rec.get("reason"),
    }
    return {f"{PREFIX}.{k}": _text(v) for k, v in params.items() if v is not None}


# --------------------------------------------------------------------------- registration
@dataclass(frozen=True)
class Registration:
    """The recommended checkpoint as a registered model version / artifact."""

    name: str
    trajectory: str
    step: int
    rule: str
    keep_final: bool
    description: str
    checkpoint: Path | None = None  # the checkpoint folder, referenced (never copied)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def aliases(self) -> list[str]:
        return [ALIAS, f"step-{self.step}"]


def check_model_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise CkptselError(f"--register name {name!r}: start with a letter or digit and use only letters, digits and ._-")
    return name


def _gain(est: dict, pct: int) -> str:
    """``-0.22 pp [-7.14, +10.74] (95% interval, unresolved)``; ``+1.78 pp not estimable: 1
    configuration (no interval)``."""
    if est.get("not_estimable"):
        return f"{fmt(est, unit=' pp')} (no interval)"
    flag = ", unresolved" if est.get("unresolved") else ""
    if est.get("cannot_resolve"):
        flag = f", unresolved: {est['cannot_resolve']}"
    return f"{fmt(est, unit=' pp', mark=False)} ({pct}% interval{flag})"


def evidence(selection: dict, summary: dict | None = None) -> str:
    """The recommendation's evidence in a few Markdown lines (a model version's description)."""
    rec = selection["recommendation"]
    rule, step, traj = rec["rule"], rec["keep_step"], selection["trajectory"]
    block = (selection.get("rules") or {}).get(rule, {})
    sv, test = block.get("split_validation"), block.get("test")
    pct = int(round(float((selection.get("settings") or {}).get("level", 0.95)) * 100))
    tied = (block.get("choice") or {}).get("steps") or []
    lines = [f"ckptsel recommends **{'step ' if step >= 0 else ''}{step_text(step)}** of trajectory `{traj}` (rule `{rule}`)."]
    if rec.get("keep_final") and selection.get("final_step") not in tied and sv is not None:
        why = "unresolved" if sv.get("unresolved") else "below 0"
        if sv.get("not_estimable") or sv.get("cannot_resolve"):
            why = f"unresolved ({sv.get('not_estimable') or sv.get('cannot_resolve')})"
        lines.append(f"Final checkpoint kept because the gain is {why}.")
    if sv is not None:
        lines.append(f"- split-validation gain over the final checkpoint: {_gain(sv, pct)}")
    if test is not None:
        lines.append(f"- test gain of the choice over the final checkpoint: {_gain(test, pct)}")
    lines.append(f"- why: {rec['reason']}")
    if summary is not None:
        full = ((summary.get("budget") or {}).get(rule) or {}).get("full", {}).get("G")
        pop = summary.get("population") or {}
        if full is not None:
            lines.append(
                f"- study: G_{rule}(full) = {_gain(full, Summary.coerce(summary).level_percent)} over "
                f"{pop.get('trajectories')} trajectories in {pop.get('configurations')} configurations"
            )
        lines.append(f"- frozen choices SHA-256: `{summary.get('choices_sha256', '')}`")
        if summary.get("protocol"):
            lines.append(f"- {summary['protocol']['status']}")
    return "\n".join(lines)


MODEL_FILES = ("config.json", "adapter_config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def check_model_folder(name: str, checkpoint: Path | None, trajectory: str, step: int) -> Path:
    """The checkpoint folder to register, which must hold a model (``config.json``,
    ``adapter_config.json`` or weights); else one line saying why nothing is registered."""
    where = f"{trajectory}/{candidate_name(step)}"
    if checkpoint is None:
        raise CkptselError(
            f"--register {name}: no checkpoint folder for step {step} of {trajectory}, so there is "
            f"no model to register; give --checkpoints DIR holding {where}"
        )
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise CkptselError(f"--register {name}: {folder}: checkpoint folder not found")
    if not any((folder / f).is_file() for f in MODEL_FILES) and not any(
        p.suffix in WEIGHT_SUFFIXES for p in folder.iterdir() if p.is_file()
    ):
        raise CkptselError(f"--register {name}: {folder} holds no model (no {', '.join(MODEL_FILES)} or weights); nothing to register")
    return folder


def registration(payload: Payload, name: str, checkpoint: Path | None = None) -> Registration:
    """The :class:`Registration` of the payload's recommendation under ``name``."""
    check_model_name(name)
    sel = payload.selection
    if not sel or (sel.get("recommendation") or {}).get("keep_step") is None:
        raise CkptselError("--register needs a recommendation: select a checkpoint of one trajectory first")
    rec = sel["recommendation"]
    step = int(rec["keep_step"])
    folder = check_model_folder(name, checkpoint, str(sel["trajectory"]), step)
    tags = {
        f"{PREFIX}.trajectory": str(sel["trajectory"]),
        f"{PREFIX}.step": str(step),
        f"{PREFIX}.rule": str(rec["rule"]),
        f"{PREFIX}.keep_final": str(bool(rec.get("keep_final"))).lower(),
        f"{PREFIX}.choices_sha256": payload.choices_sha256,
        f"{PREFIX}.checkpoint": str(folder.resolve()),
    }
    return Registration(
        name=name,
        trajectory=str(sel["trajectory"]),
        step=step,
        rule=str(rec["rule"]),
        keep_final=bool(rec.get("keep_final")),
        description=evidence(sel, payload.summary),
        checkpoint=folder,
        tags=tags,
    )


def selection_file(selection: dict) -> Path:
    """The selection as ``selection.json`` in a fresh temporary folder (for artifact stores)."""
    path = Path(tempfile.mkdtemp(prefix="ckptsel-")) / "selection.json"
    path.write_text(json.dumps(selection, indent=1) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- W&B-style media
# W&B and Trackio share W&B's media classes (``Table(dataframe=…)``, ``Html``, ``Image``) and
# artifacts (``Artifact(name, type=…, description=…, metadata=…)``, ``add_file``,
# ``add_reference``): the helpers below build them once, each tool handing its own classes.
def media(
    payload: Payload, table: Callable[[pd.DataFrame], Any], html: Callable[[Path], Any], image: Callable[[Path], Any]
) -> dict[str, Any]:
    """The main table, ``report.html`` and the figures as the tool's media objects (made by
    ``table``, ``html`` and ``image``), keyed ``ckptsel/main_table``, ``ckptsel/report`` and
    ``ckptsel/figures/<name>``; empty when the payload has none of them."""
    out: dict[str, Any] = {}
    if payload.main_table is not None:
        out[f"{PREFIX}/main_table"] = table(payload.main_table)
    if payload.report is not None:
        out[f"{PREFIX}/report"] = html(payload.report)
    for png in payload.figures:
        out[f"{PREFIX}/figures/{png.stem}"] = image(png)
    return out


def results_artifact(artifact: Callable[..., Any], payload: Payload) -> Any:
    """The payload's files (and its selection, as ``selection.json``) as one artifact
    ``ckptsel-results`` made by the tool's ``Artifact`` class."""
    results = artifact(
        f"{PREFIX}-results",
        type=f"{PREFIX}-results",
        description=artifact_description(payload),
        metadata={"choices_sha256": payload.choices_sha256},
    )
    for path, folder in payload.files:
        results.add_file(str(path), name=f"{folder}/{path.name}".removeprefix(f"{PREFIX}/"))
    if payload.selection is not None:
        results.add_file(str(selection_file(payload.selection)), name="selection.json")
    return results


def artifact_description(payload: Payload) -> str:
    """What the results artifact holds, named from its files (a ``select`` alone holds no
    analysis: no summary, tables, figures or report)."""
    names = [f"{folder}/{p.name}".removeprefix(f"{PREFIX}/") for p, folder in payload.files]
    if payload.selection is not None:
        names.append("selection.json")
    kinds = []
    for label, test in (
        ("summary.json", lambda n: n == SUMMARY_FILE),
        ("tables", lambda n: n.startswith(f"{TABLES_DIR}/")),
        ("figures", lambda n: n.startswith(f"{FIGURES_DIR}/")),
        ("report.html", lambda n: n == REPORT_FILE),
        ("every metric (metrics.csv, metrics.json)", lambda n: n == "metrics.csv"),
        ("the frozen choices at the full budget (choices.csv)", lambda n: n == "choices.csv"),
        ("the recommendation (selection.json)", lambda n: n == "selection.json"),
    ):
        if any(test(n) for n in names):
            kinds.append(label)
    return "ckptsel results: " + ", ".join(kinds)


def model_artifact(artifact: Callable[..., Any], reg: Registration, selection: dict) -> Any:
    """The recommended checkpoint as a ``model`` artifact ``reg.name`` made by the tool's
    ``Artifact`` class: the evidence as its description, the tags as its metadata, the
    checkpoint folder as a reference (never uploaded) and the selection as ``selection.json``."""
    art = artifact(reg.name, type="model", description=reg.description, metadata=dict(reg.tags))
    if reg.checkpoint is not None:
        art.add_reference(reg.checkpoint.resolve().as_uri(), name="checkpoint", checksum=False)
    art.add_file(str(selection_file(selection)), name="selection.json")
    return art


# --------------------------------------------------------------------------- where to log
@dataclass(frozen=True)
class LogTarget:
    """Where a payload goes in one tracker.

    ``run_id``: the tracker's id of the run to log into (for Trackio, which resumes runs by name,
    the run's name); without it a new run named ``ckptsel-<run_name>`` (or ``ckptsel``) is
    created and linked to ``run_name`` (tag / group). ``project``: the MLflow experiment, the W&B
    or Trackio project (default: the tool's environment variable, else ``ckptsel``).
    ``tracking_uri``: MLflow only (default: ``MLFLOW_TRACKING_URI`` / MLflow's default).
    """

    run_id: str | None = None
    run_name: str | None = None
    project: str | None = None
    tracking_uri: str | None = None

    @property
    def new_run_name(self) -> str:
        return f"{PREFIX}-{self.run_name}" if self.run_name else PREFIX


@dataclass(frozen=True)
class LogJob:
    """One tracker's share of :func:`~ckptsel.trackers.log.log_results`: the payload, where it
    goes, and the registration to make there (None: log only). Each tool's ``log_<tool>`` takes
    one."""

    payload: Payload
    target: LogTarget = field(default_factory=LogTarget)
    registration: Registration | None = None


@dataclass(frozen=True)
class Logged:
    """Where a payload went: the tracker, its run, and the registered model (if any)."""

    tracker: str
    run_id: str
    run_name: str | None  # None: the tool did not say (a W&B run resumed offline by its id)
    location: str  # the store (MLflow URI, W&B run folder/URL, Trackio folder/project)
    registered: str | None = None  # "<name> version <v>" / "<name>:<alias>"

    def line(self) -> str:
        reg = f"; registered {self.registered} (alias {ALIAS})" if self.registered else ""
        run = f"{self.run_name} ({self.run_id})" if self.run_name else f"id {self.run_id}"
        return f"{self.tracker}: logged to run {run} in {self.location}{reg}"
