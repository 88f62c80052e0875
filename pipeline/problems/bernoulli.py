"""Binary data for seed 001's binary-vector randomizer: ℓ(θ, x) = ½‖θ − x‖² with x ∈ {0, 1}^d."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.numerics import ordered_dot
from pipeline import draws
from pipeline.problems.base import Twinned, ball_projection, writeable
from pipeline.problems.quadratic import centred_gradients, centred_losses

class BernoulliTwin(NamedTuple):
    """Bernoulli's compiled twin (pipeline.problems.base): the quadratic's gradients and losses
    (quadratic.centred_gradients, centred_losses), and `draw`, its users.

    Attributes:
      optimum: μ, the bits' means (θ*).
      constant: the variance, the population loss minus the excess.
    """

    optimum: np.ndarray
    constant: float

    gradients = centred_gradients
    losses = centred_losses

    def draw(self, state, out, tape):
        """(random((d, users)) < μ[:, None]) as floats: one uniform double per coordinate in
        (coordinate, user) order, the raw outputs drawn a tape at a time."""
        flat = out.reshape(out.size)
        users = out.shape[1]
        done = 0
        while done < flat.size:
            size = min(tape.size, flat.size - done)
            draws.raw_outputs(state, tape, size)
            for index in range(size):
                flat[done + index] = 1.0 if draws.unit(tape[index]) < self.optimum[(done + index) // users] else 0.0
            done += size


@dataclasses.dataclass(frozen=True)
class Bernoulli(Twinned):
    """Mean estimation of independent bits: x_j ~ Bernoulli(μ_j), Θ = {‖θ‖₂ ≤ R}.

    μ_j = c·(j + 1)/(d + 1) with c = min(1, R/(2√d)), so ‖μ‖₂ ≤ R/2 and θ* = μ
    lies inside Θ. F(θ) = ½‖θ − μ‖² + ½Σ_j μ_j(1 − μ_j) exactly, so the excess
    loss is ½‖θ − μ‖². Constants: ‖∇ℓ‖ = ‖θ − x‖ ≤ R + √d = L; β = λ = 1;
    D = 2R; ‖x‖₂ ≤ √d.

    Args:
      dim: d.
      radius: R.
    """

    dim: int
    radius: float
    name: ClassVar[str] = "bernoulli"
    data_kind: ClassVar[str] = "binary"

    @property
    def lipschitz(self) -> float:
        return self.radius + math.sqrt(self.dim)

    @property
    def smoothness(self) -> float:
        return 1.0

    @property
    def strong_convexity(self) -> float:
        return 1.0

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    @property
    def data_norm_bound(self) -> float:
        return math.sqrt(self.dim)

    @functools.cached_property
    def optimum(self) -> np.ndarray:
        scale = min(1.0, self.radius / (2.0 * math.sqrt(self.dim)))
        optimum = scale * np.arange(1, self.dim + 1) / (self.dim + 1)
        optimum.flags.writeable = False
        return optimum

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        return (theta[:, None] + step * data) / (1.0 + step)

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    @functools.cached_property
    def variance(self) -> float:
        """½Σ_j μ_j(1 − μ_j): the population loss at θ* = μ, summed in a fixed order (ordered_dot,
        not the BLAS's: the same bits on any CPU)."""
        return 0.5 * ordered_dot(self.optimum, 1.0 - self.optimum)

    def twin(self) -> BernoulliTwin:
        return BernoulliTwin(writeable(self.optimum), float(self.variance))
