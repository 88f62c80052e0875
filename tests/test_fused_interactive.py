"""The compiled fully interactive round with P_vec (issue #28, "a big fully interactive round"),
the sum protocols and Girgis's randomizers is a twin of the Python round: a shard's partial of every round equals
`Shard.python_partial_counts` exactly, through the engine and through `python -m pipeline run`,
and every other round keeps the Python path."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml
from numba import njit

from pipeline import cli, config, planning
from pipeline.engine import fused_interactive as fused
from pipeline.protocols import cjmp
from pipeline.engine.layout import chunk_users
from pipeline.engine.shard import Shard
from pipeline.errors import NonFiniteError


def _tree(n_users: int, dim: int, block_size: int, optimizer: str = "full_gd", accounting: str = "tight",
          seed: int = 0, protocol: str | None = None, shards: int = 1, problem: str = "quadratic", **privacy) -> dict:
    return {"experiment": "fused_interactive", "problem": {"name": problem, "dim": dim, "radius": 1.0},
            "n_users": n_users, "optimizer": {"name": optimizer, "rounds": 3},
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "accounting": accounting,
                        **({"protocol": protocol} if protocol else {}), **privacy},
            "seeds": [seed], "execution": {"backend": "local", "shards": shards, "block_size": block_size}}


def _job(tree: dict):
    (run_config,) = config.expand(tree)
    return planning.plan_run(run_config).job


def _round(job, round_index: int = 0):
    plan = job.schedule.plan(round_index)
    return plan, job.protocol.planned(plan, job.problem.dim)


# Chunks hold chunk_users(d) users: 6,553 at d = 10, 21,845 at d = 3, 655 at d = 100.
CASES = {
    "blocks and a partial last block": dict(n_users=20_000, dim=10, block_size=4096),
    "a block of several chunks and a one-user chunk": dict(n_users=2 * 21_845 + 1, dim=3, block_size=65_536),
    "d = 100, paper accounting": dict(n_users=3_000, dim=100, block_size=1024, accounting="paper", seed=3),
    "one user": dict(n_users=1, dim=4, block_size=64, seed=5),
    "d = 1": dict(n_users=5_000, dim=1, block_size=1024, seed=6),
    # The sum protocols: each user's noise, Duchi et al.'s reports, no noise, and the curator's
    # (drawn by the analyzer after the merge: the shards' partials are its plain sums).
    "shuffle_gaussian": dict(n_users=20_000, dim=10, block_size=4096, protocol="shuffle_gaussian", seed=7),
    "local_l2, a one-user chunk": dict(n_users=2 * 21_845 + 1, dim=3, block_size=65_536, protocol="local_l2"),
    "none, d = 100": dict(n_users=3_000, dim=100, block_size=1024, protocol="none", seed=8),
    "central_gaussian, d = 1": dict(n_users=5_000, dim=1, block_size=1024, protocol="central_gaussian", seed=9),
    # The finite problems' gradients (fused_problem): sign(θ − x) (+ λθ) and the Moreau envelope's.
    "absolute": dict(n_users=20_000, dim=10, block_size=4096, problem="absolute", seed=10),
    "absolute, full_gd_smoothed, a one-user chunk": dict(n_users=2 * 21_845 + 1, dim=3, block_size=65_536,
                                                         problem="absolute", optimizer="full_gd_smoothed", seed=11),
    "elastic, full_gd_smoothed, shuffle_gaussian": dict(n_users=5_000, dim=10, block_size=1024, problem="elastic",
                                                        optimizer="full_gd_smoothed", protocol="shuffle_gaussian",
                                                        seed=12),
    "bernoulli": dict(n_users=5_000, dim=10, block_size=1024, problem="bernoulli", seed=14),
    "elastic, local_l2, d = 1": dict(n_users=5_000, dim=1, block_size=1024, problem="elastic", protocol="local_l2",
                                     seed=13),
    # Girgis's randomizers: each block's histograms per (level, index, bit) (GirgisEncoding.counts).
    "girgis_l2, several bit planes": dict(n_users=5_000, dim=10, block_size=1024, protocol="girgis_l2", levels=3,
                                          seed=15),
    "girgis_linf, a one-user chunk": dict(n_users=2 * 21_845 + 1, dim=3, block_size=65_536, protocol="girgis_linf",
                                          seed=16),
    "girgis_l1, d = 5": dict(n_users=3_000, dim=5, block_size=1024, protocol="girgis_l1", seed=17),
}
# Query points: near the data (no clipping), and far from it (every gradient clipped, some
# coordinates clamped at 0 and at the top).
THETAS = {"near": 0.1, "far": 40.0}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("theta", THETAS)
def test_the_compiled_round_is_the_python_round(case, theta):
    job = _job(_tree(**CASES[case]))
    shard = Shard(job, 0, job.layout.n_blocks)
    query = np.linspace(-1.0, 1.0, job.problem.dim) * THETAS[theta]
    for round_index in (0, 2):
        plan, params = _round(job, round_index)
        compiled = fused.interactive_rounds(shard)
        encoding = compiled.encoding(plan, params, query, job.protocol)
        assert encoding is not None
        got = compiled.partial(plan, params, query, encoding)
        want = shard.python_partial_counts(plan, params, query)
        assert type(got) is type(want) and got.users == want.users == job.n_users
        assert _integers(got) == _integers(want)
        assert _integers(shard.partial_counts(plan, params, query)) == _integers(want)


def _integers(partial) -> list:
    """A partial's integers: P_vec's ones above their floor and the floor, a sum's fixed-point
    units, or Girgis's histograms."""
    if hasattr(partial, "ones_above_floor"):
        return [*partial.ones_above_floor.tolist(), partial.floor_total]
    return partial.units.tolist() if hasattr(partial, "units") else partial.counts.tolist()


