"""Validate a GPU box for ckptsel in one command (issue 20, part 6).

On whatever CUDA device is there, with nothing downloaded (random-initialised models):

1. the architecture matrix (``tests/archmodels.py``: Llama, Qwen2 (+ sliding window), Qwen3,
   Mistral-SW, Gemma-2/3, Phi-3-SW, Qwen3-MoE, Mixtral-SW) in bfloat16 under an unmerged LoRA
   adapter, with sdpa, flash-attention 2 (when ``flash_attn`` is installed) and eager: texts of
   ckptsel's pass and of HF's own batched ``generate`` that equal ``generate`` on each unpadded
   prompt (ckptsel should be no worse than HF batched generation), and that nothing crashes;
2. HF vs vLLM record agreement on a tiny LoRA run (``measure --backend hf`` vs ``--backend
   vllm``), float32 and bfloat16: texts identical, NLL max relative difference;
3. throughput on models of real size (Qwen3-1.7B and Llama-3-8B shapes, random weights, one
   random LoRA adapter): items/s and tokens/s of ckptsel-HF, ckptsel-vLLM and raw vLLM
   ``generate`` (+ prompt log-probs) on the same prompts, and peak GPU memory;
4. how a full-fine-tuning trajectory's weights get in (issue 31), on the first shape: 3 full
   checkpoints (random perturbations of the random base) measured with a fresh model/engine
   per checkpoint (``--no-swap``) and with each swapped into the one running (proven by
   checksums), on HF and vLLM: engine starts and their time, swaps and their time, the whole
   ``measure_run``, peak memory, records of the two compared.

It writes its section of BENCHMARKS.md (``--out``). Each throughput side runs in its own process
(vLLM keeps GPU memory until its process ends). Usage on the GPU box, in an environment with
``pip install -e '.[ml,vllm]'``::

    python benchmarks/gpu_check.py                  # everything, ~15-30 min on one H100
    python benchmarks/gpu_check.py --quick          # small sizes, a few minutes
    python benchmarks/gpu_check.py --throughput     # only decode throughput (issue 37, ~8 min)

``--throughput`` (``decode_throughput.py``): ckptsel's HF path before/after continuous
batching, HF static-cache ``generate``, ``generate_batch`` and vLLM on the same planted-EOS
work; ``--device cpu --throughput`` runs it on the CPU (the ``small`` shape).

``--device cpu --quick`` runs the same code on the CPU at toy sizes (no vLLM needed: its parts
are skipped, saying so); the test suite does that, so the script cannot rot.
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

import decode_throughput as dt  # noqa: E402

from _common import BENCHMARKS_MD, update_section  # noqa: E402

SHAPES = {  # real models' shapes; random weights
    "qwen3-1.7b": (
        "Qwen3",
        dict(
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            max_position_embeddings=40960,
            rope_theta=1e6,
            tie_word_embeddings=True,
        ),
    ),
    "llama3-8b": (
        "Llama",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
            rope_theta=5e5,
        ),
    ),
    "small": (
        "Llama",
        dict(  # the CPU's throughput shape: compute per row counts there
            hidden_size=512,
            intermediate_size=1536,
            num_hidden_layers=6,
            num_attention_heads=8,
            num_key_value_heads=4,
            vocab_size=4096,
            max_position_embeddings=4096,
        ),
    ),
    "tiny": (
        "Llama",
        dict(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=512,
            max_position_embeddings=2048,
        ),
    ),
}


def have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------- 1. architectures


def arch_matrix(device: str, quick: bool) -> list[str]:
    """Markdown rows: family, attention, ckptsel / HF batched texts equal to unbatched."""
    import torch

    from ckptsel.measure.passes import measure_items
    from ckptsel.measure.tokens import stop_token_ids

    import archmodels as am

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    tok = am.tokenizer()
    prompts, responses = am.items(8 if quick else 32)
    families = ["llama", "mistral_sw"] if quick else list(am.FAMILIES)
    extra = ("flash_attention_2",) if device.startswith("cuda") and have("flash_attn") else ()
    rows = []
    for family in families:
        for attn in am.attentions(family) + (extra if family != "gemma2" else ()):
            try:
                model = am.add_lora(am.build(family, tok, attn=attn, dtype=dtype)).to(device)
                stops = stop_token_ids(model, tok)
                ref = [am.generate_one(model, tok, p, 16, stops, device) for p in prompts]
                texts, _ = measure_items(model, tok, prompts, responses, batch_size=8, max_new_tokens=16, device=device)
                hf = am.generate_batched(model, tok, prompts, 16, stops, 8, device=device)
                same = lambda t, ref=ref: sum(a == b for a, b in zip(t, ref, strict=True))  # noqa: E731
                rows.append(f"| {family} | {attn} | {same(texts)}/{len(ref)} | {same(hf)}/{len(ref)} |")
            except Exception as err:  # a crash is a finding: report it, go on
                rows.append(f"| {family} | {attn} | **crash**: {type(err).__name__}: {str(err).splitlines()[0][:120]} | |")
            print(rows[-1], flush=True)
    return rows


# ----------------------------------------------------------------------- 2. HF vs vLLM records


def record_agreement(device: str, root: Path) -> list[str]:
    """Markdown rows: dtype, texts identical, NLL max relative difference (HF vs vLLM)."""
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run
    from ckptsel.records.scan import read_frame

    from tinyrun import build_tiny_run

    if not have("vllm"):
        return ["| – | skipped: vllm is not installed here | |"]
    run = build_tiny_run(root / "agree", steps=(10, 20), n_validation=8, n_test=6, long_every=3, hidden_size=128)
    rows = []
    for dtype in ("float32", "bfloat16"):
        frames = {}
        for backend in ("hf", "vllm"):
            out = root / f"agree-{dtype}-{backend}"
            cfg = MeasureConfig("gsm8k", backend=backend, device=device, dtype=dtype, batch_size=4, max_new_tokens=16, window=64)
            try:
                measure_run(run.run_dir, cfg, validation=run.validation, test=run.test, out=out)
            except Exception as err:
                rows.append(f"| {dtype} | **{backend} failed**: {str(err).splitlines()[0][:160]} | |")
                break
            key = ["step", "split", "item_id"]
            frames[backend] = (read_frame(out, "generations").sort_values(key), read_frame(out, "nll").sort_values([*key, "window"]))
        if len(frames) == 2:
            (ga, na), (gb, nb) = frames["hf"], frames["vllm"]
            same = int((ga["text"].to_numpy() == gb["text"].to_numpy()).sum())
            x, y = na["nll_sum"].to_numpy(), nb["nll_sum"].to_numpy()
            rel = float((abs(x - y) / abs(x).clip(min=1e-12)).max())
            rows.append(f"| {dtype} | {same}/{len(ga)} | {rel:.1e} |")
        print(rows[-1], flush=True)
    return rows


# ----------------------------------------------------------------------- 3. throughput


def random_model(shape: str, device: str) -> tuple:
    """``(model, tokenizer)``: a random-initialised model of ``shape`` (:data:`SHAPES`) built on
    ``device`` in its dtype (bfloat16 on a GPU, float32 on the CPU), seed 0, and the
    architecture matrix's tokenizer."""
    import torch
    import transformers

    import archmodels as am

    family, kw = SHAPES[shape]
    tok = am.tokenizer()
    cfg = getattr(transformers, f"{family}Config")(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **kw
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = getattr(transformers, f"{family}ForCausalLM")(cfg)
    finally:
        torch.set_default_dtype(default)
    return model, tok


def build_shape(shape: str, root: Path, device: str) -> dict:
    """A random model of ``shape`` + one random LoRA adapter saved under ``root`` (HF layout),
    and the items: GSM8K questions when ../shared/data is there, else synthetic ones."""
    from peft import LoraConfig, get_peft_model

    from tinyrun import make_gsm8k_rows, write_jsonl

    model, tok = random_model(shape, device)
    base = root / f"base-{shape}"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    lora = LoraConfig(r=16, lora_alpha=32, init_lora_weights=False, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    get_peft_model(model, lora).save_pretrained(root / "run" / "checkpoint-1")
    cfg_file = root / "run" / "checkpoint-1" / "adapter_config.json"
    ad = json.loads(cfg_file.read_text())
    cfg_file.write_text(json.dumps({**ad, "base_model_name_or_path": str(base)}))
    del model
    rows = make_gsm8k_rows(64 if shape == "tiny" else 256, seed=1)
    half = len(rows) // 2
    return {
        "base": str(base),
        "run": str(root / "run"),
        "validation": str(write_jsonl(root / "val.jsonl", rows[:half])),
        "test": str(write_jsonl(root / "test.jsonl", rows[half:])),
    }


def side(name: str, work: dict, device: str, max_new: int) -> dict:
    """One throughput side, in this process: seconds of work (engine start apart) and peak
    memory."""
    import torch

    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if name == "raw-vllm":
        res = raw_vllm(work, max_new)
    else:
        swap = work.get("swap", True)
        cfg = MeasureConfig("gsm8k", backend=name.split("-")[1], device=device, batch_size=32, max_new_tokens=max_new, swap_weights=swap)
        out = Path(work["run"]).parent / f"records-{name}-{'swap' if swap else 'fresh'}"
        r = measure_run(Path(work["run"]), cfg, validation=Path(work["validation"]), test=Path(work["test"]), out=out)
        res = {
            "seconds": r.generation_seconds + r.nll_seconds,
            "start": r.engine_seconds,
            "items": r.generated_items,
            "measure_run": r.seconds,
            "out": str(out),
            "starts": r.engine_starts,
            "start_seconds": r.start_seconds,
            "swaps": r.weight_swaps,
            "swap_seconds": r.swap_seconds,
        }
    res["wall"] = time.perf_counter() - t0
    if cuda:
        free, total = torch.cuda.mem_get_info()
        res["peak_gib"] = max(torch.cuda.max_memory_allocated(), total - free) / 2**30
    return res


def raw_vllm(work: dict, max_new: int) -> dict:
    """Plain vLLM on the same token ids: generate + prompt log-probs under the adapter."""
    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items
    from ckptsel.measure.backends.vllm import VllmEngine
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.tokens import encode_prompts, encode_responses
    from ckptsel.train.checkpoints import discover_checkpoints
    from ckptsel.train.models import load_tokenizer

    items = [it for s in ("validation", "test") for it in load_items("gsm8k", Path(work[s]))]
    tok = load_tokenizer(work["base"])
    prompts = encode_prompts(tok, [format_prompt(it.instruction) for it in items])
    seqs = [p + a for p, a in zip(prompts, encode_responses(tok, [it.response for it in items]), strict=True)]
    ckpts = discover_checkpoints(Path(work["run"]), None)
    engine = VllmEngine(MeasureConfig("gsm8k", backend="vllm", device=_device()), ckpts, None, work["base"])
    lengths = [len(s) + 1 for s in seqs] + [len(p) + max_new for p in prompts]
    args = engine.engine_args(work["base"], engine._plan(work["base"], lengths))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    t0 = time.perf_counter()
    llm = LLM(**args)
    start = time.perf_counter() - t0
    lora = LoRARequest("c1", 1, str(ckpts[0].path))
    t0 = time.perf_counter()
    llm.generate(
        [TokensPrompt(prompt_token_ids=s) for s in seqs],
        SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False),
        lora_request=lora,
        use_tqdm=False,
    )
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts],
        SamplingParams(temperature=0.0, max_tokens=max_new, ignore_eos=True, stop_token_ids=[tok.eos_token_id], detokenize=False),
        lora_request=lora,
        use_tqdm=False,
    )
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "start": start,
        "items": len(prompts),
        "new_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
        "prompt_tokens": sum(map(len, seqs)) + sum(map(len, prompts)),
    }


