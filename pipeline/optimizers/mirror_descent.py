"""Noisy mirror descent over the ℓ1 ball (seed 003: Algorithm 1's noisy gradients,
Algorithm 4's entropic (KL) mirror map)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.errors import ConfigError
from pipeline.optimizers.sampled_sgd import SampledSGD
from pipeline.problems.base import Problem
from pipeline.protocols.base import GAUSSIAN_SUM


class SimplexState(NamedTuple):
    """Weights w on the 2d vertices ±R·e_j, their running sum, and the steps taken."""

    weights: np.ndarray
    weights_sum: np.ndarray
    steps: int


@dataclasses.dataclass(frozen=True)
class MirrorDescentL1(SampledSGD):
    """θ = R·(w⁺ − w⁻) with w on the simplex of the ℓ1 ball's 2d vertices; each round
    k users sampled without replacement send gradients, the central Gaussian
    mechanism noises their sum, and w ← w·exp(−η R (ĝ, −ĝ)), renormalized (the
    exponentiated-gradient step of seed 003 Algorithm 4). The output averages θ.

    Seed 003 Algorithm 1 samples with replacement; we sample without, the
    assumption the ledger accounts (WBK19 Thm 9 and joint convexity).
    The mirror step with the ℓp map of Algorithm 1 has no closed form on the ℓ1
    ball (notes trap T9); the entropy on the vertex simplex does, and is 1-strongly
    convex w.r.t. ‖·‖₁ on it, which is all the analysis uses.

    η = √(2 ln(2d)/T)/(R·G∞) with G∞ = L∞ + σ_mean√(2 ln(2d)), the expected largest
    coordinate of the noisy mean gradient: the step of the standard EG regret bound
    R·G∞·√(2T ln(2d)).
    """

    name: ClassVar[str] = "mirror_descent_l1"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size"})  # its step is the theorem's
    requires: ClassVar[frozenset] = frozenset({GAUSSIAN_SUM})
    record_level: ClassVar[bool] = False  # seed 003 accounts users, each one record: user level only

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None) -> "MirrorDescentL1":
        """k = ⌈√n⌉, T = ⌈n/k⌉ unless given (SampledSGD), on an ℓ1-ball problem.

        Raises:
          ConfigError: a problem whose domain is not an ℓ1 ball.
        """
        if not hasattr(problem, "lipschitz_inf"):
            raise ConfigError("problem.name", problem.name, f"optimizer {cls.name} needs an ℓ1-ball problem "
                              "(l1_least_squares, l1_least_squares_active)")
        return super().from_config(problem, n_users, epsilon, delta, rounds, batch_size, step_size,
                                   accounting, parameters, protocol)

    @property
    def step(self) -> float:
        d = self.problem.dim
        noise_on_mean = math.sqrt(max(self.gradient_bound**2 - self.problem.lipschitz**2, 0.0) / d)
        g_inf = self.problem.lipschitz_inf + noise_on_mean * math.sqrt(2 * math.log(2 * d))
        return math.sqrt(2 * math.log(2 * d) / self.rounds) / (self.problem.radius * g_inf)

    def _theta(self, weights: np.ndarray) -> np.ndarray:
        d = self.problem.dim
        return self.problem.radius * (weights[:d] - weights[d:])

    def init(self) -> SimplexState:
        uniform = np.full(2 * self.problem.dim, 1.0 / (2 * self.problem.dim))  # θ = 0
        return SimplexState(uniform, np.zeros_like(uniform), 0)

    def query(self, state: SimplexState) -> np.ndarray:
        return self._theta(state.weights)

    def update(self, state: SimplexState, noisy_mean: np.ndarray | None) -> SimplexState:
        weights = state.weights
        if noisy_mean is not None:
            scaled = -self.step * self.problem.radius * np.concatenate([noisy_mean, -noisy_mean])
            logits = np.log(weights) + scaled
            weights = np.exp(logits - logits.max())
            weights /= weights.sum()
        return SimplexState(weights, state.weights_sum + state.weights, state.steps + 1)

    def output(self, state: SimplexState) -> np.ndarray:
        return self._theta(state.weights_sum / state.steps if state.steps else state.weights)

    def theory_rate(self) -> float:
        """The EG regret bound over T: R·G∞·√(2 ln(2d)/T) (seed 003 Appendix A, constants of the standard proof)."""
        return 2 * math.log(2 * self.problem.dim) / (self.step * self.rounds)  # = R·G∞·√(2 ln(2d)/T)

    def hyperparameters(self) -> dict[str, float | int]:
        return {**super().hyperparameters(), "step_size": self.step}
