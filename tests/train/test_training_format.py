"""The run's training format as it really was (issue 48, items 4, 8, 9, 12): a run trained on
``tokenizer(tokenizer.apply_chat_template(msgs, tokenize=False))`` (two BOS when the template
writes one) is measured with two when its ``prompt_format.json`` says ``"bos":
"template+tokenizer"``, and a one-line warning says which was assumed when nothing does; a
template-file run's NLL scores the tokens its label mask scored (``tokenizer(prompt +
answer)``, ``labels[:len(prompt_ids)] = -100``); a template file's final newline never changes
the texts silently; ``tasks show`` shows the token ids' head, the BOS count and a final
newline; a relative ``base_model_name_or_path`` is the run folder's. Hostile values of the new
surfaces are one line, exit 2, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptsel.data.prompts import prompt_format
from ckptsel.data.tasks import load_items
from ckptsel.records.scan import read_frame

from clirun import run_cli

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytestmark = pytest.mark.usefixtures("one_thread")

from tinyrun import CHAT_TEMPLATE, build_tiny_base, make_gsm8k_rows, save_lora_checkpoints, write_jsonl  # noqa: E402

BOS_CHAT_TEMPLATE = "{{ bos_token }}" + CHAT_TEMPLATE  # a template that writes the BOS itself
QA = "Question: {{ prompt }}\nAnswer: "  # the prompt part of f"Question: {q}\nAnswer: " + answer


@pytest.fixture(scope="module")
def bos_run(tmp_path_factory):
    """A tiny base whose tokenizer adds BOS (as Llama's does) and whose chat template writes
    ``{{ bos_token }}`` too; a run of two LoRA checkpoints on it; validation and test files."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("bos")
    val, test = make_gsm8k_rows(4, seed=2), make_gsm8k_rows(2, seed=3)
    texts = [f"User: {r['question']}\nAssistant: {r['answer']}</s>\n" for r in val + test]
    texts += [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in val + test]
    base = build_tiny_base(root / "base", texts, seed=0)
    tok = AutoTokenizer.from_pretrained(str(base))
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    tok.chat_template = BOS_CHAT_TEMPLATE
    tok.save_pretrained(str(base))
    run = root / "runs" / "bos-s0"
    save_lora_checkpoints(base, run, [2, 4])
    return {
        "root": root,
        "base": base,
        "run": run,
        "validation": write_jsonl(root / "data" / "validation.jsonl", val),
        "test": write_jsonl(root / "data" / "test.jsonl", test),
    }


def _tok(run):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(run["base"]))


def _run_copy(run, tmp_path, fmt=None) -> Path:
    """A copy of the run folder (its own prompt_format.json, ``fmt``)."""
    out = tmp_path / "bos-s0"
    shutil.copytree(run["run"], out)
    if fmt is not None:
        (out / "prompt_format.json").write_text(fmt if isinstance(fmt, str) else json.dumps(fmt))
    return out


def _measure(run, run_dir, out, *extra, capsys):
    args = [
        "measure",
        run_dir,
        "--task",
        "gsm8k",
        "--validation",
        run["validation"],
        "--test",
        run["test"],
        "--out",
        out,
        "--batch-size",
        4,
        "--only",
        "nll",
        "--no-progress",
        *extra,
    ]
    return run_cli(args, capsys)


def _recorded(out, step=4):
    nll = read_frame(out, "nll")
    nll = nll[(nll["step"] == step) & (nll["split"] == "validation") & (nll["window"] == 0)]
    return nll.set_index("item_id")


def _masked_nll(model, ids, labels) -> tuple[float, int]:
    """A Trainer's loss sum over ``labels`` (-100: not scored), in float64."""
    import torch

    with torch.inference_mode():
        logp = model(input_ids=torch.tensor([ids])).logits[0].double().log_softmax(-1)
    scored = [j for j, t in enumerate(labels) if t != -100]
    return -sum(float(logp[j - 1, labels[j]]) for j in scored), len(scored)


def _model(run, step=4):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(run["base"]), dtype=torch.float32)
    return PeftModel.from_pretrained(model, str(run["run"] / f"checkpoint-{step}")).eval()


def _one_line(said: str) -> list[str]:
    return [ln for ln in said.strip().splitlines() if ln.strip()]


# ------------------------------------------------------------------ two BOS (item 4)


