"""RecordingCallback under mixed-precision training: with ``bf16=True`` (trl's ``SFTConfig``
default) accelerate wraps the model's forward in a bfloat16 autocast; the callback must record
what ``ckptsel measure`` records on the saved checkpoints (the model's own dtype, no autocast),
and stamp the precision it really used, so that the mixing guard can see a difference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ckptsel.records.scan import read_frame

pytest.importorskip("transformers")
pytest.importorskip("peft")

from tinyrun import TEMPLATE_HINT, build_tiny_base, make_gsm8k_rows, tiny_training_args, write_jsonl  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW = 12
N_VAL = 16
N_TEST = 4
GEN_COLUMNS = ("configuration", "task", "group", "answer", "correct", "text")
KEY = ["trajectory", "step", "split", "item_id"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_thread):
    from transformers import AutoTokenizer

    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items
    from ckptsel.train.trajectory import encode_example

    root = tmp_path_factory.mktemp("precision")
    val_rows, test_rows = make_gsm8k_rows(N_VAL, seed=1), make_gsm8k_rows(N_TEST, seed=2)
    train_rows = make_gsm8k_rows(8, seed=3)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in val_rows + test_rows + train_rows]
    base = build_tiny_base(root / "base", texts, seed=0)
    val = write_jsonl(root / "data" / "validation.jsonl", val_rows)
    test = write_jsonl(root / "data" / "test.jsonl", test_rows)
    train_file = write_jsonl(root / "data" / "train.jsonl", train_rows)
    tok = AutoTokenizer.from_pretrained(str(base))
    items = load_items("gsm8k", train_file)
    train = [encode_example(tok, format_prompt(it.instruction), it.response) for it in items]
    rows = [{"prompt": format_prompt(it.instruction), "completion": " " + it.response} for it in items]
    return root, base, (val, test), tok, train, rows


def _lora_model(base, dtype=None):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=dtype or torch.float32)
    return get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    )


def _config():
    from ckptsel.measure.config import MeasureConfig

    return MeasureConfig("gsm8k", batch_size=4, max_new_tokens=MAX_NEW)


def _measure_saved(root: Path, run: str, base: Path, data: tuple, out: Path) -> None:
    from ckptsel.measure.run import measure_run

    measure_run(
        root / "runs" / run, _config(), validation=data[0], test=data[1], out=out, base=str(base), trajectory=run, configuration=run
    )


def _compare(a_dir: Path, b_dir: Path) -> dict[str, int]:
    """How many generation rows differ (any generation column) and how many NLL rows differ
    beyond float32 rounding (rtol 1e-7) between two records folders of the same items."""
    a = read_frame(a_dir, "generations").sort_values(KEY).reset_index(drop=True)
    b = read_frame(b_dir, "generations").sort_values(KEY).reset_index(drop=True)
    assert a[KEY].equals(b[KEY]) and len(a)
    gen_diff = np.zeros(len(a), dtype=bool)
    for col in GEN_COLUMNS:
        gen_diff |= np.array([x != y for x, y in zip(a[col].tolist(), b[col].tolist(), strict=True)])
    nkey = KEY + ["window"]
    na = read_frame(a_dir, "nll").sort_values(nkey).reset_index(drop=True)
    nb = read_frame(b_dir, "nll").sort_values(nkey).reset_index(drop=True)
    assert na[nkey].equals(nb[nkey]) and len(na)
    assert na["n_tokens"].tolist() == nb["n_tokens"].tolist()
    x, y = na["nll_sum"].to_numpy(), nb["nll_sum"].to_numpy()
    nll_diff = ~np.isclose(x, y, rtol=1e-7, atol=0.0)
    return {
        "rows": len(a),
        "generations": int(gen_diff.sum()),
        "nll_rows": len(na),
        "nll": int(nll_diff.sum()),
        "max_rel": float(np.max(np.abs(x - y) / np.abs(y))),
    }


def _provenance(records: Path, trajectory: str) -> set[str]:
    from ckptsel.records.provenance import read_provenance

    out: set[str] = set()
    for kind in ("generations", "nll"):
        out |= read_provenance(records, kind)[trajectory].measured_by
    return {json.loads(p)["dtype"] for p in out}


def test_trainer_bf16_records_equal_measure(setup):
    """``transformers.Trainer`` with ``bf16=True`` on the CPU: the model's forward is
    autocast-wrapped by accelerate; the callback's records equal ``measure``'s on the saved
    checkpoints (texts and answers identical, NLL to float32 rounding)."""
    from transformers import Trainer

    from ckptsel.integrations.hf_trainer import RecordingCallback
    from ckptsel.train.trajectory import collate

    root, base, data, tok, train, _ = setup
    cb = RecordingCallback(data[0], _config(), root / "records-cb", "hf-bf16", test=data[1], verbose=False)
    args = tiny_training_args(root / "runs" / "hf-bf16", 4, bf16=True)
    assert args.bf16
    trainer = Trainer(
        model=_lora_model(base),
        args=args,
        train_dataset=train,
        data_collator=lambda batch: collate(batch, tok.pad_token_id),
        processing_class=tok,
        callbacks=[cb],
    )
    trainer.train()
    # the Trainer really trained in mixed precision: accelerate wrapped the forward
    assert "_original_forward" in trainer.model.__dict__
    assert cb.measured_steps == [2, 4]
    _measure_saved(root, "hf-bf16", base, data, root / "records-measure")
    diff = _compare(root / "records-cb", root / "records-measure")
    print(f"Trainer bf16=True: callback vs measure: {diff}")
    assert diff["generations"] == 0 and diff["nll"] == 0, diff
    # both say float32, and that is true of both
    assert _provenance(root / "records-cb", "hf-bf16") == {"float32"}
    assert _provenance(root / "records-measure", "hf-bf16") == {"float32"}
    # measuring is invisible to training: the autocast wrapper is back on the model
    assert "_original_forward" in trainer.model.__dict__
    assert trainer.model.forward is not trainer.model.__dict__["_original_forward"]


def test_sft_trainer_defaults_records_equal_measure(setup):
    """trl's ``SFTTrainer`` with ``SFTConfig``'s defaults (``bf16=True``)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    from ckptsel.integrations.hf_trainer import RecordingCallback

    root, base, data, tok, _, rows = setup
    cb = RecordingCallback(data[0], _config(), root / "records-sft", "sft", test=data[1], verbose=False)
    args = trl.SFTConfig(
        output_dir=str(root / "runs" / "sft"),
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
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
    assert args.bf16  # SFTConfig's default
    trainer = trl.SFTTrainer(
        model=_lora_model(base), args=args, train_dataset=Dataset.from_list(rows), processing_class=tok, callbacks=[cb]
    )
    trainer.train()
    assert cb.measured_steps == [2, 4]
    _measure_saved(root, "sft", base, data, root / "records-sft-measure")
    diff = _compare(root / "records-sft", root / "records-sft-measure")
    print(f"SFTTrainer defaults: callback vs measure: {diff}")
    assert diff["generations"] == 0 and diff["nll"] == 0, diff
    assert _provenance(root / "records-sft", "sft") == {"float32"}


def _saved(model, root: Path, run: str, step: int) -> None:
    """``model``'s adapter saved as ``runs/<run>/checkpoint-<step>`` (as the Trainer saves it)."""
    path = root / "runs" / run / f"checkpoint-{step}"
    model.save_pretrained(str(path))
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}), encoding="utf-8")


