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
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from pipeline.errors import NonFiniteError, value_class
from pipeline.options import Option
from pipeline.problems.base import Problem
from pipeline.problems.smoothed import MoreauSmoothed
from pipeline.protocols.base import DATA, GRADIENTS, PRIVACY_MODELS, RoundPlan
from pipeline.twins import keeps_twin

# What a RoundGroup passes on to each of its rounds' plans unchanged.
_PLAN_FIELDS = tuple(field.name for field in dataclasses.fields(RoundPlan)
                     if field.name not in ("round", "first_user", "stop_user", "inputs"))
OVERRIDES = ("rounds", "batch_size", "step_size")  # optimizer.<override> fields every optimizer may take


def gradient_problem(problem: Problem, smoothing: float) -> Problem:
    """The problem whose gradients users send in a group: the run's, or with smoothing β > 0 (a
    phased reduction's phase) the envelope ℓ_β of its unsmoothed loss (seed 000, Lemma 4.6)."""
    return problem if smoothing == 0 else MoreauSmoothed(problem.unsmoothed, smoothing)


def answer(problem: Problem, plan: RoundPlan, query: np.ndarray, data: np.ndarray, out: np.ndarray) -> np.ndarray:
    """What some users send in a round, into `out` (d, users): their data points (plan.inputs
    DATA), or their gradients at the query (`Optimizer.query`), of the group's problem
    (`gradient_problem`); at a (2, d) query, the difference of their gradients at its two
    points (Frank–Wolfe's SPIDER, pipeline.optimizers.frank_wolfe).

    Args:
      problem: the run's problem.
      plan: the round.
      query: the optimizer's query point(s).
      data: the users' points, (data_dim, users).
      out: (d, users).

    Returns:
      out.
    """
    if plan.inputs == DATA:
        np.copyto(out, data)
        return out
    problem = gradient_problem(problem, plan.smoothing)
    if query.ndim == 2:
        problem.gradients(query[0], data, out=out)
        out -= problem.gradients(query[1], data)
        return out
    return problem.gradients(query, data, out=out)


# The state functions a compiled update reproduces (Optimizer.compiled_update): a subclass that
# overrides one of them keeps numpy (pipeline.twins.keeps_twin).
STATE_FUNCTIONS = ("init", "start", "query", "update", "output")


class CompiledUpdate(NamedTuple):
    """An optimizer's round as the compiled rounds run it: three stage functions in numba's subset
    of Python (loops over coordinates, no numpy calls beyond np.isfinite and np.sqrt), which the
    one compiling module compiles into its round loop (pipeline.compiled.round_kernel);
    a plug-in's compile the same way, with no package edit. The optimizers build theirs from
    transforms written once in the family that owns them (pipeline.optimizers.transforms.chain).

    The state they share is the optimizer's state tuple (θ, v_1, …, v_k, t) as arrays: θ and a
    (k, d) array `extra` of the vectors between (k = 0 for (θ, t)), and steps = [t]. Each round:

      query(constants, theta, extra, steps, out): the point the users' gradients are taken at;
      step(constants, theta, extra, steps, mean, out): the next θ before projection, from the
        round's mean gradient (the analyzer's sum over the batch, every coordinate finite);
      release(constants, theta, extra, steps, mean, projected, released) -> bool: after the
        engine projects the step onto the problem's ball (π, its norm numpy's pairwise sum),
        the released model (whose losses the round reports) into `released`, then the state
        advanced in place (θ ← projected, the vectors, t + 1); False, the state untouched, if
        the released model is not finite.

    Attributes:
      query, step, release: the stage functions.
      constants: the floats they read (a step size, a curvature scale, a momentum).
      vectors: k, the state's vectors between θ and t.
    """

    query: Callable
    step: Callable
    release: Callable
    constants: tuple[float, ...]
    vectors: int