def test_a_two_bos_run_is_measured_with_two_when_its_folder_says_so(bos_run, tmp_path, capsys):
    """prompt_format.json ``"bos": "template+tokenizer"``: the prompt ids are the hand-written
    path's, ``tokenizer(apply_chat_template(msgs, tokenize=False))`` (two BOS), and each NLL is
    the loss that run was trained with (labels -100 over the prompt's ids)."""
    from ckptsel.train.formats import read_run_format

    run = _run_copy(bos_run, tmp_path, {"prompt_format": "chat", "bos": "template+tokenizer"})
    out = tmp_path / "records"
    code, said = _measure(bos_run, run, out, capsys=capsys)
    assert code == 0, said
    assert "BOS template+tokenizer" in said and "warning" not in said, said
    tok, model = _tok(bos_run), _model(bos_run)
    items = load_items("gsm8k", bos_run["validation"])
    fmt = read_run_format(run).with_tokenizer(tok)
    prompts, _ = fmt.encode(tok, [it.instruction for it in items], cache={})
    recorded = _recorded(out)
    for it, ids in zip(items, prompts, strict=True):
        user = [{"role": "user", "content": it.instruction}]
        text = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        hand = list(tok(text)["input_ids"])  # the hand-written path
        assert ids == hand and hand[:2] == [tok.bos_token_id] * 2
        full = tok.apply_chat_template([*user, {"role": "assistant", "content": it.response}], tokenize=False)
        full_ids = list(tok(full)["input_ids"])
        labels = [-100] * len(hand) + full_ids[len(hand) :]
        nll, n = _masked_nll(model, full_ids, labels)
        assert recorded.loc[it.item_id, "n_tokens"] == n
        assert recorded.loc[it.item_id, "nll_sum"] == pytest.approx(nll, rel=1e-5, abs=1e-6)


def test_an_unstated_bos_is_assumed_once_and_said(bos_run, tmp_path, capsys):
    """Nothing states the BOS and the two paths differ for this tokenizer: measured with the
    template's one (apply_chat_template(tokenize=True)), a warning on the prompt format line
    says so; those records differ from the two-BOS run's (another format identity too)."""
    run = _run_copy(bos_run, tmp_path, {"prompt_format": "chat"})
    out = tmp_path / "records"
    code, said = _measure(bos_run, run, out, capsys=capsys)
    assert code == 0, said
    warning = [ln for ln in said.splitlines() if "warning" in ln]
    assert len(warning) == 1 and "BOS assumed once" in warning[0], said
    assert '"bos": "template+tokenizer"' in warning[0] and "prompt_format.json" in warning[0]
    once = _recorded(out)
    (run / "prompt_format.json").write_text(json.dumps({"prompt_format": "chat", "bos": "template+tokenizer"}))
    code, said = _measure(bos_run, run, out, capsys=capsys)  # the same records folder
    assert code == 2 and "prompt format" in said, said  # two formats never mix in one trajectory
    code, said = _measure(bos_run, run, tmp_path / "twice", capsys=capsys)
    assert code == 0, said
    twice = _recorded(tmp_path / "twice")
    assert (once["nll_sum"] != twice["nll_sum"]).all()
    stated = {"prompt_format": "chat", "bos": "template"}
    (run / "prompt_format.json").write_text(json.dumps(stated))
    code, said = _measure(bos_run, run, tmp_path / "stated", capsys=capsys)
    assert code == 0 and "warning" not in said, said  # stated: no warning, the same records
    assert _recorded(tmp_path / "stated")["nll_sum"].equals(once["nll_sum"])


# ------------------------------------------------------------------ joint tokenization (item 8)


def test_a_template_file_run_is_scored_on_its_label_mask(bos_run, tmp_path, capsys):
    """A run trained on ``tokenizer(f"Question: {q}\\nAnswer: " + answer + eos)`` with the
    Trainer-style mask ``labels[:len(tokenizer(prompt))] = -100``: the template file holding
    its prompt part is scored on exactly those label tokens (count and ids), not on the
    answer tokenized alone."""

    template = tmp_path / "qa.jinja"
    template.write_text(QA + "\n")  # as an editor saves it: the final newline is dropped
    out = tmp_path / "records"
    code, said = _measure(bos_run, bos_run["run"], out, "--prompt-format", template, capsys=capsys)
    assert code == 0, said
    tok = _tok(bos_run)
    items = load_items("gsm8k", bos_run["validation"])
    recorded = _recorded(out)
    fmt = prompt_format(str(template))
    prompts, answers = fmt.encode(tok, [it.instruction for it in items], [it.response for it in items], items, cache={})
    merged = 0
    for it, p, a in zip(items, prompts, answers, strict=True):
        prompt = f"Question: {it.instruction}\nAnswer: "  # the training code's own text
        prompt_ids = list(tok(prompt)["input_ids"])
        ids = list(tok(prompt + it.response)["input_ids"]) + [tok.eos_token_id]
        labels = [-100] * len(prompt_ids) + ids[len(prompt_ids) :]
        targets = [t for t in labels if t != -100]
        assert p == prompt_ids  # the prompt the model is fed: the run's own
        assert a == targets  # the scored tokens: the ones the run's loss scored
        assert recorded.loc[it.item_id, "n_tokens"] == len(targets)
        merged += ids[: len(prompt_ids)] != prompt_ids  # " " + "Tom" trained as " Tom"
    assert merged == len(items)  # every answer's first token merged with the space before it
    assert fmt.identity.endswith(";joint")  # not the separately tokenized records of before