def _device() -> str:
    return os.environ.get("CKPTSEL_GPU_CHECK_DEVICE", "cuda")


def throughput(shape: str, device: str, root: Path, max_new: int, in_process: bool) -> list[str]:
    """Markdown rows for one shape: each side's items/s, tokens/s and peak memory."""
    work = build_shape(shape, root / shape, device)
    sides = ["ckptsel-hf"] + (["ckptsel-vllm", "raw-vllm"] if have("vllm") else [])
    results = {}
    for name in sides:
        results[name] = _run_side(name, work, device, max_new, in_process)
        print(shape, name, results[name], flush=True)
    raw = results.get("raw-vllm", {})
    tokens = raw.get("new_tokens")
    rows = []
    for name in sides:
        r = results[name]
        if "error" in r:
            rows.append(f"| {shape} | {name} | **failed**: {r['error'].splitlines()[-1][:160]} | | | |")
            continue
        ips = r["items"] / r["seconds"]
        tps = f"{tokens / r['seconds']:.0f}" if tokens else "–"
        mem = f"{r['peak_gib']:.1f} GiB" if "peak_gib" in r else "–"
        rows.append(f"| {shape} | {name} | {ips:.1f} | {tps} | {r['start']:.0f} s | {mem} |")
    if not have("vllm"):
        rows.append(f"| {shape} | ckptsel-vllm, raw-vllm | skipped: vllm is not installed | | | |")
    return rows


