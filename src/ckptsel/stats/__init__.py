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

from ckptsel.stats.bootstrap import percentile_interval
from ckptsel.stats.distributions import norm_cdf, norm_ppf
from ckptsel.stats.estimates import StatSettings, summarize
from ckptsel.stats.exact import interval_estimate, judged, nonzero_units, sign_flip_p
from ckptsel.stats.intervals import METHODS
from ckptsel.stats.paired import (
    adjust_pvalues,
    cluster_differences,
    clustered_mcnemar,
    mcnemar_exact,
    newcombe_paired,
    two_by_two,
)
from ckptsel.stats.resample import (
    Clusters,
    chunked_counts,
    cluster_codes,
    clustered_means,
    question_weights,
    resample_counts,
)
from ckptsel.stats.winners import JITTER as WINNER_JITTER
from ckptsel.stats.winners import (
    accuracy_moments,
    bootstrap_accuracies,
    model_confidence_set,
    naive_winner,
    winner_interval,
    without_variance,
)

__all__ = [
    "Clusters",
    "METHODS",
    "StatSettings",
    "WINNER_JITTER",
    "accuracy_moments",
    "adjust_pvalues",
    "bootstrap_accuracies",
    "chunked_counts",
    "cluster_codes",
    "cluster_differences",
    "clustered_mcnemar",
    "clustered_means",
    "interval_estimate",
    "judged",
    "mcnemar_exact",
    "model_confidence_set",
    "naive_winner",
    "newcombe_paired",
    "nonzero_units",
    "norm_cdf",
    "norm_ppf",
    "percentile_interval",
    "question_weights",
    "resample_counts",
    "sign_flip_p",
    "summarize",
    "two_by_two",
    "winner_interval",
    "without_variance",
]