# ------------------------------------------------------------------ the final newline (item 9)


def test_a_template_file_s_final_newline_never_changes_the_texts(bos_run, tmp_path, capsys):
    """The newline an editor ends a file with is dropped (the same prompts, the same identity
    as the file without it) and ``tasks show`` says so; one meant (a blank line at the end)
    is kept and shown as ⏎."""
    saved, bare, meant = (tmp_path / n for n in ("saved.jinja", "bare.jinja", "meant.jinja"))
    saved.write_text("Q: {{ prompt }}\nA:\n")
    bare.write_text("Q: {{ prompt }}\nA:")
    meant.write_text("Q: {{ prompt }}\nA:\n\n")
    assert prompt_format(str(saved)).identity == prompt_format(str(bare)).identity
    assert prompt_format(str(saved)).render("x") == "Q: x\nA:"
    assert prompt_format(str(meant)).render("x") == "Q: x\nA:\n"
    show = ["tasks", "show", "gsm8k", "--items", bos_run["validation"], "--prompt-format"]
    code, said = run_cli([*show, saved], capsys)
    assert code == 0, said
    text = said.split("prompt, as the model sees it")[1].split("\nresponse")[0]
    assert "\nA:\n" in text and "A:⏎" not in text and "\nA:\n\n" not in text, text
    assert f"the final newline of {saved}" in text and "dropped" in text
    code, said = run_cli([*show, meant], capsys)
    assert code == 0, said
    assert "\nA:⏎\n" in said and "ends with a newline, shown as ⏎" in said, said


# ------------------------------------------------------------------ tasks show: ids and BOS


def test_tasks_show_prints_the_ids_head_and_the_bos_count(bos_run, capsys):
    """The same first text line, told apart by the ids: one BOS under the template's own
    tokenization, two under --bos template+tokenizer, with the warning when it is unsaid."""
    show = ["tasks", "show", "gsm8k", "--items", bos_run["validation"], "--prompt-format", "chat", "--tokenizer", bos_run["base"]]
    tok = _tok(bos_run)
    code, once = run_cli(show, capsys)
    assert code == 0, once
    assert "BOS: 1 ('<s>'" in once and "special tokens: <s>\n" in once, once
    assert "warning: BOS assumed once" in once
    head = [ln for ln in once.splitlines() if ln.strip().startswith("token ids")]
    assert len(head) == 1 and head[0].split(": ")[1].startswith(f"{tok.bos_token_id} ")
    code, twice = run_cli([*show, "--bos", "template+tokenizer"], capsys)
    assert code == 0, twice
    assert "BOS: 2 ('<s>'" in twice and "special tokens: <s> <s>" in twice, twice
    assert "warning" not in twice
    bos = tok.bos_token_id
    assert f": {bos} {bos} " in next(ln for ln in twice.splitlines() if "token ids" in ln)


def test_a_template_file_s_own_bos_text_is_counted(bos_run, tmp_path, capsys):
    """A literal ``<s>`` in a template file under a tokenizer that adds BOS would give two:
    refused in one line (as ``{{ bos_token }}`` is), unless the run says it had two."""
    path = tmp_path / "bos.jinja"
    path.write_text("<s>Q: {{ prompt }}\nA:")
    show = ["tasks", "show", "gsm8k", "--items", bos_run["validation"], "--prompt-format", path, "--tokenizer", bos_run["base"]]
    code, said = run_cli(show, capsys)
    assert code == 2 and len(_one_line(said)) == 1 and "Traceback" not in said, said
    assert str(path) in said and "'<s>'" in said and "two" in said
    code, said = run_cli([*show, "--bos", "template+tokenizer"], capsys)
    assert code == 0 and "BOS: 2 ('<s>'" in said, said


