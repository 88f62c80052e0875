"""The built-in problems' gradients, losses, projection and users in numpy, as their classes held
them before their compiled twins became their one definition (pipeline.problems.base.Twinned): the
tests' independent oracle, checked bit for bit in tests/test_problem_twins.py against the twins
run interpreted, compiled alone and through the problems' public methods. Each takes the problem
for its constants."""
from __future__ import annotations

import math

import numpy as np

from pipeline.numerics import column_norms, ordered_dot


def squared_norm(vector: np.ndarray) -> float:
    """‖v‖₂² as numpy's pairwise sum of the squares."""
    return float(np.add.reduce(vector * vector))


def ball_projection(theta: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto {‖θ‖₂ ≤ radius}."""
    norm = math.sqrt(squared_norm(theta))
    return theta if norm <= radius else theta * (radius / norm)


def from_normals(problem, directions: np.ndarray) -> np.ndarray:
    """The quadratic's users from standard normals (d, count), in place: x = θ* + spread·u/‖u‖."""
    norms = column_norms(directions)
    norms[norms == 0.0] = 1.0
    directions *= np.divide(problem.spread, norms, out=norms)
    directions += problem.optimum[:, None]
    return directions


def sample(problem, rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` users of a built-in problem that draws its own (d, count): the quadratic's from
    numpy's normals, Bernoulli's bits from its uniforms, a finite problem's support points by
    numpy's `choice` with their weights."""
    if hasattr(problem, "support"):
        return np.ascontiguousarray(problem.support[:, rng.choice(problem.weights.size, size=count, p=problem.weights)])
    if problem.name == "bernoulli":
        return (rng.random((problem.dim, count)) < problem.optimum[:, None]).astype(np.float64)
    return from_normals(problem, rng.standard_normal((problem.dim, count)))


def centred_gradients(problem, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The quadratic's and Bernoulli's ∇½‖θ − x‖² = θ − x."""
    return np.subtract(theta[:, None], data)


def sign_gradients(problem, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The absolute deviation's sign(θ − x), plus Elastic's λθ."""
    out = np.sign(np.subtract(theta[:, None], data))
    ridge = getattr(problem, "regularization", None)
    if ridge is not None:
        out += ridge * theta[:, None]
    return out


def prox(problem, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
    """The absolute deviation's prox toward each x, soft-thresholding: x + sign(c − x)·max(|c − x| − t, 0)
    with c = θ, t = s; Elastic's c = θ/(1 + λs), t = 1/(λ + 1/s)."""
    ridge = getattr(problem, "regularization", None)
    centre, threshold = (theta, step) if ridge is None else (theta / (1.0 + ridge * step), 1.0 / (ridge + 1.0 / step))
    gap = centre[:, None] - data
    return data + np.sign(gap) * np.maximum(np.abs(gap) - threshold, 0.0)


def envelope_gradients(problem, theta: np.ndarray, data: np.ndarray, beta: float) -> np.ndarray:
    """The Moreau envelope's β(θ − prox_{ℓ/β}(θ)) (seed 000, Lemma 4.6)."""
    return np.multiply(beta, theta[:, None] - prox(problem, theta, data, 1.0 / beta))


def gradients(problem, theta: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A built-in problem's gradients, by its registered name."""
    by_name = {"quadratic": centred_gradients, "bernoulli": centred_gradients,
               "absolute": sign_gradients, "elastic": sign_gradients}
    return by_name[problem.name](problem, theta, data)


def losses(problem, theta: np.ndarray) -> tuple[float, float]:
    """(excess, population) of θ: the quadratic's ½‖θ − θ*‖² and that plus ½·spread²; Bernoulli's
    plus ½Σμ(1 − μ); a finite problem's Σ_k w_k ℓ(θ, x_k), its excess taken term by term."""
    if problem.name in ("quadratic", "bernoulli"):
        gap = theta - problem.optimum
        excess = 0.5 * squared_norm(gap)
        constant = 0.5 * problem.spread**2 if problem.name == "quadratic" \
            else 0.5 * ordered_dot(problem.optimum, 1.0 - problem.optimum)
        return excess, excess + constant
    gaps = problem.losses(theta, problem.support) - problem.losses(problem.optimum, problem.support)
    return ordered_dot(problem.weights, gaps), ordered_dot(problem.weights, problem.losses(theta, problem.support))
