"""Every registered SCO problem against independent references: per-user losses written
out here, finite differences, the subgradient and curvature inequalities its declared
constants promise, Monte Carlo for the population loss, first-order optimality of θ*,
scipy for the prox, and Lemma 4.6's Moreau-envelope bounds."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize
from scipy.special import expit

from pipeline.engine.layout import stream
from pipeline.problems import (
    PROBLEMS,
    Absolute,
    Elastic,
    Logistic,
    Quadratic,
    build_problem,
)

SHAPES = [(1, 0.7), (5, 1.0), (12, 2.5)]  # (d, R)
# ℓ2-ball problems with unlabelled data; the ℓ1-ball least squares has its own tests.
BALL_PROBLEMS = ("quadratic", "logistic", "absolute", "elastic", "bernoulli")
CASES = [(name, dim, radius) for name in BALL_PROBLEMS for dim, radius in SHAPES]
SMOOTH = {"quadratic", "logistic", "bernoulli", "l1_least_squares", "l1_least_squares_active", "lb_convex",
          "lb_strongly_convex"}
EPS = np.finfo(float).eps


@pytest.fixture(params=CASES, ids=lambda case: f"{case[0]}-d{case[1]}-R{case[2]}")
def problem(request):
    name, dim, radius = request.param
    return build_problem(name, dim, radius)


def reference_losses(problem, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
    """ℓ(θ, x_i) per user, written independently of the package. θ is one point, shape
    (d,), or one point per user, shape (d, count)."""
    theta = theta[:, None] if theta.ndim == 1 else theta
    gap = theta - data
    if problem.name in ("quadratic", "bernoulli"):
        return 0.5 * np.einsum("ij,ij->j", gap, gap)
    if problem.name == "logistic":
        return np.logaddexp(0.0, -np.einsum("ij,ij->j", np.broadcast_to(theta, data.shape), data))
    if problem.name == "absolute":
        return np.abs(gap).sum(axis=0)
    if problem.name == "elastic":
        return np.abs(gap).sum(axis=0) + 0.5 * problem.regularization * (theta * theta).sum(axis=0)
    raise AssertionError(f"no reference loss for {problem.name}")


def in_ball(rng: np.random.Generator, problem, count: int) -> np.ndarray:
    """`count` points uniform in Θ, shape (count, d)."""
    directions = rng.standard_normal((count, problem.dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return directions * problem.radius * rng.uniform(0.0, 1.0, (count, 1)) ** (1.0 / problem.dim)


def on_sphere(rng: np.random.Generator, problem, count: int) -> np.ndarray:
    """`count` points on Θ's boundary, shape (count, d)."""
    directions = rng.standard_normal((count, problem.dim))
    return directions * (problem.radius / np.linalg.norm(directions, axis=1, keepdims=True))


def population_gradient(problem, theta: np.ndarray) -> np.ndarray:
    """∇F(θ): the exact finite sum where the distribution has finite support; for the
    quadratic, central differences of F, exact up to rounding since F is quadratic."""
    if hasattr(problem, "support"):
        return problem.gradients(theta, problem.support) @ problem.weights
    step = 1e-3
    eye = np.eye(problem.dim) * step
    return np.array([(problem.population_loss(theta + e) - problem.population_loss(theta - e)) / (2 * step)
                     for e in eye])


