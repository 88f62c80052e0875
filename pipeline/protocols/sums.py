"""Protocols whose analyzer receives a (noisy) real-valued sum: the central
Gaussian mechanism, the shuffle Gaussian mechanism, an ε0-LDP ℓ2 randomizer
and the non-private exact sum — the baselines a shuffle result is compared
with (shared/DESIGN.md §2, `protocols/`).

Block sums are floats, and float addition depends on its order. So each block's
sum is rounded to an integer number of `quantum`s (a power of two, about 2^-60
of the largest total the call can reach) and blocks add as exact integers:
the total is bit-identical however users are split into blocks, shards or
workers. The rounding error, at most quantum/2 per block, is some 1e-18 of
the total, far below every noise scale here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import ClassVar, Iterable, NamedTuple

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline import accounting as privacy  # submodules load on first use: shards never import dp_accounting
from pipeline import draws
from pipeline.numerics import column_norms, column_norms_into, pairwise_sum
from pipeline.protocols.base import CENTRAL_GAUSSIAN_NOISE, FIXED_NOISE, GAUSSIAN_SUM, NOISY_MAX, PlanError, Protocol
from pipeline.twins import keeps_twin

# What the compiled twin reproduces (fused_encoding): a subclass overriding one keeps numpy.
_REPRODUCED = ("plan", "planned", "encode_block", "finish", "decode", "released_count")

ALL, UNIFORM, POISSON = "all", "uniform", "poisson"
SAMPLINGS = (ALL, UNIFORM, POISSON)
_INT_BITS = 60  # |total| / quantum stays below 2^60 (int64 holds 2^63)
_TAIL_SDS = 40.0  # noise beyond 40 standard deviations is treated as impossible (probability < 1e-340)


@dataclasses.dataclass(frozen=True)
class SumParams:
    """One call of a sum protocol.

    Attributes:
      protocol: the protocol's name.
      users: the users in the call (the sample size when sampled uniformly;
        the population under Poisson sampling).
      population: the users the call samples from.
      sampling: ALL, UNIFORM or POISSON.
      rate: the Poisson rate (0 otherwise).
      dim: d.
      norm_bound: C, every input is clipped to the ℓ2 ball of radius C.
      sigma: the noise standard deviation per coordinate: of the sum (central),
        of each user's report (shuffle Gaussian); 0 otherwise.
      epsilon0: the local randomizer's ε0 (local_l2), 0 otherwise.
      report_norm: the norm of every local_l2 report (Duchi et al.'s B), 0 otherwise.
      quantum: the fixed-point unit of block sums.
    """

    protocol: str
    users: int
    population: int
    sampling: str
    rate: float
    dim: int
    norm_bound: float
    sigma: float = 0.0
    epsilon0: float = 0.0
    report_norm: float = 0.0
    quantum: float = 1.0
    noisy_max: tuple = ()

    @property
    def sensitivity(self) -> float:
        """Δ₂ of the sum when one user's input is replaced: 2C."""
        return 2.0 * self.norm_bound


@dataclasses.dataclass(frozen=True)
class FixedPointSum:
    """Some users' share of a call's sum, in exact integer units.

    Attributes:
      users: how many users contributed.
      units: the sum of their reports in units of `quantum`, int64 of shape (d,).
    """

    users: int
    units: np.ndarray


@dataclasses.dataclass(frozen=True)
class ReleasedSum:
    """What the analyzer receives: the (noisy) sum and the number of reports."""

    users: int
    total: np.ndarray


def _quantum(largest_total: float) -> float:
    """The power of two that puts `largest_total` just below 2^_INT_BITS units."""
    return math.ldexp(1.0, math.frexp(max(largest_total, 1e-300))[1] - _INT_BITS)


def duchi_report_norm(dim: int, radius: float, epsilon0: float) -> float:
    """B of Duchi, Jordan, Wainwright (2018, §4.2.3): the norm of every ε0-LDP ℓ2 report.

    B = r·(e^ε0 + 1)/(e^ε0 − 1)·√π·d·Γ((d − 1)/2 + 1)/(2·Γ(d/2 + 1)), which makes
    the report unbiased (checked against the exact mean in the tests).
    """
    log_ratio = scipy.special.gammaln((dim - 1) / 2 + 1) - scipy.special.gammaln(dim / 2 + 1)
    return radius / math.tanh(epsilon0 / 2.0) * math.sqrt(math.pi) * dim * math.exp(log_ratio) / 2.0


def duchi_agreement(epsilon0: float) -> float:
    """e^ε0/(e^ε0 + 1): the probability that a Duchi et al. report lies on the half-space of
    its input's pole (_duchi_in_place)."""
    return math.exp(epsilon0) / (math.exp(epsilon0) + 1.0)


# --- The compiled twin of a call (FusedSum), in numba's subset -------------------------------------

def _duchi_in_place(inputs, dim, users, state, radius, agreement, report_norm, norms, work):
    """Duchi et al.'s ε0-LDP randomizer for the ℓ2 ball (2018, §4.2.3) on a chunk's clipped inputs
    ((coordinate, user) order), in place. Each x (‖x‖ ≤ r) becomes ±r·x/‖x‖ with probabilities
    ½ ± ‖x‖/(2r) (a zero input: the first axis, a fair coin); the report is uniform on the sphere of
    radius B (duchi_report_norm), on the half-space agreeing with that pole with probability
    e^ε0/(e^ε0 + 1) (duchi_agreement), on the other half otherwise: its density ratio between any
    two inputs is at most e^ε0. Draws: per user a sign, one uniform each; the sphere's normals in
    (coordinate, user) order, each column normalized; one uniform each for the half-space.
    `work`: (signs, sphere's norms, sphere), of a chunk's sizes."""
    signs, sphere_norms, sphere = work
    column_norms_into(inputs, dim, users, norms)
    for user in range(users):
        signs[user] = 1.0 if draws.uniform(state) < 0.5 + norms[user] / (2.0 * radius) else -1.0
    draws.standard_normals(state, sphere, dim * users)
    column_norms_into(sphere, dim, users, sphere_norms)
    for user in range(users):
        for coordinate in range(dim):
            sphere[coordinate * users + user] /= sphere_norms[user]
    for user in range(users):
        agree = draws.uniform(state) < agreement
        side = 0.0  # column_dots(sphere, pole), the pole the input's direction times its sign
        for coordinate in range(dim):
            if norms[user] > 0:
                direction = inputs[coordinate * users + user] / max(norms[user], 1e-300)
            else:  # a zero input's direction: the first axis
                direction = 1.0 if coordinate == 0 else 0.0
            side += sphere[coordinate * users + user] * (direction * signs[user])
        flip = (side >= 0) != agree
        for coordinate in range(dim):
            value = sphere[coordinate * users + user]
            inputs[coordinate * users + user] = report_norm * (-value if flip else value)


class FusedSum(NamedTuple):
    """The constants of a sum protocol's call as its compiled twin uses them
    (pipeline.compiled), and the twin's functions (the kernels' protocol contract:
    work, encode, finish_block, analyze, counts): what encode_block runs, compiled, and the fused
    rounds inline; `analyze` is finish's operations in their order.

    Attributes:
      norm_bound: C, the clip.
      quantum: the fixed-point unit of block sums.
      user_noise: each user adds N(0, σ²I) (shuffle_gaussian).
      central_noise: the analyzer adds N(0, σ²I) to the total (central_gaussian).
      sigma: σ (unused without noise).
      local_reports: each user reports Duchi et al.'s randomizer (local_l2, _duchi_in_place).
      agreement: its probability of the pole's half-space (duchi_agreement; unused otherwise).
      report_norm: its reports' norm B (unused otherwise).
    """

    norm_bound: float
    quantum: float
    user_noise: bool
    central_noise: bool
    sigma: float
    local_reports: bool
    agreement: float
    report_norm: float

    def work(self, dim, chunk):
        """Duchi et al.'s (signs, sphere's norms, sphere; the sphere holds shuffle_gaussian's noise
        too), a block's total, the units of a block (then of a round), and the curator's noise."""
        local = (np.empty(chunk), np.empty(chunk), np.empty(dim * chunk if self.local_reports or self.user_noise else 0))
        return local, np.zeros(dim), np.zeros(dim, np.int64), np.empty(dim)

    def encode(self, work, inputs, norms, dim, users, state):
        """The reports of a chunk's gradients ((coordinate, user) order, their norms in `norms`), summed
        per coordinate as `.sum(axis=1)` sums a (d, users) row (numpy's pairwise sum) into the block's
        total: each clipped by the factor min(1, C/max(‖g‖, 1e-300)); with user noise (shuffle_gaussian)
        x + σz, the normals in (coordinate, user) order; with local reports (local_l2) Duchi et al.'s."""
        local, total = work[0], work[1]
        for user in range(users):  # the norms become the clip factors (_duchi_in_place recomputes the norms)
            norms[user] = min(1.0, self.norm_bound / max(norms[user], 1e-300))
        for coordinate in range(dim):
            row = inputs[coordinate * users: (coordinate + 1) * users]
            for user in range(users):
                row[user] *= norms[user]
        if self.user_noise:
            noise = local[2]
            draws.standard_normals(state, noise, dim * users)
            for index in range(dim * users):
                inputs[index] = inputs[index] + self.sigma * noise[index]
        if self.local_reports:
            _duchi_in_place(inputs, dim, users, state, self.norm_bound, self.agreement, self.report_norm, norms, local)
        for coordinate in range(dim):
            total[coordinate] += pairwise_sum(inputs, coordinate * users, users)

    def finish_block(self, work, users, state):
        """The block's total in fixed point, rint(total/quantum), added to the units; False at 2⁶²
        units or a NaN (encode_block's OverflowError)."""
        total, units = work[1], work[2]
        for coordinate in range(total.size):
            rounded = np.rint(total[coordinate] / self.quantum)
            if not abs(rounded) < 2.0**62:
                return False
            units[coordinate] += np.int64(rounded)
        total[:] = 0.0
        return True

    def analyze(self, work, batch, state, estimate):
        """The total units·quantum, plus σz with the curator's noise (`state`: the round's noise stream); the units cleared."""
        units, central = work[2], work[3]
        for coordinate in range(estimate.size):
            estimate[coordinate] = np.float64(units[coordinate]) * self.quantum
        units[:] = 0
        if self.central_noise:
            draws.standard_normals(state, central, estimate.size)
            for coordinate in range(estimate.size):
                estimate[coordinate] = estimate[coordinate] + self.sigma * central[coordinate]
        return True

    def counts(self, work):
        """A block's units (a fully interactive round's partial, block_partial)."""
        return work[2]

    @staticmethod
    def block_partial(users: int, units: np.ndarray) -> FixedPointSum:
        """A block's partial from its reports' sum in fixed point (encode_block's)."""
        return FixedPointSum(users, units)


class SumProtocol(Protocol):
    """A protocol whose statistic is a (noisy) sum of clipped reports in fixed point.

    Subclasses set `name`, `model` and `_event`; those whose noise is not a
    Gaussian σ override `_calibrate`.

    Args:
      accounting: "paper" or "tight": the ledger mode the noise is calibrated for.
    """

    capabilities = frozenset({FIXED_NOISE})
    supports_sampling = True
    # The call's noise, which the compiled twin (FusedSum) adds, in encode_block and the fused rounds: "none",
    # "user" (each user adds σz), "central" (the analyzer adds σz, in finish) or "local" (Duchi et
    # al.'s reports); None: none of these (report_noisy_max: the optimizer's), and no twin. A
    # subclass keeps its parent's noise whatever its name (once read by name, a renamed subclass
    # of shuffle_gaussian sent its users' inputs bare).
    noise: ClassVar[str | None] = None

    def plan(self, round_plan, dim: int) -> SumParams:
        """The parameters of one round's call (noise calibrated to the round's budget).

        Args:
          round_plan: the round (see optimizers.base.RoundPlan).
          dim: d.

        Returns:
          The parameters.

        Raises:
          ValueError: the budget cannot be met.
        """
        if round_plan.noise_std > 0.0 or round_plan.noisy_max:
            # The optimizer fixes the noise (PNSGD's σ, Frank–Wolfe's selections).
            params = SumParams(self.name, round_plan.users, round_plan.population, round_plan.sampling,
                               round_plan.rate, dim, round_plan.norm_bound, sigma=round_plan.noise_std,
                               noisy_max=round_plan.noisy_max)
            return dataclasses.replace(params, quantum=_quantum(self._largest_total(params)))
        return _plan(type(self), self.accounting, round_plan.users, round_plan.population, round_plan.sampling,
                     round_plan.rate, dim, round_plan.epsilon, round_plan.delta, round_plan.norm_bound,
                     round_plan.folds)

    @staticmethod
    def sum_mse(params: SumParams) -> float:
        """E‖released sum − true sum‖² at the worst input (noise only here)."""
        return params.dim * params.sigma**2

    @classmethod
    def _largest_total(cls, params: SumParams) -> float:
        return params.population * params.norm_bound

    @classmethod
    def _calibrate(cls, params: SumParams, epsilon: float, delta: float, folds: int, accounting: str) -> SumParams:
        """The least noise σ whose `folds` calls meet (ε, δ) in `accounting` (Gaussian protocols)."""
        sigma = _least_noise(lambda s: cls._event(dataclasses.replace(params, sigma=s)), params.sensitivity,
                             epsilon, delta, folds, accounting)
        return dataclasses.replace(params, sigma=sigma)

    @classmethod
    def event(cls, params: SumParams, block_size: int):
        """The privacy event of one call."""
        return cls._event(params)

    def encode_block(self, params: SumParams, chunks: Iterable[np.ndarray], rng: np.random.Generator,
                     work=None) -> FixedPointSum:
        """The block's share: the sum of its users' reports in fixed point, by the compiled twin's
        `encode` and `finish_block` (the functions the fused rounds inline) on the block's stream
        (draws.drawn_in_compiled_code), whatever the call's sampling.

        Args:
          params: the call.
          chunks: the block's inputs, (d, users) arrays (consumed one by one).
          rng: the generator keyed by (round, block).
          work: unused (CjmpVec's workspace).

        Returns:
          The block's partial.

        Raises:
          OverflowError: the block's sum left the fixed-point range (or is not a number).
        """
        from pipeline import compiled  # numba loads at a block's first encoding, not at import

        twin = self._twin(params)
        encode, finish_block = (compiled.compiled_function(getattr(FusedSum, name)) for name in ("encode", "finish_block"))
        work, users = twin.work(params.dim, 0), 0
        with draws.drawn_in_compiled_code(rng) as state:
            for chunk in chunks:
                dim, count = chunk.shape
                if work[0][0].size < count:
                    work = (twin.work(dim, count)[0], *work[1:])
                encode(twin, work, np.array(chunk, np.float64).reshape(-1), column_norms(chunk), dim, count, state)
                users += count
            finished = finish_block(twin, work, users, state)
        if not finished:
            raise OverflowError(f"a block sum of {params.protocol} left the fixed-point range")
        return FixedPointSum(users, work[2].copy())

    def finish(self, params: SumParams, total: FixedPointSum, rng: np.random.Generator) -> ReleasedSum:
        """The analyzer's statistic: the exact total (CentralGaussian adds the curator's noise)."""
        return self._released(params, total, rng, central_noise=False)

    def _released(self, params: SumParams, total: FixedPointSum, rng: np.random.Generator,
                  central_noise: bool) -> ReleasedSum:
        """The total units·quantum, plus the curator's N(0, σ²I) if `central_noise`, by the compiled
        twin's `analyze` (the function the fused rounds inline), the noise drawn from `rng`'s
        stream (draws.drawn_in_compiled_code; `rng` is not drawn from without it)."""
        from pipeline import compiled  # numba loads at the first call, not at import

        twin = self._twin(params)._replace(central_noise=central_noise)
        work, estimate = twin.work(params.dim, 0), np.empty(params.dim)
        work[2][:] = total.units
        handed = (draws.drawn_in_compiled_code(rng) if central_noise
                  else contextlib.nullcontext(np.zeros(compiled.STATE_WORDS, np.uint64)))  # no draw taken
        with handed as state:
            compiled.compiled_function(FusedSum.analyze)(twin, work, 0, state, estimate)
        return ReleasedSum(total.users, estimate)

    @staticmethod
    def decode(params: SumParams, statistic: ReleasedSum) -> np.ndarray:
        """The estimate of Σ_i x_i (every protocol here is unbiased on the ball)."""
        return statistic.total

    def plans_per_budget(self) -> bool:
        return keeps_twin(self, "plans_per_budget", ("plan", "planned"))

    def fused_encoding(self, params: SumParams) -> FusedSum | None:
        """The call's constants for the compiled rounds, for a class that states its `noise`
        (`none`, `central_gaussian`, `shuffle_gaussian`, `local_l2`) and a subclass that keeps
        what the twin reproduces, every user of the call answering (no sampling)."""
        if self.noise is None or not keeps_twin(self, "noise", _REPRODUCED) or params.sampling != ALL:
            return None
        return self._twin(params)

    def _twin(self, params: SumParams) -> FusedSum:
        """The call's compiled twin, with this class's noise (None: the clipped inputs bare)."""
        local = self.noise == "local"
        return FusedSum(params.norm_bound, params.quantum, self.noise == "user", self.noise == "central", params.sigma,
                        local, duchi_agreement(params.epsilon0) if local else 0.0, params.report_norm)


class ExactSum(SumProtocol):
    """No privacy: the exact sum (the non-private baseline)."""

    name = "none"
    noise = "none"
    model = "none"
    supports_audit = False
    audit_refusal = "it is not private (its ledger spends ε = ∞): there is no claim to audit"
    capabilities = frozenset({FIXED_NOISE, GAUSSIAN_SUM})

    @staticmethod
    def _event(params: SumParams) -> privacy.events.ExactSumDpEvent:
        return privacy.events.ExactSumDpEvent(params.users, params.population)

    @staticmethod
    def _calibrate(params: SumParams, epsilon, delta, folds, accounting) -> SumParams:
        return params


class CentralGaussian(SumProtocol):
    """The Gaussian mechanism on the exact sum, run by a trusted curator.

    The noise N(0, σ²I) is drawn once per call, from a stream keyed by the
    round only (after the blocks are merged), so it too is shard-independent.
    Under Poisson sampling the count is not released: the mean divides by the
    expected count q·n (Abadi et al. 2016).
    """

    name = "central_gaussian"
    noise = "central"
    model = "central"
    capabilities = frozenset({FIXED_NOISE, GAUSSIAN_SUM, CENTRAL_GAUSSIAN_NOISE})

    @staticmethod
    def _event(params: SumParams):
        if params.sampling == POISSON:
            return privacy.events.PoissonGaussianDpEvent(params.population, params.rate, params.dim, params.sensitivity,
                                                         params.sigma)
        return privacy.events.GaussianSumDpEvent(params.users, params.population, params.dim, params.sensitivity,
                                                 params.sigma)

    def finish(self, params: SumParams, total: FixedPointSum, rng: np.random.Generator) -> ReleasedSum:
        """The exact total plus the curator's N(0, σ²I), drawn from `rng` (the round's noise stream)."""
        return self._released(params, total, rng, central_noise=True)

    def released_count(self, params: SumParams, statistic: ReleasedSum) -> float:
        return params.rate * params.population if params.sampling == POISSON else params.users


class ShuffleGaussian(SumProtocol):
    """Seed 004's shuffle Gaussian: each user adds N(0, σ²I) to its clipped input;
    the shuffled reports are summed (the sum is a post-processing of the multiset).

    In exact mode a block's noise is drawn user by user, so its sum is exactly
    the sum of the users' noises."""

    name = "shuffle_gaussian"
    noise = "user"
    model = "shuffle"
    capabilities = frozenset({FIXED_NOISE, GAUSSIAN_SUM})

    @classmethod
    def _largest_total(cls, params: SumParams) -> float:
        return params.population * params.norm_bound + _TAIL_SDS * params.sigma * math.sqrt(params.population)

    @staticmethod
    def _event(params: SumParams) -> privacy.events.ShuffleGaussianDpEvent:
        return privacy.events.ShuffleGaussianDpEvent(params.users, params.population, params.dim, params.sensitivity,
                                                     params.sigma, params.rate if params.sampling == POISSON else 0.0)

    @staticmethod
    def sum_mse(params: SumParams) -> float:
        return _expected_users(params) * params.dim * params.sigma**2


class ReportNoisyMax(SumProtocol):
    """A trusted curator that sums a round's inputs exactly and releases only
    report-noisy-max selections made from them (seed 003's Frank–Wolfe picks a
    vertex per leaf; the optimizer draws the Laplace noise). The event records
    the selections the round's users reach."""

    name = "report_noisy_max"
    model = "central"
    capabilities = frozenset({FIXED_NOISE, NOISY_MAX})
    supports_sampling = False
    supports_audit = False
    audit_refusal = ("its noise is the optimizer's (frank_wolfe_l1 draws the report-noisy-max selections), "
                     "so a call of the protocol alone releases nothing private to attack")

    @staticmethod
    def _event(params: SumParams) -> privacy.events.NoisyMaxDpEvent:
        if not params.noisy_max:
            raise ValueError("report_noisy_max needs an optimizer that makes noisy selections (frank_wolfe_l1)")
        return privacy.events.NoisyMaxDpEvent(params.users, *params.noisy_max)

    @staticmethod
    def _calibrate(params, epsilon, delta, folds, accounting) -> SumParams:
        raise PlanError("privacy.protocol",
                        "report_noisy_max runs with frank_wolfe_l1 only (its selections carry the noise)")


class LocalL2(SumProtocol):
    """Duchi, Jordan, Wainwright's ε0-LDP ℓ2 randomizer, unshuffled (the local baseline)."""

    name = "local_l2"
    noise = "local"
    model = "local"
    supports_sampling = False  # a sampled local report has no amplification accounted here

    @classmethod
    def _largest_total(cls, params: SumParams) -> float:
        return params.population * params.report_norm

    @staticmethod
    def _event(params: SumParams) -> privacy.events.LocalDpEvent:
        return privacy.events.LocalDpEvent(params.users, params.epsilon0, LocalL2.name)

    @staticmethod
    def _calibrate(params, epsilon, delta, folds, accounting) -> SumParams:
        def spent(eps0: float) -> float:
            event = privacy.events.LocalDpEvent(params.users, eps0, LocalL2.name)
            return privacy.mechanisms.composed_epsilon(event, folds, delta, accounting)

        lo, hi = 0.0, epsilon
        for _ in range(60):  # the largest ε0 whose folds-fold composition stays within ε
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if spent(mid) <= epsilon else (lo, mid)
        if lo <= 0.0:
            raise ValueError(f"no local ε0 meets ε = {epsilon} over {folds} calls")
        return dataclasses.replace(params, epsilon0=lo,
                                   report_norm=duchi_report_norm(params.dim, params.norm_bound, lo))

    @staticmethod
    def sum_mse(params: SumParams) -> float:
        # E‖Z − x‖² = B² − ‖x‖² for an unbiased report of norm B; worst at x = 0.
        return _expected_users(params) * params.report_norm**2


def _expected_users(params: SumParams) -> float:
    return params.rate * params.population if params.sampling == POISSON else params.users


def _least_noise(event_for, sensitivity: float, epsilon: float, delta: float, folds: int, accounting: str) -> float:
    """The least σ (to 1e-4 relative) whose `folds` calls spend at most (ε, δ).

    Args:
      event_for: σ → the call's event.
      sensitivity: Δ₂, which sets the search's scale.
      epsilon, delta: the budget of `folds` calls together.
      folds: how many calls compose.
      accounting: the ledger mode that must meet it.

    Returns:
      σ, rounded up.

    Raises:
      ValueError: no σ below 1e6·Δ meets it.
    """
    def spent(sigma: float) -> float:
        return privacy.mechanisms.composed_epsilon(event_for(sigma), folds, delta, accounting)

    lo, hi = 1e-3 * sensitivity, 1e6 * sensitivity
    if accounting == "tight":
        # Tight is the minimum of the paper bound and others: the paper σ meets the budget, and
        # bracketing below it spares the slower (PLD) evaluations most of the search.
        hi = _least_noise(event_for, sensitivity, epsilon, delta, folds, "paper")
        lo = hi / 64.0 if spent(hi / 64.0) > epsilon else lo
    if spent(hi) > epsilon:
        raise ValueError(f"no noise level up to {hi:.3g} meets (ε, δ) = ({epsilon}, {delta}) over {folds} calls")
    while hi / lo > 1.0 + 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if spent(mid) > epsilon else (lo, mid)
    return hi


@functools.lru_cache(maxsize=4096)
def _plan(protocol: type, accounting: str, users: int, population: int, sampling: str, rate: float, dim: int,
          epsilon: float, delta: float, norm_bound: float, folds: int) -> SumParams:
    """Cached planning (calibration is a search; rounds share a few shapes)."""
    params = SumParams(protocol.name, users, population, sampling, rate, dim, norm_bound)
    params = protocol._calibrate(params, epsilon, delta, folds, accounting)
    return dataclasses.replace(params, quantum=_quantum(protocol._largest_total(params)))


SUM_PROTOCOLS = (ExactSum, CentralGaussian, ShuffleGaussian, LocalL2, ReportNoisyMax)
