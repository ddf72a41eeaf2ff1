"""The typed summary: :class:`Summary` and its parts, whose serialisation is ``summary.json``
(SPEC §12, schema 1).

``stats.summarize`` builds a :class:`Summary`; ``workflows.analysis`` writes
``summary.to_dict()``; the report, ``verify`` and the CLI read it back with
:meth:`Summary.load` / :meth:`Summary.from_dict`, which check every key and name the file and
the key of anything malformed. ``Summary.from_dict(d).to_dict() == d`` for every summary
ckptsel writes, key order and optional keys included, so the file is byte-stable.

The parts, from the inside out:

* :class:`~ckptsel.results.Estimate` (``results.estimate``), the one estimate type;
* :class:`BudgetCell` (``G``, ``H`` at one budget) and :class:`MatchedHalf` (``G_in``,
  ``G_out``, ``B``);
* :class:`Gains` — the recurring block: ``budget`` (rule → budget label → cell), ``D`` (rule →
  estimate) and ``matched_half`` (rule → cell), the last two absent in some blocks;
* :class:`Sensitivities` (one variant, thinning ``k``, the complete-response NLL control
  :class:`NllControl`), :class:`TaskResult` (a ``by_task`` stratum),
  :class:`QuestionBootstrap`, :class:`SignCounts`, :class:`Population`;
* :class:`KeepTable` (``"keep"``, last): which checkpoint to keep per trajectory, one
  :class:`KeepRow` each (``ckptsel select``'s recommendation).

Accessors the report and the CLI need (interval level and method, ``D``'s start, the main
table) are properties and methods of :class:`Summary`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from ckptsel._util.markdown import md_cell
from ckptsel.choose.rules import RULE_ORDER
from ckptsel.choose.settings import FULL
from ckptsel.defaults import BUDGETS, CONFIDENCE
from ckptsel.errors import CkptselError
from ckptsel.results.estimate import Estimate, fmt, stored_value

SCHEMA = 1

# how each interval method's configuration intervals are named in captions
# (the methods themselves: ckptsel.stats.intervals.METHODS)
INTERVAL_LABELS = {
    "percentile": "configuration-bootstrap percentile",
    "cr2": "configuration cluster-robust t (CR2, Bell–McCaffrey df)",
    "wild": "configuration wild-bootstrap-t (Webb weights)",
}
NO_NLL_COMPLETE = "no complete-response NLL records (window=0) for the eligible items"

T = TypeVar("T")


# --------------------------------------------------------------------------- checked reading
@dataclass(frozen=True)
class _At:
    """Where a value sits: the file (or "summary") and the key path inside it, for messages."""

    source: str
    path: str = ""

    def __truediv__(self, key: object) -> _At:
        return _At(self.source, f"{self.path}/{key}" if self.path else str(key))

    def __str__(self) -> str:
        return f"{self.source}: {self.path or '(top level)'}"

    def fail(self, what: str) -> NoReturn:
        raise CkptselError(f"{self}: {what}")


def _object(d: Any, at: _At, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """``d`` as an object holding every ``required`` key and no key beyond ``optional``."""
    if not isinstance(d, dict):
        at.fail(f"expected an object, got {type(d).__name__}")
    for key in required:
        if key not in d:
            at.fail(f"key {key!r} is missing")
    for key in d:
        if key not in required and key not in optional:
            (at / key).fail("unknown key (not in summary.json schema 1)")
    return d


def _int(v: Any, at: _At) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        at.fail(f"expected an integer, got {v!r}")
    return v


def _str(v: Any, at: _At) -> str:
    if not isinstance(v, str):
        at.fail(f"expected a string, got {v!r}")
    return v


def _number(v: Any, at: _At) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        at.fail(f"expected a finite number, got {v!r}")
    return float(v)


def _mapping(d: Any, at: _At, read: Callable[[Any, _At], T]) -> dict[str, T]:
    """An object of any keys, each value read by ``read`` (key order kept)."""
    if not isinstance(d, dict):
        at.fail(f"expected an object, got {type(d).__name__}")
    return {key: read(v, at / key) for key, v in d.items()}


def _estimate(d: Any, at: _At) -> Estimate:
    return Estimate.read(d, str(at))


def _optional(d: dict, key: str, at: _At, read: Callable[[Any, _At], T]) -> T | None:
    return read(d[key], at / key) if key in d else None


def _dicts(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v.to_dict() for k, v in d.items()}


def _with_set(out: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``out`` and each of ``optional`` that is set (summary.json leaves an unset key out)."""
    out.update((key, value) for key, value in optional.items() if value is not None)
    return out


