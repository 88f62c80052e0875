"""P_SGD: sequentially interactive mini-batch SGD (seed 000, Algorithm 3, Theorem 4.1)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.averaged import AveragedProjectedDescent
from pipeline.optimizers.base import RoundGroup, Schedule, best_batch_size, protocol_mean_mse
from pipeline.problems.base import Problem


@dataclasses.dataclass(frozen=True)
class SeqSGD(AveragedProjectedDescent):
    """T disjoint batches of B users; each user answers once, in one P_vec call
    at the full (ε, δ) (the transcript is (ε, δ)-DP by parallel composition).

    Attributes:
      problem: the SCO problem.
      n_users: n.
      epsilon, delta: the run's target, spent by every batch.
      batch_size: B.
      rounds: T ≤ n/B.
      step_size: η.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    batch_size: int
    rounds: int
    step_size: float
    name: ClassVar[str] = "seq_sgd"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size", "step_size"})

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None) -> "SeqSGD":
        """Resolves Theorem 4.1's parameters, honouring overrides.

        Paper mode: B = ⌈√d ln(d/δ)/ε⌉ clamped to [1, n]; T = ⌊n/B⌋. The printed
        η = εBD/(L√T(εB + √d L ln(d/δ))) has an extra L (notes T7); we use its
        intended form η = D/(L_G√T) with L_G = L(1 + √d ln(d/δ)/(εB)), which
        equals the printed one at L = 1. Calibrated mode: L_G² = L² + (the planned
        P_vec call's MSE)/B², the bound of Lemma 4.2 with its own constants, and
        the B that minimizes Lemma 4.2's D·L_G/√T.

        Raises:
          ConfigError: rounds × batch_size > n (a user would answer twice).
        """
        d = problem.dim
        log_term = math.sqrt(d) * math.log(d / delta)

        def lipschitz_g(size: int) -> float:
            if parameters == "paper":
                return problem.lipschitz * (1.0 + log_term / (epsilon * size))
            noise = protocol_mean_mse(protocol, accounting, size, d, epsilon, delta, problem.lipschitz)
            return math.sqrt(problem.lipschitz**2 + noise)

        if batch_size is None and parameters == "paper":
            batch_size = min(max(1, math.ceil(log_term / epsilon)), n_users)
        elif batch_size is None:
            batch_size = best_batch_size(n_users, lambda size: lipschitz_g(size) / math.sqrt(n_users // size))
        elif batch_size > n_users:
            raise ConfigError("optimizer.batch_size", batch_size, f"must be ≤ n_users = {n_users}")
        if rounds is None:
            rounds = n_users // batch_size
        elif rounds * batch_size > n_users:
            raise ConfigError(
                "optimizer.rounds", rounds,
                f"rounds × batch_size ({batch_size}) must be ≤ n_users = {n_users}: "
                "each user answers once (seed 000, Theorem 4.1)",
            )
        if step_size is None:
            step_size = problem.diameter / (lipschitz_g(batch_size) * math.sqrt(rounds))
        return cls(problem, n_users, epsilon, delta, batch_size, rounds, step_size)

    def schedule(self) -> Schedule:
        group = RoundGroup(self.rounds, self.batch_size, 0, self.batch_size,
                           self.epsilon, self.delta, self.problem.lipschitz)
        return Schedule(SEQUENTIAL, (group,))

    def theory_rate(self) -> float:
        return theory.seq_sgd_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"batch_size": self.batch_size, "rounds": self.rounds, "step_size": self.step_size}
