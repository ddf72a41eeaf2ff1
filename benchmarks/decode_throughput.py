"""Decode throughput of the Hugging Face path (issue 37): ``gpu_check.py --throughput``.

One model per shape (random weights, one random LoRA adapter r=16 on q/k/v/o, unmerged), the
end-of-sequence row of its output embedding planted (``archmodels.plant_eos``) so that greedy
rows stop after about half the window, each at its own step, and GSM8K-format items. On that
same model and items, each side:

* ``ckptsel before``: :func:`ckptsel.measure.measure_items` with ``continuous=False``, today's
  loop (fixed batches of 32 on a GPU, 16 on the CPU, finished rows padded until the longest
  ends), texts + NLL;
* ``ckptsel after``: ``measure_items`` as ckptsel runs it now (continuous batching,
  ``--batch-size auto``), texts + NLL, and ``texts only``;
* ``ckptsel paged``: ``measure_items`` with ``--decoder transformers`` (the texts from
  transformers' continuous batching, the NLL from ckptsel's forward), ``auto``, texts + NLL;
* ``hf static``: HF's batched ``generate``, left-padded, ``cache_implementation="static"`` (on a
  GPU transformers compiles its decode step: CUDA graphs), texts only, the ``auto`` rows;
* ``hf generate_batch``: transformers' continuous batching (paged attention), texts only;
* ``vllm``: raw vLLM ``generate`` with the adapter (its own process), when vLLM is installed.

Reported: items/s, generated tokens/s (the ``hf static`` side's generated tokens, else
``hf generate_batch``'s when ``hf static`` is not among the sides, stop token included, over
each side's seconds), peak GPU memory, the rows decoded together and the
fraction of the bandwidth bound: generated tokens/s over ``rows × BW / (weight bytes + rows ×
context × KV bytes per token)`` (each decode step reads the weights once and every row's
cache; BW the card's peak from :data:`BANDWIDTH_TBS`, context the mean prompt plus half the
window), a rough ceiling for a decode that moves nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BANDWIDTH_TBS = {"h200": 4.8, "h100": 3.35, "a100": 2.0, "l40s": 0.864, "a10": 0.6}  # peak HBM
SIDES = ("before", "after", "after-texts", "paged", "hf-static", "hf-generate-batch", "vllm")
BEFORE_ROWS = {"cuda": 32, "cpu": 16}  # the first GPU run's batch; the CPU default


def parse_work(text: str) -> list[tuple[int, int]]:
    """``"256x64,1024x256"`` -> ``[(256, 64), (1024, 256)]`` (items x new tokens)."""
    out = []
    for part in text.split(","):
        n, new = part.lower().split("x")
        out.append((int(n), int(new)))
    return out


def build(shape: str, device: str, n_items: int, max_new: int) -> dict[str, Any]:
    """The model of ``shape`` under one LoRA adapter, EOS planted for stops at about half of
    ``max_new``, and ``n_items`` prompts and responses."""
    import torch
    from gpu_check import random_model
    from peft import LoraConfig, get_peft_model

    from ckptsel.data.prompts import format_prompt

    import archmodels as am
    from tinyrun import make_gsm8k_rows

    model, tok = random_model(shape, device)
    lora = LoraConfig(
        r=16, lora_alpha=32, init_lora_weights=False, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    torch.manual_seed(1)
    model = get_peft_model(model, lora).eval()
    rows = make_gsm8k_rows(n_items, seed=3)
    prompts = [format_prompt(r["question"]) for r in rows]
    responses = [r["answer"] for r in rows]
    am.plant_eos(model, tok, prompts[:16], max_new)
    return {"model": model, "tok": tok, "prompts": prompts, "responses": responses}


def _texts(tok: Any, rows: list[list[int]], stops: list[int]) -> tuple[list[str], int]:
    """Texts cut at the first stop, and the generated tokens counted up to it (included)."""
    texts, n = [], 0
    for g in rows:
        cut = next((k for k, t in enumerate(g) if t in stops), None)
        n += len(g) if cut is None else cut + 1
        texts.append(tok.decode(g[: len(g) if cut is None else cut], skip_special_tokens=True))
    return texts, n


def hf_static(work: dict, max_new: int, rows: int, device: str) -> dict[str, Any]:
    """HF batched ``generate`` over a static cache, left-padded, ``rows`` prompts a call."""
    import torch
    from transformers import GenerationConfig

    from ckptsel.measure.tokens import stop_token_ids

    model, tok = work["model"], work["tok"]
    stops = stop_token_ids(model, tok)
    cfg = GenerationConfig(
        max_new_tokens=max_new, do_sample=False, eos_token_id=stops, pad_token_id=tok.pad_token_id, cache_implementation="static"
    )
    side, tok.padding_side = tok.padding_side, "left"
    out: list[list[int]] = []
    # every call padded to the longest prompt: one static cache shape, compiled once
    width = max(len(tok(p)["input_ids"]) for p in work["prompts"])
    try:
        with torch.inference_mode():
            for k in range(0, len(work["prompts"]), rows):
                enc = tok(work["prompts"][k : k + rows], return_tensors="pt", padding="max_length", max_length=width)
                enc = {key: v.to(device) for key, v in enc.items()}
                res = model.generate(**enc, generation_config=cfg)
                out += res[:, enc["input_ids"].shape[1] :].tolist()
    finally:
        tok.padding_side = side
    texts, n = _texts(tok, out, stops)
    return {"texts": texts, "new_tokens": n, "rows": rows}


def hf_generate_batch(work: dict, max_new: int, device: str) -> dict[str, Any]:
    """transformers' continuous batching (``generate_batch``, paged attention): sized by
    transformers from free GPU memory; on the CPU a small paged cache (its default sizing
    there takes a minute for nothing)."""
    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from ckptsel.measure.tokens import stop_token_ids

    model, tok = work["model"], work["tok"]
    stops = stop_token_ids(model, tok)
    cfg = GenerationConfig(max_new_tokens=max_new, do_sample=False, eos_token_id=stops, pad_token_id=tok.pad_token_id)
    cb = (
        None
        if device.startswith("cuda")
        else ContinuousBatchingConfig(num_blocks=64, page_size=64, max_batch_tokens=1024, max_requests_per_batch=16)
    )
    ids = [tok(p)["input_ids"] for p in work["prompts"]]
    with torch.inference_mode():
        res = model.generate_batch(inputs=ids, generation_config=cfg, continuous_batching_config=cb, progress_bar=False)
    order = sorted(res, key=lambda k: int(k.rsplit("_", 1)[-1]))
    texts, n = _texts(tok, [list(res[k].generated_tokens) for k in order], stops)
    return {"texts": texts, "new_tokens": n, "rows": None}


def ckptsel_side(work: dict, max_new: int, name: str, device: str) -> dict[str, Any]:
    """``measure_items`` as before (fixed batches), after (continuous, ``auto``) or paged
    (``--decoder transformers``, ``auto``)."""
    from ckptsel.measure.passes import batch_plan, measure_items
    from ckptsel.measure.tokens import encode_prompts, encode_responses

    kind = "cuda" if device.startswith("cuda") else "cpu"
    before = name == "before"
    size: int | str = BEFORE_ROWS[kind] if before else "auto"
    responses = None if name == "after-texts" else work["responses"]
    fed = encode_prompts(work["tok"], work["prompts"])
    if responses is not None:
        answers = encode_responses(work["tok"], responses)
        fed = [p + a[:-1] for p, a in zip(fed, answers, strict=True)]
    rows = batch_plan(work["model"], size, fed, max_new)[0]  # what measure_items will plan
    decoder = "transformers" if name == "paged" else "ckptsel"
    texts, _ = measure_items(
        work["model"],
        work["tok"],
        work["prompts"],
        responses,
        batch_size=size,
        max_new_tokens=max_new,
        continuous=not before,
        decoder=decoder,
    )
    return {"texts": texts, "rows": "auto" if decoder == "transformers" and kind == "cuda" else rows}


def timed(fn: Any, device: str) -> dict[str, Any]:
    """``fn()``'s dict plus ``seconds`` and ``peak_gib`` (GPU), or ``error``."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the previous side's cached blocks: free for this one
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        res = fn()
    except Exception as err:  # a failing side is a finding: report it, go on
        return {"error": f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}"}
    if cuda:
        torch.cuda.synchronize()
        res.setdefault("peak_gib", torch.cuda.max_memory_allocated() / 2**30)
    res.setdefault("seconds", time.perf_counter() - t0)  # vLLM's: its generate call only
    return res