# --------------------------------------------------------------------------- cells and blocks
def budget_order(labels: Any) -> list[str]:
    """Budget labels in reading order: the finite budgets by size (whatever budgets the summary
    was made with), then "full", then anything else."""
    return sorted(labels, key=lambda s: (0, int(s), "") if s.isdigit() else (1 if s == FULL else 2, 0, s))


def rule_order(rules: Any) -> list[str]:
    """Rules in the report's order (:data:`ckptsel.choose.RULE_ORDER`), then any other, sorted."""
    rules = list(rules)
    return [r for r in RULE_ORDER if r in rules] + sorted(r for r in rules if r not in RULE_ORDER)


@dataclass(frozen=True)
class BudgetCell:
    """``G`` (gain over the final checkpoint) and ``H`` (gain over matched NLL) at one budget;
    either may be absent (no ``H`` without NLL records)."""

    G: Estimate | None = None
    H: Estimate | None = None

    def get(self, quantity: str) -> Estimate | None:
        """The estimate of ``quantity`` ("G" or "H"), None when absent."""
        return {"G": self.G, "H": self.H}.get(quantity)

    def to_dict(self) -> dict:
        return {k: e.to_dict() for k, e in (("G", self.G), ("H", self.H)) if e is not None}

    @classmethod
    def read(cls, d: Any, at: _At) -> BudgetCell:
        d = _object(d, at, (), ("G", "H"))
        return cls(_optional(d, "G", at, _estimate), _optional(d, "H", at, _estimate))


MATCHED_HALF_STATS = ("G_in", "G_out", "B")


@dataclass(frozen=True)
class MatchedHalf:
    """The matched-half diagnostic of one rule: gain on the half used to choose (``G_in``), on
    the other half (``G_out``) and the same-item optimism ``B = G_in − G_out``."""

    G_in: Estimate
    G_out: Estimate
    B: Estimate

    def get(self, stat: str) -> Estimate | None:
        """The estimate of ``stat`` ("G_in", "G_out" or "B")."""
        return {"G_in": self.G_in, "G_out": self.G_out, "B": self.B}.get(stat)

    def to_dict(self) -> dict:
        return {s: self.get(s).to_dict() for s in MATCHED_HALF_STATS}

    @classmethod
    def read(cls, d: Any, at: _At) -> MatchedHalf:
        d = _object(d, at, MATCHED_HALF_STATS)
        return cls(*(_estimate(d[s], at / s) for s in MATCHED_HALF_STATS))


@dataclass(frozen=True)
class Gains:
    """The recurring block: ``budget`` (rule → budget label → :class:`BudgetCell`), ``D`` (rule
    → estimate of ``G(full) − G(D_from)``) and ``matched_half`` (rule → :class:`MatchedHalf`).

    ``D`` is None where the block has none (the NLL control), ``matched_half`` None outside the
    study and task blocks; an empty dict is a block that has the key and no rule in it.
    """

    budget: dict[str, dict[str, BudgetCell]]
    D: dict[str, Estimate] | None = None
    matched_half: dict[str, MatchedHalf] | None = None

    @property
    def rules(self) -> list[str]:
        """The rules of ``budget`` in the report's order."""
        return rule_order(self.budget)

    @property
    def table_rules(self) -> list[str]:
        """The rows of a rule table: every built-in rule (one without estimates prints "–"), then a
        researcher's own rules that have some."""
        return [*RULE_ORDER, *(r for r in self.rules if r not in RULE_ORDER)]

    def labels(self, rule: str) -> list[str]:
        """The budget labels of ``rule`` in reading order (finite budgets, then "full")."""
        return budget_order(self.budget.get(rule, {}))

    def cell(self, rule: str, label: str = FULL) -> BudgetCell | None:
        return self.budget.get(rule, {}).get(label)

    def get(self, quantity: str, rule: str, label: str = FULL) -> Estimate | None:
        """``D`` of ``rule``, or ``G``/``H`` of ``rule`` at budget ``label``; None when absent."""
        if quantity == "D":
            return (self.D or {}).get(rule)
        cell = self.cell(rule, label)
        return None if cell is None else cell.get(quantity)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"budget": {r: _dicts(per) for r, per in self.budget.items()}}
        if self.D is not None:
            out["D"] = _dicts(self.D)
        if self.matched_half is not None:
            out["matched_half"] = _dicts(self.matched_half)
        return out

    @classmethod
    def read(cls, d: dict, at: _At, *, D: bool = True, matched_half: bool = False) -> Gains:
        """The block's keys of the object ``d`` (already checked for unknown keys)."""
        budget = _mapping(d["budget"], at / "budget", lambda per, a: _mapping(per, a, BudgetCell.read))
        return cls(
            budget,
            _mapping(d["D"], at / "D", _estimate) if D else None,
            _mapping(d["matched_half"], at / "matched_half", MatchedHalf.read) if matched_half else None,
        )

    @classmethod
    def read_block(cls, d: Any, at: _At) -> Gains:
        """A ``{"budget", "D"}`` object."""
        return cls.read(_object(d, at, ("budget", "D")), at)


