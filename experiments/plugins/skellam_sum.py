"""An example protocol plug-in with its own accountant: distributed Skellam
noise under secure aggregation, in the spirit of TensorFlow Federated's
distributed DP (Agarwal, Kairouz, Liu 2021, "The Skellam Mechanism for
Differentially Private Federated Learning").

One file outside the package; run it with

    privacy: {protocol: "experiments/plugins/skellam_sum.py:SkellamSum", model: central}

Each of the call's n users clips its input to ‖x‖₂ ≤ C, scales it by γ = `scale`/C,
rounds every coordinate at random to an integer neighbour (unbiased) and adds
Sk(μ/n, μ/n) = Poisson(μ/n) − Poisson(μ/n) per coordinate. A secure
aggregation reveals only the integer sum, whose noise is exactly Sk(μ, μ)
(Skellam is closed under summation); the analyzer divides by γ. The trust
model is that of a curator who sees only the sum: the config's privacy model
is `central`, not `shuffle` (shuffled individual reports would reveal more).

Accounting. Two neighbouring inputs differ after rounding by an integer vector
s with |s_j − γ(x_j − x'_j)| < 2, so ‖s‖₂ ≤ Δ₂ = 2γC + 2√d and ‖s‖₁ ≤ Δ₁ =
min(√d·Δ₂, 2γC√d + 2d). The rounding is a data-dependent mixture that is
independent of the noise, so by joint convexity of e^{(α−1)D_α} the worst pair
of rounded vectors bounds the call. For integer shifts with those norms the
Skellam mechanism is (α, ε(α))-RDP with (Agarwal et al. 2021, Thm 3.5, with
2α in place of 2α − 1, which only loosens it)

    ε(α) = αΔ₂²/(4μ) + min(((2α)Δ₂² + 6Δ₁)/(16μ²), 3Δ₁/(4μ)).

tests/test_plugins.py checks this bound against exact Rényi divergences of
shifted Skellam distributions. Calls over the same users add curves; the
ledger converts once (pipeline.accounting.rdp).

Compiled twin (`SkellamEncoding`, Protocol.fused_encoding's contract): encode_block's rounding and
noise and decode again in numba's subset, operation for operation, its draws pipeline.draws' (the
uniforms from raw outputs, numpy's Poisson sampler), so that sequential and fully interactive
runs take the fused rounds, with no edit to the package.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Iterable, NamedTuple

import attr
import numpy as np
from dp_accounting import dp_event

from pipeline import draws
from pipeline.accounting.mechanisms import ORDERS, CallAccountant, CallCurve
from pipeline.accounting.rdp import rdp_to_dp
from pipeline.numerics import pairwise_sum
from pipeline.options import Option, real
from pipeline.protocols.base import Protocol, RoundPlan
from pipeline.twins import keeps_twin

# What SkellamEncoding reproduces: a subclass overriding one keeps the numpy path (pipeline.twins).
REPRODUCED = ("plan", "planned", "encode_block", "merge", "finish", "decode", "released_count")


class SkellamAccountant(CallAccountant):
    """The Skellam mechanism's RDP curve (Agarwal et al. 2021, Thm 3.5; see the module docstring)."""

    def supports(self, event) -> bool:
        return isinstance(event, SkellamSumDpEvent)

    def paper_call(self, event: "SkellamSumDpEvent") -> CallCurve:
        return CallCurve(skellam_rdp(event.l1_sensitivity, event.l2_sensitivity, event.mu), None,
                         "Skellam mechanism RDP (Agarwal, Kairouz, Liu 2021, Thm 3.5)")


