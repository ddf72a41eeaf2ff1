"""Choosing: validation records → selection-probability vectors, frozen and hashed (SPEC §3, §4, §6, §7).

Nothing here can see a test record: :func:`choose` takes only :class:`ValidationData`.
:func:`freeze` writes the choices and their SHA-256; :func:`load_frozen` is the only way
to obtain a :class:`FrozenChoices`, and it verifies the hash first. Scoring accepts nothing
else. The rules (signal, direction) come from :mod:`ckptsel.choose.rules`, the budgets, thinning
factors and settings' defaults from :mod:`ckptsel.defaults`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ckptsel import defaults
from ckptsel._util.checks import check_int, check_seed
from ckptsel.choose.rules import UserRule, check_averages, rule_names
from ckptsel.defaults import BUDGETS, ONE_VARIANT_BUDGETS
from ckptsel.errors import CkptselError

FULL = "full"


@dataclass(frozen=True)
class ChoiceSettings:
    """Permutations, seed and the finite validation budgets ("full" is always added).

    ``budgets`` are kept sorted and distinct; ``D`` is ``G(full) − G(budgets[0])``. The
    one-variant sensitivity uses :data:`~ckptsel.defaults.ONE_VARIANT_BUDGETS` with the default
    budgets and the chosen budgets otherwise (in both cases those that fit its groups). The
    settings' dictionary (hashed with the choices) names the budgets only when they are not
    the default, so default choices hash as before. ``rules``: a researcher's own rules
    (:class:`~ckptsel.choose.rules.UserRule`), chosen with after the built-in ones; their
    declarations are hashed with the choices (named only when there are some). ``averages``:
    the reserved steps of the averages the records hold for every trajectory, each a fixed
    choice beside ``last`` and a candidate every rule chooses among (named only when there are
    some, so choices without averages hash as before).
    """

    permutations: int = defaults.PERMUTATIONS
    seed: int = defaults.SEED
    budgets: tuple[int, ...] = BUDGETS
    rules: tuple[UserRule, ...] = ()
    averages: tuple[int, ...] = ()

    def __post_init__(self):
        check_int(self.permutations, "--permutations", low=1, high=defaults.MAX_PERMUTATIONS)
        check_seed(self.seed)
        object.__setattr__(self, "budgets", check_budgets(self.budgets))
        object.__setattr__(self, "rules", check_rules(self.rules))
        object.__setattr__(self, "averages", check_averages(self.averages))

    @property
    def rule_names(self) -> tuple[str, ...]:
        """Every rule's name, in reporting order: the built-in rules, then the researcher's."""
        return rule_names(self.rules, self.averages)

    @property
    def one_variant_budgets(self) -> tuple[int, ...]:
        return ONE_VARIANT_BUDGETS if self.budgets == BUDGETS else self.budgets

    @property
    def d_from(self) -> int:
        """The budget ``D`` starts from: the smallest."""
        return self.budgets[0]

    def to_dict(self) -> dict:
        out: dict = {"permutations": self.permutations, "seed": self.seed}
        if self.budgets != BUDGETS:
            out["budgets"] = list(self.budgets)
        if self.rules:
            out["rules"] = [r.to_dict() for r in self.rules]
        if self.averages:
            out["averages"] = list(self.averages)
        return out


def check_rules(rules) -> tuple[UserRule, ...]:
    """A researcher's rules as a tuple of declarations (from dictionaries too), names distinct."""
    if isinstance(rules, (str, bytes, dict)) or not hasattr(rules, "__iter__"):
        raise CkptselError(f"rules must be a list of rule declarations, not {rules!r}")
    out = tuple(UserRule.of(r) for r in rules)
    names = [r.name for r in out]
    if len(set(names)) != len(names):
        raise CkptselError(f"rules: each name once, got {names}")
    return out


MAX_BUDGET = 10**9


def check_budgets(budgets) -> tuple[int, ...]:
    """Budgets as a sorted tuple of distinct positive integers; one clear error otherwise."""
    if isinstance(budgets, (str, bytes)) or not hasattr(budgets, "__iter__"):
        raise CkptselError(f"budgets must be a list of positive integers, not {budgets!r}")
    values = list(budgets)
    for b in values:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 1 <= b <= MAX_BUDGET:
            raise CkptselError(f"budgets must be positive integers (at most {MAX_BUDGET}); got {b!r} in {values!r}")
    if not values:
        raise CkptselError("budgets: give at least one finite validation budget (e.g. 32,128,512)")
    return tuple(sorted({int(b) for b in values}))


def parse_budget_list(text: str) -> list[int]:
    """``"32,128,32"`` → ``[32, 128, 32]``: the ``--budgets`` option's integers as given (repeats
    kept so that :func:`budget_notes` can say what was repeated); the values are checked once,
    by :func:`check_budgets` (:class:`ChoiceSettings` calls it)."""
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError as err:
        raise CkptselError(f"--budgets must be comma-separated positive integers such as 32,128,512 (got {text!r})") from err


def parse_budgets(text: str) -> tuple[int, ...]:
    """``"32,128,512"`` → ``(32, 128, 512)`` (the ``--budgets`` option), sorted and distinct."""
    return check_budgets(parse_budget_list(text))


def budget_notes(given: Sequence[int], pool_sizes: Sequence[int]) -> list[str]:
    """What the analysis does with the budgets it was given that a reader would not guess:
    repeated budgets are used once, and a budget larger than a trajectory's eligible pool is
    skipped for that trajectory (SPEC §4: ``full`` is the whole pool). One line each."""
    given = [int(b) for b in given]
    notes = []
    repeated = sorted({b for b in given if given.count(b) > 1})
    if repeated:
        notes.append(f"budgets: {', '.join(map(str, repeated))} given more than once (each is used once)")
    sizes = sorted(int(n) for n in pool_sizes)
    for b in sorted(set(given)):
        over = sum(n < b for n in sizes)
        if over == len(sizes) and sizes:
            notes.append(
                f"budget {b} is larger than every trajectory's eligible validation pool (at most "
                f"{sizes[-1]} items): skipped; 'full' is the whole pool"
            )
        elif over:
            notes.append(
                f"budget {b} is larger than the eligible validation pool of {over} of "
                f"{len(sizes)} trajectories (smallest {sizes[0]} items): skipped for them"
            )
    return notes


def labels_of(budgets: Iterable[int]) -> tuple[str, ...]:
    """The budget labels of finite ``budgets``: each budget as text, then "full" (the one place
    budgets become labels: choices, scores, statistics and ``select`` all use it)."""
    return (*[str(int(b)) for b in budgets], FULL)


BUDGET_LABELS = labels_of(BUDGETS)  # the default budgets' labels
OV_LABELS = labels_of(ONE_VARIANT_BUDGETS)  # the one-variant sensitivity's at the default budgets


def budget_labels_for_pool(pool: int, budgets: tuple[int, ...]) -> tuple[list[int], list[str]]:
    """The finite budgets that fit a pool of ``pool`` items (larger ones are skipped) and their
    labels (:func:`labels_of`)."""
    finite = [b for b in budgets if b <= pool]  # larger budgets are skipped
    return finite, list(labels_of(finite))