@dataclass(frozen=True)
class NllControl:
    """The complete-response NLL control: the fraction of trajectories whose NLL choice is the
    same, and the gains with NLL measured on complete responses; or why it was skipped."""

    same_choice_fraction: Estimate | None = None
    gains: Gains | None = None
    skipped: str | None = None

    def to_dict(self) -> dict:
        if self.skipped is not None:
            return {"skipped": self.skipped}
        return {"same_choice_fraction": self.same_choice_fraction.to_dict(), **self.gains.to_dict()}

    @classmethod
    def read(cls, d: Any, at: _At) -> NllControl:
        if isinstance(d, dict) and "skipped" in d:
            return cls(skipped=_str(_object(d, at, ("skipped",))["skipped"], at / "skipped"))
        d = _object(d, at, ("same_choice_fraction", "budget"))
        same = _estimate(d["same_choice_fraction"], at / "same_choice_fraction")
        return cls(same, Gains.read(d, at, D=False))


@dataclass(frozen=True)
class Sensitivities:
    """One variant per group, thinning to every ``k``-th checkpoint (``k`` as a string key), and
    the complete-response NLL control."""

    one_variant: Gains
    thinning: dict[str, Gains]
    nll_complete: NllControl

    def to_dict(self) -> dict:
        return {"one_variant": self.one_variant.to_dict(), "thinning": _dicts(self.thinning), "nll_complete": self.nll_complete.to_dict()}

    @classmethod
    def read(cls, d: Any, at: _At) -> Sensitivities:
        d = _object(d, at, ("one_variant", "thinning", "nll_complete"))
        return cls(
            Gains.read_block(d["one_variant"], at / "one_variant"),
            _mapping(d["thinning"], at / "thinning", Gains.read_block),
            NllControl.read(d["nll_complete"], at / "nll_complete"),
        )


# --------------------------------------------------------------------------- who is in it
@dataclass(frozen=True)
class Range:
    """``{"min", "max"}`` of a count over trajectories."""

    min: int
    max: int

    def to_dict(self) -> dict:
        return {"min": self.min, "max": self.max}

    @classmethod
    def read(cls, d: Any, at: _At) -> Range:
        d = _object(d, at, ("min", "max"))
        return cls(_int(d["min"], at / "min"), _int(d["max"], at / "max"))


@dataclass(frozen=True)
class Exclusions:
    """Validation items excluded: the total, the count per reason (sorted), per trajectory."""

    total: int
    reasons: dict[str, int]
    by_trajectory: dict[str, int]

    def to_dict(self) -> dict:
        return {"total": self.total, **self.reasons, "by_trajectory": dict(self.by_trajectory)}

    @classmethod
    def read(cls, d: Any, at: _At) -> Exclusions:
        if not isinstance(d, dict):
            at.fail(f"expected an object, got {type(d).__name__}")
        _object(d, at, ("total", "by_trajectory"), tuple(d))
        reasons = {k: _int(v, at / k) for k, v in d.items() if k not in ("total", "by_trajectory")}
        return cls(_int(d["total"], at / "total"), reasons, _mapping(d["by_trajectory"], at / "by_trajectory", _int))