def stage_arrays(update: CompiledUpdate, state: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stages' copy of a state tuple (θ, v_1, …, v_k, t): θ, the (k, d) array `extra` and [t]."""
    theta = np.array(state[0], np.float64)
    extra = np.empty((update.vectors, theta.size))
    for row, vector in enumerate(state[1:1 + update.vectors]):
        extra[row] = vector
    return theta, extra, np.array([state[-1]], np.int64)


def stage_query(update: CompiledUpdate, arrays: tuple, query: Callable | None = None) -> np.ndarray:
    """The round's query point by the stages, from the state's arrays (stage_arrays, left as they
    are); `query`: a compiled twin of update.query to call instead."""
    out = np.empty_like(arrays[0])
    (query or update.query)(update.constants, *arrays, out)
    return out


def stage_round(update: CompiledUpdate, state: tuple, arrays: tuple, noisy_mean: np.ndarray,
                project: Callable[[np.ndarray], np.ndarray],
                functions: tuple[Callable, Callable] | None = None) -> tuple[tuple | None, np.ndarray]:
    """One round's update by the stages: step, `project`, release (CompiledUpdate).

    Args:
      update: the optimizer's stages.
      state: its state tuple before the round (its type is the result's).
      arrays: the state's arrays (stage_arrays), advanced in place.
      noisy_mean: the round's mean estimate.
      project: the problem's projection onto Θ.
      functions: compiled twins of (update.step, update.release) to call instead (the engine's).

    Returns:
      (the state after the round, the released model), or (None, the released model up to and
      including its first non-finite coordinate) where the release is not finite.
    """
    step_stage, release_stage = functions or (update.step, update.release)
    theta, extra, steps = arrays
    step, released = np.empty_like(theta), np.empty_like(theta)
    step_stage(update.constants, theta, extra, steps, noisy_mean, step)
    if not release_stage(update.constants, theta, extra, steps, noisy_mean, project(step), released):
        return None, released
    return type(state)(theta, *extra, int(steps[0])), released


class Staged:
    """`query` and `update` of an optimizer whose round is its stages (`stages`), run here in
    Python: one source with the compiled rounds, which run the same functions compiled
    (pipeline.engine.rounds on the Python path, pipeline.compiled in the fused rounds). The numpy
    formulas they replace are the tests' oracle (tests/oracles/optimizers.py)."""

    # The methods the stages reproduce: a subclass that overrides one of them, and not `stages`,
    # keeps its own round, in Python (pipeline.twins.keeps_twin).
    reproduces: ClassVar[tuple[str, ...]] = STATE_FUNCTIONS

    def stages(self) -> CompiledUpdate:
        """This optimizer's stages, whichever class inherits them."""
        raise NotImplementedError

    def compiled_update(self) -> CompiledUpdate | None:
        """The stages, for the compiled rounds, unless a subclass changed what they reproduce."""
        return self.stages() if keeps_twin(self, "stages", self.reproduces) else None

    def query(self, state: tuple) -> np.ndarray:
        update = self.stages()
        return stage_query(update, stage_arrays(update, state))

    def update(self, state: tuple, noisy_mean: np.ndarray | None) -> tuple:
        """The stages' round (stage_round).

        Raises:
          ValueError: no estimate (these optimizers never sample an empty round).
          NonFiniteError: the released model is not finite.
        """
        if noisy_mean is None:
            raise ValueError(f"{type(self).__name__} steps on an estimate every round: its rounds are never empty")
        update = self.stages()
        after, released = stage_round(update, state, stage_arrays(update, state), noisy_mean, self.problem.project)
        if after is None:
            raise NonFiniteError(f"the model θ holds {value_class(released)}")
        return after


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
      records_per_round, per_record, records_min: how answering users use their
        records (RoundPlan; set for the run by `with_records`).
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
    records_per_round: int = 0
    per_record: bool = False
    records_min: int = 1


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
        # Each group's share of its rounds' plans, read once (plan() runs several times for every round).
        object.__setattr__(self, "_plan_fields", tuple({name: getattr(group, name) for name in _PLAN_FIELDS}
                                                       for group in self.groups))

    @property
    def rounds(self) -> int:
        return self._total

    @property
    def group_starts(self) -> tuple[int, ...]:
        """The first round of each group."""
        return self._starts

    def group_of(self, round_index: int) -> tuple[RoundGroup, int]:
        """The group a round belongs to, and the group's first round."""
        at = bisect.bisect_right(self._starts, round_index) - 1
        return self.groups[at], self._starts[at]

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
        return RoundPlan(round=round_index, first_user=first, stop_user=first + group.users, inputs=self.inputs,
                         **self._plan_fields[at])


def with_dropouts(schedule: Schedule, honest_fraction: float) -> Schedule:
    """The schedule with a fraction 1 − γ of every round's users dropping out: each round
    a fresh uniform sample of ⌊γ·users⌋ (at least 1) sends (seed 000 Appendix A.3)."""
    groups = tuple(dataclasses.replace(group, sampling="uniform", honest_fraction=honest_fraction,
                                       sample_size=max(1, math.floor(honest_fraction * group.users)))
                   for group in schedule.groups)
    return dataclasses.replace(schedule, groups=groups)


def with_records(schedule: Schedule, per_round: int, per_record: bool, minimum: int) -> Schedule:
    """The schedule with every round's users using `per_round` of their records (0: all),
    one message per record (record level) or one per user (their mean).

    Args:
      schedule: the optimizer's schedule.
      per_round: s (0: every record of the user).
      per_record: whether each record sends its own message.
      minimum: the records every user is guaranteed to hold (public).

    Returns:
      The schedule, unchanged when users hold one record each and use it.
    """
    if (per_round, per_record, minimum) == (0, False, 1):
        return schedule
    groups = tuple(dataclasses.replace(group, records_per_round=per_round, per_record=per_record, records_min=minimum)
                   for group in schedule.groups)
    return dataclasses.replace(schedule, groups=groups)


def protocol_mean_mse(protocol, accounting: str, users: int, dim: int, epsilon: float, delta: float,
                      norm_bound: float, folds: int = 1, inputs: str = GRADIENTS) -> float:
    """E‖estimated mean − mean‖² of one call of the run's protocol (calibrated parameters).

    Args:
      protocol: the run's protocol object, or None for P_vec planned by `accounting`.
      accounting, users, dim, epsilon, delta, norm_bound, folds: the call.
      inputs: what the users send, GRADIENTS or DATA (the call is planned as the run plans it).

    Returns:
      The mean's squared error from the protocol alone.
    """
    if protocol is None:  # the shuffle model's default protocol
        from pipeline.protocols import DEFAULT_PROTOCOL, PROTOCOLS

        protocol = PROTOCOLS[DEFAULT_PROTOCOL["shuffle"]](accounting)
    return protocol.mean_mse(users, dim, epsilon, delta, norm_bound, folds, inputs)


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
    """An SCO algorithm as pure functions of explicit state (the optimizer contract).

    Subclasses are frozen dataclasses holding their resolved hyperparameters.
    The engine calls `schedule()` once, before any data is read, to plan the
    run's ledger; then per round `query(state)` → (users' inputs through the
    protocol) → `update(state, noisy_mean)` → `output(state)` for the metrics.

    What the engine guarantees an optimizer:
      - `update` receives only the analyzer's estimate of the round's mean
        input, never a per-user value (DESIGN §3, the trust boundary);
      - state may be carried to the shard that holds the next rounds' users and
        back (it must be picklable), and the results are bit-identical for any
        sharding and on both backends;
      - the protocol, its options and the accounting mode are fixed for the run.

    What an optimizer must guarantee:
      - `schedule` is data-independent and says every round's population,
        budget and norm bound: the ledger is planned from it and checked
        against what ran;
      - `query`, `update` and `output` are pure functions of their arguments
        (randomness only from `start(seed)`'s state).

    Class attributes (declared capabilities, read by the runner's pairing rules):
      name: the short name (`optimizer.name`).
      options: its own options (config fields optimizer.<name>), passed to from_config.
      overrides: which of OVERRIDES (optimizer.rounds, batch_size, step_size) it takes:
        exactly those its `from_config` reads (the runner refuses the others in one
        config error line instead of ignoring them). Empty by default: a subclass
        declares what it reads, e.g. `frozenset({"rounds", "step_size"})`, or inherits
        the declaration of the optimizer whose `from_config` it passes them to.
      requires: protocol capabilities it needs (see pipeline.protocols.base.CAPABILITIES).
      privacy_models: the privacy models it runs under (None: any).
      samples_users: its rounds sample users afresh (needs a protocol that accounts sampling).
      record_level: it runs at record level when users hold several records: each answering
        user sends `records_per_round` of its records as messages of their own (seed 001's
        CLDP-SGD and DSS-SGD); the others run at user level only.
      final_iterate_only: only its last iterate may be released (round metrics: final).
      sends: GRADIENTS or DATA, what users put through the protocol.
    """

    name: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    overrides: ClassVar[frozenset[str]] = frozenset()  # none unless declared: an override read by nobody is refused
    requires: ClassVar[frozenset[str]] = frozenset()
    privacy_models: ClassVar[tuple[str, ...]] = PRIVACY_MODELS
    samples_users: ClassVar[bool] = False
    record_level: ClassVar[bool] = False
    final_iterate_only: ClassVar[bool] = False
    sends: ClassVar[str] = GRADIENTS
    problem: Problem

    @classmethod
    @abc.abstractmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None, step_size: float | None = None,
                    accounting: str = "paper", parameters: str = "paper", protocol: Any = None,
                    **options: Any) -> "Optimizer":
        """Resolves the hyperparameters of a run from its config.

        Args:
          problem: the run's problem (its constants L, β, λ, D, d).
          n_users: n.
          epsilon, delta: the run's target: the whole run spends at most this.
          rounds, batch_size, step_size: the config's overrides (None: the theorem's value);
            only those in `overrides` are ever passed.
          accounting: "paper" or "tight".
          parameters: "paper" (the theorem's formulas) or "calibrated".
          protocol: the run's protocol (its mean_mse / sum_mse calibrate step sizes).
          **options: the declared options the config sets.

        Returns:
          The resolved optimizer.

        Raises:
          ConfigError: a combination the algorithm cannot run, naming the field.
        """

    def at_record_level(self, protocol: Any, records_min: int) -> "Optimizer":
        """Itself at record level with several records per user (only optimizers that declare
        `record_level`; the engine then sends each used record as its own message).

        Args:
          protocol: the run's protocol (recalibrates what depends on the messages sent).
          records_min: m, the records every user is guaranteed to hold.

        Returns:
          The optimizer whose schedule's groups carry the record fields.
        """
        raise NotImplementedError(f"{self.name} does not run at record level")

    @abc.abstractmethod
    def schedule(self) -> Schedule:
        """The data-independent round schedule (the ledger is planned from it)."""

    @abc.abstractmethod
    def init(self) -> Any:
        """The initial state."""

    def start(self, seed: int) -> Any:
        """The initial state of a run with this seed (optimizers that draw their
        own noise key it to the seed; the others ignore it)."""
        return self.init()

    @abc.abstractmethod
    def query(self, state: Any) -> np.ndarray:
        """The point θ at which this round's users evaluate their gradients
        (shape (d,), or (2, d) for a gradient difference at two points)."""

    @abc.abstractmethod
    def update(self, state: Any, noisy_mean: np.ndarray | None) -> Any:
        """The next state, from the analyzer's estimate of the round's mean input.

        Args:
          state: the state before the round.
          noisy_mean: the estimate, shape (d,); None when nobody answered (a
            sampled round can be empty): the state must advance its clock anyway.

        Returns:
          The state after the round.
        """

    @abc.abstractmethod
    def output(self, state: Any) -> np.ndarray:
        """The model the algorithm would release if it stopped now."""

    @abc.abstractmethod
    def hyperparameters(self) -> dict[str, float | int]:
        """The resolved hyperparameters (batch size, rounds, step size, ...), logged as resolved.*."""

    @abc.abstractmethod
    def theory_rate(self) -> float:
        """The excess-loss rate of the theorem this optimizer implements, its
        hidden constant taken as 1 (see pipeline.optimizers.theory)."""

    def compiled_update(self) -> CompiledUpdate | None:
        """This optimizer's round for the compiled rounds (CompiledUpdate's stages), or None: its
        rounds run in numpy. A class that returns one promises that the stages reproduce its
        query, update and output bit for bit, and guards its subclasses with
        pipeline.twins.keeps_twin."""
        return None

    def steppers(self) -> tuple["Optimizer", ...]:
        """The optimizers whose updates the rounds apply (a phased reduction's phases, in turn)."""
        return (self,)

    def stepping(self, state: Any) -> tuple["Optimizer", Any]:
        """The optimizer whose update the next round applies, and its state."""
        return self, state

    def advanced(self, state: Any, inner: Any, rounds: int) -> Any:
        """The state after `rounds` more rounds of `stepping`'s optimizer, which left its state at `inner`."""
        return inner
