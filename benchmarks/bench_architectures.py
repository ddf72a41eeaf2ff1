"""Every architecture, float32 and bfloat16: ckptsel's pass against ``generate`` (issue 20, part 4).

The families of ``tests/archmodels.py`` (tiny random Llama, Qwen2 (+ sliding window), Qwen3,
Mistral-SW, Gemma-2/3, Phi-3-SW, Qwen3-MoE, Mixtral-SW; 2 layers, hidden 64, window 16 where
set: shorter than most items) under an unmerged LoRA adapter, eager and sdpa. Per family,
attention and dtype, on the same prompts: how many texts equal ``model.generate`` on each
unpadded prompt, for

* ckptsel's real call (NLL + generation in one pass, ``measure_items`` with responses),
* ckptsel generating only,
* HF's own batched ``generate`` (left-padded, the same batch size): the baseline a user has,

and, in float32, the largest relative NLL difference to an unpadded forward. float32 must be
exact (it is tested in ``tests/measure/test_architectures.py``); in bfloat16, batched rounding differs
from unbatched, and the target is ckptsel no worse than HF batched generation: judged per row
and pooled item by item (the items only one side gets right, with an exact sign test). Main venv::

    python benchmarks/bench_architectures.py [--items 32] [--max-new-tokens 24] [--no-write]
    python benchmarks/bench_architectures.py --quick

``--quick``: the issue-29 families only, 8 items, 12 new tokens, printed (not written to
BENCHMARKS.md): 74 s of CPU (3.0 min wall on a shared 2-core machine).

The issue-29 families (state-space, hybrid, RecurrentGemma, LongRoPE and dynamic RoPE crossing
their boundary at 48 positions) run with eager attention only, LoRA off the Mamba mixers'
``out_proj``/``conv1d`` (PEFT refuses those).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, update_section  # noqa: E402


def run_case(family: str, attn: str, dtype, tok, data, args) -> dict:
    """One family x attention x dtype: the agreement counts (and float32 NLL error)."""
    import torch

    from ckptsel.measure.passes import measure_items
    from ckptsel.measure.tokens import stop_token_ids

    import archmodels as am

    prompts, responses = data
    model = am.add_lora(am.build(family, tok, attn=attn, dtype=dtype))
    stops = stop_token_ids(model, tok)
    ref = [am.generate_one(model, tok, p, args.max_new_tokens, stops) for p in prompts]
    kw = dict(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    both, scored = measure_items(model, tok, prompts, responses, windows=(40, 0), **kw)
    alone, _ = measure_items(model, tok, prompts, **kw)
    hf = am.generate_batched(model, tok, prompts, args.max_new_tokens, stops, args.batch_size)
    same = lambda texts: [a == b for a, b in zip(texts, ref, strict=True)]  # noqa: E731
    out = {"both": same(both), "alone": same(alone), "hf": same(hf), "n": len(prompts)}
    if dtype == torch.float32:
        err = 0.0
        for p, r, s in zip(prompts, responses, scored, strict=True):
            for w in (40, 0):
                want, _ = am.direct_nll(model, tok, p, r, w)
                if want:
                    err = max(err, abs(s[w].nll_sum - want) / abs(want))
        out["nll_err"] = err
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--quick", action="store_true", help="issue-29 families, 8 items, 12 tokens")
    ap.add_argument("--families", nargs="*", help="only these (default: every family)")
    args = ap.parse_args()
    if args.quick:
        args.items, args.max_new_tokens, args.no_write = 8, 12, True
    import torch

    import archmodels as am

    torch.set_num_threads(1)
    tok, data = am.tokenizer(), am.items(args.items)
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    rows = []
    names = args.families or (list(am.SEAM_FAMILIES) if args.quick else list(am.FAMILIES))
    for family in names:
        for attn in am.attentions(family):
            res = {d: run_case(family, attn, getattr(torch, d), tok, data, args) for d in ("float32", "bfloat16")}
            rows.append((family, attn, res))
            print(family, attn, res, flush=True)
    report(args, rows, time.perf_counter() - t0, load0)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test on the discordant pairs (ties dropped)."""
    from math import comb

    m = wins + losses
    if m == 0:
        return 1.0
    tail = sum(comb(m, i) for i in range(min(wins, losses) + 1)) / 2**m
    return min(1.0, 2 * tail)


