"""What every optimizer is: a data-independent round schedule plus pure
functions over explicit state, in the style of optax (shared/DESIGN.md §2).

The schedule says, before any data is touched, which users each round asks,
with which privacy budget and norm bound; it is what the ledger is planned
from. The state functions never see per-user values: `update` receives the
analyzer's estimate of the mean of the round's inputs.
"""
from __future__ import annotations

import abc
import bisect
import functools
import math
import dataclasses
from typing import Any, Callable, ClassVar

import numpy as np

from pipeline.problems.base import Problem

GRADIENTS = "gradients"  # users send ∇ℓ(θ, x) at the queried θ
DATA = "data"  # users send their raw points (mean estimation)


@dataclasses.dataclass(frozen=True)
class RoundGroup:
    """Consecutive rounds that each ask `users` users with one budget.

    Attributes:
      rounds: how many rounds.
      users: users per round.
      first_user: the first user of the group's first round.
      user_stride: how far the batch moves each round: `users` for disjoint
        consecutive batches (sequential), 0 for the same users every round.
      epsilon, delta: each round's protocol budget.
      norm_bound: Δ₂ of each round's inputs.
      folds: how many calls share this budget by composition: 1 when the budget
        is each call's own, T when the protocol is calibrated so that T calls
        over the same users together meet it (tight-mode P_GD).
      sampling: "all" (every one of the `users`), "uniform" (`sample_size` of
        them, without replacement) or "poisson" (each with probability `rate`),
        drawn afresh each round.
      sample_size, rate: the sampling's parameter.
      noise_std: when > 0, the noise the protocol adds is fixed by the optimizer
        (PNSGD's σ) instead of calibrated to the round's budget.
      noisy_max: (leaves, λ, Δ, candidates) of the report-noisy-max selections the
        round's statistic feeds (Frank–Wolfe), for the `report_noisy_max` protocol.
      honest_fraction: robust mode: the fraction γ of the round's users who send;
        the others drop out (a fresh uniform sample each round).
      smoothing: when > 0, users send the gradient of the Moreau envelope of
        their loss with this β instead of the job's problem's gradient (the
        phased reductions re-smooth every phase); the norm bound is unchanged.
    """

    rounds: int
    users: int
    first_user: int
    user_stride: int
    epsilon: float
    delta: float
    norm_bound: float
    folds: int = 1
    sampling: str = "all"
    sample_size: int = 0
    rate: float = 0.0
    noise_std: float = 0.0
    noisy_max: tuple = ()
    honest_fraction: float = 1.0
    smoothing: float = 0.0


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """One round: its population [first_user, stop_user), who of them answer
    (all, or a fresh sample), the budget and the input kind."""

    round: int
    first_user: int
    stop_user: int
    epsilon: float
    delta: float
    norm_bound: float
    inputs: str
    folds: int = 1
    sampling: str = "all"
    sample_size: int = 0
    rate: float = 0.0
    noise_std: float = 0.0
    noisy_max: tuple = ()
    honest_fraction: float = 1.0
    smoothing: float = 0.0

    @property
    def population(self) -> int:
        """The users the round may ask."""
        return self.stop_user - self.first_user

    @property
    def users(self) -> int:
        """The users the call is planned for: the sample size when sampled
        uniformly, else the population (a Poisson sample's size is random)."""
        return self.sample_size if self.sampling == "uniform" else self.population


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The whole run's rounds, known before any data is read.

    Attributes:
      composition: how the ledger composes rounds ("sequential" or
        "fully_interactive", see pipeline.accounting.ledger).
      groups: the rounds, in order.
      inputs: GRADIENTS or DATA.
      slack: δ' of advanced composition (fully interactive only).
      release: the event that accounts the released output ("final_iterate" only).
    """

    composition: str
    groups: tuple[RoundGroup, ...]
    inputs: str = GRADIENTS
    slack: float | None = None
    release: object = None

    def __post_init__(self):
        starts, total = [], 0
        for group in self.groups:
            starts.append(total)
            total += group.rounds
        object.__setattr__(self, "_starts", tuple(starts))
        object.__setattr__(self, "_total", total)

    @property
    def rounds(self) -> int:
        return self._total

    def plan(self, round_index: int) -> RoundPlan:
        """The plan of one round.

        Args:
          round_index: 0 ≤ round_index < rounds.

        Returns:
          The round's plan.
        """
        at = bisect.bisect_right(self._starts, round_index) - 1
        group = self.groups[at]
        first = group.first_user + (round_index - self._starts[at]) * group.user_stride
        return RoundPlan(
            round_index, first, first + group.users, group.epsilon, group.delta, group.norm_bound, self.inputs,
            group.folds, group.sampling, group.sample_size, group.rate, group.noise_std, group.noisy_max,
            group.honest_fraction, group.smoothing,
        )


def with_dropouts(schedule: Schedule, honest_fraction: float) -> Schedule:
    """The schedule with a fraction 1 − γ of every round's users dropping out: each round
    a fresh uniform sample of ⌊γ·users⌋ (at least 1) sends (seed 000 Appendix A.3)."""
    groups = tuple(dataclasses.replace(group, sampling="uniform", honest_fraction=honest_fraction,
                                       sample_size=max(1, math.floor(honest_fraction * group.users)))
                   for group in schedule.groups)
    return dataclasses.replace(schedule, groups=groups)


def protocol_mean_mse(protocol, accounting: str, users: int, dim: int, epsilon: float, delta: float,
                      norm_bound: float, folds: int = 1) -> float:
    """E‖estimated mean − mean‖² of one call of the run's protocol (calibrated parameters).

    Args:
      protocol: the run's protocol object, or None for P_vec planned by `accounting`.
      accounting, users, dim, epsilon, delta, norm_bound, folds: the call.

    Returns:
      The mean's squared error from the protocol alone.
    """
    if protocol is None:
        from pipeline.protocols import cjmp  # the default protocol of seed 000

        return cjmp.mean_mse(accounting, users, dim, epsilon, delta, norm_bound, folds)
    return protocol.mean_mse(users, dim, epsilon, delta, norm_bound, folds)


def best_batch_size(n_users: int, bound: Callable[[int], float]) -> int:
    """The batch size in [1, n] that minimizes an explicit utility bound, over 60
    log-spaced candidates (calibrated parameter mode).

    The bounds here are unimodal in B (noise falls, the number of steps falls), so
    a ternary search over the candidates finds the same minimum in ~12
    evaluations instead of 60; each can be a protocol calibration.

    Args:
      n_users: n.
      bound: the bound as a function of the batch size B.

    Returns:
      The minimizing B.
    """
    candidates = sorted({max(1, round(size)) for size in np.geomspace(1, n_users, 60)})
    value = functools.lru_cache(maxsize=None)(bound)
    low, high = 0, len(candidates) - 1
    while high - low > 2:
        left, right = low + (high - low) // 3, high - (high - low) // 3
        if value(candidates[left]) <= value(candidates[right]):
            high = right
        else:
            low = left
    return min(candidates[low: high + 1], key=value)


class Optimizer(abc.ABC):
    """An SCO algorithm as pure functions of explicit state.

    Subclasses are frozen dataclasses holding their resolved hyperparameters.
    """

    name: ClassVar[str]
    problem: Problem

    @abc.abstractmethod
    def schedule(self) -> Schedule:
        """The data-independent round schedule."""

    @abc.abstractmethod
    def init(self) -> Any:
        """The initial state."""

    def start(self, seed: int) -> Any:
        """The initial state of a run with this seed (optimizers that draw their
        own noise key it to the seed; the others ignore it)."""
        return self.init()

    @abc.abstractmethod
    def query(self, state: Any) -> np.ndarray:
        """The point θ at which this round's users evaluate their gradients."""

    @abc.abstractmethod
    def update(self, state: Any, noisy_mean: np.ndarray) -> Any:
        """The next state, from the analyzer's estimate of the round's mean input."""

    @abc.abstractmethod
    def output(self, state: Any) -> np.ndarray:
        """The model the algorithm would release if it stopped now."""

    @abc.abstractmethod
    def hyperparameters(self) -> dict[str, float | int]:
        """The resolved hyperparameters (batch size, rounds, step size, ...)."""

    @abc.abstractmethod
    def theory_rate(self) -> float:
        """The excess-loss rate of the theorem this optimizer implements, its
        hidden constant taken as 1 (see pipeline.optimizers.theory)."""
