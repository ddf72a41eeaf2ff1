"""Synthetic records with realistic, *known* structure (``ckptsel simulate``).

The analysis needs inputs whose truth is known: how accurate each checkpoint really is on a
fresh test item, so that a rule's estimated gain can be checked against the gain it truly
buys. Real records never give that. This module builds records that look like the paper's
(tasks with augmented validation variants and commonsense subtasks, checkpoint grids every 25
steps plus an off-grid final step, item-level correctness that persists across neighbouring
checkpoints, shared wrong answers, NLL that bottoms out early and then rises, a few excluded
validation items) while every quantity is drawn from a stated model:

* True accuracy ``p[j, t]`` of trajectory ``j`` at checkpoint ``t``: configuration curve (rise
  then plateau, a late decline for some configurations) + seed offset + checkpoint jitter.
* Correctness is a Gaussian copula: item ``i`` is correct at ``t`` iff the latent
  ``z = a·u_i + b·v_ji + c·e_jit < Φ⁻¹(p[j, t])`` with ``u`` the item difficulty (shared by the
  task's trajectories and, in part, by the variants of one group), ``v`` a trajectory-item
  effect and ``e`` an AR(1) process along checkpoints. Every ``z`` is N(0, 1), so the chance that
  a fresh item is answered correctly is exactly ``p[j, t]`` (``truth.parquet``).
* Wrong answers come from a second AR(1) Gaussian latent cut at item-specific thresholds: a
  few weighted distractors per item (often the same one at neighbouring checkpoints, so
  pluralities are sometimes wrong) plus the empty answer.
* NLL per token follows a U-shaped curve with its minimum in the first ~third of training,
  times item-level lognormal noise weakly tied to the correctness latent.

Everything is vectorized over items; Python loops run only over tasks, configurations and
trajectories (and over the few checkpoints of the AR recursion).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ckptsel._util.io import write_parquet, write_text
from ckptsel.errors import CkptselError
from ckptsel.records.schema import COMPLETE_WINDOW, GENERATION_COLUMNS, GENERATIONS_FILE, MATCHED_WINDOW, NLL_COLUMNS, NLL_FILE, SPLITS
from ckptsel.records.store import write_records
from ckptsel.records.units import UNITS_DIR
from ckptsel.sim.presets import ANSWER_KINDS, COMMONSENSE_LABELS, PRESETS, SimSpec, TaskSim
from ckptsel.stats.distributions import norm_ppf

TRUTH_FILE = "truth.parquet"
SIMULATION_FILE = "simulation.json"
# a checkpoint's names as the records hold them, and its true test accuracy
TRUTH_COLUMNS: dict[str, str] = {
    **{c: GENERATION_COLUMNS[c] for c in ("trajectory", "configuration", "task", "step")},
    "true_test_accuracy": "float64",
}


def _ar1(rng: np.random.Generator, n: int, t: int, phi: float) -> np.ndarray:
    """A stationary N(0, 1) AR(1) process along axis 0: shape (t, n)."""
    out = np.empty((t, n))
    out[0] = rng.standard_normal(n)
    s = math.sqrt(1 - phi * phi)
    for k in range(1, t):
        out[k] = phi * out[k - 1] + s * rng.standard_normal(n)
    return out


# ---------------------------------------------------------------------------------------------
# Item pools (shared by all trajectories of a task)


@dataclass
class _Pool:
    """Validation + test items of one task, concatenated (validation first)."""

    item_ids: list[str]
    groups: list[str]
    subtasks: list[str]  # what the records show ("" for validation and non-choice tasks)
    is_test: np.ndarray  # bool (n,)
    group_index: np.ndarray  # int (n,): index into the task's groups
    n_groups: int
    difficulty: np.ndarray  # u_i (n,), N(0, 1)
    wrong_pref: np.ndarray  # item part of the wrong-answer latent (n,), N(0, 1)
    answers: list[list[str]]  # per item: [reference, distractor 1..K]
    thresholds: np.ndarray  # (n, K): cut points of the wrong-answer latent (see _cut_points)
    n_distractors: np.ndarray  # int (n,)
    k_max: int
    prompt_tokens: np.ndarray  # float (n,)
    response_tokens: np.ndarray  # float (n,)
    nll_item: np.ndarray  # ξ_i (n,), N(0, 1): item part of the log-loss


def _numeric_answer(rng: np.random.Generator) -> str:
    if rng.random() < 0.05:
        return f"{rng.integers(1, 200) / 4:g}"
    value = int(round(math.exp(rng.uniform(0.0, 7.5))))
    if rng.random() < 0.03:
        value = -value
    return str(value)


def _numeric_distractors(rng: np.random.Generator, ref: str, k: int) -> list[str]:
    v = float(ref)
    cands = [v + 1, v - 1, 2 * v, v / 2, v + 10, v * 10, v - 10, v + 2, v - 2, v * 3, v + 5, v + 100]
    out: list[str] = []
    for c in rng.permutation(len(cands)):
        s = f"{cands[c]:g}" if not float(cands[c]).is_integer() else str(int(cands[c]))
        if s != ref and s not in out and s != "":
            out.append(s)
        if len(out) == k:
            break
    return out


def _latex_answer(rng: np.random.Generator) -> str:
    form = rng.choice(5, p=[0.45, 0.2, 0.12, 0.1, 0.13])
    a, b = int(rng.integers(1, 13)), int(rng.integers(2, 17))
    if form == 0:
        return str(int(rng.integers(-20, 400)))
    if form == 1:
        g = math.gcd(a, b)
        a, b = a // g, b // g
        return f"\\frac{{{a}}}{{{b}}}" if b != 1 else str(a)
    if form == 2:
        return f"{a}\\sqrt{{{b}}}" if a != 1 else f"\\sqrt{{{b}}}"
    if form == 3:
        return f"{a}\\pi"
    return f"({a}, {b})"


def _latex_distractors(rng: np.random.Generator, ref: str, k: int) -> list[str]:
    out: list[str] = []
    tries = 0
    while len(out) < k and tries < 200:
        tries += 1
        if rng.random() < 0.35:
            s = str(int(rng.integers(-5, 60)))
        else:
            s = _latex_answer(rng)
        if s != ref and s not in out:
            out.append(s)
    return out


def _build_pool(task: TaskSim, spec: SimSpec, rng: np.random.Generator) -> _Pool:
    """Draw the task's validation items (groups of variants) and test items (subtasks)."""
    n_val, n_test = task.n_validation, task.n_test
    n = n_val + n_test
    is_test = np.zeros(n, dtype=bool)
    is_test[n_val:] = True
    item_ids = [f"{task.name}-val-{k:05d}" for k in range(n_val)]
    item_ids += [f"{task.name}-test-{k:05d}" for k in range(n_test)]
    val_group, group_index, n_groups, groups = _groups(task, item_ids, rng)
    label_subtask = _label_subtasks(task, rng)
    subtasks = [""] * n_val + label_subtask[n_val:]

    # latents: validation variants share part of their difficulty with their group
    gs = spec.group_share
    group_u = rng.standard_normal(n_groups)
    difficulty = rng.standard_normal(n)
    difficulty[:n_val] = math.sqrt(gs) * group_u[val_group] + math.sqrt(1 - gs) * difficulty[:n_val]
    wrong_pref = rng.standard_normal(n)
    nll_item = rng.standard_normal(n)

    answers = _pool_answers(task, spec, label_subtask, group_index, rng)
    thresholds, n_dis, k_max = _distractor_cuts(answers, task, spec, rng)
    prompt, response = _token_lengths(task, rng)
    return _Pool(
        item_ids=item_ids,
        groups=groups,
        subtasks=subtasks,
        is_test=is_test,
        group_index=group_index,
        n_groups=n_groups,
        difficulty=difficulty,
        wrong_pref=wrong_pref,
        answers=answers,
        thresholds=thresholds,
        n_distractors=n_dis,
        k_max=k_max,
        prompt_tokens=prompt,
        response_tokens=response,
        nll_item=nll_item,
    )


