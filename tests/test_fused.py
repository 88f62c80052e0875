"""The fused sequential rounds are a twin of the Python rounds (issue #28, item 1): numba's
Philox, uniforms and binomials are numpy's draw for draw, the pairwise sum is numpy's, and
every fused round of P_SGD with P_vec on the quadratic equals the Python round bit for bit,
through the engine and through `python -m pipeline run`; everything else keeps Python."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import yaml
from numba import njit

from oracles import problems as problem_oracle
from pipeline import cli, config, draws, planning, twins
from pipeline.engine import fused
from pipeline import compiled as philox  # its generator part
from pipeline.numerics import pairwise_sum
from pipeline.draws import TAPE_RAWS
from pipeline.engine.layout import DATA_STREAM, counter, run_key, stream
from pipeline.engine.shard import Shard
from pipeline.errors import NonFiniteError
from pipeline.optimizers.seq_sgd import SeqSGD
from pipeline.problems.base import draw_key
from pipeline.problems.quadratic import Quadratic
from pipeline.protocols.cjmp import CjmpVec


def _tree(n_users: int, dim: int, block_size: int, batch_size: int | None = None, accounting: str = "tight",
          seed: int = 0, name: str = "seq_sgd", protocol: str | None = None, epsilon: float = 1.0,
          levels: int | None = None, messages: int | None = None, problem: str = "quadratic",
          **optimizer) -> dict:
    options = {key: value for key, value in (("levels", levels), ("messages", messages)) if value}
    return {"experiment": "fused", "problem": {"name": problem, "dim": dim, "radius": 1.0},
            "n_users": n_users,
            "optimizer": {"name": name, **({"batch_size": batch_size} if batch_size else {}), **optimizer},
            "privacy": {"epsilon": epsilon, "delta": 1e-6, "accounting": accounting,
                        **({"protocol": protocol} if protocol else {}), **options}, "seeds": [seed],
            "execution": {"backend": "local", "shards": 1, "block_size": block_size}}


def _job(tree: dict):
    (run_config,) = config.expand(tree)
    return planning.plan_run(run_config).job


def _bits(record) -> tuple:
    """A record's fields but its time and parameters, floats as their exact bits (NaN included)."""
    return tuple(value.hex() if isinstance(value, float) else value for name, value in record._asdict().items()
                 if name not in ("seconds", "params"))


def _rounds(job, start: int, fused_path: bool):
    """Rounds [start, rounds) on one shard holding every user, from the Python path's state at `start`."""
    shard = Shard(job, 0, job.layout.n_blocks)
    state, _ = shard.python_rounds(job.optimizer.start(job.seed), 0, start)
    run = shard.run_rounds if fused_path else shard.python_rounds
    return run(state, start, job.schedule.rounds)


# --- the generator ------------------------------------------------------------------------------

@njit
def _draws(state, key, start, kinds, trials, probabilities):
    """Draws of each kind in order: 0 a raw output, 1 a uniform double, 2 a binomial, 3 a
    standard normal, 4 a standard normal of standard_normals, 5 a 32-bit draw, 6 a bounded
    integer below trials[index], 7 a Poisson of mean probabilities[index]."""
    philox.rekey(state, key, start)
    out = np.empty(kinds.size)
    one = np.empty(1)
    for index in range(kinds.size):
        if kinds[index] == 0:
            out[index] = np.float64(philox.next_uint64(state) >> np.uint64(11))  # exact in a double
        elif kinds[index] == 1:
            out[index] = philox.next_double(state)
        elif kinds[index] == 3:
            out[index] = philox.standard_normal(state)
        elif kinds[index] == 4:
            philox.standard_normals(state, one, 1)
            out[index] = one[0]
        elif kinds[index] == 5:
            out[index] = np.float64(philox.next_uint32(state))
        elif kinds[index] == 6:
            out[index] = np.float64(philox.bounded(state, trials[index]))
        elif kinds[index] == 7:
            out[index] = np.float64(philox.poisson(state, probabilities[index]))
        else:
            out[index] = philox.binomial(state, trials[index], probabilities[index])
    return out


# (n, p) of every branch of numpy's binomial: inversion (n·p ≤ 30), BTPE, each for p > ½ too, and n = 0, p = 0.
BINOMIALS = [(5, 0.3), (100, 0.2), (60, 0.9), (1000, 0.3), (10**12 + 1, 0.4), (2**56, 0.01), (400, 0.75),
             (10**9, 0.999), (0, 0.5), (17, 0.0), (3, 1.0)]


@pytest.mark.parametrize("start", [counter(1, 0, 0), counter(5, 977, 3), np.array([2**64 - 3, 1, 2, 3], np.uint64)])
def test_philox_uniforms_and_binomials_are_numpys_draw_for_draw(start):
    key = run_key(11)
    pick = np.random.default_rng(1)
    cases = pick.integers(len(BINOMIALS), size=400)
    kinds = pick.integers(5, size=400)
    trials = np.array([BINOMIALS[case][0] for case in cases], np.int64)
    probabilities = np.array([BINOMIALS[case][1] for case in cases])
    got = _draws(np.zeros(philox.STATE_WORDS, np.uint64), key, start.copy(), kinds, trials, probabilities)
    reference = np.random.Generator(np.random.Philox(key=key, counter=start))
    want = [float(reference.bit_generator.random_raw() >> 11) if kind == 0 else reference.random() if kind == 1
            else reference.standard_normal() if kind >= 3 else float(reference.binomial(n, p))
            for kind, n, p in zip(kinds, trials, probabilities)]
    assert np.array_equal(got, want)


