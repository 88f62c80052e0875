"""Least squares over the ℓ1 ball (notes seed-003 §2.6 item 2, the TTZ15 instance of
Theorem 11): ℓ(θ; (a, y)) = ½(⟨a, θ⟩ − y)² on Θ = {‖θ‖₁ ≤ R}, with ‖a‖∞ ≤ 1 and a finite
data distribution, so that the population loss is an exact quadratic."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import numpy as np

from pipeline.problems.finite import FiniteBallProblem

SIGN_FEATURES = 64  # dense feature vectors a ∈ {−1, +1}^d in the support
BASIS_MASS = 0.25   # total probability of the d basis features e_j (makes Σ positive definite)
TRUTH_SPARSITY = 5  # nonzero coordinates of θ₀ (fewer when d < 5)
NOISE = 0.5         # the label noise ξ = ±NOISE·R, each with probability ½


def l1_ball_projection(theta: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto {‖θ‖₁ ≤ radius} (Duchi, Shalev-Shwartz, Singer and
    Chandra 2008, Figure 1), exact up to rounding.

    Inside the ball θ itself is returned (the same object, like `ball_projection`).
    Outside, the projection is the soft threshold sign(θ)·max(|θ| − τ, 0) whose ℓ1 norm
    is R: with u the magnitudes sorted decreasingly and S_k = u_1 + … + u_k, ρ is the
    largest k with u_k > (S_k − R)/k and τ = (S_ρ − R)/ρ ≥ 0. Its ℓ1 norm is R up to
    rounding (a relative error of a few d·eps; it may exceed R by that much).

    Args:
      theta: the point, shape (d,).
      radius: R > 0.

    Returns:
      float64 array of shape (d,).
    """
    magnitudes = np.abs(theta)
    if magnitudes.sum() <= radius:
        return theta
    ordered = np.sort(magnitudes)[::-1]
    cumulative = np.cumsum(ordered)
    counts = np.arange(1, ordered.size + 1)
    # u_k·k > S_k − R holds for k = 1 (u_1 > u_1 − R) and fails from ρ + 1 on.
    rho = int(np.flatnonzero(ordered * counts > cumulative - radius)[-1])
    threshold = max((cumulative[rho] - radius) / (rho + 1), 0.0)
    return np.sign(theta) * np.maximum(magnitudes - threshold, 0.0)


