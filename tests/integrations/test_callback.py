"""RecordingCallback: a short Trainer run with the tiny model records every saved checkpoint,
and those records equal what `ckptsel measure` produces on the saved checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ckptsel.records.scan import read_frame

pytest.importorskip("transformers")
pytest.importorskip("peft")

from tinyrun import TEMPLATE_HINT, build_tiny_base, make_gsm8k_rows, tiny_training_args, write_jsonl  # noqa: E402

MAX_NEW = 12


def _train_with_callback(root: Path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer

    from ckptsel.data.tasks import load_items
    from ckptsel.integrations.hf_trainer import RecordingCallback
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.train.trajectory import collate, encode_example

    val_rows, test_rows, train_rows = (make_gsm8k_rows(5, seed=1), make_gsm8k_rows(3, seed=2), make_gsm8k_rows(8, seed=3))
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in val_rows + test_rows + train_rows]
    base = build_tiny_base(root / "base", texts, seed=0)
    val = write_jsonl(root / "data" / "validation.jsonl", val_rows)
    test = write_jsonl(root / "data" / "test.jsonl", test_rows)
    train_file = write_jsonl(root / "data" / "train.jsonl", train_rows)

    tok = AutoTokenizer.from_pretrained(str(base))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    )
    from ckptsel.data.prompts import format_prompt

    train = [encode_example(tok, format_prompt(it.instruction), it.response) for it in load_items("gsm8k", train_file)]
    callback = RecordingCallback(
        val, MeasureConfig("gsm8k", batch_size=4, max_new_tokens=MAX_NEW), root / "records_cb", "tiny-s0", "tiny", test=test, verbose=False
    )
    args = tiny_training_args(root / "runs" / "tiny-s0", 4)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        data_collator=lambda batch: collate(batch, tok.pad_token_id),
        processing_class=tok,
        callbacks=[callback],
    )
    trainer.train()
    return base, val, test, callback


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("callback")
    base, val, test, callback = _train_with_callback(root)
    return root, base, val, test, callback


def test_callback_records_every_save(trained):
    root, _, _, _, callback = trained
    assert callback.measured_steps == [2, 4]
    # a second save at an already recorded step (same weights) is not measured again
    state = SimpleNamespace(global_step=4, is_world_process_zero=True)
    assert callback.on_save(None, state, "control") == "control"
    assert callback.measured_steps == [2, 4]
    gen = read_frame(root / "records_cb", "generations")
    nll = read_frame(root / "records_cb", "nll")
    assert sorted(gen["step"].unique()) == [2, 4]
    assert set(gen["split"]) == {"validation", "test"}
    # each unit says what measured it: the training model on the Hugging Face path
    from ckptsel.records.provenance import read_provenance

    for kind in ("generations", "nll"):
        prov = read_provenance(root / "records_cb", kind)["tiny-s0"]
        assert prov.units == 2 and not prov.unrecorded
        (one,) = prov.measured_by
        assert '"engine":"hf"' in one and '"batch_size":4' in one and '"device":"cpu"' in one
    assert len(gen) == 2 * (5 + 3)
    assert set(nll["window"]) == {512, 0}
    assert (gen["trajectory"] == "tiny-s0").all() and (gen["configuration"] == "tiny").all()
    # each saved checkpoint folder exists beside its records
    for step in (2, 4):
        assert (root / "runs" / "tiny-s0" / f"checkpoint-{step}" / "adapter_config.json").is_file()


def test_callback_records_equal_measure_on_saved_checkpoints(trained):
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    root, base, val, test, _ = trained
    run_dir = root / "runs" / "tiny-s0"
    cfg = json.loads((run_dir / "checkpoint-2" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"]
    measure_run(
        run_dir,
        MeasureConfig("gsm8k", batch_size=4, max_new_tokens=MAX_NEW),
        validation=val,
        test=test,
        out=root / "records_cli",
        base=str(base),
        trajectory="tiny-s0",
        configuration="tiny",
    )
    key = ["trajectory", "step", "split", "item_id"]
    a = read_frame(root / "records_cb", "generations").sort_values(key).reset_index(drop=True)
    b = read_frame(root / "records_cli", "generations").sort_values(key).reset_index(drop=True)
    assert len(a) == len(b) == 16
    for col in ("trajectory", "configuration", "task", "step", "split", "item_id", "group", "answer", "correct", "text"):
        assert a[col].tolist() == b[col].tolist(), col
    # the LoRA really moved between the saves: some generated text differs between steps
    texts = a.pivot_table(index="item_id", columns="step", values="text", aggfunc="first")
    assert (texts[2] != texts[4]).any()
    nkey = key + ["window"]
    na = read_frame(root / "records_cb", "nll").sort_values(nkey).reset_index(drop=True)
    nb = read_frame(root / "records_cli", "nll").sort_values(nkey).reset_index(drop=True)
    assert na[nkey].equals(nb[nkey])
    assert na["n_tokens"].tolist() == nb["n_tokens"].tolist()
    # measure merges each float32 adapter into a copy of the base on the CPU; the callback
    # scores the training model's unmerged LoRA: equal to float32 rounding
    np.testing.assert_allclose(na["nll_sum"].to_numpy(), nb["nll_sum"].to_numpy(), rtol=1e-7)
    # and the steps really differ in NLL (training happened between saves)
    v = na[na["window"] == 512].pivot_table(index="item_id", columns="step", values="nll_sum")
    assert not np.allclose(v[2], v[4])


def test_select_answers_from_callback_records(trained):
    from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint

    root = trained[0]
    out = select_checkpoint(
        root / "records_cb", "tiny-s0", settings=SelectSettings(partitions=10, draws=50, bootstrap_partitions=5, permutations=10)
    )
    assert list(out.steps) == [2, 4] and out.final_step == 4
    assert out.test_items == 3
    assert out.recommendation.keep_step in (2, 4)


def test_callback_rejects_bad_input(tmp_path):
    from ckptsel.errors import CkptselError
    from ckptsel.integrations.hf_trainer import RecordingCallback

    val = write_jsonl(tmp_path / "v.jsonl", make_gsm8k_rows(3))
    with pytest.raises(CkptselError, match="task"):
        RecordingCallback(val, "no-such-task", tmp_path / "r", "t")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(CkptselError, match="bad.jsonl"):
        RecordingCallback(bad, "gsm8k", tmp_path / "r", "t")
