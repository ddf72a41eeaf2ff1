"""The selection rules, each defined once (SPEC §3, §5).

A :class:`RuleSpec` says everything the rest of the package needs to know about a rule: its
per-item validation signal, whether a larger sum is better, whether it reads labels, whether
its signal depends on the checkpoint grid (so checkpoint thinning must recompute it), and how
the report names and draws it. ``choose`` (study choices), ``select`` (practitioner mode),
``evaluate`` (G/H/D), ``stats`` (summary blocks) and the report all iterate over
:data:`RULES`; adding a rule is one entry here plus its signal function.

``RULES`` lists the rules that choose checkpoints, in the order of every table and of
``summary.json``; ``MATCHED_HALF_RULES`` the rules of the matched-half diagnostic on the test
pool (SPEC §5), where ``oracle`` selects by the correctness labels of the selection half.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ckptsel.choose import core
from ckptsel.records.load import ValidationData
from ckptsel.records.schema import MATCHED_WINDOW

Signal = Callable[[ValidationData], "np.ndarray | None"]


@dataclass(frozen=True)
class RuleSpec:
    """One selection rule.

    ``signal(v)`` gives the ``(T, n)`` per-item signal on a trajectory's eligible validation
    pool (``None`` when the records lack it, e.g. no NLL records); the rule picks the
    checkpoint(s) with the largest (``maximize``) or smallest sum over a subset, ties shared
    uniformly. A rule without a signal function keeps the final checkpoint.
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

    @property
    def chooses(self) -> bool:
        """Whether the rule reads validation data (``last`` does not)."""
        return self.signal is not None


def accuracy_signal(v: ValidationData) -> np.ndarray:
    """``(T, n)`` int64 correctness (uses labels)."""
    return v.correct.astype(np.int64)


def agreement_signal(v: ValidationData) -> np.ndarray:
    """``(T, n)`` int64: does the checkpoint give the item's plurality answer over the grid?"""
    return core.plurality_agreement(v.answers).astype(np.int64)


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
