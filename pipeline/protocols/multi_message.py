"""Seed 001's multi-message shuffle protocols on the engine: every user sends
m·s one-bit-plus-index messages through Girgis's unbiased randomizers
(pipeline.protocols.girgis), one shuffler per stream; the analyzer decodes the
streams' histograms (their sufficient statistic, notes §2.6).

The local budget v is calibrated numerically so that the run's ledger meets
its (ε, δ) (notes trap 7: the thesis's printed calibration does not).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Iterable

import numpy as np

from pipeline import accounting as privacy  # submodules load on first use: shards never import dp_accounting
from pipeline.options import Option, integer
from pipeline.protocols import girgis
from pipeline.protocols.base import BINARY, DATA, PlanError, Protocol
from pipeline.twins import keeps_twin

_BUDGET_RANGE = (1e-3, 64.0)  # local budgets v searched; above 64 the flip probability is below 1e-28


@dataclasses.dataclass(frozen=True)
class GirgisCall:
    """One call: the randomizer's parameters and how users were sampled.

    Attributes:
      randomizer: the parameters of every user's randomizer.
      users: the call's users (the population under Poisson sampling).
      population: the users sampled from.
      sampling: "all", "uniform" or "poisson".
      rate: the Poisson rate (0 otherwise).
      record_messages, records_min: record level (RoundPlan.per_record): s records sent per
        answering user, of the m each is guaranteed to hold; (0, 1) at user level.
    """

    randomizer: girgis.GirgisParams
    users: int
    population: int
    sampling: str
    rate: float
    record_messages: int = 0
    records_min: int = 1

    @property
    def expected_users(self) -> float:
        """Expected reports per stream: users, or at record level the min(s, m) messages each is sure to send."""
        users = self.rate * self.population if self.sampling == "poisson" else self.users
        return users * (min(self.record_messages, self.records_min) if self.record_messages else 1)


LEVELS = Option("levels", integer(1, 16), "m, the bit planes of the randomizer (seed 001)")
MESSAGES = Option("messages", integer(1), "s, the messages per level (default min(d, 64))")


# What the compiled twin reproduces: a subclass overriding one of these keeps the Python path.
_TWINNED = ("plan", "planned", "encode_block", "finish", "decode", "released_count")


class GirgisProtocol(Protocol):
    """One of seed 001's randomizers as a shuffle protocol.

    Args:
      accounting: "paper" or "tight", the ledger mode the budget is calibrated for.
      levels: m, bit planes (linf, l2).
      messages: s, messages per level (binary, linf, l2); default min(d, 64).
    """

    kind = ""
    model = "shuffle"
    supports_sampling = True
    supports_records = True

    def __init__(self, accounting: str = "paper", levels: int | None = None, messages: int | None = None):
        super().__init__(accounting)
        self.levels = levels or 1
        self.messages = messages

    def radius(self, dim: int, norm_bound: float) -> float:
        """The randomizer's ball for inputs of ℓ2 norm ≤ Δ: ℓ1 radius √d·Δ, ℓ∞ and ℓ2 radius Δ."""
        return math.sqrt(dim) * norm_bound if self.kind == "l1" else norm_bound

    def plan(self, round_plan, dim: int) -> GirgisCall:
        """The call's parameters, with v calibrated to the round's budget.

        Raises:
          PlanError: binary inputs are not data, or m or s does not fit the randomizer.
          ValueError: the budget cannot be met.
        """
        if self.kind == "binary" and round_plan.inputs != DATA:
            raise PlanError("privacy.protocol", "girgis_binary encodes binary vectors: it runs with mean_estimation "
                            "on binary data only")
        try:
            return _plan(self.kind, self.accounting, self.levels, self.messages, round_plan.users,
                         round_plan.population, round_plan.sampling, round_plan.rate, dim,
                         self.radius(dim, round_plan.norm_bound), round_plan.epsilon, round_plan.delta, round_plan.folds,
                         (round_plan.records_per_round, round_plan.records_min) if round_plan.per_record else (0, 1))
        except ValueError as error:  # the randomizer names its own bad option (m or s) first
            option = next((key for key in ("levels", "messages") if str(error).startswith(key)), None)
            if option is None:
                raise
            raise PlanError(f"privacy.{option}", str(error)) from None

    @staticmethod
    def sum_mse(call: GirgisCall) -> float:
        """The thesis's per-user worst-case MSE times the expected number of reports."""
        return call.expected_users * girgis.exact_mse_bound(call.randomizer)

    @staticmethod
    def event(call: GirgisCall, block_size: int) -> privacy.events.ShuffleLdpDpEvent:
        return _event(call.randomizer, call.users, call.population, call.sampling, call.rate,
                      (call.record_messages, call.records_min))

    @staticmethod
    def encode_block(call: GirgisCall, chunks: Iterable[np.ndarray], rng: np.random.Generator,
                     work=None) -> girgis.Histograms:
        """The block's histograms: its users' messages, counted per (level, index, bit)."""
        counts = np.zeros(girgis.statistic_shape(call.randomizer), dtype=np.int64)
        users = 0
        for chunk in chunks:
            counts += girgis.encode_block(call.randomizer, chunk, rng)
            users += chunk.shape[1]
        return girgis.Histograms(users, counts)

    @staticmethod
    def decode(call: GirgisCall, statistic: girgis.Histograms) -> np.ndarray:
        """The unbiased estimate of Σ_i x_i (the thesis's analyzers, without the 1/n)."""
        if statistic.users == 0:
            return np.zeros(call.randomizer.dim)
        return girgis.decode(call.randomizer, statistic.counts)

    def plans_per_budget(self) -> bool:
        return keeps_twin(self, "plans_per_budget", ("plan", "planned"))

    def fused_encoding(self, call: GirgisCall) -> girgis.GirgisEncoding | None:
        """The call's constants for the compiled twin: linf, l2 and l1 calls of every user at
        user level; None for binary, sampling, record level, or a subclass that changes what
        the twin reproduces."""
        randomizer = call.randomizer
        if not keeps_twin(self, "fused_encoding", _TWINNED):
            return None
        if randomizer.kind == "binary" or call.sampling != "all" or call.record_messages:
            return None
        return girgis.GirgisEncoding.of(randomizer)