def l1_constrained_quadratic(second: np.ndarray, first: np.ndarray, radius: float) -> tuple[np.ndarray, float]:
    """argmin_{‖θ‖₁ ≤ R} ½θᵀΣθ − bᵀθ for positive definite Σ, exactly up to rounding, by
    the Lasso homotopy (LARS with drops), together with the constraint's multiplier μ.

    If ‖Σ⁻¹b‖₁ ≤ R that is the answer with μ = 0. Otherwise the constraint is active and
    θ* = θ(μ*) for the penalised path θ(μ) = argmin ½θᵀΣθ − bᵀθ + μ‖θ‖₁, where μ* > 0
    solves ‖θ(μ)‖₁ = R (the KKT conditions of both problems coincide). The path is
    piecewise linear: on a segment with active set A and signs s, θ_A(μ) = p − μq with
    p = Σ_AA⁻¹b_A, q = Σ_AA⁻¹s_A, and ‖θ(μ)‖₁ = sᵀp − μ·sᵀq (sᵀq > 0). Starting from
    μ = ‖b‖∞ (θ = 0), it moves down to the next event — an inactive correlation
    c_j(μ) = (b − Σθ(μ))_j reaching ±μ (j joins) or an active coordinate reaching 0 (j
    leaves) — unless ‖θ(μ)‖₁ reaches R first. Each segment costs one |A|×|A| solve.

    The answer satisfies the KKT conditions to rounding: g = Σθ − b has g_A = −μs_A and
    |g_j| ≤ μ off A, so −g lies in the normal cone of the ball at θ; the caller checks
    them (and the Frank–Wolfe gap gᵀθ + R‖g‖∞ ≥ F(θ) − min F).

    Args:
      second: Σ, shape (d, d), symmetric positive definite.
      first: b, shape (d,).
      radius: R > 0.

    Returns:
      (θ*, μ*): float64 array of shape (d,), and the multiplier μ* ≥ 0.

    Raises:
      AssertionError: the path went wrong or did not reach the ℓ1 sphere (not expected
        for positive definite Σ).
    """
    dim = first.size
    unconstrained = np.linalg.solve(second, first)
    if np.abs(unconstrained).sum() <= radius:
        return unconstrained, 0.0
    start = int(np.argmax(np.abs(first)))
    active, signs = [start], [float(np.sign(first[start]))]
    level = float(np.abs(first[start]))
    joined, dropped, dropped_sign = start, -1, 0.0  # the last event's index (see below)
    for _ in range(8 * dim + 8):  # each index joins and leaves finitely often; generic paths are short
        index = np.array(active)
        sign = np.array(signs)
        block = second[np.ix_(index, index)]
        base = np.linalg.solve(block, first[index])        # p
        slope = np.linalg.solve(block, sign)               # q
        target = (sign @ base - radius) / (sign @ slope)   # μ with ‖θ(μ)‖₁ = R on this segment
        offset = first - second[:, index] @ base           # c(μ) = offset + μ·tilt
        tilt = second[:, index] @ slope
        inactive = np.ones(dim, bool)
        inactive[index] = False
        with np.errstate(divide="ignore", invalid="ignore"):
            upper = offset / (1.0 - tilt)    # c_j(μ) = +μ
            lower = -offset / (1.0 + tilt)   # c_j(μ) = −μ
            vanish = base / slope            # θ_j(μ) = 0
        # Each line crosses once. The last event's own root is the current level: a joined
        # coordinate's θ_j(level) = 0, a dropped one's c_j(level) = level·(its old sign);
        # those roots are skipped exactly, the rest only if within rounding of the level.
        ceiling = level * (1.0 - 1e-12)
        candidates = []  # (μ, kind, j, sign)
        for j in np.flatnonzero(inactive):
            for value, direction in ((upper[j], 1.0), (lower[j], -1.0)):
                if j == dropped and direction == dropped_sign:
                    continue
                if np.isfinite(value) and 0.0 < value < ceiling:
                    candidates.append((float(value), "join", int(j), direction))
        for position, j in enumerate(active):
            value = vanish[position]
            if j != joined and np.isfinite(value) and 0.0 < value < ceiling:
                candidates.append((float(value), "leave", j, signs[position]))
        event = max(candidates, default=None)
        if event is None or target >= event[0]:
            if not 0.0 < target <= level * (1.0 + 1e-9):
                break  # the path went wrong (not expected for positive definite Σ)
            theta = np.zeros(dim)
            theta[index] = base - target * slope
            return theta, float(target)
        level, kind, j, direction = event
        if kind == "join":
            active.append(j)
            signs.append(direction)
            joined, dropped, dropped_sign = j, -1, 0.0
        else:
            position = active.index(j)
            del active[position], signs[position]
            joined, dropped, dropped_sign = -1, j, direction
    raise AssertionError("the ℓ1 homotopy did not reach the constraint")


