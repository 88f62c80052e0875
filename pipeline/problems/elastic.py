"""ℓ1 absolute deviation plus a ridge term, ℓ(θ, x) = ‖θ − x‖₁ + (λ/2)‖θ‖², on an ℓ2 ball:
strongly convex, Lipschitz on the ball, not smooth, with a closed-form prox."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from pipeline.numerics import ordered_dot
from pipeline.problems.absolute import Absolute, EnvelopeTwin, SignTwin


@dataclasses.dataclass(frozen=True)
class Elastic(Absolute):
    """ℓ(θ, x) = Σ_j |θ_j − x_j| + (λ/2)‖θ‖₂² on Θ = {‖θ‖₂ ≤ R}, λ = `regularization` (1 by default):
    `Absolute` plus a ridge term, on the same kind of data (its own draw).

    Data: a fixed distribution on K = 64 points with ‖x‖₂ ≤ R/2 and unequal weights
    (`finite.finite_support`, drawn from ``default_rng([3, d])`` and scaled by R);
    `sample` draws from it as numpy's ``rng.choice`` would (`finite.finite_draw`,
    compiled). F(θ) = Σ_k w_k ‖θ − x_k‖₁ + (λ/2)‖θ‖² is an exact finite sum.

    Optimum: F separates over coordinates into G_j(t) = Σ_k w_k |t − x_kj| + (λ/2)t²,
    convex and piecewise quadratic. `absolute.coordinate_minimizers` finds the piece
    where 0 ∈ ∂G_j: either a kink (θ*_j is a support value, exactly) or the root
    (W − 2C)/λ of the one linear piece of G_j' that crosses 0 (one rounding).
    Certificate: the one-sided derivatives at θ*_j (`absolute.one_sided_derivatives`)
    satisfy D⁻ ≤ 0 ≤ D⁺ up to rounding (≤ 1e-12 in the tests). Inside Θ: the minimizer
    of G_j lies between 0 and a weighted median m_j of x_j (both terms decrease toward
    that segment), so ‖θ*‖ ≤ ‖m‖ ≤ R/√2 < R (see `Absolute`), and θ* is the
    constrained optimum too.

    Constants: ∇ℓ = sign(θ − x) + λθ, so ‖∇ℓ‖₂ ≤ √d + λR = L on Θ; β = ∞;
    strong convexity λ; D = 2R; data norm bound R/2. The prox point p of θ ∈ Θ may
    leave Θ, yet the envelope gradient g = (θ − p)/s ∈ sign-set(p − x) + λp solves
    g = (λθ + ξ)/(1 + λs) with ξ ∈ [−1, 1]^d, so ‖g‖ ≤ (√d + λR)/(1 + λs) ≤ L on Θ.

    Prox (over ℝ^d, per coordinate): |t − x| + (λ/2)t² + (t − θ)²/(2s) equals
    |t − x| + (a/2)(t − c)² + const with a = λ + 1/s and c = θ/(1 + λs), so
    t = x + sign(c − x)·max(|c − x| − 1/a, 0).

    Args:
      dim: d.
      radius: R, the radius of Θ.
      regularization: λ > 0.
    """

    regularization: float = 1.0
    name: ClassVar[str] = "elastic"
    tag: ClassVar[int] = 3  # seeds the distribution's generator together with d

    def __post_init__(self):
        if not self.regularization > 0.0:
            raise ValueError(f"regularization must be > 0, got {self.regularization}")

    @property
    def lipschitz(self) -> float:
        return math.sqrt(self.dim) + self.regularization * self.radius

    @property
    def strong_convexity(self) -> float:
        return self.regularization

    def losses(self, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Per-user losses ℓ(θ, x_i), shape (count,)."""
        return np.abs(theta[:, None] - data).sum(axis=0) + 0.5 * self.regularization * ordered_dot(theta, theta)

    def twin(self) -> SignTwin:
        return SignTwin.of(self, ridge=self.regularization)

    def envelope_twin(self, step: float, beta: float = 1.0) -> EnvelopeTwin:
        """The twin of the prox with step s (and of the envelope with β = 1/s): its centre
        θ/(1 + λs) and threshold 1/(λ + 1/s)."""
        return EnvelopeTwin.of(self, beta, ridge=self.regularization, denominator=1.0 + self.regularization * step,
                               threshold=1.0 / (self.regularization + 1.0 / step))
