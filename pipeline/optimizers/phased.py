"""The phased reductions for strongly convex losses: sequential (seed 000, Theorem 4.8)
and fully interactive (Theorem 4.9 with Lemma B.7)."""
from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np

from pipeline.accounting.compositions import PHASED, SEQUENTIAL
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.averaged import AveragedState
from pipeline.optimizers.base import STATE_FUNCTIONS, Optimizer, RoundGroup, Schedule
from pipeline.optimizers.full_gd import FullGD, FullGDSmoothed
from pipeline.optimizers.seq_agd import PAPER, AcsaState, SeqAGD, SeqAGDSmoothed
from pipeline.problems.base import Problem
from pipeline.problems.smoothed import MoreauSmoothed
from pipeline.twins import keeps_twin


def phase_count(n_users: int) -> int:
    """k = 1 + ⌈log₂ log₂ n⌉ (notes seed-000 §2.6: the proof's recursion halves the
    exponent each phase; the paper says O(log log n) without a constant)."""
    return 1 + math.ceil(math.log2(max(2.0, math.log2(max(n_users, 4)))))


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


class PhasedState(NamedTuple):
    """The phase running, its optimizer's state, and how many of its rounds are done."""

    phase: int
    inner: Any
    done: int


@dataclasses.dataclass(frozen=True)
class _PhasedReduction(Optimizer):
    """What both phased reductions are: k = 1 + ⌈log₂log₂ n⌉ disjoint groups of n/k
    users in turn, each running an inner optimizer from the previous group's output,
    tuned for the distance that output is from θ* (`_localized`), and re-smoothed
    per group when the loss is not smooth.

    Attributes:
      problem: a λ-strongly convex problem (the first group's envelope, for non-smooth losses).
      n_users: n.
      epsilon, delta: the run's target; every group spends it on its own users.
      phases: the k inner optimizers, over n/k users each.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    phases: tuple
    theorem: ClassVar[str]
    inner: ClassVar[tuple[type, type]]  # (for β-smooth losses, for non-smooth ones)
    overrides: ClassVar[frozenset] = frozenset()  # each phase sets its own rounds, batch and step

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = PAPER, protocol=None) -> "_PhasedReduction":
        """Splits the users into k groups and resolves each group's parameters in turn.

        Raises:
          ConfigError: a problem that is not strongly convex, fewer users than groups,
            or overrides (rounds, batch_size and step_size are each group's own).
        """
        if problem.strong_convexity <= 0:
            raise ConfigError("optimizer.name", cls.name,
                              f"needs a strongly convex loss ({cls.theorem}); {problem.name} has λ = 0")
        for field, value in (("optimizer.rounds", rounds), ("optimizer.batch_size", batch_size),
                             ("optimizer.step_size", step_size)):
            if value is not None:
                raise ConfigError(field, value, f"does not apply to optimizer {cls.name} (each phase sets its own)")
        count = phase_count(n_users)
        if n_users // count < 1:
            raise ConfigError("n_users", n_users, f"must be at least the {count} phases of {cls.theorem}")
        inner = cls.inner[0] if math.isfinite(problem.smoothness) else cls.inner[1]
        phases = _localized(lambda reach: inner.from_config(problem, n_users // count, epsilon, delta,
                                                            accounting=accounting, parameters=parameters,
                                                            protocol=protocol, distance=reach), problem, count)
        return cls(phases[0].problem, n_users, epsilon, delta, phases)

    def init(self) -> PhasedState:
        return PhasedState(0, self.phases[0].init(), 0)

    @abc.abstractmethod
    def _warm_start(self, theta: np.ndarray) -> Any:
        """The next group's initial state at the previous group's output."""

    def query(self, state: PhasedState) -> np.ndarray:
        return self.phases[state.phase].query(state.inner)

    def update(self, state: PhasedState, noisy_mean: np.ndarray) -> PhasedState:
        return self.advanced(state, self.phases[state.phase].update(state.inner, noisy_mean), 1)

    def advanced(self, state: PhasedState, inner: Any, rounds: int) -> PhasedState:
        """The state after `rounds` more rounds of the running phase, which left its optimizer
        at `inner`: the next phase, warm-started at this one's output, once its last round is done.

        Args:
          state: the state before those rounds.
          inner: the phase optimizer's state after them.
          rounds: how many (at most the phase's rounds left; pipeline.engine.fused runs several).
        """
        phase = self.phases[state.phase]
        if state.done + rounds == phase.rounds and state.phase + 1 < len(self.phases):
            return PhasedState(state.phase + 1, self._warm_start(phase.output(inner)), 0)
        return PhasedState(state.phase, inner, state.done + rounds)

    def output(self, state: PhasedState) -> np.ndarray:
        return self.phases[state.phase].output(state.inner)

    def steppers(self) -> tuple[Optimizer, ...]:
        """The phases, whose updates the rounds apply in turn (`stepping`, `advanced`): unless a
        subclass changes how a round steps, then itself (and its rounds run in numpy)."""
        return self.phases if keeps_twin(self, "steppers", STATE_FUNCTIONS) else (self,)

    def stepping(self, state: PhasedState) -> tuple[Optimizer, Any]:
        return self.phases[state.phase], state.inner

    def hyperparameters(self) -> dict[str, float | int]:
        return {"phases": len(self.phases), "phase_users": self.phases[0].n_users,
                "rounds": sum(p.rounds for p in self.phases),
                "first_distance": self.phases[0].distance, "last_distance": self.phases[-1].distance}


@dataclasses.dataclass(frozen=True)
class SeqPhased(_PhasedReduction):
    """Theorem 4.8: k phases on disjoint sets of n/k users, each running
    P_AGD (β-smooth losses) or smoothed P_AGD (non-smooth) from the previous phase's
    output; every user answers once, so the run is (ε, δ)-DP by parallel composition.

    Phase i is tuned for the distance R_i its predecessor's Lemma 4.4 bound implies
    (`_localized`): the proof's D_i ≤ √(2Δ_i/λ), with Lemma 4.4's unstated constant
    taken as 1 (notes §2.6, T19). Non-smooth losses are re-smoothed every phase
    (Theorem 4.7's β grows as R_i shrinks).
    """

    name: ClassVar[str] = "seq_phased"
    theorem: ClassVar[str] = "Theorem 4.8"
    inner: ClassVar[tuple[type, type]] = (SeqAGD, SeqAGDSmoothed)

    def schedule(self) -> Schedule:
        groups, first = [], 0
        for phase in self.phases:
            groups.append(RoundGroup(phase.rounds, phase.batch_size, first, phase.batch_size,
                                     self.epsilon, self.delta, phase.problem.lipschitz,
                                     smoothing=_smoothing(phase)))
            first += phase.n_users  # the next phase's users are fresh (disjoint)
        return Schedule(SEQUENTIAL, tuple(groups))

    def _warm_start(self, theta: np.ndarray) -> AcsaState:
        return AcsaState(theta, theta.copy(), 1)  # θ_1 = θ^ag_1 = the previous phase's output

    def theory_rate(self) -> float:
        return theory.phased_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        return {**super().hyperparameters(), "batch_size": self.phases[0].batch_size}


@dataclasses.dataclass(frozen=True)
class FullPhased(_PhasedReduction):
    """Theorem 4.9, λ-strongly convex: the Feldman–Koren–Talwar reduction (Lemma B.7)
    with P_GD. k disjoint groups of n/k users run P_GD (smoothed P_GD for non-smooth
    losses) in turn, each from the previous group's output and each at the full
    (ε, δ): the groups compose in parallel, each group's rounds by Lemma B.6 (paper)
    or RDP (tight). FKT20's group sizes are not in the seed (notes §2.7, T19); equal
    groups, as `seq_phased`. Group i's step size is tuned for the distance R_i that
    Lemmas B.4 + B.5 (explicit) of group i − 1 imply (`_localized`).
    """

    name: ClassVar[str] = "full_phased"
    theorem: ClassVar[str] = "Theorem 4.9, Lemma B.7"
    inner: ClassVar[tuple[type, type]] = (FullGD, FullGDSmoothed)

    def schedule(self) -> Schedule:
        groups, first = [], 0
        for phase in self.phases:
            (group,) = phase.schedule().groups
            groups.append(dataclasses.replace(group, first_user=first, smoothing=_smoothing(phase)))
            first += phase.n_users  # the next group's users are fresh (disjoint)
        return Schedule(PHASED, tuple(groups), slack=self.phases[0].schedule().slack)

    def _warm_start(self, theta: np.ndarray) -> AveragedState:
        return AveragedState(theta, np.zeros_like(theta), 0)

    def theory_rate(self) -> float:
        return theory.full_phased_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        return {**super().hyperparameters(), "step_size": self.phases[0].step_size}
