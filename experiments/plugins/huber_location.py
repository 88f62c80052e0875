"""An example problem plug-in: robust location estimation with the Huber loss.

One file outside the package; run it with

    problem: {name: "experiments/plugins/huber_location.py:HuberLocation", dim: 5, radius: 1.0, threshold: 0.1}

ℓ(θ, x) = Σ_j h_κ(θ_j − x_j), with h_κ(u) = u²/2 for |u| ≤ κ and κ(|u| − κ/2)
beyond (Huber 1964), on Θ = {‖θ‖₂ ≤ R}.

Data: x = μ + s·r, μ = (R/2)·1/√d, s = R/(2√d) and r uniform on {−1, 1}^d, so
‖x‖₂ ≤ ‖μ‖₂ + s√d = R. Each coordinate's population loss
F_j(θ_j) = ½[h(θ_j − μ_j − s) + h(θ_j − μ_j + s)] is exact, convex and
symmetric about μ_j, so θ* = μ (inside Θ) and F(θ*) = d·h(s).

Constants: ∇ℓ = clip(θ − x, −κ, κ) coordinate-wise, so ‖∇ℓ‖₂ ≤ min(κ√d, ‖θ − x‖₂)
≤ min(κ√d, 2R) = L; h'' ≤ 1, so β = 1; λ = 0 (h is flat-sloped beyond κ); D = 2R.
Prox (closed form, per coordinate, u = θ − x): argmin_u' h(u') + (u' − u)²/(2t) is
u/(1 + t) if |u| ≤ κ(1 + t), else u − tκ·sign(u); θ' = x + u'.

Compiled twin (`HuberTwin`, pipeline/problems/base.py's contract): the gradients, losses and users
below again in numba's subset, operation for operation as the numpy methods, so that sequential
runs take the fused rounds, with no edit to the package.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline import draws
from pipeline.numerics import pairwise_sum
from pipeline.options import Option, real
from pipeline.problems.base import Problem, ball_projection, writeable
from pipeline.twins import keeps_twin

# What HuberTwin reproduces: a subclass overriding one keeps the numpy path (pipeline.twins).
REPRODUCED = ("center", "spread", "optimum", "sample", "gradients", "project", "population_loss", "excess_loss")


def huber(u: np.ndarray, threshold: float) -> np.ndarray:
    """h_κ(u), elementwise."""
    magnitude = np.abs(u)
    return np.where(magnitude <= threshold, 0.5 * u**2, threshold * (magnitude - 0.5 * threshold))


def huber_at(u, threshold):
    """h_κ(u) of one float, as `huber` computes each element."""
    magnitude = np.abs(u)
    return 0.5 * (u * u) if magnitude <= threshold else threshold * (magnitude - 0.5 * threshold)


class HuberTwin(NamedTuple):
    """HuberLocation's compiled twin: its centre μ, spread s, threshold κ and F(θ*)."""

    center: np.ndarray
    spread: float
    threshold: float
    optimum_loss: float

    def gradients(self, query, data, column, users, out):
        """clip(q − x, −κ, κ) (np.clip: a NaN stays)."""
        for coordinate in range(query.size):
            centre, row = query[coordinate], data[coordinate, column: column + users]
            target = out[coordinate * users: (coordinate + 1) * users]
            for user in range(users):
                value = centre - row[user]
                if value < -self.threshold:
                    value = -self.threshold
                elif value > self.threshold:
                    value = self.threshold
                target[user] = value

    def losses(self, released, squares):
        """F(θ) − F(θ*) and F(θ): ½[h(g − s) + h(g + s)] per coordinate, g = θ − μ, summed as numpy's `.sum()`."""
        for coordinate in range(released.size):
            gap = released[coordinate] - self.center[coordinate]
            squares[coordinate] = 0.5 * (huber_at(gap - self.spread, self.threshold)
                                         + huber_at(gap + self.spread, self.threshold))
        population = pairwise_sum(squares, 0, released.size)
        return population - self.optimum_loss, population

    def draw(self, state, out, tape):
        """`sample`: μ + s·(2·integers(0, 2) − 1), the draws in (coordinate, user) order, in bulk."""
        dim, users = out.shape
        signs = np.empty(out.size, np.int64)
        draws.fill_integers(state, 2, signs, tape)
        for coordinate in range(dim):
            for user in range(users):
                out[coordinate, user] = self.center[coordinate] + self.spread * (2.0 * signs[coordinate * users + user] - 1.0)


@dataclasses.dataclass(frozen=True)
class HuberLocation(Problem):
    """Huber location estimation (see the module docstring).

    Args:
      dim: d.
      radius: R.
      threshold: κ > 0, where the loss turns from quadratic to linear.
    """

    dim: int
    radius: float
    threshold: float = 0.1
    name: ClassVar[str] = "huber_location"
    options: ClassVar[tuple] = (Option("threshold", real(0.0, math.inf, True, True),
                                       "κ, where the Huber loss turns linear", 0.1),)

    @property
    def center(self) -> np.ndarray:
        return np.full(self.dim, self.radius / 2.0 / math.sqrt(self.dim))

    @property
    def spread(self) -> float:
        return self.radius / (2.0 * math.sqrt(self.dim))

    @property
    def lipschitz(self) -> float:
        return min(self.threshold * math.sqrt(self.dim), 2.0 * self.radius)

    @property
    def smoothness(self) -> float:
        return 1.0

    @property
    def strong_convexity(self) -> float:
        return 0.0

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    @property
    def data_norm_bound(self) -> float:
        return self.radius

    @property
    def optimum(self) -> np.ndarray:
        return self.center

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        signs = 2.0 * rng.integers(0, 2, size=(self.dim, count)) - 1.0
        return self.center[:, None] + self.spread * signs

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        difference = np.subtract(theta[:, None], data, out=out)
        return np.clip(difference, -self.threshold, self.threshold, out=difference)

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        u = theta[:, None] - data
        inside = np.abs(u) <= self.threshold * (1.0 + step)
        return data + np.where(inside, u / (1.0 + step), u - step * self.threshold * np.sign(u))

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    def population_loss(self, theta: np.ndarray) -> float:
        gap = theta - self.center
        return float(0.5 * (huber(gap - self.spread, self.threshold) + huber(gap + self.spread, self.threshold)).sum())

    def compiled_problem(self) -> HuberTwin | None:
        if not keeps_twin(self, "compiled_problem", REPRODUCED):
            return None
        return HuberTwin(writeable(self.center), self.spread, float(self.threshold), self.population_loss(self.center))
