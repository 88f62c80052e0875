"""Shuffled projected noisy SGD releasing only its final iterate (seed 002, §2.5, Thm 2)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from pipeline import accounting as privacy  # submodules load on first use: shards never import dp_accounting
from pipeline.accounting.compositions import FINAL_ITERATE
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.base import CompiledUpdate, Optimizer, RoundGroup, Schedule, Staged
from pipeline.optimizers.sampled_sgd import LastIterateState
from pipeline.optimizers.transforms import chain, last_iterate, sgd
from pipeline.problems.base import Problem
from pipeline.protocols.base import CENTRAL_GAUSSIAN_NOISE, FIXED_NOISE


@dataclasses.dataclass(frozen=True)
class PNSGD(Staged, Optimizer):
    """w_t = Π_K(w_{t−1} − η(∇ℓ(w_{t−1}, x_t) + Z_t)), Z_t ~ N(0, σ²I), one user per
    step, one pass; only w_n is released (Sordello et al., Thm 2).

    The curator adds Z_t (the central Gaussian protocol with σ fixed here). Thm 2
    needs a secret uniform order of the users; the simulated users are i.i.d.
    draws, so taking them in index order gives the same distribution of w_n.
    Every intermediate iterate stays secret: the run logs the final round only.

    Attributes:
      problem: a β-smooth problem (Thm 1 needs the gradient map to contract).
      n_users: n, the steps.
      epsilon, delta: the run's target, met by the final iterate's release.
      step_size: η ≤ 2/(β + ρ).
      sigma: σ, the least noise whose Thm 2 bound (tight: or the Gaussian's) meets (ε, δ).
      accounting: the mode σ is calibrated in.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    step_size: float
    sigma: float
    accounting: str = "paper"
    name: ClassVar[str] = "pnsgd"
    overrides: ClassVar[frozenset] = frozenset({"step_size"})  # one user per round, every user once
    requires: ClassVar[frozenset] = frozenset({CENTRAL_GAUSSIAN_NOISE, FIXED_NOISE})
    final_iterate_only: ClassVar[bool] = True

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None) -> "PNSGD":
        """η = min(1/β, D/(L√n)) unless given; σ by bisection on the run's ledger.

        Raises:
          ConfigError: a non-smooth problem, η > 2/(β + ρ), or a budget no σ meets.
        """
        beta, rho = problem.smoothness, problem.strong_convexity
        if not math.isfinite(beta):
            raise ConfigError("optimizer.name", cls.name, f"needs a smooth loss (seed 002, Thm 1); {problem.name} is not")
        step_size = step_size or min(1.0 / beta, problem.diameter / (problem.lipschitz * math.sqrt(n_users)))
        if step_size > 2.0 / (beta + rho):
            raise ConfigError("optimizer.step_size", step_size, f"must be ≤ 2/(β + ρ) = {2.0 / (beta + rho):.4g} "
                              "(seed 002: the gradient map must contract)")
        draft = cls(problem, n_users, epsilon, delta, step_size, 1.0, accounting)
        lo, hi = 1e-3 * problem.lipschitz, 1e6 * problem.lipschitz
        if draft._spent(hi) > epsilon:
            raise ConfigError("privacy.epsilon", epsilon, f"no noise σ ≤ {hi:.3g} meets it (seed 002, Thm 2)")
        while hi / lo > 1.0 + 1e-4:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if draft._spent(mid) > epsilon else (lo, mid)
        return dataclasses.replace(draft, sigma=hi)

    def _events(self, sigma: float) -> tuple[privacy.events.PnsgdDpEvent, privacy.events.GaussianSumDpEvent]:
        problem = self.problem
        release = privacy.events.PnsgdDpEvent(self.n_users, sigma, problem.lipschitz, problem.smoothness,
                                              problem.strong_convexity, self.step_size, problem.diameter)
        return release, privacy.events.GaussianSumDpEvent(1, 1, problem.dim, 2.0 * problem.lipschitz, sigma)

    def _spent(self, sigma: float) -> float:
        try:
            return privacy.mechanisms.pnsgd_release_epsilon(*self._events(sigma), self.delta, self.accounting)[0]
        except ValueError:  # outside the theorem's range at this σ: not a certificate
            return math.inf

    def schedule(self) -> Schedule:
        group = RoundGroup(self.n_users, 1, 0, 1, self.epsilon, self.delta, self.problem.lipschitz,
                           noise_std=self.sigma)
        return Schedule(FINAL_ITERATE, (group,), release=self._events(self.sigma)[0])

    def init(self) -> LastIterateState:
        return LastIterateState(np.zeros(self.problem.dim), 0)

    def output(self, state: LastIterateState) -> np.ndarray:
        return state.theta

    def theory_rate(self) -> float:
        return theory.central_rate(self.problem, self.n_users, self.epsilon)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"rounds": self.n_users, "batch_size": 1, "step_size": self.step_size, "sigma": self.sigma}

    def stages(self) -> CompiledUpdate:
        """query θ; step θ − ηḡ; release π(step), the last iterate: (π(step), t + 1)."""
        return chain(sgd(self.step_size), last_iterate())
