"""BLAS thread control for the analysis."""

from __future__ import annotations


def single_threaded():
    """Limit BLAS to one thread (a context manager).

    The analysis multiplies many small matrices: a second BLAS thread costs more in
    synchronisation than it gains, and on a busy 2-core machine it made ``analyze`` about 3x
    slower (benchmarks/bench_analyze.py). Results do not depend on the thread count.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")
