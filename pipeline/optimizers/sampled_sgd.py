"""SGD over rounds that sample users afresh: the companion seeds' baselines.

  cldp_sgd  seed 001 Algorithm 4.3.1: k of the n users, uniformly without
            replacement, each round; their reports shuffled (or summed by any
            protocol with a sampled accountant); last iterate, η_t = D/(G√t).
  dss_sgd   seed 001 §4.4: every user joins each round independently with
            probability q (self-sampling); the mean divides by the K_t reports
            that arrived, and a round with none leaves θ unchanged (notes trap 16).
  dp_sgd    Abadi et al. 2016 on the central Gaussian: Poisson batches of
            expected size B, or one pass over disjoint ("shuffled") batches;
            averaged iterate with the constant step D/(G√T).
  sgd       the non-private baseline: one pass of projected SGD over disjoint
            batches, exact sums.

G² = L² + (the planned call's noise on the mean) bounds E‖ḡ_t‖² (seed 001
Lemma 4.3.2 with the randomizer's exact MSE in place of f_p(ε0, b)/(k)).
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.accounting.compositions import FULLY_INTERACTIVE
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.averaged import AveragedProjectedDescent
from pipeline.optimizers.base import GRADIENTS, Optimizer, RoundGroup, RoundPlan, Schedule
from pipeline.optimizers.seq_sgd import SeqSGD
from pipeline.options import Option, choice, integer
from pipeline.problems.base import Problem
from pipeline.protocols.base import CENTRAL_GAUSSIAN_NOISE


class LastIterateState(NamedTuple):
    """θ_t and the number of steps t taken so far."""

    theta: np.ndarray
    steps: int


def _gradient_bound(problem: Problem, protocol, group: RoundGroup, expected_users: float) -> float:
    """G = √(L² + E‖noise on the mean‖²) for a round of this group (its planned call)."""
    plan = RoundPlan(0, group.first_user, group.first_user + group.users, group.epsilon, group.delta,
                     group.norm_bound, GRADIENTS, group.folds, group.sampling, group.sample_size, group.rate,
                     records_per_round=group.records_per_round, per_record=group.per_record,
                     records_min=group.records_min)
    params = protocol.plan(plan, problem.dim)
    return math.sqrt(problem.lipschitz**2 + protocol.sum_mse(params) / expected_users**2)


@dataclasses.dataclass(frozen=True)
class SampledSGD(Optimizer):
    """Projected SGD on freshly sampled users, last iterate, η_t = D/(G√t)
    (the step of seed 001 Lemma 4.3.3 [Shamir–Zhang 2013]).

    Attributes:
      problem: the SCO problem.
      n_users: n.
      epsilon, delta: the run's target, spent by all rounds together.
      rounds: T.
      batch_size: k (uniform) or the expected batch q·n (Poisson).
      gradient_bound: G.
      records_per_round: s, the records each sampled client sends at record level (Alg. 4.3.1;
        one for DSS-SGD); at user level a client sends the mean over all its records.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    rounds: int
    batch_size: int
    gradient_bound: float
    records_per_round: int = 1
    records_min: int = 1
    per_record: bool = False
    sampling: ClassVar[str] = "uniform"
    samples_users: ClassVar[bool] = True
    record_level: ClassVar[bool] = True
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size"})  # η_t = D/(G√t) is the lemma's

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None, records_per_round: int | None = None) -> "SampledSGD":
        """k = ⌈√n⌉ and T = ⌈n/k⌉ (each user answers once in expectation) unless given.

        Both parameter modes take G from the protocol's exact noise: no O-constant is dropped.

        Raises:
          ConfigError: a step size (η_t is the lemma's), or k > n.
        """
        if step_size is not None:
            raise ConfigError("optimizer.step_size", step_size, f"does not apply to optimizer {cls.name} (η_t = D/(G√t))")
        if batch_size is None:
            batch_size = max(2, math.ceil(math.sqrt(n_users)))
        if batch_size > n_users:
            raise ConfigError("optimizer.batch_size", batch_size, f"must be ≤ n_users = {n_users}")
        rounds = rounds or math.ceil(n_users / batch_size)
        draft = cls(problem, n_users, epsilon, delta, rounds, batch_size, 0.0, records_per_round or 1)
        return dataclasses.replace(draft, gradient_bound=_gradient_bound(problem, protocol, draft._group(), batch_size))

    def at_record_level(self, protocol, records_min: int) -> "SampledSGD":
        """Itself at record level: each sampled client sends s = records_per_round of its records,
        and G comes from the record-level call of the k·min(s, m) messages sure to be sent
        (Lemma 4.3.2: G² = L²(1 + f_p/(ks)), the mean being over all k·s messages)."""
        draft = dataclasses.replace(self, records_min=records_min, per_record=True)
        messages = self.batch_size * min(self.records_per_round, records_min)
        return dataclasses.replace(draft, gradient_bound=_gradient_bound(self.problem, protocol, draft._group(), messages))

    def _group(self) -> RoundGroup:
        sample = dict(sample_size=self.batch_size) if self.sampling == "uniform" else dict(
            rate=self.batch_size / self.n_users)
        records = dict(records_per_round=self.records_per_round, per_record=True,
                       records_min=self.records_min) if self.per_record else {}
        return RoundGroup(self.rounds, self.n_users, 0, 0, self.epsilon, self.delta, self.problem.lipschitz,
                          folds=self.rounds, sampling=self.sampling, **sample, **records)

    def schedule(self) -> Schedule:
        return Schedule(FULLY_INTERACTIVE, (self._group(),))

    def init(self) -> LastIterateState:
        return LastIterateState(np.zeros(self.problem.dim), 0)

    def query(self, state: LastIterateState) -> np.ndarray:
        return state.theta

    def update(self, state: LastIterateState, noisy_mean: np.ndarray | None) -> LastIterateState:
        steps = state.steps + 1
        if noisy_mean is None:  # nobody joined this round: no step, the clock still runs
            return LastIterateState(state.theta, steps)
        step = self.problem.diameter / (self.gradient_bound * math.sqrt(steps))
        return LastIterateState(self.problem.project(state.theta - step * noisy_mean), steps)

    def output(self, state: LastIterateState) -> np.ndarray:
        return state.theta

    def theory_rate(self) -> float:
        """Lemma 4.3.3: 2DG(2 + ln T)/√T, with T(1 − e^{−qn}) effective rounds under self-sampling."""
        effective = self.rounds * (1.0 - math.exp(-self.batch_size)) if self.sampling == "poisson" else self.rounds
        return 2 * self.problem.diameter * self.gradient_bound * (2 + math.log(self.rounds)) / math.sqrt(effective)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"rounds": self.rounds, "batch_size": self.batch_size, "gradient_bound": self.gradient_bound}


