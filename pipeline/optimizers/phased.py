"""The phased reductions for strongly convex losses: sequential (seed 000, Theorem 4.8)
and fully interactive (Theorem 4.9 with Lemma B.7)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np

from pipeline.accounting.ledger import PHASED, SEQUENTIAL
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.averaged import AveragedState
from pipeline.optimizers.base import Optimizer, RoundGroup, Schedule
from pipeline.optimizers.full_gd import FullGD, FullGDSmoothed
from pipeline.optimizers.seq_agd import PAPER, AcsaState, SeqAGD, SeqAGDSmoothed
from pipeline.problems.base import Problem
from pipeline.problems.smoothed import MoreauSmoothed


class PhasedState(NamedTuple):
    """The phase running and its AC-SA state."""

    phase: int
    inner: AcsaState


def phase_count(n_users: int) -> int:
    """k = 1 + ⌈log₂ log₂ n⌉ (notes seed-000 §2.6: the proof's recursion halves the
    exponent each phase; the paper says O(log log n) without a constant)."""
    return 1 + math.ceil(math.log2(max(2.0, math.log2(max(n_users, 4)))))


def _phases(name: str, theorem: str, problem: Problem, n_users: int, rounds, batch_size, step_size) -> tuple[int, int]:
    """(k, n/k) of a phased reduction, after its rules.

    Raises:
      ConfigError: a problem that is not strongly convex, an override (each phase
        sets its own), or fewer users than phases.
    """
    if problem.strong_convexity <= 0:
        raise ConfigError("optimizer.name", name, f"needs a strongly convex loss ({theorem}); {problem.name} has λ = 0")
    for field, value in (("optimizer.rounds", rounds), ("optimizer.batch_size", batch_size),
                         ("optimizer.step_size", step_size)):
        if value is not None:
            raise ConfigError(field, value, f"does not apply to optimizer {name} (each phase sets its own)")
    count = phase_count(n_users)
    if n_users // count < 1:
        raise ConfigError("n_users", n_users, f"must be at least the {count} phases of {theorem}")
    return count, n_users // count


def _localized(build: Callable[[float], Any], loss: Problem, count: int) -> tuple:
    """The phases in turn, each tuned for the distance its predecessor leaves.

    λ-strong convexity gives ‖θ − θ*‖² ≤ 2(F(θ) − F*)/λ, so phase i + 1 starts
    within R_{i+1} = min(D, √(2Δ_i/λ)) of θ* in root mean square, Δ_i being phase
    i's excess-loss bound (`excess_bound`); the first starts within
    R_1 = min(D, 2L/λ), since λr²/2 ≤ F(θ_0) − F* ≤ Lr (notes seed-000 §2.6).
    Only step sizes, batch sizes and smoothing follow R_i: the projection stays
    onto Θ, and the norm bound, hence the privacy, does not change.

    Args:
      build: the phase optimizer tuned for a distance R.
      loss: the (unsmoothed) λ-strongly convex problem.
      count: k.

    Returns:
      The k phase optimizers.
    """
    lam = loss.strong_convexity
    reach = min(loss.diameter, 2 * loss.lipschitz / lam)
    phases = []
    for _ in range(count):
        phases.append(build(reach))
        reach = min(loss.diameter, math.sqrt(2 * phases[-1].excess_bound() / lam))
    return tuple(phases)


def _smoothing(phase) -> float:
    """The β users smooth with in a phase: its envelope's, or 0 for a smooth loss."""
    return phase.problem.smoothness if isinstance(phase.problem, MoreauSmoothed) else 0.0


