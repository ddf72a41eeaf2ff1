"""Record while you train: a ``transformers`` Trainer callback that measures every saved checkpoint.

:class:`RecordingCallback` runs at ``on_save``: the model the Trainer just saved is still in
memory, so the validation items (and, optionally, test items) are measured right there —
greedy generation + teacher-forced NLL, through :func:`ckptsel.measure.measure_model`, the
same code path as ``ckptsel measure`` — and the step's records are upserted atomically into
``records_dir``. When training ends the records are complete and ``ckptsel select`` can
answer at once; no checkpoint has to be reloaded.

Works with ``transformers.Trainer`` and its subclasses (e.g. ``trl``'s ``SFTTrainer``).
Only the main process measures (``state.is_world_process_zero``); with sharded parameters
(FSDP, DeepSpeed ZeRO-3) measure the saved checkpoints with ``ckptsel measure`` instead.

This module imports ``transformers`` at import time (it subclasses ``TrainerCallback``);
the analysis never imports it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig


def _items(task: str, source: str | Path | Sequence[Any] | None, what: str) -> list[Any] | None:
    """Items from a data file (loaded now, so a bad file fails before training starts) or a list."""
    if source is None:
        return None
    if isinstance(source, (str, Path)):
        from ckptsel.tasks import load_items

        items = load_items(task, source)
    else:
        items = list(source)
    if not items:
        raise CkptselError(f"{what} items: none given ({source!r})")
    return items


class RecordingCallback(TrainerCallback):
    """Measure validation (and optionally test) items at every checkpoint save and append the records.

    Args:
        validation: validation data file (any format ``ckptsel.tasks.load_items`` reads for
            the task) or a list of :class:`ckptsel.tasks.Item`.
        config: a :class:`ckptsel.measure.MeasureConfig` (task, batch size, generation
            length, window: as in ``ckptsel measure``), or just the task name (``gsm8k``,
            ``math``, ``commonsense``, ...) for the default options. The task picks the
            answer scorer; the config's device is not used (the model stays where it is).
        records_dir: where ``generations.parquet`` / ``nll.parquet`` are kept (created; rows
            of other trajectories are kept, rows of the same key are replaced).
        trajectory: this run's name; ``configuration`` defaults to it (seeds of one
            configuration must share the configuration name).
        test: optional test data file or items, measured at every save too (so ``ckptsel
            select`` can report the test-set gain; leave it out to keep the test set unseen).
        tokenizer: used when the Trainer has no ``processing_class``.
    """

    def __init__(
        self,
        validation: str | Path | Sequence[Any],
        config: MeasureConfig | str,
        records_dir: str | Path,
        trajectory: str,
        configuration: str | None = None,
        *,
        test: str | Path | Sequence[Any] | None = None,
        tokenizer: Any = None,
        verbose: bool = True,
    ) -> None:
        from ckptsel.records import check_name

        # bad options or an unknown task -> CkptselError now, not at the first save
        self.config = MeasureConfig(config) if isinstance(config, str) else config
        self.task = task = self.config.task
        self.records_dir = Path(records_dir)
        self.trajectory = check_name("trajectory", trajectory)
        self.configuration = check_name("configuration", configuration or trajectory)
        self.splits = {"validation": _items(task, validation, "validation")}
        if test is not None:
            self.splits["test"] = _items(task, test, "test")
        self.tokenizer = tokenizer
        self.verbose = verbose
        self.measured_steps: list[int] = []

    def measure(self, model: Any, tokenizer: Any, step: int) -> None:
        """Measure ``model`` (in memory) at ``step`` and upsert its records."""
        import pandas as pd

        from ckptsel.measure import measure_model
        from ckptsel.records import upsert_records

        was_training = bool(getattr(model, "training", False))
        padding_side = getattr(tokenizer, "padding_side", None)
        start = time.perf_counter()
        gens, nlls = [], []
        try:
            for split, items in self.splits.items():
                gen, nll = measure_model(
                    model,
                    tokenizer,
                    items,
                    self.config,
                    split=split,
                    trajectory=self.trajectory,
                    step=int(step),
                    configuration=self.configuration,
                )
                gens.append(gen)
                nlls.append(nll)
        finally:
            if padding_side is not None:
                tokenizer.padding_side = padding_side  # training collators may depend on it
            if was_training:
                model.train()
        upsert_records(
            self.records_dir, pd.concat(gens, ignore_index=True), pd.concat(nlls, ignore_index=True)
        )
        self.measured_steps.append(int(step))
        if self.verbose:
            n = sum(len(v) for v in self.splits.values())
            print(
                f"ckptsel: recorded step {step} of {self.trajectory} ({n} items) in {time.perf_counter() - start:.1f} s"
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not getattr(state, "is_world_process_zero", True):
            return control
        if int(state.global_step) in self.measured_steps:
            return control  # saved twice at one step (e.g. a step save then the final save): same weights
        model = kwargs.get("model")
        tokenizer = self.tokenizer
        for key in ("processing_class", "tokenizer"):
            if tokenizer is None and kwargs.get(key) is not None:
                tokenizer = kwargs[key]
        if model is None:
            raise CkptselError("RecordingCallback.on_save: the Trainer passed no model")
        if tokenizer is None:
            raise CkptselError(
                "RecordingCallback: no tokenizer (give the Trainer processing_class=tokenizer or pass tokenizer=...)"
            )
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wrapping a tokenizer
        self.measure(model, tokenizer, int(state.global_step))
        return control
