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

__all__: list[str] = []  # other stages import from the defining modules
