"""Choosing: validation records → selection-probability vectors, frozen and hashed (SPEC §3, §4, §6, §7).

Nothing here can see a test record: :func:`choose` takes only :class:`ValidationData`.
:func:`freeze` writes the choices and their SHA-256; :func:`load_frozen` is the only way
to obtain a :class:`FrozenChoices`, and it verifies the hash first. Scoring accepts nothing
else. The rules (signal, direction) come from :mod:`ckptsel.rules`, the budgets, thinning
factors and settings' defaults from :mod:`ckptsel.defaults`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ckptsel import defaults
from ckptsel.analysis import core
from ckptsel.defaults import BUDGETS, ONE_VARIANT_BUDGETS, THINNING
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.io import write_parquet, write_text
from ckptsel.records import ValidationData
from ckptsel.records.schema import COMPLETE_WINDOW
from ckptsel.rules import H_BASELINE, RULES

FULL = "full"
CHOICES_FILE = "choices.parquet"
HASH_FILE = "choices.sha256"
COLUMNS = ["trajectory", "scheme", "rule", "budget", "step", "prob"]


@dataclass(frozen=True)
class ChoiceSettings:
    """Permutations, seed and the finite validation budgets ("full" is always added).

    ``budgets`` are kept sorted and distinct; ``D`` is ``G(full) − G(budgets[0])``. The
    one-variant sensitivity uses :data:`~ckptsel.defaults.ONE_VARIANT_BUDGETS` with the default
    budgets and the chosen budgets otherwise (in both cases those that fit its groups). The
    settings' dictionary (hashed with the choices) names the budgets only when they are not
    the default, so default choices hash as before.
    """

    permutations: int = defaults.PERMUTATIONS
    seed: int = defaults.SEED
    budgets: tuple[int, ...] = BUDGETS

    def __post_init__(self):
        object.__setattr__(self, "budgets", check_budgets(self.budgets))

    @property
    def one_variant_budgets(self) -> tuple[int, ...]:
        return ONE_VARIANT_BUDGETS if self.budgets == BUDGETS else self.budgets

    @property
    def d_from(self) -> int:
        """The budget ``D`` starts from: the smallest."""
        return self.budgets[0]

    def to_dict(self) -> dict:
        out: dict = {"permutations": self.permutations, "seed": self.seed}
        if self.budgets != BUDGETS:
            out["budgets"] = list(self.budgets)
        return out


MAX_BUDGET = 10**9


def check_budgets(budgets) -> tuple[int, ...]:
    """Budgets as a sorted tuple of distinct positive integers; one clear error otherwise."""
    if isinstance(budgets, (str, bytes)) or not hasattr(budgets, "__iter__"):
        raise CkptselError(f"budgets must be a list of positive integers, not {budgets!r}")
    values = list(budgets)
    for b in values:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 1 <= b <= MAX_BUDGET:
            raise CkptselError(
                f"budgets must be positive integers (at most {MAX_BUDGET}); got {b!r} in {values!r}"
            )
    if not values:
        raise CkptselError("budgets: give at least one finite validation budget (e.g. 32,128,512)")
    return tuple(sorted({int(b) for b in values}))


def parse_budgets(text: str) -> tuple[int, ...]:
    """``"32,128,512"`` → ``(32, 128, 512)`` (the ``--budgets`` option)."""
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError as err:
        raise CkptselError(
            f"--budgets must be comma-separated positive integers such as 32,128,512 (got {text!r})"
        ) from err
    return check_budgets(values)


def _budget_labels(pool: int, budgets: tuple[int, ...]) -> tuple[list[int], list[str]]:
    finite = [b for b in budgets if b <= pool]  # larger budgets are skipped
    return finite, [str(b) for b in finite] + [FULL]


def _rule_probs(
    scores: dict[str, np.ndarray], full: dict[str, np.ndarray], labels: list[str]
) -> dict[tuple[str, str], np.ndarray]:
    """Selection vectors per (rule, budget) from prefix scores ``(T, P, B)`` and full-pool scores."""
    out = {}
    for rule in (r for r in RULES.values() if r.name in scores):
        probs = core.tie_probabilities(scores[rule.name], maximize=rule.maximize).mean(axis=1)  # (T, B)
        final = core.tie_probabilities(full[rule.name], maximize=rule.maximize)
        probs = np.concatenate([probs, final[:, None]], axis=1)
        for b, label in enumerate(labels):
            out[(rule.name, label)] = probs[:, b]
    return out


def _last(n_checkpoints: int, labels: list[str]) -> dict[tuple[str, str], np.ndarray]:
    """Rules without a signal keep the final checkpoint at every budget."""
    e = np.zeros(n_checkpoints)
    e[-1] = 1.0
    return {(r.name, label): e for r in RULES.values() if not r.chooses for label in labels}


def signals(v: ValidationData) -> dict[str, np.ndarray]:
    """Per-item validation signal ``(T, n)`` of every rule that has one for these records."""
    out = {}
    for rule in RULES.values():
        sig = rule.signal(v) if rule.chooses else None
        if sig is not None:  # e.g. without NLL records the matched-NLL rule (and H) is absent
            out[rule.name] = sig
    return out


def thinned(v: ValidationData, idx: np.ndarray) -> ValidationData:
    """The trajectory restricted to the checkpoints ``idx`` (items unchanged)."""
    return replace(
        v,
        steps=v.steps[idx],
        correct=v.correct[idx],
        answers=v.answers[idx],
        nll={w: a[idx] for w, a in v.nll.items()},
    )


@dataclass
class PoolSubsets:
    """The validation subsets of one eligible pool: nested permutations and one-variant orders.

    Depends only on the item ids, their groups and the settings, so trajectories that share a
    pool share it (and every rule sees the same subsets).
    """

    labels: list[str]
    nested: core.NestedSubsets | None  # finite budgets; None when the pool is below them all
    ov_labels: list[str]
    one_variant: core.NestedSubsets

    @classmethod
    def build(cls, item_ids: np.ndarray, groups: np.ndarray, settings: ChoiceSettings) -> PoolSubsets:
        n = len(item_ids)
        keys = core.string_keys(item_ids)
        finite, labels = _budget_labels(n, settings.budgets)
        orders = core.permutations(keys, settings.seed, settings.permutations)
        nested = core.NestedSubsets(orders, finite, n) if finite else None
        group_codes, group_names = pd.factorize(pd.Series(groups), sort=True)
        n_groups = len(group_names)
        ov_orders = core.one_variant_orders(
            keys, group_codes.astype(np.int64), core.string_keys(list(group_names)),
            settings.seed, settings.permutations,
        )
        ov_finite, ov_labels = _budget_labels(n_groups, settings.one_variant_budgets)
        return cls(labels, nested, ov_labels, core.NestedSubsets(ov_orders, [*ov_finite, n_groups], n))


def choose_trajectory(
    v: ValidationData, settings: ChoiceSettings, subsets: PoolSubsets | None = None
) -> dict[tuple[str, str, str], np.ndarray]:
    """All frozen selection vectors of one trajectory: ``(scheme, rule, budget) -> (T,)``."""
    T = v.correct.shape[0]
    subsets = subsets or PoolSubsets.build(v.item_ids, v.groups, settings)
    labels = subsets.labels
    P = settings.permutations
    sig = signals(v)

    def prefix(sig: np.ndarray) -> np.ndarray:
        if subsets.nested is None:
            return np.zeros((sig.shape[0], P, 0))
        return subsets.nested.sums(sig)

    out: dict[tuple[str, str, str], np.ndarray] = {}
    scores = {r: prefix(s) for r, s in sig.items()}
    full = {r: s.sum(axis=1) for r, s in sig.items()}
    for key, p in {**_rule_probs(scores, full, labels), **_last(T, labels)}.items():
        out[("nested", *key)] = p

    # complete-response NLL control: the NLL rule on window=0 sums, same subsets
    if COMPLETE_WINDOW in v.nll:
        nll0 = v.nll[COMPLETE_WINDOW]
        control = _rule_probs({H_BASELINE: prefix(nll0)}, {H_BASELINE: nll0.sum(axis=1)}, labels)
        for (rule, label), p in control.items():
            out[("nll_complete", rule, label)] = p

    # checkpoint thinning: accuracy/NLL sums are row subsets; grid-dependent signals (agreement's
    # pluralities) are redone on the thinned grid
    for k in THINNING:
        idx = core.thinned_indices(T, k)
        if len(idx) < 2:  # nothing left to choose between: the final checkpoint alone
            continue
        th_scores = {r: sc[idx] for r, sc in scores.items()}
        th_full = {r: f[idx] for r, f in full.items()}
        redo = [r for r in sig if RULES[r].grid_dependent]
        if redo:
            v_k = thinned(v, idx)
            for r in redo:
                sig_k = RULES[r].signal(v_k)
                th_scores[r], th_full[r] = prefix(sig_k), sig_k.sum(axis=1)
        for (rule, label), p in {**_rule_probs(th_scores, th_full, labels), **_last(len(idx), labels)}.items():
            vec = np.zeros(T)
            vec[idx] = p
            out[(f"thin{k}", rule, label)] = vec

    # one variant per group: per repetition one eligible variant of each group, groups reordered;
    # its last budget is "all groups", which differs by repetition, so it comes from the masks too
    for rule in (r for r in RULES.values() if r.name in sig):
        ov = subsets.one_variant.sums(sig[rule.name])
        probs = core.tie_probabilities(ov, maximize=rule.maximize).mean(axis=1)
        for b, label in enumerate(subsets.ov_labels):
            out[("one_variant", rule.name, label)] = probs[:, b]
    for (rule, label), p in _last(T, subsets.ov_labels).items():
        out[("one_variant", rule, label)] = p
    return out


def choose(validation: list[ValidationData], settings: ChoiceSettings) -> pd.DataFrame:
    """Frozen-choice table for every trajectory (rows with non-zero probability only)."""
    frames = []
    pools: dict[bytes, PoolSubsets] = {}
    for v in validation:
        key = hashlib.sha256("\n".join([*v.item_ids, "\x00", *v.groups]).encode()).digest()
        if key not in pools:  # trajectories sharing a pool share its subsets
            pools[key] = PoolSubsets.build(v.item_ids, v.groups, settings)
        picked = choose_trajectory(v, settings, pools[key])
        keys = list(picked)
        probs = np.stack([picked[k] for k in keys])  # (K, T)
        k_idx, c_idx = np.nonzero(probs)
        names = np.array(keys, dtype=object)  # (K, 3)
        frames.append(
            pd.DataFrame(
                {
                    "trajectory": v.trajectory,
                    "scheme": names[k_idx, 0],
                    "rule": names[k_idx, 1],
                    "budget": names[k_idx, 2],
                    "step": v.steps[c_idx].astype(np.int64),
                    "prob": probs[k_idx, c_idx],
                }
            )
        )
    table = pd.concat(frames, ignore_index=True)
    return table.sort_values(["trajectory", "scheme", "rule", "budget", "step"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- freezing
def canonical_bytes(table: pd.DataFrame, settings: ChoiceSettings) -> bytes:
    """The hashed form: settings as JSON, then one CSV row per choice, floats as ``repr``."""
    t = table[COLUMNS]
    lines = [json.dumps(settings.to_dict(), sort_keys=True), ",".join(COLUMNS)]
    cols = [t[c].astype(str).tolist() for c in COLUMNS[:4]]
    cols += [t["step"].astype(np.int64).tolist(), t["prob"].astype(np.float64).tolist()]
    lines += [f"{a},{b},{c},{d},{e},{f!r}" for a, b, c, d, e, f in zip(*cols, strict=True)]
    return ("\n".join(lines) + "\n").encode()


def choices_hash(table: pd.DataFrame, settings: ChoiceSettings) -> str:
    return hashlib.sha256(canonical_bytes(table, settings)).hexdigest()


def freeze(table: pd.DataFrame, settings: ChoiceSettings, out_dir: Path) -> str:
    """Write the choices and their SHA-256 (of the canonical form). Returns the hash."""
    out_dir = Path(out_dir)
    digest = choices_hash(table, settings)
    stored = table[COLUMNS].copy()
    write_parquet(out_dir / CHOICES_FILE, stored)
    write_text(
        out_dir / HASH_FILE,
        json.dumps({"sha256": digest, "settings": settings.to_dict(), "rows": len(stored)}, indent=1) + "\n",
    )
    return digest


@dataclass(frozen=True)
class FrozenChoices:
    """Choices read back from disk after their hash was checked. Only :func:`load_frozen` makes one."""

    table: pd.DataFrame
    settings: ChoiceSettings
    sha256: str

    def vectors(self, trajectory: str, steps: np.ndarray) -> dict[tuple[str, str, str], np.ndarray]:
        """``(scheme, rule, budget) -> (T,)`` selection probabilities over ``steps``."""
        rows = self.table[self.table["trajectory"] == trajectory]
        if rows.empty:
            raise CkptselError(f"trajectory {trajectory!r} has test records but no frozen choices")
        col = np.searchsorted(steps, rows["step"].to_numpy())
        if (col >= len(steps)).any() or not np.array_equal(steps[np.minimum(col, len(steps) - 1)], rows["step"].to_numpy()):
            raise CkptselError(
                f"trajectory {trajectory!r}: frozen choices name checkpoints that have no test records"
            )
        keys = list(zip(rows["scheme"], rows["rule"], rows["budget"], strict=True))
        uniq, inv = np.unique(np.array(["\x00".join(k) for k in keys]), return_inverse=True)
        mats = np.zeros((len(uniq), len(steps)))
        mats[inv, col] = rows["prob"].to_numpy()
        return {tuple(u.split("\x00")): mats[i] for i, u in enumerate(uniq)}


def load_frozen(out_dir: Path) -> FrozenChoices:
    """Read frozen choices and verify their SHA-256 before anyone may use them."""
    out_dir = Path(out_dir)
    path, hpath = out_dir / CHOICES_FILE, out_dir / HASH_FILE
    if not path.is_file() or not hpath.is_file():
        raise CkptselError(f"{out_dir}: frozen choices not found ({CHOICES_FILE} and {HASH_FILE})")
    try:
        meta = json.loads(hpath.read_text(encoding="utf-8"))
        settings = ChoiceSettings(**meta["settings"])
        stored = str(meta["sha256"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, CkptselError) as err:
        raise VerificationError(
            f"{hpath}: not a readable choices hash file ({type(err).__name__}: {err})"
        ) from err
    try:
        table = pd.read_parquet(path)
        digest = choices_hash(table, settings)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise VerificationError(f"{path}: not readable frozen choices ({err})") from err
    if digest != stored:
        raise VerificationError(
            f"{path}: SHA-256 {digest} does not match the frozen hash {stored} in {hpath.name}"
        )
    return FrozenChoices(table=table, settings=settings, sha256=digest)
