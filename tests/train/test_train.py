"""SFT trajectories: response-masked labels, the checkpoint grid in HF layout, exact resume,
invalid trajectories, the study file and the ``train`` command (tiny local model, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.cli import app  # noqa: E402
from ckptsel.data.prompts import format_prompt  # noqa: E402
from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.sim.tiny import save_tiny  # noqa: E402
from ckptsel.study.configuration import Configuration  # noqa: E402
from ckptsel.study.spec import load_study  # noqa: E402
from ckptsel.train.checkpoints import (  # noqa: E402
    checkpoint_steps,
    trajectory_status,  # noqa: E402
)
from ckptsel.train.models import load_tokenizer  # noqa: E402
from ckptsel.train.trajectory import IGNORE_INDEX, encode_example, example_order, train_trajectory  # noqa: E402

from tinyrun import study_from_dict, study_to_toml  # noqa: E402

QUESTIONS = [
    (
        f"Tom has {a} apples and buys {b} more. How many apples does Tom have now?",
        f"Tom has {a} + {b} = {a + b} apples.\nThe answer is: {a + b}",
    )
    for a in range(1, 7)
    for b in range(1, 4)
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    texts = [format_prompt(q) + " " + r for q, r in QUESTIONS]
    return save_tiny(tmp_path_factory.mktemp("base") / "tiny", texts, vocab_size=300, hidden_size=32, layers=1, heads=2)


@pytest.fixture(scope="module")
def tok(base):
    return load_tokenizer(str(base))


@pytest.fixture(scope="module")
def examples(tok):
    return [encode_example(tok, format_prompt(q), r) for q, r in QUESTIONS]


def _cfg(**kw) -> Configuration:
    d = dict(name="c", adaptation="lora", rank=4, alpha=8, lr=1e-2, steps=60, save_every=25, batch_size=4, micro_batch=2)
    d.update(kw)
    return Configuration(**d)


def test_labels_mask_prompt_and_supervise_response_and_eos(tok):
    prompt, response = format_prompt(QUESTIONS[3][0]), QUESTIONS[3][1]
    ex = encode_example(tok, prompt, response)
    p_ids = tok(prompt)["input_ids"]
    r_ids = tok(response, add_special_tokens=False)["input_ids"]
    assert ex["input_ids"] == p_ids + r_ids + [tok.eos_token_id]
    assert ex["labels"][: len(p_ids)] == [IGNORE_INDEX] * len(p_ids)
    assert ex["labels"][len(p_ids) :] == r_ids + [tok.eos_token_id]
    assert tok.decode(ex["labels"][len(p_ids) : -1]) == response
    # truncation keeps the alignment: the first tokens of the response stay supervised
    cut = encode_example(tok, prompt, response, max_length=len(p_ids) + 2)
    assert cut["labels"] == [IGNORE_INDEX] * len(p_ids) + r_ids[:2]


def test_example_order_is_seeded_permutations():
    a = example_order(10, 25, seed=42)
    assert len(a) == 25
    assert sorted(a[:10]) == list(range(10)) and sorted(a[10:20]) == list(range(10))
    assert (a == example_order(10, 25, seed=42)).all()
    assert not (a == example_order(10, 25, seed=43)).all()


def test_configuration_grid_and_validation():
    assert _cfg(steps=60).save_steps(100) == [25, 50, 60]
    assert _cfg(steps=75).save_steps(100) == [25, 50, 75]
    assert _cfg(steps=None, epochs=2.0, batch_size=32, micro_batch=8).total_steps(100) == 7
    assert _cfg(adaptation="full", lr=None).learning_rate == 2e-5
    assert _cfg(lr=None).learning_rate == 2e-4
    with pytest.raises(CkptselError, match="multiple of micro_batch"):
        _cfg(batch_size=32, micro_batch=5)
    with pytest.raises(CkptselError, match="exactly one of 'steps' or 'epochs'"):
        _cfg(steps=None)
    with pytest.raises(CkptselError, match="adaptation"):
        _cfg(adaptation="qlora")


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    f = "adapter_model.safetensors" if (path / "adapter_model.safetensors").exists() else "model.safetensors"
    return load_file(path / f)


def test_lora_run_writes_grid_and_resume_is_exact(base, tok, examples, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = _cfg()
    run = tmp_path / "full-run" / "c-s42"
    res = train_trajectory(str(base), examples, cfg, 42, run, tokenizer=tok, progress=False)
    assert res.saved_steps == [25, 50, 60] and res.final_step == 60
    assert checkpoint_steps(run) == [25, 50, 60]
    ck = run / "checkpoint-60"
    acfg = json.loads((ck / "adapter_config.json").read_text())
    assert acfg["base_model_name_or_path"] == str(base)
    assert acfg["r"] == 4 and acfg["lora_dropout"] == 0.0
    assert set(acfg["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert not (ck / "config.json").exists()  # adapter only
    for f in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        assert (ck / f).is_file()
    state = json.loads((ck / "trainer_state.json").read_text())
    assert state["global_step"] == 60 and state["max_steps"] == 60
    assert state["gradient_accumulation_steps"] == 2 and len(state["log_history"]) == 60
    losses = [h["loss"] for h in state["log_history"]]
    assert sum(losses[-10:]) < sum(losses[:10])  # it learns
    # warmup 5% of 60 -> 3 steps, then linear decay to 0
    lrs = [h["learning_rate"] for h in state["log_history"]]
    assert lrs[2] == pytest.approx(1e-2) and lrs[-1] == pytest.approx(0.0)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(ck))
    assert model(input_ids=torch.tensor([examples[0]["input_ids"]])).logits.shape[0] == 1

    # interrupted after checkpoint-25, then resumed: identical to the uninterrupted run
    run2 = tmp_path / "resumed" / "c-s42"
    first = train_trajectory(str(base), examples, cfg, 42, run2, tokenizer=tok, progress=False, stop_after=25)
    assert first.saved_steps == [25] and checkpoint_steps(run2) == [25]
    assert not trajectory_status(run2, 60).valid
    with pytest.raises(CkptselError, match="different settings seed=42 \\(now 43\\)"):
        train_trajectory(str(base), examples, cfg, 43, run2, tokenizer=tok, progress=False)
    again = train_trajectory(str(base), examples, cfg, 42, run2, tokenizer=tok, progress=False)
    assert again.resumed_from == 25 and again.saved_steps == [50, 60]
    for step in (25, 50, 60):
        a, b = _weights(run / f"checkpoint-{step}"), _weights(run2 / f"checkpoint-{step}")
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (step, k)
    s2 = json.loads((run2 / "checkpoint-60" / "trainer_state.json").read_text())
    assert s2["log_history"] == state["log_history"]
    # a complete trajectory is skipped on a re-run
    assert train_trajectory(str(base), examples, cfg, 42, run2, tokenizer=tok, progress=False).skipped
    # a different seed gives a different trajectory
    run3 = tmp_path / "other" / "c-s43"
    train_trajectory(str(base), examples, _cfg(steps=25), 43, run3, tokenizer=tok, progress=False)
    a, b = _weights(run / "checkpoint-25"), _weights(run3 / "checkpoint-25")
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_full_run_final_step_off_grid_and_status(base, tok, examples, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = _cfg(adaptation="full", lr=1e-3, steps=30)
    run = tmp_path / "c-s44"
    res = train_trajectory(str(base), examples, cfg, 44, run, tokenizer=tok, progress=False)
    assert res.saved_steps == [25, 30]
    ck = run / "checkpoint-30"
    model = AutoModelForCausalLM.from_pretrained(str(ck))
    assert AutoTokenizer.from_pretrained(str(ck)).eos_token_id == tok.eos_token_id
    ref = AutoModelForCausalLM.from_pretrained(str(base))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, dict(ref.named_parameters())[n])]
    assert changed  # full fine-tuning moved the weights
    assert trajectory_status(run, 30).valid
    assert trajectory_status(run).valid
    st = trajectory_status(run, 40)
    assert not st.valid and "lacks its final checkpoint-40" in st.reason
    import shutil

    shutil.rmtree(ck)
    st = trajectory_status(run, 30)
    assert not st.valid and st.steps == (25,) and "checkpoint-30" in st.reason
    assert not trajectory_status(tmp_path / "nothing", 30).valid


def _write_study(tmp_path: Path, base: Path, steps: int = 30) -> Path:
    rows = [{"query": q, "response": r, "type": "GSM_AnsAug", "original_question": q} for q, r in QUESTIONS]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    toml = f"""schema = 2
