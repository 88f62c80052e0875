"""Least squares over the ℓ1 ball (pipeline/problems/l1_least_squares.py) against
independent references: the loss written out here, finite differences, the declared
gradient bounds, a bisection projection and the projection's KKT conditions, the model's
own moment identities, exact weighted sums and Monte Carlo for the population loss, the
KKT conditions of θ* and an accelerated projected-gradient solver written here."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.problems.l1_least_squares import (
    L1LeastSquares,
    L1LeastSquaresActive,
    l1_ball_projection,
    l1_constrained_quadratic,
)

SHAPES = [(1, 0.7), (5, 1.0), (12, 2.5), (40, 1.3)]  # (d, R)
CASES = [(cls, dim, radius) for cls in (L1LeastSquares, L1LeastSquaresActive) for dim, radius in SHAPES]
EPS = np.finfo(float).eps


@pytest.fixture(params=CASES, ids=lambda case: f"{case[0].name}-d{case[1]}-R{case[2]}")
def problem(request):
    cls, dim, radius = request.param
    return cls(dim=dim, radius=radius)


def reference_losses(problem, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
    """½(⟨a_i, θ⟩ − y_i)² per user, with a_i = the first d rows and y_i the last."""
    features, labels = data[:-1], data[-1]
    assert features.shape[0] == problem.dim
    return 0.5 * (theta @ features - labels) ** 2


def reference_gradient(problem, theta: np.ndarray) -> np.ndarray:
    """∇F(θ) = E[(⟨a, θ⟩ − y)·a] as the weighted sum over the support, written out here."""
    features, labels = problem.support[:-1], problem.support[-1]
    return features @ (problem.weights * (theta @ features - labels))


def in_l1_ball(rng: np.random.Generator, dim: int, radius: float, count: int) -> np.ndarray:
    """`count` points uniform in {‖θ‖₁ ≤ R} (signed Dirichlet(1) directions, radius ∝ U^{1/d}),
    shape (count, d)."""
    spikes = rng.exponential(size=(count, dim)) * rng.choice([-1.0, 1.0], size=(count, dim))
    directions = spikes / np.abs(spikes).sum(axis=1, keepdims=True)
    return directions * radius * rng.uniform(0.0, 1.0, (count, 1)) ** (1.0 / dim)


def on_l1_sphere(rng: np.random.Generator, dim: int, radius: float, count: int) -> np.ndarray:
    """`count` points with ‖θ‖₁ = R (dense ones, and sparse ones with 1–2 nonzeros)."""
    spikes = rng.exponential(size=(count, dim)) * rng.choice([-1.0, 1.0], size=(count, dim))
    sparse = rng.uniform(size=(count, dim)) < 2.0 / dim
    spikes[: count // 2] *= sparse[: count // 2]
    spikes[np.abs(spikes).sum(axis=1) == 0.0, 0] = 1.0
    return spikes * (radius / np.abs(spikes).sum(axis=1, keepdims=True))


def vertices(dim: int, radius: float) -> np.ndarray:
    """The 2d vertices ±R·e_j, shape (2d, d)."""
    return np.concatenate([radius * np.eye(dim), -radius * np.eye(dim)])


def bisection_projection(point: np.ndarray, radius: float) -> np.ndarray:
    """Projection onto the ℓ1 ball by bisection on the soft-threshold level τ: the
    projection of a point outside is sign(v)·max(|v| − τ, 0) with Σ max(|v_j| − τ, 0) = R,
    a continuous decreasing function of τ on [0, max|v|]."""
    magnitudes = np.abs(point)
    if magnitudes.sum() <= radius:
        return point.copy()
    low, high = 0.0, float(magnitudes.max())
    for _ in range(200):
        middle = 0.5 * (low + high)
        if middle <= low or middle >= high:
            break
        if np.maximum(magnitudes - middle, 0.0).sum() > radius:
            low = middle
        else:
            high = middle
    return np.sign(point) * np.maximum(magnitudes - 0.5 * (low + high), 0.0)


def accelerated_projected_gradient(second: np.ndarray, first: np.ndarray, radius: float,
                                   iterations: int = 800) -> np.ndarray:
    """argmin_{‖θ‖₁≤R} ½θᵀΣθ − bᵀθ by FISTA with gradient-based adaptive restarts
    (O'Donoghue and Candès 2015) and the bisection projection. The condition numbers
    here are ≤ ~75, so a few hundred steps reach the fixed point to rounding (checked:
    within 2e-15 of the answers)."""
    step = 1.0 / np.linalg.eigvalsh(second)[-1]
    theta = np.zeros(first.size)
    momentum_point, speed = theta.copy(), 1.0
    for _ in range(iterations):
        new = bisection_projection(momentum_point - step * (second @ momentum_point - first), radius)
        if (momentum_point - new) @ (new - theta) > 0.0:  # momentum points uphill: restart
            speed = 1.0
        new_speed = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * speed * speed))
        momentum_point = new + ((speed - 1.0) / new_speed) * (new - theta)
        theta, speed = new, new_speed
    return theta


def problem_moments(problem) -> tuple[np.ndarray, np.ndarray]:
    """Σ = E[aaᵀ] and b = E[ya] as weighted sums over the support, written out here."""
    features, labels, weights = problem.support[:-1], problem.support[-1], problem.weights
    return (features * weights) @ features.T, features @ (weights * labels)


def test_constants_and_shapes():
    for dim, radius in SHAPES:
        plain, active = L1LeastSquares(dim, radius), L1LeastSquaresActive(dim=dim, radius=radius)
        for problem, truth_norm in ((plain, 0.5), (active, 2.0)):
            label_bound = truth_norm * radius + radius / 2.0
            assert problem.dim == dim and problem.data_dim == dim + 1
            assert problem.diameter == 2.0 * radius  # ℓ1 diameter of the radius-R ball (seed 003 T1)
            assert problem.label_bound == pytest.approx(label_bound, rel=1e-15)
            assert problem.lipschitz == pytest.approx((radius + label_bound) * math.sqrt(dim), rel=1e-15)
            assert problem.lipschitz_inf == pytest.approx(radius + label_bound, rel=1e-15)
            assert problem.smoothness == dim and problem.smoothness_l1 == 1.0
            assert problem.strong_convexity == 0.0
            assert problem.data_norm_bound == pytest.approx(math.sqrt(dim + label_bound**2), rel=1e-15)
            constants = problem.constants()
            assert constants["L"] == problem.lipschitz and constants["L_inf"] == problem.lipschitz_inf
            assert constants["D"] == 2.0 * radius and constants["beta"] == dim and constants["lambda"] == 0.0
            assert constants["beta_l1"] == 1.0
            assert abs(np.abs(problem.truth).sum() - truth_norm * radius) <= 1e-14 * radius
            assert np.count_nonzero(problem.truth) == min(dim, 5)
    assert L1LeastSquares.name == "l1_least_squares" and L1LeastSquaresActive.name == "l1_least_squares_active"


def test_support_is_the_documented_model(problem):
    """Features in {−1, 0, 1}^d with ‖a‖∞ = 1 (basis vectors and sign vectors); each
    feature carries the labels ⟨a, θ₀⟩ ± R/2 with equal weights (noise independent of a,
    mean 0); weights positive and summing to 1; atoms distinct; Σ ⪰ bound·I."""
    support, weights, dim = problem.support, problem.weights, problem.dim
    features, labels = support[:-1], support[-1]
    assert support.shape == (dim + 1, weights.size) and not support.flags.writeable
    assert np.all(np.isin(features, (-1.0, 0.0, 1.0))) and np.all(np.abs(features).max(axis=0) == 1.0)
    nonzeros = np.count_nonzero(features, axis=0)
    assert np.all((nonzeros == 1) | (nonzeros == dim))
    for j in range(dim):  # every basis vector is a feature
        assert np.any(np.all(features == np.eye(dim)[:, [j]], axis=0))
    assert weights.min() > 0 and abs(weights.sum() - 1.0) <= 1e-14
    assert np.unique(support.T, axis=0).shape[0] == weights.size  # distinct atoms
    half = weights.size // 2
    assert np.array_equal(features[:, :half], features[:, half:])
    assert np.allclose(weights[:half], weights[half:], rtol=1e-15, atol=0)
    clean = problem.truth @ features[:, :half]
    assert np.allclose(labels[:half], clean + problem.radius / 2, rtol=0, atol=1e-15 * problem.radius)
    assert np.allclose(labels[half:], clean - problem.radius / 2, rtol=0, atol=1e-15 * problem.radius)
    assert np.abs(labels).max() <= problem.label_bound * (1 + 1e-15)
    assert np.linalg.norm(support, axis=0).max() <= problem.data_norm_bound * (1 + 1e-15)
    second = (features * weights) @ features.T
    assert np.linalg.eigvalsh(second)[0] >= problem.population_strong_convexity_bound * (1 - 1e-12) > 0
    assert problem.population_strong_convexity_bound >= 1.0 / (12.0 * dim) * (1 - 1e-12)


def test_sample_is_deterministic_and_follows_the_weights(problem):
    first = problem.sample(np.random.default_rng(7), 3000)
    again = problem.sample(np.random.default_rng(7), 3000)
    other = problem.sample(np.random.default_rng(8), 3000)
    assert first.shape == (problem.dim + 1, 3000) and first.dtype == np.float64
    assert first.flags.c_contiguous
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert problem.sample(np.random.default_rng(7), 0).shape == (problem.dim + 1, 0)
    support, weights = problem.support, problem.weights
    count = 100_000
    draws = problem.sample(np.random.default_rng(9), count)
    probe = np.random.default_rng(0).standard_normal(problem.dim + 1)
    keys = probe @ support
    order = np.argsort(keys)
    sorted_keys = keys[order]
    assert np.all(np.diff(sorted_keys) > 1e-9)  # distinct atoms, far apart compared to rounding
    draw_keys = probe @ draws
    above = np.clip(np.searchsorted(sorted_keys, draw_keys), 1, keys.size - 1)
    nearer_below = np.abs(draw_keys - sorted_keys[above - 1]) <= np.abs(draw_keys - sorted_keys[above])
    found = order[np.where(nearer_below, above - 1, above)]
    assert np.array_equal(support[:, found], draws)  # every draw is an atom
    frequency = np.bincount(found, minlength=keys.size) / count
    assert np.all(np.abs(frequency - weights) <= 5 * np.sqrt(weights * (1 - weights) / count))
    # Chi-square over all atoms: mean K − 1, sd √(2(K − 1)); 5 sd.
    expected = count * weights
    chi_square = float(((np.bincount(found, minlength=keys.size) - expected) ** 2 / expected).sum())
    freedom = keys.size - 1
    assert chi_square <= freedom + 5 * math.sqrt(2 * freedom)


def test_gradients_match_finite_differences_and_out(problem):
    rng = np.random.default_rng(2)
    data = problem.sample(rng, 40)
    step = 1e-3  # the loss is quadratic: central differences have no truncation error
    points = np.concatenate([in_l1_ball(rng, problem.dim, problem.radius, 4),
                             on_l1_sphere(rng, problem.dim, problem.radius, 2)])
    for theta in points:
        gradients = problem.gradients(theta, data)
        assert gradients.shape == (problem.dim, 40)
        scale = 1.0 + reference_losses(problem, theta, data).max()
        for j in range(problem.dim):
            shift = np.zeros(problem.dim)
            shift[j] = step
            central = (reference_losses(problem, theta + shift, data)
                       - reference_losses(problem, theta - shift, data)) / (2 * step)
            assert np.abs(central - gradients[j]).max() <= 16 * EPS * scale / step
        assert np.allclose(problem.losses(theta, data), reference_losses(problem, theta, data),
                           rtol=1e-15, atol=0)
    out = np.empty((problem.dim, 40))
    theta = points[0]
    assert problem.gradients(theta, data, out=out) is out
    assert np.array_equal(out, problem.gradients(theta, data))
    # The declared smoothness: ℓ(θ') ≤ ℓ(θ) + ⟨∇ℓ(θ), θ' − θ⟩ + (β/2)‖θ' − θ‖₂², and convexity.
    for theta, other in zip(points, points[::-1], strict=True):
        here, there = reference_losses(problem, theta, data), reference_losses(problem, other, data)
        linear = here + (other - theta) @ problem.gradients(theta, data)
        gap = float((other - theta) @ (other - theta))
        tolerance = 1e-12 * (1.0 + here.max() + there.max())
        assert np.all(there >= linear - tolerance)
        assert np.all(there <= linear + 0.5 * problem.smoothness * gap + tolerance)
        ell1 = float(np.abs(other - theta).sum())
        change = np.abs(problem.gradients(other, data) - problem.gradients(theta, data)).max(axis=0)
        assert np.all(change <= problem.smoothness_l1 * ell1 * (1 + 1e-12) + 1e-15)


def test_gradient_norms_within_declared_bounds(problem):
    rng = np.random.default_rng(5)
    data = np.concatenate([problem.sample(rng, 2000), problem.support], axis=1)
    points = np.concatenate([in_l1_ball(rng, problem.dim, problem.radius, 20),
                             on_l1_sphere(rng, problem.dim, problem.radius, 20),
                             vertices(problem.dim, problem.radius)])
    largest_two, largest_inf = 0.0, 0.0
    for theta in points:
        gradients = problem.gradients(theta, data)
        largest_two = max(largest_two, float(np.linalg.norm(gradients, axis=0).max()))
        largest_inf = max(largest_inf, float(np.abs(gradients).max()))
    assert largest_two <= problem.lipschitz * (1 + 1e-12)
    assert largest_inf <= problem.lipschitz_inf * (1 + 1e-12)
    # Not vacuous: at the vertices the ℓ∞ bound is reached to within a factor 2.
    assert largest_inf >= 0.5 * problem.lipschitz_inf


@pytest.mark.parametrize("dim", [1, 2, 7, 50])
def test_projection_matches_bisection_and_kkt(dim):
    rng = np.random.default_rng(10 + dim)
    radius = 1.7
    points = np.concatenate([
        rng.standard_normal((40, dim)) * rng.choice([0.05, 0.5, 3.0, 30.0], size=(40, 1)),
        in_l1_ball(rng, dim, radius, 10),
        on_l1_sphere(rng, dim, radius, 5),
        np.full((1, dim), 5.0), np.full((1, dim), -radius / dim),  # ties; a boundary point
        np.zeros((1, dim)),
    ])
    for point in points:
        projected = l1_ball_projection(point, radius)
        assert projected.shape == (dim,)
        if np.abs(point).sum() <= radius:
            assert np.array_equal(projected, point)  # identity inside the ball
            continue
        assert np.abs(np.abs(projected).sum() - radius) <= 8 * dim * EPS * radius
        assert np.abs(projected - bisection_projection(point, radius)).max() <= 1e-12 * (1 + np.abs(point).max())
        # KKT: v − π(v) = τ·s with τ ≥ 0, s ∈ ∂‖π(v)‖₁.
        residual = point - projected
        nonzero = projected != 0.0
        level = float(np.abs(residual[nonzero]).max())
        scale = 1e-12 * (1 + np.abs(point).max())
        assert np.all(np.abs(residual[nonzero] - level * np.sign(projected[nonzero])) <= scale)
        assert np.all(np.abs(point[~nonzero]) <= level + scale)
        # Nearest among feasible points.
        distance = np.linalg.norm(point - projected)
        others = in_l1_ball(rng, dim, radius, 200)
        assert np.all(np.linalg.norm(others - point, axis=1) >= distance * (1 - 1e-12))


def test_problem_projection_is_onto_its_ball(problem):
    rng = np.random.default_rng(11)
    for point in rng.standard_normal((20, problem.dim)) * 3 * problem.radius:
        assert np.allclose(problem.project(point), bisection_projection(point, problem.radius),
                           rtol=0, atol=1e-12 * (1 + np.abs(point).max()))


def test_moments_match_the_model(problem):
    """b = E[ya] = Σθ₀ and c = ½E[y²] = ½(θ₀ᵀΣθ₀ + (R/2)²), since the noise is independent
    of a with mean 0 and variance (R/2)²."""
    features, weights = problem.support[:-1], problem.weights
    second = (features * weights) @ features.T
    assert np.allclose(problem.second_moment, second, rtol=0, atol=1e-15)
    truth = problem.truth
    assert np.allclose(problem.first_moment, second @ truth, rtol=0, atol=1e-14 * problem.radius)
    expected_constant = 0.5 * (truth @ second @ truth + (problem.radius / 2) ** 2)
    assert problem.population_loss(np.zeros(problem.dim)) == pytest.approx(expected_constant, rel=1e-13)


def test_population_loss_is_the_exact_sum_and_the_sample_mean(problem):
    rng = np.random.default_rng(6)
    count = 200_000
    data = problem.sample(rng, count)
    points = np.concatenate([in_l1_ball(rng, problem.dim, problem.radius, 3),
                             on_l1_sphere(rng, problem.dim, problem.radius, 2),
                             [problem.optimum, problem.truth]])
    for theta in points:
        atoms = reference_losses(problem, theta, problem.support)
        exact = float(problem.weights @ atoms)
        assert abs(problem.population_loss(theta) - exact) <= 1e-13 * (1 + exact)
        variance = float(problem.weights @ (atoms - exact) ** 2)  # exact per-sample variance
        losses = reference_losses(problem, theta, data)
        assert abs(losses.mean() - problem.population_loss(theta)) <= 5 * math.sqrt(variance / count) + 1e-13


def test_optimum_certificate(problem):
    optimum, radius = problem.optimum, problem.radius
    assert optimum.shape == (problem.dim,) and not optimum.flags.writeable
    gradient = reference_gradient(problem, optimum)
    scale = 1e-13 * (1 + problem.lipschitz_inf)
    if isinstance(problem, L1LeastSquaresActive):
        assert abs(np.abs(optimum).sum() - radius) <= 1e-14 * radius * problem.dim
        multiplier = float(np.abs(gradient).max())
        assert multiplier > 0.01 and multiplier == pytest.approx(problem.multiplier, rel=1e-10)
        on = optimum != 0.0
        # −∇F(θ*) ∈ N_Θ(θ*) = {μ·s : μ ≥ 0, s ∈ ∂‖θ*‖₁}.
        assert np.all(np.abs(gradient[on] + multiplier * np.sign(optimum[on])) <= scale)
        assert np.all(np.abs(gradient[~on]) <= multiplier + scale)
        assert not np.allclose(optimum, problem.truth)
    else:
        assert np.array_equal(optimum, problem.truth)  # closed form θ* = θ₀
        assert np.abs(optimum).sum() < radius
        assert np.abs(gradient).max() <= scale  # ∇F(θ*) = 0 to rounding
        assert problem.multiplier == 0.0
    # Frank–Wolfe gap ∇F(θ*)ᵀθ* + R‖∇F(θ*)‖∞ ≥ F(θ*) − min_Θ F, written out here.
    gap = float(gradient @ optimum + radius * np.abs(gradient).max())
    assert -1e-14 <= gap <= 1e-14 * max(1.0, radius * problem.lipschitz_inf)
    assert abs(problem.optimality_gap(optimum)) <= 1e-14 * max(1.0, radius * problem.lipschitz_inf)
    # An independent solver agrees.
    solver = accelerated_projected_gradient(*problem_moments(problem), radius)
    assert np.abs(solver - optimum).max() <= 1e-10 * radius


def test_excess_loss(problem):
    optimum = problem.optimum
    assert problem.excess_loss(optimum) == 0.0
    rng = np.random.default_rng(7)
    near = np.array([problem.project(optimum + 1e-4 * problem.radius * rng.standard_normal(problem.dim))
                     for _ in range(200)])
    points = np.concatenate([in_l1_ball(rng, problem.dim, problem.radius, 300),
                             on_l1_sphere(rng, problem.dim, problem.radius, 100),
                             vertices(problem.dim, problem.radius), near])
    excess = np.array([problem.excess_loss(theta) for theta in points])
    assert excess.min() >= -1e-15 * problem.radius**2
    optimum_value = float(problem.weights @ reference_losses(problem, optimum, problem.support))
    for theta, value in zip(points[::10], excess[::10], strict=True):
        exact = float(problem.weights @ reference_losses(problem, theta, problem.support)) - optimum_value
        assert abs(value - exact) <= 1e-12 * (1 + optimum_value)
        assert abs(value - (problem.population_loss(theta) - problem.population_loss(optimum))) \
            <= 1e-12 * (1 + optimum_value)
    # Every point's excess is at most its Frank–Wolfe gap (convexity), and positive off θ*.
    for theta, value in zip(points[::7], excess[::7], strict=True):
        assert value <= problem.optimality_gap(theta) + 1e-13
        assert value > 0.0 or np.array_equal(theta, optimum)


@pytest.mark.parametrize("dim", [1, 3, 8, 20])
def test_homotopy_solver_on_random_quadratics(dim):
    """The ℓ1-constrained QP solver behind the active variant, on random correlated
    Σ and b over radii from tiny (one active coordinate) to past the unconstrained
    optimum: KKT conditions, and agreement with FISTA."""
    rng = np.random.default_rng(100 + dim)
    for _ in range(3):
        # Correlated rows, so that the Lasso path drops coordinates (it does for d = 8 and 20).
        factor = rng.standard_normal((dim, 2 * dim)) + 0.7 * rng.standard_normal((1, 2 * dim))
        second = factor @ factor.T / (2 * dim) + 0.1 * np.eye(dim)  # condition numbers ≤ ~75
        first = rng.standard_normal(dim)
        unconstrained = np.linalg.solve(second, first)
        for fraction in (0.01, 0.2, 0.5, 0.9, 1.5):
            radius = fraction * float(np.abs(unconstrained).sum())
            theta, multiplier = l1_constrained_quadratic(second, first, radius)
            gradient = second @ theta - first
            scale = 1e-12 * (1 + np.abs(first).max())
            if fraction >= 1:
                assert multiplier == 0.0 and np.abs(gradient).max() <= scale
            else:
                assert abs(np.abs(theta).sum() - radius) <= 1e-13 * (1 + radius)
                on = theta != 0.0
                assert multiplier == pytest.approx(np.abs(gradient).max(), rel=1e-9)
                assert np.all(np.abs(gradient[on] + multiplier * np.sign(theta[on])) <= scale)
                assert np.all(np.abs(gradient[~on]) <= multiplier + scale)
            reference = accelerated_projected_gradient(second, first, radius, iterations=400)
            assert np.abs(reference - theta).max() <= 1e-10 * (1 + np.abs(theta).max())
