"""The built-in optimizers' rounds are their stage functions (pipeline.optimizers.base.Staged), run in
Python by `query` and `update`, compiled one by one by the engine's Python rounds, and inlined by the
fused rounds: each is checked bit for bit against the numpy oracle (tests/oracles/optimizers.py) on
random states, inside and outside the ball, and random estimates, large enough to project."""
from __future__ import annotations

import numpy as np
import pytest

from oracles import optimizers as oracle  # tests/oracles/optimizers.py
from pipeline import config, planning
from pipeline.engine.rounds import compiled_stages
from pipeline.errors import NonFiniteError
from pipeline.optimizers.base import stage_arrays, stage_query, stage_round

# (optimizer config, the oracle's query and update); seq_phased's phases, seq_agd_smoothed, are AC-SA on envelopes.
CASES = {
    "seq_sgd": ({"name": "seq_sgd"}, oracle.averaged_query, oracle.averaged_update),
    "full_gd": ({"name": "full_gd", "rounds": 5}, oracle.averaged_query, oracle.averaged_update),
    "seq_agd paper": ({"name": "seq_agd"}, oracle.acsa_query, oracle.acsa_update),
    "seq_agd calibrated": ({"name": "seq_agd", "parameters": "calibrated"}, oracle.acsa_query, oracle.acsa_update),
    "pnsgd": ({"name": "pnsgd"}, oracle.last_iterate_query, oracle.last_iterate_update),
    "seq_phased": ({"name": "seq_phased"}, oracle.acsa_query, oracle.acsa_update),
    "seq_agd_smoothed": ({"name": "seq_agd_smoothed"}, oracle.acsa_query, oracle.acsa_update),
    "momentum plug-in": ({"name": "experiments/plugins/momentum_sgd.py:MomentumSGD", "momentum": 0.9},
                         oracle.averaged_query, oracle.momentum_update),
    "AdaGrad-Norm plug-in": ({"name": "experiments/plugins/adagrad_norm.py:AdaGradNorm", "initial_accumulator": 0.5},
                             oracle.averaged_query, oracle.adagrad_norm_update),
}
PROBLEMS = {"seq_phased": "elastic", "seq_agd_smoothed": "absolute"}
PROTOCOLS = {"pnsgd": "central_gaussian"}


def _optimizers(case: str):
    """The case's optimizers whose updates the rounds apply (a phased reduction's phases)."""
    settings = CASES[case][0]
    tree = {"experiment": "oracle", "problem": {"name": PROBLEMS.get(case, "quadratic"), "dim": 5, "radius": 1.0},
            "n_users": 20_000, "optimizer": settings, "seeds": [0],
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "accounting": "tight",
                        **({"protocol": PROTOCOLS[case]} if case in PROTOCOLS else {})}}
    (run,) = config.expand(tree)
    return planning.plan_run(run).job.optimizer.steppers()


def _states(optimizer, rng: np.random.Generator, count: int):
    """Random states of the optimizer's kind: θ inside or outside the ball, the vectors between, t."""
    start = optimizer.init()
    for index in range(count):
        scale = 0.3 if index % 2 else 3.0
        vectors = {field: rng.normal(scale=scale, size=start[0].size) for field in start._fields[:-1]}
        if "accumulator" in vectors:  # AdaGrad-Norm's b² > 0, the same in every coordinate
            vectors["accumulator"] = np.full(start[0].size, abs(vectors["accumulator"][0]) + 0.5)
        yield type(start)(**vectors, **{start._fields[-1]: int(rng.integers(start[-1], start[-1] + 60))})


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_of_a_round_equals_the_numpy_oracle_bit_for_bit(case):
    _, query, update = CASES[case]
    rng = np.random.default_rng(42)
    for optimizer in _optimizers(case):
        compiled = compiled_stages(optimizer.compiled_update())
        for state in _states(optimizer, rng, 40):
            mean = rng.normal(scale=float(rng.choice([0.01, 1.0, 30.0])), size=state[0].size)
            expected = update(optimizer, state, mean)
            assert np.array_equal(optimizer.query(state), query(optimizer, state))
            arrays = stage_arrays(optimizer.stages(), state)
            assert np.array_equal(stage_query(optimizer.stages(), arrays, compiled[0]), query(optimizer, state))
            assert _same(optimizer.update(state, mean), expected)  # the stages in Python
            after, released = stage_round(optimizer.stages(), state, arrays, mean, optimizer.problem.project,
                                          compiled[1:])
            assert _same(after, expected)  # compiled, as the engine's Python rounds call them
            assert np.array_equal(released, optimizer.output(expected))  # the release is the output after the step


def test_a_release_that_is_not_finite_leaves_the_state_and_says_so():
    """PNSGD releases its last iterate, so a NaN estimate reaches this round's release (an average's
    reaches the next one's, through the query, as in numpy)."""
    (optimizer,) = _optimizers("pnsgd")
    state = optimizer.init()
    mean = np.full(state[0].size, np.nan)
    arrays = stage_arrays(optimizer.stages(), state)
    after, released = stage_round(optimizer.stages(), state, arrays, mean, optimizer.problem.project)
    assert after is None and np.isnan(released[0])
    with pytest.raises(NonFiniteError, match="the model θ holds NaN"):
        optimizer.update(state, mean)
    with pytest.raises(ValueError, match="never empty"):
        optimizer.update(state, None)
