"""The problems' compiled twins (pipeline.problems.base: a NamedTuple of constants whose class defines
`gradients` and `losses`, written once in the family's file) give, interpreted, compiled alone and
through the problem's public methods (Twinned), the bits of the numpy oracle (tests/oracles/problems.py):
`gradients` on random users and on ties (x = θ, where sign is 0, and an envelope's gap at its
threshold), `excess_loss` / `population_loss` inside and outside the ball, the ball's projection
and the quadratic's users from their normals. The fused rounds inline these functions;
tests/test_fused.py checks whole rounds."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from oracles import problems as oracle
from pipeline import compiled
from pipeline.optimizers.base import gradient_problem
from pipeline.problems import build_problem
from pipeline.problems.base import ball_projection

# (problem, smoothing β: 0 for the problem itself, else its Moreau envelope's twin)
CASES = [("quadratic", 0.0), ("bernoulli", 0.0), ("absolute", 0.0), ("elastic", 0.0), ("absolute", 3.0),
         ("elastic", 3.0)]
DIM, USERS = 7, 40


def _compiled(function):
    """A twin's function compiled alone, with the helpers it calls (compiled.jitable)."""
    return njit(compiled.jitable(function))


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
        want = oracle.envelope_gradients(problem, theta, data, smoothing) if smoothing \
            else oracle.gradients(problem, theta, data)
        assert np.array_equal(_bits(smoothed.gradients(theta, data)), _bits(want)), (name, smoothing, trial)
        if problem.name in ("absolute", "elastic"):  # the public prox is the envelope twin's too
            step = 1.0 / smoothing if smoothing else 0.5
            assert np.array_equal(_bits(problem.prox(theta, data, step)), _bits(oracle.prox(problem, theta, data, step)))
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
        want = oracle.losses(problem, released)
        assert (problem.excess_loss(released), problem.population_loss(released)) == want, (name, trial)
        assert problem.excess_and_population_loss(released) == want, (name, trial)  # what a round records
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


def test_the_ball_projection_is_the_oracles():
    """ball_projection (numerics.project_to_ball compiled, what the kernels inline) is numpy's
    θ·(R/‖θ‖) outside the ball and θ inside it, on the sphere too."""
    rng = np.random.default_rng(5)
    for trial in range(40):
        theta = rng.normal(scale=(0.1, 1.0, 10.0)[trial % 3], size=1 + trial % 9)
        radius = 1.0 if trial % 4 else float(np.sqrt(oracle.squared_norm(theta)))  # exactly on the sphere
        assert np.array_equal(_bits(ball_projection(theta, radius)), _bits(oracle.ball_projection(theta, radius)))


def test_the_quadratics_users_from_their_normals_are_the_oracles():
    """on_sphere, what the quadratic twin's draw makes of its normals, compiled alone: a zero
    direction's norm is read as 1, which puts the user at θ*."""
    from pipeline.problems.quadratic import on_sphere

    problem = build_problem("quadratic", DIM, 2.0)
    normals = np.random.default_rng(6).standard_normal((DIM, USERS))
    normals[:, 3] = 0.0
    want = oracle.from_normals(problem, normals.copy())
    compiled.compiled_function(on_sphere)(problem.twin().optimum, problem.spread, normals)
    assert np.array_equal(_bits(normals), _bits(want))


# Every registered problem whose users `sample` draws in compiled code (its twin's `draw`, or
# finite_draw), users counts around a tape of raw outputs (draws.TAPE_RAWS = 2048 values).
DRAWN = ["quadratic", "bernoulli", "absolute", "elastic", "logistic", "l1_least_squares", "l1_least_squares_active"]


@pytest.mark.parametrize("name", DRAWN)
@pytest.mark.parametrize("count", [0, 1, 292, 293, 5000])
def test_a_problems_users_are_the_oracles_and_leave_the_stream_where_numpy_does(name, count):
    """`sample` on a Philox stream (the engine's, pipeline.engine.layout.stream) gives the numpy
    oracle's bits, and the stream's next raw outputs are those after numpy's draw."""
    from pipeline.engine.layout import stream

    problem = build_problem(name, DIM, 1.0)
    ours, numpys = stream(3, 1, count), stream(3, 1, count)
    drawn = problem.sample(ours, count)
    assert drawn.shape == (problem.data_dim, count) and drawn.flags.c_contiguous
    assert np.array_equal(_bits(drawn), _bits(oracle.sample(problem, numpys, count)))
    assert np.array_equal(ours.bit_generator.random_raw(4), numpys.bit_generator.random_raw(4))


