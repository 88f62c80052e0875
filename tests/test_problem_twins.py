"""The problems' compiled twins (pipeline.problems.base: a NamedTuple of constants whose class defines
`gradients` and `losses`, written once in the family's file) give, interpreted and compiled, the bits
of the problem's numpy methods: `gradients` on random users and on ties (x = θ, where sign is 0, and
an envelope's gap at its threshold), and `excess_loss` / `population_loss` inside and outside the
ball. The fused rounds inline these functions; tests/test_fused.py checks whole rounds."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from pipeline.engine import fused_kernel
from pipeline.optimizers.base import gradient_problem
from pipeline.problems import build_problem

# (problem, smoothing β: 0 for the problem itself, else its Moreau envelope's twin)
CASES = [("quadratic", 0.0), ("bernoulli", 0.0), ("absolute", 0.0), ("elastic", 0.0), ("absolute", 3.0),
         ("elastic", 3.0)]
DIM, USERS = 7, 40


def _compiled(function):
    """A twin's function compiled alone, with the helpers it calls (fused_kernel.jitable)."""
    return njit(fused_kernel.jitable(function))


def _bits(values) -> np.ndarray:
    return np.asarray(values, np.float64).view(np.uint64)


def _users(problem, theta: np.ndarray, smoothing: float, rng: np.random.Generator) -> np.ndarray:
    """Sampled users, then ties: a user at θ, users sharing one coordinate with θ, and for an
    envelope users whose gap to c = θ/den is exactly its threshold."""
    data = np.ascontiguousarray(problem.sample(rng, USERS))
    data[:, 0] = theta
    data[2, 1:4] = theta[2]
    twin = gradient_problem(problem, smoothing).compiled_problem()
    if smoothing:
        centre = theta / twin.denominator
        data[:, 4] = centre - twin.threshold
        data[:, 5] = centre + twin.threshold
    return data


@pytest.mark.parametrize("name,smoothing", CASES)
def test_the_twins_gradients_are_the_problems(name, smoothing):
    problem = build_problem(name, DIM, 1.0)
    smoothed = gradient_problem(problem, smoothing)
    twin = smoothed.compiled_problem()
    compiled = _compiled(type(twin).gradients)
    rng = np.random.default_rng(len(name) + int(smoothing))
    for trial in range(8):
        theta = rng.normal(scale=0.3 if trial % 2 else 2.0, size=DIM)
        data = _users(problem, theta, smoothing, rng)
        want = smoothed.gradients(theta, data)
        for gradients in (type(twin).gradients, compiled):
            out = np.full(DIM * USERS, np.nan)
            gradients(twin, theta, data, 0, USERS, out)
            assert np.array_equal(_bits(out.reshape(DIM, USERS)), _bits(want)), (name, smoothing, trial, gradients)
        # a chunk from a column onward (the kernels' chunks of a block)
        out = np.full(DIM * 9, np.nan)
        compiled(twin, theta, data, 11, 9, out)
        assert np.array_equal(_bits(out.reshape(DIM, 9)), _bits(want[:, 11:20]))


@pytest.mark.parametrize("name,smoothing", CASES)
def test_the_twins_losses_are_the_problems(name, smoothing):
    problem = build_problem(name, DIM, 1.0)
    twin = gradient_problem(problem, smoothing).compiled_problem()
    compiled = _compiled(type(twin).losses)
    rng = np.random.default_rng(7 * len(name) + int(smoothing))
    for trial in range(8):
        released = rng.normal(scale=0.3 if trial % 2 else 2.0, size=DIM)
        if trial == 0:
            released = np.asarray(problem.optimum, np.float64).copy()  # the excess is 0 there
        want = (problem.excess_loss(released), problem.population_loss(released))
        for losses in (type(twin).losses, compiled):
            got = losses(twin, released, np.empty(DIM))
            assert np.array_equal(_bits(got), _bits(want)), (name, smoothing, trial, losses)


def test_every_problem_with_a_twin_is_a_case():
    """A new twin in the package is checked here too: every registered problem that states one
    (build_problem, and its envelope where it has one) is in CASES."""
    from pipeline.problems import PROBLEMS

    stated = {(name, 0.0) for name in PROBLEMS
              if name != "dataset" and build_problem(name, DIM, 1.0).compiled_problem() is not None}
    stated |= {(name, 3.0) for name in PROBLEMS
               if name != "dataset" and build_problem(name, DIM, 1.0).compiled_envelope(3.0) is not None}
    assert stated == set(CASES)