@dataclass(frozen=True)
class Population:
    """Who is in the study, counted from validation records (and the test pool sizes)."""

    trajectories: int
    configurations: int
    tasks: tuple[str, ...]
    checkpoints: Range
    validation_items: Range
    validation_exclusions: Exclusions
    test_items: dict[str, int] | None = None  # task -> test pool size
    nll_records: bool | None = None  # None: not recorded (summaries before NLL-free studies)

    @property
    def has_nll(self) -> bool:
        """Whether the study has validation NLL records (True when the summary does not say)."""
        return True if self.nll_records is None else self.nll_records

    def to_dict(self) -> dict:
        out = _with_set({"trajectories": self.trajectories}, nll_records=self.nll_records)
        out.update(
            configurations=self.configurations,
            tasks=list(self.tasks),
            checkpoints=self.checkpoints.to_dict(),
            validation_items=self.validation_items.to_dict(),
            validation_exclusions=self.validation_exclusions.to_dict(),
        )
        if self.test_items is not None:
            out["test_items"] = dict(self.test_items)
        return out

    @classmethod
    def read(cls, d: Any, at: _At) -> Population:
        required = ("trajectories", "configurations", "tasks", "checkpoints", "validation_items", "validation_exclusions")
        d = _object(d, at, required, ("nll_records", "test_items"))
        if not isinstance(d["tasks"], list):
            (at / "tasks").fail(f"expected a list of task names, got {d['tasks']!r}")
        nll = d.get("nll_records")
        if nll is not None and not isinstance(nll, bool):
            (at / "nll_records").fail(f"expected true or false, got {nll!r}")
        return cls(
            _int(d["trajectories"], at / "trajectories"),
            _int(d["configurations"], at / "configurations"),
            tuple(_str(t, at / "tasks") for t in d["tasks"]),
            Range.read(d["checkpoints"], at / "checkpoints"),
            Range.read(d["validation_items"], at / "validation_items"),
            Exclusions.read(d["validation_exclusions"], at / "validation_exclusions"),
            _optional(d, "test_items", at, lambda v, a: _mapping(v, a, _int)),
            nll,
        )

    @classmethod
    def coerce(cls, population: Population | dict) -> Population:
        """A :class:`Population` from one or from its dict (checked)."""
        if isinstance(population, Population):
            return population
        return cls.read(population, _At("population"))


@dataclass(frozen=True)
class TaskPopulation:
    """A task stratum's trajectories, configurations and test pool (``test_clusters`` only when
    test items share groups, which the question bootstrap resamples together)."""

    trajectories: int
    configurations: int
    test_items: int
    test_clusters: int | None = None

    def to_dict(self) -> dict:
        out = {"trajectories": self.trajectories, "configurations": self.configurations, "test_items": self.test_items}
        return _with_set(out, test_clusters=self.test_clusters)

    @classmethod
    def read(cls, d: Any, at: _At) -> TaskPopulation:
        d = _object(d, at, ("trajectories", "configurations", "test_items"), ("test_clusters",))
        return cls(*(_int(d[k], at / k) for k in ("trajectories", "configurations", "test_items")), _optional(d, "test_clusters", at, _int))


@dataclass(frozen=True)
class TaskResult:
    """One ``by_task`` stratum: its population, gains (with the matched half) and, in summaries
    written since strata carry them, its sensitivities."""

    population: TaskPopulation
    gains: Gains
    sensitivities: Sensitivities | None = None

    def to_dict(self) -> dict:
        out = {"population": self.population.to_dict(), **self.gains.to_dict()}
        if self.sensitivities is not None:
            out["sensitivities"] = self.sensitivities.to_dict()
        return out

    @classmethod
    def read(cls, d: Any, at: _At) -> TaskResult:
        d = _object(d, at, ("population", "budget", "D", "matched_half"), ("sensitivities",))
        return cls(
            TaskPopulation.read(d["population"], at / "population"),
            Gains.read(d, at, matched_half=True),
            _optional(d, "sensitivities", at, Sensitivities.read),
        )


@dataclass(frozen=True)
class QuestionBootstrap:
    """Test-question bootstrap intervals (frozen choices held fixed): overall and per task."""

    gains: Gains
    by_task: dict[str, Gains]

    def to_dict(self) -> dict:
        return {**self.gains.to_dict(), "by_task": _dicts(self.by_task)}

    @classmethod
    def read(cls, d: Any, at: _At) -> QuestionBootstrap:
        d = _object(d, at, ("budget", "D", "by_task"))
        return cls(Gains.read(d, at), _mapping(d["by_task"], at / "by_task", Gains.read_block))