[study]
name = "t"
base_model = "{base}"
seeds = [42, 43]

[train]
task = "metamath"
file = "train.json"

[[configurations]]
name = "lora-r4"
adaptation = "lora"
rank = 4
alpha = 8
lr = 1e-2
steps = {steps}
save_every = 25
batch_size = 4
micro_batch = 4
"""
    path = tmp_path / "study.toml"
    path.write_text(toml)
    return path


def test_study_file_roundtrip_and_errors(base, tmp_path):
    study = load_study(_write_study(tmp_path, base))
    assert [t for t, _, _ in study.trajectories()] == ["lora-r4-s42", "lora-r4-s43"]
    assert study.train == (tmp_path / "train.json").resolve()
    assert study.base_model == str(base)
    (tmp_path / "again.toml").write_text(study_to_toml(study))
    again = load_study(tmp_path / "again.toml")
    assert again.configurations == study.configurations and again.seeds == study.seeds
    assert again.train == study.train and again.base_model == study.base_model
    # the same mistakes in a study file: refused by the reader, naming the key
    good = (tmp_path / "again.toml").read_text()
    for edit, message in (
        (("[train]", "bogus = 1\n[train]"), r"\[study\] bogus: unknown key"),
        (("steps =", "rnak = 8\nsteps ="), r"configurations\[0\] rnak: unknown key"),
    ):
        (tmp_path / "bad.toml").write_text(good.replace(*edit, 1))
        with pytest.raises(CkptselError, match=message):
            load_study(tmp_path / "bad.toml")
    with pytest.raises(CkptselError, match="unknown key"):
        study_from_dict(
            {"study": {"base_model": "x", "task": "t", "train": "f", "bogus": 1}, "configurations": [{"name": "a", "steps": 1}]}, tmp_path
        )
    with pytest.raises(CkptselError, match=r"configurations\[0\] has unknown key"):
        study_from_dict(
            {"study": {"base_model": "x", "task": "t", "train": "f"}, "configurations": [{"name": "a", "steps": 1, "rnak": 8}]}, tmp_path
        )
    bad = tmp_path / "bad.toml"
    bad.write_text("[study\n")
    with pytest.raises(CkptselError, match="invalid TOML"):
        load_study(bad)


def test_train_command_trains_checks_and_flags_invalid(base, tmp_path):
    from typer.testing import CliRunner

    path = _write_study(tmp_path, base)
    runner = CliRunner()
    r = runner.invoke(app, ["train", str(path)])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "final_steps.json").read_text()) == {"lora-r4-s42": 30, "lora-r4-s43": 30}
    for t in ("lora-r4-s42", "lora-r4-s43"):
        assert checkpoint_steps(tmp_path / "runs" / t) == [25, 30]
    r = runner.invoke(app, ["train", str(path), "--check"])
    assert r.exit_code == 0 and "valid" in r.output
    import shutil

    shutil.rmtree(tmp_path / "runs" / "lora-r4-s43" / "checkpoint-30")
    r = runner.invoke(app, ["train", str(path), "--check"])
    assert r.exit_code == 1 and "INVALID" in r.output
    # training again resumes the broken trajectory from checkpoint-25 and fixes it
    r = runner.invoke(app, ["train", str(path)])
    assert r.exit_code == 0 and "resumed from checkpoint-25" in r.output


def test_gradient_accumulation_equals_one_big_batch(base, tok, examples, tmp_path):
    """The loss is averaged over the supervised tokens of the whole effective batch, so
    4 micro-batches of 2 and 1 micro-batch of 8 give the same update (up to float rounding)."""
    runs = {}
    for micro in (2, 8):
        cfg = _cfg(adaptation="full", lr=1e-3, steps=2, save_every=1, batch_size=8, micro_batch=micro)
        run = tmp_path / f"m{micro}" / "c-s42"
        train_trajectory(str(base), examples, cfg, 42, run, tokenizer=tok, progress=False)
        runs[micro] = _weights(run / "checkpoint-2")
    ref = _weights(Path(base))
    moved = 0
    for k, v in runs[8].items():
        assert torch.allclose(runs[2][k], v, atol=1e-6, rtol=1e-5), k
        moved += not torch.equal(v, ref[k]) if k in ref else 0
    assert moved > 0


def test_bad_study_file_exits_2(tmp_path, capsys):
    from ckptsel.cli.app import main

    with pytest.raises(SystemExit) as exc:
        main(["train", str(tmp_path / "missing.toml")])
    assert exc.value.code == 2
    assert "study file not found" in capsys.readouterr().err
