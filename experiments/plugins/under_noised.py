"""Deliberately broken protocols, for the audits (issues #18 and #27): each adds
less noise than its plan says, while its ledger event still states the honest
parameters, so the ledger claims the target ε. Never use one for a result.

`privacy.shrink` divides the noise's standard deviation (its variance by the
square); the default 10 is variance ÷ 100:

- `UnderNoisedGaussian` (name under_noised_gaussian): the central Gaussian, σ ÷ shrink
  at the curator. `python -m pipeline audit CONFIG --lower-bound` must fail on it
  where the certified bound is close enough to what the honest mechanism reaches.
- `UnderNoisedPvec`: P_vec (seed 000) whose randomizers send b_noise/shrink² noise
  bits each (the noise count's variance is ∝ b_noise).
- `UnderNoisedShuffleGaussian`: seed 004's shuffle Gaussian, each user's σ ÷ shrink.
- `UnderNoisedGirgisL2`: seed 001's ℓ2 randomizer run at local budget shrink·v instead
  of v (at small v its variance falls about as 1/v², so about ÷ shrink²).

`experiments/plugins/skellam_sum.py` keeps its own under-noised copy. The randomizer-site
copies must fail `python -m pipeline audit CONFIG` (tests/test_audit.py); the shuffle
Gaussian's at shrink 100: the audit attacks the released sum, whose noise σ√n/10 still hides
one user's move at shrink 10 (experiments/README.md, "Audit power").
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.options import Option, real
from pipeline.protocols import CjmpVec
from pipeline.protocols.multi_message import GirgisL2
from pipeline.protocols.girgis import plan_girgis
from pipeline.protocols.sums import CentralGaussian, ReleasedSum, ShuffleGaussian, SumProtocol

SHRINK = Option("shrink", real(1.0, float("inf"), False, True),
                "the noise's standard deviation is divided by this (its variance by the square)", 10.0)


class _Shrinking:
    """Takes the `shrink` option."""

    options = (SHRINK,)

    def __init__(self, accounting: str, shrink: float = 10.0, **options):
        super().__init__(accounting, **options)
        self.shrink = shrink


class UnderNoisedGaussian(_Shrinking, CentralGaussian):
    """central_gaussian whose released sum gets N(0, (σ/shrink)²I) instead of N(0, σ²I)."""

    name = "under_noised_gaussian"

    def finish(self, params, total, rng: np.random.Generator) -> ReleasedSum:
        exact = SumProtocol.finish(self, params, total, rng)
        return ReleasedSum(exact.users, exact.total + params.sigma / self.shrink * rng.standard_normal(params.dim))


class UnderNoisedPvec(_Shrinking, CjmpVec):
    """cjmp_vec whose users send ⌈b_noise/shrink²⌉ noise bits; analyzed as what was sent."""

    name = "under_noised_pvec"

    def _sent(self, params):
        return dataclasses.replace(params, b_noise=max(1, round(params.b_noise / self.shrink**2)))

    def encode_block(self, params, chunks, rng, work=None):
        return super().encode_block(self._sent(params), chunks, rng, work)

    def finish(self, params, total, rng=None):
        return super().finish(self._sent(params), total, rng)

    def decode(self, params, counts):
        return super().decode(self._sent(params), counts)


class UnderNoisedShuffleGaussian(_Shrinking, ShuffleGaussian):
    """shuffle_gaussian whose users add N(0, (σ/shrink)²I)."""

    name = "under_noised_shuffle_gaussian"

    def encode_block(self, params, chunks, rng, work=None):
        return super().encode_block(dataclasses.replace(params, sigma=params.sigma / self.shrink), chunks, rng, work)


class UnderNoisedGirgisL2(_Shrinking, GirgisL2):
    """girgis_l2 whose randomizers run at local budget shrink·v; analyzed as what was sent."""

    name = "under_noised_girgis_l2"
    options = GirgisL2.options + (SHRINK,)

    def _sent(self, call):
        honest = call.randomizer
        # Sized as the plan sizes it (users = the call's messages), only the budget changed.
        spent = plan_girgis(honest.kind, max(call.users * max(call.record_messages, 1), 1), honest.dim, honest.radius,
                            honest.budget * self.shrink, honest.levels, honest.messages, honest.rotation_seed)
        return dataclasses.replace(call, randomizer=spent)

    def encode_block(self, call, chunks, rng, work=None):
        return super().encode_block(self._sent(call), chunks, rng, work)

    def decode(self, call, statistic):
        return super().decode(self._sent(call), statistic)