# ------------------------------------------------------------------ relative base (item 12)


def test_a_relative_base_is_the_run_folder_s(bos_run, tmp_path, capsys, monkeypatch):
    """``base_model_name_or_path`` relative to the run folder is found from any current
    directory; a name that is a model folder both there and here (two models that may differ)
    is refused in one line, never measured with the current directory's."""
    run = tmp_path / "runs" / "bos-s0"
    shutil.copytree(bos_run["run"], run)
    shutil.copytree(bos_run["base"], run / "base-model")
    for ckpt in run.glob("checkpoint-*"):
        cfg = json.loads((ckpt / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = "base-model"
        (ckpt / "adapter_config.json").write_text(json.dumps(cfg))
    (run / "prompt_format.json").write_text(json.dumps({"prompt_format": "chat"}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, said = _measure(bos_run, run, tmp_path / "records", capsys=capsys)
    assert code == 0, said
    shutil.copytree(bos_run["base"], elsewhere / "base-model")  # another model, the same name
    code, said = _measure(bos_run, run, tmp_path / "records2", capsys=capsys)
    assert code == 2 and len(_one_line(said)) == 1 and "Traceback" not in said, said
    assert "adapter_config.json" in said and "both" in said and "--base" in said
    assert not (tmp_path / "records2").exists()


# ------------------------------------------------------------------ hostile values


HOSTILE_BOS = [  # (case, the value of "bos", what the line names besides the file)
    ("unknown", "twice", "'bos'"),
    ("a number", 2, "'bos'"),
    ("a list", ["template"], "'bos'"),
    ("a table", {"bos": "template"}, "'bos'"),
    ("true", True, "'bos'"),
    ("nan", float("nan"), "NaN"),
    ("huge", "template" * 20_000, "'bos'"),
    ("padded", " template ", "'bos'"),
    ("tokenizer for chat", "tokenizer", "'bos'"),
]


@pytest.mark.parametrize(("value", "names"), [(v, n) for _, v, n in HOSTILE_BOS], ids=[c for c, _, _ in HOSTILE_BOS])
def test_a_hostile_bos_in_prompt_format_json_is_one_line(bos_run, tmp_path, capsys, value, names):
    run = _run_copy(bos_run, tmp_path, json.dumps({"prompt_format": "chat", "bos": value}))
    out = tmp_path / "records"
    code, said = _measure(bos_run, run, out, capsys=capsys)
    lines = _one_line(said)
    assert code == 2 and len(lines) == 1 and "Traceback" not in said, said
    assert "prompt_format.json" in said and names in said and len(said) < 600, said
    assert not out.exists()


HOSTILE_SHOW = [
    ("unknown", ["--prompt-format", "chat", "--bos", "both"], "--bos"),
    ("tokenizer for chat", ["--prompt-format", "chat", "--bos", "tokenizer"], "--bos"),
    ("empty", ["--prompt-format", "chat", "--bos", "=template"], "--bos"),
    ("huge", ["--prompt-format", "chat", "--bos", "x" * 100_000], "--bos"),
    ("alpaca has none of its own", ["--bos", "template+tokenizer"], "Alpaca prompt writes no BOS"),
]


@pytest.mark.parametrize(("extra", "names"), [(e, n) for _, e, n in HOSTILE_SHOW], ids=[i for i, _, _ in HOSTILE_SHOW])
def test_a_hostile_bos_on_tasks_show_is_one_line(bos_run, capsys, extra, names):
    code, said = run_cli(["tasks", "show", "gsm8k", "--tokenizer", bos_run["base"], *extra], capsys)
    assert code == 2 and len(_one_line(said)) == 1 and "Traceback" not in said, said
    assert names in said and len(said) < 600, said


def test_a_template_file_s_bos_text_is_refused_before_measuring(bos_run, tmp_path, capsys):
    """measure with a template file writing ``<s>``: one line naming it, nothing written."""
    path = tmp_path / "bos.jinja"
    path.write_text("<s>Question: {{ prompt }}\nAnswer: ")
    out = tmp_path / "records"
    code, said = _measure(bos_run, bos_run["run"], out, "--prompt-format", path, capsys=capsys)
    assert code == 2 and len(_one_line(said)) == 1 and "Traceback" not in said, said
    assert str(path) in said and "two" in said
    assert not out.exists()