@dataclasses.dataclass(frozen=True)
class CldpSGD(SampledSGD):
    """Seed 001 Algorithm 4.3.1 (CLDP-SGD): k of n clients per round, shuffled."""

    name: ClassVar[str] = "cldp_sgd"
    options: ClassVar[tuple] = (Option("records_per_round", integer(1), "s: at privacy.unit record, each sampled "
                                       "client sends s of its records, one message each (seed 001 Alg. 4.3.1; "
                                       "default 1)"),)


@dataclasses.dataclass(frozen=True)
class DssSGD(SampledSGD):
    """Seed 001 §4.4 (DSS-SGD): clients self-sample with probability q = B/n."""

    name: ClassVar[str] = "dss_sgd"
    sampling: ClassVar[str] = "poisson"


@dataclasses.dataclass(frozen=True)
class DpSGD(AveragedProjectedDescent):
    """DP-SGD (Abadi et al. 2016) with the central Gaussian mechanism.

    Poisson: each round every user joins with probability q = B/n; the noisy
    sum is divided by the expected count qn (the count is not released), and
    the ledger composes the T Poisson-subsampled Gaussians. Shuffled: one pass
    over disjoint batches of B (each user once: parallel composition).
    Iterates are averaged with the constant step D/(G√T).

    Attributes:
      problem, n_users, epsilon, delta: as the other optimizers.
      rounds: T.
      batch_size: B (expected, under Poisson).
      step_size: η.
      sampling: "poisson" or "shuffled".
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    rounds: int
    batch_size: int
    step_size: float
    sampling: str = "poisson"
    name: ClassVar[str] = "dp_sgd"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size", "step_size"})
    requires: ClassVar[frozenset] = frozenset({CENTRAL_GAUSSIAN_NOISE})
    options: ClassVar[tuple] = (Option("sampling", choice(("poisson", "shuffled")),
                                       "Poisson batches (default), or one pass over disjoint shuffled batches"),)

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None, sampling: str = "poisson") -> "DpSGD":
        """B = ⌈√n⌉ and T = ⌊n/B⌋ unless given; η = D/(G√T) with G from the planned noise.

        Raises:
          ConfigError: B > n, or a shuffled pass asking for more than n/B rounds.
        """
        batch_size = batch_size or max(1, math.ceil(math.sqrt(n_users)))
        if batch_size > n_users:
            raise ConfigError("optimizer.batch_size", batch_size, f"must be ≤ n_users = {n_users}")
        one_pass = n_users // batch_size
        rounds = rounds or one_pass
        if sampling == "shuffled" and rounds > one_pass:
            raise ConfigError("optimizer.rounds", rounds, f"shuffled batches make one pass: at most n/B = {one_pass} "
                              "rounds (each user answers once); use optimizer.sampling: poisson for more")
        draft = cls(problem, n_users, epsilon, delta, rounds, batch_size, 1.0, sampling)
        if step_size is None:
            group = draft.schedule().groups[0]
            step_size = problem.diameter / (_gradient_bound(problem, protocol, group, batch_size) * math.sqrt(rounds))
        return dataclasses.replace(draft, step_size=step_size)

    def schedule(self) -> Schedule:
        if self.sampling == "shuffled":
            group = RoundGroup(self.rounds, self.batch_size, 0, self.batch_size, self.epsilon, self.delta,
                               self.problem.lipschitz)
            return Schedule("sequential", (group,))
        group = RoundGroup(self.rounds, self.n_users, 0, 0, self.epsilon, self.delta, self.problem.lipschitz,
                           folds=self.rounds, sampling="poisson", rate=self.batch_size / self.n_users)
        return Schedule(FULLY_INTERACTIVE, (group,))

    def theory_rate(self) -> float:
        return theory.central_rate(self.problem, self.n_users, self.epsilon)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"rounds": self.rounds, "batch_size": self.batch_size, "step_size": self.step_size}


@dataclasses.dataclass(frozen=True)
class SGD(SeqSGD):
    """Non-private one-pass projected SGD over disjoint batches (B = 1 unless
    given), averaged iterate, η = D/(L√T): the non-private baseline."""

    name: ClassVar[str] = "sgd"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size", "step_size"})
    privacy_models: ClassVar[tuple] = ("none",)

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None) -> "SGD":
        batch_size = batch_size or 1
        rounds = rounds or n_users // batch_size
        step_size = step_size or problem.diameter / (problem.lipschitz * math.sqrt(rounds))
        optimizer = SeqSGD.from_config(problem, n_users, epsilon, delta, rounds, batch_size, step_size)
        return cls(**{field.name: getattr(optimizer, field.name) for field in dataclasses.fields(SeqSGD)})

    def theory_rate(self) -> float:
        return theory.nonprivate_rate(self.problem, self.n_users)