# Means of every branch of numpy's Poisson: none (0), the product of uniforms (below 10, up to
# its edge), PTRS (10 on: its squeeze, its log-gamma test, candidates below 0 near 10) and large means.
POISSON_MEANS = [0.0, 1e-300, 1e-3, 0.5, 3.7, 9.999999, 10.0, 10.5, 37.2, 1000.0, 2.5e6, 4e15]


@pytest.mark.parametrize("start", [counter(3, 0, 0), np.array([2**64 - 2, 7, 0, 1], np.uint64)])
def test_poissons_are_numpys_draw_for_draw_between_the_other_draws(start):
    """compiled.poisson (pipeline.draws.poisson) is `Generator.poisson` draw for draw on every
    branch, and leaves the stream where numpy's leaves it (uniforms and raw outputs between)."""
    key = run_key(13)
    pick = np.random.default_rng(3)
    kinds = pick.choice([0, 1, 7, 7, 7], size=3000)
    means = np.array(POISSON_MEANS)[pick.integers(len(POISSON_MEANS), size=3000)]
    got = _draws(np.zeros(philox.STATE_WORDS, np.uint64), key, start.copy(), kinds, np.zeros(3000, np.int64), means)
    reference = np.random.Generator(np.random.Philox(key=key, counter=start))
    want = [float(reference.bit_generator.random_raw() >> 11) if kind == 0 else reference.random() if kind == 1
            else float(reference.poisson(mean)) for kind, mean in zip(kinds, means)]
    assert np.array_equal(got, want)
    # fill_poisson in bulk, each branch: PTRS's candidates in (−1, 0) come about 3·10⁻⁵ a draw at
    # mean 10, which numpy's floor rejects and truncation toward 0 would test (numba's own port).
    state = np.zeros(philox.STATE_WORDS, np.uint64)
    philox.rekey(state, key, start.copy())
    reference = np.random.Generator(np.random.Philox(key=key, counter=start))
    for mean, size in ((10.0, 10**6), (3.7, 10**4), (0.0, 5), (2.5e6, 10**4)):
        out = np.empty(size, np.int64)
        _fill_poisson(state, mean, out)
        assert np.array_equal(out, reference.poisson(mean, size)), mean
    assert philox.next_double(state) == reference.random()  # the stream left where numpy leaves it


@njit
def _fill_poisson(state, mean, out):
    philox.fill_poisson(state, mean, out)


# Bounds of Generator.integers(0, bound): no draw (1), powers of two, Lemire's rejection
# likely (just above 2³¹) and the largest 32-bit one.
BOUNDS = [1, 2, 3, 10, 16, 1000, 2**31 + 1, 3 * 2**30, 2**32 - 1]


def test_32_bit_draws_and_bounded_integers_are_numpys_interleaved_with_the_others():
    """numpy's integers below 2³² take the low half of a raw output, then its high half at the
    next 32-bit draw, whatever 64-bit draws come between: both sides keep the half waiting."""
    key, start = run_key(12), counter(2, 5, 1)
    pick = np.random.default_rng(2)
    kinds = pick.choice([0, 1, 5, 6, 6, 6], size=2000)
    bounds = np.array(BOUNDS, np.int64)[pick.integers(len(BOUNDS), size=2000)]
    got = _draws(np.zeros(philox.STATE_WORDS, np.uint64), key, start.copy(), kinds, bounds, np.zeros(2000))
    reference = np.random.Generator(np.random.Philox(key=key, counter=start))
    want = [float(reference.bit_generator.random_raw() >> 11) if kind == 0 else reference.random() if kind == 1
            else float(reference.integers(0, 2**32)) if kind == 5 else float(reference.integers(0, bound))
            for kind, bound in zip(kinds, bounds)]
    assert np.array_equal(got, want)
    rejected = np.random.Generator(np.random.Philox(key=key, counter=start))
    rejected.integers(0, 2**31 + 1, size=1000)  # about half of the 32-bit draws are rejected
    assert rejected.bit_generator.state["state"]["counter"][0] > 1000 // 8 * 1.5


@pytest.mark.parametrize("bound", [1, 2, 3, 7, 1000, 2**31 + 1, 2**32 - 1])
@pytest.mark.parametrize("count", [0, 1, 2, 5, 64, 1001])
@pytest.mark.parametrize("before", ["nothing", "a 32-bit draw", "a raw output"])
def test_bulk_bounded_integers_are_numpys_and_leave_its_state(bound, count, before):
    """fill_bounded (pipeline.draws.fill_integers): `integers(0, bound, size=count)` in bulk, from a
    generator holding a high half (after one 32-bit draw) or not, with rejections (2³¹ + 1: about
    half of the draws) and a tape of 3 raw outputs (refilled mid-draw): numpy's integers, and the
    same stream after them (the next 32-bit and raw draws agree)."""
    key, start = run_key(13), counter(4, 2, 9)
    reference = np.random.Generator(np.random.Philox(key=key, counter=start))
    state = draws.state_words(reference)
    if before == "a 32-bit draw":
        reference.integers(0, 2**32)
        philox.next_uint32(state)
    elif before == "a raw output":
        reference.bit_generator.random_raw()
        philox.next_uint64(state)
    got = np.full(count, -1, np.int64)
    philox.fill_bounded(state, bound, got, np.empty(3, np.uint64))
    assert np.array_equal(got, reference.integers(0, bound, size=count))
    assert philox.next_uint32(state) == reference.integers(0, 2**32)
    assert philox.next_uint64(state) == reference.bit_generator.random_raw()