def bound_fraction(work: dict, res: dict, tokens: int, device: str) -> str:
    """Generated tokens/s over the bandwidth bound at the side's rows (module doc)."""
    import torch

    if not device.startswith("cuda") or not res.get("rows"):
        return "–"
    name = torch.cuda.get_device_name(0).lower()
    bw = next((v for k, v in BANDWIDTH_TBS.items() if k in name), None)
    if bw is None:
        return "–"
    model = work["model"]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    cfg = model.get_base_model().config
    heads = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = 2 * cfg.num_hidden_layers * heads * head_dim * 2
    ctx = sum(len(work["tok"](p)["input_ids"]) for p in work["prompts"]) / len(work["prompts"])
    ctx += res["max_new"] / 2
    rows = res["rows"]
    bound = rows * bw * 1e12 / (weights + rows * ctx * kv)
    return f"{tokens / res['seconds'] / bound:.0%}"


def run_vllm(work: dict, max_new: int, root: Path) -> dict[str, Any]:
    """Raw vLLM on the same model, adapter and prompts, in its own process (it keeps GPU
    memory until its process ends): the model and adapter are saved under ``root`` first."""
    import torch

    from ckptsel.measure.tokens import stop_token_ids

    model, tok = work["model"], work["tok"]
    base, adapter = root / "base", root / "adapter"
    inner = model.get_base_model()  # LoRA layers injected: save the plain weights
    plain = {k.replace(".base_layer.", "."): v for k, v in inner.state_dict().items() if "lora_" not in k}
    inner.save_pretrained(base, state_dict=plain)
    tok.save_pretrained(base)
    model.save_pretrained(adapter)
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()  # this process keeps its model: vLLM gets the rest
    job = {
        "base": str(base),
        "adapter": str(adapter),
        "max_new": max_new,
        "util": round(max(0.1, free / total - 0.05), 3),
        "stops": stop_token_ids(model, tok),
        "prompts": [tok(p)["input_ids"] for p in work["prompts"]],
    }
    (root / "job.json").write_text(json.dumps(job))
    res = subprocess.run([sys.executable, __file__, str(root / "job.json")], capture_output=True, text=True)
    last = res.stdout.strip().splitlines()[-1:] if res.returncode == 0 else []
    if not last:
        raise RuntimeError((res.stderr.strip().splitlines() or ["no output"])[-1][:160])
    out = json.loads(last[0])
    texts, _ = _texts(tok, out.pop("tokens"), job["stops"])
    return {**out, "texts": texts}


