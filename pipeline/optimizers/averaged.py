"""Projected gradient steps with iterate averaging: the state machine that
Algorithm 3 (P_SGD) and Algorithm 5 (P_GD) of seed 000 share."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from pipeline.optimizers.base import STATE_FUNCTIONS, CompiledUpdate, Optimizer
from pipeline.twins import keeps_twin


class AveragedState(NamedTuple):
    """θ_t, Σ_{s<t} θ_s and t."""

    theta: np.ndarray
    theta_sum: np.ndarray
    steps: int


@dataclasses.dataclass(frozen=True)
class AveragedProjectedDescent(Optimizer):
    """θ_{t+1} = π_Θ(θ_t − η ḡ_t); output θ̄ = (1/T) Σ_{t=0}^{T−1} θ_t.

    Seed 000 prints θ_t + η ḡ_t in Algorithms 3 and 5 (line 5): that is
    ascent, a sign typo (notes T1); we descend.
    """

    def init(self) -> AveragedState:
        zero = np.zeros(self.problem.dim)
        # θ_0 = 0 ∈ Θ (Algorithm 5 requires 0 ∈ Θ; any θ_0 ∈ Θ suits Algorithm 3).
        return AveragedState(zero, zero.copy(), 0)

    def query(self, state: AveragedState) -> np.ndarray:
        return state.theta

    def update(self, state: AveragedState, noisy_mean: np.ndarray) -> AveragedState:
        theta = self.problem.project(state.theta - self.step_size * noisy_mean)
        return AveragedState(theta, state.theta_sum + state.theta, state.steps + 1)

    def output(self, state: AveragedState) -> np.ndarray:
        # After t steps the released average is over θ_0..θ_{t−1}.
        return state.theta_sum / state.steps if state.steps else state.theta

    def compiled_update(self) -> CompiledUpdate | None:
        return CompiledUpdate("AVERAGED", self.step_size) if keeps_twin(self, "compiled_update", STATE_FUNCTIONS) else None
