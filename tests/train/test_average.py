"""``ckptsel average`` (issue 46, item 1): averaged checkpoints written beside a run's.

* a LoRA average merges to the mean of the merged checkpoints (plain LoRA, and rsLoRA with
  rank and alpha patterns, an embedding adapter and ``modules_to_save``);
* a full average is the float32 tensor mean in the checkpoints' dtype (bfloat16 here);
* both load fresh (transformers, PEFT) and give the logits of an average made by hand;
* EMA weights by hand on three checkpoints;
* hostile input through the command line as a user types it: one line naming the thing, exit
  2, nothing written;
* the checkpoint listing ignores the averages; the same inputs again: already there, and with
  ``--force`` the same bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptsel.train.average import averaged_lora_config, ema_weights
from ckptsel.train.checkpoints import LAYOUTS, checkpoint_steps, discover_checkpoints, trajectory_status

from clirun import run_cli
from tinyrun import TEMPLATE_HINT, build_tiny_base, make_gsm8k_rows, save_lora_checkpoints

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = (10, 20, 30)
# rsLoRA (s = alpha/sqrt(r)), a rank and an alpha pattern, an embedding adapter, a module saved whole
VARIANT = dict(
    r=2,
    lora_alpha=3,
    use_rslora=True,
    rank_pattern={"q_proj": 3},
    alpha_pattern={"v_proj": 5},
    target_modules=["q_proj", "v_proj", "down_proj", "embed_tokens"],
    modules_to_save=["norm"],
)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    rows = make_gsm8k_rows(8)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in rows]
    return build_tiny_base(tmp_path_factory.mktemp("base") / "base", texts, hidden_size=32)


def save_adapters(base: Path, run_dir: Path, steps, seed: int = 0, **lora) -> Path:
    """LoRA adapters of ``LoraConfig(**lora)``, seeded random factors and saved modules."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    for k, step in enumerate(steps):
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base)), LoraConfig(init_lora_weights=False, **lora))
        torch.manual_seed(seed * 1000 + k)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.requires_grad:
                    p.copy_(torch.randn_like(p) * 0.3 + (1.0 if "modules_to_save" in name else 0.0))
        model.save_pretrained(str(run_dir / f"checkpoint-{step}"))
    return run_dir


