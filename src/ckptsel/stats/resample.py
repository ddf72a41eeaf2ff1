"""The one clustered resampler: multiplicities of units drawn with replacement, and clusters of
items that are drawn together (pure NumPy, no loops over draws or items: Python loops only over
chunks of draws and, inside a chunk, over cache-sized blocks of at least :data:`BLOCK` indices).

* :func:`resample_counts` / :func:`draw_counts` — ``(draws, G)`` multiplicities of ``G`` units
  drawn ``G`` (or ``size``) times with replacement;
* :class:`Clusters` (:func:`cluster_codes`, :func:`cluster_sums`) — items that share a
  ``group`` form one cluster (codes by first appearance, so single-item groups get codes
  ``0..n-1``);
* :func:`chunked_counts` — many draws in chunks of :data:`CHUNK`, chunk ``c`` from its own
  generator, so memory stays bounded and every quantity sees the same resamples;
  :func:`map_chunks` — the same chunks handed to a function, on a few threads at once (the
  chunks are independent: each lands in its own rows, whatever the thread timing);
* :func:`clustered_means` — bootstrap replicates of per-item means where whole clusters are
  resampled (ratio of resampled sums to resampled sizes); with single-item clusters they equal
  the plain question bootstrap ``R @ d / n`` exactly;
* :func:`question_weights` — ``(draws, n)`` per-item multiplicities of a clustered bootstrap.

Every clustered bootstrap of ckptsel (the test-question and joint bootstraps, ``compare``,
``select``, ``plan``) draws through these functions.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ckptsel._util import rng as streams

CHUNK = 1000  # draws per chunk: a (CHUNK × units) counts matrix at a time
BLOCK = 1 << 16  # indices drawn and counted at a time inside draw_counts (they stay in cache)
WORKERS = 4  # at most this many threads run chunks at once (map_chunks)


def resample_counts(n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``(draws, n)`` multiplicities of ``n`` units drawn ``n`` times with replacement."""
    return draw_counts(n, n, draws, rng)


def draw_counts(n_units: int, size: int, draws: int, rng: np.random.Generator, *, out: np.ndarray | None = None) -> np.ndarray:
    """``(draws, n_units)`` multiplicities of ``size`` units drawn uniformly with replacement.

    Float64, or written into ``out`` (``(draws, n_units)``, its dtype) when given. The indices
    come in blocks of whole draws (about :data:`BLOCK` indices each, counted while they are in
    cache), one block after the other from ``rng``: bounded integers take the generator's values
    one at a time, so the blocks hold exactly the ``(draws, size)`` indices of a single
    ``rng.integers(0, n_units, size=(draws, size))`` and leave ``rng`` in the same state.
    """
    counts = np.empty((draws, n_units)) if out is None else out
    rows = max(1, BLOCK // max(size, 1))  # draws per block
    offsets = np.arange(rows)[:, None] * n_units  # row r of a block counts into bins r*n_units...
    for start in range(0, draws, rows):
        stop = min(draws, start + rows)
        idx = rng.integers(0, n_units, size=(stop - start, size))
        idx += offsets[: stop - start]
        block = np.bincount(idx.ravel(), minlength=(stop - start) * n_units)
        counts[start:stop] = block.reshape(stop - start, n_units)
    return counts


def chunked_counts(
    n_units: int, draws: int, key: Sequence[int], *, size: int | None = None, suffix: Sequence[int] = ()
) -> Iterator[tuple[slice, np.ndarray]]:
    """``(rows, counts)`` for ``draws`` draws of ``size`` (default: all) of ``n_units`` units, in
    chunks of :data:`CHUNK` draws; chunk ``c`` comes from ``default_rng([*key, c, *suffix])``."""
    for c, start in enumerate(range(0, draws, CHUNK)):
        stop = min(draws, start + CHUNK)
        gen = np.random.default_rng([*key, c, *suffix])
        yield slice(start, stop), draw_counts(n_units, size or n_units, stop - start, gen)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def map_chunks(
    work: Callable[[slice, np.ndarray], None],
    n_units: int,
    draws: int,
    key: Sequence[int],
    *,
    size: int | None = None,
    suffix: Sequence[int] = (),
    dtype=np.float64,
    workers: int | None = None,
) -> None:
    """``work(rows, counts)`` for every chunk of :func:`chunked_counts` (the same draws; counts
    ``(rows, n_units)`` in ``dtype``), chunks on up to ``workers`` threads at once.

    Drawing, counting and matrix products release the GIL, so chunks overlap on several cores.
    ``work`` must write only its own ``rows`` of its outputs (then the result does not depend on
    which thread ran which chunk, nor when), and must not keep ``counts``: the buffer is reused.
    Default ``workers``: the usable CPUs, at most :data:`WORKERS`.
    """
    starts = range(0, draws, CHUNK)
    if workers is None:
        workers = min(WORKERS, usable_cpus())
    buffers: queue.SimpleQueue = queue.SimpleQueue()  # one (CHUNK, n_units) buffer per thread

    def one(c: int) -> None:
        start = starts[c]
        stop = min(draws, start + CHUNK)
        try:
            buf = buffers.get_nowait()
        except queue.Empty:
            buf = np.empty((min(CHUNK, draws), n_units), dtype=dtype)
        gen = np.random.default_rng([*key, c, *suffix])
        counts = draw_counts(n_units, size or n_units, stop - start, gen, out=buf[: stop - start])
        work(slice(start, stop), counts)
        buffers.put(buf)

    if workers <= 1 or len(starts) <= 1:
        for c in range(len(starts)):
            one(c)
        return
    pool = ThreadPoolExecutor(min(workers, len(starts)))
    try:
        for _ in pool.map(one, range(len(starts))):  # re-raises the first error of a chunk
            pass
    finally:  # after an error (or an interrupt) the chunks not yet started are dropped
        pool.shutdown(wait=True, cancel_futures=True)


def cluster_codes(groups: np.ndarray) -> tuple[np.ndarray, int]:
    """``(n,)`` cluster code of each item (first appearance order) and the number of clusters."""
    groups = np.asarray(groups)
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int64), 0
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.ravel()], len(first)