@dataclass(frozen=True)
class SignCounts:
    """Configurations whose mean of a main-table quantity is above, below or at 0."""

    positive: int
    negative: int
    zero: int

    def to_dict(self) -> dict:
        return {"configurations_positive": self.positive, "configurations_negative": self.negative, "configurations_zero": self.zero}

    @classmethod
    def read(cls, d: Any, at: _At) -> SignCounts:
        keys = ("configurations_positive", "configurations_negative", "configurations_zero")
        d = _object(d, at, keys)
        return cls(*(_int(d[k], at / k) for k in keys))


# --------------------------------------------------------------------------- signal and noise
SIGNAL_NOISE_DEFINITION = (
    "per task, in pp of test accuracy: noise = the standard deviation (ddof 1) of each trajectory's "
    "test accuracy over its last checkpoints, root-mean-square over the trajectories; signal = the "
    "standard deviation (ddof 1) across configurations of their final-checkpoint test accuracy (the "
    "mean over each configuration's trajectories); ratio = signal / noise (after Heineman et al. "
    "2025, arXiv 2508.13144)"
)


@dataclass(frozen=True)
class TaskSignal:
    """One task's signal, noise (pp) and their ratio (:mod:`ckptsel.stats.noise`); None where
    the task's design gives none (one configuration; no trajectory with two checkpoints; no noise)."""

    signal: float | None
    noise: float | None
    ratio: float | None
    configurations: int
    trajectories: int  # the trajectories with two or more checkpoints (those the noise is of)

    def to_dict(self) -> dict:
        return {
            "signal": stored_value(self.signal),
            "noise": stored_value(self.noise),
            "ratio": stored_value(self.ratio),
            "configurations": self.configurations,
            "trajectories": self.trajectories,
        }

    @classmethod
    def read(cls, d: Any, at: _At) -> TaskSignal:
        keys = ("signal", "noise", "ratio", "configurations", "trajectories")
        d = _object(d, at, keys)
        values = [None if d[k] is None else _number(d[k], at / k) for k in keys[:3]]
        return cls(*values, _int(d["configurations"], at / "configurations"), _int(d["trajectories"], at / "trajectories"))


@dataclass(frozen=True)
class SignalNoise:
    """Whether each task can tell checkpoints apart (``summary.json``'s ``"signal_noise"``):
    :data:`SIGNAL_NOISE_DEFINITION`, over each trajectory's ``last`` checkpoints."""

    last: int
    tasks: dict[str, TaskSignal]

    def to_dict(self) -> dict:
        return {"definition": SIGNAL_NOISE_DEFINITION, "last_checkpoints": self.last, "tasks": _dicts(self.tasks)}

    @classmethod
    def read(cls, d: Any, at: _At) -> SignalNoise:
        d = _object(d, at, ("definition", "last_checkpoints", "tasks"))
        _str(d["definition"], at / "definition")
        return cls(_int(d["last_checkpoints"], at / "last_checkpoints"), _mapping(d["tasks"], at / "tasks", TaskSignal.read))


# --------------------------------------------------------------------------- the protocol
NOT_PREREGISTERED = "not pre-registered"


@dataclass(frozen=True)
class Preregistration:
    """Whether the study's protocol was frozen before the analysis (``ckptsel protocol
    freeze``): ``status`` is the line the report prints ("protocol frozen at … (hash …), before
    training" or "not pre-registered"); a frozen protocol also gives its full ``sha256``, the
    time it was frozen and whether that was before training. The protocol itself is
    ``protocol.json`` in the results folder; ``verify`` checks the chain protocol → choices →
    results."""

    status: str = NOT_PREREGISTERED
    sha256: str | None = None
    frozen_at: str | None = None
    before_training: bool | None = None

    @property
    def frozen(self) -> bool:
        return self.sha256 is not None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"status": self.status}
        if self.frozen:
            out.update(sha256=self.sha256, frozen_at=self.frozen_at, before_training=self.before_training)
        return out

    @classmethod
    def read(cls, d: Any, at: _At) -> Preregistration:
        d = _object(d, at, ("status",), ("sha256", "frozen_at", "before_training"))
        if "sha256" not in d:
            return cls(_str(d["status"], at / "status"))
        before = d.get("before_training")
        if not isinstance(before, bool):
            (at / "before_training").fail(f"expected true or false, got {before!r}")
        return cls(_str(d["status"], at / "status"), _str(d["sha256"], at / "sha256"), _str(d.get("frozen_at"), at / "frozen_at"), before)