def save_full(base: Path, run_dir: Path, steps, dtype=None, seed: int = 0, names: str = "checkpoint-{}", **save) -> Path:
    """Perturbed full copies of the base (model, tokenizer), in ``dtype`` (bfloat16), in
    folders ``names.format(step)``; ``save``: save_pretrained's keywords (max_shard_size)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    for k, step in enumerate(steps):
        model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
        torch.manual_seed(seed * 1000 + k)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        model.to(dtype or torch.bfloat16).save_pretrained(str(run_dir / names.format(step)), **save)
        tok.save_pretrained(str(run_dir / names.format(step)))
    return run_dir


@pytest.fixture(scope="module")
def lora_run(base, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("lora") / "run"
    save_lora_checkpoints(base, run, list(STEPS), rank=4)
    return run


@pytest.fixture(scope="module")
def full_run(base, tmp_path_factory) -> Path:
    return save_full(base, tmp_path_factory.mktemp("full") / "run", STEPS)


def average(run: Path, capsys, *args) -> list[dict]:
    code, said = run_cli(["average", run, *args, "--json"], capsys)
    assert code == 0, said
    return json.loads(said[said.index("{") :])["averages"]


def tensors(folder: Path, name: str = "model.safetensors") -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / name))


def merged(base: Path, adapter: Path) -> dict:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), str(adapter))
    return {k: v.detach().clone() for k, v in model.merge_and_unload().state_dict().items()}


def logits(model) -> torch.Tensor:
    ids = torch.tensor([[1, 5, 9, 13, 17, 21, 25, 29]])
    with torch.no_grad():
        return model(input_ids=ids).logits


# ------------------------------------------------------------------- (1) LoRA: the exact mean of the deltas


@pytest.mark.parametrize("variant", ["plain", "rslora-patterns-embedding-saved"])
def test_lora_average_merges_to_the_mean_of_the_merged_checkpoints(variant, base, lora_run, tmp_path, capsys):
    run = lora_run
    if variant != "plain":
        run = save_adapters(base, tmp_path / "run", STEPS, **VARIANT)
    (answer,) = average(run, capsys, "--last", "3")
    folder = Path(answer["folder"])
    assert answer["name"] == "average-last3" and answer["kind"] == "lora" and answer["steps"] == list(STEPS)
    sources = [merged(base, run / f"checkpoint-{s}") for s in STEPS]
    mean = {k: torch.stack([m[k] for m in sources]).mean(0) for k in sources[0]}
    got = merged(base, folder)
    assert got.keys() == mean.keys()
    worst = max((got[k] - mean[k]).abs().max().item() for k in mean)
    assert worst < 1e-5, worst  # measured: about 1e-7 (float32 rounding of the merges)
    config = json.loads((folder / "adapter_config.json").read_text())
    source = json.loads((run / "checkpoint-30" / "adapter_config.json").read_text())
    assert config == averaged_lora_config(source, 3) and config["r"] == 3 * source["r"]


# ------------------------------------------------------------------- (2) full: the tensor mean, in the saved dtype


def test_full_average_is_the_tensor_mean_in_the_saved_dtype(full_run, capsys):
    (answer,) = average(full_run, capsys, "--last", "2")
    folder = Path(answer["folder"])
    got = tensors(folder)
    sources = [tensors(full_run / f"checkpoint-{s}") for s in STEPS[1:]]
    assert got.keys() == sources[0].keys()
    for name, t in got.items():
        assert t.dtype == torch.bfloat16 == sources[0][name].dtype
        hand = ((sources[0][name].float() + sources[1][name].float()) / 2).to(torch.bfloat16)
        assert torch.equal(t, hand), name
    record = json.loads((folder / "ckptsel_average.json").read_text())
    assert record["dtype"] == "bfloat16" and record["kind"] == "full" and record["method"] == "mean"
    assert [s["path"] for s in record["sources"]] == ["checkpoint-20", "checkpoint-30"]
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).read_bytes() == (full_run / "checkpoint-30" / name).read_bytes()


# ------------------------------------------------------------------- (3) loaded fresh, the logits of a hand-made average


def test_a_lora_average_loads_and_gives_the_logits_of_the_averaged_delta(base, lora_run, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    (answer,) = average(lora_run, capsys, "--last", "3")
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), answer["folder"])
    hand = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    scale = json.loads((lora_run / "checkpoint-30" / "adapter_config.json").read_text())
    scale = scale["lora_alpha"] / scale["r"]
    adapters = [tensors(lora_run / f"checkpoint-{s}", "adapter_model.safetensors") for s in STEPS]
    params = dict(hand.named_parameters())
    with torch.no_grad():
        for key in adapters[0]:
            if ".lora_A." in key:
                b = key.replace(".lora_A.", ".lora_B.")
                delta = sum(scale * ad[b] @ ad[key] for ad in adapters) / len(adapters)
                params[key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")].add_(delta)
    difference = (logits(model) - logits(hand)).abs().max().item()
    assert difference < 1e-5, difference


def test_a_full_average_loads_and_gives_the_logits_of_the_mean_weights(base, full_run, capsys):
    from transformers import AutoModelForCausalLM

    (answer,) = average(full_run, capsys, "--last", "3")
    model = AutoModelForCausalLM.from_pretrained(answer["folder"], dtype=torch.float32)
    hand = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    sources = [tensors(full_run / f"checkpoint-{s}") for s in STEPS]
    mean = {k: (sum(t[k].float() for t in sources) / 3).to(torch.bfloat16).float() for k in sources[0]}
    missing, unexpected = hand.load_state_dict(mean, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embeddings
    assert torch.equal(logits(model), logits(hand))


def test_sharded_checkpoints_in_the_torchtune_layout_average_shard_by_shard(base, tmp_path, capsys):
    """Sharded weights (an index and its shards; each shard's tensors averaged on their own)
    in ``epoch_<n>/`` folders: the same shards and index, loading to the mean weights."""
    from transformers import AutoModelForCausalLM

    run = save_full(base, tmp_path / "run", (0, 1), dtype=torch.float32, names="epoch_{}", max_shard_size="20KB")
    shards = sorted(p.name for p in (run / "epoch_1").glob("model-*.safetensors"))
    assert len(shards) > 2
    (answer,) = average(run, capsys, "--last", "2", "--layout", "torchtune")
    folder = Path(answer["folder"])
    assert sorted(p.name for p in folder.glob("model-*.safetensors")) == shards
    index = "model.safetensors.index.json"
    assert (folder / index).read_bytes() == (run / "epoch_1" / index).read_bytes()
    got = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).state_dict()
    sources = [AutoModelForCausalLM.from_pretrained(str(run / f"epoch_{s}"), dtype=torch.float32).state_dict() for s in (0, 1)]
    assert all(torch.equal(got[k], (sources[0][k] + sources[1][k]) / 2) for k in got)
    assert [c.step for c in discover_checkpoints(run, layout="torchtune")] == [0, 1]


# ------------------------------------------------------------------- (4) EMA by hand


def test_ema_weights_by_hand_on_three_checkpoints(full_run, capsys):
    assert ema_weights(3, 0.5) == pytest.approx((1 / 7, 2 / 7, 4 / 7), abs=1e-15)
    (answer,) = average(full_run, capsys, "--ema", "0.5")
    folder = Path(answer["folder"])
    assert folder.name == "ema-0.5" and answer["method"] == "ema" and answer["decay"] == 0.5
    record = json.loads((folder / "ckptsel_average.json").read_text())
    assert [s["weight"] for s in record["sources"]] == pytest.approx([1 / 7, 2 / 7, 4 / 7], abs=1e-15)
    sources = [tensors(full_run / f"checkpoint-{s}") for s in STEPS]
    for name, t in tensors(folder).items():
        hand = (sources[0][name].float() / 7 + sources[1][name].float() * 2 / 7 + sources[2][name].float() * 4 / 7).to(torch.bfloat16)
        ulp = hand.float().abs().max().item() * 2**-7
        assert (t.float() - hand.float()).abs().max().item() <= ulp, name  # at most one bfloat16 rounding apart


# ------------------------------------------------------------------- (5) hostile input, as a user types it


def _mixed(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    run = tmp / "mixed"
    shutil.copytree(lora_run / "checkpoint-10", run / "checkpoint-10", ignore=shutil.ignore_patterns("average*", "ema*"))
    shutil.copytree(full_run / "checkpoint-20", run / "checkpoint-20")
    return run


def _reshaped(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    from safetensors.torch import save_file

    run = tmp / "reshaped"
    for s in STEPS[:2]:
        shutil.copytree(full_run / f"checkpoint-{s}", run / f"checkpoint-{s}")
    weights = tensors(run / "checkpoint-20")
    weights["model.norm.weight"] = torch.ones(7, dtype=torch.bfloat16)
    save_file(weights, str(run / "checkpoint-20" / "model.safetensors"), metadata={"format": "pt"})
    return run


def _dora(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    run = tmp / "dora"
    for s in STEPS:
        shutil.copytree(lora_run / f"checkpoint-{s}", run / f"checkpoint-{s}")
        cfg = run / f"checkpoint-{s}" / "adapter_config.json"
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "use_dora": True}))
    return run


def _other_rank(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    run = tmp / "ranks"
    shutil.copytree(lora_run / "checkpoint-10", run / "checkpoint-10")
    base = json.loads((lora_run / "checkpoint-10" / "adapter_config.json").read_text())["base_model_name_or_path"]
    save_lora_checkpoints(Path(base), run, [20], rank=2)
    return run


def _other_base(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    run = tmp / "bases"
    for s in STEPS[:2]:
        shutil.copytree(lora_run / f"checkpoint-{s}", run / f"checkpoint-{s}")
    cfg = run / "checkpoint-20" / "adapter_config.json"
    base = json.loads(cfg.read_text())["base_model_name_or_path"]
    shutil.copytree(base, tmp / "other-base")
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "base_model_name_or_path": str(tmp / "other-base")}))
    return run


def _other_targets(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    run = tmp / "targets"
    shutil.copytree(lora_run / "checkpoint-10", run / "checkpoint-10")
    base = json.loads((lora_run / "checkpoint-10" / "adapter_config.json").read_text())["base_model_name_or_path"]
    save_adapters(Path(base), run, [20], r=4, lora_alpha=8, target_modules=["q_proj"])
    return run


def _same(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    return lora_run


def _missing(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    return tmp / "no-such-run"


def _a_file(lora_run: Path, full_run: Path, tmp: Path) -> Path:
    (tmp / "run.txt").write_text("not a run\n")
    return tmp / "run.txt"


HOSTILE = {
    "K=1": (_same, ["--last", "1"], "--last 1"),
    "K too big": (_same, ["--last", "4"], "--last 4"),
    "no average asked": (_same, [], "--last K"),
    "mixed kinds": (_mixed, ["--last", "2"], "LoRA adapter but checkpoint-20 a full model"),
    "mismatched shapes": (_reshaped, ["--last", "2"], "model.norm.weight"),
    "other ranks": (_other_rank, ["--last", "2"], "down_proj.lora_A.weight is float32 [2, 64] in checkpoint-20"),
    "other base model": (_other_base, ["--last", "2"], "base_model_name_or_path"),
    "other target modules": (_other_targets, ["--last", "2"], "hold different tensors"),
    "DoRA": (_dora, ["--last", "2"], "use_dora"),
    "NaN decay": (_same, ["--ema", "nan"], "--ema nan"),
    "decay 1.5": (_same, ["--ema", "1.5"], "--ema 1.5"),
    "decay 0": (_same, ["--ema", "0"], "--ema 0"),
    "one good, one bad": (_same, ["--last", "2", "--last", "9"], "--last 9"),
    "missing run dir": (_missing, ["--last", "2"], "run directory not found"),
    "run dir is a file": (_a_file, ["--last", "2"], "not a run directory"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_input_is_one_line_naming_it_and_writes_nothing(case, lora_run, full_run, tmp_path, capsys):
    make, args, says = HOSTILE[case]
    run = make(lora_run, full_run, tmp_path)
    before = files_under(run.parent)
    code, said = run_cli(["average", run, *args], capsys)
    assert code == 2, said
    assert "Traceback" not in said, said
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, said
    assert str(run) in errors[0] or case.startswith("NaN") or case.startswith("decay"), errors[0]
    assert says in errors[0], errors[0]
    assert files_under(run.parent) == before


# ------------------------------------------------------------------- (6) the listing ignores averages; again: the same


def test_the_checkpoint_listing_ignores_the_averages(lora_run, capsys):
    before = [c.step for c in discover_checkpoints(lora_run)]
    answers = average(lora_run, capsys, "--last", "2", "--last", "3", "--ema", "0.9")
    assert {a["name"] for a in answers} == {"average-last2", "average-last3", "ema-0.9"}
    assert all((lora_run / a["name"] / "adapter_config.json").is_file() for a in answers)
    assert [c.step for c in discover_checkpoints(lora_run)] == before == list(STEPS)
    assert checkpoint_steps(lora_run) == list(STEPS) and trajectory_status(lora_run, 30).valid
    assert not any(pattern.match(a["name"]) for pattern in LAYOUTS.values() for a in answers)  # watch's listing too


def test_the_same_inputs_again_are_already_there_and_forced_give_the_same_bytes(full_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(full_run, run, ignore=shutil.ignore_patterns("average*", "ema*"))
    (first,) = average(run, capsys, "--last", "2")
    folder = Path(first["folder"])
    written = {name: (folder / name).read_bytes() for name in files_under(folder)}
    (again,) = average(run, capsys, "--last", "2")
    assert (first["status"], again["status"]) == ("written", "already there")
    (forced,) = average(run, capsys, "--last", "2", "--force")
    assert forced["status"] == "written again"
    assert {name: (folder / name).read_bytes() for name in files_under(folder)} == written
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == []  # no temporary folder left
    # a new checkpoint: the last 2 are others, refused without --force, replaced with it
    shutil.copytree(run / "checkpoint-10", run / "checkpoint-40")
    code, said = run_cli(["average", run, "--last", "2"], capsys)
    assert code == 2 and "--force" in said and str(folder) in said
    (replaced,) = average(run, capsys, "--last", "2", "--force")
    assert replaced["status"] == "replaced" and replaced["steps"] == [30, 40]
    # a folder of that name that ckptsel did not write is never replaced
    (run / "average-last3").mkdir()
    code, said = run_cli(["average", run, "--last", "3", "--force"], capsys)
    assert code == 2 and "not an average ckptsel wrote" in said
