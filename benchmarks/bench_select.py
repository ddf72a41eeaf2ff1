"""Validation of ``select``'s plausibly-best set and selection-corrected estimate on simulated
trajectories with known truth.

Generator: checkpoint ``t`` has true accuracy ``p_t`` (its accuracy on new items). Items come in
groups of ``g`` variants; item ``i`` is right at ``t`` iff ``a·u_i + √(1−a²)·e_ti < Φ⁻¹(p_t)``,
where ``u_i`` (difficulty) is shared in part by the group's variants and ``e_ti`` (checkpoint
noise) is shared in part within a group and AR(1)-correlated across checkpoints (``ρ = 0.5``:
adjacent checkpoints agree more). Marginally P(right) = ``p_t`` exactly.

For each scenario, validation size ``n`` and group size ``g``, ``--reps`` trajectories are drawn
and ``select``'s engine (:func:`ckptsel.stats.model_confidence_set` with ``--draws``
cluster-bootstrap resamples; :func:`~ckptsel.stats.winner_interval`, its default jitter points) is
run on each, exactly as ``ckptsel select`` does (level 0.95). Reported:

* how often the plausibly-best set holds a truly best checkpoint (and all of them, where several
  tie), and its mean size;
* how often the corrected interval, and the naive one (``max ± z·se``), covers the chosen
  checkpoint's true accuracy (the tie-weighted mean of ``p_t`` over the top validation
  accuracies), with their mean bias and width.

    python benchmarks/bench_select.py [--reps 400] [--draws 500] [--no-write]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ckptsel.stats import (
    WINNER_JITTER,
    Clusters,
    accuracy_moments,
    bootstrap_accuracies,
    model_confidence_set,
    naive_winner,
    norm_ppf,
    resample_counts,
    winner_interval,
)
from ckptsel.stats.winners import PROJECTION_DRAWS

from _common import machine, update_section

LEVEL = 0.95
LOADING = 0.85
SCENARIOS = {
    "peak then decline (+4 pp)": [0.40, 0.46, 0.50, 0.53, 0.555, 0.545, 0.535, 0.515],
    "flat plateau (5 tied best)": [0.45, 0.52, 0.56, 0.60, 0.60, 0.60, 0.60, 0.60],
    "final best (gaps 0.5-3 pp)": [0.45, 0.52, 0.56, 0.58, 0.585, 0.59, 0.595, 0.60],
    "20 ckpts, near-tie top (0.1-0.4 pp)": list(
        np.r_[np.linspace(0.40, 0.58, 12), [0.600, 0.601, 0.602, 0.603, 0.604, 0.603, 0.602, 0.6035]]
    ),
}


def ar1(rng: np.random.Generator, lead: tuple[int, ...], T: int, rho: float) -> np.ndarray:
    """``lead + (T,)`` standard normals, AR(1) with correlation ``rho`` along the last axis."""
    x = rng.standard_normal(lead + (T,))
    out = np.empty_like(x)
    out[..., 0] = x[..., 0]
    for t in range(1, T):  # a loop over checkpoints only
        out[..., t] = rho * out[..., t - 1] + np.sqrt(1 - rho**2) * x[..., t]
    return out


def draw(rng, p, reps: int, n: int, g: int, share: float = 0.5, rho: float = 0.5) -> np.ndarray:
    """``(reps, T, n)`` correctness of ``n`` items in ``n / g`` groups of ``g`` variants."""
    p = np.asarray(p)
    T, G = len(p), n // g
    ug = rng.standard_normal((reps, 1, G)).repeat(g, axis=2)
    u = np.sqrt(share) * ug + np.sqrt(1 - share) * rng.standard_normal((reps, 1, n))
    h = ar1(rng, (reps, G), T, rho).transpose(0, 2, 1).repeat(g, axis=2)  # (reps, T, n)
    nu = ar1(rng, (reps, n), T, rho).transpose(0, 2, 1)
    e = np.sqrt(share) * h + np.sqrt(1 - share) * nu
    z = LOADING * u + np.sqrt(1 - LOADING**2) * e
    return z < norm_ppf(p)[None, :, None]


def run_cell(p, n: int, g: int, reps: int, draws: int, seed: list[int]) -> dict:
    """Coverage of the set and the intervals over ``reps`` trajectories of one cell."""
    p = np.asarray(p)
    rng = np.random.default_rng(seed)
    correct = draw(rng, p, reps, n, g)
    clusters = Clusters.of(np.repeat(np.arange(n // g), g))
    t0 = time.perf_counter()
    x, sums, sigma = accuracy_moments(correct, clusters)
    counts = resample_counts(clusters.count, draws, np.random.default_rng([*seed, 1]))
    mcs = model_confidence_set(x, sigma, bootstrap_accuracies(sums, clusters.sizes, counts), LEVEL)
    t_set = time.perf_counter() - t0
    best = p >= p.max() - 1e-12
    in_set = mcs["in_set"]
    top = (x >= x.max(axis=1, keepdims=True) - 1e-12).astype(float)
    truth = (top / top.sum(axis=1, keepdims=True)) @ p  # (reps,) the choice's true accuracy
    t0 = time.perf_counter()
    est = winner_interval(x, sigma, n, clusters.count, LEVEL, np.random.default_rng([*seed, 2]))[:3]
    t_est = time.perf_counter() - t0
    out = {
        "any": in_set[:, best].any(axis=1).mean(),
        "all": in_set[:, best].all(axis=1).mean(),
        "size": in_set.sum(axis=1).mean(),
        "chosen_best": (top[:, best].sum(axis=1) / top.sum(axis=1)).mean(),
        "ms": 1000 * (t_set + t_est) / reps,
    }
    for name, (e, lo, hi) in (("hybrid", est), ("naive", naive_winner(x, sigma, LEVEL))):
        out[f"{name}_cover"] = ((lo <= truth) & (truth <= hi)).mean()
        out[f"{name}_bias"] = 100 * (e - truth).mean()
        out[f"{name}_width"] = 100 * (hi - lo).mean()
    return out


def _summary(cells: list[dict]) -> str:
    """One sentence: the ranges over cells and how many cells meet the targets."""
    hy = np.array([c["hybrid_cover"] for c in cells])
    nv = np.array([c["naive_cover"] for c in cells])
    anyb = np.array([c["any"] for c in cells])
    allb = np.array([c["all"] for c in cells])
    band = ((hy >= 0.93) & (hy <= 0.97)).sum()
    return (
        f"Over the {len(cells)} cells: the set holds a truly best checkpoint in "
        f"{anyb.min():.3f}–{anyb.max():.3f} of trajectories ({(anyb >= 0.95).sum()}/{len(cells)} "
        f"cells ≥ 0.95), all of them in {allb.min():.3f}–{allb.max():.3f}; the corrected "
        f"interval covers in {hy.min():.3f}–{hy.max():.3f} (mean {hy.mean():.3f}; {band}/{len(cells)} "
        f"cells in 0.93–0.97, {(hy > 0.97).sum()} above, {(hy < 0.93).sum()} below), the naive one "
        f"in {nv.min():.3f}–{nv.max():.3f} (mean {nv.mean():.3f}; {(nv < 0.93).sum()}/{len(cells)} "
        f"cells below 0.93), optimistic by "
        f"{min(c['naive_bias'] for c in cells):+.2f} to {max(c['naive_bias'] for c in cells):+.2f} pp."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--ns", default="64,256,1024")
    ap.add_argument("--gs", default="1,2")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    start = time.perf_counter()
    rows, cells = [], []
    for k, (name, p) in enumerate(SCENARIOS.items()):
        reps = args.reps if len(p) <= 8 else max(100, args.reps // 4)
        for n in map(int, args.ns.split(",")):
            for g in map(int, args.gs.split(",")):
                o = run_cell(p, n, g, reps, args.draws, [k, n, g])
                rows.append(
                    f"| {name} | {n} | {g} | {reps} | {o['chosen_best']:.2f} | {o['any']:.3f} | "
                    f"{o['all']:.3f} | {o['size']:.1f} | {o['hybrid_cover']:.3f} | "
                    f"{o['hybrid_bias']:+.2f} | {o['hybrid_width']:.1f} | {o['naive_cover']:.3f} | "
                    f"{o['naive_bias']:+.2f} | {o['naive_width']:.1f} | {o['ms']:.0f} |"
                )
                cells.append(o)
                print(rows[-1], flush=True)
    elapsed = time.perf_counter() - start
    body = [
        "## select: plausibly-best set and selection-corrected estimate (`benchmarks/bench_select.py`)",
        "",
        f"Truth-known trajectories (items in groups of `g` variants, difficulty and checkpoint "
        f"noise shared within a group, AR(1) ρ = 0.5 across checkpoints, loading {LOADING}); "
        f"`select`'s engine at level {LEVEL}: model confidence set with {args.draws} cluster-"
        f"bootstrap resamples, hybrid winner interval with {WINNER_JITTER} Latin-hypercube jitter points "
        f"and {PROJECTION_DRAWS} projection draws. Run: `python "
        f"benchmarks/bench_select.py --reps {args.reps} --draws {args.draws}` (a quarter of the "
        f"trajectories, at least 100, for 20 checkpoints). {machine()}; {elapsed:.0f} s.",
        "",
        "| scenario | validation items n | group size g | trajectories | P(choice truly best) | "
        "set ∋ a truly best | set ⊇ all truly best | mean set size | corrected interval covers "
        "the choice's true accuracy | corrected bias, pp | corrected width, pp | naive (max ± z·se) "
        "covers | naive bias, pp | naive width, pp | ms per trajectory |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        _summary(cells),
        "",
        "Targets of issue 23: the set holds the truly best checkpoint in ≥ 95% of trajectories; the "
        "corrected interval covers at 93–97% where the naive one does not. Where several "
        "checkpoints tie for best (`flat plateau`), the set holds *a* best one always; holding all "
        "of them is harder (an equal checkpoint can lose a pairwise test by chance).",
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        update_section("bench_select", text)


if __name__ == "__main__":
    main()