def test_a_chunk_of_one_user_occurs():
    """The second case's block ends with a chunk of one user, a row of one byte."""
    n_users, dim = CASES["a block of several chunks and a one-user chunk"]["n_users"], 3
    assert n_users % chunk_users(dim) == 1 and n_users < 65_536


def test_a_shard_of_later_blocks_is_its_own_share():
    """Shards of two blocks each: each one's compiled partial is its Python partial (its own
    users and its blocks' streams), and the shards' partials add up to the one-shard partial."""
    job = _job(_tree(n_users=9_000, dim=10, block_size=2048, seed=2))
    plan, params = _round(job)
    query = np.full(job.problem.dim, 0.3)
    partials = []
    for first in range(0, job.layout.n_blocks, 2):
        shard = Shard(job, first, min(first + 2, job.layout.n_blocks))
        got, want = shard.partial_counts(plan, params, query), shard.python_partial_counts(plan, params, query)
        assert (got.users, got.floor_total) == (want.users, want.floor_total)
        assert np.array_equal(got.ones_above_floor, want.ones_above_floor)
        partials.append(got)
    whole = Shard(job, 0, job.layout.n_blocks).python_partial_counts(plan, params, query)
    total = job.protocol.merge(partials)
    assert total.users == whole.users
    assert np.array_equal(total.ones_above_floor + total.floor_total, whole.ones_above_floor + whole.floor_total)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_gradient_fails_as_the_python_round(value):
    job = _job(_tree(n_users=5_000, dim=3, block_size=1024))
    shard = Shard(job, 0, job.layout.n_blocks)
    shard.data[1, 3_000] = value
    plan, params = _round(job)
    compiled = fused.interactive_rounds(shard)
    query = np.zeros(3)
    assert compiled.partial(plan, params, query, compiled.encoding(plan, params, query, job.protocol)) is None
    with pytest.raises(NonFiniteError) as error:
        shard.partial_counts(plan, params, query)
    assert str(error.value) == f"round 0: user 3000's gradient holds {'NaN' if np.isnan(value) else '-inf'}"  # θ − x


def test_a_gradient_whose_square_overflows_is_clipped_not_refused():
    """A finite gradient of 1e200: its norm is infinite, its clip factor 0 (as numpy's)."""
    job = _job(_tree(n_users=500, dim=3, block_size=256))
    shard = Shard(job, 0, job.layout.n_blocks)
    shard.data[0, 7] = 1e200
    plan, params = _round(job)
    query = np.zeros(3)
    got, want = shard.partial_counts(plan, params, query), shard.python_partial_counts(plan, params, query)
    assert np.array_equal(got.ones_above_floor, want.ones_above_floor)


