"""Privacy events: immutable records of what a mechanism call did, in the
style of `dp_accounting.DpEvent` (accountants compute from them separately)."""
from __future__ import annotations

import attr
from dp_accounting import dp_event


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PvecDpEvent(dp_event.DpEvent):
    """One call of P_vec (seed 000, Algorithm 2) with the Theorem 3.2 parameters.

    Attributes:
      users: n, the users in the call.
      dim: d.
      epsilon, delta: the call's target (ε, δ).
      norm_bound: Δ₂.
      g, b_noise, p: the P_1D parameters of every coordinate.
      noise_sampler: "binomial" (exact) or "normal_approximation".
      calibration: the rule that chose g, b_noise, p: "paper" or "tight".
    """

    users: int
    dim: int
    epsilon: float
    delta: float
    norm_bound: float
    g: int
    b_noise: int
    p: float
    noise_sampler: str
    calibration: str = "paper"
