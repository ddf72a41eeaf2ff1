"""The selection rules, each defined once (SPEC §3, §5), and a researcher's own.

A :class:`RuleSpec` says everything the rest of the package needs to know about a rule: its
per-item validation signal, whether a larger sum is better, whether it reads labels, whether
its signal depends on the checkpoint grid (so checkpoint thinning must recompute it), and how
the report names and draws it. ``choose`` (study choices), ``select`` (practitioner mode),
``evaluate`` (G/H/D), ``stats`` (summary blocks) and the report all iterate over
:data:`RULES`; adding a rule is one entry here plus its signal function.

``RULES`` lists the rules that choose checkpoints, in the order of every table and of
``summary.json``; ``MATCHED_HALF_RULES`` the rules of the matched-half diagnostic on the test
pool (SPEC §5), where ``oracle`` selects by the correctness labels of the selection half.

A researcher's own rule (:class:`UserRule`: ``[rules.NAME]`` in a study, ``--rule FILE.py:fn``)
is declared in the choices' settings (hashed with them) and becomes a :class:`RuleSpec` only
once its function is bound (:func:`user_rule`, :func:`bind_rules`): its signal sees a :class:`RuleInput`, the
trajectory's validation records and nothing else. :func:`rule_specs` gives every rule a choice
is made with, built-in first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ckptsel._util.usercode import code_path, file_digest, import_function, one_line
from ckptsel.choose import core
from ckptsel.errors import CkptselError
from ckptsel.records.load import ValidationData, ValidationExtras
from ckptsel.records.schema import MATCHED_WINDOW, average_rule_name, average_step, candidate_name, is_average_step, n_averages

Signal = Callable[[ValidationData], "np.ndarray | None"]


@dataclass(frozen=True)
class RuleSpec:
    """One selection rule.

    ``signal(v)`` gives the ``(T, n)`` per-item signal on a trajectory's eligible validation
    pool (``None`` when the records lack it, e.g. no NLL records); the rule picks the
    checkpoint(s) with the largest (``maximize``) or smallest sum over a subset, ties shared
    uniformly. A rule without a signal function keeps a fixed candidate: the final checkpoint,
    or (``fixed_step``) the average recorded at that reserved step.
    """

    name: str
    signal: Signal | None
    maximize: bool
    uses_labels: bool
    grid_dependent: bool = False  # a checkpoint's signal depends on the other checkpoints
    label: str = ""  # legend text in the report's figures
    words: str = ""  # plain-language name in the report's claims ("" = not a claim rule)
    color: str = "black"
    marker: str = "x"
    fixed_step: int | None = None  # a fixed choice of the average at this step (None: the final checkpoint)

    @property
    def chooses(self) -> bool:
        """Whether the rule reads validation data (``last`` does not)."""
        return self.signal is not None


def accuracy_signal(v: ValidationData) -> np.ndarray:
    """``(T, n)`` int64 correctness (uses labels)."""
    return v.correct.astype(np.int64)


def agreement_signal(v: ValidationData) -> np.ndarray:
    """``(T, n)`` int64: does the candidate give the item's plurality answer over the grid's
    checkpoints? (Averages are scored against the checkpoints' plurality; they do not vote.)"""
    return core.agreement_with_checkpoints(v.answers, n_averages(v.steps)).astype(np.int64)


def nll_signal(v: ValidationData) -> np.ndarray | None:
    """``(T, n)`` float64 matched-window NLL sums; ``None`` without NLL records."""
    return v.nll.get(MATCHED_WINDOW)


ACCURACY = RuleSpec(
    "accuracy",
    accuracy_signal,
    maximize=True,
    uses_labels=True,
    label="accuracy (labels)",
    words="generated accuracy (uses labels)",
    color="#1f77b4",
    marker="o",
)
AGREEMENT = RuleSpec(
    "agreement",
    agreement_signal,
    maximize=True,
    uses_labels=False,
    grid_dependent=True,
    label="agreement (no labels)",
    words="checkpoint agreement (no labels)",
    color="#2ca02c",
    marker="s",
)
NLL = RuleSpec("nll", nll_signal, maximize=False, uses_labels=False, label="matched NLL", words="matched NLL", color="#d62728", marker="^")
LAST = RuleSpec("last", None, maximize=True, uses_labels=False, label="last (final checkpoint)", color="#7f7f7f", marker="D")
ORACLE = RuleSpec(  # matched half only: correctness on the selection half of the *test* pool
    "oracle", accuracy_signal, maximize=True, uses_labels=True, label="oracle (labels of S)", color="#9467bd", marker="P"
)

RULES: dict[str, RuleSpec] = {r.name: r for r in (ACCURACY, AGREEMENT, NLL, LAST)}
"""The choice rules, in reporting order."""
MATCHED_HALF_RULES: dict[str, RuleSpec] = {r.name: r for r in (ORACLE, AGREEMENT)}
"""The matched-half diagnostic's rules (SPEC §5)."""
ALL_RULES: dict[str, RuleSpec] = {**RULES, **MATCHED_HALF_RULES}
RULE_ORDER: tuple[str, ...] = tuple(RULES)
H_BASELINE = NLL.name  # H_r is the gain over this rule's choice (SPEC §4)
SIGNAL_RULES: tuple[str, ...] = tuple(r.name for r in RULES.values() if r.chooses)


# --------------------------------------------------------------------------- averages as fixed choices
AVERAGE_RULE_RE = re.compile(r"^(mean_last[0-9]+|ema_0_[0-9]+)$")  # names kept for the averages' rules


def average_rule(step: int) -> RuleSpec:
    """The fixed choice of the average recorded at ``step`` (like ``last``: no validation read)."""
    name = candidate_name(step)
    if name.startswith("average-last"):
        words = f"keeping the mean of the last {-int(step)} checkpoints ({name})"
    else:
        words = f"keeping the EMA of the checkpoints, decay {name[len('ema-') :]} ({name})"
    return RuleSpec(
        average_rule_name(step),
        None,
        maximize=True,
        uses_labels=False,
        label=f"{name} (average)",
        words=words,
        color="#17becf",
        marker="*",
        fixed_step=int(step),
    )


def average_rule_step(rule: str) -> int | None:
    """The reserved step of the average an average's rule name keeps (``mean_last3`` -> -3),
    None for any other name."""
    if not AVERAGE_RULE_RE.fullmatch(rule):
        return None
    name = "average-last" + rule[len("mean_last") :] if rule.startswith("mean_last") else "ema-0." + rule[len("ema_0_") :]
    try:
        return average_step(name)
    except CkptselError:
        return None


def shown_rule(rule: str) -> RuleSpec | None:
    """How the report names and draws ``rule``: a built-in rule's spec, an average's, or None
    (a researcher's own)."""
    if rule in ALL_RULES:
        return ALL_RULES[rule]
    step = average_rule_step(rule)
    return None if step is None else average_rule(step)


def check_averages(steps) -> tuple[int, ...]:
    """The averages' reserved steps as a sorted tuple (from a frozen choices' settings too)."""
    if isinstance(steps, (str, bytes, dict)) or not hasattr(steps, "__iter__"):
        raise CkptselError(f"averages must be a list of the averages' reserved steps, not {steps!r}")
    out = tuple(sorted({int(s) for s in steps if isinstance(s, int) and not isinstance(s, bool) and is_average_step(s)}))
    if len(out) != len(list(steps)):
        raise CkptselError(f"averages: {list(steps)!r} are not distinct averages' reserved steps")
    return out


# --------------------------------------------------------------------------- a researcher's own rule
RULE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@dataclass(frozen=True)
class RuleInput:
    """What a researcher's rule sees of one trajectory: its eligible validation pool, as arrays
    over (checkpoints × items), and nothing of the test records.

    ``steps`` ``(T,)`` ascending (the last is the final checkpoint); ``item_ids``, ``groups``
    ``(n,)``; ``answers`` ``(T, n)`` int codes (equal code = equal extracted answer);
    ``nll`` window → ``(T, n)`` NLL sums and ``n_tokens`` window → ``(n,)``; ``correct``
    ``(T, n)`` bool only for a rule that declares ``uses_labels``; :meth:`texts` the generated
    texts and :meth:`scores` a per-item score column (``score_<name>``), read from the
    validation records when asked."""

    trajectory: str
    configuration: str
    task: str
    steps: np.ndarray
    item_ids: np.ndarray
    groups: np.ndarray
    answers: np.ndarray
    nll: Mapping[int, np.ndarray]
    n_tokens: Mapping[int, np.ndarray]
    rule: str
    _correct: np.ndarray | None = field(default=None, repr=False)
    _extras: ValidationExtras | None = field(default=None, repr=False)

    @classmethod
    def of(cls, v: ValidationData, rule: UserRule, extras: ValidationExtras | None) -> RuleInput:
        arrays = [_read_only(a) for a in (v.steps, v.item_ids, v.groups, v.answers)]
        nll = {w: _read_only(a) for w, a in v.nll.items()}
        n_tokens = {w: _read_only(a) for w, a in v.n_tokens.items()}
        correct = _read_only(v.correct) if rule.uses_labels else None
        return cls(v.trajectory, v.configuration, v.task, *arrays, nll, n_tokens, rule.name, correct, extras)

    @property
    def correct(self) -> np.ndarray:
        if self._correct is None:
            raise CkptselError(f"rule {self.rule!r} declared uses_labels = false: its signal cannot read the validation labels")
        return self._correct

    def texts(self) -> np.ndarray:
        """``(T, n)`` object array of the generated texts (None where the records have none)."""
        return self._records().texts(self.trajectory, self.steps, self.item_ids)

    def scores(self, name: str) -> np.ndarray:
        """``(T, n)`` float64 of the generation records' column ``score_<name>`` (e.g. a reward
        model's score per generation), NaN where a row has none."""
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_]{1,64}", name):
            raise CkptselError(f"rule {self.rule!r}: scores({name!r}): name a column score_<name> (letters, digits, _)")
        return self._records().scores(self.trajectory, name, self.steps, self.item_ids)

    def _records(self) -> ValidationExtras:
        if self._extras is None:
            raise CkptselError(f"rule {self.rule!r}: no records folder to read texts or scores from")
        return self._extras


