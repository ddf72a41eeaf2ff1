"""Record while you train: a ``transformers`` Trainer callback that measures every saved checkpoint.

:class:`RecordingCallback` runs at ``on_save``: the model the Trainer just saved is still in
memory, so the validation items (and, optionally, test items) are measured right there —
greedy generation + teacher-forced NLL, through :func:`ckptsel.measure.measure_model`, the
same code path as ``ckptsel measure`` — and the step's records are upserted atomically into
``records_dir``. When training ends the records are complete and ``ckptsel select`` can
answer at once; no checkpoint has to be reloaded.

Precision: the records are measured in the model's own dtype with autocast off, as ``ckptsel
measure`` measures a loaded checkpoint. Mixed-precision training (``bf16=True``/``fp16=True``;
``trl``'s ``SFTConfig`` turns ``bf16`` on by default) runs the model's forward under an
autocast that accelerate wraps around it (``accelerator.prepare`` keeps the plain forward as
``_original_forward``): for the measurement the plain forward is put back and an enclosing
autocast is disabled, then the training forward is restored. What the measurement really ran
in (the parameters' dtype, and any autocast seen inside the forward passes, e.g.
``float32 with bfloat16 autocast``) is stamped in the units' provenance, so records of another
precision are never mixed into the trajectory silently. A model whose dtype is not the one
``measure`` would load the checkpoints in (``MeasureConfig.dtype``; ``auto``: float32 on the
CPU, bfloat16 on GPUs) is measured in its own dtype and stamped so, with a warning; an explicit
``dtype`` the model is not in is refused before training starts.

Works with ``transformers.Trainer`` and its subclasses (e.g. ``trl``'s ``SFTTrainer``).
Only the main process measures (``state.is_world_process_zero``); with sharded parameters
(FSDP, DeepSpeed ZeRO-3) measure the saved checkpoints with ``ckptsel measure`` instead.

This module imports ``transformers`` at import time (it subclasses ``TrainerCallback``);
the analysis never imports it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig

if TYPE_CHECKING:
    from ckptsel.workflows.advise.selection import Selection


def _items(task: str, source: str | Path | Sequence[Any] | None, what: str) -> list[Any] | None:
    """Items from a data file (loaded now, so a bad file fails before training starts) or a list."""
    if source is None:
        return None
    if isinstance(source, (str, Path)):
        from ckptsel.data.tasks import load_items

        items = load_items(task, source)
    else:
        items = list(source)
    if not items:
        raise CkptselError(f"{what} items: none given ({source!r})")
    return items


@contextmanager
def _plain_precision(model: Any) -> Iterator[set[str]]:
    """Run ``model`` in its own dtype, outside any autocast, while the block runs; yields the
    autocast dtypes still seen inside its forward passes (empty: none).

    accelerate's mixed precision replaces ``module.forward`` by an autocast + fp32-outputs
    wrapper and keeps the plain one as ``module._original_forward``: the plain one is put
    back for the block and the wrapper restored after (training goes on unchanged). An
    enclosing autocast (the caller's) is disabled. Forward pre-hooks on the input and output
    embeddings (where every forward starts and ends) record an autocast that is active all the
    same (a wrapper this does not know), so that the provenance says the truth."""
    import torch

    device = getattr(model, "device", None)
    device_type = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    seen: set[str] = set()

    def probe(module: Any, args: Any) -> None:
        if torch.is_autocast_enabled(device_type):
            seen.add(str(torch.get_autocast_dtype(device_type)).removeprefix("torch."))

    swapped = [(m, m.__dict__["forward"]) for m in model.modules() if "_original_forward" in m.__dict__ and "forward" in m.__dict__]
    watched = {id(m): m for m in _ends(model)}.values()
    with ExitStack() as stack:
        stack.callback(lambda: [setattr(m, "forward", f) for m, f in swapped])
        for module, _ in swapped:
            module.forward = module.__dict__["_original_forward"]
        for module in watched:
            stack.callback(module.register_forward_pre_hook(probe).remove)
        stack.enter_context(torch.autocast(device_type, enabled=False))
        yield seen


def _ends(model: Any) -> list[Any]:
    """The modules every forward of ``model`` passes through first and last (its input and
    output embeddings), else the model itself."""
    ends = []
    for name in ("get_input_embeddings", "get_output_embeddings"):
        try:
            module = getattr(model, name)()
        except (AttributeError, NotImplementedError):
            module = None
        if module is not None:
            ends.append(module)
    return ends or [model]


def _precision_name(dtype: str, autocast: set[str]) -> str:
    """What a measurement ran in, as the provenance's ``dtype``: the parameters' dtype, with
    the autocast dtype(s) seen, e.g. ``float32 with bfloat16 autocast``."""
    if not autocast:
        return dtype
    return f"{dtype} with {'+'.join(sorted(autocast))} autocast"


class RecordingCallback(TrainerCallback):
    """Measure validation (and optionally test) items at every checkpoint save and append the records.

    Args:
        validation: validation data file (any format ``ckptsel.data.load_items`` reads for
            the task) or a list of :class:`ckptsel.data.Item`.
        config: a :class:`ckptsel.measure.MeasureConfig` (task, batch size, generation
            length, window, prompt format: as in ``ckptsel measure``), or just the task name
            (``gsm8k``, ``math``, ``commonsense``, ...) for the default options. The task
            picks the answer scorer; the config's device is not used (the model stays where it
            is). The prompt format must be the one the Trainer's data was formatted with:
            ``MeasureConfig(task, prompt_format="chat")`` for data the tokenizer's chat template
            formatted (trl's ``SFTTrainer`` on conversational data); a tokenizer with a chat
            template and no stated format is refused at the first save. A stated format is
            written into the Trainer's ``output_dir`` (``prompt_format.json``), so ``ckptsel
            measure`` reads it there.
        records_dir: the records folder (created); each save writes its checkpoint's own
            units (:mod:`ckptsel.records.units`), so other trajectories' records are never
            rewritten and a re-recorded step replaces exactly its own rows.
        trajectory: this run's name; ``configuration`` defaults to it less its seed
            (``cfgA-s42`` → ``cfgA``, :func:`ckptsel.study.default_configuration`): seeds of
            one configuration must share the configuration name.
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
        from ckptsel.records.schema import check_name
        from ckptsel.study.configuration import default_configuration

        # bad options or an unknown task -> CkptselError now, not at the first save
        self.config = MeasureConfig(config) if isinstance(config, str) else config
        self.task = task = self.config.measured.task
        self.records_dir = Path(records_dir)
        self.trajectory = check_name("trajectory", trajectory)
        self.configuration = check_name("configuration", configuration or default_configuration(trajectory))
        self.splits = {"validation": _items(task, validation, "validation")}
        if test is not None:
            self.splits["test"] = _items(task, test, "test")
        self.tokenizer = tokenizer
        self.verbose = verbose
        self.nll = True  # teacher-forced NLL rows too (SelectionCallback: when its rule needs them)
        self.measured_steps: list[int] = []
        self._dtype_warned = False
        self._conformance: str | None = None  # the fast path's verdict, once per callback

    def check_dtype(self, model: Any) -> None:
        """The model's dtype against the one ``measure`` would load the checkpoints in
        (``config.measured.dtype`` on the model's device): an explicit ``dtype`` the model is not in is
        refused; with ``auto``, a difference is warned about once (the records are measured in
        the model's own dtype and stamped so; ``measure`` adds to them with ``--dtype``)."""
        from ckptsel.measure.backends.hf import device_kind, dtype_name, resolve_dtype

        own = dtype_name(model.dtype)
        device = device_kind(model.device)
        wanted = dtype_name(resolve_dtype(self.config.measured.dtype, device))
        if own == wanted or self._dtype_warned:
            return
        if self.config.measured.dtype != "auto":
            raise CkptselError(
                f"RecordingCallback: trajectory {self.trajectory!r}: the config asks for dtype "
                f"{wanted} but the training model's parameters are {own}; the callback measures "
                f"the model in memory in its own dtype (pass dtype={own!r} or 'auto')"
            )
        self._dtype_warned = True
        warnings.warn(
            f"ckptsel: trajectory {self.trajectory!r}: the training model is {own}, but "
            f"`ckptsel measure` loads checkpoints on {device} in {wanted} by default; the "
            f"records are measured in {own} and say so (measure the saved checkpoints with "
            f"--dtype {own} to add to them)",
            stacklevel=2,
        )

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        model = kwargs.get("model")
        if model is not None and getattr(state, "is_world_process_zero", True):
            self.check_dtype(model)  # a refused dtype fails before the first training step
        return control

    def measure(self, model: Any, tokenizer: Any, step: int) -> None:
        """Measure ``model`` (in memory) at ``step`` and upsert its records."""
        import pandas as pd

        from ckptsel.measure.backends.hf import decoder_field, hf_provenance
        from ckptsel.measure.conformance import check_conformance
        from ckptsel.measure.measurer import measure_model
        from ckptsel.records.provenance import canonical, unit_provenance
        from ckptsel.records.store import upsert_records

        self.check_dtype(model)
        self.config = self.config.bind_format(  # once: a no-op when _measure_saved resolved it
            tokenizer, where=f"RecordingCallback: trajectory {self.trajectory!r}"
        )
        was_training = bool(getattr(model, "training", False))
        padding_side = getattr(tokenizer, "padding_side", None)
        start = time.perf_counter()
        gens, nlls = [], []
        try:
            with _plain_precision(model) as autocast:
                if self._conformance is None:  # the fast path checked once, in this precision
                    items = [it for v in self.splits.values() for it in v]
                    self._conformance = check_conformance(model, tokenizer, items, self.config)
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
                        nll=self.nll,
                    )
                    gens.append(gen)
                    nlls.append(nll)
        finally:
            if padding_side is not None:
                tokenizer.padding_side = padding_side  # training collators may depend on it
            if was_training:
                model.train()
        # what measured the units: the training model on the Hugging Face path, in the
        # precision it really ran in
        provenance = hf_provenance(model, self.config.runtime.batch_size)
        provenance["dtype"] = _precision_name(provenance["dtype"], autocast)
        provenance["conformance"] = self._conformance
        provenance["prompt_format"] = self.config.measured.prompt.identity
        made_by = unit_provenance([canonical(provenance)])
        texts_by = unit_provenance([canonical({**provenance, **decoder_field(self.config.runtime.decoder)})])
        upsert_records(  # the one records writer (SelectionCallback reuses this path)
            self.records_dir,
            pd.concat(gens, ignore_index=True),
            pd.concat(nlls, ignore_index=True) if self.nll else None,
            provenance={"generations": texts_by, "nll": made_by},
        )
        self.measured_steps.append(int(step))
        if self.verbose:
            n = sum(len(v) for v in self.splits.values())
            print(f"ckptsel: recorded step {step} of {self.trajectory} ({n} items) in {time.perf_counter() - start:.1f} s")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not getattr(state, "is_world_process_zero", True):
            return control
        if int(state.global_step) in self.measured_steps:
            return control  # saved twice at one step (e.g. a step save then the final save): same weights
        self._measure_saved(state, {**kwargs, "args": args})
        return control

    def _measure_saved(self, state: Any, kwargs: dict) -> None:
        """Measure the model the Trainer just saved (passed in ``kwargs``) at ``state.global_step``."""
        model = kwargs.get("model")
        tokenizer = self.tokenizer
        for key in ("processing_class", "tokenizer"):
            if tokenizer is None and kwargs.get(key) is not None:
                tokenizer = kwargs[key]
        if model is None:
            raise CkptselError("RecordingCallback.on_save: the Trainer passed no model")
        if tokenizer is None:
            raise CkptselError("RecordingCallback: no tokenizer (give the Trainer processing_class=tokenizer or pass tokenizer=...)")
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wrapping a tokenizer
        stated = self.config.measured.fmt is not None
        self.config = self.config.bind_format(
            tokenizer, where=f"RecordingCallback: trajectory {self.trajectory!r}"
        )  # a chat template with no stated format: refused here, in one line
        output_dir = getattr(kwargs.get("args"), "output_dir", None)
        if output_dir and stated and not self.measured_steps:
            from ckptsel.train.formats import write_run_format

            # `ckptsel measure OUTPUT_DIR` later reads the format these records were made with
            write_run_format(Path(output_dir), self.config.measured.prompt)
        self.measure(model, tokenizer, int(state.global_step))


