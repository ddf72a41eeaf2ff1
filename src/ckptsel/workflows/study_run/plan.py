"""What is done and what is left, answered in one place: :func:`what_is_left` gives, per
trajectory, the checkpoints it has and will have and what measuring and recording them has left
(:func:`ckptsel.measure.left_to_measure`: the part cache and the contract records, read once for
all trajectories; no model is loaded). :func:`finished` (the trajectories ``--workers`` skips)
and :func:`dry_run_plan` (the ``--dry-run`` rows and what the work left costs,
:mod:`ckptsel.measure.cost`; printed by :func:`format_dry_run`) both read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ckptsel.measure.cost import Cost, count_cost, estimate_time, local_tokenizer, model_params, probe_rate
from ckptsel.measure.parts import CheckpointTodo, ItemPool, RecordedItems, left_to_measure
from ckptsel.records.schema import average_step
from ckptsel.train.checkpoints import checkpoint_steps, discover_checkpoints
from ckptsel.workflows.study_run.context import StudyContext, Trajectory


@dataclass(frozen=True)
class TrajectoryTodo:
    """One trajectory: the checkpoints it has (``have``), those it has or will have once
    trained (``steps``), and what is left at each of ``steps`` (``checkpoints``)."""

    trajectory: Trajectory
    have: tuple[int, ...]
    steps: tuple[int, ...]
    checkpoints: tuple[CheckpointTodo, ...]

    @property
    def trained(self) -> bool:
        """Every checkpoint is there (trained here: the whole grid)."""
        if self.trajectory.source == "train" and not self.trajectory.expected_steps:
            return False
        return bool(self.steps) and set(self.steps) <= set(self.have)

    @property
    def finished(self) -> bool:
        """Nothing left to train, measure or record."""
        return self.trained and all(c.done for c in self.checkpoints)


def steps_of(t: Trajectory, averages: Sequence[str] = ()) -> tuple[list[int], list[int]]:
    """(the checkpoints a trajectory has, those it has or will have): trained here, its complete
    ``checkpoint-<step>/`` folders and the grid; run folders, their validated checkpoints; then
    the ``averages`` (``[averages]``' folder names) at their reserved steps, had when their
    folder is there."""
    if t.source == "train":
        have = checkpoint_steps(t.folder)
        steps = sorted(set(have) | set(t.expected_steps))
    else:
        have = [c.step for c in discover_checkpoints(t.folder)]
        steps = list(have)
    made = [average_step(name) for name in averages]
    have += [step for name, step in zip(averages, made, strict=True) if (t.folder / name).is_dir()]
    return have, steps + made


def item_pool(ctx: StudyContext) -> ItemPool:
    """The study's validation and test items with their content hashes."""
    val, test = ctx.pools
    cfg = ctx.measure_config
    return ItemPool.load(cfg.measured.task, val, test, cfg.measured.test_task)


def what_is_left(ctx: StudyContext, trajectories: Sequence[Trajectory], pool: ItemPool | None = None) -> list[TrajectoryTodo]:
    """What is left of each of ``trajectories`` (measured here: not lm-eval ones); the records
    are read once for all of them."""
    if not trajectories:
        return []
    pool = pool or item_pool(ctx)
    # all trajectories' keys at once (each trajectory from its pack when current)
    recorded = RecordedItems.read(ctx.records_dir, pool)
    out = []
    for t in trajectories:
        have, steps = steps_of(t, ctx.spec.average_names())
        todo = left_to_measure(ctx.records_dir, t.name, steps, ctx.measure_config, pool, recorded)
        out.append(TrajectoryTodo(t, tuple(have), tuple(steps), tuple(todo)))
    return out


def finished(ctx: StudyContext, trajectories: Sequence[Trajectory]) -> set[str]:
    """Names of the trajectories with every checkpoint there (trained here: the whole grid)
    whose part cache and contract records hold every current item of both pools at every
    checkpoint: nothing is left to train, measure or record."""
    return {x.trajectory.name for x in what_is_left(ctx, trajectories) if x.finished}


def plan(ctx: StudyContext) -> list[dict[str, Any]]:
    """Per trajectory: checkpoints (existing or to train), items, generations to do/done."""
    return dry_run_plan(ctx).rows


@dataclass(frozen=True)
class DryRunPlan:
    """The ``--dry-run`` answer: the :func:`plan` rows and what is left costs (``None``: not
    counted)."""

    rows: list[dict[str, Any]]
    cost: Cost | None = None


def dry_run_plan(ctx: StudyContext, cost: bool = False, rate_device: str | None = None, probe: bool = False) -> DryRunPlan:
    """The plan rows and, with ``cost``, the items, tokens and time left to measure
    (:mod:`ckptsel.measure.cost`; the rate of ``rate_device``'s measured row, by default the
    measuring device's, or of a probe of the base model here with ``probe``)."""
    pool = item_pool(ctx)
    measured = [t for t in ctx.trajectories if t.source != "lm_eval"]
    left = {x.trajectory.name: x for x in what_is_left(ctx, measured, pool)}
    rows = [_row(t, pool, left.get(t.name)) for t in ctx.trajectories]
    if not cost:
        return DryRunPlan(rows)
    return DryRunPlan(rows, study_cost(ctx, [c for x in left.values() for c in x.checkpoints], pool, rate_device, probe))


def study_cost(ctx: StudyContext, todos: list[CheckpointTodo], pool: ItemPool, rate_device: str | None, probe: bool) -> Cost:
    """The cost of ``todos`` with the base model's tokenizer, and its time."""
    cfg, base = ctx.measure_config, ctx.spec.study.base_model
    tokenizer = local_tokenizer(base)
    counted = count_cost(todos, pool, cfg, tokenizer, base)
    rate = probe_rate(cfg, base, pool, tokenizer) if probe else None
    return estimate_time(counted, device=rate_device or cfg.measured.device, probe=rate, params=model_params(base))


def _row(t: Trajectory, pool: ItemPool, x: TrajectoryTodo | None) -> dict[str, Any]:
    """One trajectory's plan row (``x``: what is left of it; lm-eval ones are only ingested)."""
    if x is None:  # generations made elsewhere: only ingested here
        n_ckpt = len(list((t.folder / "test").glob("checkpoint-*")))
        return {
            "trajectory": t.name,
            "source": t.source,
            "checkpoints": n_ckpt,
            "trained": n_ckpt,
            "items": pool.n_items,
            "generations_todo": 0,
            "generations_done": 0,
            "nll_todo": 0,
        }
    to_gen = sum(c.generate for c in x.checkpoints)
    return {
        "trajectory": t.name,
        "source": t.source,
        "checkpoints": len(x.steps),
        "trained": len([s for s in x.steps if s in x.have]),
        "items": pool.n_items,
        "generations_todo": to_gen,
        "generations_done": pool.n_items * len(x.steps) - to_gen,
        "nll_todo": sum(c.score for c in x.checkpoints),
    }


def format_dry_run(answer: DryRunPlan) -> str:
    """The ``--dry-run`` table and, when counted, its cost lines."""
    return "\n".join([format_plan(answer.rows), *(answer.cost.lines() if answer.cost else [])])


def format_plan(rows: list[dict[str, Any]]) -> str:
    """The ``--dry-run`` table."""
    head = ("trajectory", "source", "checkpoints", "trained", "items", "gen todo", "gen done")
    keys = ("trajectory", "source", "checkpoints", "trained", "items", "generations_todo", "generations_done")
    table = [head] + [tuple(str(r[k]) for k in keys) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    n_ckpt = sum(r["checkpoints"] for r in rows)
    items = rows[0]["items"] if rows else 0
    todo = sum(r["generations_todo"] for r in rows)
    done = sum(r["generations_done"] for r in rows)
    lines.append(
        f"{len(rows)} trajectories x {n_ckpt} checkpoints in all x {items} items: {todo} generations to do, {done} already recorded"
    )
    return "\n".join(lines)
