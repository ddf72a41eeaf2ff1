"""A study of a simulation preset's shape, to ask what measuring it costs before anything
exists: ``ckptsel simulate OUT --preset paper --study`` writes, per task of the preset, study
files whose configurations are the preset's (their checkpoint grids and seeds, trained here)
and whose pools are synthetic items as many and as long as the preset's (prompt and response
lengths drawn as the simulation draws them, written at 4 characters a token); then ``ckptsel run
OUT/<task>/study.toml --dry-run --device h200`` prints the cost. Nothing is trained or
measured: the files exist for the dry run to count. The items' sizes are the preset's, their
text is filler; one base model (:data:`BASE_MODEL`) stands for the preset's 3-9B models.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ckptsel._util.io import write_text
from ckptsel.data.prompts import format_prompt
from ckptsel.sim.presets import TaskSim
from ckptsel.sim.simulate import checkpoint_grids, token_lengths

BASE_MODEL = "meta-llama/Meta-Llama-3-8B"  # the preset's models are 3-9B parameters
CHARS_PER_TOKEN = 4
# per answer kind: (validation task, test task, max new tokens as in examples/<task>.toml)
TASKS = {"numeric": ("metamath", "gsm8k", 512), "latex": ("math", "math", 1024), "choice": ("commonsense", "commonsense", 32)}
FILLER = "the quick brown fox jumps over the lazy dog "


def text(n_tokens: float) -> str:
    """Filler text of about ``n_tokens`` tokens at :data:`CHARS_PER_TOKEN` characters each."""
    n = max(1, int(round(n_tokens * CHARS_PER_TOKEN)))
    return (FILLER * (n // len(FILLER) + 1))[:n]


def item_row(task: str, k: int, prompt: float, response: float) -> dict[str, str]:
    """One synthetic item of ``task``'s file format whose rendered prompt and response are about
    ``prompt`` and ``response`` tokens long (the Alpaca prompt's own text counted in)."""
    q = text(max(1.0, prompt - len(format_prompt("")) / CHARS_PER_TOKEN))
    r = text(max(1.0, response - 1))  # the EOS is the last scored token
    if task == "metamath":
        return {"query": q, "response": f"{r} The answer is: 1", "original_question": f"q{k}"}
    if task == "gsm8k":
        return {"question": q, "answer": f"{r}\n#### 1"}
    if task == "math":
        return {"problem": q, "solution": f"{r} $\\boxed{{1}}$", "answer": "1"}
    return {"instruction": q, "input": "", "output": r, "answer": "option1"}


def write_pool(path: Path, task: str, prompts: np.ndarray, responses: np.ndarray) -> Path:
    rows = [item_row(task, k, p, r) for k, (p, r) in enumerate(zip(prompts, responses, strict=True))]
    body = json.dumps(rows) if task == "commonsense" else "".join(json.dumps(r) + "\n" for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, body)
    return path


def configuration_toml(name: str, steps: list[int], interval: int) -> str:
    """One ``[[configurations]]`` table: the preset's adaptation (``lora8``, ``lora64``, ``full``)
    and its grid (every ``interval`` steps, the final one last)."""
    adapt = name.split("-")[-2]
    kind = 'adaptation = "full"' if adapt == "full" else f'adaptation = "lora"\nrank = {adapt[4:]}\nalpha = {2 * int(adapt[4:])}'
    return f'[[configurations]]\nname = "{name}"\n{kind}\nsteps = {steps[-1]}\nsave_every = {interval}\n'


def study_toml(task: TaskSim, preset: str, seeds: list[int], configs: list[str], files: tuple[str, ...]) -> str:
    """One study file: ``files`` are the validation, test and training files' paths from it."""
    val_task, test_task, max_new = TASKS[task.kind]
    return (
        f"# The shape of `ckptsel simulate --preset {preset}`: its {task.name} configurations with {len(seeds)} seeds\n"
        "# (written by `ckptsel simulate --study`), for `ckptsel run THIS --dry-run` only: the items are\n"
        "# filler as many and as long as the preset's; one base model stands for its 3-9B models.\n"
        f'schema = 2\n\n[study]\nname = "{preset}-shape-{task.name}"\nbase_model = "{BASE_MODEL}"\nseeds = {seeds}\n\n'
        f'[train]  # filler: the grids are steps, not epochs, so its size does not matter here\ntask = "{val_task}"\nfile = "{files[2]}"\n\n'
        f'[validation]\ntask = "{val_task}"\nfile = "{files[0]}"\n\n[test]\ntask = "{test_task}"\nfile = "{files[1]}"\n\n'
        f"[measure]\nmax_new_tokens = {max_new}\n\n" + "\n".join(configs)
    )


def write_study_shape(out: str | Path, preset: str = "paper", seed: int = 0) -> list[Path]:
    """The study files of ``preset``'s shape under ``out`` (``data/`` holds the pools), one per
    task and number of seeds per configuration (``<task>/``, ``<task>-<n>-seeds/``)."""
    out = Path(out)
    spec, grids = checkpoint_grids(preset, seed)
    written = []
    for ti, task in enumerate(spec.tasks):
        prompts, responses = token_lengths(task, np.random.default_rng([seed, 7, ti]))
        n_val = task.n_validation
        val_task, test_task, _ = TASKS[task.kind]
        ext = "json" if task.kind == "choice" else "jsonl"
        write_pool(out / "data" / f"{task.name}-validation.{ext}", val_task, prompts[:n_val], responses[:n_val])
        write_pool(out / "data" / f"{task.name}-test.{ext}", test_task, prompts[n_val:], responses[n_val:])
        write_pool(out / "data" / f"{task.name}-train.{ext}", val_task, prompts[:8], responses[:8])
        mine = [g for g in grids if g[1] == ti]
        by_seeds: dict[int, list[str]] = {}
        for (name, _, steps), n_seeds in zip(mine, task.seeds_per_configuration, strict=True):
            by_seeds.setdefault(n_seeds, []).append(configuration_toml(name, steps, spec.step_interval))
        for k, (n_seeds, configs) in enumerate(sorted(by_seeds.items())):
            folder = out / (task.name if k == 0 else f"{task.name}-{n_seeds}-seeds")
            files = tuple(f"../data/{task.name}-{part}.{ext}" for part in ("validation", "test", "train"))
            folder.mkdir(parents=True, exist_ok=True)
            write_text(folder / "study.toml", study_toml(task, preset, list(spec.seeds[:n_seeds]), configs, files))
            written.append(folder / "study.toml")
    return written