@pytest.mark.parametrize("taken", [0, 1, 3, 4])
@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 8, 9, 1001])
@pytest.mark.parametrize("start", [counter(1, 0, 0), np.array([2**64 - 2, 2**64 - 1, 7, 0], np.uint64)])
def test_fill_raw_is_numpys_random_raw_from_any_buffer_position(taken, count, start):
    """After `taken` single draws (the buffer part spent), `count` raw outputs in bulk, then single
    draws again: numpy's raw outputs, in order, also when the counter carries across words."""
    key = run_key(4)
    state = np.zeros(philox.STATE_WORDS, np.uint64)
    philox.rekey(state, key, start.copy())
    got = [philox.next_uint64(state) for _ in range(taken)]
    bulk = np.zeros(count + 2, np.uint64)
    philox.fill_raw(state, bulk, count)
    got += [*bulk[:count], philox.next_uint64(state), philox.next_uint64(state)]
    want = np.random.Philox(key=key, counter=start).random_raw(taken + count + 2)
    assert np.array_equal(np.array(got, np.uint64), want)
    assert not bulk[count:].any()  # nothing past `count` written


@pytest.mark.parametrize("kind", [3, 4])
def test_standard_normals_are_numpys_in_every_branch_of_the_ziggurat(kind):
    """2·10⁵ normals, numpy's and ours from one stream (standard_normal, or standard_normals
    one at a time and all at once): about 2,000 take the wedge test and 50 the tail (layer 0
    outside its box), whose two uniforms and sign bit must match too."""
    count = 200_000
    key, start = run_key(3), counter(1, 2, 3)
    got = _draws(np.zeros(philox.STATE_WORDS, np.uint64), key, start.copy(), np.full(count, kind),
                 np.zeros(count, np.int64), np.zeros(count))
    want = np.random.Generator(np.random.Philox(key=key, counter=start)).standard_normal(count)
    assert np.array_equal(got, want)
    assert np.abs(want).max() > 3.6541528853610088  # beyond the tail's start r: the tail branch ran
    if kind == 4:
        state, bulk = np.zeros(philox.STATE_WORDS, np.uint64), np.empty(count)
        philox.rekey(state, key, start.copy())
        philox.standard_normals(state, bulk, count)
        assert np.array_equal(bulk, want)


def _raws_taken(draw, key: tuple) -> int:
    """How many raw outputs `draw(generator)` takes from a new generator of the stream `key` of run 0."""
    generator = stream(0, *key)
    draw(generator)
    after = generator.bit_generator.state
    blocks = int(after["state"]["counter"][0])  # word 0 counts the stream's blocks of four from 0
    return 4 * blocks - (4 - after["buffer_pos"])


@pytest.mark.parametrize("count, tape", [(0, TAPE_RAWS), (1, 1), (7, TAPE_RAWS), (10_000, 1), (10_002, 8),
                                         (10_000, 4096), (200_000, TAPE_RAWS)])
def test_compiled_normals_are_numpys_on_the_tape_and_past_it(count, tape):
    """The quadratic's normals (its twin's draw: its `sample` and the fused path's): the compiled
    draw gives numpy's standard_normal bit for bit, and leaves the stream where numpy leaves it,
    whatever the tape: with a tape of one raw output every rejection of the ziggurat's box draws
    its further raw outputs past the tape (numpy takes more raw outputs than normals, so some do)."""
    key = (5, count)
    reference = stream(0, *key)
    want = reference.standard_normal(count)
    state = draws.state_words(stream(0, *key))
    got = np.empty(count)
    philox.normals(state, got, np.empty(tape, np.uint64))
    assert np.array_equal(got, want)
    after = np.zeros(4, np.uint64)  # the stream after both: the next raw outputs agree
    for index in range(4):
        after[index] = philox.next_uint64(state)
    assert np.array_equal(after, reference.bit_generator.random_raw(4))
    if count >= 10_000:
        assert _raws_taken(lambda generator: generator.standard_normal(count), key) > count


@pytest.mark.parametrize("problem", ["quadratic", "absolute", "elastic", "bernoulli"])
@pytest.mark.parametrize("n_users, dim, block_size", [(5_000, 10, 1024), (4_097, 3, 1024), (300, 1, 64),
                                                      (20_000, 2, 16_384)])
def test_the_fused_path_draws_the_users_of_draw_block(n_users, dim, block_size, problem):
    """Both paths' users of every block are numpy's (the oracle's) on the block's own stream: blocks
    whole and partial (4,097 users: a last block of one user; 16,384 · 2 values: more than a tape
    of raw outputs), the quadratic's normals and the finite problems' choices."""
    job = _job(_tree(n_users=n_users, dim=dim, block_size=block_size, problem=problem))
    shard = Shard(job, 0, job.layout.n_blocks)
    rounds = fused.FusedRounds(shard)
    for block in range(job.layout.n_blocks):
        first, stop = job.layout.block_users(block)
        want = problem_oracle.sample(job.problem, stream(job.seed, DATA_STREAM, block), stop - first)
        assert np.array_equal(rounds.draw_block(block), want), block
        assert np.array_equal(shard.draw_block(block), want), block