def one_sided_derivatives(problem, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right derivatives of F along each coordinate at θ, for Σ_j |θ_j − x_j| + (λ/2)‖θ‖²."""
    support, weights, lam = problem.support, problem.weights, problem.strong_convexity
    left_signs = np.where(support < theta[:, None], 1.0, -1.0)   # d/dt |t − x| from the left
    right_signs = np.where(support > theta[:, None], -1.0, 1.0)  # and from the right
    return left_signs @ weights + lam * theta, right_signs @ weights + lam * theta


def test_registry_and_constants():
    assert set(PROBLEMS) == {*BALL_PROBLEMS, "l1_least_squares", "l1_least_squares_active", "dataset",
                             "lb_convex", "lb_strongly_convex"}  # the hard instances: tests/test_hard_instances.py
    for name, cls in PROBLEMS.items():
        if cls.reads_rows:  # a dataset needs its table (tests/test_datasets.py)
            continue
        problem = build_problem(name, 4, 1.5)
        assert isinstance(problem, cls) and problem.name == name and problem.dim == 4
        assert problem.diameter == 3.0  # D is the diameter, not the radius (notes seed-000 T18)
        assert problem.lipschitz > 0 and problem.data_norm_bound > 0
        assert math.isinf(problem.smoothness) == (name not in SMOOTH)
        assert set(problem.constants()) >= {"L", "beta", "lambda", "D"}
    assert Logistic(4, 1.5).lipschitz == 1.0 and Logistic(4, 1.5).smoothness == 0.25
    assert Logistic(4, 1.5).strong_convexity == 0.0 and Absolute(4, 1.5).strong_convexity == 0.0
    assert Absolute(4, 1.5).lipschitz == 2.0
    assert Elastic(4, 1.5).lipschitz == 2.0 + 1.5 and Elastic(4, 1.5).strong_convexity == 1.0
    assert Elastic(4, 1.5, regularization=0.25).strong_convexity == 0.25
    with pytest.raises(ValueError):
        Elastic(4, 1.5, regularization=0.0)
    assert isinstance(build_problem("quadratic", 2, 1.0), Quadratic)


@pytest.mark.parametrize("dim", [1, 3, 10, 100])
def test_the_quadratics_users_are_its_formula_bit_for_bit(dim):
    """A quadratic's users are μ + (R/2)·z/‖z‖ for standard normals z (problems/quadratic.py); its
    in-place draw must give the bits of that formula with np.linalg.norm, coordinate for coordinate."""
    problem = Quadratic(dim, 1.5)
    normals = stream(dim, 0).standard_normal((dim, 5001))
    norms = np.linalg.norm(normals, axis=0)
    want = normals * (problem.spread / norms) + problem.optimum[:, None]
    assert problem.sample(stream(dim, 0), 5001).tobytes() == want.tobytes()


def test_sample_is_deterministic_shaped_and_bounded(problem):
    first = problem.sample(np.random.default_rng(7), 3000)
    again = problem.sample(np.random.default_rng(7), 3000)
    other = problem.sample(np.random.default_rng(8), 3000)
    assert first.shape == (problem.dim, 3000) and first.dtype == np.float64
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert np.linalg.norm(first, axis=0).max() <= problem.data_norm_bound * (1 + 1e-12)
    assert problem.sample(np.random.default_rng(7), 0).shape == (problem.dim, 0)
    if hasattr(problem, "support"):
        support, weights = problem.support, problem.weights
        assert np.linalg.norm(support, axis=0).max() <= problem.data_norm_bound * (1 + 1e-12)
        assert weights.min() > 0 and abs(weights.sum() - 1.0) < 1e-12
        count = 100_000
        draws = problem.sample(np.random.default_rng(9), count)
        probe = np.random.default_rng(0).standard_normal(problem.dim)
        keys = probe @ support
        order = np.argsort(keys)
        assert np.all(np.diff(keys[order]) > 0)  # distinct support points
        found = order[np.clip(np.searchsorted(keys[order], probe @ draws), 0, keys.size - 1)]
        assert np.array_equal(support[:, found], draws)  # every draw is a support point
        frequency = np.bincount(found, minlength=keys.size) / count
        assert np.all(np.abs(frequency - weights) <= 5 * np.sqrt(weights * (1 - weights) / count))


def test_losses_method_matches_reference(problem):
    rng = np.random.default_rng(1)
    data = problem.sample(rng, 50)
    for theta in in_ball(rng, problem, 5):
        if hasattr(problem, "losses"):
            assert np.allclose(problem.losses(theta, data), reference_losses(problem, theta, data),
                               rtol=1e-14, atol=1e-14)


def test_gradients_match_finite_differences_away_from_kinks(problem):
    rng = np.random.default_rng(2)
    data = problem.sample(rng, 40)
    step = 1e-5
    for theta in np.concatenate([in_ball(rng, problem, 4), on_sphere(rng, problem, 2)]):
        gradients = problem.gradients(theta, data)
        scale = 1.0 + np.abs(reference_losses(problem, theta, data)).max()
        # Truncation ≤ step²·max|ℓ'''|/6 (≤ step² here: 0 for the quadratic and the piecewise
        # ones away from kinks, ≤ ‖w‖³/10 for logistic) plus rounding of ℓ divided by the step.
        tolerance = step**2 + 8 * EPS * scale / step
        for j in range(problem.dim):
            shift = np.zeros(problem.dim)
            shift[j] = step
            central = (reference_losses(problem, theta + shift, data)
                       - reference_losses(problem, theta - shift, data)) / (2 * step)
            smooth_here = (np.ones(data.shape[1], bool) if problem.name in SMOOTH
                           else np.abs(theta[j] - data[j]) > 2 * step)
            assert smooth_here.mean() > 0.9
            assert np.abs(central - gradients[j])[smooth_here].max() <= tolerance


def test_gradients_out_parameter(problem):
    rng = np.random.default_rng(3)
    data = problem.sample(rng, 17)
    theta = in_ball(rng, problem, 1)[0]
    out = np.empty_like(data)
    assert problem.gradients(theta, data, out=out) is out
    assert np.array_equal(out, problem.gradients(theta, data))


def test_gradients_are_subgradients_with_declared_curvature(problem):
    rng = np.random.default_rng(4)
    data = problem.sample(rng, 60)
    thetas = np.concatenate([in_ball(rng, problem, 30), on_sphere(rng, problem, 10)])
    lam, beta = problem.strong_convexity, problem.smoothness
    for theta, other in zip(thetas, rng.permutation(thetas)):
        here = reference_losses(problem, theta, data)
        there = reference_losses(problem, other, data)
        linear = here + (other - theta) @ problem.gradients(theta, data)
        gap = float((other - theta) @ (other - theta))
        tolerance = 1e-12 * (1.0 + np.abs(here).max() + np.abs(there).max())
        assert np.all(there >= linear + 0.5 * lam * gap - tolerance)  # λ-strongly convex; λ = 0: subgradient
        if math.isfinite(beta):
            assert np.all(there <= linear + 0.5 * beta * gap + tolerance)  # β-smooth
    # Short moves along each user's own point from near θ = 0, where logistic curvature peaks.
    theta = 1e-3 * thetas[0]
    moves = 0.05 * problem.radius * data / np.maximum(np.linalg.norm(data, axis=0), 1e-300)
    here = reference_losses(problem, theta, data)
    there = reference_losses(problem, theta[:, None] + moves, data)
    linear = here + np.einsum("ij,ij->j", moves, problem.gradients(theta, data))
    gaps = np.einsum("ij,ij->j", moves, moves)
    tolerance = 1e-12 * (1.0 + np.abs(here).max() + np.abs(there).max())
    assert np.all(there >= linear + 0.5 * lam * gaps - tolerance)
    if math.isfinite(beta):
        assert np.all(there <= linear + 0.5 * beta * gaps + tolerance)


def test_gradient_norm_at_most_lipschitz(problem):
    rng = np.random.default_rng(5)
    data = problem.sample(rng, 2000)
    if hasattr(problem, "support"):
        data = np.concatenate([data, problem.support], axis=1)
    for theta in np.concatenate([in_ball(rng, problem, 20), on_sphere(rng, problem, 20)]):
        norms = np.linalg.norm(problem.gradients(theta, data), axis=0)
        assert norms.max() <= problem.lipschitz * (1 + 1e-12)


def test_population_loss_matches_sample_mean(problem):
    rng = np.random.default_rng(6)
    count = 200_000
    data = problem.sample(rng, count)
    for theta in np.concatenate([in_ball(rng, problem, 3), [problem.optimum]]):
        losses = reference_losses(problem, theta, data)
        standard_error = losses.std(ddof=1) / math.sqrt(count)
        assert abs(losses.mean() - problem.population_loss(theta)) <= 5 * standard_error + 1e-12
        if hasattr(problem, "support"):  # the finite sum, exactly
            exact = float(problem.weights @ reference_losses(problem, theta, problem.support))
            assert abs(problem.population_loss(theta) - exact) <= 1e-13 * (1 + abs(exact))


def test_optimum_is_first_order_optimal_and_minimal(problem):
    optimum = problem.optimum
    assert optimum.shape == (problem.dim,) and not optimum.flags.writeable
    assert np.linalg.norm(optimum) < problem.radius  # interior: the unconstrained optimum is θ*
    assert np.array_equal(problem.project(optimum), optimum)
    if problem.name in SMOOTH:
        residual = np.linalg.norm(population_gradient(problem, optimum))
        assert residual <= 1e-10
        # By convexity F(θ) ≥ F(θ*) − D·‖∇F(θ*)‖ on Θ: F(θ*) is min_Θ F to this precision.
        assert problem.diameter * residual <= (1e-13 if hasattr(problem, "support") else 1e-10)
    else:
        left, right = one_sided_derivatives(problem, optimum)
        assert left.max() <= 1e-12 and right.min() >= -1e-12  # 0 ∈ ∂F_j(θ*_j) for every j
    rng = np.random.default_rng(7)
    near = optimum + 1e-4 * problem.radius * rng.standard_normal((500, problem.dim))
    points = np.concatenate([in_ball(rng, problem, 500), near, [optimum]])
    excess = np.array([problem.excess_loss(theta) for theta in points])
    assert excess.min() >= -1e-15
    assert excess[-1] == 0.0 or abs(excess[-1]) <= 1e-15
    differences = np.array([problem.population_loss(theta) - problem.population_loss(optimum) for theta in points])
    assert np.allclose(excess, differences, rtol=0, atol=1e-12 * (1 + problem.population_loss(optimum)))


def _numerical_prox(problem, theta: np.ndarray, point: np.ndarray, step: float) -> np.ndarray:
    """argmin_{θ'} ℓ(θ', x) + ‖θ' − θ‖²/(2·step) by scipy, for one user x."""
    if problem.name in ("absolute", "elastic"):  # separable: one bounded scalar problem per coordinate
        lam = problem.strong_convexity
        result = np.empty(problem.dim)
        for j in range(problem.dim):
            def objective(t, j=j):
                return abs(t - point[j]) + 0.5 * lam * t * t + (t - theta[j]) ** 2 / (2 * step)
            low = min(0.0, theta[j], point[j]) - 1.0
            high = max(0.0, theta[j], point[j]) + 1.0
            result[j] = optimize.minimize_scalar(objective, bounds=(low, high), method="bounded",
                                                 options={"xatol": 1e-12, "maxiter": 2000}).x
        return result

    def objective(candidate):
        value = float(reference_losses(problem, candidate, point[:, None])[0])
        return value + float((candidate - theta) @ (candidate - theta)) / (2 * step)

    def gradient(candidate):
        if problem.name in ("quadratic", "bernoulli"):
            loss_gradient = candidate - point
        else:
            loss_gradient = -point * expit(-float(candidate @ point))
        return loss_gradient + (candidate - theta) / step

    return optimize.minimize(objective, theta, jac=gradient, method="BFGS", options={"gtol": 1e-13}).x


def test_prox_matches_numerical_solver(problem):
    rng = np.random.default_rng(8)
    data = problem.sample(rng, 6)
    for step in (0.03, 0.7, 8.0):
        theta = in_ball(rng, problem, 1)[0]
        proxes = problem.prox(theta, data, step)
        assert proxes.shape == data.shape
        for i in range(data.shape[1]):
            numerical = _numerical_prox(problem, theta, data[:, i], step)
            assert np.abs(proxes[:, i] - numerical).max() <= 1e-6


def test_prox_is_optimal_to_rounding(problem):
    """The closed forms (and logistic's Newton) satisfy 0 ∈ ∂ℓ(p) + (p − θ)/s to ~1e-12."""
    rng = np.random.default_rng(9)
    data = problem.sample(rng, 500)
    for step in (1e-3, 0.1, 1.0, 30.0, 1e4):
        theta = in_ball(rng, problem, 1)[0]
        proxes = problem.prox(theta, data, step)
        pull = (theta[:, None] - proxes) / step  # must lie in ∂ℓ(p)
        if problem.name in ("quadratic", "bernoulli"):
            error = np.abs(pull - (proxes - data))
        elif problem.name == "logistic":
            error = np.abs(pull + data * expit(-np.einsum("ij,ij->j", proxes, data)))
        else:  # pull − λp ∈ ∂‖p − x‖₁: sign(p_j − x_j) off the kink, [−1, 1] on it
            residual = pull - problem.strong_convexity * proxes
            on_kink = proxes == data
            error = np.where(on_kink, np.maximum(np.abs(residual) - 1.0, 0.0),
                             np.abs(residual - np.sign(proxes - data)))
        assert error.max() <= 1e-12 * (1.0 + np.abs(pull).max())


@pytest.mark.parametrize("beta", [0.05, 0.5, 5.0, 50.0])
def test_moreau_envelope_bounds(problem, beta):
    """Lemma 4.6 with f_β(θ) = ℓ(p) + (β/2)‖θ − p‖², p = prox_{ℓ/β}(θ): f_β ≤ f ≤ f_β + L²/(2β),
    ‖∇f_β‖ = β‖θ − p‖ ≤ 2L (in fact ≤ L), and f_β is the minimum (no perturbation of p does better)."""
    rng = np.random.default_rng(10)
    data = problem.sample(rng, 200)
    lipschitz = problem.lipschitz
    for theta in np.concatenate([in_ball(rng, problem, 8), on_sphere(rng, problem, 4)]):
        proxes = problem.prox(theta, data, 1.0 / beta)
        offsets = theta[:, None] - proxes
        envelope = reference_losses(problem, proxes, data) + 0.5 * beta * np.einsum("ij,ij->j", offsets, offsets)
        loss = reference_losses(problem, theta, data)
        tolerance = 1e-12 * (1.0 + np.abs(loss).max())
        assert np.all(envelope <= loss + tolerance)
        assert np.all(loss <= envelope + lipschitz**2 / (2 * beta) + tolerance)
        envelope_gradients = np.linalg.norm(beta * offsets, axis=0)
        assert envelope_gradients.max() <= 2 * lipschitz * (1 + 1e-12)
        # Stronger, for these unconstrained proxes: ∇f_β(θ) ∈ ∂ℓ(p) and each problem's
        # closed form keeps it within L on Θ (what MoreauSmoothed's docstring relies on).
        assert envelope_gradients.max() <= lipschitz * (1 + 1e-12)
        for scale in (1e-3, 1e-1):
            moved = proxes + scale * problem.radius * rng.standard_normal(proxes.shape)
            moved_offsets = theta[:, None] - moved
            value = reference_losses(problem, moved, data) + 0.5 * beta * np.einsum(
                "ij,ij->j", moved_offsets, moved_offsets)
            assert np.all(envelope <= value + tolerance)

