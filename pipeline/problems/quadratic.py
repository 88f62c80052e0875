"""The quadratic problem ℓ(θ, x) = ½‖θ − x‖² on an ℓ2 ball (notes seed-000 T20)."""
from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline import draws
from pipeline.numerics import column_norms_into, pairwise_sum
from pipeline.problems.base import Twinned, ball_projection, writeable

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
    (np.add.reduce of the squares), and population loss that plus `self.constant`: the quadratic's and Bernoulli's."""
    for coordinate in range(released.size):
        gap = released[coordinate] - self.optimum[coordinate]
        squares[coordinate] = gap * gap
    excess = 0.5 * pairwise_sum(squares, 0, released.size)
    return excess, excess + self.constant


class QuadraticTwin(NamedTuple):
    """The quadratic's compiled twin (pipeline.problems.base): centred_gradients, centred_losses,
    and `draw`, its users.

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
        """The users: the stream's next normals (numpy's `standard_normal`), placed on the sphere (on_sphere)."""
        draws.normals(state, out.reshape(out.size), tape)
        on_sphere(self.optimum, self.spread, out)


def on_sphere(optimum, spread, directions):
    """The users whose directions are these normals (d, users, C-ordered), in place: each user's
    direction (its norm numerics.column_norms_into, as np.linalg.norm(axis=0) sums it; a zero
    norm read as 1) scaled to `spread` and moved to θ*. The twin's draw."""
    dim, users = directions.shape
    norms = np.empty(users)
    column_norms_into(directions.reshape(directions.size), dim, users, norms)
    for user in range(users):
        norms[user] = spread / (norms[user] if norms[user] != 0.0 else 1.0)
    for coordinate in range(dim):
        row, centre = directions[coordinate], optimum[coordinate]
        for user in range(users):
            row[user] = row[user] * norms[user] + centre


@dataclasses.dataclass(frozen=True)
class Quadratic(Twinned):
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

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        # argmin ½‖θ' − x‖² + ‖θ' − θ‖²/(2s) = (θ + s·x)/(1 + s).
        return (theta[:, None] + step * data) / (1.0 + step)

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    def twin(self) -> QuadraticTwin:
        return QuadraticTwin(writeable(self.optimum), 0.5 * self.spread**2, float(self.spread))