@dataclasses.dataclass(frozen=True)
class L1LeastSquares(FiniteBallProblem):
    """ℓ(θ; (a, y)) = ½(⟨a, θ⟩ − y)² on Θ = {‖θ‖₁ ≤ R}: smooth, convex, ℓ1 geometry.

    Data: each user's point is one column of d + 1 rows, the features a ∈ ℝ^d then the
    label y (so `sample` returns shape (d + 1, count) and `data_dim` = d + 1, while θ and
    the gradients have d rows). A fixed finite distribution, from
    ``default_rng([31, d])`` and scaled by R where stated:
      * features: the d basis vectors e_j (total probability 1/4, each ∝ U[0.5, 1.5]) and
        64 vectors with i.i.d. uniform ±1 entries (probability 3/4, each ∝ U[0.5, 1.5]);
        ‖a‖∞ = 1, ‖a‖₂ ≤ √d;
      * the truth θ₀: min(d, 5) random coordinates with random signs and magnitudes
        ∝ U[0.5, 1.5], scaled to ‖θ₀‖₁ = `truth_norm`·R (½R here, so θ₀ is interior);
      * labels y = ⟨a, θ₀⟩ + ξ, the noise ξ = ±R/2 with probability ½ each, independent
        of a (mean exactly 0). The support is the 2K pairs (a, y), K ≤ d + 64 the number of
        distinct feature vectors (repeats, likely for small d, are merged).
    `sample` draws from it as numpy's ``rng.choice`` would (`finite.finite_draw`, compiled).

    Population loss: F(θ) = ½θᵀΣθ − bᵀθ + c with Σ = E[aaᵀ], b = E[ya], c = ½E[y²],
    computed once as exact weighted sums over the support; each call is O(d²) and
    agrees with the weighted sum of the per-atom losses to rounding.

    Optimum: Σ ⪰ Σ_j P(e_j)·e_je_jᵀ ⪰ (1/(12d))·I is positive definite (each basis weight
    is ≥ (1/4)·0.5/(1.5d)), and b = E[a(⟨a, θ₀⟩ + ξ)] = Σθ₀ + E[ξ]E[a] = Σθ₀, so ∇F(θ₀) = 0
    and θ₀ is the unique minimiser over ℝ^d; ‖θ₀‖₁ = R/2 < R, so θ* = θ₀ exactly, in
    closed form. F(θ) − F(θ*) = ½(θ − θ*)ᵀΣ(θ − θ*) exactly, which `excess_loss`
    evaluates as ½Σ_k P(a_k)⟨a_k, θ − θ*⟩² (no cancellation, never negative).
    Certificate: the stored b is rounded, so ∇F(θ*) = Σθ* − b is a ~1e-16 residual and
    F(θ*) is min_Θ F to within the Frank–Wolfe gap ∇F(θ*)ᵀθ* + R‖∇F(θ*)‖∞
    (`optimality_gap`, ≲ 1e-15·R²; checked in the tests).

    Constants (all over Θ and the support; Y = `label_bound` = ‖θ₀‖₁ + R/2 = R here):
      * |⟨a, θ⟩ − y| ≤ ‖a‖∞‖θ‖₁ + |y| ≤ R + Y, and ∇ℓ = (⟨a, θ⟩ − y)·a, so
        `lipschitz` = L = (R + Y)·√d bounds ‖∇ℓ‖₂ (the norm the protocols clip in) and
        `lipschitz_inf` = R + Y bounds ‖∇ℓ‖∞ (L w.r.t. ‖·‖₁, seed 003's L; = 2C²R of
        notes §2.6 with C = 1 and the ½);
      * the Hessian aaᵀ has ‖aaᵀ‖₂ = ‖a‖₂² ≤ d: `smoothness` β = d (w.r.t. ‖·‖₂; attained by
        the sign features); w.r.t. ‖·‖₁, ‖∇ℓ(θ) − ∇ℓ(θ')‖∞ = |⟨a, θ − θ'⟩|·‖a‖∞ ≤ ‖θ − θ'‖₁,
        so `smoothness_l1` = 1;
      * λ = 0: each loss has the rank-one Hessian aaᵀ (λ_min = 0 for d ≥ 2), and ℓ1-ball
        problems are treated as merely convex. F itself is strongly convex with
        λ_min(Σ) ≥ `population_strong_convexity_bound` (the least basis weight, ≥ 1/(12d));
        it is informational only;
      * D = 2R, the diameter of Θ in ‖·‖₁ and also in ‖·‖₂ (between ±R·e_j);
      * `data_norm_bound` = √(d + Y²) ≥ ‖(a, y)‖₂.

    No closed-form prox is offered (the loss is smooth; the envelope is not needed).

    Args:
      dim: d.
      radius: R, the ℓ1 radius of Θ.
    """

    dim: int
    radius: float
    name: ClassVar[str] = "l1_least_squares"
    tag: ClassVar[int] = 31  # seeds the distribution's generator together with d
    truth_norm: ClassVar[float] = 0.5  # ‖θ₀‖₁ / R

    @property
    def data_dim(self) -> int:
        """Rows of a user's data point: d features and the label."""
        return self.dim + 1

    @property
    def noise(self) -> float:
        """The label noise's magnitude: ξ = ±noise."""
        return NOISE * self.radius

    @property
    def label_bound(self) -> float:
        """Y ≥ |y| over the support: |⟨a, θ₀⟩| ≤ ‖θ₀‖₁ since ‖a‖∞ ≤ 1."""
        return self.truth_norm * self.radius + self.noise

    @property
    def lipschitz(self) -> float:
        return (self.radius + self.label_bound) * math.sqrt(self.dim)

    @property
    def lipschitz_inf(self) -> float:
        """A bound on ‖∇ℓ‖∞ over Θ and the support (the Lipschitz constant w.r.t. ‖·‖₁)."""
        return self.radius + self.label_bound

    @property
    def smoothness(self) -> float:
        return float(self.dim)

    @property
    def smoothness_l1(self) -> float:
        """β w.r.t. ‖·‖₁: ‖∇ℓ(θ) − ∇ℓ(θ')‖∞ ≤ ‖a‖∞²·‖θ − θ'‖₁."""
        return 1.0

    @property
    def strong_convexity(self) -> float:
        return 0.0

    @property
    def data_norm_bound(self) -> float:
        return math.sqrt(self.dim + self.label_bound**2)

    def constants(self) -> dict[str, float]:
        return {**super().constants(), "L_inf": self.lipschitz_inf, "beta_l1": self.smoothness_l1}

    @functools.cached_property
    def _distribution(self) -> tuple[np.ndarray, ...]:
        dim = self.dim
        rng = np.random.default_rng([self.tag, dim])
        signs = 2.0 * rng.integers(0, 2, size=(dim, SIGN_FEATURES)) - 1.0
        features = np.concatenate([np.eye(dim), signs], axis=1)
        basis_weights = rng.uniform(0.5, 1.5, dim)
        sign_weights = rng.uniform(0.5, 1.5, SIGN_FEATURES)
        marginal = np.concatenate([BASIS_MASS * basis_weights / basis_weights.sum(),
                                   (1.0 - BASIS_MASS) * sign_weights / sign_weights.sum()])
        curvature = float(marginal[:dim].min())  # Σ ⪰ Σ_j P(e_j)·e_je_jᵀ ⪰ this·I
        # Merge repeated feature vectors (likely for small d) so that the atoms are distinct.
        features, inverse = np.unique(features.T, axis=0, return_inverse=True)
        features = np.ascontiguousarray(features.T)
        marginal = np.bincount(inverse.ravel(), weights=marginal, minlength=features.shape[1])
        sparsity = min(dim, TRUTH_SPARSITY)
        truth = np.zeros(dim)
        coordinates = rng.choice(dim, size=sparsity, replace=False)
        magnitudes = rng.uniform(0.5, 1.5, sparsity)
        truth[coordinates] = (2.0 * rng.integers(0, 2, size=sparsity) - 1.0) * magnitudes
        truth *= self.truth_norm * self.radius / np.abs(truth).sum()
        clean = truth @ features
        labels = np.concatenate([clean + self.noise, clean - self.noise])
        support = np.concatenate([np.concatenate([features, features], axis=1), labels[None, :]], axis=0)
        weights = np.concatenate([marginal, marginal]) / 2.0
        weights /= weights.sum()
        atoms = support[:dim]
        second = (atoms * weights) @ atoms.T       # Σ = E[aaᵀ]
        second = 0.5 * (second + second.T)
        first = atoms @ (weights * labels)         # b = E[ya]
        constant = 0.5 * float(weights @ labels**2)  # c = ½E[y²]
        for array in (support, weights, truth, second, first, features, marginal):
            array.flags.writeable = False
        return support, weights, truth, second, first, constant, features, marginal, curvature

    @property
    def truth(self) -> np.ndarray:
        """θ₀, the model the labels come from, read-only."""
        return self._distribution[2]

    @property
    def second_moment(self) -> np.ndarray:
        """Σ = E[aaᵀ], shape (d, d), read-only."""
        return self._distribution[3]

    @property
    def first_moment(self) -> np.ndarray:
        """b = E[ya], shape (d,), read-only."""
        return self._distribution[4]

    @property
    def features(self) -> np.ndarray:
        """The distinct feature vectors, shape (d, K) with K ≤ d + 64 (repeats merged), read-only."""
        return self._distribution[6]

    @property
    def feature_weights(self) -> np.ndarray:
        """Their probabilities, shape (K,), read-only."""
        return self._distribution[7]

    @property
    def population_strong_convexity_bound(self) -> float:
        """A proven lower bound on λ_min(Σ) (Σ ⪰ its basis part); not the declared λ."""
        return self._distribution[8]

    @functools.cached_property
    def _solution(self) -> tuple[np.ndarray, float]:
        if self.truth_norm < 1.0:
            return self.truth, 0.0  # closed form (class docstring)
        theta, multiplier = l1_constrained_quadratic(self.second_moment, self.first_moment, self.radius)
        return theta, multiplier

    @functools.cached_property
    def optimum(self) -> np.ndarray:
        optimum = np.array(self._solution[0], dtype=np.float64)
        if not np.abs(optimum).sum() <= self.radius * (1.0 + 1e-12):  # proven; guard anyway
            raise AssertionError("the optimum left the ball")
        if self.optimality_gap(optimum) > 1e-12 * max(1.0, self.radius * self.lipschitz_inf):
            raise AssertionError("the optimum failed its Frank–Wolfe certificate")
        optimum.flags.writeable = False  # cached: nobody may change θ*
        return optimum

    @property
    def multiplier(self) -> float:
        """μ* ≥ 0, the ℓ1 constraint's multiplier at θ* (0 when θ* is interior)."""
        return self._solution[1]

    @functools.cached_property
    def _optimum_gradient(self) -> np.ndarray:
        """∇F(θ*): exactly 0 when θ* = θ₀ is interior; Σθ* − b otherwise."""
        if self.multiplier == 0.0:
            gradient = np.zeros(self.dim)
        else:
            gradient = self.population_gradient(self.optimum)
        gradient.flags.writeable = False
        return gradient

    def population_gradient(self, theta: np.ndarray) -> np.ndarray:
        """∇F(θ) = Σθ − b, exactly up to rounding."""
        return self.second_moment @ theta - self.first_moment

    def optimality_gap(self, theta: np.ndarray) -> float:
        """The Frank–Wolfe gap max_{‖θ'‖₁≤R} ∇F(θ)ᵀ(θ − θ') = ∇F(θ)ᵀθ + R‖∇F(θ)‖∞: for θ ∈ Θ
        it bounds F(θ) − min_Θ F from above (convexity), and it is 0 exactly at θ*."""
        gradient = self.population_gradient(theta)
        return float(gradient @ theta + self.radius * np.abs(gradient).max())

    def losses(self, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Per-user losses ½(⟨a_i, θ⟩ − y_i)², shape (count,)."""
        residual = theta @ data[: self.dim] - data[self.dim]
        return 0.5 * residual * residual

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Per-user gradients (⟨a_i, θ⟩ − y_i)·a_i, shape (d, count) (data has d + 1 rows)."""
        features = data[: self.dim]
        residual = theta @ features - data[self.dim]
        return np.multiply(features, residual[None, :], out=out)

    def project(self, theta: np.ndarray) -> np.ndarray:
        return l1_ball_projection(theta, self.radius)

    def population_loss(self, theta: np.ndarray) -> float:
        return float(0.5 * theta @ (self.second_moment @ theta) - self.first_moment @ theta
                     + self._distribution[5])

    def excess_loss(self, theta: np.ndarray) -> float:
        """F(θ) − F(θ*) = ½(θ − θ*)ᵀΣ(θ − θ*) + ∇F(θ*)ᵀ(θ − θ*), both terms ≥ 0 on Θ
        (the second is 0 when θ* is interior, and ≥ 0 by first-order optimality otherwise)."""
        gap = theta - self.optimum
        projections = gap @ self.features
        return float(0.5 * self.feature_weights @ (projections * projections) + self._optimum_gradient @ gap)


@dataclasses.dataclass(frozen=True)
class L1LeastSquaresActive(L1LeastSquares):
    """`L1LeastSquares` with the truth outside the ball, ‖θ₀‖₁ = 2R, so the constraint is
    active: same features and noise (labels from the larger θ₀; Y = 2.5R, hence
    L = 3.5R·√d, L_inf = 3.5R).

    Optimum: θ* = argmin_Θ F is not θ₀; it is computed once by the Lasso homotopy
    (`l1_constrained_quadratic`: finitely many exact linear solves, no iteration
    tolerance), so it is exact up to the rounding of those solves. Certificate, checked
    at construction and in the tests: ‖θ*‖₁ = R, μ* > 0, g = ∇F(θ*) has g_j = −μ*·sign(θ*_j)
    on the support and |g_j| ≤ μ* off it (−g in the normal cone of the ball), and the
    Frank–Wolfe gap gᵀθ* + R‖g‖∞ ≥ F(θ*) − min_Θ F is ≤ 1e-12·R·L_inf (≈ 1e-16 in
    practice) — far below any excess loss a run reports. `excess_loss` adds the linear
    term ∇F(θ*)ᵀ(θ − θ*) ≥ 0.

    Args:
      dim: d.
      radius: R, the ℓ1 radius of Θ.
    """

    name: ClassVar[str] = "l1_least_squares_active"
    truth_norm: ClassVar[float] = 2.0
