"""Test helper: a tiny local base model plus checkpoints in the HF Trainer layout
(``RUN_DIR/checkpoint-<step>/``), and small GSM8K-format item files.

Reusable by any test: ``build_tiny_run(tmp_path)`` gives a base model folder, a run folder
with LoRA adapter checkpoints and validation/test jsonl files. Checkpoint adapters get
random (seeded) non-zero LoRA weights, so checkpoints really differ without training.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location, is_url
from ckptsel.errors import CkptselError
from ckptsel.study.configuration import DEFAULT_SEEDS, Configuration, Study, configurations_toml, resolve_model, resolve_path

# a study of one configuration on a validation pool (metamath) and gsm8k test items, trained
# from a local base folder `base`: the smallest study file `run` accepts
POOL_STUDY = """schema = 2
[study]
base_model = "base"
seeds = [1]
[pool]
task = "metamath"
file = "pool.json"
[test]
task = "gsm8k"
file = "test.jsonl"
[[configurations]]
name = "a"
steps = 2
save_every = 1
"""

NAMES = ["Tom", "Ann", "Raj", "Mia", "Leo", "Zoe", "Sam", "Ivy"]
THINGS = ["apples", "pens", "cards", "books", "coins", "shells"]
# a "User: ... / Assistant: ..." chat template (system turn optional) for chat-format runs
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}System: {{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% else %}Assistant: {{ m['content'] }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
TEMPLATE_HINT = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:"
)


def make_gsm8k_rows(n: int, seed: int = 0, long_every: int = 0) -> list[dict[str, str]]:
    """``n`` GSM8K-format rows (``question``, ``answer`` ending ``#### N``). With
    ``long_every=k`` every k-th answer gets a long reasoning text (window tests)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        who, what = rng.choice(NAMES), rng.choice(THINGS)
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        q = f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?"
        steps = f"{who} starts with {a} {what}. {who} gets {b} more, so {a} + {b} = {a + b}."
        if long_every and i % long_every == 0:
            steps += " " + " ".join(f"Check {k}: {a} plus {b} is {a + b}." for k in range(12))
        rows.append({"question": q, "answer": f"{steps}\n#### {a + b}"})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write ``rows`` as JSON lines (creates parent folders)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build_tiny_base(out_dir: Path, texts: list[str], seed: int = 0, hidden_size: int = 64) -> Path:
    """A tiny Llama base model + BPE tokenizer trained on ``texts`` (``ckptsel.sim.tiny``)."""
    from ckptsel.sim.tiny import save_tiny

    return save_tiny(Path(out_dir), texts, vocab_size=400, seed=seed, hidden_size=hidden_size, layers=2, heads=4)


def save_lora_checkpoints(base_dir: Path, run_dir: Path, steps: list[int], seed: int = 0, rank: int = 4, scale: float = 0.3) -> list[Path]:
    """Save one PEFT LoRA adapter per step under ``run_dir/checkpoint-<step>/``; weights are
    seeded random so each checkpoint behaves differently. ``base_model_name_or_path`` in
    the adapter config is the base folder (as a trainer writes it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = []
    for k, step in enumerate(steps):
        base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
        cfg = LoraConfig(
            r=rank,
            lora_alpha=2 * rank,
            lora_dropout=0.0,
            init_lora_weights=False,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        )
        torch.manual_seed(seed * 1000 + k)
        model = get_peft_model(base, cfg)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn_like(p) * scale)
        path = Path(run_dir) / f"checkpoint-{step}"
        model.save_pretrained(str(path))
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}), encoding="utf-8")
        out.append(path)
    return out


def save_full_checkpoints(base_dir: Path, run_dir: Path, steps: list[int], seed: int = 0, scale: float = 0.02) -> list[Path]:
    """Save perturbed full copies of the base (model + tokenizer) as ``checkpoint-<step>``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base_dir))
    out = []
    for k, step in enumerate(steps):
        model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
        torch.manual_seed(seed * 1000 + k)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * scale)
        path = Path(run_dir) / f"checkpoint-{step}"
        model.save_pretrained(str(path))
        tok.save_pretrained(str(path))
        out.append(path)
    return out


@dataclass(frozen=True)
class TinyRun:
    """Paths of a tiny run: base model, run folder, item files; and the steps saved."""

    base: Path
    run_dir: Path
    validation: Path
    test: Path
    steps: tuple[int, ...]


def tiny_training_args(out: Path, max_steps: int, **extra):
    """Trainer arguments of the callback tests: CPU, a save every 2 steps, no logging (``extra``
    adds or overrides)."""
    from transformers import TrainingArguments

    settings = dict(
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
        remove_unused_columns=False,
        seed=0,
    )
    return TrainingArguments(**{**settings, **extra})  # extra overrides (report_to, logging)


def build_tiny_run(
    root: Path,
    *,
    steps: tuple[int, ...] = (10, 20, 30),
    n_validation: int = 8,
    n_test: int = 6,
    run_name: str = "run-a",
    seed: int = 0,
    full: bool = False,
    long_every: int = 0,
    hidden_size: int = 64,
) -> TinyRun:
    """Everything a measurement test needs, under ``root`` (``hidden_size=128``: attention
    heads of 32, a size vLLM's CPU attention takes)."""
    root = Path(root)
    val = make_gsm8k_rows(n_validation, seed=seed, long_every=long_every)
    test = make_gsm8k_rows(n_test, seed=seed + 100, long_every=long_every)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in val + test]
    base = build_tiny_base(root / "base", texts, seed=seed, hidden_size=hidden_size)
    run_dir = root / "runs" / run_name
    if full:
        save_full_checkpoints(base, run_dir, list(steps), seed=seed)
    else:
        save_lora_checkpoints(base, run_dir, list(steps), seed=seed)
    return TinyRun(
        base=base,
        run_dir=run_dir,
        validation=write_jsonl(root / "data" / "validation.jsonl", val),
        test=write_jsonl(root / "data" / "test.jsonl", test),
        steps=tuple(steps),
    )


