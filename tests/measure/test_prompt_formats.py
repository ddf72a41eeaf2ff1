"""Prompt formats (issue 36): a chat-template run trained by trl's SFTTrainer is measured on its
own template — prompt tokens equal ``apply_chat_template``'s, texts equal unbatched
``generate`` on them, NLL targets equal the completion tokens trl trained on — a run with a chat
template and no stated format is refused in one line, the run folder's ``prompt_format.json``
is read, formats never mix in one trajectory, and alpaca keeps its hashes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptsel.data.prompts import PromptFormat, prompt_format
from ckptsel.data.tasks import load_items
from ckptsel.errors import CkptselError
from ckptsel.records.scan import read_frame

from clirun import run_cli

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytestmark = pytest.mark.usefixtures("one_thread")

from tinyrun import CHAT_TEMPLATE, build_tiny_base, make_gsm8k_rows, write_jsonl  # noqa: E402

MAX_NEW = 12


def _chat_ids(tok, messages, **kw):
    out = tok.apply_chat_template(messages, tokenize=True, **kw)
    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    return list(ids)


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory):
    """A tiny base whose tokenizer has a chat template, fine-tuned with trl's SFTTrainer on
    conversational prompt-completion data (LoRA, checkpoints at steps 2 and 4)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("chat")
    train_rows, val_rows, test_rows = (make_gsm8k_rows(n, seed=s) for n, s in ((16, 1), (6, 2), (4, 3)))
    texts = [f"User: {r['question']}\nAssistant: {r['answer']}</s>\n" for r in train_rows + val_rows]
    base = build_tiny_base(root / "base", texts, seed=0)
    tok = AutoTokenizer.from_pretrained(str(base))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(base))
    train_file = write_jsonl(root / "data" / "train.jsonl", train_rows)
    items = load_items("gsm8k", train_file)
    rows = [
        {"prompt": [{"role": "user", "content": it.instruction}], "completion": [{"role": "assistant", "content": it.response}]}
        for it in items
    ]
    args = trl.SFTConfig(
        output_dir=str(root / "runs" / "chat-s0"),
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
    trainer = trl.SFTTrainer(
        model=str(base),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
    )
    # the tokens and labels trl trains on (labels: -100 outside the completion)
    trained = [(list(r["input_ids"]), list(r["labels"])) for r in trainer.train_dataset]
    trainer.train()
    return {
        "root": root,
        "base": base,
        "run": root / "runs" / "chat-s0",
        "items": items,
        "trained": trained,
        "validation": write_jsonl(root / "data" / "validation.jsonl", val_rows),
        "test": write_jsonl(root / "data" / "test.jsonl", test_rows),
    }


def _measure(run, out, *extra, capsys, run_dir=None):
    args = [
        "measure",
        run_dir or run["run"],
        "--task",
        "gsm8k",
        "--validation",
        run["validation"],
        "--test",
        run["test"],
        "--out",
        out,
        "--max-new-tokens",
        MAX_NEW,
        "--batch-size",
        4,
        *extra,
    ]
    return run_cli(args, capsys)


def test_a_chat_template_with_no_stated_format_is_refused(chat_run, tmp_path, capsys):
    code, said = _measure(chat_run, tmp_path / "records", capsys=capsys)
    assert code == 2
    lines = [ln for ln in said.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, said
    assert "chat template" in said and "--prompt-format chat" in said and "alpaca" in said
    assert not (tmp_path / "records").exists()


def test_chat_run_is_measured_on_its_own_template(chat_run, tmp_path, capsys):
    """Prompt tokens = apply_chat_template's; texts = unbatched generate on them; NLL targets =
    the completion tokens trl trained on; the provenance names the format."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ckptsel.records.provenance import read_provenance

    out = tmp_path / "records"
    code, said = _measure(chat_run, out, "--prompt-format", "chat", capsys=capsys)
    assert code == 0, said
    assert "prompt format: chat (the tokenizer's chat template, chat[" in said
    ckpt = chat_run["run"] / "checkpoint-4"
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    fmt = prompt_format("chat").with_tokenizer(tok)
    val = load_items("gsm8k", chat_run["validation"])
    prompts, _ = fmt.encode(tok, [it.instruction for it in val], cache={})
    for it, ids in zip(val, prompts, strict=True):
        messages = [{"role": "user", "content": it.instruction}]
        assert ids == _chat_ids(tok, messages, add_generation_prompt=True)
    # the texts recorded at step 4 are unbatched generate on those tokens
    model = AutoModelForCausalLM.from_pretrained(str(chat_run["base"]), dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(ckpt)).eval()
    gen = read_frame(out, "generations")
    gen = gen[(gen["step"] == 4) & (gen["split"] == "validation")].set_index("item_id")
    for it, ids in zip(val, prompts, strict=True):
        x = torch.tensor([ids])
        with torch.inference_mode():
            seq = model.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=MAX_NEW,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )[0, len(ids) :].tolist()
        if tok.eos_token_id in seq:
            seq = seq[: seq.index(tok.eos_token_id)]
        assert gen.loc[it.item_id, "text"] == tok.decode(seq, skip_special_tokens=True)
    # the scored response tokens are exactly those trl trained on (labels not -100)
    train = chat_run["items"]
    p, r = fmt.encode(tok, [it.instruction for it in train], [it.response for it in train])
    for (ids, labels), pi, ri in zip(chat_run["trained"], p, r, strict=True):
        assert ids == pi + ri
        assert [t for t in labels if t != -100] == ri
    prov = read_provenance(out, "generations", ["chat-s0"])["chat-s0"]
    assert all(json.loads(m)["prompt_format"] == fmt.identity for m in prov.measured_by)


def test_the_run_folder_states_its_format(chat_run, tmp_path, capsys):
    """prompt_format.json in the run folder is read (the same records as --prompt-format chat);
    a stated format that differs from it is refused."""
    run = tmp_path / "chat-s0"
    shutil.copytree(chat_run["run"], run)
    (run / "prompt_format.json").write_text(json.dumps({"prompt_format": "chat"}))
    code, said = _measure(chat_run, tmp_path / "a", capsys=capsys, run_dir=run)
    assert code == 0, said
    code, said = _measure(chat_run, tmp_path / "b", "--prompt-format", "chat", capsys=capsys)
    assert code == 0, said
    cols = ["step", "split", "item_id", "text", "correct"]
    a = read_frame(tmp_path / "a", "generations")[cols].sort_values(cols[:3]).reset_index(drop=True)
    b = read_frame(tmp_path / "b", "generations")[cols].sort_values(cols[:3]).reset_index(drop=True)
    assert a.equals(b)
    code, said = _measure(chat_run, tmp_path / "c", "--prompt-format", "alpaca", capsys=capsys, run_dir=run)
    assert code == 2 and "was trained with the prompt format chat" in said
    assert not (tmp_path / "c").exists()


def test_formats_never_mix_in_one_trajectory(chat_run, tmp_path, capsys):
    out = tmp_path / "records"
    assert _measure(chat_run, out, "--prompt-format", "chat", capsys=capsys)[0] == 0
    template = tmp_path / "qa.jinja"
    template.write_text("Q: {{ prompt }}\nA:")
    before = read_frame(out, "generations")
    code, said = _measure(chat_run, out, "--prompt-format", template, capsys=capsys)
    assert code == 2 and "refusing to mix" in said and "prompt format" in said, said
    assert read_frame(out, "generations").equals(before)


def test_template_file_renders_the_item_fields_and_scores_response_and_eos(chat_run, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(chat_run["base"]))
    path = tmp_path / "t.jinja"
    path.write_text("{{ system }}[{{ stratum }}|{{ id }}] Q: {{ prompt }}\nA:")
    fmt = prompt_format(str(path), system_prompt="Be exact. ")
    item = chat_run["items"][0]
    text = fmt.render(item.instruction, item)
    assert text == f"Be exact. [{item.subtask}|{item.item_id}] Q: {item.instruction}\nA:"
    p, r = fmt.encode(tok, [item.instruction], [item.response], [item])
    assert p == [list(tok(text)["input_ids"])]
    assert r == [[*tok(item.response, add_special_tokens=False)["input_ids"], tok.eos_token_id]]
    assert fmt.identity.startswith("template[")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ answer }}")  # the reference is not offered to a template
    with pytest.raises(CkptselError, match="bad.jinja: prompt template"):
        prompt_format(str(bad))


def test_alpaca_keeps_its_hashes_and_bad_settings_are_one_line():
    from ckptsel.measure.config import MeasureConfig

    plain = MeasureConfig("gsm8k")
    stated = MeasureConfig("gsm8k", prompt_format="alpaca")
    # the hashes part files had before prompt formats existed (computed on 0afbdc2)
    assert plain.generation_fingerprint() == stated.generation_fingerprint() == "cd169d982152dd5a"
    assert plain.nll_fingerprint() == stated.nll_fingerprint() == "afae559f5bd67562"
    for kwargs, message in (
        ({"prompt_format": "nope"}, "not alpaca, chat, or a template file"),
        ({"prompt_format": "alpaca", "system_prompt": "x"}, "needs? --prompt-format chat"),
        ({"prompt_format": "chat", "chat_template_args": "{bad"}, "not JSON"),
        ({"prompt_format": "chat", "chat_template_args": "[1]"}, "JSON object"),
    ):
        with pytest.raises(CkptselError, match=message):
            MeasureConfig("gsm8k", **kwargs)
    chat = MeasureConfig("gsm8k", prompt_format="chat", chat_template_args={"enable_thinking": False})
    assert chat.measured.fmt.template_args == '{"enable_thinking":false}'
    with pytest.raises(CkptselError, match="not bound"):
        chat.generation_fingerprint()


def test_training_writes_the_format_and_encodes_with_it(chat_run, tmp_path):
    from transformers import AutoTokenizer

    from ckptsel.train.formats import read_run_format, write_run_format
    from ckptsel.train.trajectory import encode_items

    tok = AutoTokenizer.from_pretrained(str(chat_run["base"]))
    fmt = prompt_format("chat", "Answer with a number.").with_tokenizer(tok)
    items = chat_run["items"][:3]
    examples = encode_items(tok, items, 512, fmt)
    p, r = fmt.encode(tok, [it.instruction for it in items], [it.response for it in items])
    for ex, pi, ri in zip(examples, p, r, strict=True):
        assert ex["input_ids"] == pi + ri and ex["labels"] == [-100] * len(pi) + ri
    write_run_format(tmp_path / "run", fmt)
    back = read_run_format(tmp_path / "run")
    assert back.with_tokenizer(tok).identity == fmt.identity
    with pytest.raises(CkptselError, match="trained with the prompt format"):
        write_run_format(tmp_path / "run", PromptFormat())
    # alpaca examples are what they always were
    from ckptsel.data.prompts import format_prompt
    from ckptsel.train.trajectory import encode_example

    old = [encode_example(tok, format_prompt(it.instruction), it.response) for it in items]
    assert encode_items(tok, items, 512) == old


def _sft(chat_run, out: Path, callback, max_steps: int = 2):
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(chat_run["base"]))
    rows = [
        {"prompt": [{"role": "user", "content": it.instruction}], "completion": [{"role": "assistant", "content": it.response}]}
        for it in chat_run["items"]
    ]
    args = trl.SFTConfig(
        output_dir=str(out),
        max_steps=max_steps,
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
    trl.SFTTrainer(
        model=str(chat_run["base"]),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[callback],
        peft_config=LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
    ).train()


def test_the_trainer_callback_measures_on_the_run_s_template(chat_run, tmp_path, capsys):
    """RecordingCallback with prompt_format="chat" on trl's SFTTrainer: its records equal
    `ckptsel measure OUTPUT_DIR` with no flag (the callback wrote prompt_format.json there);
    with no stated format, the first save is refused in one line."""
    from ckptsel.integrations.hf_trainer import RecordingCallback
    from ckptsel.measure.config import MeasureConfig

    out = tmp_path / "chat-s1"
    config = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW, batch_size=4, prompt_format="chat")
    cb = RecordingCallback(chat_run["validation"], config, tmp_path / "cb", "chat-s1", verbose=False)
    _sft(chat_run, out, cb)
    assert json.loads((out / "prompt_format.json").read_text())["prompt_format"] == "chat"
    code, said = run_cli(
        [
            "measure",
            out,
            "--task",
            "gsm8k",
            "--validation",
            chat_run["validation"],
            "--test",
            chat_run["test"],
            "--out",
            tmp_path / "cli",
            "--max-new-tokens",
            MAX_NEW,
            "--batch-size",
            4,
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, said
    cols = ["step", "item_id", "text", "correct"]
    a = read_frame(tmp_path / "cb", "generations")[cols].sort_values(cols[:2]).reset_index(drop=True)
    b = read_frame(tmp_path / "cli", "generations")
    b = b[b["split"] == "validation"][cols].sort_values(cols[:2]).reset_index(drop=True)
    assert len(a) == 6 and a.equals(b)
    plain = RecordingCallback(chat_run["validation"], "gsm8k", tmp_path / "x", "x", verbose=False)
    with pytest.raises(CkptselError, match="chat template and nothing says how"):
        _sft(chat_run, tmp_path / "plain", plain)


def test_ckptsel_train_records_the_format_and_measure_reads_it(chat_run, tmp_path, capsys):
    """`ckptsel train` with `[measure] prompt_format = "chat"` trains on the chat template and
    writes prompt_format.json; `ckptsel measure` of that run needs no flag."""
    train = tmp_path / "train.jsonl"
    train.write_text((chat_run["root"] / "data" / "train.jsonl").read_text())
    (tmp_path / "study.toml").write_text(f"""schema = 2
[study]
name = "t"
base_model = "{chat_run["base"]}"
seeds = [42]

[train]
task = "gsm8k"
file = "train.jsonl"

[measure]
prompt_format = "chat"
system_prompt = "Answer with a number."

[[configurations]]
name = "lora-r4"
adaptation = "lora"
rank = 4
alpha = 8
lr = 1e-2
steps = 4
save_every = 2
batch_size = 4
micro_batch = 4
""")
    code, said = run_cli(["train", tmp_path / "study.toml"], capsys)
    assert code == 0, said
    run = tmp_path / "runs" / "lora-r4-s42"
    recorded = json.loads((run / "prompt_format.json").read_text())
    assert recorded["prompt_format"] == "chat"
    assert recorded["system_prompt"] == "Answer with a number."
    code, said = _measure(chat_run, tmp_path / "records", capsys=capsys, run_dir=run)
    assert code == 0, said
    assert "prompt format: chat (the tokenizer's chat template" in said
    assert "system prompt 'Answer with a number.'" in said


def test_the_token_cache_gives_the_same_ids_and_tokenizes_each_text_once(chat_run, tmp_path):
    """``PromptFormat.encode(cache=)`` (what measurement calls over a run's checkpoints): for
    alpaca, chat and a template file, the ids equal the uncached ones; a second call on the
    same items calls the tokenizer not at all; formats sharing one cache keep their ids apart."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(chat_run["base"]))
    path = tmp_path / "t.jinja"
    path.write_text("[{{ id }}] Q: {{ prompt }}\nA:")
    items = chat_run["items"][:4] + chat_run["items"][:1]  # one item twice: encoded once
    instr, resp = [it.instruction for it in items], [it.response for it in items]
    calls = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, *args, **kwargs):
            calls.append(args[0])
            return self.inner(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    counted = Counting(tok)
    cache: dict = {}
    formats = (PromptFormat(), prompt_format("chat").with_tokenizer(tok), prompt_format(str(path)))
    for fmt in formats:
        plain = fmt.encode(tok, instr, resp, items)
        assert fmt.encode(counted, instr, resp, items, cache=cache) == plain
        assert fmt.encode(counted, instr, None, items, cache=cache) == (plain[0], None)
    first = len(calls)
    for fmt in formats:
        assert fmt.encode(counted, instr, resp, items, cache=cache) == fmt.encode(tok, instr, resp, items)
    assert first > 0 and len(calls) == first  # all from the cache
    assert all(len(c) <= 4 for c in calls if isinstance(c, list))  # the repeated item once


def test_a_worker_refuses_a_tokenizer_whose_chat_template_differs(chat_run):
    """The driver resolves the format once; a worker (a Ray actor, the local executor) only
    checks it against the tokenizer it loads, and refuses one whose chat template differs."""
    from transformers import AutoTokenizer

    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.measurer import Measurer, MeasureResult
    from ckptsel.measure.parts import ItemPool
    from ckptsel.train.checkpoints import discover_checkpoints

    tok = AutoTokenizer.from_pretrained(str(chat_run["base"]))
    ckpts = discover_checkpoints(chat_run["run"])
    pool = ItemPool.load("gsm8k", chat_run["validation"], chat_run["test"])
    fmt = prompt_format("chat")
    same = MeasureConfig("gsm8k", prompt_format="chat").bind_format(tok)
    tok.chat_template = tok.chat_template.replace("Assistant:", "Bot:")
    other = MeasureConfig("gsm8k", prompt_format="chat").bind_format(tok)
    assert other.measured.fmt.identity != same.measured.fmt.identity != fmt.identity
    with pytest.raises(CkptselError, match="not the one the run was resolved with"):
        other.measured.fmt.check_tokenizer(AutoTokenizer.from_pretrained(str(chat_run["base"])), "x")
    for config, refused in ((same, False), (other, True)):
        result = MeasureResult("chat-s0", "chat", [c.step for c in ckpts])
        measurer = Measurer(config, ckpts, str(chat_run["base"]), result)
        if refused:
            with pytest.raises(CkptselError, match="the run: its tokenizer's chat template"):
                measurer._begin(pool)
        else:
            measurer._begin(pool)
            assert measurer.config is config  # checked, not resolved again