def cluster_sums(values: np.ndarray, codes: np.ndarray, n_clusters: int) -> np.ndarray:
    """``(G, ...)`` sums of ``values`` (``(n, ...)``) over the items of each cluster."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros((n_clusters,) + values.shape[1:])
    np.add.at(out, codes, values)
    return out


@dataclass(frozen=True)
class Clusters:
    """``n`` items in ``count`` clusters (items sharing a ``group``), drawn as units."""

    codes: np.ndarray  # (n,) cluster of each item, by first appearance
    count: int  # G
    sizes: np.ndarray  # (G,) items per cluster (float64)

    @classmethod
    def of(cls, groups: np.ndarray | None, n: int | None = None) -> Clusters:
        """The clusters of ``groups`` (``None``: ``n`` single-item clusters)."""
        if groups is None:
            codes, count = np.arange(n, dtype=np.int64), int(n)
        else:
            codes, count = cluster_codes(groups)
        return cls(codes, count, np.bincount(codes, minlength=count).astype(np.float64))

    @property
    def singletons(self) -> bool:
        """Every item its own cluster, in item order (the plain question bootstrap)."""
        return self.count == len(self.codes) and bool(np.array_equal(self.codes, np.arange(self.count)))

    def sums(self, values: np.ndarray) -> np.ndarray:
        """``(G, ...)`` per-cluster sums of ``values`` (``(n, ...)``)."""
        return cluster_sums(values, self.codes, self.count)

    def item_counts(self, counts: np.ndarray) -> np.ndarray:
        """``(draws, n)``: every item gets its cluster's multiplicity in ``counts`` (draws, G)."""
        return counts if self.singletons else counts[:, self.codes]


def clustered_means(values: np.ndarray, groups: np.ndarray, draws: int, seed: int, stream: int = 0) -> np.ndarray:
    """``(draws, Q)`` bootstrap replicates of the item means of ``values`` (``(n, Q)``).

    Whole clusters (items sharing a group) are drawn with replacement, as many as there are
    clusters; a replicate is (resampled sum) / (resampled number of items). Chunk ``c`` of the
    draws comes from ``default_rng([seed, PAIRED_DRAWS, stream, c])``.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    clusters = Clusters.of(groups)
    sums = clusters.sums(values)  # (G, Q)
    out = np.empty((draws, values.shape[1]))

    def chunk(rows: slice, C: np.ndarray) -> None:  # C: (rows, G) counts
        out[rows] = (C @ sums) / (C @ clusters.sizes)[:, None]

    map_chunks(chunk, clusters.count, draws, (seed, streams.PAIRED_DRAWS, stream))
    return out


def question_weights(groups: np.ndarray | None, n: int, draws: int, rng) -> tuple[np.ndarray, int]:
    """``(draws, n)`` question multiplicities of a clustered question bootstrap, and ``G``.

    Items that share a group are drawn as one cluster (``G`` clusters drawn ``G`` times), so
    every item of a cluster gets the cluster's count. With single-item groups (or ``groups``
    None) this is exactly ``resample_counts(n, draws, rng)``.
    """
    clusters = Clusters.of(groups, n)
    return clusters.item_counts(resample_counts(clusters.count, draws, rng)), clusters.count
