"""Logistic regression ℓ(θ, w) = log(1 + exp(−⟨θ, w⟩)) on an ℓ2 ball: smooth and convex."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline.numerics import column_dots
from pipeline.problems.finite import FiniteBallProblem

FEATURES = 64  # the number of feature vectors; the support has twice as many points
_PROX_ITERATIONS = 200  # Newton steps of the prox; about log(s‖w‖²) + 6 suffice


@dataclasses.dataclass(frozen=True)
class Logistic(FiniteBallProblem):
    """ℓ(θ, w) = log(1 + exp(−⟨θ, w⟩)) on Θ = {‖θ‖₂ ≤ R}, with w = y·z (label y ∈ {±1}
    times features z), one vector per user.

    Data: a well-specified logistic model on a finite support. From
    ``default_rng([1, d])``: 64 features z_k = ρ_k·u_k (u_k uniform on the unit
    sphere, ρ_k uniform on [0.5, 1], so ‖z_k‖ ≤ 1) with probabilities m_k ∝ U[0.5, 1.5],
    and the true model θ₀ = (R/2)·1/√d. Label y = +1 has probability σ(⟨θ₀, z_k⟩),
    so w takes the 128 values ±z_k with weights m_k·σ(±⟨θ₀, z_k⟩) (both signs always
    have positive mass: the data are not separable). `sample` draws from them as
    numpy's ``rng.choice`` would (`finite.finite_draw`, compiled);
    F(θ) = Σ weights·log(1 + exp(−⟨θ, w⟩)) is an exact finite sum.

    Optimum: θ* = θ₀, in closed form. ∇F(θ) = −Σ_k m_k z_k [σ(s_k)σ(−s_k') − σ(−s_k)σ(s_k')]
    with s_k = ⟨θ₀, z_k⟩ and s_k' = ⟨θ, z_k⟩ vanishes at θ = θ₀, and F is convex, so
    θ₀ minimises F over ℝ^d; ‖θ₀‖ = R/2 < R, so it is the constrained optimum.
    Certificate: the stored weights are rounded, so ∇F(θ*) is not exactly 0 but a
    rounding residual (about 1e-17); by convexity, for every θ ∈ Θ,
    F(θ) ≥ F(θ*) − D·‖∇F(θ*)‖, so F(θ*) is min_Θ F to within D·‖∇F(θ*)‖ (checked
    ≤ 1e-13 in the tests, far below any excess loss a run reports).

    Constants: ∇ℓ = −w·σ(−⟨θ, w⟩), so ‖∇ℓ‖ ≤ ‖w‖ ≤ 1 = L = data norm bound; the
    Hessian σ(s)σ(−s)·wwᵀ ⪯ ‖w‖²/4, so β = 1/4; λ = 0; D = 2R.

    Prox (over ℝ^d): the minimiser of ℓ(θ', w) + ‖θ' − θ‖²/(2s) is θ' = θ + c·w with
    c = s·σ(−v), where the new margin v = ⟨θ', w⟩ is the one root of
    h(v) = v − ⟨θ, w⟩ − s‖w‖²·σ(−v). h is increasing, convex for v ≤ 0 and concave for
    v ≥ 0, so Newton's method started at v = 0 converges monotonically (in about
    log(s‖w‖²) + 6 steps, vectorized over users) to the float root.

    Args:
      dim: d.
      radius: R, the radius of Θ.
    """

    dim: int
    radius: float
    name: ClassVar[str] = "logistic"
    tag: ClassVar[int] = 1  # seeds the distribution's generator together with d

    @property
    def lipschitz(self) -> float:
        return self.data_norm_bound

    @property
    def smoothness(self) -> float:
        return self.data_norm_bound**2 / 4.0

    @property
    def strong_convexity(self) -> float:
        return 0.0

    @property
    def data_norm_bound(self) -> float:
        return 1.0

    @functools.cached_property
    def _distribution(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.tag, self.dim])
        directions = rng.standard_normal((self.dim, FEATURES))
        norms = np.linalg.norm(directions, axis=0)
        norms[norms == 0.0] = 1.0
        features = directions / norms * rng.uniform(0.5, 1.0, FEATURES)
        marginal = rng.uniform(0.5, 1.5, FEATURES)
        truth = np.full(self.dim, self.radius / 2.0 / math.sqrt(self.dim))
        margins = truth @ features
        support = np.concatenate([features, -features], axis=1)
        weights = np.concatenate([marginal * scipy.special.expit(margins), marginal * scipy.special.expit(-margins)])
        weights /= weights.sum()
        for array in (support, weights, truth):
            array.flags.writeable = False
        return support, weights, truth

    @functools.cached_property
    def optimum(self) -> np.ndarray:
        return self._distribution[2]  # θ₀, read-only (class docstring)

    def losses(self, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Per-user losses ℓ(θ, w_i) = log(1 + exp(−⟨θ, w_i⟩)), shape (count,)."""
        return np.logaddexp(0.0, -(theta @ data))

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        scale = -scipy.special.expit(-(theta @ data))
        return np.multiply(data, scale[None, :], out=out)

    def population_gradient(self, theta: np.ndarray) -> np.ndarray:
        """∇F(θ) = Σ weights·∇ℓ(θ, w), exactly up to rounding."""
        return self.gradients(theta, self.support) @ self.weights

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        margin = theta @ data                             # a = ⟨θ, w⟩
        stiffness = step * column_dots(data, data)  # k = s‖w‖²
        # The new margin v = ⟨θ', w⟩ solves h(v) = v − a − k·σ(−v) = 0. h increases, is convex
        # on v ≤ 0 and concave on v ≥ 0, so Newton from v = 0 (where h(0) has the sign that
        # puts 0 on the root's convex-right or concave-left side) moves monotonically to it.
        new_margin = np.zeros_like(margin)
        for _ in range(_PROX_ITERATIONS):
            tail = scipy.special.expit(-new_margin)
            change = ((new_margin - margin - stiffness * tail)
                      / (1.0 + stiffness * tail * scipy.special.expit(new_margin)))
            new_margin -= change
            if np.all(np.abs(change) <= np.finfo(float).eps * np.maximum(1.0, np.abs(new_margin))):
                break
        coef = step * scipy.special.expit(-new_margin)                  # c = s·σ(−v), well conditioned
        return theta[:, None] + coef[None, :] * data
