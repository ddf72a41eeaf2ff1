"""SelectionCallback: a Trainer (and trl's SFTTrainer) run that chooses, keeps and loads the
recommended checkpoint, with selection.json equal to `ckptsel select` on the same records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ckptsel.records.scan import read_frame

pytest.importorskip("transformers")
pytest.importorskip("peft")

from tinyrun import TEMPLATE_HINT, build_tiny_base, make_gsm8k_rows, tiny_training_args, write_jsonl  # noqa: E402

MAX_NEW = 8
N_VAL = 8


def _settings():
    from ckptsel.workflows.advise.selection import SelectSettings

    return SelectSettings(partitions=20, draws=200, bootstrap_partitions=5, permutations=20)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_thread):
    from transformers import AutoTokenizer

    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items
    from ckptsel.train.trajectory import encode_example

    root = tmp_path_factory.mktemp("selection")
    val_rows, train_rows = make_gsm8k_rows(N_VAL, seed=1), make_gsm8k_rows(8, seed=3)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in val_rows + train_rows]
    base = build_tiny_base(root / "base", texts, seed=0)
    val = write_jsonl(root / "data" / "validation.jsonl", val_rows)
    train_file = write_jsonl(root / "data" / "train.jsonl", train_rows)
    tok = AutoTokenizer.from_pretrained(str(base))
    train = [encode_example(tok, format_prompt(it.instruction), it.response) for it in load_items("gsm8k", train_file)]
    return root, base, val, tok, train, train_file


def _lora_model(base):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))


def _rigged(pattern):
    """A SelectionCallback whose recorded correctness at step s is ``pattern(s)`` (real generation
    and records writer; only the `correct` column is replaced), so the answer is known."""
    from ckptsel.integrations.hf_trainer import SelectionCallback
    from ckptsel.records.store import upsert_records

    class Rigged(SelectionCallback):
        def measure(self, model, tokenizer, step):
            super().measure(model, tokenizer, step)
            gen = read_frame(self.records_dir, "generations")
            gen = gen[gen["step"] == step].sort_values("item_id").reset_index(drop=True)
            gen["correct"] = np.asarray(pattern(step), dtype=bool)
            upsert_records(self.records_dir, gen, None)

    return Rigged


def _lora_state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def _checkpoint_lora(folder: Path):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _assert_loaded(model, folder: Path):
    saved = _checkpoint_lora(folder)
    live = _lora_state(model)
    assert len(saved) == len(live) > 0
    for k, v in saved.items():
        match = [n for n in live if n.replace(".default", "") == k]
        assert len(match) == 1, k
        assert np.array_equal(live[match[0]].numpy(), v.numpy()), k


def _train(setup, name, callback, max_steps, **extra):
    from transformers import Trainer

    from ckptsel.train.trajectory import collate

    root, base, _, tok, train, _ = setup
    trainer = Trainer(
        model=_lora_model(base),
        args=tiny_training_args(root / "runs" / name, max_steps, **extra),
        train_dataset=train,
        eval_dataset=train[:2],
        data_collator=lambda batch: collate(batch, tok.pad_token_id),
        processing_class=tok,
        callbacks=[callback],
    )
    trainer.train()
    return trainer, root / "runs" / name


BEST_EARLY = lambda step: [step == 2] * N_VAL  # noqa: E731  step 2 right on every item


@pytest.mark.parametrize("load_best", [True, False])
def test_recommended_early_checkpoint_survives_rotation_and_is_loaded(setup, load_best):
    from ckptsel.workflows.advise.selection import select_checkpoint

    root, _, val, *_ = setup
    name = f"early-{load_best}"
    cb = _rigged(BEST_EARLY)(val, "gsm8k", root / f"records-{name}", name, settings=_settings(), verbose=False)
    extra = {"save_total_limit": 2}
    if load_best:
        extra.update(load_best_model_at_end=True, eval_strategy="steps", eval_steps=2)
    trainer, out = _train(setup, name, cb, 8, **extra)
    assert cb.measured_steps == [2, 4, 6, 8]
    # rotation kept the recommended early checkpoint and the latest one, nothing else
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-8"]
    sel = json.loads((out / "selection.json").read_text())
    assert sel["marked_step"] == 2 and sel["recommendation"]["keep_step"] == 2
    assert not sel["recommendation"]["keep_final"]
    assert trainer.state.best_model_checkpoint == str(out / "checkpoint-2")
    if load_best:
        _assert_loaded(trainer.model, out / "checkpoint-2")
    else:  # without load_best_model_at_end the final weights stay in memory
        _assert_loaded(trainer.model, out / "checkpoint-8")
    # selection.json is `ckptsel select` on the same records
    ref = select_checkpoint(root / f"records-{name}", name, settings=_settings()).to_dict()
    assert sel["recommendation"] == ref["recommendation"]
    assert sel["split_validation"] == ref["rules"]["accuracy"]["split_validation"]
    assert sel["choice"] == ref["rules"]["accuracy"]["choice"]
    assert sel["steps"] == ref["steps"] == [2, 4, 6, 8]
    assert sel["split_validation"]["lo"] > 0
    assert sel["plausibly_best"] == ref["plausibly_best"] and sel["plausibly_best"]["steps"]
    assert sel["chosen_estimate"] == ref["chosen_estimate"]
    assert sel["chosen_estimate"]["lo"] <= sel["chosen_estimate"]["mean"] <= sel["chosen_estimate"]["hi"]


def test_unresolved_gain_keeps_final_unless_prefer_final_false(setup):
    from ckptsel.workflows.advise.selection import select_checkpoint

    root, _, val, *_ = setup

    # step 2 is right on one item more than the others: the raw argmax, but not resolved
    def pattern(step):
        return [True] + [False] * (N_VAL - 1) if step == 2 else [False] * N_VAL

    for prefer_final, marked in ((True, 6), (False, 2)):
        name = f"unresolved-{prefer_final}"
        cb = _rigged(pattern)(val, "gsm8k", root / f"records-{name}", name, prefer_final=prefer_final, settings=_settings(), verbose=False)
        trainer, out = _train(setup, name, cb, 6, save_total_limit=2, load_best_model_at_end=True, eval_strategy="steps", eval_steps=2)
        sel = json.loads((out / "selection.json").read_text())
        ref = select_checkpoint(root / f"records-{name}", name, settings=_settings()).to_dict()
        assert ref["recommendation"]["keep_step"] == 6  # keep the final checkpoint
        assert sel["recommendation"] == ref["recommendation"]
        assert sel["choice"]["steps"] == [2]
        assert sel["marked_step"] == marked
        assert (out / f"checkpoint-{marked}").is_dir()
        _assert_loaded(trainer.model, out / f"checkpoint-{marked}")


def test_early_stopping_after_patience_saves(setup):
    root, _, val, *_ = setup
    cb = _rigged(BEST_EARLY)(val, "gsm8k", root / "records-stop", "stop", early_stopping_patience=2, settings=_settings(), verbose=False)
    trainer, out = _train(setup, "stop", cb, 12, save_total_limit=2)
    # step 4 and step 6 are resolved worse than step 2: stop at the second such save
    assert cb.measured_steps == [2, 4, 6]
    assert trainer.state.global_step == 6
    sel = json.loads((out / "selection.json").read_text())
    assert sel["early_stopped"] and sel["marked_step"] == 2
    assert (out / "checkpoint-2").is_dir()


def test_real_measurement_with_sft_trainer(setup):
    """trl's SFTTrainer, real measurement (nothing rigged), NLL rule: the marked checkpoint is on
    disk and loaded, and selection.json equals `ckptsel select` on the callback's records."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items
    from ckptsel.integrations.hf_trainer import SelectionCallback
    from ckptsel.workflows.advise.selection import select_checkpoint

    root, base, val, tok, _, train_file = setup
    rows = [{"prompt": format_prompt(it.instruction), "completion": " " + it.response} for it in load_items("gsm8k", train_file)]
    cb = SelectionCallback(val, "gsm8k", root / "records-sft", "sft", rule="nll", settings=_settings(), verbose=False)
    args = trl.SFTConfig(
        output_dir=str(root / "runs" / "sft"),
        max_steps=6,
        save_strategy="steps",
        save_steps=2,
        eval_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        save_total_limit=2,
        per_device_train_batch_size=4,
        learning_rate=5e-2,
        lr_scheduler_type="constant",
        report_to="none",
        use_cpu=True,
        logging_strategy="no",
        disable_tqdm=True,
        save_only_model=True,
        seed=0,
    )
    trainer = trl.SFTTrainer(
        model=_lora_model(base),
        args=args,
        train_dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows[:2]),
        processing_class=tok,
        callbacks=[cb],
    )
    trainer.train()
    out = root / "runs" / "sft"
    assert cb.measured_steps == [2, 4, 6]
    nll = read_frame(root / "records-sft", "nll")
    assert sorted(nll["step"].unique()) == [2, 4, 6]
    sel = json.loads((out / "selection.json").read_text())
    ref = select_checkpoint(root / "records-sft", "sft", rule="nll", settings=_settings()).to_dict()
    assert sel["recommendation"] == ref["recommendation"]
    assert sel["split_validation"] == ref["rules"]["nll"]["split_validation"]
    assert sel["marked_step"] == ref["recommendation"]["keep_step"]
    assert (out / f"checkpoint-{sel['marked_step']}").is_dir()
    _assert_loaded(trainer.model, out / f"checkpoint-{sel['marked_step']}")


