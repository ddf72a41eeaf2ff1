"""Protocol defaults (SPEC §3, §4, §8, §11), each defined once.

Settings objects (``ChoiceSettings``, ``StatSettings``, ``MeasureConfig``, …) and the CLI take
their defaults from here; nothing else spells these numbers.
"""

from __future__ import annotations

SEED = 20260825  # permutations, partitions and bootstrap draws (SPEC §8)
PERMUTATIONS = 200  # nested validation orders per trajectory (SPEC §4); also matched-half partitions
DRAWS = 20000  # bootstrap draws (SPEC §8)
CONFIDENCE = 0.95  # interval level
INTERVAL = "cr2"  # interval method (SPEC §8; chosen by measured coverage, BENCHMARKS.md)
BUDGETS = (32, 64, 128, 256)  # finite validation budgets; "full" is always added (SPEC §4)
ONE_VARIANT_BUDGETS = (32, 64, 128)  # one-variant-per-group sensitivity (SPEC §6)
THINNING = (2, 3, 4)  # checkpoint-thinning factors (SPEC §6)
BATCH_SIZE = 16  # prompts per measurement batch (float32: answers do not depend on it; bf16 can)
MAX_NEW_TOKENS = 512  # greedy generation length limit
DATA_SEED = 42  # train/validation group split (SPEC §9)
# practitioner commands (select, compare, plan): bootstrap draws and partitions; analyze's
# keep table (summary.json "keep") is select --all at select's defaults (issue 44)
SELECT_DRAWS = 1000  # select: question-bootstrap draws of the split-validation gain
SELECT_BOOTSTRAP_PARTITIONS = 20  # select: partitions redone on every bootstrap draw
COMPARE_DRAWS = 10000  # compare: paired bootstrap draws
PLAN_DRAWS = 2000  # plan: resampled validation sets per budget
PLAN_MAX_BUDGET = 1024  # plan: the largest budget planned for
PLAN_TARGET = 0.8  # plan: the probability of beating the final checkpoint a plan must reach

# limits of the protocol settings (beyond them memory or time explode; checked up front)
MAX_PERMUTATIONS = 100_000
MAX_DRAWS = 1_000_000
MIN_DRAWS = 10