def full_trajectory(shape: str, root: Path, device: str, n: int = 3) -> dict:
    """``n`` full checkpoints of ``shape`` (the random base, each perturbed by its own noise)
    under ``root/full-run`` and 32 items: the work of :func:`weights_in`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyrun import make_gsm8k_rows, write_jsonl

    base = build_shape(shape, root, device)["base"]
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype).to(device)
    tok = AutoTokenizer.from_pretrained(base)
    run = root / "full-run"
    original = {k: v.clone() for k, v in model.state_dict().items()}
    for k in range(n):
        torch.manual_seed(k + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(original[name] + torch.randn_like(p) * 0.02)
        model.save_pretrained(run / f"checkpoint-{k + 1}")
        tok.save_pretrained(run / f"checkpoint-{k + 1}")
    del model, original
    rows = make_gsm8k_rows(32, seed=2)
    return {
        "base": base,
        "run": str(run),
        "validation": str(write_jsonl(root / "full-val.jsonl", rows[:16])),
        "test": str(write_jsonl(root / "full-test.jsonl", rows[16:])),
    }


def weights_in(shape: str, device: str, root: Path, max_new: int, in_process: bool) -> list[str]:
    """Markdown rows: a full trajectory restarted per checkpoint vs swapped in place, per
    backend (HF; vLLM when installed), each side in its own process unless ``in_process``."""
    work = full_trajectory(shape, root / f"full-{shape}", device)
    rows = []
    for backend in ["hf"] + (["vllm"] if have("vllm") else []):
        got = {}
        for swap in (False, True):
            name, w = f"ckptsel-{backend}", {**work, "swap": swap}
            got[swap] = _run_side(name, w, device, max_new, in_process)
        same = _same_texts(got[False], got[True])
        for swap, what in ((False, "restart per checkpoint"), (True, "swap in place")):
            r = got[swap]
            if "error" in r:
                rows.append(f"| {shape} | {backend} | {what} | **failed**: {r['error'].splitlines()[-1][:160]} | | | | | | |")
                continue
            each = lambda total, n: f"{total / n:.2f} s" if n else "–"  # noqa: E731
            mem = f"{r['peak_gib']:.1f} GiB" if "peak_gib" in r else "–"
            rows.append(
                f"| {shape} | {backend} | {what} | {r['measure_run']:.1f} s | {r['starts']} | "
                f"{each(r['start_seconds'], r['starts'])} | {r['swaps']} | "
                f"{each(r['swap_seconds'], r['swaps'])} | {mem} | {same if swap else ''} |"
            )
    if not have("vllm"):
        rows.append(f"| {shape} | vllm | skipped: vllm is not installed | | | | | | | |")
    return rows


def _run_side(name: str, work: dict, device: str, max_new: int, in_process: bool) -> dict:
    """:func:`side` here or in a process of its own (vLLM keeps GPU memory until it ends)."""
    if in_process:
        return side(name, work, device, max_new)
    env = dict(os.environ, CKPTSEL_GPU_CHECK_DEVICE=device)
    res = subprocess.run(
        [sys.executable, __file__, "--side", name, "--work", json.dumps(work), "--device", device, "--max-new-tokens", str(max_new)],
        env=env,
        capture_output=True,
        text=True,
    )
    last = res.stdout.strip().splitlines()[-1:] if res.returncode == 0 else []
    return json.loads(last[0]) if last else {"error": res.stderr[-300:] or "no output"}


def _same_texts(a: dict, b: dict) -> str:
    """``k/n texts`` identical between two sides' records (or why not compared)."""
    if "out" not in a or "out" not in b:
        return "not compared"
    from ckptsel.records.scan import read_frame

    key = ["step", "split", "item_id"]
    ga, gb = (read_frame(Path(r["out"]), "generations").sort_values(key) for r in (a, b))
    same = int((ga["text"].to_numpy() == gb["text"].to_numpy()).sum())
    return f"{same}/{len(ga)} texts"