SELECTION_FILE = "selection.json"  # written into the Trainer's output folder at the end


def _tracker_names(report_to: str | Sequence[str] | None, strict: bool = False) -> tuple[str, ...]:
    """The trackers ckptsel logs to among ``report_to`` (``"all"``: the installed ones;
    ``strict``: a name ckptsel does not know is an error, else it is left to the Trainer)."""
    from ckptsel.trackers.base import TRACKERS, check_trackers, require

    if report_to is None:
        return ()
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if "all" in names:
        return tuple(t for t in TRACKERS if importlib.util.find_spec(t) is not None)
    names = [n for n in names if n != "none"]
    if strict:
        out = check_trackers(names)
        for name in out:
            require(name)
        return out
    return tuple(n for n in names if n in TRACKERS)


class SelectionCallback(RecordingCallback):
    """Choose the checkpoint to keep while training, by what the model *generates*, and keep it.

    At every save it records the validation items like :class:`RecordingCallback` (greedy
    generation; teacher-forced NLL only when ``rule="nll"``), then answers ``ckptsel select``
    on the records so far (:func:`ckptsel.workflows.select_checkpoint`: the rule from
    :mod:`ckptsel.choose.rules`, its split-validation gain over the latest checkpoint and its
    interval). What it does with the answer:

    * **Protect the candidate.** Between saves ``state.best_model_checkpoint`` /
      ``best_global_step`` / ``best_metric`` name the rule's raw choice (the latest of a tie),
      so the Trainer's ``save_total_limit`` rotation never deletes it (the latest checkpoint is
      never rotated away either): both checkpoints the final answer can name stay on disk.
    * **Mark the answer at the last save.** With ``prefer_final=True`` (default) the marked
      checkpoint is the *recommended* one: the final checkpoint unless the rule's
      split-validation gain over it is resolved positive (the rule of ``ckptsel select``);
      ``prefer_final=False`` marks the raw choice. ``load_best_model_at_end=True`` then loads
      it. (The Trainer needs ``eval_strategy`` equal to ``save_strategy`` for that option; its
      own ``metric_for_best_model`` comparison is neutralized during training so that it cannot
      overwrite the mark. ``save_strategy="best"`` is refused.)
    * **Early stopping (optional).** With ``early_stopping_patience=N`` training stops after
      ``N`` consecutive saves at which an earlier checkpoint is recommended over the latest
      one, i.e. the latest checkpoint is resolved worse (no resolved improvement).
    * **At the end** it writes ``selection.json`` (choice, recommendation, reason, intervals,
      the plausibly-best set and the selection-corrected accuracy estimate)
      into ``args.output_dir`` and prints one line.
    * **Into the training run.** With ``report_to`` (default: the Trainer's own
      ``args.report_to``; ``"all"`` means every installed one) naming ``mlflow``, ``wandb`` or
      ``trackio``, the answer is logged into the run the Trainer logged to (its id is taken
      while training: MLflow and Trackio close their runs before ``on_train_end``), else into a
      new run ``ckptsel-<run_name>``; with ``register=NAME`` the recommended checkpoint's folder
      becomes a registered model version / artifact NAME with alias ``ckptsel-recommended``
      (:mod:`ckptsel.workflows.tracking`). Names ckptsel does not log to (tensorboard, …) are
      left to the Trainer.

    Only the main process measures and decides (``state.is_world_process_zero``); the other
    processes keep the Trainer's defaults, so with multi-process training the mark exists on
    the main process only, and with sharded parameters (FSDP, DeepSpeed ZeRO-3) the model in
    memory is a shard: measure the saved checkpoints with ``ckptsel measure`` and run
    ``ckptsel select`` instead. Resuming from a checkpoint re-reads the records folder, so the
    steps recorded before the interruption still count.

    Args (besides :class:`RecordingCallback`'s, passed on to it as they are): ``rule``
    (``accuracy``, ``agreement`` or ``nll``); ``prefer_final``; ``early_stopping_patience``;
    ``settings`` (a :class:`ckptsel.workflows.SelectSettings`, default as ``ckptsel select``);
    ``report_to`` (``None``: the Trainer's; ``"none"`` or ``[]``: nowhere); ``register``.
    """

    def __init__(
        self,
        *args: Any,
        rule: str = "accuracy",
        prefer_final: bool = True,
        early_stopping_patience: int | None = None,
        settings: Any = None,
        report_to: str | Sequence[str] | None = None,
        register: str | None = None,
        **kwargs: Any,
    ) -> None:
        from ckptsel.choose.rules import SIGNAL_RULES
        from ckptsel.workflows.advise.selection import SelectSettings

        if rule not in SIGNAL_RULES:
            raise CkptselError(f"SelectionCallback: unknown rule {rule!r}; use one of {list(SIGNAL_RULES)}")
        if early_stopping_patience is not None and (
            isinstance(early_stopping_patience, bool) or not isinstance(early_stopping_patience, int) or early_stopping_patience < 1
        ):
            raise CkptselError(
                f"SelectionCallback: early_stopping_patience must be an integer >= 1 or None (got {early_stopping_patience!r})"
            )
        super().__init__(*args, **kwargs)  # RecordingCallback's arguments
        if len(self.splits["validation"]) < 2:
            raise CkptselError("SelectionCallback: at least 2 validation items are needed to split validation")
        self.rule = rule
        self.nll = rule == "nll"
        self.prefer_final = bool(prefer_final)
        self.patience = early_stopping_patience
        self.settings = settings or SelectSettings()
        self.result: Selection | None = None  # the latest select answer
        self.marked_step: int | None = None
        self.stale_saves = 0  # consecutive saves at which an earlier checkpoint is recommended
        self.early_stopped = False
        self._training = False
        self._best_metric: float | None = None
        self.report_to = _tracker_names(report_to, strict=True) if report_to is not None else None
        self.register = register
        if register is not None:
            from ckptsel.trackers.base import check_model_name

            check_model_name(register)
        self.run_ids: dict[str, str] = {}  # tracker -> the training run (Trackio: its name)
        self._trackio_project: str | None = None

    # ---------------------------------------------------------------- the Trainer's own best
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if str(getattr(args, "save_strategy", "")).lower().endswith("best"):
            raise CkptselError(
                'SelectionCallback: save_strategy="best" saves only when the Trainer\'s own metric '
                'improves; use save_strategy="steps" or "epoch"'
            )
        super().on_train_begin(args, state, control, **kwargs)
        self._training = True
        self._capture_runs()
        return control

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # The Trainer compares its metric_for_best_model with state.best_metric right after this
        # hook; a best_metric nothing can beat keeps it from overwriting our mark. on_save
        # restores our value.
        if self._training and getattr(args, "metric_for_best_model", None) is not None:
            state.best_metric = float("inf") if args.greater_is_better else float("-inf")
        return control

    # ---------------------------------------------------------------- measure, choose, mark
    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not getattr(state, "is_world_process_zero", True):
            return control
        step = int(state.global_step)
        self._capture_runs()
        if step not in self.measured_steps:
            self._measure_saved(state, {**kwargs, "args": args})
        self._decide(args, state)
        max_steps = int(getattr(state, "max_steps", 0) or 0)
        last = bool(control.should_training_stop) or step >= max_steps
        if self.patience is not None and self.stale_saves >= self.patience and not last:
            control.should_training_stop = True
            self.early_stopped = last = True
        self._mark(args, state, last)
        return control

    def _decide(self, args: Any, state: Any) -> None:
        from ckptsel.workflows.advise.selection import select_checkpoint

        self.result = select_checkpoint(self.records_dir, self.trajectory, rule=self.rule, settings=self.settings)
        self.stale_saves = 0 if self.result.recommendation.keep_final else self.stale_saves + 1

    def choice_step(self) -> int:
        """The rule's raw choice on the full validation pool (the latest of a tie)."""
        assert self.result is not None
        return max(self.result.rules[self.rule].steps)

    def _mark(self, args: Any, state: Any, last: bool) -> None:
        """Point the Trainer's best-checkpoint fields at the candidate (at the end: the answer)."""
        assert self.result is not None
        if last:
            rec = self.result.recommendation.keep_step
            step = rec if self.prefer_final else self.choice_step()
            self.marked_step = step
        else:
            step = self.choice_step()
        folder = Path(args.output_dir) / f"checkpoint-{step}"
        state.best_global_step = step
        state.best_model_checkpoint = str(folder)
        sv = self.result.rules[self.rule].split_validation.estimate
        gain = float(sv.mean) if step != self.result.final_step else 0.0
        state.best_metric = self._best_metric = gain  # split-validation gain over the final (pp)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._training = False
        if not getattr(state, "is_world_process_zero", True) or self.result is None:
            return control
        if self._best_metric is not None:
            state.best_metric = self._best_metric
        if self.marked_step is None:  # stopped by something that on_save could not see
            rec = self.result.recommendation.keep_step
            self.marked_step = rec if self.prefer_final else self.choice_step()
        out = self.selection()
        from ckptsel._util.io import write_text

        write_text(Path(args.output_dir) / SELECTION_FILE, json.dumps(out, indent=2) + "\n")
        if self.verbose:
            print(f"ckptsel: keep checkpoint-{out['marked_step']} of {self.trajectory} ({out['recommendation']['reason']})")
        self._log(args)
        return control

    # ---------------------------------------------------------------- experiment trackers
    def trackers(self, args: Any) -> tuple[str, ...]:
        """Where the answer is logged: ``report_to``, else the Trainer's ``args.report_to``."""
        given = self.report_to
        return given if given is not None else _tracker_names(getattr(args, "report_to", None))

    def _capture_runs(self) -> None:
        """The training run of each tracker already imported (the Trainer's integrations run
        before this callback), while it is open."""
        mlflow, wandb, trackio = (sys.modules.get(m) for m in ("mlflow", "wandb", "trackio"))
        if mlflow is not None and mlflow.active_run() is not None:
            self.run_ids["mlflow"] = mlflow.active_run().info.run_id
        if wandb is not None and getattr(wandb, "run", None) is not None:
            self.run_ids["wandb"] = wandb.run.id
        context = getattr(trackio, "context_vars", None) if trackio is not None else None
        run = context.current_run.get() if context is not None else None
        if run is not None:
            self.run_ids["trackio"] = run.name
            self._trackio_project = getattr(run, "project", None)

    def _log(self, args: Any) -> None:
        trackers = self.trackers(args)
        if not trackers or self.result is None:
            return
        from ckptsel.trackers.base import check_model_folder
        from ckptsel.workflows.tracking import LogSettings, log_selection

        note = (lambda line: print(f"ckptsel: {line}")) if self.verbose else (lambda line: None)
        step = self.result.recommendation.keep_step
        folder = Path(args.output_dir) / f"checkpoint-{step}"
        register = self.register
        if register is not None:
            try:  # training is over: a checkpoint gone (save_total_limit) costs the registration only
                check_model_folder(register, folder, self.trajectory, step)
            except CkptselError as err:
                print(f"ckptsel: {err}; the results are logged, no model is registered")
                register = None
        settings = LogSettings(
            to=trackers,
            run_ids={t: r for t, r in self.run_ids.items() if t in trackers},
            run_name=getattr(args, "run_name", None),
            project=self._trackio_project if "trackio" in self.run_ids else None,
            register=register,
            rule=self.rule,
        ).check()
        log_selection(self.result, settings, checkpoint=folder, note=note)

    def selection(self) -> dict:
        """The contents of ``selection.json`` (JSON-ready): the rule's part of the select
        answer (:meth:`ckptsel.workflows.Selection.to_dict`) and the mark."""
        assert self.result is not None and self.marked_step is not None
        answer = self.result.to_dict()
        r = answer["rules"][self.rule]
        return {
            "trajectory": self.trajectory,
            "rule": self.rule,
            "prefer_final": self.prefer_final,
            "marked_step": self.marked_step,
            "marked_checkpoint": f"checkpoint-{self.marked_step}",
            "choice": r["choice"],
            "recommendation": answer["recommendation"],
            "reason": self.result.recommendation.reason,
            "split_validation": r["split_validation"],
            "test": r["test"],
            "plausibly_best": answer["plausibly_best"],
            "chosen_estimate": answer["chosen_estimate"],
            "steps": answer["steps"],
            "final_step": self.result.final_step,
            "validation_items": self.result.validation_items,
            "early_stopped": self.early_stopped,
            "settings": answer["settings"],
        }