def _event(randomizer: girgis.GirgisParams, users: int, population: int, sampling: str, rate: float,
           records: tuple[int, int] = (0, 1)):
    bits = girgis.histogram_bits_per_user(randomizer, records[0]) if records[0] else girgis.bits_per_user(randomizer)
    return privacy.events.ShuffleLdpDpEvent(users, population, sampling, rate, girgis.stream_epsilons(randomizer),
                                            f"girgis_{randomizer.kind}", bits, *records)


@functools.lru_cache(maxsize=1024)
def _plan(kind: str, accounting: str, levels: int, messages: int | None, users: int, population: int,
          sampling: str, rate: float, dim: int, radius: float, epsilon: float, delta: float,
          folds: int, records: tuple[int, int] = (0, 1)) -> GirgisCall:
    """The largest local budget v (to 1e-3 relative) whose `folds` calls spend at most (ε, δ);
    `records` = (s, m) at record level (each answering user sends s record messages).

    Raises:
      ValueError: even the smallest budget overspends.
    """
    messages = 1 if kind == "l1" else messages or min(dim, 64)

    def build(budget: float) -> girgis.GirgisParams:  # sized for the most messages the call may carry (s per user)
        return girgis.plan_girgis(kind, max(users * max(records[0], 1), 1), dim, radius, budget, levels, messages)

    def spent(budget: float) -> float:
        event = _event(build(budget), users, population, sampling, rate, records)
        return privacy.mechanisms.composed_epsilon(event, folds, delta, accounting)

    lo, hi = _BUDGET_RANGE
    if spent(lo) > epsilon:
        raise ValueError(f"no local budget v ≥ {lo} meets (ε, δ) = ({epsilon}, {delta}) over {folds} calls")
    if spent(hi) <= epsilon:
        lo = hi
    while hi / lo > 1.0 + 1e-3:  # v to 0.1%: the MSE moves by 0.2% at most
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if spent(mid) <= epsilon else (lo, mid)
    return GirgisCall(build(lo), users, population, sampling, rate, *records)


class GirgisBinary(GirgisProtocol):
    """Seed 001's binary randomizer (vectors in {0, 1}^d), shuffled."""

    kind, name, options, data_kinds = "binary", "girgis_binary", (MESSAGES,), frozenset({BINARY})


class GirgisL1(GirgisProtocol):
    """Seed 001's ℓ1 randomizer, shuffled."""

    kind, name = "l1", "girgis_l1"


class GirgisLinf(GirgisProtocol):
    """Seed 001's ℓ∞ randomizer, shuffled."""

    kind, name, options = "linf", "girgis_linf", (LEVELS, MESSAGES)


class GirgisL2(GirgisProtocol):
    """Seed 001's ℓ2 randomizer, shuffled."""

    kind, name, options = "l2", "girgis_l2", (LEVELS, MESSAGES)


GIRGIS_PROTOCOLS = (GirgisBinary, GirgisL1, GirgisLinf, GirgisL2)