# ----------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    ap.add_argument("--shapes", default=None, help="comma-separated: " + ", ".join(SHAPES))
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--out", type=Path, default=BENCHMARKS_MD, help="the markdown file to update")
    ap.add_argument("--in-process", action="store_true", help="throughput sides in this process")
    ap.add_argument("--throughput", action="store_true", help="only the decode throughput table (issue 37; ~8 min on one H100/H200)")
    ap.add_argument("--decode-work", default=None, help="items x new tokens, comma-separated (default: 256x64,1024x256; CPU: 64x64,64x256)")
    ap.add_argument(
        "--sides", default=None, help="comma-separated, of: " + ", ".join(dt.SIDES) + " (default: all; before only on the first work)"
    )
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:  # a throughput side in its own process
        print(json.dumps(side(args.side, json.loads(args.work), args.device, args.max_new_tokens)))
        return 0
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device (use --device cpu --quick to try the script)")
        return 2
    os.environ["CKPTSEL_GPU_CHECK_DEVICE"] = args.device
    cpu = not args.device.startswith("cuda")
    if args.throughput:
        return decode_throughput(args, cpu)
    shapes = (args.shapes or ("tiny" if cpu or args.quick else "qwen3-1.7b,llama3-8b")).split(",")
    max_new = args.max_new_tokens or (16 if args.quick else 128)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as td:
        root = Path(td)
        arch = arch_matrix(args.device, args.quick)
        agree = record_agreement(args.device, root)
        tput = [row for s in shapes for row in throughput(s, args.device, root, max_new, args.in_process or cpu)]
        swaps = weights_in(shapes[0], args.device, root, max_new, args.in_process or cpu)
    write(args, arch, agree, tput, swaps, time.perf_counter() - t0, max_new)
    return 0


