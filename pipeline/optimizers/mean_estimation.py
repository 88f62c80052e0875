"""Mean estimation: one P_vec call over all users' raw points (the simplest end-to-end check)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.base import DATA, Optimizer, RoundGroup, Schedule, protocol_mean_mse
from pipeline.problems.base import Problem


@dataclasses.dataclass(frozen=True)
class MeanEstimation(Optimizer):
    """θ̂ = π_Θ(P_vec(x_1..x_n)/n) with Δ₂ = the data's norm bound (inputs are
    clipped to it). For the quadratic problem θ* is the mean, so the excess
    loss is ½‖θ̂ − E x‖².

    Attributes:
      problem: the SCO problem.
      n_users: n.
      epsilon, delta: the run's target, spent by the single call.
      accounting: "paper" or "tight", the rule that calibrates P_vec.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    accounting: str = "paper"
    protocol: object = None
    name: ClassVar[str] = "mean_estimation"
    overrides: ClassVar[frozenset] = frozenset()  # one round over all users, no step
    sends: ClassVar[str] = DATA

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None) -> "MeanEstimation":
        """One round over all users; rounds, batch_size and step_size do not apply, and
        there is nothing for `parameters` to calibrate."""
        if problem.data_dim != problem.dim:
            raise ConfigError("optimizer.name", cls.name, f"estimates the mean of unlabelled points; {problem.name} "
                              "data carry labels")
        return cls(problem, n_users, epsilon, delta, accounting, protocol)

    def schedule(self) -> Schedule:
        group = RoundGroup(1, self.n_users, 0, self.n_users, self.epsilon, self.delta,
                           self.problem.data_norm_bound)
        return Schedule(SEQUENTIAL, (group,), inputs=DATA)

    def init(self) -> np.ndarray:
        return np.zeros(self.problem.dim)

    def query(self, state: np.ndarray) -> np.ndarray:
        return state

    def update(self, state: np.ndarray, noisy_mean: np.ndarray) -> np.ndarray:
        return self.problem.project(noisy_mean)

    def output(self, state: np.ndarray) -> np.ndarray:
        return state

    def theory_rate(self) -> float:
        mse = protocol_mean_mse(self.protocol, self.accounting, self.n_users, self.problem.dim, self.epsilon,
                                self.delta, self.problem.data_norm_bound, inputs=DATA)  # the call the run plans
        return theory.mean_estimation_rate(self.problem, self.n_users, mse * self.n_users**2)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"rounds": 1, "batch_size": self.n_users}