def paired_line(rows, side: str) -> str:
    """Pooled bf16 agreement of ckptsel's ``side`` against HF batched, item by item."""
    pairs = [(a, h) for _, _, res in rows for a, h in zip(res["bfloat16"][side], res["bfloat16"]["hf"], strict=True)]
    ours, theirs = sum(a for a, _ in pairs), sum(h for _, h in pairs)
    wins, losses = sum(a and not h for a, h in pairs), sum(h and not a for a, h in pairs)
    return (
        f"{ours}/{len(pairs)} vs HF batched {theirs}/{len(pairs)}; items only ckptsel got "
        f"right {wins}, only HF batched {losses} (two-sided sign test p = "
        f"{sign_test(wins, losses):.2f})"
    )


def report(args, rows, seconds: float, load0: float) -> None:
    import torch
    import transformers

    n = args.items
    lines = []
    worse = []
    for family, attn, res in rows:
        res = {d: {k: sum(v) if isinstance(v, list) else v for k, v in r.items()} for d, r in res.items()}
        f, b = res["float32"], res["bfloat16"]
        lines.append(
            f"| {family} | {attn} | {f['both']}/{n}, {f['alone']}/{n}, {f['hf']}/{n} | "
            f"{f['nll_err']:.1e} | {b['both']}/{n} | {b['alone']}/{n} | {b['hf']}/{n} |"
        )
        if b["both"] < b["hf"]:
            worse.append(f"{family}/{attn} ({b['both']} vs {b['hf']})")
    f32 = [(fam, at, {k: sum(v) if isinstance(v, list) else v for k, v in r["float32"].items()}) for fam, at, r in rows]
    exact = all(f["both"] == f["alone"] == n for _, _, f in f32)
    off = [f"{fam}/{at} ({f['both']}/{n}; HF batched {f['hf']}/{n})" for fam, at, f in f32 if min(f["both"], f["alone"]) < n]
    as_hf = all(min(f["both"], f["alone"]) >= f["hf"] for _, _, f in f32)
    nll_ok = all(f["nll_err"] <= 1e-6 for _, _, f in f32)
    f32_line = (
        "every text identical to unbatched `generate`"
        if exact
        else f"texts identical to unbatched `generate` except {', '.join(off)}: a near-tie that "
        f"batching flips{' for HF’s own batched `generate` too' if as_hf else ''}"
    ) + ("; every NLL equal to an unpadded forward's within 1e-6 relative" if nll_ok else "; NLL errors above 1e-6 (see the table)")
    body = f"""## Every architecture, float32 and bfloat16 (`benchmarks/bench_architectures.py`)

{machine()}; torch {torch.__version__}, transformers {transformers.__version__}; one thread;
{seconds:.0f} s (1-min load average {load0:.1f}). Tiny random models (2 layers, hidden 64,
sliding window 16 where set, shorter than most items) under an unmerged LoRA adapter (rank 8,
random A and B); {n} prompts of 3 to 70 tokens, responses of 3 to 40, {args.max_new_tokens} new
tokens, batch {args.batch_size}. Each cell: texts equal to `model.generate` on the one unpadded
prompt (same dtype). "ckptsel" is the real call (NLL + generation, one pass; sliding-window
families whose items outgrow the window take the split mode); "gen only" is ckptsel without NLL;
"HF batched" is `model.generate` on left-padded batches of the same size.

| family | attention | float32: ckptsel, gen only, HF batched | float32 NLL max rel. err | bf16 ckptsel | bf16 gen only | bf16 HF batched |
|---|---|---|---:|---:|---:|---:|
{chr(10).join(lines)}

float32: {f32_line}.
bfloat16: batched rounding depends on the batch's shape and mask (for HF's own `generate` too).
ckptsel's real call has at least HF batched generation's count in {len(rows) - len(worse)} of {len(rows)} rows{"" if not worse else " (fewer: " + ", ".join(worse) + ")"}.
Pooled over every row, item by item — ckptsel: {paired_line(rows, "both")}; gen only: {paired_line(rows, "alone")}.
Gemma-2 has no sdpa in transformers (attention soft-capping): eager only.
"""
    print(body)
    if not args.no_write:
        update_section("bench_architectures", body)


if __name__ == "__main__":
    main()
