"""The conformance check and the model families on a GPU (issue 29 on real hardware).

For every family of ``tests/archmodels.py`` (the architecture matrix, state-space, hybrid,
LongRoPE, dynamic RoPE, RecurrentGemma), random weights under an unmerged LoRA adapter, in
bfloat16 and float32 on the CUDA device: the conformance check's verdict
(:func:`ckptsel.measure.check_conformance`, a fresh verdict cache) and its seconds, and whether
ckptsel's texts equal unbatched ``generate`` on each prompt. A correct family refused in bf16 would
block GPU users; a refused float32 family is a real finding. Then, at the Qwen3-1.7B shape
(bf16, random weights + LoRA r=16), the check's seconds beside measuring 256 items.

Usage on the GPU box (ckptsel on ``PYTHONPATH``)::

    python benchmarks/gpu_conformance.py --out gpu_conformance.md [--budget-s 240]

``--device cpu --families llama`` runs the same code on the CPU (the tests do), so it cannot rot.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def family_rows(device: str, families: list[str], dtypes: list[str], deadline: float) -> list[str]:
    """Markdown rows: family, attention, dtype, verdict, check seconds, texts equal."""
    import torch

    from ckptsel.errors import CkptselError
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.conformance import check_conformance
    from ckptsel.measure.passes import measure_items
    from ckptsel.measure.tokens import stop_token_ids

    import archmodels as am

    tok = am.tokenizer()
    prompts, responses = am.items(8)
    items = [type("Item", (), {"instruction": p, "response": r})() for p, r in zip(prompts, responses, strict=True)]
    rows = []
    for family in families:
        for attn in am.attentions(family):
            for dt in dtypes:
                if time.perf_counter() > deadline:
                    rows.append(f"| {family} | {attn} | {dt} | not run: time budget spent | | |")
                    continue
                dtype = getattr(torch, dt)
                try:
                    model = am.add_lora(am.build(family, tok, attn=attn, dtype=dtype)).to(device)
                except Exception as err:  # a family this transformers lacks, or PEFT refuses
                    rows.append(f"| {family} | {attn} | {dt} | not built: {type(err).__name__}: {str(err).splitlines()[0][:80]} | | |")
                    continue
                config = MeasureConfig("gsm8k", max_new_tokens=16, device=device)
                t0 = time.perf_counter()
                try:
                    verdict = check_conformance(model, tok, items, config, device=device)
                    verdict = "passed"
                except CkptselError as err:
                    verdict = "**refused**: " + str(err).split(" — ")[0][:110]
                except Exception as err:  # a crash is a finding
                    verdict = f"**crash**: {type(err).__name__}: {str(err).splitlines()[0][:90]}"
                seconds = time.perf_counter() - t0
                stops = stop_token_ids(model, tok)
                try:
                    ref = [am.generate_one(model, tok, p, 16, stops, device) for p in prompts]
                    texts, _ = measure_items(model, tok, prompts, responses, batch_size=8, max_new_tokens=16, device=device)
                    same = f"{sum(a == b for a, b in zip(texts, ref, strict=True))}/{len(ref)}"
                except Exception as err:
                    same = f"crash: {type(err).__name__}"
                rows.append(f"| {family} | {attn} | {dt} | {verdict} | {seconds:.2f} | {same} |")
                print(rows[-1], flush=True)
                del model
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
    return rows


def real_shape(device: str) -> list[str]:
    """The check's cost at the Qwen3-1.7B shape beside measuring 256 items (bf16)."""
    from peft import LoraConfig, get_peft_model

    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.conformance import check_conformance
    from ckptsel.measure.passes import measure_items

    import archmodels as am

    sys.path.insert(0, str(HERE))
    from gpu_check import random_model

    model, tok = random_model("qwen3-1.7b" if device.startswith("cuda") else "tiny", device)
    lora = LoraConfig(r=16, lora_alpha=32, init_lora_weights=False, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = get_peft_model(model, lora).eval()
    prompts, responses = am.items(256)
    items = [type("Item", (), {"instruction": p, "response": r})() for p, r in zip(prompts, responses, strict=True)]
    config = MeasureConfig("gsm8k", max_new_tokens=64, device=device)
    t0 = time.perf_counter()
    try:
        check_conformance(model, tok, items, config, device=device)
        verdict = "passed"
    except Exception as err:
        verdict = "**refused**: " + str(err).split(" — ")[0][:110]
    check_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    measure_items(model, tok, prompts, responses, batch_size=32, max_new_tokens=64, device=device)
    measure_s = time.perf_counter() - t0
    shape = "qwen3-1.7b" if device.startswith("cuda") else "tiny"
    return [
        f"| {shape} | {str(model.dtype).split('.')[-1]} | {verdict} | {check_s:.1f} s | "
        f"{measure_s:.1f} s (256 items, 64 new tokens, batch 32) |"
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--families", default=None, help="comma-separated (default: all)")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--budget-s", type=float, default=240.0, help="time for the family rows")
    ap.add_argument("--no-real-shape", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here")
    args = ap.parse_args(argv)
    import torch
    import transformers

    import archmodels as am

    os.environ["CKPTSEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="ckptsel-conformance-")
    families = args.families.split(",") if args.families else list(am.FAMILIES)
    deadline = time.perf_counter() + args.budget_s
    rows = family_rows(args.device, families, args.dtypes.split(","), deadline)
    shape = [] if args.no_real_shape else real_shape(args.device)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    nl = "\n"
    body = f"""Device: {name}; torch {torch.__version__}, transformers {transformers.__version__}.

| family | attention | dtype | conformance check | check s | ckptsel texts = `generate` |
|---|---|---|---|---:|---:|
{nl.join(rows)}

| shape | dtype | conformance check | check | measuring |
|---|---|---|---:|---|
{nl.join(shape)}
"""
    print(body)
    if args.out:
        args.out.write_text(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
