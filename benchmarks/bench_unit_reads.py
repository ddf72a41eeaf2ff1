"""The floor of a first analysis of plain units: pyarrow's reads alone, units against packs.

A first ``analyze`` of records as units with no pack (another producer's units) reads each
unit's row group of each split it needs (validation, then — after the freeze — test) of both
kinds, one file open and footer per unit and read; the packed form reads the same rows from one
pack per trajectory and kind. This times only those reads, with nothing of ckptsel's around
them — each file opened as the records' scan opens it (a NativeFile, ``read_dictionary`` for the
string columns, page checksums verified, no pre-buffering), the loaders' columns of the row
groups whose ``split`` statistics prove the split (the scan's own ``_split_of_group``; a file
with a row group they do not prove is refused), a few files per thread task (16) — on one
thread and on two, over the records kept by ``bench_analyze.py --form … --records DIR``::

    python benchmarks/bench_unit_reads.py --records DIR [--repeats 3]

What the units form pays beyond the packed form is at least ``units − packs`` here, plus the
test-NLL checks that a pack's proof spares a reader (``records.checks.prove_test_nll``, also
timed, over each trajectory's test NLL rows already in memory). Prints a JSON object; writes
nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ckptsel.records.checks import prove_test_nll
from ckptsel.records.scan import _split_leaf, _split_of_group
from ckptsel.records.schema import GENERATION_COLUMNS, NLL_COLUMNS

COLUMNS = {"generations": GENERATION_COLUMNS, "nll": NLL_COLUMNS}
PER_TASK = 16


def read_split(path: Path, kind: str, split: str) -> list[pa.Table]:
    """The row groups of ``split`` in one file, the loaders' columns."""
    columns = list(COLUMNS[kind])
    strings = [c for c in columns if COLUMNS[kind][c] == "string"]
    with pa.OSFile(str(path)) as src, pq.ParquetFile(src, read_dictionary=strings, page_checksum_verification=True, pre_buffer=False) as f:
        leaf = _split_leaf(f, f.schema_arrow.names)  # (the scan's own helpers: its split proof)
        proven = [_split_of_group(f, g, leaf) for g in range(f.metadata.num_row_groups)]
        if None in proven:  # the scan would read such a file whole and split it by value
            sys.exit(f"{path}: a row group whose statistics do not prove its split; not the layout timed here")
        return [f.read_row_group(g, columns=columns, use_threads=False) for g, s in enumerate(proven) if s == split]


def timed(files: list[Path], kind: str, split: str, threads: int) -> tuple[float, float]:
    """Wall and CPU seconds of reading ``split`` from every file."""
    tasks = [files[i : i + PER_TASK] for i in range(0, len(files), PER_TASK)]
    read = lambda chunk: [t for p in chunk for t in read_split(p, kind, split)]  # noqa: E731
    t0, c0 = time.perf_counter(), time.process_time()
    if threads == 1:
        out = [read(chunk) for chunk in tasks]
    else:
        with ThreadPoolExecutor(threads) as pool:
            out = list(pool.map(read, tasks))
    assert sum(t.num_rows for chunk in out for t in chunk) > 0, f"no {split} rows of {kind}"
    return time.perf_counter() - t0, time.process_time() - c0


def layout_files(records: Path, layout: str, kind: str) -> list[Path]:
    base = records / "units"
    return sorted((base / ".packs" / kind).glob("*.parquet")) if layout == "packs" else sorted((base / kind).glob("*/*.parquet"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True, help="records kept by bench_analyze.py --form ... --records DIR")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    records = Path(args.records)
    if not (records / "units" / ".packs").is_dir():
        sys.exit(f"{records}: no units with packs here (write them with bench_analyze.py --form packed --records {records})")
    result: dict = {"reads": {}, "files": {}}
    for layout in ("units", "packs"):
        for threads in (1, 2):
            walls, cpus = [], []
            for _ in range(args.repeats):
                wall = cpu = 0.0
                for split in ("validation", "test"):
                    for kind in ("generations", "nll"):
                        files = layout_files(records, layout, kind)
                        result["files"][f"{layout} {kind}"] = len(files)
                        w, c = timed(files, kind, split, threads)
                        wall, cpu = wall + w, cpu + c
                walls.append(wall)
                cpus.append(cpu)
            result["reads"][f"{layout}, {threads} thread(s)"] = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}
    # the checks a pack's proof spares: each trajectory's test NLL, as the units form proves it
    tables = [pa.concat_tables(read_split(p, "nll", "test")) for p in layout_files(records, "packs", "nll")]
    t0, c0 = time.perf_counter(), time.process_time()
    proven = [prove_test_nll({"test": t}) for t in tables]
    result["test NLL checks (one thread)"] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    if not all(p.get("test") for p in proven):
        sys.exit("a trajectory's test NLL did not prove: these records are not what bench_analyze writes")
    two = result["reads"]
    result["units - packs, 2 threads, wall s"] = two["units, 2 thread(s)"]["wall_s"] - two["packs, 2 thread(s)"]["wall_s"]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