def test_autocast_it_cannot_undo_is_stamped_and_never_mixed(setup):
    """A forward the user wrapped in an autocast of their own (not accelerate's): the callback
    cannot put it aside, so the provenance says so, and ``measure`` (float32) refuses to add
    its records to that trajectory."""
    import torch

    from ckptsel.errors import CkptselError
    from ckptsel.integrations.hf_trainer import RecordingCallback

    root, base, data, tok, _, _ = setup
    model = _lora_model(base)
    _saved(model, root, "forced", 2)
    model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(model.forward)
    cb = RecordingCallback(data[0], _config(), root / "records-forced", "forced", test=data[1], verbose=False)
    cb.measure(model, tok, 2)
    assert _provenance(root / "records-forced", "forced") == {"float32 with bfloat16 autocast"}
    with pytest.raises(CkptselError, match="float32 with bfloat16 autocast.*refusing to mix"):
        _measure_saved(root, "forced", base, data, root / "records-forced")
    # an autocast around the callback (the caller's) is disabled: plain float32
    plain = _lora_model(base)
    cb = RecordingCallback(data[0], _config(), root / "records-outer", "outer", test=data[1], verbose=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cb.measure(plain, tok, 2)
    assert _provenance(root / "records-outer", "outer") == {"float32"}


def test_model_in_another_dtype_is_stamped_and_refused(setup):
    """A bfloat16 training model on the CPU, where ``measure`` loads float32: measured in
    bfloat16 with a warning and stamped so (``measure`` refuses to mix); an explicit
    ``dtype="float32"`` is refused before training starts."""
    from types import SimpleNamespace

    import torch

    from ckptsel.errors import CkptselError
    from ckptsel.integrations.hf_trainer import RecordingCallback
    from ckptsel.measure.config import MeasureConfig

    root, base, data, tok, _, _ = setup
    model = _lora_model(base, torch.bfloat16)
    _saved(model, root, "bf16", 2)
    cb = RecordingCallback(data[0], _config(), root / "records-bf16", "bf16", test=data[1], verbose=False)
    with pytest.warns(UserWarning, match="training model is bfloat16.*--dtype bfloat16"):
        cb.measure(model, tok, 2)
    assert _provenance(root / "records-bf16", "bf16") == {"bfloat16"}
    with pytest.raises(CkptselError, match="bfloat16.*refusing to mix"):
        _measure_saved(root, "bf16", base, data, root / "records-bf16")
    strict = RecordingCallback(data[0], MeasureConfig("gsm8k", dtype="float32"), root / "records-strict", "strict", verbose=False)
    state = SimpleNamespace(is_world_process_zero=True)
    with pytest.raises(CkptselError, match="asks for dtype float32 but .* are bfloat16"):
        strict.on_train_begin(None, state, "control", model=model)
    assert not (root / "records-strict").exists()