def decode_throughput(args, cpu: bool) -> int:
    """``--throughput``: the decode table (``decode_throughput.py``) as its own section of
    ``--out`` (``decode_throughput`` on a GPU, ``decode_throughput_cpu`` on the CPU)."""
    import torch
    import transformers

    shapes = (args.shapes or ("small" if cpu else "qwen3-1.7b,llama3-8b")).split(",")
    plan = dt.parse_work(args.decode_work or ("64x64,64x256" if cpu else "256x64,1024x256"))
    sides = args.sides.split(",") if args.sides else list(dt.SIDES)
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as td:
        for shape in shapes:
            for k, work in enumerate(plan):  # today's loop only on the first work (it is slow)
                chosen = [s for s in sides if s != "before" or k == 0 or args.sides]
                rows += dt.throughput_rows(shape, args.device, [work], chosen, Path(td))
    device = torch.cuda.get_device_name(0) if not cpu else "CPU"
    threads = "" if not cpu else f", {torch.get_num_threads()} torch threads"
    flag = " --device cpu" if cpu else ""
    body = f"""## Decode throughput (`benchmarks/gpu_check.py --throughput{flag}`)

Device: {device}{threads}; torch {torch.__version__}, transformers {transformers.__version__};
vLLM {"installed" if dt.have_vllm() else "not installed"}; {time.perf_counter() - t0:.0f} s.
Random weights, one random LoRA adapter (r=16, q/k/v/o, unmerged), EOS planted so rows stop
at spread steps (about half the window); {"bfloat16" if not cpu else "float32"}. `before`:
today's loop (fixed batches, finished rows padded); `after`: continuous batching,
`--batch-size auto`; both texts + NLL; the others texts only. tokens/s: the `hf static`
side's generated tokens (else `hf-generate-batch`'s) over each side's seconds; bandwidth bound: see
`benchmarks/decode_throughput.py`.

{dt.table(rows, "before")}

{dt.gains(rows)}
"""
    print(body)
    if not args.out.exists():
        args.out.write_text("# Benchmarks\n")
    update_section("decode_throughput" + ("_cpu" if cpu else ""), body, path=args.out)
    return 0