_compiled_pairwise_sum = njit(pairwise_sum)  # numerics' sum, as the kernels compile it


@pytest.mark.parametrize("length", [*range(0, 140), 255, 256, 257, 1000, 4097, 65539])
def test_pairwise_sum_is_numpys(length):
    values = np.random.default_rng(length).standard_normal(length) ** 2
    assert _compiled_pairwise_sum(values, 0, length) == np.add.reduce(values)


# --- the rounds -------------------------------------------------------------------------------

CASES = {
    "one block": dict(n_users=20_000, dim=10, block_size=4096),
    "batches straddling blocks": dict(n_users=6_000, dim=10, block_size=100),
    "batch over three blocks": dict(n_users=3_000, dim=3, block_size=64, batch_size=150),
    "several chunks a round (d = 100)": dict(n_users=20_000, dim=100, block_size=4096, batch_size=2000),
    "paper accounting": dict(n_users=5_000, dim=3, block_size=64, accounting="paper", seed=3),
    "projection active": dict(n_users=4_000, dim=2, block_size=512, batch_size=4, step_size=5.0, seed=2),
    "seq_agd (paper)": dict(n_users=20_000, dim=10, block_size=1000, name="seq_agd"),
    "seq_agd (calibrated), batches straddling blocks": dict(n_users=6_000, dim=3, block_size=100, name="seq_agd",
                                                            parameters="calibrated", seed=4),
    "seq_agd, projection active": dict(n_users=4_000, dim=2, block_size=512, batch_size=4, rounds=200,
                                       name="seq_agd", parameters="calibrated", seed=1),
    "central_gaussian": dict(n_users=20_000, dim=10, block_size=4096, protocol="central_gaussian"),
    "shuffle_gaussian, batches straddling blocks": dict(n_users=6_000, dim=3, block_size=100,
                                                        protocol="shuffle_gaussian", seed=5),
    "none, several chunks a round (d = 100)": dict(n_users=20_000, dim=100, block_size=4096, batch_size=2000,
                                                  protocol="none"),
    "shuffle_gaussian, batch over three blocks, paper": dict(n_users=3_000, dim=3, block_size=64, batch_size=150,
                                                             protocol="shuffle_gaussian", accounting="paper"),
    "central_gaussian, projection active": dict(n_users=4_000, dim=2, block_size=512, batch_size=4, step_size=5.0,
                                                protocol="central_gaussian", seed=2),
    "local_l2": dict(n_users=20_000, dim=10, block_size=4096, protocol="local_l2"),
    # 64 = 3·21 + 1: a round every 64 users holds one user of a block, a chunk of one column.
    "local_l2, one-user segments, paper": dict(n_users=3_000, dim=3, block_size=64, batch_size=21,
                                               protocol="local_l2", accounting="paper", seed=7),
    "local_l2, several chunks a round (d = 100)": dict(n_users=20_000, dim=100, block_size=4096, batch_size=2000,
                                                       protocol="local_l2"),
    "seq_agd, local_l2": dict(n_users=20_000, dim=10, block_size=1000, name="seq_agd", protocol="local_l2", seed=8),
    "seq_agd, shuffle_gaussian": dict(n_users=20_000, dim=10, block_size=1000, name="seq_agd",
                                      protocol="shuffle_gaussian", seed=6),
    "seq_phased": dict(n_users=20_000, dim=10, block_size=1000, name="seq_phased"),
    "seq_phased, phases of a few rounds, central_gaussian": dict(n_users=3_000, dim=3, block_size=256,
                                                                 name="seq_phased", protocol="central_gaussian",
                                                                 seed=7),
    # Girgis: d = 10 with s = 10 (a = 1, no index drawn), s = 3 (a = 4, padding to 12), the
    # rotation to d_pad = 16 with s = 10 (a = 2, padding to 20), several bit planes, d = 1.
    "girgis_linf": dict(n_users=6_000, dim=10, block_size=1000, protocol="girgis_linf", accounting="paper"),
    "girgis_linf, 3 messages, 3 levels, straddling blocks": dict(n_users=3_000, dim=10, block_size=100,
                                                                 protocol="girgis_linf", messages=3, levels=3, seed=9),
    "girgis_l2": dict(n_users=6_000, dim=10, block_size=1000, protocol="girgis_l2", accounting="paper", seed=2),
    "girgis_l2, 4 levels, seq_agd": dict(n_users=6_000, dim=5, block_size=512, protocol="girgis_l2", levels=4,
                                         name="seq_agd", accounting="paper", seed=3),
    "girgis_l2, d = 1, one-user segments": dict(n_users=1_500, dim=1, block_size=64, batch_size=21,
                                                protocol="girgis_l2", levels=2, accounting="paper", seed=4),
    "girgis_l1": dict(n_users=6_000, dim=10, block_size=1000, protocol="girgis_l1", accounting="paper", seed=5),
    # d = 9 ≥ 8: a one-user chunk's ℓ1 norm is summed in order (numerics.column_sums), not pairwise.
    "girgis_l1, d = 9, one-user segments, seq_agd": dict(n_users=3_000, dim=9, block_size=64, batch_size=21,
                                                        protocol="girgis_l1", name="seq_agd", accounting="paper",
                                                        seed=6),
    "pan_agd (central_gaussian, fixed noise)": dict(n_users=20_000, dim=10, block_size=1000, name="pan_agd",
                                                    protocol="central_gaussian", epsilon=0.5, accounting="paper"),
    # The finite problems (fused_problem): sign(θ − x) (+ λθ), whose P_vec bytes tie often, the
    # Moreau envelope's β(θ − prox θ) (seq_agd_smoothed, both priced), and the losses' weighted sums.
    "absolute": dict(n_users=20_000, dim=10, block_size=4096, problem="absolute"),
    "absolute, seq_agd_smoothed (paper)": dict(n_users=20_000, dim=5, block_size=1000, problem="absolute",
                                               name="seq_agd_smoothed", accounting="paper", seed=1),
    "absolute, seq_agd_smoothed (calibrated), d = 1, one-user segments": dict(
        n_users=3_000, dim=1, block_size=64, batch_size=21, problem="absolute", name="seq_agd_smoothed",
        parameters="calibrated", seed=2),
    "elastic, shuffle_gaussian, batches straddling blocks": dict(n_users=6_000, dim=3, block_size=100,
                                                                 problem="elastic", protocol="shuffle_gaussian",
                                                                 seed=3),
    "elastic, seq_agd_smoothed (calibrated), local_l2": dict(n_users=20_000, dim=10, block_size=1000,
                                                             problem="elastic", name="seq_agd_smoothed",
                                                             parameters="calibrated", protocol="local_l2", seed=4),
    "elastic, seq_agd_smoothed, girgis_l2, several chunks a round (d = 100)": dict(
        n_users=20_000, dim=100, block_size=4096, batch_size=2000, problem="elastic", name="seq_agd_smoothed",
        protocol="girgis_l2", accounting="paper", seed=5),
    "bernoulli (seq_agd)": dict(n_users=20_000, dim=10, block_size=4096, problem="bernoulli", name="seq_agd", seed=7),
    "bernoulli, seq_sgd, local_l2, batches straddling blocks": dict(n_users=6_000, dim=3, block_size=100,
                                                                    problem="bernoulli", protocol="local_l2", seed=8),
    # pnsgd: a user a step, the curator's noise, the last iterate (a step past the ball's edge projected).
    "pnsgd (central_gaussian), paper": dict(n_users=3_000, dim=3, block_size=256, name="pnsgd",
                                            protocol="central_gaussian", accounting="paper", seed=9),
    "pnsgd, bernoulli, tight": dict(n_users=3_000, dim=10, block_size=1000, problem="bernoulli", name="pnsgd",
                                    protocol="central_gaussian", seed=10),
    "elastic, seq_phased, girgis_linf": dict(n_users=6_000, dim=5, block_size=512, problem="elastic",
                                              name="seq_phased", protocol="girgis_linf", accounting="paper", seed=6),
    # Fully interactive rounds on one shard (every user every round, held for the run): carried in one
    # kernel call (stride 0), each round's blocks encoded from their own streams, then analyzed.
    "full_gd (P_vec), blocks of 256": dict(n_users=3_000, dim=3, block_size=256, name="full_gd", rounds=12),
    "full_gd, central_gaussian": dict(n_users=2_000, dim=10, block_size=512, name="full_gd", rounds=12,
                                      protocol="central_gaussian", seed=11),
    "full_gd, local_l2, absolute": dict(n_users=2_000, dim=3, block_size=100, name="full_gd", rounds=10,
                                        protocol="local_l2", problem="absolute", seed=12),
    "full_gd, girgis_l2, elastic": dict(n_users=1_500, dim=5, block_size=512, name="full_gd", rounds=10,
                                        protocol="girgis_l2", problem="elastic", seed=13),
    "full_phased (shuffle_gaussian)": dict(n_users=3_000, dim=3, block_size=256, name="full_phased",
                                           protocol="shuffle_gaussian", seed=14),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("start", [0, 7])
def test_fused_rounds_equal_the_python_rounds_round_by_round(case, start):
    job = _job(_tree(**CASES[case]))
    assert fused.fusable(job)
    python_state, python_records = _rounds(job, start, fused_path=False)
    fused_state, fused_records = _rounds(job, start, fused_path=True)
    assert len(fused_records) == len(python_records) == job.schedule.rounds - start
    for python_record, fused_record in zip(python_records, fused_records):
        assert _bits(fused_record) == _bits(python_record), python_record.round
        assert fused_record.params is python_record.params
    _assert_same_state(fused_state, python_state)


def _assert_same_state(fused_state, python_state, where: str = "state") -> None:
    """The same state type and the same bits in every field, nested states (seq_phased's) included."""
    assert type(fused_state) is type(python_state), where
    if isinstance(python_state, tuple):
        for field, fused_value, python_value in zip(python_state._fields, fused_state, python_state):
            _assert_same_state(fused_value, python_value, f"{where}.{field}")
    else:
        assert np.array_equal(fused_state, python_state), where


def test_girgis_calls_the_kernel_does_not_twin_keep_the_python_path():
    """Sampled users, record level and the binary randomizer have no fused encoding."""
    from pipeline.protocols import build_protocol, girgis
    from pipeline.protocols.multi_message import GirgisCall

    l2 = girgis.plan_girgis("l2", 100, 5, 1.0, 2.0)
    assert build_protocol("girgis_l2", "paper").fused_encoding(GirgisCall(l2, 100, 100, "all", 0.0)) is not None
    assert build_protocol("girgis_l2", "paper").fused_encoding(GirgisCall(l2, 100, 200, "poisson", 0.5)) is None
    assert build_protocol("girgis_l2", "paper").fused_encoding(GirgisCall(l2, 100, 100, "all", 0.0, 2, 3)) is None
    binary = girgis.plan_girgis("binary", 100, 5, 1.0, 2.0)
    assert build_protocol("girgis_binary", "paper").fused_encoding(GirgisCall(binary, 100, 100, "all", 0.0)) is None


@pytest.mark.parametrize("case", ["projection active", "seq_agd, projection active"])
def test_the_projection_case_projects(case):
    """The projection cases take the ball projection's shrinking branch (else they would test nothing more)."""
    job = _job(_tree(**CASES[case]))
    state = job.optimizer.start(job.seed)
    shard = Shard(job, 0, job.layout.n_blocks)
    norms = []
    for round_index in range(job.schedule.rounds):
        state, _ = shard.python_rounds(state, round_index, round_index + 1)
        norms.append(np.sqrt(np.add.reduce(state.theta * state.theta)))
    assert np.isclose(max(norms), job.problem.radius, rtol=1e-12, atol=0)


def test_the_one_user_case_has_rounds_with_one_user_in_a_block():
    """Its rounds of 21 users straddle blocks of 64 with one user on one side: a one-column chunk."""
    job = _job(_tree(**CASES["local_l2, one-user segments, paper"]))
    (group,) = job.schedule.groups
    firsts = range(group.first_user, group.first_user + group.rounds * group.users, group.users)
    heads = {job.block_size - first % job.block_size for first in firsts}  # a round's users in its first block
    assert group.users == 21 and 1 in heads and group.users - 1 in heads  # a last user alone, a first user alone


@pytest.mark.parametrize("protocol", ["cjmp_vec", "shuffle_gaussian", "central_gaussian", "local_l2"])
def test_a_non_finite_gradient_fails_the_fused_run_as_the_python_run(monkeypatch, protocol):
    job = _job(_tree(n_users=2_000, dim=3, block_size=256, batch_size=20, protocol=protocol))
    assert fused.fusable(job)
    def poisoned(data: np.ndarray, block: int) -> np.ndarray:
        if block == 1:
            data[2, 45] = np.nan  # user 256 + 45 = 301, in round 15
        return data

    # The fused rounds draw their blocks themselves (the same users: tested above); the Python
    # round they run to name the failure draws with the shard.
    shard_draw, fused_draw = Shard.draw_block, fused.FusedRounds.draw_block
    monkeypatch.setattr(Shard, "draw_block", lambda shard, block: poisoned(shard_draw(shard, block), block))
    monkeypatch.setattr(fused.FusedRounds, "draw_block", lambda rounds, block: poisoned(fused_draw(rounds, block), block))
    errors = []
    for fused_path in (False, True):
        shard = Shard(job, 0, job.layout.n_blocks)
        run = shard.run_rounds if fused_path else shard.python_rounds
        with pytest.raises(NonFiniteError) as error:
            run(job.optimizer.start(job.seed), 0, job.schedule.rounds)
        errors.append(str(error.value))
    assert errors[1] == errors[0] == "round 15: user 301's gradient holds NaN"


@dataclasses.dataclass(frozen=True)
class _OwnQuadratic(Quadratic):
    name: ClassVar[str] = "own_quadratic"

    def gradients(self, theta, data, out=None):
        return Quadratic.gradients(self, theta, data, out)


class _RenamedQuadratic(Quadratic):
    """A subclass that changes nothing the compiled twin reproduces: it inherits the twin."""

    name: ClassVar[str] = "renamed_quadratic"


@dataclasses.dataclass(frozen=True)
class _OwnSeqSGD(SeqSGD):
    def update(self, state, noisy_mean):
        return SeqSGD.update(self, state, noisy_mean)


class _OwnPvec(CjmpVec):
    def encode_block(self, params, chunks, rng, work=None):
        return CjmpVec.encode_block(self, params, chunks, rng, work)


def _changed(job, what: str):
    if what == "problem subclass":
        return dataclasses.replace(job, problem=_OwnQuadratic(job.problem.dim, job.problem.radius))
    if what == "optimizer subclass":
        return dataclasses.replace(job, optimizer=_OwnSeqSGD(**{field.name: getattr(job.optimizer, field.name)
                                                              for field in dataclasses.fields(job.optimizer)}))
    if what == "protocol subclass":
        return dataclasses.replace(job, protocol=_OwnPvec(job.protocol.accounting))
    return job


@pytest.mark.parametrize("what", ["problem subclass", "optimizer subclass", "protocol subclass"])
def test_a_subclass_that_overrides_what_the_twin_reproduces_keeps_the_python_path(what):
    job = _job(_tree(n_users=2_000, dim=3, block_size=256))
    assert fused.fusable(job)
    assert not fused.fusable(_changed(job, what))


def test_a_subclass_that_overrides_nothing_the_twin_reproduces_inherits_it_bit_for_bit():
    """pipeline.twins.keeps_twin: no list of types; the renamed problem's fused rounds are its Python rounds."""
    job = _job(_tree(n_users=2_000, dim=3, block_size=256))
    renamed = dataclasses.replace(job, problem=_RenamedQuadratic(job.problem.dim, job.problem.radius))
    assert fused.fusable(renamed)
    fused_state, fused_records = _rounds(renamed, 1, fused_path=True)
    python_state, python_records = _rounds(renamed, 1, fused_path=False)
    assert [_bits(record) for record in fused_records] == [_bits(record) for record in python_records]
    assert np.array_equal(fused_state.theta, python_state.theta)


@pytest.mark.parametrize("change", [
    {"privacy": {"epsilon": 1.0, "delta": 1e-6, "honest_fraction": 0.9}},
    {"optimizer": {"name": "dp_sgd", "batch_size": 100, "rounds": 3},  # Poisson-sampled rounds
     "privacy": {"protocol": "central_gaussian", "epsilon": 1.0, "delta": 1e-6}},
    {"optimizer": {"name": "seq_agd_smoothed"}},  # the quadratic's envelope has no twin
    {"execution": {"backend": "local", "shards": 1, "block_size": 256, "simulation": "literal"}},
    {"problem": {"name": "logistic", "dim": 3}},  # numpy's SIMD exp and log are not libm's
    {"problem": {"name": "lb_convex", "dim": 3}},
    # A thousand big tree nodes at 10⁹ users, not millions of small rounds (README, "frank_wolfe_l1 at 10⁹ users")
    {"problem": {"name": "l1_least_squares", "dim": 3, "radius": 1.0}, "optimizer": {"name": "frank_wolfe_l1"},
     "privacy": {"model": "central", "protocol": "report_noisy_max", "epsilon": 1.0, "delta": 1e-6}},
])
def test_other_runs_keep_the_python_path(change):
    tree = _tree(n_users=2_000, dim=3, block_size=256)
    tree.update(change)
    assert not fused.fusable(_job(tree))


@pytest.mark.parametrize("name, protocol", [("seq_sgd", None), ("seq_agd", None), ("seq_sgd", "shuffle_gaussian"),
                                            ("seq_sgd", "local_l2")])
def test_a_grid_through_the_cli_writes_the_python_rounds_losses(tmp_path, new_mlflow_store, name, protocol):
    """`python -m pipeline run` (2 shards, fused) writes, bit for bit, the losses of the Python rounds."""
    tree = _tree(n_users=30_000, dim=10, block_size=1024, name=name, protocol=protocol)
    assert fused.fusable(_job(tree))
    tree["execution"]["shards"] = 2
    tree["tracking"] = {"mlflow_uri": new_mlflow_store(tmp_path / "mlflow.db"), "out": str(tmp_path / "out")}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(tree))
    assert cli.main(["run", str(path)]) == 0
    rounds = pd.read_parquet(Path(tmp_path / "out" / "rounds.parquet")).sort_values("round")
    _, records = _rounds(_job(_tree(n_users=30_000, dim=10, block_size=1024, name=name, protocol=protocol)), 0,
                         fused_path=False)
    assert len(rounds) == len(records) == 30_000 // _job(tree).optimizer.batch_size
    assert np.array_equal(rounds["excess_loss"].to_numpy(), [record.excess_loss for record in records])
    assert np.array_equal(rounds["population_loss"].to_numpy(), [record.population_loss for record in records])