@pytest.mark.parametrize("change", [
    {"optimizer": {"name": "full_gd_smoothed", "rounds": 3}},
    {"privacy": {"honest_fraction": 0.9}},
    {"problem": {"name": "logistic", "dim": 3}},
    {"execution": {"backend": "local", "shards": 1, "block_size": 256, "simulation": "literal"}},
])
def test_other_rounds_keep_the_python_path(change):
    tree = _tree(n_users=2_000, dim=3, block_size=256)
    for section, values in change.items():
        tree[section] = {**tree[section], **values} if section != "problem" else values
    job = _job(tree)
    shard = Shard(job, 0, job.layout.n_blocks)
    compiled = fused.interactive_rounds(shard)
    plan, params = _round(job)
    assert compiled is None or compiled.encoding(plan, params, np.zeros(job.problem.dim), job.protocol) is None


def test_sampled_users_and_two_query_points_keep_the_python_path():
    job = _job(_tree(n_users=2_000, dim=3, block_size=256))
    compiled = fused.interactive_rounds(Shard(job, 0, job.layout.n_blocks))
    plan, params = _round(job)
    assert compiled.encoding(plan, params, np.zeros(3), job.protocol) is not None
    assert compiled.encoding(dataclasses.replace(plan, sampling="poisson", rate=0.5), params, np.zeros(3),
                             job.protocol) is None
    assert compiled.encoding(plan, params, np.zeros((2, 3)), job.protocol) is None  # Frank–Wolfe's SPIDER


def test_a_scaled_value_is_clamped_as_numpys_clip():
    """Gradients clipped to −Δ₂ scale to 0 up to rounding, some below it: _scaled clamps them as
    cjmp._shift_and_scale's np.clip (a tie's fraction reads the clamped value). (At +Δ₂ the sum
    sb + sb·(1 + 2⁻⁵²) rounds to 2·sb, the top: that clamp guards against other constants.)"""
    scale_bound, top = 2560.0, 5120.0
    gradients = np.random.default_rng(0).uniform(1.0, 100.0, 20_000) * np.repeat([1.0, -1.0], 10_000)
    factors = scale_bound / np.abs(gradients)
    unclamped = gradients * factors + scale_bound
    assert (unclamped < 0.0).any()
    want = np.clip(unclamped, 0.0, top)
    scaled = njit(cjmp._scaled)  # P_vec's twin's, compiled as the kernels inline it
    got = [scaled(gradient, factor, scale_bound, top) for gradient, factor in zip(gradients, factors)]
    assert np.array_equal(got, want)


def test_ties_are_found_in_order_and_only_below_the_size():
    """_note_ties over words holding 255 bytes at the ends of words, twice in a word, and past `size`."""
    size = 29
    low_bytes = np.zeros(32, np.uint8)
    tied = [0, 7, 8, 13, 14, 28]
    low_bytes[tied] = 255
    low_bytes[[29, 31]] = 255  # past the size: not ties
    low_bytes[[3, 20]] = 254
    ties = np.full(32, -1, np.int64)
    count = njit(cjmp._note_ties)(low_bytes.view(np.uint64), size, ties)
    assert ties[:count].tolist() == tied


def test_a_run_through_the_cli_writes_the_python_rounds_losses(tmp_path, new_mlflow_store, monkeypatch):
    """`python -m pipeline run` of full_gd (P_vec, 2 shards, compiled) writes, bit for bit, the
    losses of the same run on the Python path (where no shard finds a compiled twin). On Ray
    the compiled rounds give the local ones: tests/test_engine.py's full_gd and full_phased
    cases, bit-identical for any shards and both backends."""
    tree = _tree(n_users=30_000, dim=10, block_size=4096, shards=2)
    tree["optimizer"]["rounds"] = 4

    def run(name: str) -> np.ndarray:
        tree["tracking"] = {"mlflow_uri": new_mlflow_store(tmp_path / name / "mlflow.db"),
                            "out": str(tmp_path / name / "out")}
        path = tmp_path / name / "grid.yaml"
        path.write_text(yaml.safe_dump(tree))
        assert cli.main(["run", str(path)]) == 0
        rounds = pd.read_parquet(tmp_path / name / "out" / "rounds.parquet").sort_values("round")
        return rounds[["excess_loss", "population_loss"]].to_numpy()

    with monkeypatch.context() as python_path:
        python_path.setattr(fused, "interactive_rounds", lambda shard: None)
        want = run("python")
    got = run("compiled")
    assert len(got) == 4
    assert np.array_equal(got, want)