def write(args, arch: list[str], agree: list[str], tput: list[str], swaps: list[str], seconds: float, max_new: int) -> None:
    import torch
    import transformers

    device = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    vllm_v = __import__("vllm").__version__ if have("vllm") else "not installed"
    nl = "\n"
    body = f"""## GPU check (`benchmarks/gpu_check.py`)

Device: {device}; torch {torch.__version__}, transformers {transformers.__version__}, vLLM
{vllm_v}, flash-attn {"yes" if have("flash_attn") else "no"}; {seconds:.0f} s{" (--quick)" if args.quick else ""}.

Architectures (bf16 on a GPU, float32 on the CPU; unmerged LoRA; texts equal to `generate` on
each unpadded prompt; ckptsel should be no worse than HF batched):

| family | attention | ckptsel | HF batched generate |
|---|---|---:|---:|
{nl.join(arch)}

HF vs vLLM records, tiny LoRA run (`measure --backend hf` vs `--backend vllm`):

| dtype | texts identical | NLL max rel. difference |
|---|---:|---:|
{nl.join(agree)}

Throughput (random weights, one random LoRA adapter r=16, {max_new} new tokens, generation +
NLL; tokens/s = raw vLLM's generated tokens over each side's time; engine start apart):

| shape | side | items/s | tokens/s | engine start | peak memory |
|---|---|---:|---:|---:|---:|
{nl.join(tput)}

How a full-fine-tuning trajectory's weights get in (3 full checkpoints of the first shape, 32
items, {max_new} new tokens; starts = fresh models/engines, swaps = checkpoints swapped into the
one running, proven by checksums; time each; records of the pair compared):

| shape | engine | how | measure_run | starts | each | swaps | each | peak memory | records |
|---|---|---|---:|---:|---:|---:|---:|---:|---|
{nl.join(swaps)}
"""
    print(body)
    if not args.out.exists():
        args.out.write_text("# Benchmarks\n")
    update_section("gpu_check", body, path=args.out)


if __name__ == "__main__":
    sys.exit(main())
