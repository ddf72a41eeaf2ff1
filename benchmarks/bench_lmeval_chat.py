"""ckptsel ``measure --prompt-format chat`` against lm-evaluation-harness 0.4.13 with
``--apply_chat_template`` on the same checkpoints (issue 36, "Checked against an independent
harness").

The run: a tiny local Llama (``tests/tinyrun.py``: BPE vocab 400, hidden 64, 2 layers) whose
tokenizer carries a "User: … / Assistant: …" chat template, fine-tuned with trl's
``SFTTrainer`` on conversational prompt-completion data (the first 64 questions of
``../shared/data/gsm8k/train.jsonl``, LoRA r=4, checkpoints at steps 4, 8, 12). Validation: the
first ``--items`` questions of ``../shared/data/gsm8k/test.jsonl``.

Two sides, greedy, the same ``max_new_tokens``, float32 on the CPU:

(a) ``ckptsel measure RUN --prompt-format chat`` (the command line, as a user runs it);
(b) ``lm_eval --model hf --model_args pretrained=BASE,peft=CKPT --apply_chat_template
    --log_samples`` per checkpoint, with a local ``generate_until`` task whose ``doc_to_text`` is
    the bare question (the chat template wraps it), ``until: []`` (stop at the end of turn only).

Compared per checkpoint and item: the generated texts; the answers (ckptsel's GSM8K rule,
``ckptsel.data.extract``, on each side's text); correctness (``ckptsel.data.is_correct``); and
lm-eval's own ``exact_match`` after a ``regex`` filter on ``The answer is: N`` against
ckptsel's correctness. For contrast it also measures the same checkpoints under the Alpaca
prompt (``--prompt-format alpaca``), which this run was not trained on.

lm-eval lives in its own virtualenv (see ``bench_lmeval.py``)::

    python3.11 -m venv /work/lmeval-venv
    /work/lmeval-venv/bin/pip install torch==2.13.0
    /work/lmeval-venv/bin/pip install lm-eval==0.4.13 transformers==5.24.0 peft==0.21.2

    python benchmarks/bench_lmeval_chat.py [--lm-eval-python /work/lmeval-venv/bin/python]
        [--items 60] [--max-new-tokens 48] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from _common import machine, timed, update_section  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "gsm8k"
TASK = "ckptsel_chat_gsm8k"
STEPS = (4, 8, 12)


def train_chat_run(root: Path, n_train: int) -> tuple[Path, Path]:
    """The tiny base (with its chat template) and trl's run folder."""
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from ckptsel.data.tasks import load_items

    from tinyrun import CHAT_TEMPLATE, build_tiny_base

    rows = [json.loads(x) for x in (DATA / "train.jsonl").read_text().splitlines()[:n_train]]
    train_file = root / "train.jsonl"
    train_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items("gsm8k", train_file)
    texts = [f"User: {it.instruction}\nAssistant: {it.response}</s>\n" for it in items]
    base = build_tiny_base(root / "base", texts, seed=0)
    tok = AutoTokenizer.from_pretrained(str(base))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(base))
    data = [
        {"prompt": [{"role": "user", "content": it.instruction}], "completion": [{"role": "assistant", "content": it.response}]}
        for it in items
    ]
    out = root / "runs" / "chat-s0"
    args = trl.SFTConfig(
        output_dir=str(out),
        max_steps=max(STEPS),
        save_strategy="steps",
        save_steps=STEPS[0],
        per_device_train_batch_size=8,
        learning_rate=2e-2,
        lr_scheduler_type="constant",
        report_to="none",
        use_cpu=True,
        logging_strategy="no",
        disable_tqdm=True,
        save_only_model=True,
        seed=0,
    )
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear")
    trl.SFTTrainer(model=str(base), args=args, train_dataset=Dataset.from_list(data), processing_class=tok, peft_config=lora).train()
    return base, out


def write_task(task_dir: Path, items_file: Path, max_new_tokens: int) -> None:
    """A local generate_until task over the bare question: the chat template wraps it."""
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / f"{TASK}.yaml").write_text(
        f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items_file}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
generation_kwargs:
  until: []
  do_sample: false
  max_gen_toks: {max_new_tokens}
filter_list:
  - name: strict
    filter:
      - function: regex
        regex_pattern: "The answer is: (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
metric_list:
  - metric: exact_match