def skellam_rdp(l1: float, l2: float, mu: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """ε(α) of the Skellam mechanism Sk(μ, μ) for integer shifts with ‖s‖₁ ≤ l1, ‖s‖₂ ≤ l2.

    Args:
      l1, l2: the shift's norms' bounds.
      mu: each Poisson's mean (the noise's variance is 2μ).
      orders: the orders α.

    Returns:
      The RDP curve at `orders`.
    """
    second = np.minimum((2.0 * orders * l2**2 + 6.0 * l1) / (16.0 * mu**2), 3.0 * l1 / (4.0 * mu))
    return orders * l2**2 / (4.0 * mu) + second


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SkellamSumDpEvent(dp_event.DpEvent):
    """One call: the integer sum of `users` rounded inputs plus Sk(μ, μ) per coordinate.

    Attributes:
      users: the users summed (= population: rounds here are not sampled).
      population: the users the round asks.
      dim: d.
      l1_sensitivity, l2_sensitivity: Δ₁, Δ₂ of the integer sum under replacing one user.
      mu: the total noise's Poisson mean per coordinate.
    """

    accountant: ClassVar[CallAccountant] = SkellamAccountant()
    users: int
    population: int
    dim: int
    l1_sensitivity: float
    l2_sensitivity: float
    mu: float


@dataclasses.dataclass(frozen=True)
class SkellamParams:
    """A planned call: users, d, norm bound C, scale γ and the total noise μ."""

    users: int
    dim: int
    norm_bound: float
    scale: float
    mu: float

    @property
    def l2_sensitivity(self) -> float:
        return 2.0 * self.scale * self.norm_bound + 2.0 * math.sqrt(self.dim)

    @property
    def l1_sensitivity(self) -> float:
        return min(math.sqrt(self.dim) * self.l2_sensitivity,
                   2.0 * self.scale * self.norm_bound * math.sqrt(self.dim) + 2.0 * self.dim)


@dataclasses.dataclass(frozen=True)
class IntegerSum:
    """Some users' rounded-and-noised integer sum (fields add exactly)."""

    users: int
    units: np.ndarray


# Calibrations already made, by (Δ₁, Δ₂, ε, δ, folds). A plain dict, not functools.lru_cache:
# a one-file plug-in travels to Ray workers by value, and lru_cache wrappers pickle by reference.
_LEAST_MU: dict[tuple, float] = {}


def least_mu(l1: float, l2: float, epsilon: float, delta: float, folds: int) -> float:
    """The least μ (to 1e-4 relative) whose `folds` calls spend at most (ε, δ).

    Raises:
      ValueError: no μ up to 1e12 meets it.
    """
    key = (l1, l2, epsilon, delta, folds)
    if key not in _LEAST_MU:
        _LEAST_MU[key] = _search_mu(*key)
    return _LEAST_MU[key]


def _search_mu(l1: float, l2: float, epsilon: float, delta: float, folds: int) -> float:
    def spent(mu: float) -> float:
        return rdp_to_dp(ORDERS, folds * skellam_rdp(l1, l2, mu), delta).epsilon

    lo, hi = 1e-6, 1e12
    if spent(hi) > epsilon:
        raise ValueError(f"no Skellam noise up to μ = {hi:g} meets (ε, δ) = ({epsilon}, {delta})")
    while hi / lo > 1.0 + 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if spent(mid) > epsilon else (lo, mid)
    return hi


class SkellamEncoding(NamedTuple):
    """SkellamSum's compiled twin: a call's clip C, scale γ, total noise μ and users n."""

    norm_bound: float
    scale: float
    mu: float
    users: int

    def work(self, dim, chunk):
        """A chunk's raw outputs, the block's units, the round's units and a block's two Poisson vectors."""
        return (np.empty(dim * chunk, np.uint64), np.zeros(dim, np.int64), np.zeros(dim, np.int64),
                np.empty(dim, np.int64), np.empty(dim, np.int64))

    def encode(self, work, inputs, norms, dim, users, state):
        """encode_block's chunk: x·γ·min(1, C/max(‖x‖, 1e-300)), floor + (u < scaled − floor) with
        the uniforms in (coordinate, user) order, each row summed as `.sum(axis=1)` sums it (pairwise)
        into the block's units."""
        raws, block = work[0], work[1]
        for user in range(users):
            norms[user] = self.scale * min(1.0, self.norm_bound / max(norms[user], 1e-300))
        draws.raw_outputs(state, raws, dim * users)
        for coordinate in range(dim):
            first = coordinate * users
            for user in range(users):
                scaled = inputs[first + user] * norms[user]
                low = np.floor(scaled)
                inputs[first + user] = low + (1.0 if draws.unit(raws[first + user]) < scaled - low else 0.0)
            block[coordinate] += np.int64(pairwise_sum(inputs, first, users))

    def finish_block(self, work, users, state):
        """The block's share of noise, Poisson(μk/n) − Poisson(μk/n) per coordinate (the first d
        draws, then the next d), added with the block's units to the round's."""
        block, total, first, second = work[1], work[2], work[3], work[4]
        share = self.mu * users / self.users
        draws.fill_poisson(state, share, first)
        draws.fill_poisson(state, share, second)
        for coordinate in range(block.size):
            total[coordinate] += block[coordinate] + (first[coordinate] - second[coordinate])
        block[:] = 0
        return True

    def analyze(self, work, batch, state, estimate):
        """decode: the round's units/γ; the units cleared."""
        total = work[2]
        for coordinate in range(estimate.size):
            estimate[coordinate] = np.float64(total[coordinate]) / self.scale
        total[:] = 0
        return True

    def counts(self, work):
        """The round's units (a fully interactive round's block partial, block_partial)."""
        return work[2]

    @staticmethod
    def block_partial(users: int, units: np.ndarray) -> IntegerSum:
        """A block's partial from its units."""
        return IntegerSum(users, units)


class SkellamSum(Protocol):
    """Distributed Skellam noise under secure aggregation (see the module docstring).

    Args:
      accounting: "paper" or "tight" (the same curve: the theorem is the only bound here).
      scale: γC, the integer units of a full-norm input (finer rounding, more units of noise).
    """

    name = "skellam_sum"
    model = "central"
    options: ClassVar[tuple] = (Option("scale", real(1.0, 2.0**40, False, False),
                                       "γC, integer units per norm bound (rounding vs noise units)", 1024.0),)

    def __init__(self, accounting: str = "paper", scale: float = 1024.0):
        super().__init__(accounting)
        self.scale = scale

    def plan(self, round_plan: RoundPlan, dim: int) -> SkellamParams:
        draft = SkellamParams(round_plan.users, dim, round_plan.norm_bound, self.scale / round_plan.norm_bound, 0.0)
        mu = least_mu(draft.l1_sensitivity, draft.l2_sensitivity, round_plan.epsilon, round_plan.delta,
                      round_plan.folds)
        return dataclasses.replace(draft, mu=mu)

    def event(self, params: SkellamParams, block_size: int) -> SkellamSumDpEvent:
        return SkellamSumDpEvent(params.users, params.users, params.dim, params.l1_sensitivity,
                                 params.l2_sensitivity, params.mu)

    def encode_block(self, params: SkellamParams, chunks: Iterable[np.ndarray], rng: np.random.Generator,
                     work=None) -> IntegerSum:
        """The block's clipped, scaled, randomly rounded inputs summed, plus the block's share of noise."""
        units = np.zeros(params.dim, dtype=np.int64)
        users = 0
        for chunk in chunks:
            norms = np.linalg.norm(chunk, axis=0)
            scaled = chunk * (params.scale * np.minimum(1.0, params.norm_bound / np.maximum(norms, 1e-300)))
            floor = np.floor(scaled)
            rounded = floor + (rng.random(scaled.shape) < scaled - floor)
            units += rounded.sum(axis=1).astype(np.int64)
            users += chunk.shape[1]
        # The block's users' Sk(μ/n, μ/n) shares summed: exactly Sk(μk/n, μk/n) per coordinate.
        share = params.mu * users / params.users
        units += rng.poisson(share, params.dim) - rng.poisson(share, params.dim)
        return IntegerSum(users, units)

    def decode(self, params: SkellamParams, statistic: IntegerSum) -> np.ndarray:
        return statistic.units.astype(np.float64) / params.scale

    def fused_encoding(self, params: SkellamParams) -> SkellamEncoding | None:
        """The call's constants for the compiled twin, unless a subclass changes what it reproduces."""
        if not keeps_twin(self, "fused_encoding", REPRODUCED):
            return None
        return SkellamEncoding(float(params.norm_bound), float(params.scale), float(params.mu), int(params.users))

    def sum_mse(self, params: SkellamParams) -> float:
        """d(2μ + n/4)/γ²: the noise's variance plus at most 1/4 per user and coordinate of rounding."""
        return params.dim * (2.0 * params.mu + params.users / 4.0) / params.scale**2


class UnderNoisedSkellamSum(SkellamSum):
    """A deliberately broken copy, for the audit (issue #27): each user adds Sk(μ/(n·shrink²)),
    so the sum's noise variance is 2μ/shrink², while the event still states μ. Never use it."""

    name = "under_noised_skellam_sum"
    options: ClassVar[tuple] = SkellamSum.options + (
        Option("shrink", real(1.0, float("inf"), False, True),
               "the noise's standard deviation is divided by this (its variance by the square)", 10.0),)

    def __init__(self, accounting: str = "paper", scale: float = 1024.0, shrink: float = 10.0):
        super().__init__(accounting, scale)
        self.shrink = shrink

    def encode_block(self, params: SkellamParams, chunks: Iterable[np.ndarray], rng: np.random.Generator,
                     work=None) -> IntegerSum:
        return super().encode_block(dataclasses.replace(params, mu=params.mu / self.shrink**2), chunks, rng, work)
