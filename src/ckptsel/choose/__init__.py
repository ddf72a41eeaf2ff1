"""Choosing: validation records → selection-probability vectors, frozen and hashed, then scored
on the test pool (SPEC §3–§7).

* :mod:`~ckptsel.choose.core` — pure-NumPy kernels: hashed orders, nested subsets, exact ties,
  pluralities, thinning;
* :mod:`~ckptsel.choose.rules` — the rule registry (:class:`RuleSpec`: signal, direction, labels);
* :mod:`~ckptsel.choose.settings` — :class:`ChoiceSettings` (permutations, seed, budgets);
* :mod:`~ckptsel.choose.choices` — every trajectory's selection vectors (``choose``);
* :mod:`~ckptsel.choose.frozen` — ``freeze`` (write + SHA-256) and ``load_frozen``, the only way
  to a :class:`FrozenChoices`;
* :mod:`~ckptsel.choose.evaluate` — frozen choices scored on test records (``score``) and the
  matched-half diagnostic.

The freeze rule is structural: ``choose`` sees only :class:`~ckptsel.records.ValidationData`,
``score`` accepts only :class:`FrozenChoices`.
"""

from __future__ import annotations

from ckptsel.choose import core
from ckptsel.choose.choices import choose, choose_trajectory, full_pool_choice, pools_of, signals
from ckptsel.choose.evaluate import (
    MH_RULES,
    MH_STATS,
    Name,
    ScoredChoices,
    score,
)
from ckptsel.choose.frozen import choices_hash, freeze, load_frozen
from ckptsel.choose.rules import (
    ALL_RULES,
    H_BASELINE,
    MATCHED_HALF_RULES,
    RULE_ORDER,
    RULES,
    SIGNAL_RULES,
)
from ckptsel.choose.settings import (
    BUDGET_LABELS,
    FULL,
    OV_LABELS,
    ChoiceSettings,
    budget_notes,
    labels_of,
    parse_budget_list,
)

__all__ = [
    "ALL_RULES",
    "BUDGET_LABELS",
    "FULL",
    "H_BASELINE",
    "MATCHED_HALF_RULES",
    "MH_RULES",
    "MH_STATS",
    "Name",
    "OV_LABELS",
    "RULES",
    "RULE_ORDER",
    "SIGNAL_RULES",
    "ChoiceSettings",
    "ScoredChoices",
    "budget_notes",
    "core",
    "choices_hash",
    "choose",
    "choose_trajectory",
    "freeze",
    "full_pool_choice",
    "labels_of",
    "load_frozen",
    "parse_budget_list",
    "pools_of",
    "score",
    "signals",
]
