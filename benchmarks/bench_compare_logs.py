"""``ckptsel compare-logs`` on real lm-evaluation-harness ``--log_samples`` output (issue 39 item 5).

Two checkpoints of a tiny local Llama (``tests/tinyrun.py``: BPE vocab 400, hidden 64, 2 layers;
two perturbed full copies of the base) are evaluated by lm-eval 0.4.13's own CLI (``lm_eval
--model hf --log_samples``, CPU, offline) on two local multiple-choice tasks built from the first
GSM8K test questions (the answer and three distractors; lm-eval's per-sample ``acc``). Then:

* ``ckptsel compare-logs A B --json``: one comparison per task, Holm across the two;
* ``ckptsel compare-logs A B --task pooled --split validation --json`` against ``ckptsel ingest
  lm-eval A B --task pooled --split validation`` + ``ckptsel compare RECORDS --trajectory T 0 1 --json``: the
  difference, interval, 2×2 table and McNemar p must be identical (the script fails otherwise).

Usage (lm-eval in its own virtualenv, see benchmarks/bench_lmeval.py)::

    python benchmarks/bench_compare_logs.py --lm-eval-python /work/lmeval-venv/bin/python \
        [--items 160] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from _common import machine, update_section  # noqa: E402

GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
TASKS = ("cmp_mc_a", "cmp_mc_b")
SAME = ("items", "clusters", "accuracy_a", "accuracy_b", "difference", "table", "mcnemar_p")


def write_tasks(task_dir: Path, n_items: int) -> None:
    """Two local multiple-choice tasks over the first ``n_items`` GSM8K questions (half each)."""
    rows = [json.loads(x) for x in GSM8K.read_text(encoding="utf-8").splitlines()[:n_items]]
    task_dir.mkdir(parents=True)
    half = n_items // 2
    for k, task in enumerate(TASKS):
        docs = []
        for i, r in enumerate(rows[k * half : (k + 1) * half]):
            answer = int(r["answer"].split("####")[-1].strip().replace(",", ""))
            choices = [answer, answer + 1, 2 * answer + 3, abs(answer - 7)]
            rot = i % 4  # the answer's position varies
            choices = choices[rot:] + choices[:rot]
            docs.append({"question": r["question"], "choices": [str(c) for c in choices], "label": (4 - rot) % 4})
        data = task_dir / f"{task}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        (task_dir / f"{task}.yaml").write_text(
            f"task: {task}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
            "test_split: test\noutput_type: multiple_choice\n"
            'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_choice: choices\n'
            "doc_to_target: label\nmetric_list:\n  - metric: acc\n",
            encoding="utf-8",
        )


def run(cmd: list, env: dict) -> str:
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stderr[-4000:]}")
    return proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lm-eval-python", type=Path, default=Path("/work/lmeval-venv/bin/python"))
    ap.add_argument("--items", type=int, default=160, help="questions (half per task)")
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = ap.parse_args()
    lm_eval_cli = args.lm_eval_python.parent / "lm_eval"
    if not lm_eval_cli.exists():
        sys.exit(f"{lm_eval_cli}: no lm-eval virtualenv there (see bench_lmeval.py)")
    from tinyrun import build_tiny_base, save_full_checkpoints

    with tempfile.TemporaryDirectory(prefix="bench_compare_logs_") as tmp:
        tmp = Path(tmp)
        write_tasks(tmp / "tasks", args.items)
        texts = [json.loads(x)["question"] for x in GSM8K.read_text().splitlines()[: args.items]]
        base = build_tiny_base(tmp / "base", texts)
        ckpts = save_full_checkpoints(base, tmp / "runs" / "tiny", [0, 1], scale=0.05)
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_DATASETS_CACHE=str(tmp / "hf-datasets"),
            TOKENIZERS_PARALLELISM="false",
            OMP_NUM_THREADS="1",
        )
        logs, lm_seconds = [], []
        for ckpt in ckpts:
            out = tmp / "lmeval" / ckpt.name  # checkpoint-0, checkpoint-1
            t0 = time.perf_counter()
            run(
                [
                    lm_eval_cli,
                    "--model",
                    "hf",
                    "--model_args",
                    f"pretrained={ckpt},dtype=float32",
                    "--tasks",
                    ",".join(TASKS),
                    "--include_path",
                    tmp / "tasks",
                    "--batch_size",
                    16,
                    "--device",
                    "cpu",
                    "--output_path",
                    out,
                    "--log_samples",
                ],
                env,
            )
            lm_seconds.append(time.perf_counter() - t0)
            logs.append(out)
        ck = [sys.executable, "-m", "ckptsel"]
        ck_env = dict(env, PYTHONPATH=str(REPO / "src"))
        t0 = time.perf_counter()
        per_task = json.loads(run([*ck, "compare-logs", *logs, "--json"], ck_env))
        compare_logs_seconds = time.perf_counter() - t0
        pooled = json.loads(run([*ck, "compare-logs", *logs, "--task", "pooled", "--split", "validation", "--json"], ck_env))
        records = tmp / "records"
        run([*ck, "ingest", "lm-eval", *logs, "--out", records, "--trajectory", "T", "--task", "pooled", "--split", "validation"], ck_env)
        ingested = json.loads(run([*ck, "compare", records, "0", "1", "--trajectory", "T", "--json"], ck_env))["splits"]["validation"]
    [c] = pooled["comparisons"]
    same = {k: c[k] for k in SAME} == {k: ingested[k] for k in SAME}
    rows = [
        "| task | items | acc A % | acc B % | A − B pp [95%] | only A / only B | McNemar p | Holm p | items needed (exact power) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in [*per_task["comparisons"], {**c, "task": "pooled (--task pooled)"}]:
        d = r["difference"]
        rows.append(
            f"| {r['task']} | {r['items']} | {r['accuracy_a']:.1f} | {r['accuracy_b']:.1f} | "
            f"{d['mean']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}] | {r['table']['only_a']} / "
            f"{r['table']['only_b']} | {r['mcnemar_p']:.4g} | {r['mcnemar_p_adjusted']:.4g} | "
            f"{needed(r)} |"
        )
    body = "\n".join(
        [
            "## compare-logs on real lm-eval logs (`benchmarks/bench_compare_logs.py`)",
            "",
            f"Machine: {machine()}. lm-eval 0.4.13's CLI (`lm_eval --model hf --log_samples`, CPU) on "
            f"two perturbed copies of a tiny local Llama, two local multiple-choice tasks of "
            f"{args.items // 2} GSM8K questions each (lm-eval's `acc`); lm_eval took "
            f"{lm_seconds[0]:.0f} s and {lm_seconds[1]:.0f} s, `ckptsel compare-logs` "
            f"{compare_logs_seconds:.1f} s (a fresh process, 10000 draws).",
            "",
            *rows,
            "",
            "`compare-logs --task pooled --split validation` against `ingest lm-eval --task pooled --split validation`"
            " + `compare RECORDS --trajectory T 0 1`: difference, interval, 2×2 table and McNemar p "
            + ("**identical**." if same else "**DIFFERENT** (a bug)."),
        ]
    )
    print(body)
    if not args.no_write:
        update_section("compare-logs", body)
    if not same:
        sys.exit("compare-logs and compare on ingested records differ")


def needed(r: dict) -> str:
    """The items-needed cell: the number with the exact McNemar power there, else the note."""
    if r["items_needed"] is None:
        return r.get("items_needed_note") or "–"
    return f"{r['items_needed']} ({r['items_needed_power']:.3f})"


if __name__ == "__main__":
    main()
