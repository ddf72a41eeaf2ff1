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
# keep table (summary.json "keep") is select --all at select's defaults
SELECT_DRAWS = 1000  # select: question-bootstrap draws of the split-validation gain
SELECT_BOOTSTRAP_PARTITIONS = 20  # select: partitions redone on every bootstrap draw
COMPARE_DRAWS = 10000  # compare: paired bootstrap draws
PLAN_DRAWS = 2000  # plan: resampled validation sets per budget
PLAN_MAX_BUDGET = 1024  # plan: the largest budget planned for
PLAN_TARGET = 0.8  # plan: the probability of beating the final checkpoint a plan must reach
# a degenerate checkpoint: one answer given to at least DEGENERATE_SHARE of its
# validation items (at least DEGENERATE_MIN_ITEMS of them), and that answer wrong on most of the
# items it is given (right on under DEGENERATE_PRECISION of them). On an open-answer task
# (GSM8K, MATH) the most common gold answer covers a few percent of the items, so a checkpoint
# that says "6" to half of them has stopped reading the question; the precision condition keeps
# a closed-label task (true/false, option1/2), where a good checkpoint gives its most common
# label to half the items or more and is right on most of them, from being flagged; and where
# the checkpoints give only K distinct answers the share must also reach 2/K (twice what one
# answering at random among them gives its most common answer), so a 3-answer task needs 67%,
# a binary one 100%. Below 10
# items one answer to half of them is too often chance (5 of 10 "6"s) to name. select's
# --degenerate-share sets the share; a flagged checkpoint is recommended only with
# --allow-degenerate, and then the recommendation says it is flagged.
DEGENERATE_SHARE = 0.5
DEGENERATE_MIN_ITEMS = 10
DEGENERATE_PRECISION = 0.5
# analyze names a kept checkpoint whose correct validation answers come from the answer rule's
# fallback (gsm8k: the last number, no "The answer is") for this share or more: at a tenth, the
# fallback alone moves its accuracy by more than most gains select resolves
FALLBACK_NOTE_SHARE = 0.1
# a task's noise is the spread of each trajectory's test accuracy over its last checkpoints
# (summary.json's signal_noise, ckptsel.stats.noise): 5 of them, a few hundred steps at the end
NOISE_CHECKPOINTS = 5

# limits of the protocol settings (beyond them memory or time explode; checked up front)
MAX_PERMUTATIONS = 100_000
MAX_DRAWS = 1_000_000
MIN_DRAWS = 10
