"""BLAS thread control for the analysis, and independent pieces of it on a few threads."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def single_threaded():
    """Limit BLAS to one thread (a context manager).

    The analysis multiplies many small matrices: a second BLAS thread costs more in
    synchronisation than it gains, and on a busy 2-core machine it made ``analyze`` about 3x
    slower (benchmarks/bench_analyze.py). Results do not depend on the thread count.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


WORKERS = 2  # threads of map_threads at most (the analysis' independent parts, e.g. validation pools)


def map_threads(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on up to ``workers`` threads (default: the usable CPUs, at most
    :data:`WORKERS`), in the order of ``items``.

    For independent pieces of NumPy work (the GIL is released in the products) or of I/O: each
    call returns its own result, so the results do not depend on which thread ran what, nor
    when. Each call runs in a copy of the caller's context (its context variables, e.g. the
    records' one listing per analysis, are seen as on the calling thread). The first error
    raised by a call is re-raised (the calls not yet started are dropped).
    """
    items = list(items)
    if workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = min(WORKERS, cpus)
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(min(workers, len(items)))
    try:
        calls = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [c.result() for c in calls]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
