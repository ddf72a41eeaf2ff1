"""A study simulator whose three estimands are known from the generating model (issue 14).

It works at the level the interval code consumes — per-trajectory, per-test-question utilities
``d = 100 (z_selected − z_final)`` of a frozen choice — so a study takes milliseconds.

Generating model (one task; configuration k, seed s, test question j):

* trajectory effect θ_ks = m + a_k + u_ks: configuration heterogeneity a_k (normal, or a
  right-skewed centred exponential), seeds correlated within a configuration through a_k,
  seed effect u_ks ~ N(0, τ_u²); seeds per configuration drawn from {2, 3, 4} (paper: 81
  trajectories in 26 configurations);
* test question j, shared by every trajectory: volatility ρ_j = ½ Beta(1, 4) (the chance that
  the chosen and the final checkpoint disagree on it; mean 0.1) and a direction β_j ~ N(0, τ_b²)
  (questions that later checkpoints tend to get right or wrong);
* outcome: with probability ρ_j the two checkpoints disagree, and then the chosen one is right
  with probability σ(θ_ks + β_j): d ∈ {−100, 0, +100}, E[d] = 100 ρ_j (2σ(θ_ks + β_j) − 1).

Truths (g(x) = 2σ(x) − 1, expectations by quadrature, not from the simulated records):

* configuration estimand (new configurations, these test questions):
  100 · mean_j ρ_j E_θ[g(θ + β_j)];
* question estimand (these trajectories, new questions): 100 · E[ρ] · mean_ks E_β[g(θ_ks + β)];
* joint (superpopulation): 100 · E[ρ] · E_{θ,β}[g(θ + β)].

E_θ uses a 200-point quantile grid of a_k times 8 Gauss–Hermite nodes for u (the skewed a_k has
no closed form); E_β 40 Gauss–Hermite nodes. Checkpoint grids and NLL behaviour are folded into
(ρ, θ): the intervals only ever see the selected-minus-final utilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

E_RHO = 0.5 * 1.0 / (1.0 + 4.0)  # E[½ Beta(1, 4)]


@dataclass(frozen=True)
class Scenario:
    name: str
    m: float = 0.1  # mean trajectory effect (≈ +0.5 pp gain)
    tau_a: float = 0.3  # configuration heterogeneity
    tau_u: float = 0.15  # seed-to-seed within a configuration
    tau_b: float = 1.0  # question direction (shared by every trajectory)
    skewed: bool = False  # a_k = τ_a (Exp(1) − 1) instead of N(0, τ_a²)
    items: int = 500
    seeds: tuple[int, ...] = (2, 3, 4)

    def config_effects(self, rng: np.random.Generator, k: int) -> np.ndarray:
        if self.skewed:
            return self.tau_a * (rng.exponential(1.0, k) - 1.0)
        return rng.normal(0.0, self.tau_a, k)

    def a_grid(self, points: int = 200) -> np.ndarray:
        """Quantiles of a_k at (i + ½)/points."""
        p = (np.arange(points) + 0.5) / points
        if self.skewed:
            return self.tau_a * (-np.log1p(-p) - 1.0)
        from statistics import NormalDist

        return self.tau_a * np.array([NormalDist().inv_cdf(x) for x in p])


def _g(x):
    return 2.0 / (1.0 + np.exp(-x)) - 1.0


def _gh(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights for E[f(Z)], Z ~ N(0, 1)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, w / w.sum()


@dataclass
class Study:
    d: np.ndarray  # (J, N) per-trajectory, per-question utilities (pp)
    configuration: np.ndarray  # (J,) configuration index of each trajectory
    truth_configuration: float
    truth_question: float


class Simulator:
    def __init__(self, scenario: Scenario):
        self.s = scenario
        ux, uw = _gh(8)
        a = scenario.a_grid()
        self.theta = (scenario.m + a[:, None] + scenario.tau_u * ux[None, :]).ravel()  # (M,)
        self.theta_w = (np.full(len(a), 1.0 / len(a))[:, None] * uw[None, :]).ravel()
        self.bx, self.bw = _gh(40)
        # superpopulation truth
        self.truth_joint = 100.0 * E_RHO * float(self.theta_w @ _g(self.theta[:, None] + scenario.tau_b * self.bx[None, :]) @ self.bw)

    def study(self, k: int, rng: np.random.Generator) -> Study:
        s = self.s
        a = s.config_effects(rng, k)
        n_k = rng.choice(np.asarray(s.seeds), size=k)
        conf = np.repeat(np.arange(k), n_k)
        theta = s.m + a[conf] + rng.normal(0.0, s.tau_u, len(conf))  # (J,)
        rho = 0.5 * rng.beta(1.0, 4.0, s.items)  # (N,)
        beta = rng.normal(0.0, s.tau_b, s.items)
        disagree = rng.random((len(conf), s.items)) < rho[None, :]
        win = rng.random((len(conf), s.items)) < 1.0 / (1.0 + np.exp(-(theta[:, None] + beta[None, :])))
        d = np.where(disagree, np.where(win, 100.0, -100.0), 0.0)
        f = self.theta_w @ _g(self.theta[:, None] + beta[None, :])  # (N,) E_θ g(θ + β_j)
        truth_c = 100.0 * float(np.mean(rho * f))
        truth_q = 100.0 * E_RHO * float(np.mean(_g(theta[:, None] + s.tau_b * self.bx[None, :]) @ self.bw))
        return Study(d, conf, truth_c, truth_q)


def arrays(study: Study) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What stats.summarize hands the interval code: ``sums (K, 1)``, ``sizes (K, 1)`` and the
    per-configuration question utilities ``(K, N, 1)``."""
    k = int(study.configuration.max()) + 1
    onehot = np.zeros((k, len(study.configuration)))
    onehot[study.configuration, np.arange(len(study.configuration))] = 1.0
    util = onehot @ study.d  # (K, N)
    sums = util.mean(axis=1)[:, None]
    sizes = onehot.sum(axis=1)[:, None]
    return sums, sizes, util[:, :, None]
