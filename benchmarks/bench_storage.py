"""Benchmark of checkpoints on object storage and of the watcher (issue 21).

1. **S3 vs a local folder.** The ``bench_measure`` sweep (11 LoRA checkpoints, 1,000 items,
   batch 32, up to 16 new tokens) measured from a local folder into a local records folder,
   then from a local S3 server (moto, in a child process on 127.0.0.1) into S3, with a cold
   node cache; alternated ``--repeats`` times. Also a re-run with nothing left to measure (all
   I/O: listing, checks, part caches, units), and the records compared byte for byte.
2. **The watcher's lag.** A writer copies checkpoints into a run folder (local or S3) as a
   trainer writes them (file by file, ``trainer_state.json`` last, one every ``--every``
   seconds) while ``watch_run`` watches; the lag is the time from a checkpoint's last file
   to its measurement starting, and to its records being in.

Writes the ``bench_storage`` section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_storage.py [--items 1000] [--checkpoints 11] [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, update_section  # noqa: E402

SERVER = """
import logging, sys, threading
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
done.wait(float(sys.argv[1]))
server.stop()
"""
ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextlib.contextmanager
def moto_process(lifetime_s: float = 3600) -> Iterator[str]:
    """moto's S3 server in a child process (not sharing this process's GIL), 127.0.0.1 only;
    it exits when this process closes its stdin or after ``lifetime_s``."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(lifetime_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        endpoint = proc.stdout.readline().strip()
        if not endpoint.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"moto did not start: {endpoint!r}")
        yield endpoint
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def same_units(a: str | Path, b: str | Path) -> bool:
    from ckptsel.records.units import list_units

    for kind in ("generations", "nll", "texts"):
        ua, ub = list_units(a, kind), list_units(b, kind)
        if [(u.trajectory, u.step) for u in ua] != [(u.trajectory, u.step) for u in ub]:
            return False
        if any(x.path.read_bytes() != y.path.read_bytes() for x, y in zip(ua, ub, strict=True)):
            return False
    return True