def test_every_problem_that_draws_compiled_is_a_case():
    """A built-in problem whose `sample` is a compiled draw is in DRAWN."""
    from pipeline.problems import PROBLEMS
    from pipeline.problems.base import Twinned
    from pipeline.problems.finite import FiniteBallProblem

    drawing = {name for name in PROBLEMS if name != "dataset"
               and isinstance(build_problem(name, DIM, 1.0), (Twinned, FiniteBallProblem))}
    assert drawing == set(DRAWN)


def test_a_problem_runs_its_twin_on_any_arrays_it_is_given():
    """Twinned's public methods take what numpy's took: read-only θ (θ* itself), strided data, an
    `out` that is not C-ordered, integers; each gives the oracle's bits."""
    problem = build_problem("elastic", DIM, 1.0)
    rng = np.random.default_rng(9)
    data = np.asfortranarray(problem.sample(rng, USERS))
    theta = problem.optimum  # read-only
    want = oracle.gradients(problem, theta, data)
    out = np.empty((USERS, DIM)).T  # not C-ordered
    assert problem.gradients(theta, data, out=out) is out
    assert np.array_equal(_bits(out), _bits(want))
    assert np.array_equal(_bits(problem.gradients(theta, data[:, ::3])), _bits(want[:, ::3]))
    assert problem.excess_loss(theta) == oracle.losses(problem, theta)[0] == 0.0
    quadratic = build_problem("quadratic", 3, 1.0)
    integers = np.arange(6).reshape(3, 2)
    assert np.array_equal(quadratic.gradients(np.ones(3), integers), 1.0 - integers)


def test_a_finite_problem_with_losses_of_its_own_measures_them():
    """A subclass of `absolute` whose per-user losses differ keeps the Python path, and its
    population and excess losses are the weighted sums of its own losses, not the twin's."""
    import dataclasses

    from pipeline.problems.absolute import Absolute

    @dataclasses.dataclass(frozen=True)
    class Doubled(Absolute):
        def losses(self, theta, data):
            return 2.0 * Absolute.losses(self, theta, data)

    problem, plain = Doubled(DIM, 1.0), Absolute(DIM, 1.0)
    theta = np.linspace(-0.5, 0.5, DIM)
    assert problem.compiled_problem() is None and plain.compiled_problem() is not None
    assert problem.population_loss(theta) == 2.0 * plain.population_loss(theta)
    assert problem.excess_loss(theta) == 2.0 * plain.excess_loss(theta) > 0.0
    assert problem.excess_and_population_loss(theta) == (problem.excess_loss(theta), problem.population_loss(theta))


def test_a_subclass_that_measures_one_loss_of_its_own_records_it():
    """A round records both losses in one call: a subclass overriding one of them gets its own."""
    from pipeline.problems.quadratic import Quadratic

    class Shifted(Quadratic):
        def population_loss(self, theta):
            return Quadratic.population_loss(self, theta) + 1.0

    problem, plain = Shifted(DIM, 1.0), Quadratic(DIM, 1.0)
    theta = np.linspace(-0.5, 0.5, DIM)
    excess, population = problem.excess_and_population_loss(theta)
    assert (excess, population) == (plain.excess_loss(theta), plain.population_loss(theta) + 1.0)


def test_every_built_in_twin_is_the_problems_one_definition():
    """A registered problem with a compiled twin takes its gradients and losses from it
    (problems.base.Twinned), not from numpy methods of its own beside it."""
    from pipeline.problems import PROBLEMS
    from pipeline.problems.base import Twinned

    twinned = [name for name in PROBLEMS if name != "dataset" and build_problem(name, DIM, 1.0).compiled_problem()]
    assert set(twinned) == {name for name, _ in CASES}
    theta = np.linspace(-2.0, 2.0, DIM)  # outside the ball
    for name in twinned:
        problem = build_problem(name, DIM, 1.0)
        assert isinstance(problem, Twinned) and type(problem).gradients is Twinned.gradients, name
        twin = problem.compiled_problem()
        assert (problem.excess_loss(theta), problem.population_loss(theta)) == \
            type(twin).losses(twin, theta, np.empty(DIM)), name  # the twin's, interpreted
