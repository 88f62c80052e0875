"""The quadratic problem ℓ(θ, x) = ½‖θ − x‖² on an ℓ2 ball (notes seed-000 T20)."""
from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline import draws
from pipeline.numerics import column_norms, pairwise_sum
from pipeline.problems.base import CompiledProblem, Problem, ball_projection, squared_norm, writeable
from pipeline.twins import keeps_twin

def centred_gradients(self, query, data, column, users, out):
    """A compiled twin's (pipeline.problems.base) gradients q − x, coordinate by coordinate (row by
    row: the compiler vectorizes the inner loop): the quadratic's and Bernoulli's."""
    for coordinate in range(query.size):
        centre, row = query[coordinate], data[coordinate, column: column + users]
        target = out[coordinate * users: (coordinate + 1) * users]
        for user in range(users):
            target[user] = centre - row[user]


def centred_losses(self, released, squares):
    """A compiled twin's excess ½‖θ − θ*‖², its squares summed as numpy's pairwise sum
    (squared_norm), and population loss that plus `self.constant`: the quadratic's and Bernoulli's."""
    for coordinate in range(released.size):
        gap = released[coordinate] - self.optimum[coordinate]
        squares[coordinate] = gap * gap
    excess = 0.5 * pairwise_sum(squares, 0, released.size)
    return excess, excess + self.constant


class QuadraticTwin(NamedTuple):
    """The quadratic's compiled twin (pipeline.problems.base): centred_gradients, centred_losses,
    and `draw`, Quadratic.sample's users.

    Attributes:
      optimum: θ*.
      constant: ½·spread², the population loss minus the excess.
      spread: the users' distance from θ*.
    """

    optimum: np.ndarray
    constant: float
    spread: float

    gradients = centred_gradients
    losses = centred_losses

    def draw(self, state, out, tape):
        """from_normals of the stream's next normals: each user's normal direction (its norm summed
        coordinate by coordinate, a zero norm read as 1) scaled to `spread` and moved to θ*."""
        dim, users = out.shape
        draws.normals(state, out.reshape(out.size), tape)
        norms = np.zeros(users)
        for coordinate in range(dim):
            row = out[coordinate]
            for user in range(users):
                norms[user] += row[user] * row[user]
        for user in range(users):
            norm = np.sqrt(norms[user])
            norms[user] = self.spread / (norm if norm != 0.0 else 1.0)
        for coordinate in range(dim):
            row, centre = out[coordinate], self.optimum[coordinate]
            for user in range(users):
                row[user] = row[user] * norms[user] + centre


# What the compiled twin reproduces (compiled_problem): a subclass overriding one keeps numpy.
_REPRODUCED = ("sample", "from_normals", "gradients", "project", "population_loss", "excess_loss")


@dataclasses.dataclass(frozen=True)
class Quadratic(Problem):
    """ℓ(θ, x) = ½‖θ − x‖² on Θ = {‖θ‖₂ ≤ R}.

    Data: x = μ + (R/2)·u with u uniform on the unit sphere and μ = (R/2)·1/√d,
    so ‖x‖₂ ≤ R, E x = μ and E‖x − μ‖² = R²/4 exactly. Hence
    F(θ) = ½‖θ − μ‖² + R²/8, θ* = μ (inside Θ) and F(θ) − F(θ*) = ½‖θ − μ‖².
    Constants: ‖∇ℓ‖ = ‖θ − x‖ ≤ 2R = L; β = λ = 1; D = 2R.

    Args:
      dim: d.
      radius: R, the radius of Θ.
    """

    dim: int
    radius: float
    name: ClassVar[str] = "quadratic"

    @property
    def lipschitz(self) -> float:
        return 2.0 * self.radius

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
        return self.radius

    @property
    def spread(self) -> float:
        """Radius of the sphere the data lie on around μ."""
        return self.radius / 2.0

    @functools.cached_property
    def optimum(self) -> np.ndarray:
        optimum = np.full(self.dim, self.radius / 2.0 / np.sqrt(self.dim))
        optimum.flags.writeable = False  # cached: nobody may change θ*
        return optimum

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return self.from_normals(rng.standard_normal((self.dim, count)))

    def from_normals(self, directions: np.ndarray) -> np.ndarray:
        """The users whose directions are these standard normals, (d, count), in place: what
        `sample` makes of its draw (the fused rounds draw the normals in compiled code,
        pipeline.engine.fused)."""
        # ‖x‖ as np.linalg.norm(axis=0) sums it (coordinate by coordinate, no FMA: the same
        # bits) for any count, without its d × count array of squares; then in place: a
        # sequential run's users are drawn a block per window, and these passes were a third
        # of the draw.
        norms = column_norms(directions)
        # A zero draw has probability 0; guard anyway so no NaN can appear.
        norms[norms == 0.0] = 1.0
        directions *= np.divide(self.spread, norms, out=norms)
        directions += self.optimum[:, None]
        return directions

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.subtract(theta[:, None], data, out=out)

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        # argmin ½‖θ' − x‖² + ‖θ' − θ‖²/(2s) = (θ + s·x)/(1 + s).
        return (theta[:, None] + step * data) / (1.0 + step)

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    def population_loss(self, theta: np.ndarray) -> float:
        gap = theta - self.optimum
        return 0.5 * squared_norm(gap) + 0.5 * self.spread**2

    def excess_loss(self, theta: np.ndarray) -> float:
        gap = theta - self.optimum
        return 0.5 * squared_norm(gap)

    def compiled_problem(self) -> CompiledProblem | None:
        if not keeps_twin(self, "compiled_problem", _REPRODUCED):
            return None
        return QuadraticTwin(writeable(self.optimum), 0.5 * self.spread**2, float(self.spread))
