"""What the compiled rounds (pipeline.engine.fused_kernel) take of a problem: how a user's
gradient is made from its data point, and the released model's losses (the contract of
`Problem.compiled_problem`; this module loads no numba: it only describes).

A problem has a compiled twin when its gradients and losses are a few float operations per
user-coordinate that the kernel repeats in numpy's order: the quadratic and the Bernoulli bits
(θ − x), the absolute deviation and its elastic variant (sign(θ − x) + λθ), and the Moreau
envelope of either (β(θ − prox(θ)), pipeline.problems.smoothed). Anything else (logistic:
numpy's SIMD exp and log are not libm's; a plug-in) has none and keeps the Python path.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

# How the kernel makes a gradient g of a user's data point x at the query q (fused_kernel._gradients):
QUADRATIC = 0  # g = q − x (Quadratic.gradients, Bernoulli.gradients)
SIGN = 1       # g = sign(q − x) + λq (Absolute.gradients; Elastic's adds λq)
ENVELOPE = 2   # g = β(q − p), p = x + sign(c − x)·max(|c − x| − t, 0), c = q/den (MoreauSmoothed of either)


class CompiledProblem(NamedTuple):
    """A problem's constants as the kernels take them (one tuple argument, `problem`).

    Attributes:
      kind: QUADRATIC, SIGN or ENVELOPE.
      ridge: λ, Elastic's regularization (0 for the others): SIGN adds λq; the finite loss adds (λ/2)‖θ‖².
      beta, denominator, threshold: ENVELOPE's β, den and t, computed as the Python prox computes them.
      optimum: θ* (the excess ½‖θ − θ*‖² of the quadratic and of Bernoulli).
      half_spread_squared: their population loss minus their excess (Bernoulli's variance).
      support, weights: a finite problem's (d, K) points and their weights (K = 0 for the quadratic).
      optimum_losses: ℓ(θ*, x_k) of every support point (the excess's reference).
    """

    kind: int
    ridge: float
    beta: float
    denominator: float
    threshold: float
    optimum: np.ndarray
    half_spread_squared: float
    support: np.ndarray
    weights: np.ndarray
    optimum_losses: np.ndarray


def writeable(values: np.ndarray) -> np.ndarray:
    """A writeable C-ordered float64 copy: numba compiles a kernel anew for each combination of
    read-only and writeable arrays it is called with (a problem's cached constants are read-only)."""
    return np.array(values, np.float64, order="C")


def centred(problem: Any, constant: float) -> CompiledProblem:
    """A problem whose gradient is θ − x, excess ½‖θ − θ*‖² and population loss that plus `constant`."""
    return CompiledProblem(QUADRATIC, 0.0, 0.0, 1.0, 0.0, writeable(problem.optimum), float(constant),
                           np.empty((problem.dim, 0)), np.empty(0), np.empty(0))


def finite(problem: Any, kind: int, ridge: float = 0.0, beta: float = 0.0, denominator: float = 1.0,
           threshold: float = 0.0) -> CompiledProblem:
    """A finite-support problem's constants (SIGN, or ENVELOPE of it): its losses are FiniteBallProblem's."""
    optimum = writeable(problem.optimum)
    return CompiledProblem(kind, float(ridge), float(beta), float(denominator), float(threshold), optimum, 0.0,
                           writeable(problem.support), writeable(problem.weights),
                           writeable(problem.losses(optimum, problem.support)))
