"""Statistics over scored trajectories (SPEC §8): resampling, bootstraps, interval methods and
the summary they make. Pure NumPy over arrays; no I/O.

* :mod:`~ckptsel.stats.resample` — the one clustered resampler;
* :mod:`~ckptsel.stats.distributions` — normal and Student-t functions;
* :mod:`~ckptsel.stats.bootstrap` — configuration, test-question and joint bootstrap
  replicates as matrix products, percentile intervals;
* :mod:`~ckptsel.stats.intervals` — CR2, wild-bootstrap-t and two-way interval methods;
* :mod:`~ckptsel.stats.paired` — the paired 2×2 counts, the exact McNemar test and its clustered
  form (sign flips of whole clusters), Newcombe's score interval of a paired difference, Holm
  and Benjamini–Hochberg adjustments;
* :mod:`~ckptsel.stats.exact` — the one small-design rule (an interval reads resolved only
  where its coverage was measured valid at that size, or an exact sign-flip test rejects too),
  intervals clipped to their range, zero-width intervals as not estimable, and the
  Clopper–Pearson interval;
* :mod:`~ckptsel.stats.estimates` — :class:`StatSettings` and ``summarize``: scored choices →
  the typed summary and the descriptive tables;
* :mod:`~ckptsel.stats.winners` — the model confidence set of the best checkpoints and the
  winner's-curse-corrected accuracy of the chosen one (``ckptsel select``).
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
