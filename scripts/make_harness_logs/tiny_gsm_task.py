"""lighteval custom task over a LOCAL dataset folder (no hub): ``hf_repo`` is a directory with
``validation.jsonl`` / ``test.jsonl`` (``TINY_GSM_DIR``), read by datasets' json builder.

One lighteval task per split (``tiny_gsm_validation``, ``tiny_gsm_test``): lighteval overwrites
``Doc.id`` with the row index within the split and keys its sample cache on it, so two splits in
one task would collide. The real item id, split and group ride in ``Doc.specific``, which is where
``ckptsel ingest lighteval`` reads them.

Metrics: ``expr_gold_metric`` (GENERATIVE: greedy generation, extracted and compared answers) and
``target_perplexity`` (LOGPROBS: the log-probability of the reference continuation, ``choices[0]``).
"""

import os

from lighteval.metrics.metrics import Metrics
from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc

DATA_DIR = os.environ.get("TINY_GSM_DIR", "tiny_gsm_data")


def tiny_gsm_prompt(line, task_name: str = None):
    return Doc(
        task_name=task_name,
        query=f"user: {line['question']}\n",
        choices=[f"The answer is {line['answer']}."],
        gold_index=0,
        specific={"item_id": line["id"], "split": line["split"], "group": line["group"]},
    )


def _config(split: str) -> LightevalTaskConfig:
    return LightevalTaskConfig(
        name=f"tiny_gsm_{split}",
        prompt_function=tiny_gsm_prompt,
        hf_repo=DATA_DIR,
        hf_subset="default",
        hf_avail_splits=["validation", "test"],
        evaluation_splits=[split],
        few_shots_split=None,
        few_shots_select=None,
        generation_size=12,
        stop_sequence=["\n"],
        metrics=[Metrics.expr_gold_metric, Metrics.target_perplexity],
        version=0,
    )


TASKS_TABLE = [_config("validation"), _config("test")]
