"""A deliberately broken protocol, for the lower-bound audit (issue #18): the
central Gaussian mechanism with its noise standard deviation divided by
`privacy.shrink` (variance by shrink²), while its ledger event still states
the calibrated σ, so the ledger claims the target ε. Never use it for a result.

`python -m pipeline audit CONFIG --lower-bound` must fail on it where the
certified bound is close enough to what the honest mechanism reaches
(experiments/README.md, "Lower-bound instances").
"""
from __future__ import annotations

import numpy as np

from pipeline.options import Option, real
from pipeline.protocols.sums import CentralGaussian, ReleasedSum, SumProtocol


class UnderNoisedGaussian(CentralGaussian):
    """central_gaussian whose released sum gets N(0, (σ/shrink)²I) instead of N(0, σ²I)."""

    name = "under_noised_gaussian"
    options = (Option("shrink", real(1.0, float("inf"), False, True), "σ is divided by this (variance by its square)", 10.0),)

    def __init__(self, accounting: str, shrink: float = 10.0):
        super().__init__(accounting)
        self.shrink = shrink

    def finish(self, params, total, rng: np.random.Generator) -> ReleasedSum:
        exact = SumProtocol.finish(self, params, total, rng)
        return ReleasedSum(exact.users, exact.total + params.sigma / self.shrink * rng.standard_normal(params.dim))
