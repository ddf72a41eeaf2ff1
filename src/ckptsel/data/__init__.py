"""Data: tasks and their answer rules, validation/test pools, the group split and the overlap
audit (SPEC §9, §10).

* :mod:`~ckptsel.data.answers` — answer rules per family (gsm8k, math, commonsense);
* :mod:`~ckptsel.data.taskdef` — the one task definition type (item schema, answer rule) and
  task files (``--task PATH.toml``);
* :mod:`~ckptsel.data.tasks` — the task registry, each dataset's file format;
* :mod:`~ckptsel.data.prompts` — prompt formats (alpaca, the tokenizer's chat template, a
  template file), every prompt template: the text and tokens a model is fed and scored on;
* :mod:`~ckptsel.data.scoring` — ``extract`` / ``is_correct`` by task name;
* :mod:`~ckptsel.data.pools` — validation and test pools (files, mixtures, seeded samples);
* :mod:`~ckptsel.data.split` — train/validation by whole group, with lineage;
* :mod:`~ckptsel.data.audit` — overlap between fine-tuning, validation and test questions
  (a package: n-grams, indexes, findings, the planted control, the run, files).
"""

from __future__ import annotations

from ckptsel.data.answers.rules import AnswerRuleError
from ckptsel.data.audit import AuditResult, audit_files, audit_pools, write_audit
from ckptsel.data.pools import PoolSpec, build_pools, pool_digest, strata_counts
from ckptsel.data.prompts import (
    CHAT,
    FORMAT_FILE,
    PROMPT_TEMPLATE,
    PromptFormat,
    format_from_dict,
    format_prompt,
    prompt_format,
    resolve_format,
)
from ckptsel.data.scoring import check_scorer, extract, is_correct
from ckptsel.data.split import split_file
from ckptsel.data.taskdef import Item, Task, item_hash
from ckptsel.data.tasks import (
    TASKS,
    example_item,
    get_task,
    is_task_file,
    load_items,
    register_task,
    task_identity,
    task_label,
    task_ref,
)

__all__ = [
    "CHAT",
    "FORMAT_FILE",
    "PROMPT_TEMPLATE",
    "TASKS",
    "AnswerRuleError",
    "AuditResult",
    "Item",
    "PoolSpec",
    "PromptFormat",
    "Task",
    "audit_files",
    "audit_pools",
    "build_pools",
    "example_item",
    "check_scorer",
    "extract",
    "format_from_dict",
    "format_prompt",
    "get_task",
    "is_correct",
    "is_task_file",
    "item_hash",
    "load_items",
    "pool_digest",
    "prompt_format",
    "register_task",
    "resolve_format",
    "split_file",
    "strata_counts",
    "task_identity",
    "task_label",
    "task_ref",
    "write_audit",
]
