"""Projected gradient steps with iterate averaging: the state machine that
Algorithm 3 (P_SGD) and Algorithm 5 (P_GD) of seed 000 share."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from pipeline.optimizers.base import CompiledUpdate, Optimizer, Staged
from pipeline.optimizers.transforms import average, chain, sgd


class AveragedState(NamedTuple):
    """θ_t, Σ_{s<t} θ_s and t."""

    theta: np.ndarray
    theta_sum: np.ndarray
    steps: int


@dataclasses.dataclass(frozen=True)
class AveragedProjectedDescent(Staged, Optimizer):
    """θ_{t+1} = π_Θ(θ_t − η ḡ_t); output θ̄ = (1/T) Σ_{t=0}^{T−1} θ_t.

    Seed 000 prints θ_t + η ḡ_t in Algorithms 3 and 5 (line 5): that is
    ascent, a sign typo (notes T1); we descend.
    """

    def init(self) -> AveragedState:
        zero = np.zeros(self.problem.dim)
        # θ_0 = 0 ∈ Θ (Algorithm 5 requires 0 ∈ Θ; any θ_0 ∈ Θ suits Algorithm 3).
        return AveragedState(zero, zero.copy(), 0)

    def output(self, state: AveragedState) -> np.ndarray:
        # After t steps the released average is over θ_0..θ_{t−1}.
        return state.theta_sum / state.steps if state.steps else state.theta

    def stages(self) -> CompiledUpdate:
        """query θ; step θ − ηḡ; release the average before the step, then (π(step), Σθ + θ, t + 1)."""
        return chain(sgd(self.step_size), average())


