"""Foundations every stage uses: atomic file I/O (:mod:`~ckptsel._util.io`), the one
integer/number/choice validator (:mod:`~ckptsel._util.checks`), the one table of random
streams (:mod:`~ckptsel._util.rng`) and BLAS thread control (:mod:`~ckptsel._util.threads`).
Private to the package: other stages import these modules directly.
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
