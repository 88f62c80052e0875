"""The interface every SCO problem implements (shared/DESIGN.md §2, `problems/`)."""
from __future__ import annotations

import abc

import numpy as np


def ball_projection(theta: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto {‖θ‖₂ ≤ radius}."""
    norm = float(np.linalg.norm(theta))
    return theta if norm <= radius else theta * (radius / norm)


class Problem(abc.ABC):
    """A loss ℓ(θ, x) over a convex domain Θ, with a data distribution whose
    population loss and optimum are known exactly.

    Blocks of users are arrays of shape (dim, count): users along the last
    axis, so that per-coordinate work runs over long contiguous rows.

    Attributes (the constants the theorems of seed 000 need):
      dim: d, the dimension of θ and of the data.
      lipschitz: L, a bound on ‖∇_θ ℓ(θ, x)‖₂ over Θ and the data's support.
      smoothness: β (``inf`` if the loss is not smooth).
      strong_convexity: λ (0 if the loss is not strongly convex).
      diameter: D, the diameter of Θ (not its radius; notes seed-000 T18).
      data_norm_bound: a bound on ‖x‖₂ over the data's support.
    """

    name: str
    dim: int
    lipschitz: float
    smoothness: float
    strong_convexity: float
    diameter: float
    data_norm_bound: float

    @abc.abstractmethod
    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """Draws `count` users' data points.

        Args:
          rng: the generator of the users' block.
          count: how many users.

        Returns:
          float64 array of shape (dim, count).
        """

    @abc.abstractmethod
    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Per-user gradients ∇_θ ℓ(θ, x_i), vectorized over a block of users.

        Args:
          theta: the model, shape (dim,).
          data: the users' points, shape (dim, count).
          out: where to write them (same shape as data), or None.

        Returns:
          float64 array of shape (dim, count).
        """

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        """Per-user proximal points argmin_{θ'∈ℝ^d} ℓ(θ', x_i) + ‖θ' − θ‖²/(2·step).

        Args:
          theta: the point, shape (dim,).
          data: the users' points, shape (dim, count).
          step: the prox step > 0.

        Returns:
          float64 array of shape (dim, count).

        Raises:
          NotImplementedError: the problem has no closed-form prox.
        """
        raise NotImplementedError(f"{self.name} has no closed-form prox")

    @abc.abstractmethod
    def project(self, theta: np.ndarray) -> np.ndarray:
        """Euclidean projection π_Θ onto the domain."""

    @abc.abstractmethod
    def population_loss(self, theta: np.ndarray) -> float:
        """The exact population loss E_x ℓ(θ, x)."""

    @property
    @abc.abstractmethod
    def optimum(self) -> np.ndarray:
        """θ* = argmin_Θ of the population loss."""

    def excess_loss(self, theta: np.ndarray) -> float:
        """Excess population loss F(θ) − F(θ*)."""
        return self.population_loss(theta) - self.population_loss(self.optimum)

    @property
    def unsmoothed(self) -> "Problem":
        """The problem whose loss runs are measured on: itself, unless this is a smoothed stand-in."""
        return self

    def constants(self) -> dict[str, float]:
        """The declared constants, for logging."""
        return {
            "L": self.lipschitz,
            "beta": self.smoothness,
            "lambda": self.strong_convexity,
            "D": self.diameter,
        }