# ------------------------------------------------------------------ studies built in memory
_CONFIG_FIELDS = {f.name for f in fields(Configuration)}
_STUDY_KEYS = {"name", "base_model", "task", "test_task", "train", "validation", "test", "seeds", "runs_dir", "records_dir"}


def study_from_dict(data: dict[str, Any], root: Path, source: str = "<dict>") -> Study:
    """Build and validate a :class:`~ckptsel.study.Study` from a mapping: ``[study]`` with
    ``base_model``, ``task``, ``train`` (and ``validation``, ``test``, ``test_task``, ``seeds``,
    ``runs_dir``, ``records_dir``), ``[[configurations]]``, ``[measure]``; paths relative to
    ``root``. A test helper (the package reads study files with ``ckptsel.study.load_spec``)."""
    s = data.get("study")
    if not isinstance(s, dict):
        raise CkptselError(f"{source}: missing [study] table")
    unknown = set(s) - _STUDY_KEYS
    if unknown:
        raise CkptselError(f"{source}: unknown key(s) in [study]: {', '.join(sorted(unknown))}")
    for key in ("base_model", "task", "train"):
        if not s.get(key):
            raise CkptselError(f"{source}: [study] needs '{key}'")
    seeds = s.get("seeds", list(DEFAULT_SEEDS))
    if not isinstance(seeds, list) or not seeds or not all(isinstance(x, int) for x in seeds):
        raise CkptselError(f"{source}: [study] seeds must be a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        raise CkptselError(f"{source}: [study] seeds contain duplicates: {seeds}")
    raw_configs = data.get("configurations")
    if not isinstance(raw_configs, list) or not raw_configs:
        raise CkptselError(f"{source}: needs at least one [[configurations]] table")
    configs = []
    for i, rc in enumerate(raw_configs):
        bad = set(rc) - _CONFIG_FIELDS
        if bad:
            raise CkptselError(f"{source}: configurations[{i}] has unknown key(s): {', '.join(sorted(bad))}")
        if "name" not in rc:
            raise CkptselError(f"{source}: configurations[{i}] needs 'name'")
        kw = dict(rc)
        if "target_modules" in kw:
            kw["target_modules"] = tuple(kw["target_modules"])
        configs.append(Configuration(**kw))
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise CkptselError(f"{source}: configuration names must be unique, got {names}")
    measure = data.get("measure", {})
    if not isinstance(measure, dict):
        raise CkptselError(f"{source}: [measure] must be a table")
    return Study(
        name=str(s.get("name", root.name)),
        root=root,
        base_model=resolve_model(root, str(s["base_model"])),
        task=str(s["task"]),
        test_task=s.get("test_task"),
        train=resolve_path(root, s["train"]),
        validation=resolve_path(root, s.get("validation")),
        test=resolve_path(root, s.get("test")),
        configurations=tuple(configs),
        seeds=tuple(seeds),
        runs_dir=resolve_path(root, s.get("runs_dir")),
        records_dir=resolve_path(root, s.get("records_dir")),
        measure=dict(measure),
    )


def _toml(v: Any) -> str:
    """A TOML value (the study keys' types: bools, numbers, strings, lists)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string


def study_to_toml(study: Study) -> str:
    """A study as a schema-2 study file that ``load_study`` reads back to the same trained part
    (paths relative to its root when inside it): ``[study]``, ``[train]``, ``[validation]`` and
    ``[test]`` when the study has them, ``[measure]``, ``[[configurations]]``."""

    def rel(p: Path | Location | str | None) -> str | None:
        if p is None or is_url(p):
            return None if p is None else str(p)
        try:
            return str(Path(p).relative_to(study.root))
        except ValueError:
            return str(p)

    base = study.base_model
    if not is_url(base) and Path(base).is_absolute():
        base = rel(base)
    tables: dict[str, dict[str, Any]] = {
        "study": {
            "name": study.name,
            "base_model": base,
            "seeds": list(study.seeds),
            "runs_dir": rel(study.run_root),
            "records_dir": rel(study.records_root),
        },
        "train": {"task": study.task, "file": rel(study.train)},
        "validation": {"task": study.task, "file": rel(study.validation)},
        "test": {"task": study.test_task or study.task, "file": rel(study.test)},
        "measure": dict(study.measure),
    }
    lines = ["schema = 2"]
    for table, entries in tables.items():
        if table in ("validation", "test") and entries["file"] is None:
            continue
        if table == "measure" and not entries:
            continue
        lines += ["", f"[{table}]"]
        lines += [f"{k} = {_toml(v)}" for k, v in entries.items() if v is not None]
    lines += configurations_toml(study.configurations)
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def gsm_rows(n: int) -> list[dict]:
    return [{"question": f"Ann has {a} pens and gets {a + 1} more. How many?", "answer": f"x\n#### {2 * a + 1}"} for a in range(n)]


def jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


MINIMAL = """schema = 2
[study]
base_model = "base"
seeds = [1]
[train]
task = "gsm8k"
file = "train.jsonl"
[validation]
task = "gsm8k"
file = "val.jsonl"
[test]
task = "gsm8k"
file = "test.jsonl"
[[configurations]]
name = "a"
steps = 2
save_every = 1
"""
