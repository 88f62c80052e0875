"""Projected gradient steps with iterate averaging: the state machine that
Algorithm 3 (P_SGD) and Algorithm 5 (P_GD) of seed 000 share."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from pipeline.optimizers.base import CompiledUpdate, Optimizer, Staged


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
        """query θ; step θ − ηḡ; release the average, then (π(step), Σθ + θ, t + 1): the stages below."""
        return CompiledUpdate(point_query, gradient_step, averaged_release, (self.step_size,), 1)


# The compiled round's stages (Optimizer.compiled_update), in numba's subset: state (θ, Σθ, t).

def point_query(constants, theta, extra, steps, out):
    """The query is θ itself (AveragedProjectedDescent.query)."""
    for coordinate in range(theta.size):
        out[coordinate] = theta[coordinate]


def gradient_step(constants, theta, extra, steps, mean, out):
    """θ − η·ḡ, η = constants[0] (AveragedProjectedDescent.update before the projection)."""
    rate = constants[0]
    for coordinate in range(theta.size):
        out[coordinate] = theta[coordinate] - rate * mean[coordinate]


def averaged_release(constants, theta, extra, steps, mean, projected, released):
    """Releases (Σθ + θ)/(t + 1), the average before the step (`output` after `update`), then
    advances (θ, Σθ, t) to (π(step), Σθ + θ, t + 1); False, the state untouched, if not finite."""
    for coordinate in range(theta.size):
        released[coordinate] = (extra[0, coordinate] + theta[coordinate]) / (steps[0] + 1)
        if not np.isfinite(released[coordinate]):
            return False
    steps[0] += 1
    for coordinate in range(theta.size):
        extra[0, coordinate] = extra[0, coordinate] + theta[coordinate]
        theta[coordinate] = projected[coordinate]
    return True