@dataclasses.dataclass(frozen=True)
class SeqPhased(Optimizer):
    """Theorem 4.8: k phases on disjoint sets of n/k users, each running
    P_AGD (β-smooth losses) or smoothed P_AGD (non-smooth) from the previous phase's
    output; every user answers once, so the run is (ε, δ)-DP by parallel composition.

    Phase i is tuned for the distance R_i its predecessor's Lemma 4.4 bound implies
    (`_localized`): the proof's D_i ≤ √(2Δ_i/λ), with Lemma 4.4's unstated constant
    taken as 1 (notes §2.6, T19). Non-smooth losses are re-smoothed every phase
    (Theorem 4.7's β grows as R_i shrinks).

    Attributes:
      problem: a λ-strongly convex problem (the smoothed envelope, for non-smooth losses).
      n_users: n.
      epsilon, delta: the run's target, spent by every batch.
      phases: one AC-SA optimizer per phase, over n/k users each.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    phases: tuple[SeqAGD, ...]
    name: ClassVar[str] = "seq_phased"

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = PAPER, protocol=None) -> "SeqPhased":
        """Splits the users into k phases and resolves each phase's Theorem 4.3 / 4.7 parameters.

        Raises:
          ConfigError: a problem that is not strongly convex, fewer users than phases,
            or overrides (rounds, batch_size and step_size are the phases' own).
        """
        count, share = _phases(cls.name, "Theorem 4.8", problem, n_users, rounds, batch_size, step_size)
        inner = SeqAGD if math.isfinite(problem.smoothness) else SeqAGDSmoothed
        phases = _localized(lambda reach: inner.from_config(problem, share, epsilon, delta, accounting=accounting,
                                                            parameters=parameters, protocol=protocol,
                                                            distance=reach), problem, count)
        return cls(phases[0].problem, n_users, epsilon, delta, phases)

    def schedule(self) -> Schedule:
        groups, first = [], 0
        for phase in self.phases:
            groups.append(RoundGroup(phase.rounds, phase.batch_size, first, phase.batch_size,
                                     self.epsilon, self.delta, phase.problem.lipschitz,
                                     smoothing=_smoothing(phase)))
            first += phase.n_users  # the next phase's users are fresh (disjoint)
        return Schedule(SEQUENTIAL, tuple(groups))

    def init(self) -> PhasedState:
        return PhasedState(0, self.phases[0].init())

    def query(self, state: PhasedState) -> np.ndarray:
        return self.phases[state.phase].query(state.inner)

    def update(self, state: PhasedState, noisy_mean: np.ndarray) -> PhasedState:
        phase = self.phases[state.phase]
        inner = phase.update(state.inner, noisy_mean)
        if inner.t > phase.rounds and state.phase + 1 < len(self.phases):
            start = phase.output(inner)  # warm start: θ_1 = θ^ag_1 = the phase's output
            return PhasedState(state.phase + 1, AcsaState(start, start.copy(), 1))
        return PhasedState(state.phase, inner)

    def output(self, state: PhasedState) -> np.ndarray:
        return self.phases[state.phase].output(state.inner)

    def theory_rate(self) -> float:
        return theory.phased_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"phases": len(self.phases), "phase_users": self.phases[0].n_users,
                "batch_size": self.phases[0].batch_size, "rounds": sum(p.rounds for p in self.phases),
                "first_distance": self.phases[0].distance, "last_distance": self.phases[-1].distance}


class FullPhasedState(NamedTuple):
    """The phase running and its P_GD state."""

    phase: int
    inner: AveragedState


@dataclasses.dataclass(frozen=True)
class FullPhased(Optimizer):
    """Theorem 4.9, λ-strongly convex: the Feldman–Koren–Talwar reduction (Lemma B.7)
    with P_GD. k = 1 + ⌈log₂log₂ n⌉ disjoint groups of n/k users run P_GD (smoothed
    P_GD for non-smooth losses) in turn, each from the previous group's output and
    each at the full (ε, δ): the groups compose in parallel, each group's rounds by
    Lemma B.6 (paper) or RDP (tight). FKT20's group sizes are not in the seed (notes
    §2.7, T19); equal groups, as `seq_phased`. Group i's step size is tuned for
    the distance R_i that Lemmas B.4 + B.5 (explicit) of group i − 1 imply
    (`_localized`), and non-smooth losses are re-smoothed every group.

    Attributes:
      problem: a λ-strongly convex problem (the smoothed envelope, for non-smooth losses).
      n_users, epsilon, delta: as every optimizer.
      phases: one P_GD optimizer per group of n/k users.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    phases: tuple[FullGD, ...]
    name: ClassVar[str] = "full_phased"

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = PAPER, protocol=None) -> "FullPhased":
        """Splits the users into k groups and resolves each group's P_GD parameters.

        Raises:
          ConfigError: a problem that is not strongly convex, fewer users than groups,
            or overrides (each group sets its own).
        """
        count, share = _phases(cls.name, "Theorem 4.9, Lemma B.7", problem, n_users, rounds, batch_size, step_size)
        inner = FullGD if math.isfinite(problem.smoothness) else FullGDSmoothed
        phases = _localized(lambda reach: inner.from_config(problem, share, epsilon, delta, accounting=accounting,
                                                            parameters=parameters, protocol=protocol,
                                                            distance=reach), problem, count)
        return cls(phases[0].problem, n_users, epsilon, delta, phases)

    def schedule(self) -> Schedule:
        groups, first = [], 0
        for phase in self.phases:
            (group,) = phase.schedule().groups
            groups.append(dataclasses.replace(group, first_user=first, smoothing=_smoothing(phase)))
            first += phase.n_users  # the next group's users are fresh (disjoint)
        return Schedule(PHASED, tuple(groups), slack=self.phases[0].schedule().slack)

    def init(self) -> FullPhasedState:
        return FullPhasedState(0, self.phases[0].init())

    def query(self, state: FullPhasedState) -> np.ndarray:
        return self.phases[state.phase].query(state.inner)

    def update(self, state: FullPhasedState, noisy_mean: np.ndarray) -> FullPhasedState:
        phase = self.phases[state.phase]
        inner = phase.update(state.inner, noisy_mean)
        if inner.steps == phase.rounds and state.phase + 1 < len(self.phases):
            start = phase.output(inner)  # warm start from the group's output
            return FullPhasedState(state.phase + 1, AveragedState(start, np.zeros_like(start), 0))
        return FullPhasedState(state.phase, inner)

    def output(self, state: FullPhasedState) -> np.ndarray:
        return self.phases[state.phase].output(state.inner)

    def theory_rate(self) -> float:
        return theory.full_phased_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"phases": len(self.phases), "phase_users": self.phases[0].n_users,
                "rounds": sum(p.rounds for p in self.phases), "step_size": self.phases[0].step_size,
                "first_distance": self.phases[0].distance, "last_distance": self.phases[-1].distance}