""",
        encoding="utf-8",
    )


def lm_eval_samples(out_dir: Path) -> list[dict]:
    (path,) = sorted(out_dir.rglob(f"samples_{TASK}_*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def compare(gen, samples: list[dict], ids: list[str], step: int) -> dict[str, int]:
    """Agreement counts at one checkpoint (items in file order: lm-eval's doc_id)."""
    from ckptsel.data.scoring import extract, is_correct

    mine = gen[(gen["step"] == step) & (gen["split"] == "validation")].set_index("item_id")
    counts = dict.fromkeys(("items", "texts", "answers", "correct", "lm_em", "ckptsel_right"), 0)
    for s in samples:
        item = ids[int(s["doc_id"])]
        text = s["resps"][0][0]
        ours = mine.loc[item]
        ref = s["target"]
        counts["items"] += 1
        counts["texts"] += ours["text"] == text
        counts["answers"] += str(ours["answer"]) == str(extract("gsm8k", text))
        counts["correct"] += bool(ours["correct"]) == bool(is_correct("gsm8k", text, ref))
        counts["lm_em"] += bool(ours["correct"]) == bool(s["exact_match"])
        counts["ckptsel_right"] += bool(ours["correct"])
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lm-eval-python", type=Path, default=Path("/work/lmeval-venv/bin/python"))
    ap.add_argument("--items", type=int, default=60)
    ap.add_argument("--train", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    lm_eval_cli = args.lm_eval_python.parent / "lm_eval"
    if not lm_eval_cli.exists():
        sys.exit(f"{lm_eval_cli}: no lm-eval virtualenv there (see this script's docstring)")
    from ckptsel.records.scan import read_frame

    with tempfile.TemporaryDirectory(prefix="bench_lmeval_chat_") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        base, run_dir = train_chat_run(root, args.train)
        train_s = time.perf_counter() - t0
        rows = [json.loads(x) for x in (DATA / "test.jsonl").read_text().splitlines()]
        val = root / "validation.jsonl"
        val.write_text("".join(json.dumps(r) + "\n" for r in rows[: args.items]))
        test = root / "test.jsonl"
        test.write_text("".join(json.dumps(r) + "\n" for r in rows[args.items : args.items + 4]))
        ids = [f"gsm8k-{i}" for i in range(args.items)]
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO / "src"),
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_DATASETS_CACHE=str(root / "hf-datasets"),
            TOKENIZERS_PARALLELISM="false",
        )
        lm_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        ckptsel = Path(sys.executable).parent / "ckptsel"
        common = [
            str(ckptsel),
            "measure",
            str(run_dir),
            "--task",
            "gsm8k",
            "--validation",
            str(val),
            "--test",
            str(test),
            "--no-progress",
            "--batch-size",
            "16",
            "--max-new-tokens",
            str(args.max_new_tokens),
        ]
        t_chat = timed([*common, "--out", str(root / "rec-chat"), "--prompt-format", "chat"], env)
        t_alpaca = timed([*common, "--out", str(root / "rec-alpaca"), "--prompt-format", "alpaca"], env)
        write_task(root / "lmeval", val, args.max_new_tokens)
        chat = read_frame(root / "rec-chat", "generations")
        alpaca = read_frame(root / "rec-alpaca", "generations")
        per_step, t_lm = {}, 0.0
        for step in STEPS:
            out = root / f"lm-{step}"
            t_lm += timed(
                [
                    str(lm_eval_cli),
                    "--model",
                    "hf",
                    "--model_args",
                    f"pretrained={base},peft={run_dir / f'checkpoint-{step}'},dtype=float32",
                    "--tasks",
                    TASK,
                    "--include_path",
                    str(root / "lmeval"),
                    "--apply_chat_template",
                    "--batch_size",
                    "16",
                    "--device",
                    "cpu",
                    "--output_path",
                    str(out),
                    "--log_samples",
                ],
                lm_env,
            )
            per_step[step] = compare(chat, lm_eval_samples(out), ids, step)
            per_step[step]["alpaca_right"] = int(alpaca[(alpaca["step"] == step) & (alpaca["split"] == "validation")]["correct"].sum())
            print(step, per_step[step], flush=True)
    total = {k: sum(c[k] for c in per_step.values()) for k in next(iter(per_step.values()))}
    rows_md = "\n".join(
        f"| {s} | {c['items']} | {c['texts']}/{c['items']} | {c['answers']}/{c['items']} "
        f"| {c['correct']}/{c['items']} | {c['lm_em']}/{c['items']} "
        f"| {100 * c['ckptsel_right'] / c['items']:.1f}% | {100 * c['alpaca_right'] / c['items']:.1f}% |"
        for s, c in per_step.items()
    )
    body = f"""## ckptsel `--prompt-format chat` vs lm-eval `--apply_chat_template` (`benchmarks/bench_lmeval_chat.py`)

{machine()}. A tiny Llama (BPE vocab 400, hidden 64, 2 layers) whose tokenizer has a "User: … /
Assistant: …" chat template, fine-tuned by trl's `SFTTrainer` on conversational prompt-completion
data (the first {args.train} GSM8K train questions, LoRA r=4 on all linear layers, checkpoints at
steps {", ".join(map(str, STEPS))}; {train_s:.0f} s). Validation: the first {args.items} GSM8K test
questions; greedy, {args.max_new_tokens} new tokens, float32, CPU. (a) `ckptsel measure RUN
--prompt-format chat` ({t_chat:.1f} s for generation + NLL of all checkpoints); (b) `lm_eval --model hf
--model_args pretrained=BASE,peft=CKPT --apply_chat_template --log_samples` per checkpoint with a
local task over the bare question, `until: []` ({t_lm:.1f} s). Answers: ckptsel's GSM8K rule on
each side's text; "lm-eval exact_match" is lm-eval's own metric after a `regex` filter on `The
answer is: N`, against ckptsel's correctness. The last column measures the same checkpoints
under the Alpaca prompt, which this run was not trained on ({t_alpaca:.1f} s).

| step | items | texts identical | answers equal | correctness equal | lm-eval exact_match = ckptsel correct | ckptsel accuracy (chat) | under the Alpaca prompt |
|---|---|---|---|---|---|---|---|
{rows_md}
| all | {total["items"]} | {total["texts"]}/{total["items"]} | {total["answers"]}/{total["items"]} | {total["correct"]}/{total["items"]} | {total["lm_em"]}/{total["items"]} | | |

The tiny tokenizer adds no BOS of its own, so this run does not exercise a template that writes
BOS; ckptsel tokenizes a rendered chat prompt without adding special tokens, as
`apply_chat_template(tokenize=True)` does (`tests/measure/test_prompt_formats.py`).
"""
    print(body)
    if not args.no_write:
        update_section("lmeval-chat", body)


if __name__ == "__main__":
    main()
