"""An optimizer's round as transforms composed by `chain` (pipeline.optimizers.transforms): each
chain's stages, in Python and compiled one by one as the engine's Python rounds compile them, equal
the round written in numpy here; a rejected round leaves every row as it was; chains of different
shapes never share compiled code. The built-in optimizers' and the plug-ins' chains are checked
against tests/oracles/optimizers.py in tests/test_stage_oracles.py, and compiled into the round
loop in tests/test_fused.py and tests/test_plugins.py."""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
import pytest

from pipeline import cli, config, engine, planning
from pipeline.engine.rounds import compiled_stages
from pipeline.engine.shard import Shard
from pipeline.optimizers.base import stage_arrays, stage_query, stage_round
from pipeline.optimizers.transforms import Transform, average, chain, last_iterate, scale, sgd, trace

RATE, MOMENTUM, RADIUS = 0.3, 0.7, 1.0
README = Path(__file__).resolve().parent.parent / "README.md"


def _project(step: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(step)
    return step if norm <= RADIUS else step * (RADIUS / norm)


def _momentum_then_step(theta, rows, steps, mean):
    """chain(trace(μ), sgd(η), average()) in numpy: v ← μv + ḡ, θ ← π(θ − ηv), Σθ gains θ."""
    velocity = MOMENTUM * rows[0] + mean
    return _project(theta + -RATE * velocity), [velocity, rows[1] + theta], (rows[1] + theta) / (steps + 1)


def _step_then_momentum(theta, rows, steps, mean):
    """chain(sgd(η), trace(μ), average()) in numpy: v ← μv − ηḡ, θ ← π(θ + v), Σθ gains θ."""
    velocity = MOMENTUM * rows[0] + -RATE * mean
    return _project(theta + velocity), [velocity, rows[1] + theta], (rows[1] + theta) / (steps + 1)


def _scaled_last(theta, rows, steps, mean):
    """chain(scale(2), sgd(η), last_iterate()) in numpy: θ ← π(θ − η·2ḡ), released as it is."""
    after = _project(theta + -RATE * (2.0 * mean))
    return after, [], after


def _state(*values):
    """A state tuple (θ, the rows, t) of the NamedTuple kind the optimizers' states are."""
    return collections.namedtuple("State", [f"v{index}" for index in range(len(values))])(*values)


def _theta(constants, rows, steps, theta, out):
    out[:] = theta


CHAINS = {
    "momentum, then the step": (lambda: chain(trace(MOMENTUM), sgd(RATE), average()), _momentum_then_step),
    "the step, then momentum": (lambda: chain(sgd(RATE), trace(MOMENTUM), average()), _step_then_momentum),
    "scaled, the last iterate": (lambda: chain(scale(2.0), sgd(RATE), last_iterate()), _scaled_last),
}


@pytest.mark.parametrize("case", sorted(CHAINS))
def test_a_chain_is_its_transforms_in_order_in_python_and_compiled(case):
    build, numpy_round = CHAINS[case]
    update = build()
    compiled = compiled_stages(update)
    rng = np.random.default_rng(7)
    for trial in range(30):
        scale_of = 3.0 if trial % 2 else 0.2  # outside the ball and inside it
        theta = rng.normal(scale=scale_of, size=4)
        rows = [rng.normal(size=4) for _ in range(update.vectors)]
        steps = int(rng.integers(0, 50))
        mean = rng.normal(scale=scale_of, size=4)
        state = _state(theta, *rows, steps)
        expected_theta, expected_rows, expected_release = numpy_round(theta, rows, steps, mean)
        for functions in (None, compiled[1:]):
            arrays = stage_arrays(update, state)
            assert np.array_equal(stage_query(update, arrays, None if functions is None else compiled[0]), theta)
            after, released = stage_round(update, state, arrays, mean, _project, functions)
            assert np.array_equal(after[0], expected_theta) and after[-1] == steps + 1
            assert all(np.array_equal(a, b) for a, b in zip(after[1:-1], expected_rows, strict=True))
            assert np.array_equal(released, expected_release)


def test_a_rejected_round_leaves_every_row_as_it_was():
    """The release is not finite: the momentum's row, which its update advances only once the round
    is accepted, stays, as θ and t do."""
    update = chain(trace(MOMENTUM), sgd(RATE), last_iterate())
    state = _state(np.full(3, 0.1), np.full(3, 0.5), 4)
    for functions in (None, compiled_stages(update)[1:]):
        arrays = stage_arrays(update, state)
        after, released = stage_round(update, state, arrays, np.array([np.nan, 1.0, 1.0]), _project, functions)
        assert after is None and np.isnan(released).any()
        theta, extra, steps = arrays
        assert np.array_equal(theta, state[0]) and np.array_equal(extra[0], state[1]) and steps[0] == 4


@pytest.mark.parametrize("transforms, counts", [
    ((sgd(RATE),), (0, 0)),
    ((sgd(RATE), average(), last_iterate()), (2, 0)),
    ((Transform(query=_theta), Transform(query=_theta), average()), (1, 2)),
])
def test_a_chain_takes_one_release_and_at_most_one_query(transforms, counts):
    with pytest.raises(ValueError, match=f"exactly one transform with a release and at most one with a query; "
                                         f"got {counts[0]} and {counts[1]}"):
        chain(*transforms)


def test_a_transform_whose_function_is_a_closure_is_refused():
    factor = 2.0

    def doubled(constants, rows, steps, theta, direction, advance):
        for coordinate in range(theta.size):
            direction[coordinate] = factor * direction[coordinate]

    with pytest.raises(ValueError, match="transform function .*doubled is a closure: a transform reads its numbers "
                                         "from its constants"):
        chain(Transform(update=doubled), average())


def test_chains_of_one_shape_share_their_stages_and_of_two_shapes_do_not():
    """The engine keys compiled code by the stage functions and numba's disk cache by their names: one
    shape, one set of functions, whatever the constants; shapes that differ only in where a
    transform's rows lie (a transform that only holds a row, before the momentum) are named apart."""
    first, again = chain(trace(0.5), sgd(0.1), average()), chain(trace(0.9), sgd(2.0), average())
    assert first[:3] == again[:3] and first.constants != again.constants
    shifted = chain(Transform((), 1), trace(0.5), sgd(0.1), average())
    assert {f.__qualname__ for f in shifted[:3]}.isdisjoint(f.__qualname__ for f in first[:3])


def test_a_chain_whose_rows_only_shift_loads_its_own_compiled_code():
    """Compiled one after the other in one process, each chain's stages are saved to and looked up in
    numba's disk cache: a chain that holds an extra row before the momentum must not load the
    other's machine code, which reads the momentum from the wrong row."""
    plain = chain(trace(MOMENTUM), sgd(RATE), average())
    shifted = chain(Transform((), 1), trace(MOMENTUM), sgd(RATE), average())
    theta, velocity, theta_sum, spare = np.full(3, 0.1), np.full(3, 0.4), np.full(3, 0.2), np.full(3, -9.0)
    mean = np.array([0.3, -0.2, 0.1])
    compiled_plain, compiled_shifted = compiled_stages(plain), compiled_stages(shifted)
    state = _state(theta, velocity, theta_sum, 0)
    plain_after, _ = stage_round(plain, state, stage_arrays(plain, state), mean, _project, compiled_plain[1:])
    state = _state(theta, spare, velocity, theta_sum, 0)
    shifted_after, _ = stage_round(shifted, state, stage_arrays(shifted, state), mean, _project, compiled_shifted[1:])
    assert np.array_equal(shifted_after[0], plain_after[0]) and np.array_equal(shifted_after[1], spare)
    assert np.array_equal(shifted_after[2], plain_after[1])


def _readme_plug_in(folder: Path) -> Path:
    """The README's signSGD plug-in (its block that starts `# my_sign_sgd.py`), as a file in `folder`."""
    block = re.search(r"```python\n(# my_sign_sgd\.py.*?)```", README.read_text(), re.S).group(1)
    path = folder / "my_sign_sgd.py"
    path.write_text(block)
    return path


def test_the_readmes_sign_sgd_plug_in_runs_compiled_from_yaml_as_its_formula_says(tmp_path):
    """The README's dozen lines run as a user runs them (`python -m pipeline run`), compiled; the
    compiled rounds are the Python path's bit for bit, and each round is θ ← π(θ − η·sign(ḡ)) with
    the average of the iterates released, in numpy."""
    plug_in = f"{_readme_plug_in(tmp_path)}:SignSGD"
    grid = tmp_path / "sign.yaml"
    grid.write_text(textwrap.dedent(f"""\
        experiment: sign-sgd
        problem: {{name: quadratic, dim: 3, radius: 1.0}}
        n_users: 3000
        optimizer: {{name: "{plug_in}"}}
        privacy: {{protocol: cjmp_vec, epsilon: 2.0, delta: 1.0e-6, accounting: tight}}
        seeds: [4]
        execution: {{backend: local, shards: 1, block_size: 256}}
        tracking: {{mlflow_uri: "sqlite:///{tmp_path}/m.db", out: "{tmp_path}/results"}}
        """))
    assert cli.main(["run", str(grid)]) == 0
    rounds = pd.read_parquet(tmp_path / "results" / "rounds.parquet")
    (run,) = config.expand(yaml.safe_load(grid.read_text()))
    job = planning.plan_run(run).job
    assert engine.compiles(job) and len(rounds) == job.schedule.rounds >= 20
    start = job.optimizer.start(job.seed)
    fused_state, fused_records = Shard(job, 0, job.layout.n_blocks).run_rounds(start, 0, job.schedule.rounds)
    python_state, python_records = Shard(job, 0, job.layout.n_blocks).python_rounds(start, 0, job.schedule.rounds)
    fused_losses = np.asarray(fused_records.column("excess_loss"))
    assert fused_losses.tobytes() == np.asarray(python_records.column("excess_loss")).tobytes()
    assert fused_losses.tobytes() == rounds.sort_values("round")["excess_loss"].to_numpy().tobytes()
    assert all(np.array_equal(a, b) for a, b in zip(fused_state[:-1], python_state[:-1]))
    optimizer, rng = job.optimizer, np.random.default_rng(3)
    for _ in range(20):
        state = type(start)(rng.normal(size=3), rng.normal(size=3), int(rng.integers(0, 40)))
        mean = rng.normal(size=3)
        after = optimizer.update(state, mean)
        assert np.array_equal(after.theta, optimizer.problem.project(state.theta - optimizer.step_size * np.sign(mean)))
        assert np.array_equal(after.theta_sum, state.theta_sum + state.theta) and after.steps == state.steps + 1


_COMPILE_CHAIN = """
import collections
import sys
import numpy as np
from pipeline.engine.rounds import compiled_stages
from pipeline.optimizers.base import stage_arrays, stage_round
from pipeline.optimizers.transforms import Transform, average, chain, sgd, trace

def build(shifted):
    return chain(*([Transform((), 1)] if shifted else []), trace(0.7), sgd(0.3), average())

def velocity_after(update, shifted):
    theta, velocity, mean = np.full(3, 0.1), np.full(3, 0.4), np.array([0.3, -0.2, 0.1])
    state = (theta, *([np.full(3, -9.0)] if shifted else []), velocity, np.zeros(3), 0)
    state = collections.namedtuple("S", [f"v{i}" for i in range(len(state))])(*state)
    after, _ = stage_round(update, state, stage_arrays(update, state), mean, lambda step: step,
                           compiled_stages(update)[1:])
    return after[-3].tolist()

for shifted in map(int, sys.argv[1:]):
    print(velocity_after(build(shifted), shifted))
"""


def test_chains_compiled_by_two_processes_load_together_each_with_its_own_code(tmp_path):
    """numba names compiled code by the function's qualified name and a per-process counter, and
    links code of one name as one definition. Two processes that each compile one chain (the same
    closures, other rows frozen in) count alike; a third that loads both from the disk cache must
    still run each chain's own code: the momentum row read where its chain keeps it."""
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run(*shifted: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", _COMPILE_CHAIN, *shifted], capture_output=True, text=True,
                              env=environment, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split("\n")[:len(shifted)]

    expected = [str((0.7 * np.full(3, 0.4) + np.array([0.3, -0.2, 0.1])).tolist())] * 2
    assert run("0") + run("1") == expected  # each compiled in a fresh process, saved to the cache
    assert run("0", "1") == expected and run("1", "0") == expected  # both loaded into one process


_EDITED_TRANSFORM = """
import importlib.util
import sys
from pathlib import Path
import numpy as np
from pipeline.engine.rounds import compiled_stages
from pipeline.optimizers.transforms import Transform, chain, last_iterate

SOURCE = '''
import numpy as np


def my_update(constants, rows, steps, theta, direction, advance):
    total = 0.0
    for coordinate in range(theta.size):
        total += np.sin(direction[coordinate]) * np.cos(rows[0, coordinate]) + np.exp(-direction[coordinate] ** 2)
    for coordinate in range(theta.size):
        velocity = FACTOR * rows[0, coordinate] + direction[coordinate] + 0.0 * total
        direction[coordinate] = velocity
        if advance:
            rows[0, coordinate] = velocity
'''

def step_with(folder, factor):
    path = Path(folder) / "my_transform.py"
    path.write_text(SOURCE.replace("FACTOR", factor))
    spec = importlib.util.spec_from_file_location("my_transform", path)
    module = sys.modules["my_transform"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    update = chain(Transform((), 1, update=module.my_update), last_iterate())
    theta, extra, steps = np.zeros(2), np.ones((1, 2)), np.zeros(1, np.int64)
    released = np.empty(2)
    compiled_stages(update)[2](update.constants, theta, extra, steps, np.ones(2), np.ones(2), released)
    return extra[0, 0]

folder = sys.argv[1]
print(*[step_with(folder, factor) for factor in sys.argv[2:]])
"""


def test_a_transform_edited_between_processes_runs_its_own_code_in_a_third(tmp_path):
    """A plug-in's transform compiled by one process, then edited and compiled by another (each
    saving to the disk cache, their numba counters alike), and both versions loaded by a third:
    each version's stage runs its own code. numba names compiled code `qualname$count` and links
    code of one name as one definition, so with counts alike the third ran the first version's
    function for the second (pipeline.compiled starts each process's count at a random point)."""
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    folder = tmp_path / "plug-in"
    folder.mkdir()

    def run(*factors: str) -> str:
        done = subprocess.run([sys.executable, "-c", _EDITED_TRANSFORM, str(folder), *factors], capture_output=True,
                              text=True, env=environment, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    assert (run("2.0"), run("3.0")) == ("3.0", "4.0")  # the row v ← factor·v + ḡ, from v = 1, ḡ = 1
    assert run("2.0", "3.0") == "3.0 4.0"