MOMENTUM = "experiments/plugins/momentum_sgd.py:MomentumSGD"


@pytest.mark.parametrize("protocol", ["cjmp_vec", "shuffle_gaussian"])
@pytest.mark.parametrize("momentum", [0.5, 0.9])
def test_a_plug_in_optimizers_stages_run_compiled_bit_for_bit(protocol, momentum):
    """Issue 42 item 3: experiments/plugins/momentum_sgd.py states its round as three stage
    functions written in the plug-in (Optimizer.compiled_update); with no package edit its rounds
    are fused, and every round equals its numpy `update` round bit for bit."""
    job = _job(_tree(n_users=3_000, dim=3, block_size=256, batch_size=50, protocol=protocol, name=MOMENTUM,
                     momentum=momentum))
    assert type(job.optimizer).__name__ == "MomentumSGD" and fused.fusable(job)
    fused_state, fused_records = _rounds(job, 1, fused_path=True)
    python_state, python_records = _rounds(job, 1, fused_path=False)
    assert len(fused_records) == job.schedule.rounds - 1 > 50
    assert [_bits(record) for record in fused_records] == [_bits(record) for record in python_records]
    for fused_vector, python_vector in zip(fused_state[:-1], python_state[:-1]):
        assert np.array_equal(fused_vector, python_vector)
    assert fused_state.steps == python_state.steps


