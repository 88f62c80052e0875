"""What the compiled rounds (pipeline.engine.fused_kernel) need of a problem: how a user's
gradient is made from its data point, and the released model's losses.

A problem has a twin when its gradients and losses are a few float operations per
user-coordinate that the kernel can repeat in numpy's order: exactly the quadratic and the
Bernoulli bits (θ − x), the absolute deviation and its elastic variant (sign(θ − x) + λθ), and the Moreau
envelope of either (β(θ − prox(θ)), pipeline.problems.smoothed). Anything else (logistic:
numpy's SIMD exp and log are not libm's; a plug-in; a subclass) has none and keeps the
Python path. This module loads no numba: it only describes.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pipeline.problems.absolute import Absolute
from pipeline.problems.bernoulli import Bernoulli
from pipeline.problems.elastic import Elastic
from pipeline.problems.quadratic import Quadratic
from pipeline.problems.smoothed import MoreauSmoothed

# How the kernel makes a gradient g of a user's data point x at the query q (fused_kernel._gradients):
QUADRATIC = 0  # g = q − x (Quadratic.gradients, Bernoulli.gradients)
SIGN = 1       # g = sign(q − x) + λq (Absolute.gradients; Elastic's adds λq)
ENVELOPE = 2   # g = β(q − p), p = x + sign(c − x)·max(|c − x| − t, 0), c = q/den (MoreauSmoothed of either)


class FusedProblem(NamedTuple):
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


def _writeable(values: np.ndarray) -> np.ndarray:
    """A writeable C-ordered float64 copy: numba compiles a kernel anew for each combination of
    read-only and writeable arrays it is called with (a problem's cached constants are read-only)."""
    return np.array(values, np.float64, order="C")


def _finite(base: Absolute, kind: int, beta: float = 0.0, denominator: float = 1.0,
            threshold: float = 0.0) -> FusedProblem:
    """An absolute or elastic problem's constants; their losses are FiniteBallProblem's."""
    optimum = _writeable(base.optimum)
    ridge = base.regularization if type(base) is Elastic else 0.0
    return FusedProblem(kind, float(ridge), float(beta), float(denominator), float(threshold), optimum, 0.0,
                        _writeable(base.support), _writeable(base.weights),
                        _writeable(base.losses(optimum, base.support)))


def _envelope(problem: MoreauSmoothed) -> FusedProblem | None:
    """MoreauSmoothed.gradients of an absolute or elastic base: prox with step s = 1/β, its
    centre θ/(1 + λs) and threshold 1/(λ + 1/s) (Elastic.prox), or θ and s (Absolute.prox)."""
    base, step = problem.base, 1.0 / problem.beta
    if type(base) is Absolute:
        return _finite(base, ENVELOPE, problem.beta, 1.0, step)
    if type(base) is Elastic:
        curvature = base.regularization + 1.0 / step
        return _finite(base, ENVELOPE, problem.beta, 1.0 + base.regularization * step, 1.0 / curvature)
    return None


def _centred(problem: Quadratic | Bernoulli, constant: float) -> FusedProblem:
    """A problem whose gradient is θ − x, excess ½‖θ − θ*‖² and population loss that plus `constant`."""
    return FusedProblem(QUADRATIC, 0.0, 0.0, 1.0, 0.0, _writeable(problem.optimum), float(constant),
                        np.empty((problem.dim, 0)), np.empty(0), np.empty(0))


def fused_problem(problem: Any) -> FusedProblem | None:
    """The kernel's constants of a problem with a compiled twin, else None (exact types only:
    a subclass may change what it computes).

    Args:
      problem: the run's problem (the job's: a smoothed optimizer's is its MoreauSmoothed).
    """
    kind = type(problem)
    if kind is Quadratic:
        return _centred(problem, 0.5 * problem.spread**2)
    if kind is Bernoulli:
        return _centred(problem, problem.variance)
    if kind is Absolute or kind is Elastic:
        return _finite(problem, SIGN)
    if kind is MoreauSmoothed:
        return _envelope(problem)
    return None