def _groups(task: TaskSim, item_ids: list[str], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int, list[str]]:
    """``(group of each validation item, group index of every item, number of groups, group
    name of every item)``: validation variants share a group (sizes drawn from
    ``variants_per_group``); test items are their own group."""
    n_val, n_test = task.n_validation, task.n_test
    lo, hi = task.variants_per_group
    sizes: list[int] = []
    while sum(sizes) < n_val:
        sizes.append(int(rng.integers(lo, hi + 1)))
    sizes[-1] -= sum(sizes) - n_val
    val_group = np.repeat(np.arange(len(sizes)), sizes)
    group_index = np.concatenate([val_group, len(sizes) + np.arange(n_test)])
    if hi > 1:
        group_names = [f"{task.name}-grp-{g:05d}" for g in range(len(sizes))]
        groups = [group_names[g] for g in val_group]
    else:
        groups = item_ids[:n_val]
    groups += item_ids[n_val:]
    return val_group, group_index, len(sizes) + n_test, groups


def _label_subtasks(task: TaskSim, rng: np.random.Generator) -> list[str]:
    """The subtask whose labels each item's answers use ("" unless the task is "choice"):
    test items split equally across the subtasks, validation items drawn at random."""
    n_val, n_test = task.n_validation, task.n_test
    label_subtask: list[str] = [""] * (n_val + n_test)
    if task.kind == "choice":
        subs = task.subtasks or tuple(COMMONSENSE_LABELS)
        per = np.array_split(np.arange(n_test), len(subs))
        for s, idx in zip(subs, per, strict=True):
            for i in idx:
                label_subtask[n_val + i] = s
        for i, s in enumerate(rng.integers(0, len(subs), n_val)):
            label_subtask[i] = subs[s]
    return label_subtask


def _pool_answers(
    task: TaskSim, spec: SimSpec, label_subtask: list[str], group_index: np.ndarray, rng: np.random.Generator
) -> list[list[str]]:
    """Per item: [reference, distractor 1..K]. Choice items use their subtask's labels; a
    variant keeps its group's reference with probability ``shared_answer_prob``."""
    answers: list[list[str]] = []
    group_ref: dict[int, str] = {}
    for i in range(len(label_subtask)):
        if task.kind == "choice":
            labels = COMMONSENSE_LABELS[label_subtask[i]]
            ref = labels[int(rng.integers(len(labels)))]
            dis = [lab for lab in labels if lab != ref]
        else:
            g = int(group_index[i])
            if g in group_ref and rng.random() < spec.shared_answer_prob:
                ref = group_ref[g]
            else:
                ref = _numeric_answer(rng) if task.kind == "numeric" else _latex_answer(rng)
                group_ref.setdefault(g, ref)
            maker = _numeric_distractors if task.kind == "numeric" else _latex_distractors
            dis = maker(rng, ref, task.n_distractors)
        answers.append([ref, *dis])
    return answers