ADAGRAD_NORM = "experiments/plugins/adagrad_norm.py:AdaGradNorm"


@pytest.mark.parametrize("protocol", ["cjmp_vec", "central_gaussian"])
def test_an_update_written_once_runs_the_same_in_python_and_compiled(protocol):
    """Issue 42 item 3: experiments/plugins/adagrad_norm.py's numpy `update` runs its own stage
    functions; the fused rounds compile the same functions: the two paths agree bit for bit, and
    the step size adapts (b²_t grows by ‖ḡ‖² a round)."""
    job = _job(_tree(n_users=3_000, dim=3, block_size=256, batch_size=50, protocol=protocol, name=ADAGRAD_NORM,
                     initial_accumulator=0.5))
    assert fused.fusable(job)
    fused_state, fused_records = _rounds(job, 1, fused_path=True)
    python_state, python_records = _rounds(job, 1, fused_path=False)
    assert [_bits(record) for record in fused_records] == [_bits(record) for record in python_records]
    for fused_vector, python_vector in zip(fused_state[:-1], python_state[:-1]):
        assert np.array_equal(fused_vector, python_vector)
    assert fused_state.steps == python_state.steps == job.schedule.rounds
    assert fused_state.accumulator[0] > 0.5 and np.all(fused_state.accumulator == fused_state.accumulator[0])


