"""ckptsel ``measure`` side by side with lm-evaluation-harness 0.4.13 (issue 13, "Done when" 3).

The sweep: a tiny local Llama (``tests/tinyrun.py``: BPE vocab 400, hidden 64, 2 layers) with 6
LoRA checkpoints (rank 4), 100 GSM8K items (the first 50 + next 50 questions of
``../shared/data/gsm8k/test.jsonl`` as validation + test), greedy decoding, the same Alpaca prompt
(``ckptsel.data.format_prompt``), the same ``max_new_tokens`` and batch size, stop at EOS only,
fp32 on the CPU with torch's default threads (2 on the bench machine). Three sides, each timed
from outside as a fresh process (wall time including imports), repeats interleaved:

(a) ``ckptsel measure`` (generation AND response NLL, records written), as a user runs it;
(b) lm-eval in ONE process with adapter swapping (generation only): ``HFLM`` loaded once with the
    first adapter, each further adapter loaded with ``load_adapter``/``set_adapter``, a local
    ``generate_until`` task (a YAML pointing at a local jsonl) evaluated per checkpoint;
(c) lm-eval as users run it: one ``lm_eval --model hf --model_args pretrained=...,peft=...``
    process per checkpoint (generation only).

It reports wall-time medians, ratios, how many generated texts agree between ckptsel and lm-eval
(b), and where ckptsel's time goes (imports, generation, NLL, the rest = model/adapter loads and
records writes) from one extra in-process-timed run.

lm-eval lives in its own virtualenv so the project's stays clean (no network to the HF hub is
needed: everything is local files; HF_HUB_OFFLINE / HF_DATASETS_OFFLINE are set)::

    python3.11 -m venv /work/lmeval-venv
    /work/lmeval-venv/bin/pip install torch==2.13.0
    /work/lmeval-venv/bin/pip install lm-eval==0.4.13 transformers==5.23.0 peft==0.21.2

    python benchmarks/bench_lmeval.py --lm-eval-python /work/lmeval-venv/bin/python \
        [--repeats 2] [--skip-per-process] [--no-write]

(use the transformers/peft versions of the project's environment.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from ckptsel.records.scan import read_frame  # noqa: E402

from _common import machine, timed, update_section  # noqa: E402

GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
STEPS = (10, 20, 30, 40, 50, 60)
TASK = "ckptsel_bench_gsm8k"

# (b): lm-eval in one process, adapters swapped; argv: base, task dir, out json, ckpt dirs...
ONE_PROCESS = r"""
import json, sys, time
t0 = time.perf_counter()
from lm_eval.evaluator import evaluate
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager, get_task_dict
base, task_dir, out, ckpts, bs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5:], sys.argv[4]
t_import = time.perf_counter() - t0
lm = HFLM(pretrained=base, peft=ckpts[0], dtype="float32", device="cpu", batch_size=int(bs))
tasks = get_task_dict([TASK], TaskManager(include_path=task_dir))
texts = {}
for k, ckpt in enumerate(ckpts):
    if k:
        lm.model.load_adapter(ckpt, adapter_name=f"a{k}")
        lm.model.set_adapter(f"a{k}")
        lm.model.delete_adapter(f"a{k - 1}" if k > 1 else "default")
    res = evaluate(lm=lm, task_dict=tasks, log_samples=True, bootstrap_iters=0, verbosity="ERROR")
    texts[ckpt] = {s["doc"]["key"]: s["resps"][0][0] for s in res["samples"][TASK]}
json.dump({"texts": texts, "imports": t_import}, open(out, "w"))
""".replace("TASK", repr(TASK))

# (a) breakdown: where ckptsel's time goes; argv: run_dir, val, test, out, batch, max_new
BREAKDOWN = r"""
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
import torch, transformers, peft  # noqa: F401
from ckptsel.measure import MeasureConfig, measure_run
t_import = time.perf_counter() - t0
run_dir, val, test, out, bs, mnt = sys.argv[1:7]
cfg = MeasureConfig("gsm8k", batch_size=int(bs), max_new_tokens=int(mnt))
r = measure_run(Path(run_dir), cfg, validation=Path(val), test=Path(test), out=Path(out))
print(json.dumps({"imports": t_import, "generation": r.generation_seconds, "nll": r.nll_seconds,
                  "measure_run": r.seconds, "model_loads": r.model_loads}))
