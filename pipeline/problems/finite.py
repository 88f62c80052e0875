"""Problems whose data take finitely many values: exact population losses by weighted sums."""
from __future__ import annotations

import functools
import math

import numpy as np

from pipeline import draws
from pipeline.numerics import ordered_dot
from pipeline.problems.base import Problem, ball_projection, compiled_function, drawn_users, writeable

SUPPORT_SIZE = 64  # K, the number of points the data distribution puts mass on


def choice_cdf(weights: np.ndarray) -> np.ndarray:
    """The cdf numpy's `choice(K, p=weights)` searches: cumsum, divided by its last."""
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def finite_draw(cdf, support, state, out, tape):
    """A finite problem's users drawn into out (d, users), compiled (FiniteBallProblem.sample; SignTwin.draw):
    numpy's `choice(K, size=users, p=weights)` draws one uniform double a user (`random(users)`)
    and takes the first index whose cdf (choice_cdf) exceeds it (`searchsorted(side="right")`);
    then the support's columns, gathered row by row. Raw outputs come a tape at a time."""
    dim, users = out.shape
    picks = np.empty(tape.size, np.int64)
    done = 0
    while done < users:
        size = min(tape.size, users - done)
        draws.raw_outputs(state, tape, size)
        for user in range(size):
            uniform = draws.unit(tape[user])
            low, high = 0, cdf.size
            while low < high:
                middle = (low + high) // 2
                if cdf[middle] <= uniform:
                    low = middle + 1
                else:
                    high = middle
            picks[user] = low
        for coordinate in range(dim):
            row, points = out[coordinate, done: done + size], support[coordinate]
            for user in range(size):
                row[user] = points[picks[user]]
        done += size


def finite_losses(ridge, support, weights, optimum_losses, released):
    """The compiled twins' (pipeline.problems.base) excess and population losses of a finite
    problem whose ℓ(θ, x_k) is Σ_j |θ_j − x_kj| plus (λ/2)·θ·θ (Absolute, Elastic; λ = `ridge`):
    FiniteBallProblem's, in numba's subset. ℓ is added coordinate by coordinate (`sum(axis=0)`),
    θ·θ as ordered_dot adds; then Σ_k w_k·ℓ_k and Σ_k w_k·(ℓ_k − ℓ(θ*, x_k)), each as ordered_dot adds."""
    dim = released.size
    ridge_term = 0.0
    if ridge != 0.0:
        dot = released[0] * released[0]
        for coordinate in range(1, dim):
            dot += released[coordinate] * released[coordinate]
        ridge_term = 0.5 * ridge * dot
    excess, population = 0.0, 0.0
    for point in range(weights.size):
        loss = np.abs(released[0] - support[0, point])
        for coordinate in range(1, dim):
            loss += np.abs(released[coordinate] - support[coordinate, point])
        if ridge != 0.0:
            loss = loss + ridge_term
        gap = weights[point] * (loss - optimum_losses[point])
        loss = weights[point] * loss
        # np.add.accumulate starts from the first product itself, not from 0.0 + it
        excess = gap if point == 0 else excess + gap
        population = loss if point == 0 else population + loss
    return excess, population


def finite_support(tag: int, dim: int, radius: float, size: int = SUPPORT_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """A fixed finite distribution inside the ball of radius R/2.

    Points x_k = (R/4)·1/√d + (R/4)·ρ_k·u_k with u_k uniform on the unit sphere and
    ρ_k uniform on [0.2, 1], so ‖x_k‖₂ ≤ R/2; weights uniform on [0.5, 1.5], then
    normalised. Everything comes from ``np.random.default_rng([tag, dim])``: the
    same (tag, dim) always gives the same distribution, scaled by R.

    Args:
      tag: tells the problems' distributions apart.
      dim: d.
      radius: R.
      size: K.

    Returns:
      (support, weights): read-only float64 arrays of shapes (d, K) and (K,).
    """
    rng = np.random.default_rng([tag, dim])
    directions = rng.standard_normal((dim, size))
    norms = np.linalg.norm(directions, axis=0)
    norms[norms == 0.0] = 1.0
    spread = rng.uniform(0.2, 1.0, size)
    support = radius / 4.0 * (1.0 / math.sqrt(dim) + spread * directions / norms)
    weights = rng.uniform(0.5, 1.5, size)
    weights /= weights.sum()
    support.flags.writeable = False
    weights.flags.writeable = False
    return support, weights


class FiniteBallProblem(Problem):
    """A loss on the ℓ2 ball of radius R whose data distribution is finite.

    Subclasses are frozen dataclasses with fields `dim` and `radius`, and define
    `_distribution` (a cached (support, weights, ...) tuple), `losses` and the rest of
    the Problem interface. Population and excess losses are exact weighted sums, the
    excess taken term by term so that no large loss values cancel.
    """

    radius: float

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    @functools.cached_property
    def _distribution(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    @property
    def support(self) -> np.ndarray:
        """The points the data take, shape (d, K), read-only."""
        return self._distribution[0]

    @property
    def weights(self) -> np.ndarray:
        """Their probabilities, shape (K,), read-only."""
        return self._distribution[1]

    def losses(self, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Per-user losses ℓ(θ, x_i), shape (count,)."""
        raise NotImplementedError

    @functools.cached_property
    def _draw_constants(self) -> tuple[np.ndarray, np.ndarray]:
        """finite_draw's constants: the weights' choice_cdf and the support, writeable (what it compiles for)."""
        return choice_cdf(self.weights), writeable(self.support)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return drawn_users(compiled_function(finite_draw), self._draw_constants, rng, (self.support.shape[0], count))

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    # The weighted sums are ordered_dot's, not the BLAS's: the same bits on any CPU.
    def population_loss(self, theta: np.ndarray) -> float:
        return ordered_dot(self.weights, self.losses(theta, self.support))

    def excess_loss(self, theta: np.ndarray) -> float:
        gaps = self.losses(theta, self.support) - self.losses(self.optimum, self.support)
        return ordered_dot(self.weights, gaps)