def test_a_new_pair_of_protocol_and_optimizer_stages_is_cached_only_once_it_has_run(tmp_path, monkeypatch):
    """kernels_cached(jobs): each (protocol kernel, optimizer's stages, twin) and each twin's draw compiles on its first use,
    so a grid is warned about (and warms) a pair no run has built yet, even when other kernels are
    cached; a pair's key changes with its stages' source, so an edited plug-in counts as new."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the markers' folder (numba's own was fixed at import)
    fused._MARKED.clear()
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "compiled.rounds-1.py311.nbi").touch()  # an index newer than the kernel's source
    agd = _job(_tree(n_users=2_000, dim=3, block_size=256, name="seq_agd"))
    assert fused.kernels_cached() and not fused.kernels_cached((agd,))
    _rounds(agd, 1, fused_path=True)
    assert fused.kernels_cached((agd,))
    draw_marker = fused._marker(draw_key(type(agd.problem.compiled_problem())))
    draw_marker.unlink()  # the users' draw (a kernel of its own, per twin) counts too
    assert not fused.kernels_cached((agd,))
    draw_marker.touch()
    assert not fused.kernels_cached((_job(_tree(n_users=2_000, dim=3, block_size=256, name="pnsgd",
                                                 protocol="central_gaussian")),))
    plugin = tmp_path / "my_adagrad.py"  # its chain has a transform of its own, in this file
    plugin.write_text((Path(__file__).resolve().parent.parent / "experiments/plugins/adagrad_norm.py").read_text())
    job = _job(_tree(n_users=2_000, dim=3, block_size=256, name=f"{plugin}:AdaGradNorm"))
    twin = job.problem.compiled_problem()
    encoding = job.protocol.fused_encoding(job.protocol.planned(job.schedule.plan(0), job.problem.dim))

    def key():
        return twins.stage_key("rounds", fused.kernel_functions(encoding, job.optimizer.compiled_update(), twin))

    before = key()
    plugin.write_text(plugin.read_text() + "\n# an edit\n")
    assert key() != before


_KERNEL_LOADS = """
from pipeline import config, engine, planning
from pipeline import compiled
tree = {"experiment": "loads", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 600,
        "optimizer": {"name": "seq_sgd"}, "seeds": [0], "execution": {"backend": "local", "shards": 1},
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "protocol": "cjmp_vec", "accounting": "tight"}}
(run,) = config.expand(tree)
engine.execute(planning.plan_run(run).job, "local", 1)
kernels = sorted(compiled._BUILT.items(), key=lambda item: item[0][0] == "draw")  # the round kernel, the users' draw
for _, kernel in kernels:
    print(sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()))
