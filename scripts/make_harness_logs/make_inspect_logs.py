"""Real inspect_ai logs of the tiny checkpoints (offline, CPU), for ``tests/data/harness_logs``.

    python scripts/make_harness_logs/make_inspect_logs.py WORK OUT

(with inspect-ai, torch and transformers installed). Builds the checkpoints under
``WORK/runs/<trajectory>/`` (see ``tiny.py``) when missing, evaluates each one with inspect's
``hf`` provider (greedy, 12 new tokens, log-probs of the generated tokens) and writes one log per
checkpoint to ``OUT/inspect/``:

* ``tiny-a``: ``.eval`` logs whose eval metadata carry the trajectory and the step;
* ``tiny-b``: ``.eval`` logs without metadata (the step is in the model path), and its last
  checkpoint also as a ``.json`` log (the other log format, same samples).

The task has two scorers (``match`` and a last-number scorer), as many real tasks do. CLI
equivalent for one checkpoint:

    inspect eval scripts/make_harness_logs/make_inspect_logs.py@tiny_gsm --model hf/<ckpt> \
        -M device=cpu -M do_sample=false --max-tokens 12 --logprobs --seed 0 \
        --metadata step=80 --metadata trajectory=tiny-a --log-dir OUT/inspect
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("INSPECT_LOG_LEVEL", "warning")
sys.path.insert(0, str(Path(__file__).parent))

import tiny  # noqa: E402
from inspect_ai import Task, eval, task  # noqa: E402
from inspect_ai.dataset import MemoryDataset, Sample  # noqa: E402
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, match, scorer, stderr  # noqa: E402
from inspect_ai.solver import TaskState, generate  # noqa: E402


@scorer(metrics=[accuracy(), stderr()])
def last_number():
    """GSM8K-style: the last number in the completion is the answer."""

    async def score(state: TaskState, target: Target) -> Score:
        text = state.output.completion
        nums = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
        ans = nums[-1] if nums else ""
        return Score(value=CORRECT if ans == target.text else INCORRECT, answer=ans)

    return score


@task
def tiny_gsm() -> Task:
    samples = [Sample(input=q, target=a, id=i, metadata={"split": s, "group": g}) for i, q, a, s, g in tiny.ITEMS]
    return Task(
        dataset=MemoryDataset(samples, name="tiny_gsm"), solver=generate(), scorer=[match(numeric=True), last_number()], name="tiny_gsm"
    )


def main(work: Path, out: Path) -> None:
    log_dir = out / "inspect"
    for trajectory in tiny.TRAJECTORIES:
        ckpts = tiny.checkpoints(work, trajectory)
        for k, ckpt in enumerate(ckpts):
            step = int(ckpt.name.split("-")[1])
            tagged = trajectory == "tiny-a"
            formats = ["eval", "json"] if not tagged and k == len(ckpts) - 1 else ["eval"]
            for fmt in formats:
                t = time.time()
                [log] = eval(
                    tiny_gsm(),
                    model=f"hf/{ckpt}",
                    model_args={"device": "cpu", "do_sample": False},  # do_sample defaults to True
                    max_tokens=12,
                    logprobs=True,
                    seed=0,
                    metadata={"trajectory": trajectory, "step": step} if tagged else None,
                    log_dir=str(log_dir),
                    log_format=fmt,
                    display="none",
                )
                acc = log.results.scores[0].metrics["accuracy"].value
                print(
                    f"{trajectory}/{ckpt.name} [{fmt}] {log.status} accuracy={acc:.2f} {time.time() - t:.1f}s -> {Path(log.location).name}"
                )
    for p in sorted(log_dir.iterdir()):
        print(f"{p.stat().st_size:>8} B  {p.name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