def test_selection_callback_rejects_bad_options(tmp_path):
    from ckptsel.errors import CkptselError
    from ckptsel.integrations.hf_trainer import SelectionCallback

    val = write_jsonl(tmp_path / "v.jsonl", make_gsm8k_rows(3))
    with pytest.raises(CkptselError, match="unknown rule 'last'"):
        SelectionCallback(val, "gsm8k", tmp_path / "r", "t", rule="last")
    with pytest.raises(CkptselError, match="early_stopping_patience"):
        SelectionCallback(val, "gsm8k", tmp_path / "r", "t", early_stopping_patience=0)
    one = write_jsonl(tmp_path / "one.jsonl", make_gsm8k_rows(1))
    with pytest.raises(CkptselError, match="at least 2 validation items"):
        SelectionCallback(one, "gsm8k", tmp_path / "r", "t")


# --------------------------------------------------------------------------- report_to
@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The offline tracker stores test_trackers uses too (Trackio's folder is fixed at import)."""
    from types import SimpleNamespace

    from offline_trackers import offline_env

    root = tmp_path_factory.getbasetemp() / "trackers"
    with pytest.MonkeyPatch.context() as mp:
        yield SimpleNamespace(root=root, **offline_env(mp, root))


def test_answer_logged_into_the_trainers_own_runs_and_registered(setup, stores):
    """report_to defaults to the Trainer's: MLflow, W&B and Trackio each get the answer in the
    run the Trainer logged its loss to, and the recommended checkpoint is registered."""
    from ckptsel.trackers.base import ALIAS

    from offline_trackers import import_mlflow, import_trackio, wandb_run, wandb_runs

    mlflow = import_mlflow()
    wandb = pytest.importorskip("wandb", reason="wandb not installed: pip install 'ckptsel[wandb]'")
    import_trackio(stores.root)
    from trackio.sqlite_storage import SQLiteStorage

    root, _, val, *_ = setup
    cb = _rigged(BEST_EARLY)(
        val, "gsm8k", root / "records-tracked", "tracked", settings=_settings(), verbose=False, register="callback-model"
    )
    _, out = _train(
        setup,
        "tracked",
        cb,
        4,
        report_to=["mlflow", "wandb", "trackio"],
        run_name="sft-tracked",
        project="cb-project",
        logging_strategy="steps",
        logging_steps=2,
    )
    wandb_id = wandb.run.id if wandb.run is not None else cb.run_ids["wandb"]
    if wandb.run is not None:
        wandb.finish()  # the Trainer's WandbCallback leaves its run open
    sel = json.loads((out / "selection.json").read_text())
    step = sel["recommendation"]["keep_step"]
    assert set(cb.run_ids) == {"mlflow", "wandb", "trackio"} and cb.run_ids["wandb"] == wandb_id

    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    run = client.get_run(cb.run_ids["mlflow"])
    assert "train_loss" in run.data.metrics or "loss" in run.data.metrics  # the Trainer's own run
    assert run.data.metrics["ckptsel/select/accuracy/split_validation/mean"] == pytest.approx(sel["split_validation"]["mean"])
    version = client.get_model_version_by_alias("callback-model", ALIAS)
    assert version.run_id == cb.run_ids["mlflow"] and version.tags["ckptsel.step"] == str(step)
    assert version.source == (out / f"checkpoint-{step}").resolve().as_uri()

    runs = [wandb_run(f) for f in wandb_runs(stores.wandb, wandb_id)]
    summary = {k: v for r in runs for k, v in r["summary"].items()}
    assert summary["ckptsel/select/keep_step"] == step and "train_loss" in summary
    assert any(a["name"] == "callback-model" and ALIAS in a["aliases"] for r in runs for a in r["artifacts"])

    rows = SQLiteStorage.get_logs("cb-project", cb.run_ids["trackio"])
    assert any("ckptsel/select/keep_step" in r for r in rows) and any("train/loss" in r or "loss" in r for r in rows)