def _vllm_main(job_file: str) -> None:
    """The vLLM process: start, generate with the adapter, print seconds and tokens."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    job = json.loads(Path(job_file).read_text())
    longest = max(map(len, job["prompts"])) + job["max_new"]
    llm = LLM(
        model=job["base"],
        dtype="bfloat16",
        seed=0,
        max_model_len=longest,
        enable_lora=True,
        max_loras=1,
        max_lora_rank=16,
        gpu_memory_utilization=job["util"],
        enable_prefix_caching=True,
        max_num_seqs=1024,
    )
    params = SamplingParams(temperature=0.0, max_tokens=job["max_new"], ignore_eos=True, stop_token_ids=job["stops"], detokenize=False)
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in job["prompts"]], params, lora_request=LoRARequest("a", 1, job["adapter"]), use_tqdm=False
    )
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps({"seconds": seconds, "peak_gib": peak, "rows": 1024, "tokens": [list(o.outputs[0].token_ids) for o in outs]}))


def have_vllm() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def throughput_rows(shape: str, device: str, work_plan: list[tuple[int, int]], sides: list[str], root: Path) -> list[str]:
    """Markdown rows for ``shape``: per (items, new tokens), each side (module doc)."""
    import torch

    rows = []
    for n_items, max_new in work_plan:
        rows += _one_work(shape, device, n_items, max_new, sides, root)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def _one_work(shape: str, device: str, n_items: int, max_new: int, sides: list[str], root: Path) -> list[str]:
    work = build(shape, device, n_items, max_new)
    got: dict[str, dict] = {}
    for name in sides:
        if name == "vllm":
            if not have_vllm() or not device.startswith("cuda"):
                why = "vllm is not installed" if not have_vllm() else "GPU only"
                got[name] = {"skip": why}
            else:
                where = root / f"{shape}-{n_items}-{max_new}"
                got[name] = timed(lambda w=where: run_vllm(work, max_new, w), device)
        elif name in ("before", "after", "after-texts", "paged"):
            got[name] = timed(lambda n=name: ckptsel_side(work, max_new, n, device), device)
        elif name == "hf-static":
            rows_auto = got.get("after", {}).get("rows") or BEFORE_ROWS["cpu"]
            got[name] = timed(lambda r=rows_auto: hf_static(work, max_new, r, device), device)
        elif name == "hf-generate-batch":
            got[name] = timed(lambda: hf_generate_batch(work, max_new, device), device)
        else:
            raise SystemExit(f"unknown side {name!r}: use {', '.join(SIDES)}")
        got[name]["max_new"] = max_new
        shown = {k: v for k, v in got[name].items() if k != "texts"}
        print(shape, n_items, max_new, name, shown, flush=True)
    return _rows(shape, work, got, n_items, max_new, device)


def _rows(shape: str, work: dict, got: dict, n_items: int, max_new: int, device: str) -> list[str]:
    ref = next((got[k] for k in ("hf-static", "hf-generate-batch") if "new_tokens" in got.get(k, {})), None)
    tokens = ref["new_tokens"] if ref else None
    first = got.get("before") if "texts" in got.get("before", {}) else ref
    out = []
    for name, res in got.items():
        head = f"| {shape} | {n_items} | {max_new} | {name} |"
        if "error" in res or "skip" in res:
            why = f"**failed**: {res['error']}" if "error" in res else f"skipped: {res['skip']}"
            out.append(f"{head} {why} | | | | | | |")
            continue
        ips = n_items / res["seconds"]
        ips_s = f"{ips:.2f}" if ips < 10 else f"{ips:.1f}"
        tps = f"{tokens / res['seconds']:.0f}" if tokens else "–"
        mem = f"{res['peak_gib']:.1f} GiB" if "peak_gib" in res else "–"
        frac = bound_fraction(work, res, tokens, device) if tokens else "–"
        same = "–"
        if first is not None and "texts" in res:
            k = sum(a == b for a, b in zip(res["texts"], first["texts"], strict=True))
            same = f"{k}/{n_items}"
        rows = res.get("rows") or "auto"
        out.append(f"{head} {ips_s} | {tps} | {mem} | {rows} | {frac} | {same} | {res['seconds']:.1f} s |")
    return out


def gains(rows: list[str]) -> str:
    """One line read from the rows: ``after`` over ``before`` items/s per work (both texts +
    NLL, the same model and items: the ratio of their seconds), ``after-texts`` over
    ``hf-static``, and ``paged`` (``--decoder transformers``) over ``after``."""
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    ips: dict[tuple[str, ...], dict[str, float]] = {}
    for c in cells:
        try:
            ips.setdefault(tuple(c[:3]), {})[c[3]] = 1.0 / float(c[-1].removesuffix(" s"))
        except (ValueError, IndexError, ZeroDivisionError):
            continue  # a failed or skipped side
    parts = []
    for (shape, n, new), got in ips.items():
        if "after" not in got:
            continue
        said = [f"{got['after'] / got['before']:.2f}× today's loop"] if "before" in got else []
        if "hf-static" in got and "after-texts" in got:
            said.append(f"texts only {got['after-texts'] / got['hf-static']:.2f}× HF static")
        if "paged" in got:
            said.append(f"--decoder transformers {got['paged'] / got['after']:.2f}× ckptsel's decoder")
        if said:
            parts.append(f"{shape} {n} items × {new} tokens: " + ", ".join(said))
    if not parts:
        return "Continuous batching (`after`, items/s): no pair measured."
    return "Continuous batching (`after`, items/s): " + "; ".join(parts) + "."


def table(rows: list[str], first: str) -> str:
    """The section's table (``first``: the side the texts are compared with)."""
    return (
        "| shape | items | new tokens | side | items/s | tokens/s | peak memory | rows | "
        f"of bandwidth bound | texts = {first} (else hf-static, else hf-generate-batch) | seconds |\n"
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows)
    )


if __name__ == "__main__":
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    _vllm_main(sys.argv[1])