"""


def setup(root: Path, n_items: int) -> dict:
    """Tiny base + 6 LoRA checkpoints; validation/test jsonl for ckptsel; the lm-eval task."""
    from ckptsel.data.prompts import format_prompt

    from tinyrun import TEMPLATE_HINT, build_tiny_base, save_lora_checkpoints, write_jsonl

    rows = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()[:n_items]]
    half = n_items // 2
    splits = {"validation": rows[:half], "test": rows[half:]}
    files = {}
    for split, rs in splits.items():
        items = [dict(r, item_id=f"{split}-{i}") for i, r in enumerate(rs)]
        files[split] = write_jsonl(root / "data" / f"{split}.jsonl", items)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in rows]
    base = build_tiny_base(root / "base", texts)
    run_dir = root / "runs" / "run-a"
    ckpts = save_lora_checkpoints(base, run_dir, list(STEPS))
    docs = [
        {"key": f"{split}/{split}-{i}", "prompt": format_prompt(r["question"]), "answer": r["answer"]}
        for split, rs in splits.items()
        for i, r in enumerate(rs)
    ]
    write_jsonl(root / "lmeval" / "items.jsonl", docs)
    return {"base": base, "run_dir": run_dir, "ckpts": ckpts, "files": files, "task_dir": root / "lmeval"}


def write_task(task_dir: Path, max_new_tokens: int) -> None:
    """A local generate_until task: the prompt as is, greedy, stop at EOS only."""
    (task_dir / f"{TASK}.yaml").write_text(
        f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {task_dir / "items.jsonl"}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: []
  do_sample: false
  max_gen_toks: {max_new_tokens}
metric_list:
  - metric: exact_match
""",
        encoding="utf-8",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--lm-eval-python",
        type=Path,
        default=Path("/work/lmeval-venv/bin/python"),
        help="python of a virtualenv with lm-eval 0.4.13 (see the docstring)",
    )
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats of each side")
    ap.add_argument("--items", type=int, default=100, help="items (half validation, half test)")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for every side (0: torch's default, one per core)")
    ap.add_argument("--skip-per-process", action="store_true", help="skip side (c)")
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = ap.parse_args()
    lm_python = args.lm_eval_python
    lm_eval_cli = lm_python.parent / "lm_eval"
    ckptsel_cli = Path(sys.executable).parent / "ckptsel"
    if not lm_python.exists() or not lm_eval_cli.exists():
        sys.exit(f"{lm_python}: no lm-eval virtualenv there (see this script's docstring)")
    if not GSM8K.exists():
        sys.exit(f"{GSM8K}: GSM8K items not found")
    load_start = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="bench_lmeval_") as tmp:
        tmp = Path(tmp)
        s = setup(tmp, args.items)
        write_task(s["task_dir"], args.max_new_tokens)
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO / "src"),
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_DATASETS_CACHE=str(tmp / "hf-datasets"),
            TOKENIZERS_PARALLELISM="false",
        )
        if args.threads:
            env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        lm_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        ckpts = [str(c) for c in s["ckpts"]]
        common = ["--batch-size", str(args.batch_size), "--max-new-tokens", str(args.max_new_tokens)]
        times: dict[str, list[float]] = {"a": [], "g": [], "b": [], "c": []}
        for r in range(args.repeats):
            rec = tmp / f"records-{r}"
            measure = [
                str(ckptsel_cli),
                "measure",
                str(s["run_dir"]),
                "--task",
                "gsm8k",
                "--validation",
                str(s["files"]["validation"]),
                "--test",
                str(s["files"]["test"]),
                "--no-progress",
                *common,
            ]
            times["a"].append(timed([*measure, "--out", str(rec)], env))
            times["g"].append(timed([*measure, "--out", str(tmp / f"records-gen-{r}"), "--only", "generation"], env))
            times["b"].append(
                timed(
                    [
                        str(lm_python),
                        "-c",
                        ONE_PROCESS,
                        str(s["base"]),
                        str(s["task_dir"]),
                        str(tmp / f"lmeval-{r}.json"),
                        str(args.batch_size),
                        *ckpts,
                    ],
                    lm_env,
                )
            )
            if not args.skip_per_process:
                t = 0.0
                for ckpt in ckpts:
                    t += timed(
                        [
                            str(lm_eval_cli),
                            "--model",
                            "hf",
                            "--model_args",
                            f"pretrained={s['base']},peft={ckpt},dtype=float32",
                            "--tasks",
                            TASK,
                            "--include_path",
                            str(s["task_dir"]),
                            "--batch_size",
                            str(args.batch_size),
                            "--device",
                            "cpu",
                            "--output_path",
                            str(tmp / f"lmeval-cli-{r}"),
                            "--log_samples",
                        ],
                        lm_env,
                    )
                times["c"].append(t)
            done = ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items() if v)
            print(f"repeat {r + 1}: {done}", flush=True)

        # agreement of generated texts: ckptsel (records) vs lm-eval one process

        gen = read_frame(tmp / "records-0", "generations")
        lm = json.loads((tmp / "lmeval-0.json").read_text())
        step_of = {c: int(Path(c).name.split("-")[1]) for c in ckpts}
        ours = {(int(st), f"{sp}/{it}"): tx for st, sp, it, tx in zip(gen["step"], gen["split"], gen["item_id"], gen["text"], strict=True)}
        pairs = [(ours.get((step_of[c], key)), tx) for c, m in lm["texts"].items() for key, tx in m.items()]
        n_pairs = len(pairs)
        exact = sum(a == b for a, b in pairs)
        stripped = sum(a is not None and a.strip() == b.strip() for a, b in pairs)
        empty = sum(not (a or "").strip() for a, _ in pairs)

        breakdown = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    BREAKDOWN,
                    str(s["run_dir"]),
                    str(s["files"]["validation"]),
                    str(s["files"]["test"]),
                    str(tmp / "records-breakdown"),
                    str(args.batch_size),
                    str(args.max_new_tokens),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
    load_end = os.getloadavg()

    med = {k: statistics.median(v) for k, v in times.items() if v}
    fmt = {k: ", ".join(f"{x:.1f}" for x in v) for k, v in times.items() if v}
    rows = [
        f"| (a) `ckptsel measure`: generation + NLL, records written | {med['a']:.1f} s | {fmt['a']} | 1.00× |",
        f"| (a') `ckptsel measure --only generation` (like for like with lm-eval) "
        f"| {med['g']:.1f} s | {fmt['g']} | ({med['b'] / med['g']:.2f}× for (b)) |",
        f"| (b) lm-eval, one process, adapters swapped: generation only | {med['b']:.1f} s | {fmt['b']} | **{med['b'] / med['a']:.2f}×** |",
    ]
    if "c" in med:
        rows.append(
            f"| (c) lm-eval as users run it: one `lm_eval` process per checkpoint, "
            f"generation only | {med['c']:.1f} s | {fmt['c']} "
            f"| {med['c'] / med['a']:.2f}× |"
        )
    b = breakdown
    rest = b["measure_run"] - b["generation"] - b["nll"]
    threads = args.threads or "default (one per core)"
    target = "met" if med["b"] / med["a"] >= 2 else "NOT met"
    body = f"""## ckptsel vs lm-evaluation-harness (`benchmarks/bench_lmeval.py`)

{machine()}; torch threads: {threads}; 1-min load average {load_start[0]:.1f} at the start
and {load_end[0]:.1f} at the end (the machine is shared with
other jobs, so absolute times are noisy).
lm-eval 0.4.13 in its own virtualenv (same torch/transformers/peft as ckptsel). The sweep: tiny
Llama (hidden 64, 2 layers, BPE vocab 400) with {len(STEPS)} LoRA checkpoints (rank 4) ×
{args.items} GSM8K items ({args.items // 2} validation + {args.items // 2} test, real questions),
the same Alpaca prompt, greedy, max {args.max_new_tokens} new tokens, stop at EOS only, batch
{args.batch_size}, fp32 CPU. Each side is a fresh process timed from outside (wall time including
imports); {args.repeats} repeats, interleaved (a, a', b, c, a, a', b, c, ...); median reported.

| side | median wall time | repeats (s) | lm-eval / ckptsel |
|---|---:|---|---:|
{chr(10).join(rows)}

ckptsel does strictly more work than (b) and (c) (it also scores the response NLL of every item at
every checkpoint, two windows, and writes the records). Issue target (ckptsel ≥ 2× faster than
(b)): **{target}** ({med["b"] / med["a"]:.2f}×; with per-call upserts: 1.46×; with records units
but separate NLL and generation passes: 1.40×). Like for like (generation only, (a') vs (b)):
{med["b"] / med["g"]:.2f}×.

Generated texts, ckptsel vs lm-eval (b), same checkpoint and item: {exact}/{n_pairs} identical
({stripped}/{n_pairs} after stripping surrounding whitespace; {empty} of ckptsel's are empty).

Where ckptsel's time goes (one extra run, timed inside the process): imports (torch,
transformers, peft, ckptsel.measure) {b["imports"]:.1f} s; `measure_run` {b["measure_run"]:.1f} s
= NLL {b["nll"]:.1f} s (the one forward over prompt + response that both measurements share:
`ckptsel.measure.passes`) + generation {b["generation"]:.1f} s (greedy decoding from that
forward's cache) + the rest {rest:.1f} s (item and checkpoint checks, {b["model_loads"]}
base-model load, each adapter merged into a copy of the base (float32 CPU), records units written
once per checkpoint). The remaining wall time of (a) is interpreter start-up, the CLI and exit.
What made the difference: the prompt goes through the model once per item instead of twice (NLL's
full forward and `generate`'s prefill), the validation and test items in one pass (fuller batches), float32
adapters merged on the CPU (LoRA's extra matmuls were a quarter of the forward), and an exit that
skips the interpreter's final garbage collection over torch's objects (about a second).
"""
    print(body)
    if not args.no_write:
        update_section("bench_lmeval", body)


if __name__ == "__main__":
    main()