"""


def test_two_processes_saving_into_one_kernel_cache_at_once_keep_each_entry_its_own_code(tmp_path):
    """A numba index file holds an entry per signature (every round kernel's, before each had files
    of its own), and numba's own save reads the index, takes the first free data file and writes
    both, so two processes compiling different entries at once could leave one key naming the
    other's machine code (numba issues 4807, 10128): a crashed test worker in CI. Here writer a pauses between
    reading the index and writing it, while writer b saves: under the lock b waits, and both
    entries load their own code; without it, b's entry is lost or loads a's code."""
    import threading

    from pipeline.compiled import _LockedCacheFile

    def cache_file():
        return _LockedCacheFile(str(tmp_path), "rounds", "stamp")

    writer_a, writer_b = cache_file(), cache_file()
    a_read, b_saved = threading.Event(), threading.Event()
    read_index = writer_a._load_index

    def read_then_pause():
        overloads = read_index()
        a_read.set()
        b_saved.wait(timeout=1.0)  # b saves here unless the lock holds it back
        return overloads

    writer_a._load_index = read_then_pause
    a = threading.Thread(target=writer_a.save, args=("key a", "code a"))
    a.start()
    assert a_read.wait(timeout=30)
    b = threading.Thread(target=lambda: (writer_b.save("key b", "code b"), b_saved.set()))
    b.start()
    a.join(), b.join()
    reader = cache_file()
    assert (reader.load("key a"), reader.load("key b")) == ("code a", "code b")


def test_a_round_kernel_compiled_by_one_process_is_loaded_by_the_next():
    """A round kernel's (and the users' draw's) cache key is the same in every process (compiled._KeyedCache): numba's
    own key pickled the closure's dispatchers with a uuid per process, so each process (each shard
    of each run, each Ray worker) compiled it again, seconds each, while the grid said nothing."""
    import subprocess
    import sys

    loads = [subprocess.run([sys.executable, "-c", _KERNEL_LOADS], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parent.parent).stdout.split() for _ in range(2)]
    assert [sum(map(int, loads[0][at: at + 2])) for at in (0, 2)] == [1, 1]  # the first loaded or compiled each once
    assert loads[1] == ["1", "0", "1", "0"], loads  # the second loaded both: a hit, no miss each
