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

from ckptsel.data.tasks import register_task

__all__ = ["register_task"]
