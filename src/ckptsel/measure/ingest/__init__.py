"""Records from generations other tools made: lm-evaluation-harness ``--log_samples`` output
(:mod:`~ckptsel.measure.ingest.lm_eval`), written through the one records writer.
"""
from __future__ import annotations

from ckptsel.measure.ingest.lm_eval import ingest_lm_eval

__all__ = ["ingest_lm_eval"]