def _read_only(a: np.ndarray) -> np.ndarray:
    view = np.asarray(a).view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class UserRule:
    """A researcher's selection rule as declared: ``name``, the ``signal`` as written
    (``"rules.py:fn"``), the SHA-256 of its file, ``maximize`` and ``uses_labels``. The
    declaration is what the choices' hash covers; ``function`` (bound by the caller that was
    named the file on purpose, never read from a results folder) is what runs."""

    name: str
    signal: str
    sha256: str
    maximize: bool = True
    uses_labels: bool = False
    function: Callable[[RuleInput], Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not RULE_NAME_RE.fullmatch(self.name):
            raise CkptselError(f"rule name {self.name!r}: lower-case letters, digits and _, starting with a letter, at most 40")
        if self.name in ALL_RULES:
            raise CkptselError(f"rule name {self.name!r} is a built-in rule's; give yours another name")
        if AVERAGE_RULE_RE.fullmatch(self.name):
            raise CkptselError(f"rule name {self.name!r} names an average's fixed choice; give yours another name")
        for key in ("maximize", "uses_labels"):
            if not isinstance(getattr(self, key), bool):
                raise CkptselError(f"rule {self.name!r}: {key} must be true or false, not {getattr(self, key)!r}")
        if not isinstance(self.signal, str) or not isinstance(self.sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise CkptselError(f"rule {self.name!r}: signal must be 'file.py:function' with its file's SHA-256")

    @classmethod
    def of(cls, data: Any) -> UserRule:
        """A declaration from its dictionary (:meth:`to_dict`; a frozen choices' settings)."""
        if isinstance(data, UserRule):
            return data
        keys = {"name", "signal", "sha256", "maximize", "uses_labels"}
        if not isinstance(data, Mapping) or set(data) != keys:
            raise CkptselError(f"a rule declaration has the keys {sorted(keys)}, not {data!r}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "signal": self.signal, "sha256": self.sha256, "maximize": self.maximize, "uses_labels": self.uses_labels}

    def spec(self, extras: ValidationExtras | None = None) -> RuleSpec:
        """The rule as the choosing code runs it; refused in one line while no function is bound."""
        if self.function is None:
            raise CkptselError(
                f"rule {self.name!r} is your own code ({self.signal}, sha256 {self.sha256[:12]}): name its file "
                f"(--rule {self.name}={self.signal}) to run it; code named only in a results folder is never run"
            )
        return RuleSpec(
            self.name,
            lambda v: self.run(v, extras),
            maximize=self.maximize,
            uses_labels=self.uses_labels,
            grid_dependent=True,  # it may read the other checkpoints; thinning recomputes it
            label=f"{self.name} (yours{', labels' if self.uses_labels else ''})",
            words=f"your rule {self.name}",
            color="#8c564b",
            marker="v",
        )

    def run(self, v: ValidationData, extras: ValidationExtras | None = None) -> np.ndarray:
        """``(T, n)`` the signal of trajectory ``v``: int64 (bool and int results) or float64,
        finite; anything else, or whatever the function raises, is one line naming both."""
        where = f"rule {self.name!r} ({self.signal}) on trajectory {v.trajectory!r}"
        try:
            out = self.function(RuleInput.of(v, self, extras))
        except KeyboardInterrupt:
            raise
        except CkptselError as err:
            raise CkptselError(f"{where}: {err}") from None
        except BaseException as err:  # SystemExit included: user code never ends the command
            raise CkptselError(f"{where}: raised {one_line(err)}") from None
        return _checked_signal(out, v.correct.shape, where)


def _checked_signal(out: Any, shape: tuple[int, int], where: str) -> np.ndarray:
    """The signal as the choosing code sums it exactly: int64 when every sum over the items stays
    below 2**24 (the float32 count products are exact there), float64 otherwise (exact for
    integers below 2**53, and compared as :meth:`~ckptsel.choose.core.NestedSubsets.ordered_sums`
    says); sums that overflow are refused."""
    try:
        a = np.asarray(out)
    except Exception as err:  # noqa: BLE001 - whatever the object is, one line
        raise CkptselError(f"{where}: returned {type(out).__name__}, not an array ({one_line(err)})") from None
    if a.dtype.kind not in "biuf":
        raise CkptselError(f"{where}: returned {a.dtype} values; give numbers, one per (checkpoint, item)")
    if a.shape != shape:
        raise CkptselError(f"{where}: returned shape {a.shape}; give (checkpoints, items) = {shape}")
    if a.dtype.kind == "f":
        a = a.astype(np.float64)
        if not np.isfinite(a).all():
            bad = np.argwhere(~np.isfinite(a))[0]
            raise CkptselError(f"{where}: returned {a[tuple(bad)]} at checkpoint {bad[0]}, item {bad[1]}; every value must be finite")
    elif np.abs(a.astype(np.float64)).sum(axis=1).max(initial=0.0) < 2**24:
        return a.astype(np.int64)
    else:
        a = a.astype(np.float64)
    if not np.isfinite(np.abs(a).sum(axis=1)).all() or np.abs(a).sum(axis=1).max(initial=0.0) >= 2**53:
        raise CkptselError(f"{where}: its values are too large to sum exactly over the items (keep every sum below 2**53)")
    return a


def rule_specs(
    user: tuple[UserRule, ...] = (), extras: ValidationExtras | None = None, averages: tuple[int, ...] = ()
) -> dict[str, RuleSpec]:
    """Every rule a choice is made with: the built-in :data:`RULES`, the averages' fixed choices
    (``averages``: their reserved steps), then the researcher's own (``extras``: what they may
    read of the validation records beyond the arrays)."""
    fixed = (average_rule(s) for s in sorted(averages, reverse=True))
    return {**RULES, **{r.name: r for r in fixed}, **{u.name: u.spec(extras) for u in user}}


def rule_names(user: tuple[UserRule, ...] = (), averages: tuple[int, ...] = ()) -> tuple[str, ...]:
    """Their names in reporting order (no function needed)."""
    return (*RULE_ORDER, *(average_rule_name(s) for s in sorted(averages, reverse=True)), *(u.name for u in user))


def user_rule(signal: str, *, name: str | None = None, base: str = ".", owner: str | None = None, **declared: Any) -> UserRule:
    """A researcher's rule from ``signal`` (``"rules.py:fn"``: relative to ``base``; inside the
    folder of the ``owner`` file that names it, e.g. ``"study file"``; any path for a command-line
    option), imported now. ``name`` defaults to the function's; ``maximize`` and ``uses_labels``
    come from ``declared`` (a study's ``[rules.NAME]``) or from the function's own attributes of
    those names (default: larger is better, no labels); the two disagreeing is refused."""
    what = f"rule {name!r}: signal" if name else "--rule"
    path, function_name = code_path(signal, base, what, owner, "rules.py:function")
    sha = file_digest(path)
    function = import_function(path, function_name, signal, what)
    settings = {}
    for key, default in (("maximize", True), ("uses_labels", False)):
        own, given = getattr(function, key, None), declared.pop(key, None)
        if own is not None and given is not None and own != given:
            raise CkptselError(f"rule {name or function_name!r}: {key} = {given!r}, but {signal} says {key} = {own!r}")
        settings[key] = default if own is None and given is None else (given if given is not None else own)
    if declared:
        raise CkptselError(f"rule {name or function_name!r}: unknown keys {sorted(declared)} (known: signal, maximize, uses_labels)")
    return UserRule(name or function_name, signal.strip(), sha, function=function, **settings)


def bind_rules(declared: tuple[UserRule, ...], given: tuple[UserRule, ...]) -> tuple[UserRule, ...]:
    """The rules a frozen analysis declared, each bound to the function of the rule the user
    named again (``given``: by name, the same file bytes and settings); any other is refused."""
    by_name = {u.name: u for u in given}
    for extra in sorted(set(by_name) - {d.name for d in declared}):
        raise CkptselError(f"rule {extra!r} was not part of this analysis (it used: {', '.join(d.name for d in declared) or 'none'})")
    out = []
    for d in declared:
        u = by_name.get(d.name)
        if u is None:
            out.append(d)  # refused when it is about to run (UserRule.spec)
        elif (u.sha256, u.maximize, u.uses_labels) != (d.sha256, d.maximize, d.uses_labels):
            raise CkptselError(
                f"rule {d.name!r}: the analysis used {d.signal} with sha256 {d.sha256[:12]} "
                f"(maximize={d.maximize}, uses_labels={d.uses_labels}); {u.signal} is sha256 {u.sha256[:12]} "
                f"(maximize={u.maximize}, uses_labels={u.uses_labels})"
            )
        else:
            out.append(replace(d, function=u.function))
    return tuple(out)