def sweep(run, urls: dict[str, str], tmp: Path, args, fs, bucket: str) -> dict:
    """The bench_measure sweep from the local folder and from S3, alternated; seconds."""
    from ckptsel._util import nodecache
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    config = MeasureConfig("gsm8k", batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    local = {"validation": run.validation, "test": run.test, "run": run.run_dir, "base": None}
    out: dict[str, list[float]] = {"local": [], "s3": [], "local_rerun": [], "s3_rerun": []}
    extra: dict[str, list[float]] = {"downloads": [], "bytes": []}
    identical = True
    for rep in range(args.repeats):
        for where, src in (("local", local), ("s3", urls)):
            if where == "local":
                dest: str | Path = tmp / f"records-local-{rep}"
            else:
                dest = f"s3://{bucket}/records-{rep}"
                shutil.rmtree(nodecache.cache_root(), ignore_errors=True)  # a cold node cache
            before = dict(nodecache.STATS)
            t0 = time.perf_counter()
            res = measure_run(src["run"], config, validation=src["validation"], test=src["test"], out=dest, base=src["base"])
            out[where].append(time.perf_counter() - t0)
            if where == "s3":
                extra["downloads"].append(nodecache.STATS["downloads"] - before["downloads"])
                extra["bytes"].append(nodecache.STATS["bytes"] - before["bytes"])
            t0 = time.perf_counter()
            again = measure_run(src["run"], config, validation=src["validation"], test=src["test"], out=dest, base=src["base"])
            out[f"{where}_rerun"].append(time.perf_counter() - t0)
            assert again.measured_steps == [] and res.measured_steps == list(run.steps)
            print(f"{where} #{rep + 1}: {out[where][-1]:.1f} s, re-run {out[f'{where}_rerun'][-1]:.2f} s")
        identical &= same_units(tmp / f"records-local-{rep}", f"s3://{bucket}/records-{rep}")
    return {"seconds": out, "identical": identical, **extra}


class Writer(threading.Thread):
    """Copies checkpoints in as a Trainer writes them; notes when each one's last file landed."""

    def __init__(self, src: Path, put, every: float, pause: float):
        super().__init__(daemon=True)
        self.src, self.put, self.every, self.pause = src, put, every, pause
        self.done_at: dict[int, float] = {}

    def run(self) -> None:
        for folder in sorted(self.src.iterdir(), key=lambda p: int(p.name.split("-")[1])):
            step = int(folder.name.split("-")[1])
            files = sorted(p.name for p in folder.iterdir() if p.name != "trainer_state.json")
            for name in [*files, "trainer_state.json"]:
                data = (folder / name).read_bytes()
                if name == "trainer_state.json":
                    data = json.dumps({"global_step": step, "max_steps": self.last}).encode()
                self.put(f"{folder.name}/{name}", data)
                time.sleep(self.pause)
            self.done_at[step] = time.monotonic()
            time.sleep(self.every)

    @property
    def last(self) -> int:
        return max(int(p.name.split("-")[1]) for p in self.src.iterdir())


def lag(run, where: str, poll: float, settle: float, every: float, fs, bucket: str, tmp: Path) -> dict:
    """Watch a run being written; per checkpoint, seconds from its last file to measuring
    starting and to its records being in."""
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.watch import WatchSettings, watch_run

    tag = f"{where}-{poll:g}-{settle:g}"
    if where == "local":
        dest = tmp / f"watch-{tag}" / run.run_dir.name

        def put(rel: str, data: bytes) -> None:
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        run_url, out = str(dest), str(tmp / f"watch-records-{tag}")
    else:
        prefix = f"{bucket}/watch-{tag}/{run.run_dir.name}"

        def put(rel: str, data: bytes) -> None:
            fs.pipe_file(f"{prefix}/{rel}", data)

        run_url, out = f"s3://{prefix}", f"s3://{bucket}/watch-records-{tag}"
    started: dict[int, float] = {}
    recorded: dict[int, float] = {}

    def on_progress(event) -> None:
        if event.kind == "step":
            started.setdefault(event.step, time.monotonic())

    writer = Writer(run.run_dir, put, every=every, pause=0.05)
    writer.start()
    t0 = time.perf_counter()
    status = watch_run(
        run_url,
        MeasureConfig("gsm8k", batch_size=32, max_new_tokens=16),
        validation=run.validation,
        test=run.test,
        out=out,
        base=str(run.base),
        settings=WatchSettings(poll=poll, settle=settle, timeout=1800),
        on_progress=on_progress,
        after_checkpoint=lambda s: recorded.setdefault(s, time.monotonic()),
    )
    wall = time.perf_counter() - t0
    writer.join()
    assert status.state == "done", status
    to_start = [started[s] - writer.done_at[s] for s in writer.done_at]
    to_records = [recorded[s] - writer.done_at[s] for s in writer.done_at]
    print(f"watch {tag}: start lag {to_start}, records lag {to_records}")
    return {"where": where, "poll": poll, "settle": settle, "start": to_start, "records": to_records, "wall": wall, "n": len(to_start)}


def fmt(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--checkpoints", type=int, default=11)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--watch-checkpoints", type=int, default=4)
    ap.add_argument("--watch-items", type=int, default=200)
    ap.add_argument("--every", type=float, default=8.0, help="seconds between checkpoints (watch)")
    ap.add_argument("--no-default-settings", action="store_true", help="skip the poll 10 / settle 20 run")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from tinyrun import build_tiny_run

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_storage_") as tmp_s, moto_process() as endpoint:
        tmp = Path(tmp_s)
        os.environ.update(ENV, AWS_ENDPOINT_URL=endpoint, CKPTSEL_CACHE_DIR=str(tmp / "node-cache"))
        import s3fs

        fs = s3fs.S3FileSystem()
        bucket = "bench-storage"
        fs.mkdir(bucket)
        steps = tuple(25 * (k + 1) for k in range(args.checkpoints))
        run = build_tiny_run(tmp / "sweep", steps=steps, n_validation=args.items // 2, n_test=args.items - args.items // 2)
        t0 = time.perf_counter()
        fs.put(str(run.run_dir), f"{bucket}/runs/{run.run_dir.name}", recursive=True)
        fs.put(str(run.base), f"{bucket}/models/base", recursive=True)
        fs.put(str(run.validation), f"{bucket}/data/validation.jsonl")
        fs.put(str(run.test), f"{bucket}/data/test.jsonl")
        upload_s = time.perf_counter() - t0
        urls = {
            "run": f"s3://{bucket}/runs/{run.run_dir.name}",
            "base": f"s3://{bucket}/models/base",
            "validation": f"s3://{bucket}/data/validation.jsonl",
            "test": f"s3://{bucket}/data/test.jsonl",
        }
        result = sweep(run, urls, tmp, args, fs, bucket)

        wsteps = tuple(10 * (k + 1) for k in range(args.watch_checkpoints))
        wrun = build_tiny_run(
            tmp / "watch", steps=wsteps, n_validation=args.watch_items // 2, n_test=args.watch_items - args.watch_items // 2
        )
        lags = [lag(wrun, w, 1.0, 2.0, args.every, fs, bucket, tmp) for w in ("local", "s3")]
        if not args.no_default_settings:
            lags.append(lag(wrun, "local", 10.0, 20.0, args.every, fs, bucket, tmp))

    sec = result["seconds"]
    over = [s - loc for s, loc in zip(sec["s3"], sec["local"], strict=True)]
    per_ckpt = [o / len(steps) for o in over]
    mb = result["bytes"][0] / 2**20
    lag_rows = "\n".join(
        f"| {x['where']} | {x['poll']:g} / {x['settle']:g} | {x['n']} | {fmt(x['start'])} | {fmt(x['records'])} |" for x in lags
    )
    body = f"""## Checkpoints on object storage, and the watcher (`benchmarks/bench_storage.py`)

Machine: {machine()}; torch threads 1; 1-min load average at start {load_start:.1f} (shared with
other jobs: absolute times are noisy; runs alternate local / S3 so both see the same load).
S3 = moto's S3 server in a child process on 127.0.0.1 (no network latency: on a real bucket
each request adds tens of milliseconds, so the counts of requests below matter more than
these seconds).

**The `bench_measure` sweep from S3 vs from a local folder**: {len(steps)} LoRA checkpoints,
{args.items} items, batch {args.batch_size}, up to {args.max_new_tokens} new tokens. Local: run
folder → local records. S3: `s3://…/run` (base model and item files on S3 too) → `s3://…/records`,
the node cache emptied before each S3 run. {args.repeats} alternated runs each, median (range):

| quantity | local folder | S3 |
|---|---:|---:|
| measure, wall time (s) | {fmt(sec["local"])} | {fmt(sec["s3"])} |
| re-run with nothing to measure (s): listing, checks, part caches, units | {fmt(sec["local_rerun"])} | {fmt(sec["s3_rerun"])} |
| object-storage overhead per run (s) / per checkpoint (s) | | {fmt(over)} / {fmt(per_ckpt)} |
| node cache: files copied in (base, checkpoints, item files), MB | | {result["downloads"][0]} folders/files, {mb:.1f} MB |
| records identical (every unit's bytes) | | {"yes" if result["identical"] else "NO"} |

Uploading the run, base and items to the server took {upload_s:.1f} s (not counted).

**The watcher's lag** ({len(wsteps)} checkpoints, {args.watch_items} items each, one written every
{args.every:g} s file by file with `trainer_state.json` last): seconds from a checkpoint's last
file to its measurement starting, and to its records being in; median (range).

| run folder | `--poll` / `--settle` (s) | checkpoints | to measuring | to records |
|---|---|---:|---:|---:|
{lag_rows}

The lag is the settle window (a folder must stay unchanged that long: callbacks that write
after the marker, uploads in any order) plus up to one poll, then the measurement itself.
"""
    print(body)
    if not args.no_write:
        update_section("bench_storage", body)


if __name__ == "__main__":
    main()
