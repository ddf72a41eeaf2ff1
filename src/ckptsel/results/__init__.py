"""The results of an analysis, as data: the typed summary and its estimates, the folder's
file names, and how a results folder is published (staged, hashed, swapped in whole).

This is the contract between the analysis (``stats``, ``workflows.analysis``, which write it)
and the report, ``select`` and the CLI (which read it), as ``records`` is between measurement
and choosing; so it sits before ``stats`` in the layers.

* :mod:`~ckptsel.results.estimate` — :class:`Estimate` and :func:`fmt`;
* :mod:`~ckptsel.results.summary` — :class:`Summary` and its parts (:class:`Gains`,
  :class:`BudgetCell`, :class:`MatchedHalf`, :class:`Sensitivities`, :class:`TaskResult`, …):
  ``summary.json`` is ``Summary.to_dict()``, read back (checked) by ``Summary.load``; level,
  interval method, ``D``'s start and the main table are its properties and methods; whether
  the protocol was pre-registered (:class:`Preregistration`);
* :mod:`~ckptsel.results.layout` — the folder's file names;
* :mod:`~ckptsel.results.publish` — staging, the manifest and the atomic swap.
"""

from __future__ import annotations

from ckptsel.results.estimate import Estimate
from ckptsel.results.summary import Summary

__all__ = ["Estimate", "Summary"]
