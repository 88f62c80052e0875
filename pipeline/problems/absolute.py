"""The ℓ1 absolute-deviation problem ℓ(θ, x) = Σ_j |θ_j − x_j| on an ℓ2 ball: convex,
Lipschitz, not smooth, with a closed-form prox (soft-thresholding toward x)."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, ClassVar, NamedTuple

import numpy as np

from pipeline.problems.base import TWINNED, CompiledProblem, Twinned, compiled_function, writeable
from pipeline.problems.finite import FiniteBallProblem, choice_cdf, finite_draw, finite_losses, finite_support
from pipeline.twins import keeps_twin

# What the compiled twins reproduce besides the gradients and population losses (Twinned, and the
# envelope's, compiled_envelope): a subclass overriding one keeps the Python path; Elastic states
# its own twins (twin, envelope_twin).
REPRODUCED = ("sample", "losses", "project")


def sign(value):
    """numpy's sign of a float, in numba's subset: ±1, 0 for ±0 (a positive zero), NaN for NaN."""
    if value > 0.0:
        return 1.0
    if value < 0.0:
        return -1.0
    return 0.0 if value == 0.0 else value


class SignTwin(NamedTuple):
    """The compiled twin (pipeline.problems.base) of the absolute deviation, with Elastic's ridge λ:
    gradient sign(q − x) + λq, losses finite_losses, users finite_draw.

    Attributes:
      ridge: λ (0 for Absolute: sign + 0·q is the same bits as sign alone).
      support, weights: the (d, K) points and their weights.
      optimum_losses: ℓ(θ*, x_k) of every support point (the excess's reference).
      cdf: the weights' choice_cdf.
    """

    ridge: float
    support: np.ndarray
    weights: np.ndarray
    optimum_losses: np.ndarray
    cdf: np.ndarray

    @classmethod
    def of(cls, problem: Any, ridge: float = 0.0) -> "SignTwin":
        return cls(float(ridge), *_finite_constants(problem), choice_cdf(problem.weights))

    def draw(self, state, out, tape):
        finite_draw(self.cdf, self.support, state, out, tape)

    def gradients(self, query, data, column, users, out):
        """sign(q − x) + λq (np.sign of q − x, then Elastic's out += λθ)."""
        for coordinate in range(query.size):
            centre, row = query[coordinate], data[coordinate, column: column + users]
            target = out[coordinate * users: (coordinate + 1) * users]
            shift = self.ridge * centre
            for user in range(users):
                target[user] = sign(centre - row[user]) + shift

    def losses(self, released, squares):
        return finite_losses(self.ridge, self.support, self.weights, self.optimum_losses, released)


def prox_point(middle, point, threshold):
    """x + sign(c − x)·max(|c − x| − t, 0), as numpy computes it elementwise (a NaN gap stays NaN):
    the prox of the absolute deviation toward x, soft-thresholding c = θ/den by t."""
    gap = middle - point
    shrunk = np.abs(gap) - threshold
    if shrunk < 0.0:  # np.maximum(shrunk, 0.0); a NaN stays
        shrunk = 0.0
    return point + sign(gap) * shrunk


class EnvelopeTwin(NamedTuple):
    """The compiled twin (pipeline.problems.base) of the Moreau envelope (pipeline.problems.smoothed)
    of the absolute deviation or its elastic variant: gradient β(q − p), p = x + sign(c − x)·max(|c − x| − t, 0),
    c = q/den (the prox, as Absolute.prox and Elastic.prox compute it); losses the base's (finite_losses).

    Attributes:
      ridge: λ.
      beta, denominator, threshold: β, den and t, computed as the Python prox computes them.
      support, weights, optimum_losses: as SignTwin's.
    """

    ridge: float
    beta: float
    denominator: float
    threshold: float
    support: np.ndarray
    weights: np.ndarray
    optimum_losses: np.ndarray

    @classmethod
    def of(cls, problem: Any, beta: float, ridge: float = 0.0, denominator: float = 1.0,
           threshold: float = 0.0) -> "EnvelopeTwin":
        return cls(float(ridge), float(beta), float(denominator), float(threshold), *_finite_constants(problem))

    def gradients(self, query, data, column, users, out):
        """β(q − p), p the prox point (prox_point) of each x."""
        for coordinate in range(query.size):
            centre, row = query[coordinate], data[coordinate, column: column + users]
            target = out[coordinate * users: (coordinate + 1) * users]
            middle = centre / self.denominator
            for user in range(users):
                target[user] = self.beta * (centre - prox_point(middle, row[user], self.threshold))

    def prox(self, query, data, column, users, out):
        """The prox points themselves (Absolute.prox, Elastic.prox), in `gradients`' layout."""
        for coordinate in range(query.size):
            row = data[coordinate, column: column + users]
            target = out[coordinate * users: (coordinate + 1) * users]
            middle = query[coordinate] / self.denominator
            for user in range(users):
                target[user] = prox_point(middle, row[user], self.threshold)

    def losses(self, released, squares):
        return finite_losses(self.ridge, self.support, self.weights, self.optimum_losses, released)


def envelope_prox(twin: EnvelopeTwin, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Problem.prox by an envelope twin's `prox`, compiled alone: a new (d, count) array."""
    query, data = np.require(theta, np.float64, ("C", "W")), np.require(data, np.float64, ("C", "W"))
    out = np.empty(data.shape)
    compiled_function(EnvelopeTwin.prox)(twin, query, data, 0, data.shape[1], out.reshape(-1))
    return out


def _finite_constants(problem: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A finite problem's support, weights and ℓ(θ*, x_k), as the kernels take them."""
    return (writeable(problem.support), writeable(problem.weights),
            writeable(problem.losses(writeable(problem.optimum), problem.support)))


def coordinate_minimizers(support: np.ndarray, weights: np.ndarray, lam: float) -> np.ndarray:
    """argmin_t Σ_k w_k |t − x_kj| + (λ/2)t², exactly, for every coordinate j.

    G_j is convex and piecewise quadratic with kinks at the support values. Sorted
    a_1 ≤ … ≤ a_K with cumulative weights C_i (W = C_K), its one-sided derivatives
    at a_i are D⁻ = 2C_{i−1} − W + λa_i and D⁺ = 2C_i − W + λa_i, and between kinks
    G_j' = 2C_i − W + λt. D⁺ is non-decreasing in i. With i* the first kink where
    D⁺ ≥ 0: if D⁻ ≤ 0 there, t = a_{i*} (0 ∈ ∂G_j); else the root lies strictly
    between a_{i*−1} and a_{i*}, where it is t = (W − 2C_{i*−1})/λ. With λ = 0 the
    second case cannot occur and t is the (lower) weighted median.

    Args:
      support: the points, shape (d, K).
      weights: their probabilities, shape (K,).
      lam: λ ≥ 0.

    Returns:
      float64 array of shape (d,).
    """
    dim, size = support.shape
    order = np.argsort(support, axis=1, kind="stable")
    values = np.take_along_axis(support, order, axis=1)
    # cumulative[:, i] = weight of the i smallest values (C_i), i = 0..K.
    cumulative = np.concatenate([np.zeros((dim, 1)), np.cumsum(weights[order], axis=1)], axis=1)
    total = cumulative[:, -1]
    right = 2.0 * cumulative[:, 1:] - total[:, None] + lam * values
    left = 2.0 * cumulative[:, :-1] - total[:, None] + lam * values
    rows = np.arange(dim)
    nonnegative = right >= 0.0
    first = np.where(nonnegative.any(axis=1), np.argmax(nonnegative, axis=1), size)
    at_kink = (first < size) & (left[rows, np.minimum(first, size - 1)] <= 0.0)
    result = values[rows, np.minimum(first, size - 1)].copy()
    between = ~at_kink
    if between.any():
        if lam <= 0.0:  # impossible: with λ = 0, D⁻ at a_{i*} is D⁺ at a_{i*−1} < 0
            raise AssertionError("no kink satisfies 0 ∈ ∂G with λ = 0")
        padded = np.concatenate([np.full((dim, 1), -np.inf), values, np.full((dim, 1), np.inf)], axis=1)
        j, i = rows[between], first[between]
        root = (total[j] - 2.0 * cumulative[j, i]) / lam
        result[between] = np.clip(root, padded[j, i], padded[j, i + 1])
    return result


def one_sided_derivatives(theta: np.ndarray, support: np.ndarray, weights: np.ndarray,
                          lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Left and right derivatives of Σ_k w_k |t − x_kj| + (λ/2)t² at t = θ_j, per coordinate
    (the optimality certificate: θ_j is a minimizer iff left ≤ 0 ≤ right)."""
    below = (support < theta[:, None]) @ weights
    above = (support > theta[:, None]) @ weights
    at = weights.sum() - below - above
    left = below - (above + at) + lam * theta
    right = (below + at) - above + lam * theta
    return left, right


@dataclasses.dataclass(frozen=True)
class Absolute(Twinned, FiniteBallProblem):
    """ℓ(θ, x) = ‖θ − x‖₁ = Σ_j |θ_j − x_j| on Θ = {‖θ‖₂ ≤ R}.

    Data: a fixed distribution on K = 64 points with ‖x‖₂ ≤ R/2 and unequal weights
    (`finite_support`, drawn from ``default_rng([2, d])`` and scaled by R); `sample`
    draws from it as numpy's ``rng.choice`` would (its twin's `finite.finite_draw`,
    compiled). The population loss F(θ) = Σ_k w_k ‖θ − x_k‖₁ is an exact finite sum.

    Optimum: F separates over coordinates, so θ*_j is the weighted (lower) median of
    the x_kj, found exactly from the sorted support (`coordinate_minimizers`, λ = 0);
    θ* is one of the support's values in each coordinate, with no rounding at all.
    Certificate: for every j, W(x_j < θ*_j) − W(x_j ≥ θ*_j) ≤ 0 ≤ W(x_j ≤ θ*_j) −
    W(x_j > θ*_j) (`one_sided_derivatives`), so 0 ∈ ∂F(θ*). It lies inside Θ: a
    median m_j > 0 has W(x_j ≥ m_j) ≥ ½ (likewise for m_j < 0), so
    ‖m‖² ≤ 2·E‖x‖² ≤ R²/2 and ‖θ*‖ ≤ R/√2 < R; the unconstrained minimizer is the
    constrained one.

    Constants: ∇ℓ = sign(θ − x) (sign(0) = 0, a valid subgradient), so
    ‖∇ℓ‖₂ ≤ √d = L; β = ∞; λ = 0; D = 2R; data norm bound R/2.

    Prox (over ℝ^d): soft-thresholding toward x, θ' = x + sign(θ − x)·max(|θ − x| − s, 0).

    Args:
      dim: d.
      radius: R, the radius of Θ.
    """

    dim: int
    radius: float
    name: ClassVar[str] = "absolute"
    twin_reproduces: ClassVar[tuple[str, ...]] = REPRODUCED
    losses_restate: ClassVar[tuple[str, ...]] = ("losses",)  # the twin adds |θ − x| inline
    tag: ClassVar[int] = 2  # seeds the distribution's generator together with d

    @property
    def lipschitz(self) -> float:
        return math.sqrt(self.dim)

    @property
    def smoothness(self) -> float:
        return math.inf

    @property
    def strong_convexity(self) -> float:
        return 0.0

    @property
    def data_norm_bound(self) -> float:
        return self.radius / 2.0

    @functools.cached_property
    def _distribution(self) -> tuple[np.ndarray, np.ndarray]:
        return finite_support(self.tag, self.dim, self.radius)

    @functools.cached_property
    def optimum(self) -> np.ndarray:
        optimum = coordinate_minimizers(self.support, self.weights, self.strong_convexity)
        if not np.linalg.norm(optimum) < self.radius:  # proven (class docstrings); guard anyway
            raise AssertionError("the optimum left the ball")
        optimum.flags.writeable = False  # cached: nobody may change θ*
        return optimum

    def losses(self, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Per-user losses ℓ(θ, x_i), shape (count,)."""
        return np.abs(theta[:, None] - data).sum(axis=0)

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        return envelope_prox(self.envelope_twin(step), theta, data)

    def envelope_twin(self, step: float, beta: float = 1.0) -> EnvelopeTwin:
        """The twin of the prox with step s (and of the Moreau envelope with smoothing β = 1/s):
        soft-thresholding of θ by s toward each x."""
        return EnvelopeTwin.of(self, beta, threshold=step)

    def twin(self) -> SignTwin:
        return SignTwin.of(self)

    def compiled_envelope(self, beta: float) -> CompiledProblem | None:
        """envelope_twin with step s = 1/β."""
        kept = keeps_twin(self, "envelope_twin", (*TWINNED, *REPRODUCED, "prox"))
        return self.envelope_twin(1.0 / beta, beta) if kept else None