# --------------------------------------------------------------------------- which checkpoint to keep
@dataclass(frozen=True)
class KeepRow:
    """One trajectory's answer to "which checkpoint to keep" (``ckptsel select``'s
    recommendation): the rule's choice on the full validation pool (its tie set), the
    split-validation gain of that choice over the final checkpoint (pp), and the checkpoint to
    keep — the final one unless that gain is resolved above 0 — with the reason. A trajectory
    ``select`` cannot answer has no choice and no gain, and keeps the final checkpoint; its
    reason says why."""

    trajectory: str
    configuration: str
    final_step: int
    keep_step: int
    keep_final: bool
    choice: tuple[int, ...]
    gain: Estimate | None
    reason: str

    def to_dict(self) -> dict:
        return {
            "trajectory": self.trajectory,
            "configuration": self.configuration,
            "final_step": self.final_step,
            "keep_step": self.keep_step,
            "keep_final": self.keep_final,
            "choice": list(self.choice),
            "gain": None if self.gain is None else self.gain.to_dict(),
            "reason": self.reason,
        }

    @classmethod
    def read(cls, d: Any, at: _At) -> KeepRow:
        keys = ("trajectory", "configuration", "final_step", "keep_step", "keep_final", "choice", "gain", "reason")
        d = _object(d, at, keys)
        if not isinstance(d["keep_final"], bool):
            (at / "keep_final").fail(f"expected true or false, got {d['keep_final']!r}")
        if not isinstance(d["choice"], list):
            (at / "choice").fail(f"expected a list of steps, got {d['choice']!r}")
        return cls(
            _str(d["trajectory"], at / "trajectory"),
            _str(d["configuration"], at / "configuration"),
            _int(d["final_step"], at / "final_step"),
            _int(d["keep_step"], at / "keep_step"),
            d["keep_final"],
            tuple(_int(v, at / "choice" / k) for k, v in enumerate(d["choice"])),
            None if d["gain"] is None else _estimate(d["gain"], at / "gain"),
            _str(d["reason"], at / "reason"),
        )


@dataclass(frozen=True)
class KeepTable:
    """Which checkpoint to keep, per trajectory (``summary.json``'s ``"keep"``, ``ckptsel
    select --all``): the rule, the ``select`` settings that made it (``select --all`` with them
    gives the same rows), one :class:`KeepRow` per trajectory, in trajectory order, and, for
    a table made with fewer than ``select``'s defaults, why it is provisional."""

    rule: str
    settings: dict[str, Any]
    trajectories: tuple[KeepRow, ...]
    # why the table may differ from ``select --all`` at its defaults (an analysis run with fewer
    # --permutations or --draws makes a quicker one); None when it is that table
    provisional: str | None = None

    def to_dict(self) -> dict:
        out = {"rule": self.rule, "settings": dict(self.settings), "trajectories": [row.to_dict() for row in self.trajectories]}
        return _with_set(out, provisional=self.provisional)

    @classmethod
    def read(cls, d: Any, at: _At) -> KeepTable:
        d = _object(d, at, ("rule", "settings", "trajectories"), ("provisional",))
        rows = d["trajectories"]
        if not isinstance(rows, list):
            (at / "trajectories").fail(f"expected a list, got {type(rows).__name__}")
        return cls(
            _str(d["rule"], at / "rule"),
            _mapping(d["settings"], at / "settings", lambda v, _: v),
            tuple(KeepRow.read(r, at / "trajectories" / k) for k, r in enumerate(rows)),
            None if d.get("provisional") is None else _str(d["provisional"], at / "provisional"),
        )


# --------------------------------------------------------------------------- the summary
_SETTINGS = ("confidence", "interval", "permutations", "partitions", "choices_sha256", "budgets", "D_from")
_REQUIRED = (
    "schema",
    "seed",
    "draws",
    "population",
    "budget",
    "D",
    "matched_half",
    "sensitivities",
    "by_task",
    "question_bootstrap",
    "descriptive",
)