def _distractor_cuts(
    answers: list[list[str]], task: TaskSim, spec: SimSpec, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(cut points, distractors per item, most distractors)``: Dirichlet distractor weights,
    sorted (one favourite wrong answer), then the empty answer last (:func:`_cut_points`)."""
    n = len(answers)
    k_max = max(len(a) - 1 for a in answers)
    probs = np.zeros((n, k_max + 1))
    n_dis = np.array([len(a) - 1 for a in answers])
    raw = rng.gamma(spec.distractor_concentration, size=(n, k_max)) + 1e-12
    raw = np.where(np.arange(k_max)[None, :] < n_dis[:, None], raw, 0.0)
    raw = -np.sort(-raw, axis=1)
    probs[:, :k_max] = raw / raw.sum(axis=1, keepdims=True) * (1 - task.empty_answer_rate)
    probs[:, k_max] = task.empty_answer_rate
    return _cut_points(probs, n_dis, k_max), n_dis, k_max


def _token_lengths(task: TaskSim, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and reference-response token counts per item (before the per-configuration
    tokenizer factor); a few validation prompts fill the 512 window."""
    n_val = task.n_validation
    n = n_val + task.n_test
    prompt = task.prompt_tokens * np.exp(task.prompt_sigma * rng.standard_normal(n))
    prompt = np.clip(prompt, 20.0, 400.0)
    n_empty = int(round(task.empty_sequence_rate * n_val))
    if n_empty:
        chosen = rng.choice(n_val, size=n_empty, replace=False)
        prompt[chosen] = rng.uniform(600.0, 900.0, n_empty)  # fills the 512 window
    response = task.response_tokens * np.exp(task.response_sigma * rng.standard_normal(n))
    response = np.clip(response, 2.0, 3000.0)
    return prompt, response


def _cut_points(probs: np.ndarray, n_dis: np.ndarray, k_max: int) -> np.ndarray:
    """Cut points of the N(0, 1) wrong-answer latent, shape (n, k_max).

    Category ``c`` (0-based: distractors ``0..n_dis-1``, then the empty answer) is the number of
    cut points the latent exceeds, capped so that every item's last category is "".
    Cut ``j`` sits at Φ⁻¹(cumulative weight of categories ``0..j``); for items with fewer
    distractors the remaining cuts are +inf except the one before "", so "" keeps its weight.
    """
    dis = probs[:, :k_max]
    cum = np.cumsum(dis, axis=1)  # cumulative weight of distractors 0..j
    cuts = norm_ppf(np.clip(cum, 0.0, 1.0))
    j = np.arange(k_max)[None, :]
    # cut j (between category j and j+1) exists for j < n_dis; cut n_dis-1 separates the last
    # distractor from "". Cuts beyond are +inf so the count never passes n_dis.
    return np.where(j < n_dis[:, None], cuts, np.inf)


# ---------------------------------------------------------------------------------------------
# Curves


@dataclass
class _Config:
    name: str
    task_index: int
    steps: np.ndarray  # int64 (T,)
    plateau: float
    rise: float
    tau: float
    decline: float
    decline_start: float
    token_factor: float
    nll_level: float
    nll_min_at: float
    nll_early: float
    nll_late: float
    nll_tail_min_at: float


def _configurations(spec: SimSpec, seed: int) -> list[_Config]:
    combos = [(m, a) for a in spec.adaptations for m in spec.models]
    out: list[_Config] = []
    for ti, task in enumerate(spec.tasks):
        if len(task.seeds_per_configuration) > len(combos):
            raise CkptselError(
                f"simulate: task {task.name!r} asks for {len(task.seeds_per_configuration)} "
                f"configurations but models × adaptations gives only {len(combos)}"
            )
        for ci in range(len(task.seeds_per_configuration)):
            rng = np.random.default_rng([seed, 2, ti, ci])
            model, adapt = combos[ci]
            t_lo, t_hi = spec.checkpoints
            t = int(rng.integers(t_lo, t_hi + 1))
            iv = spec.step_interval
            last = iv * t
            if rng.random() < spec.offgrid_final_prob:
                last = iv * (t - 1) + int(rng.integers(max(1, iv // 5), iv))
            steps = np.append(iv * np.arange(1, t, dtype=np.int64), np.int64(last))
            declines = rng.random() < spec.decline_prob
            d_lo, d_hi = spec.decline_pp
            nll_min = rng.uniform(*spec.nll_min_at)
            out.append(
                _Config(
                    name=f"{model}-{adapt}-{task.name}",
                    task_index=ti,
                    steps=steps,
                    plateau=float(np.clip(task.plateau_accuracy + spec.configuration_sd * rng.standard_normal(), 0.05, 0.95)),
                    rise=rng.uniform(*spec.rise_pp) / 100,
                    tau=rng.uniform(*spec.rise_tau),
                    decline=(spec.gain_scale * rng.uniform(d_lo, d_hi) / 100) if declines else 0.0,
                    decline_start=rng.uniform(*spec.decline_start),
                    token_factor=rng.uniform(1 - spec.tokenizer_spread, 1 + spec.tokenizer_spread),
                    nll_level=task.per_token_loss * math.exp(0.15 * rng.standard_normal()),
                    nll_min_at=nll_min,
                    nll_early=rng.uniform(*spec.nll_early_excess),
                    nll_late=rng.uniform(*spec.nll_late_rise),
                    nll_tail_min_at=min(0.95, nll_min + rng.uniform(*spec.nll_tail_shift)),
                )
            )
    return out


def _accuracy_curve(cfg: _Config, spec: SimSpec, rng: np.random.Generator) -> np.ndarray:
    """True test accuracy of one seed of ``cfg`` at each checkpoint."""
    x = cfg.steps / cfg.steps[-1]
    decline = cfg.decline * math.exp(spec.seed_decline_sd * rng.standard_normal())
    late = np.clip((x - cfg.decline_start) / (1 - cfg.decline_start), 0.0, None)
    p = cfg.plateau - cfg.rise * np.exp(-x / cfg.tau) - decline * late
    p = p + spec.seed_sd_pp / 100 * rng.standard_normal()
    p = p + spec.checkpoint_sd_pp / 100 * rng.standard_normal(len(x))
    return np.clip(p, 0.01, 0.99)


def _loss_curve(x: np.ndarray, level: float, at: float, early: float, late: float) -> np.ndarray:
    """U-shaped per-token loss: quadratic descent to ``at``, linear rise after (overfitting)."""
    down = early * np.clip((at - x) / at, 0.0, None) ** 2
    up = late * np.clip((x - at) / (1 - at), 0.0, None)
    return level * (1 + down + up)


# ---------------------------------------------------------------------------------------------
# Main entry points


def _resolve(spec: SimSpec | str) -> tuple[SimSpec, str]:
    if isinstance(spec, SimSpec):
        name = next((k for k, v in PRESETS.items() if v == spec), "custom")
        return spec, name
    if spec not in PRESETS:
        raise CkptselError(f"simulate: unknown preset {spec!r} (choose from {', '.join(PRESETS)})")
    return PRESETS[spec], spec


def _check(spec: SimSpec) -> None:
    if spec.item_share + spec.trajectory_item_share >= 1:
        raise CkptselError("simulate: item_share + trajectory_item_share must be < 1")
    if not spec.tasks:
        raise CkptselError("simulate: the spec has no tasks")
    names = [t.name for t in spec.tasks]
    if len(set(names)) != len(names):
        raise CkptselError(f"simulate: duplicate task names {names}")
    for t in spec.tasks:
        if t.kind not in ANSWER_KINDS:
            raise CkptselError(f"simulate: task {t.name!r} has unknown kind {t.kind!r}")
        if max(t.seeds_per_configuration, default=0) > len(spec.seeds):
            raise CkptselError(f"simulate: task {t.name!r} wants more seeds than spec.seeds")
        if t.n_validation < 1 or t.n_test < 1:
            raise CkptselError(f"simulate: task {t.name!r} needs validation and test items")
    if spec.checkpoints[0] < 2 or spec.checkpoints[0] > spec.checkpoints[1]:
        raise CkptselError(f"simulate: bad checkpoint range {spec.checkpoints}")
    for k in spec.average_last:
        if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= spec.checkpoints[0]:
            raise CkptselError(f"simulate: average_last {k!r}: each K an integer from 2 to the fewest checkpoints ({spec.checkpoints[0]})")
    if len(set(spec.average_last)) != len(spec.average_last):
        raise CkptselError(f"simulate: average_last {spec.average_last}: each K once")
    if not math.isfinite(spec.average_gain_pp) or abs(spec.average_gain_pp) > 20:
        raise CkptselError(f"simulate: average_gain_pp {spec.average_gain_pp!r}: a finite gain within ±20 points")


class _Vocab:
    """Insertion-ordered string → code table (dictionary encoding of string columns)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def code(self, s: str) -> int:
        c = self.index.get(s)
        if c is None:
            c = self.index[s] = len(self.index)
        return c

    def codes(self, items: list[str]) -> np.ndarray:
        return np.fromiter((self.code(s) for s in items), dtype=np.int32, count=len(items))

    def column(self, codes: np.ndarray, strings: str = "string") -> pd.api.extensions.ExtensionArray:
        """Decode codes to a pandas ``string`` array (pyarrow storage, no Python objects), or to
        a ``category`` array when ``strings == "category"`` (no per-row string copies)."""
        values = list(self.index)
        codes = codes.astype(np.int32, copy=False)
        if strings == "category":
            return pd.Categorical.from_codes(codes, categories=pd.Index(values, dtype="string"))
        dictionary = pa.array(values, type=pa.large_string())
        return pd.array(dictionary.take(pa.array(codes)), dtype="string[pyarrow]")


STRING_MODES = ("string", "category")


def simulate(spec: SimSpec | str = "small", seed: int = 0, *, strings: str = "string") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Draw ``(generations, nll, truth)`` for a preset name or a ``SimSpec``.

    The same spec and seed give identical tables. ``truth`` has one row per checkpoint with
    ``true_test_accuracy``: the probability that a fresh test item is answered correctly.
    String columns have the schema's ``string`` dtype; ``strings="category"`` gives pandas
    categoricals instead (same values, several times faster at paper scale, for benchmarks).
    """
    spec, _ = _resolve(spec)
    _check(spec)
    if strings not in STRING_MODES:
        raise CkptselError(f"simulate: strings must be one of {STRING_MODES}, not {strings!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CkptselError(f"simulate: seed must be a non-negative integer, not {seed!r}")
    seed = int(seed)
    configs = _configurations(spec, seed)
    pools = [_build_pool(t, spec, np.random.default_rng([seed, 0, ti])) for ti, t in enumerate(spec.tasks)]
    vocabs, pool_codes, split_codes = _encode_pools(spec, pools)
    mix = _Mixing.of(spec)
    trajs: list[_Traj] = []
    for ci, cfg in enumerate(configs):
        task = spec.tasks[cfg.task_index]
        n_seeds = task.seeds_per_configuration[ci - _first_config(configs, cfg.task_index)]
        for si in range(n_seeds):
            rng = np.random.default_rng([seed, 1, cfg.task_index, ci, si])
            trajs.append(
                _trajectory(
                    cfg,
                    task,
                    pools[cfg.task_index],
                    pool_codes[cfg.task_index][3],
                    spec,
                    mix,
                    rng,
                    code=vocabs["trajectory"].code(f"{cfg.name}-s{spec.seeds[si]}"),
                    configuration=vocabs["configuration"].code(cfg.name),
                )
            )
    return _assemble(trajs, pool_codes, split_codes, vocabs, strings)


def _encode_pools(
    spec: SimSpec, pools: list[_Pool]
) -> tuple[dict[str, _Vocab], list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], list[np.ndarray]]:
    """Dictionary-encode the pools' strings: the vocabularies (trajectory and configuration
    ones empty, filled as trajectories are drawn), per pool the codes of its item ids, groups,
    subtasks and answers (``(n, k_max + 2)``: reference, distractors, "", then -1 padding),
    and per pool its split codes."""
    item_vocab, group_vocab, sub_vocab, ans_vocab = _Vocab(), _Vocab(), _Vocab(), _Vocab()
    pool_codes = []
    for pool in pools:
        ans_codes = np.full((len(pool.answers), pool.k_max + 2), -1, dtype=np.int32)
        for i, a in enumerate(pool.answers):
            ans_codes[i, : len(a)] = [ans_vocab.code(s) for s in a]
            ans_codes[i, len(a)] = ans_vocab.code("")
        pool_codes.append((item_vocab.codes(pool.item_ids), group_vocab.codes(pool.groups), sub_vocab.codes(pool.subtasks), ans_codes))
    split_vocab = _Vocab()
    split_vocab.codes(list(SPLITS))
    split_codes = [np.where(pool.is_test, split_vocab.code("test"), split_vocab.code("validation")).astype(np.int32) for pool in pools]
    task_vocab = _Vocab()
    task_vocab.codes([t.name for t in spec.tasks])
    vocabs = {
        "trajectory": _Vocab(),
        "configuration": _Vocab(),
        "task": task_vocab,
        "split": split_vocab,
        "item_id": item_vocab,
        "group": group_vocab,
        "subtask": sub_vocab,
        "answer": ans_vocab,
    }
    return vocabs, pool_codes, split_codes


@dataclass(frozen=True)
class _Mixing:
    """Weights of the latent parts (square roots of their variance shares)."""

    a_u: float  # item difficulty in the correctness latent
    a_v: float  # trajectory-item effect
    a_e: float  # AR(1) remainder along checkpoints
    gs: float  # share of a validation item's effects common to its group
    w_i: float  # item part of the wrong-answer latent
    w_e: float  # its AR(1) part
    rc: float  # correlation of the log-loss with the correctness latent

    @classmethod
    def of(cls, spec: SimSpec) -> _Mixing:
        return cls(
            a_u=math.sqrt(spec.item_share),
            a_v=math.sqrt(spec.trajectory_item_share),
            a_e=math.sqrt(1 - spec.item_share - spec.trajectory_item_share),
            gs=spec.group_share,
            w_i=math.sqrt(spec.wrong_item_share),
            w_e=math.sqrt(1 - spec.wrong_item_share),
            rc=spec.nll_correctness_corr,
        )


def _trajectory(
    cfg: _Config,
    task: TaskSim,
    pool: _Pool,
    ans_codes: np.ndarray,
    spec: SimSpec,
    mix: _Mixing,
    rng: np.random.Generator,
    *,
    code: int,
    configuration: int,
) -> _Traj:
    """One seed of ``cfg``: its true accuracy curve and the kept cells of its (checkpoint ×
    item) grid: answers, correctness, NLL rows. The draws from ``rng`` follow one fixed order
    (accuracy, correctness, answers, NLL, exclusions)."""
    n = len(pool.item_ids)
    t_count = len(cfg.steps)
    p_test, z, correct, static = _correctness(cfg, task, pool, spec, mix, rng)
    answer = _answer_codes(pool, ans_codes, correct, spec, mix, rng)
    n_matched, n_complete, nll_matched, nll_complete = _nll(cfg, pool, z, spec, mix, rng)
    keep_gen, keep_nll = _exclusions(task.n_validation, t_count, n, spec, rng)
    steps = cfg.steps
    if spec.average_last:  # rows of the averages first (their reserved steps are negative)
        rows = _averages(task, pool, ans_codes, spec, p_test, z, static, answer, nll_matched, nll_complete)
        steps, p_test, correct, answer, nll_matched, nll_complete = (
            np.concatenate([a, b]) for a, b in zip(rows, (steps, p_test, correct, answer, nll_matched, nll_complete), strict=True)
        )
        keep_gen, keep_nll = (np.concatenate([np.ones((len(rows[0]), n), dtype=bool), k]) for k in (keep_gen, keep_nll))
        t_count = len(steps)
    steps_grid = np.broadcast_to(steps[:, None], (t_count, n))
    k = int(keep_nll.sum())
    ntok = np.stack([n_matched, n_complete])  # (2, n)
    windows = np.array([MATCHED_WINDOW, COMPLETE_WINDOW], dtype=np.int64)
    return _Traj(
        code=code,
        configuration=configuration,
        task=cfg.task_index,
        steps=steps,
        p_test=p_test,
        keep_gen=keep_gen,
        keep_nll=keep_nll,
        gen_step=steps_grid[keep_gen],
        answer=answer[keep_gen],
        correct=correct[keep_gen],
        # NLL rows: window innermost (512, then complete) for each kept cell
        nll_step=np.repeat(steps_grid[keep_nll], 2),
        nll_sum=np.stack([nll_matched[keep_nll], nll_complete[keep_nll]], 1).ravel(),
        n_tokens=np.broadcast_to(ntok.T[None, :, :], (t_count, n, 2))[keep_nll].ravel(),
        window=np.tile(windows, k),
    )


def _averages(
    task: TaskSim, pool: _Pool, ans_codes: np.ndarray, spec: SimSpec, p_test, z, static, answer, nll_matched, nll_complete
) -> tuple[np.ndarray, ...]:
    """``(steps, p_test, correct, answer, nll_matched, nll_complete)`` of the averages of the last
    K checkpoints (``spec.average_last``; steps -K, ascending): true accuracy the mean of those
    checkpoints' plus ``average_gain_pp``; correctness latent ``static`` (the item parts, the same
    in every row) plus the mean of their AR(1) parts rescaled to unit variance, so an average
    answers most like the checkpoints it averages; a wrong answer the final checkpoint's when it
    is wrong, else the item's first distractor; NLL the mean of theirs. No random draws: the
    checkpoints' rows are those of the same simulation without averages."""
    ks = sorted(spec.average_last, reverse=True)
    phi = spec.ar_coefficient
    p_avg = np.array([p_test[-k:].mean() + spec.average_gain_pp / 100 for k in ks]).clip(1e-6, 1 - 1e-6)
    lags = [np.abs(np.subtract.outer(np.arange(k), np.arange(k))) for k in ks]
    sd = np.array([math.sqrt(float((phi**lag).sum())) / k for k, lag in zip(ks, lags, strict=True)])  # of a mean of k AR rows
    z_avg = static[None, :] + np.stack([z[-k:].mean(axis=0) - static for k in ks]) / sd[:, None]
    thr = norm_ppf(p_avg)[:, None] + np.where(pool.is_test, 0.0, task.validation_shift)[None, :]
    correct = z_avg < thr
    wrong = np.where(answer[-1] != ans_codes[:, 0], answer[-1], ans_codes[:, 1])  # (n,)
    answers = np.where(correct, ans_codes[None, :, 0], wrong[None, :])
    mean = lambda a: np.stack([a[-k:].mean(axis=0) for k in ks])  # noqa: E731
    return np.array([-k for k in ks], dtype=np.int64), p_avg, correct, answers, mean(nll_matched), mean(nll_complete)


def _correctness(
    cfg: _Config, task: TaskSim, pool: _Pool, spec: SimSpec, mix: _Mixing, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(true test accuracy (T,), correctness latent z (T, n), correct (T, n), its item parts
    (n,))``: the latent
    is item difficulty + trajectory-item effect + AR(1) along checkpoints, cut at the test
    curve for test items and at the (shifted, slightly mismatched) validation curve."""
    n = len(pool.item_ids)
    t_count = len(cfg.steps)
    p_test = _accuracy_curve(cfg, spec, rng)
    z_val = norm_ppf(p_test) + task.validation_shift
    z_val = z_val + spec.validation_mismatch * rng.standard_normal(t_count)
    thr = np.where(pool.is_test[None, :], norm_ppf(p_test)[:, None], z_val[:, None])
    v = rng.standard_normal(n)
    vg = rng.standard_normal(pool.n_groups)
    val = ~pool.is_test
    gs = mix.gs
    v[val] = math.sqrt(gs) * vg[pool.group_index[val]] + math.sqrt(1 - gs) * v[val]
    static = mix.a_u * pool.difficulty + mix.a_v * v
    z = static[None, :] + mix.a_e * _ar1(rng, n, t_count, spec.ar_coefficient)
    return p_test, z, z < thr, static


def _answer_codes(
    pool: _Pool, ans_codes: np.ndarray, correct: np.ndarray, spec: SimSpec, mix: _Mixing, rng: np.random.Generator
) -> np.ndarray:
    """Answer code per (checkpoint, item): the reference when correct, otherwise a persistent
    item-specific wrong one (the wrong-answer latent cut at the item's thresholds)."""
    t_count, n = correct.shape
    wl = mix.w_i * pool.wrong_pref[None, :] + mix.w_e * _ar1(rng, n, t_count, spec.wrong_ar)
    # slot 0: reference, 1..n_dis: distractors, n_dis + 1: "" (see _cut_points)
    slot = 1 + (wl[:, :, None] > pool.thresholds[None, :, :]).sum(axis=2)
    slot = np.where(correct, 0, slot)
    return ans_codes[np.arange(n)[None, :], slot]


def _nll(
    cfg: _Config, pool: _Pool, z: np.ndarray, spec: SimSpec, mix: _Mixing, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(matched tokens (n,), complete tokens (n,), matched NLL (T, n), complete NLL (T, n))``:
    token counts fixed per item (tokenizer factor per configuration); per-token loss on a
    U-shaped curve × an item lognormal weakly tied to the correctness latent ``z``."""
    t_count, n = z.shape
    x = cfg.steps / cfg.steps[-1]
    n_complete = np.rint(pool.response_tokens * cfg.token_factor).astype(np.int64)
    n_complete = np.maximum(1, n_complete)
    prompt = np.rint(pool.prompt_tokens * cfg.token_factor).astype(np.int64)
    n_matched = np.clip(MATCHED_WINDOW - prompt, 0, n_complete)
    curve = _loss_curve(x, cfg.nll_level, cfg.nll_min_at, cfg.nll_early, cfg.nll_late)
    curve = curve * np.exp(spec.nll_checkpoint_sd * rng.standard_normal(t_count))
    tail = _loss_curve(x, cfg.nll_level, cfg.nll_tail_min_at, cfg.nll_early, cfg.nll_late)
    rc = mix.rc
    item_eff = math.sqrt(1 - rc * rc) * pool.nll_item[None, :] + rc * z
    noise = spec.nll_noise_sigma * rng.standard_normal((t_count, n))
    mult = np.exp(spec.nll_item_sigma * item_eff + noise)
    tail_mult = np.exp(0.3 * rng.standard_normal(n))
    nll_matched = n_matched[None, :] * curve[:, None] * mult
    n_tail = (n_complete - n_matched)[None, :]
    nll_complete = nll_matched + n_tail * tail[:, None] * mult * tail_mult[None, :]
    return n_matched, n_complete, nll_matched, nll_complete


def _exclusions(n_val: int, t_count: int, n: int, spec: SimSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Keep masks (T, n) of the generation and NLL rows: a few validation items lose one
    checkpoint's generation, NLL or both rows."""
    keep_gen = np.ones((t_count, n), dtype=bool)
    keep_nll = np.ones((t_count, n), dtype=bool)
    n_missing = int(rng.binomial(n_val, spec.missing_rate)) if spec.missing_rate > 0 else 0
    if n_missing:
        who = rng.choice(n_val, size=n_missing, replace=False)
        when = rng.integers(0, t_count, n_missing)
        mode = rng.integers(0, 3, n_missing)  # 0: generation, 1: NLL, 2: both
        keep_gen[when[mode != 1], who[mode != 1]] = False
        keep_nll[when[mode != 0], who[mode != 0]] = False
    return keep_gen, keep_nll


@dataclass
class _Traj:
    """One trajectory's rows: kept cells of the (checkpoint × item) grid, in that order."""

    code: int
    configuration: int
    task: int
    steps: np.ndarray
    p_test: np.ndarray
    keep_gen: np.ndarray  # (T, n) bool
    keep_nll: np.ndarray  # (T, n) bool
    gen_step: np.ndarray
    answer: np.ndarray
    correct: np.ndarray
    nll_step: np.ndarray
    nll_sum: np.ndarray
    n_tokens: np.ndarray
    window: np.ndarray


def _first_config(configs: list[_Config], task_index: int) -> int:
    return next(i for i, c in enumerate(configs) if c.task_index == task_index)


def _tiled_column(
    vocab: _Vocab, blocks: list[tuple[np.ndarray, np.ndarray]], repeat: int, strings: str
) -> pd.api.extensions.ExtensionArray:
    """A string column whose rows are the kept cells of per-trajectory (checkpoint × item) grids.

    ``blocks`` holds, per trajectory, the per-item codes (n,) and the keep mask (T, n); every
    kept cell gives ``repeat`` rows. In ``string`` mode the rows of a fully kept checkpoint are
    one slice of a per-item Arrow array, so strings are copied once, in bulk, not row by row.
    """
    if strings == "category":
        codes = np.concatenate([np.repeat(np.broadcast_to(c[None, :], keep.shape)[keep], repeat) for c, keep in blocks])
        return vocab.column(codes, strings)
    dictionary = pa.array(list(vocab.index), type=pa.large_string())
    cache: dict[int, pa.Array] = {}
    chunks: list[pa.Array] = []
    for c, keep in blocks:
        base = cache.get(id(c))
        if base is None:
            base = cache[id(c)] = dictionary.take(pa.array(np.repeat(c, repeat)))
        for row in keep:
            if row.all():
                chunks.append(base)
            else:
                chunks.append(base.filter(pa.array(np.repeat(row, repeat))))
    return pd.array(pa.concat_arrays(chunks), dtype="string[pyarrow]")


def _assemble(
    trajs: list[_Traj],
    pool_codes: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    split_codes: list[np.ndarray],
    vocabs: dict[str, _Vocab],
    strings: str,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Concatenate the per-trajectory arrays and build the string columns."""
    consts = {
        tr.code: {
            "trajectory": np.full(len(pool_codes[tr.task][0]), tr.code, dtype=np.int32),
            "configuration": np.full(len(pool_codes[tr.task][0]), tr.configuration, np.int32),
            "task": np.full(len(pool_codes[tr.task][0]), tr.task, dtype=np.int32),
        }
        for tr in trajs
    }

    def per_item(tr: _Traj, name: str) -> np.ndarray:
        if name in consts[tr.code]:
            return consts[tr.code][name]
        if name == "split":
            return split_codes[tr.task]
        items, groups, subs, _ = pool_codes[tr.task]
        return {"item_id": items, "group": groups, "subtask": subs}[name]

    def strcol(name: str, table: str) -> pd.api.extensions.ExtensionArray:
        repeat = 2 if table == "nll" else 1
        keep = "keep_nll" if table == "nll" else "keep_gen"
        blocks = [(per_item(tr, name), getattr(tr, keep)) for tr in trajs]
        return _tiled_column(vocabs[name], blocks, repeat, strings)

    gen_cols: dict[str, object] = {}
    for name in GENERATION_COLUMNS:
        if name == "step":
            gen_cols[name] = np.concatenate([tr.gen_step for tr in trajs]).astype(np.int64)
        elif name == "answer":
            codes = np.concatenate([tr.answer for tr in trajs])
            gen_cols[name] = vocabs["answer"].column(codes, strings)
        elif name == "correct":
            gen_cols[name] = np.concatenate([tr.correct for tr in trajs]).astype(bool)
        else:
            gen_cols[name] = strcol(name, "generations")
    gen = pd.DataFrame(gen_cols, copy=False)

    numeric = {"step": "nll_step", "nll_sum": "nll_sum", "n_tokens": "n_tokens", "window": "window"}
    nll_cols: dict[str, object] = {}
    for name, dtype in NLL_COLUMNS.items():
        if name in numeric:
            parts = [getattr(tr, numeric[name]) for tr in trajs]
            nll_cols[name] = np.concatenate(parts).astype(dtype, copy=False)
        else:
            nll_cols[name] = strcol(name, "nll")
    nll = pd.DataFrame(nll_cols, copy=False)

    tt = np.concatenate([np.full(len(tr.steps), i) for i, tr in enumerate(trajs)])
    truth = pd.DataFrame(
        {
            "trajectory": vocabs["trajectory"].column(np.array([tr.code for tr in trajs], dtype=np.int32)[tt], strings),
            "configuration": vocabs["configuration"].column(np.array([tr.configuration for tr in trajs], dtype=np.int32)[tt], strings),
            "task": vocabs["task"].column(np.array([tr.task for tr in trajs], dtype=np.int32)[tt], strings),
            "step": np.concatenate([tr.steps for tr in trajs]).astype(np.int64),
            "true_test_accuracy": np.concatenate([tr.p_test for tr in trajs]).astype(np.float64),
        }
    )
    return gen, nll, truth


def _parameters(spec: SimSpec) -> dict:
    out = asdict(spec)
    if not spec.average_last:  # a simulation without averages is described as before they existed
        del out["average_last"], out["average_gain_pp"]
    return out


def foreign_records(out: Path) -> list[str]:
    """Records in ``out`` that no simulation wrote: its records files and units when the
    folder has no ``simulation.json`` (a simulation's folder has one)."""
    if (out / SIMULATION_FILE).is_file() or not out.is_dir():
        return []
    names = [GENERATIONS_FILE, NLL_FILE, TRUTH_FILE, UNITS_DIR]
    return [n for n in names if (out / n).exists()]


def write_simulation(out_dir: str | Path, spec: SimSpec | str = "small", seed: int = 0, *, force: bool = False) -> Path:
    """Write generations/nll/truth parquet files and ``simulation.json`` into ``out_dir``.

    Returns ``out_dir``. Same spec and seed → byte-identical files (no timestamps anywhere).
    Records that a simulation did not write (no ``simulation.json`` beside them: a measured
    folder) are never replaced unless ``force``.
    """
    spec_obj, name = _resolve(spec)
    out = Path(out_dir)
    found = [] if force else foreign_records(out)
    if found:
        raise CkptselError(
            f"{out} holds records that no simulation wrote ({', '.join(found)}); choose another folder, or pass --force to replace them"
        )
    gen, nll, truth = simulate(spec_obj, seed)
    meta = {
        "preset": name,
        "seed": int(seed),
        "parameters": _parameters(spec_obj),
        "counts": {
            "trajectories": int(truth["trajectory"].nunique()),
            "configurations": int(truth["configuration"].nunique()),
            "generation_rows": len(gen),
            "nll_rows": len(nll),
        },
        "files": [GENERATIONS_FILE, NLL_FILE, TRUTH_FILE],
    }
    # the folder is marked as a simulation's first: a run killed midway can be run again
    write_text(out / SIMULATION_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    write_records(out / GENERATIONS_FILE, gen)
    write_records(out / NLL_FILE, nll)
    write_parquet(out / TRUTH_FILE, truth)
    return out


__all__ = ["SIMULATION_FILE", "TRUTH_COLUMNS", "TRUTH_FILE", "simulate", "write_simulation"]


def checkpoint_grids(spec: SimSpec | str, seed: int = 0) -> tuple[SimSpec, list[tuple[str, int, list[int]]]]:
    """The spec and, per configuration the simulation draws, (its name, its task's index, its
    checkpoint steps): the study shape :mod:`ckptsel.sim.shape` writes."""
    spec_obj, _ = _resolve(spec)
    return spec_obj, [(c.name, c.task_index, [int(s) for s in c.steps]) for c in _configurations(spec_obj, seed)]


def token_lengths(task: TaskSim, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and reference-response token counts per item (validation first), drawn as the
    simulation draws them."""
    return _token_lengths(task, rng)
