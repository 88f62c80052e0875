"""The interface every SCO problem implements (shared/DESIGN.md §2, `problems/`)."""
from __future__ import annotations

import abc
import math
from typing import ClassVar

import numpy as np

from pipeline.options import Option


def ball_projection(theta: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto {‖θ‖₂ ≤ radius}."""
    norm = math.sqrt(theta @ theta)  # np.linalg.norm's own formula for a vector, without its dispatch
    return theta if norm <= radius else theta * (radius / norm)


class Problem(abc.ABC):
    """A loss ℓ(θ, x) over a convex domain Θ, with a data distribution whose
    population loss and optimum are known exactly (the problem contract).

    Blocks of users are arrays of shape (dim, count): users along the last
    axis, so that per-coordinate work runs over long contiguous rows.

    Subclasses are constructed as `cls(dim=d, radius=R, **options)`, on the
    driver and again in every shard (the object is pickled to the shards).

    What the engine guarantees a problem: `sample` is called once per block of
    users, with that block's own generator keyed by (seed, block) and valid during
    the call, inside the shard that holds the block; the data never leave the shard.

    What a problem must guarantee: `sample` depends only on its generator and
    count (so any sharding gives the same users); `gradients` has ℓ2 norm at
    most `lipschitz` on Θ (protocols clip to that bound, so a wrong constant
    biases, it never leaks); `population_loss` and `optimum` are exact or
    documented high-precision values (every excess loss is measured with them).

    Class attributes:
      name: the short name (`problem.name`).
      options: its options (config fields problem.<name>), passed to the constructor.
      data_kind: "real", or "binary" for points in {0, 1}^d (protocols declare
        which kinds they encode).
      reads_rows: False: users are drawn by `sample`; True: they are rows read
        by `read_users` (a dataset: pipeline.problems.dataset).
      exact_loss: True: `population_loss` and `optimum` are exact and cheap, so
        every round is measured where it runs; False: the loss is a sum over the
        rows, measured after the run from the shards' block sums
        (pipeline.engine.evaluation: `metric_sums`, `objective_sums`, `risk`).

    Attributes (the constants the theorems of seed 000 need):
      dim: d, the dimension of θ and of the data.
      lipschitz: L, a bound on ‖∇_θ ℓ(θ, x)‖₂ over Θ and the data's support.
      smoothness: β (``inf`` if the loss is not smooth).
      strong_convexity: λ (0 if the loss is not strongly convex).
      diameter: D, the diameter of Θ (not its radius; notes seed-000 T18).
      data_norm_bound: a bound on ‖x‖₂ over the data's support.
    """

    name: str
    options: ClassVar[tuple[Option, ...]] = ()
    data_kind: ClassVar[str] = "real"
    reads_rows: ClassVar[bool] = False
    exact_loss: ClassVar[bool] = True
    evaluations: int = 0  # rounds measured after the run when exact_loss is False
    heldout_users: int = 0  # held-out records the shards measure (a dataset's test rows)
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

    def for_run(self, run) -> "Problem":
        """The problem a run uses: itself, unless it depends on the run's (n, ε, δ)
        (the lower-bound instances, pipeline.problems.hard) or cannot serve its n
        users (a dataset's rows).

        Args:
          run: the run's config (pipeline.config.RunConfig).

        Returns:
          The problem.

        Raises:
          ConfigError: a field the problem cannot be run with.
        """
        return self

    @property
    def data_dim(self) -> int:
        """Rows of a user's data point: d, or more for labelled data (features, then the label)."""
        return self.dim

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
