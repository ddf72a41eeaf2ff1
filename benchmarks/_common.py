"""Shared bits of the benchmark scripts: the BENCHMARKS.md section writer and machine facts."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = REPO / "BENCHMARKS.md"
HEADER = "# Benchmarks\n\nEach section is written by the script named in it; re-run the script to refresh it.\n"


def rss_mb() -> float:
    """Current resident set size (Linux /proc), MB."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def update_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace (or append) the ``<!-- name -->`` … ``<!-- /name -->`` section of BENCHMARKS.md."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def timed(cmd: list[str], env: dict) -> float:
    """Wall seconds of ``cmd`` run in a fresh process with ``env``; a failure ends the benchmark
    with the command and the end of its stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return wall
