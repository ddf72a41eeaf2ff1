"""Real lighteval details of the tiny checkpoints (offline, CPU), for ``tests/data/harness_logs``.

    python scripts/make_harness_logs/make_lighteval_details.py WORK OUT

Run it with a Python that has lighteval 0.13 (its own environment: lighteval pins
``latex2sympy2_extended==1.0.6``, which ckptsel's ``math-verify>=0.7`` cannot share; lighteval
0.13 also needs ``xxhash<4``). Reuses the checkpoints ``make_inspect_logs.py`` built under
``WORK/runs/`` (builds them when missing) and runs ``lighteval accelerate`` once per checkpoint
with ``--save-details`` on ``tiny_gsm_task.py``, writing ``OUT/lighteval/details/runs/<trajectory>/
checkpoint-<step>/<timestamp>/details_<task>|0_<timestamp>.parquet``.

Offline in 0.13.0, lighteval's built-in task registry must be switched off (two built-in task
modules reach the network at import time), so the CLI is started through ``python -c`` with the
registry's loaders replaced by no-ops: only the custom tasks load. The model name is RELATIVE to
``WORK`` (``runs/<trajectory>/checkpoint-<step>``): lighteval's sample cache lives at
``cache_dir/<model_name>/<config hash>`` (an absolute name would put it inside the checkpoint),
and the details path then names the trajectory and the step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import tiny  # noqa: E402

LAUNCHER = (
    "import sys; from lighteval.tasks.registry import Registry; "
    "Registry._load_from_files = staticmethod(lambda files, prefix: {}); "
    "Registry._load_from_subdirs = staticmethod(lambda subdirs: {}); "
    "from lighteval.__main__ import app; sys.argv[0] = 'lighteval'; app()"
)


def main(work: Path, out: Path) -> None:
    data = work / "tiny_gsm_data"
    data.mkdir(parents=True, exist_ok=True)
    for split in ("validation", "test"):
        with open(data / f"{split}.jsonl", "w") as f:
            for i, q, a, s, g in tiny.ITEMS:
                if s == split:
                    f.write(json.dumps({"id": i, "question": q, "answer": a, "split": s, "group": g}) + "\n")
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(work / "hf_home"),
        TOKENIZERS_PARALLELISM="false",
        TINY_GSM_DIR=str(data),
    )
    results = work / "lighteval_results"
    shutil.rmtree(results, ignore_errors=True)
    for trajectory in tiny.TRAJECTORIES:
        for ckpt in tiny.checkpoints(work, trajectory):
            rel = ckpt.relative_to(work)  # runs/<trajectory>/checkpoint-<step>
            model_args = (
                f"model_name={rel},device=cpu,batch_size=4,dtype=float32,cache_dir={work / 'cache'},"
                "generation_parameters={max_new_tokens:12,temperature:0.0}"
            )
            cmd = [
                sys.executable,
                "-c",
                LAUNCHER,
                "accelerate",
                model_args,
                "tiny_gsm_validation|0,tiny_gsm_test|0",
                "--custom-tasks",
                str(HERE / "tiny_gsm_task.py"),
                "--save-details",
                "--output-dir",
                str(results),
            ]
            t = time.time()
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=work)
            print(f"{rel}: rc={r.returncode} {time.time() - t:.1f}s")
            if r.returncode:
                print(r.stderr[-3000:])
                raise SystemExit(1)
    target = out / "lighteval"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(results / "details", target / "details")
    for p in sorted(target.rglob("*.parquet")):
        print(f"{p.stat().st_size:>8} B  {p.relative_to(out)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