@dataclass(frozen=True)
class Summary:
    """Everything ``ckptsel analyze`` concluded (``summary.json``, schema 1), typed.

    The settings that are absent from a summary are None here and absent from
    :meth:`to_dict`: ``interval`` (the percentile method), ``budgets``/``D_from`` (the default
    budgets), ``permutations``/``partitions``/``choices_sha256`` (not recorded). The
    properties give their effective values (:attr:`interval_method`, :attr:`finite_budgets`,
    :attr:`d_from`, :attr:`level`). ``protocol`` (:class:`Preregistration`) says whether the
    protocol was frozen before the analysis (None in summaries written before it did). ``gains`` holds the study's ``budget``, ``D`` and
    ``matched_half`` (also reachable as :attr:`budget`, :attr:`D`, :attr:`matched_half`).
    """

    seed: int
    draws: int
    population: Population
    gains: Gains
    sensitivities: Sensitivities
    by_task: dict[str, TaskResult]
    question_bootstrap: QuestionBootstrap
    descriptive: dict[str, SignCounts]
    schema: int = SCHEMA
    confidence: float | None = None
    interval: str | None = None
    permutations: int | None = None
    partitions: int | None = None
    choices_sha256: str | None = None
    budgets: tuple[int, ...] | None = None
    D_from: int | None = None
    joint_bootstrap: Gains | None = None
    warnings: tuple[str, ...] | None = None  # None: written before summaries carried warnings
    protocol: Preregistration | None = None  # None: written before summaries said
    keep: KeepTable | None = None  # which checkpoint to keep per trajectory (None: not made)
    signal_noise: SignalNoise | None = None  # whether each task tells checkpoints apart (None: not said)

    # ------------------------------------------------------------------ reading it
    @property
    def budget(self) -> dict[str, dict[str, BudgetCell]]:
        return self.gains.budget

    @property
    def D(self) -> dict[str, Estimate]:
        return self.gains.D or {}

    @property
    def matched_half(self) -> dict[str, MatchedHalf]:
        return self.gains.matched_half or {}

    @property
    def level(self) -> float:
        """The interval level (the default level when the summary does not say)."""
        return CONFIDENCE if self.confidence is None else self.confidence

    @property
    def level_percent(self) -> int:
        """The interval level in percent."""
        return int(round(self.level * 100))

    @property
    def interval_method(self) -> str:
        """How the configuration intervals were made (``"percentile"`` when not recorded)."""
        return self.interval or "percentile"

    @property
    def interval_label(self) -> str:
        """The configuration intervals' name, for captions."""
        return INTERVAL_LABELS[self.interval_method]

    @property
    def finite_budgets(self) -> tuple[int, ...]:
        """The finite validation budgets ("full" comes after them)."""
        return BUDGETS if self.budgets is None else tuple(self.budgets)

    @property
    def d_from(self) -> int:
        """The budget ``D`` starts from: ``D = G(full) − G(d_from)`` (``D_from``, else 32)."""
        return BUDGETS[0] if self.D_from is None else self.D_from

    @property
    def d_column(self) -> str:
        """The main table's D column header, naming the budget D starts from."""
        return f"D_r (full − {self.d_from})"

    def interval_sources(self) -> list[tuple[str, Gains]]:
        """(kind, gains) of each interval family the summary has: configuration (primary),
        test-question, joint."""
        sources = [("configuration", self.gains), ("test-question", self.question_bootstrap.gains), ("joint", self.joint_bootstrap)]
        return [(kind, g) for kind, g in sources if g is not None]

    @property
    def main_table_title(self) -> str:
        pop = self.population
        return (
            f"Main table — {pop.trajectories} trajectories in {pop.configurations} configurations; "
            f"percentage points, {self.level_percent}% {self.interval_label} intervals "
            f"({self.draws} draws)."
        )

    def main_table_rows(self) -> list[tuple[str, str, str, str]]:
        """(rule, D_r, H_r(full), G_r(full)) formatted as 'mean [lo, hi]' in pp, every rule of
        :data:`ckptsel.choose.RULE_ORDER` (a missing estimate prints as "–"), then a researcher's own."""
        g = self.gains
        return [(r, fmt(g.get("D", r)), fmt(g.get("H", r)), fmt(g.get("G", r))) for r in g.table_rules]

    def main_table_markdown(self) -> str:
        lines = [
            self.main_table_title,
            "",
            f"| rule | {self.d_column} | H_r(full) vs matched NLL | G_r(full) vs final |",
            "|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in self.main_table_rows()]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """The ``summary.json`` object: keys in the order written, optional keys only when set."""
        out: dict[str, Any] = {"schema": self.schema, "seed": self.seed, "draws": self.draws}
        for key in _SETTINGS:
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if key == "budgets" else value
        if self.protocol is not None:
            out["protocol"] = self.protocol.to_dict()
        out["population"] = self.population.to_dict()
        out.update(self.gains.to_dict())
        out["sensitivities"] = self.sensitivities.to_dict()
        out["by_task"] = _dicts(self.by_task)
        out["question_bootstrap"] = self.question_bootstrap.to_dict()
        if self.joint_bootstrap is not None:
            out["joint_bootstrap"] = self.joint_bootstrap.to_dict()
        out["descriptive"] = _dicts(self.descriptive)
        if self.signal_noise is not None:
            out["signal_noise"] = self.signal_noise.to_dict()
        if self.warnings is not None:
            out["warnings"] = list(self.warnings)
        if self.keep is not None:
            out["keep"] = self.keep.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any, source: str | Path = "summary") -> Summary:
        """A summary read back from its ``summary.json`` object (schema 1, also as written by
        earlier versions); raises :class:`CkptselError` naming ``source`` and the key of the
        first malformed value."""
        at = _At(str(source))
        d = _object(d, at, _REQUIRED, (*_SETTINGS, "protocol", "joint_bootstrap", "warnings", "keep", "signal_noise"))
        if d["schema"] != SCHEMA:
            (at / "schema").fail(f"schema {d['schema']!r} is not supported (expected {SCHEMA})")
        return cls(
            seed=_int(d["seed"], at / "seed"),
            draws=_int(d["draws"], at / "draws"),
            population=Population.read(d["population"], at / "population"),
            gains=Gains.read(d, at, matched_half=True),
            sensitivities=Sensitivities.read(d["sensitivities"], at / "sensitivities"),
            by_task=_mapping(d["by_task"], at / "by_task", TaskResult.read),
            question_bootstrap=QuestionBootstrap.read(d["question_bootstrap"], at / "question_bootstrap"),
            descriptive=_mapping(d["descriptive"], at / "descriptive", SignCounts.read),
            **_read_settings(d, at),
            joint_bootstrap=_optional(d, "joint_bootstrap", at, Gains.read_block),
            warnings=_optional(d, "warnings", at, _warnings),
            protocol=_optional(d, "protocol", at, Preregistration.read),
            keep=_optional(d, "keep", at, KeepTable.read),
            signal_noise=_optional(d, "signal_noise", at, SignalNoise.read),
        )

    @classmethod
    def load(cls, path: str | Path) -> Summary:
        """Read and check a ``summary.json`` file."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise CkptselError(f"{path}: not found") from err
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise CkptselError(f"{path}: not valid JSON ({err})") from err
        return cls.from_dict(data, path)

    @classmethod
    def coerce(cls, summary: Summary | dict) -> Summary:
        """A :class:`Summary` from one or from its ``summary.json`` dict (checked)."""
        return summary if isinstance(summary, Summary) else cls.from_dict(summary)


def _read_settings(d: dict, at: _At) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "confidence" in d:
        c = d["confidence"]
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 < c < 1.0:
            (at / "confidence").fail(f"expected a level between 0 and 1, got {c!r}")
        out["confidence"] = c
    if "interval" in d and d["interval"] not in INTERVAL_LABELS:
        (at / "interval").fail(f"expected one of {', '.join(INTERVAL_LABELS)}, got {d['interval']!r}")
    out["interval"] = d.get("interval")
    for key in ("permutations", "partitions", "D_from"):
        out[key] = _optional(d, key, at, _int)
    out["choices_sha256"] = _optional(d, "choices_sha256", at, _str)
    if "budgets" in d:
        if not isinstance(d["budgets"], list) or not d["budgets"]:
            (at / "budgets").fail(f"expected a list of budgets, got {d['budgets']!r}")
        out["budgets"] = tuple(_int(b, at / "budgets") for b in d["budgets"])
    return out


def _warnings(v: Any, at: _At) -> tuple[str, ...]:
    if not isinstance(v, list):
        at.fail(f"expected a list of strings, got {v!r}")
    return tuple(_str(w, at) for w in v)


# --------------------------------------------------------------------------- thin helpers
def interval_label(summary: Summary | dict) -> str:
    """How a summary's configuration intervals were made, for captions."""
    return Summary.coerce(summary).interval_label


def main_table_rows(summary: Summary | dict) -> list[tuple[str, str, str, str]]:
    """(rule, D_r, H_r(full), G_r(full)) as printed (see :meth:`Summary.main_table_rows`)."""
    return Summary.coerce(summary).main_table_rows()
