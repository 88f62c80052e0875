"""The engine: bit-identical results for any sharding and for local vs Ray,
each user answering once in sequential runs, and the trust boundary."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import engine
from pipeline.engine.local import LocalPool
from pipeline.optimizers import (PNSGD, CldpSGD, DpSGD, DssSGD, FrankWolfeL1, FullGD, FullPhased, MeanEstimation,
                                 MirrorDescentL1, SeqAGD, SeqPhased, SeqSGD)
from pipeline.engine.shard import Shard
from pipeline.problems import Elastic, L1LeastSquares, Quadratic
from pipeline.problems.smoothed import MoreauSmoothed
from pipeline.protocols import CjmpVec, build_protocol
from pipeline.protocols.cjmp import ShuffledCounts

PROBLEM = Quadratic(dim=3, radius=1.0)


def _job(optimizer, n, simulation="exact", block_size=128, seed=7, accounting="paper", protocol=None):
    return engine.RunJob(optimizer.problem, optimizer, protocol or CjmpVec(accounting), seed, n, block_size, simulation)


def _companion(cls, protocol_name, n, problem=PROBLEM, **overrides):
    """A companion optimizer on a tight-calibrated companion protocol."""
    protocol = build_protocol(protocol_name, "tight")
    optimizer = cls.from_config(problem, n, 2.0, 1e-5, accounting="tight", protocol=protocol, **overrides)
    return _job(optimizer, n, protocol=protocol)


def _jobs():
    """The cases, each built on first use (some calibrate their noise)."""
    n = 2000
    return {
        "mean_estimation": lambda: _job(MeanEstimation.from_config(PROBLEM, n, 2.0, 1e-5), n),
        # Batches of 37 straddle blocks of 128 and shard boundaries.
        "seq_sgd": lambda: _job(SeqSGD.from_config(PROBLEM, n, 2.0, 1e-5, batch_size=37), n),
        "full_gd": lambda: _job(FullGD.from_config(PROBLEM, n, 2.0, 1e-5, rounds=12), n),
        # Tight-calibrated P_vec and AC-SA's extrapolated queries.
        "seq_agd": lambda: _job(SeqAGD.from_config(PROBLEM, n, 2.0, 1e-5, batch_size=53, accounting="tight",
                                                   parameters="calibrated"), n, accounting="tight"),
        # Sampled rounds (uniform k of n, Poisson), central noise drawn after the merge,
        # fixed-point sums and integer histograms.
        "cldp_sgd": lambda: _companion(CldpSGD, "girgis_l2", n, batch_size=45),
        "dss_sgd": lambda: _companion(DssSGD, "shuffle_gaussian", n, batch_size=30),
        "dp_sgd": lambda: _companion(DpSGD, "central_gaussian", n, batch_size=40),
        "pnsgd": lambda: _companion(PNSGD, "central_gaussian", 500),
        "mirror_descent_l1": lambda: _companion(MirrorDescentL1, "central_gaussian", n,
                                                problem=L1LeastSquares(4, 1.0)),
        # Robust mode: a fresh half of each batch drops out (P_vec planned for the whole batch).
        "seq_sgd_robust": lambda: engine.RunJob(PROBLEM, SeqSGD.from_config(PROBLEM, n, 1.0, 1e-5, batch_size=37),
                                                CjmpVec(), 7, n, 128, honest_fraction=0.5),
        # Groups of users in turn, each fully interactive (tight P_vec).
        "full_phased": lambda: _job(FullPhased.from_config(PROBLEM, 600, 4.0, 1e-5, accounting="tight"), 600,
                                    accounting="tight"),
        # Phases of fresh users, each smoothing the loss with its own β.
        "seq_phased": lambda: _job(SeqPhased.from_config(Elastic(dim=3, radius=1.0), n, 2.0, 1e-5), n),
        # Two-point queries and the curator's own noise stream.
        "frank_wolfe_l1": lambda: _companion(FrankWolfeL1, "report_noisy_max", n, problem=L1LeastSquares(4, 1.0),
                                             batch_size=300),
    }


def _trace(job, backend, shards):
    state, records = engine.execute(job, backend, shards)
    return np.array([r.excess_loss for r in records]), job.optimizer.output(state)


SEED_000 = ("mean_estimation", "seq_sgd", "full_gd", "seq_agd")


def test_a_compiled_round_is_bit_identical_to_plain_actor_calls(ray_session, monkeypatch):
    """Fanned-out rounds run as a Ray Compiled Graph (a tree of merges among 3 shards),
    or as plain actor calls with SHUFFLE_SCO_COMPILED=0: the same run either way."""
    from pipeline.engine import ray_pool

    job = _jobs()["full_gd"]()
    compiled = _trace(job, "ray", 3)
    monkeypatch.setattr(ray_pool, "COMPILED", False)
    plain = _trace(job, "ray", 3)
    assert np.array_equal(compiled[0], plain[0]) and np.array_equal(compiled[1], plain[1])
    assert np.array_equal(compiled[0], _trace(job, "local", 1)[0])


@pytest.mark.parametrize("name", ["mean_estimation", "seq_sgd", "full_gd", "seq_agd", "cldp_sgd", "dss_sgd",
                                  "dp_sgd", "pnsgd", "mirror_descent_l1", "frank_wolfe_l1", "full_phased",
                                  "seq_phased", "seq_sgd_robust"])
def test_bit_identical_for_any_shards_and_local_vs_ray(ray_session, name):
    job = _jobs()[name]()
    reference_losses, reference_theta = _trace(job, "local", 1)
    assert np.all(np.isfinite(reference_losses))
    # Every case: 8 local shards (the sharded arithmetic) and 3 Ray actors (the transport); the
    # seed-000 cases 3 local shards too. A Ray actor costs about a second to start, so the
    # one-actor run and the 8 actors' tree of merges, three levels deep, run once each.
    splits = [("local", 8), ("ray", 3)] + ([("local", 3)] if name in SEED_000 else []) + {
        "full_gd": [("ray", 8)], "seq_agd": [("ray", 1)]}.get(name, [])
    for backend, shards in splits:
        losses, theta = _trace(job, backend, shards)
        assert np.array_equal(losses, reference_losses), (backend, shards)
        assert np.array_equal(theta, reference_theta), (backend, shards)


def test_different_seeds_give_different_runs():
    job = _jobs()["seq_sgd"]()
    other = engine.RunJob(job.problem, job.optimizer, job.protocol, 8, job.n_users, job.block_size)
    assert not np.array_equal(_trace(job, "local", 2)[0], _trace(other, "local", 2)[0])


class _CountingPool(LocalPool):
    """Counts, per user, how many rounds read that user's data (on the Python path: the fused
    rounds are its twin, checked round by round in tests/test_fused.py and
    tests/test_fused_interactive.py)."""

    def __init__(self, job, shards):
        super().__init__(job, shards)
        self.uses = np.zeros(job.n_users, dtype=int)
        for shard in self.shards:
            shard._fused = shard._interactive = False
            original = shard._input_chunks

            def spy(plan, theta, users, block, original=original, offset=shard.first_user):
                positions = np.arange(users.start, users.stop) if isinstance(users, slice) else users
                np.add.at(self.uses, positions + offset, 1)
                return original(plan, theta, users, block)

            shard._input_chunks = spy


def test_seq_sgd_uses_each_user_exactly_once():
    n = 1000
    optimizer = SeqSGD.from_config(PROBLEM, n, 1.0, 1e-6, batch_size=10)
    pool = _CountingPool(_job(optimizer, n, block_size=64), 3)
    _, records = pool.run()
    assert len(records) == optimizer.rounds == 100
    assert np.all(pool.uses == 1)
    # With n not a multiple of B the leftover users are never read (notes T14).
    optimizer = SeqSGD.from_config(PROBLEM, n, 1.0, 1e-6, batch_size=30)
    pool = _CountingPool(_job(optimizer, n, block_size=64), 3)
    pool.run()
    assert np.all(pool.uses[: 33 * 30] == 1) and np.all(pool.uses[33 * 30:] == 0)


def test_full_gd_reads_every_user_every_round():
    n = 300
    optimizer = FullGD.from_config(PROBLEM, n, 1.0, 1e-6, rounds=5)
    pool = _CountingPool(_job(optimizer, n, block_size=64), 2)
    pool.run()
    assert np.all(pool.uses == 5)


def test_full_phased_groups_are_disjoint_and_each_reads_its_users_every_round():
    n = 600
    optimizer = FullPhased.from_config(PROBLEM, n, 4.0, 1e-5, accounting="tight")
    pool = _CountingPool(_job(optimizer, n, block_size=64, accounting="tight"), 3)
    pool.run()
    first = 0
    for phase in optimizer.phases:
        assert np.all(pool.uses[first: first + phase.n_users] == phase.rounds)
        first += phase.n_users
    assert np.all(pool.uses[first:] == 0)


def test_users_send_the_gradient_of_their_phase_envelope():
    base, n = Elastic(dim=3, radius=1.0), 3000
    job = _job(SeqPhased.from_config(base, n, 2.0, 1e-5), n)
    plans = [job.schedule.plan(r) for r in range(job.schedule.rounds)]
    betas = sorted({plan.smoothing for plan in plans})
    assert len(betas) == len(job.optimizer.phases) and betas[0] > 0  # one β per phase, re-smoothed
    shard, theta = Shard(job, 0, job.layout.n_blocks), np.array([0.2, -0.1, 0.3])
    data = np.concatenate([shard.draw_block(block) for block in range(job.layout.n_blocks)], axis=1)  # every user
    for plan in (plans[0], plans[-1]):
        block = plan.first_user // job.block_size  # the round's users in its first block
        users = slice(plan.first_user, min(plan.stop_user, job.layout.block_users(block)[1]))
        expected = MoreauSmoothed(base, plan.smoothing).gradients(theta, data[:, users])
        assert np.array_equal(shard._inputs(plan, theta, users, block), expected)


def test_analyzer_and_optimizer_receive_only_the_protocol_statistic(monkeypatch):
    """The trust boundary (DESIGN §3): what reaches the analyzer is the O(d)
    count statistic, and the optimizer sees only the analyzer's estimate."""
    n = 1500
    job = _job(SeqSGD.from_config(PROBLEM, n, 2.0, 1e-5, batch_size=100), n)
    seen_by_analyzer, seen_by_optimizer = [], []
    protocol = job.protocol
    decode = protocol.decode

    def spy_decode(params, counts):
        seen_by_analyzer.append(counts)
        return decode(params, counts)

    monkeypatch.setattr(type(protocol), "decode", staticmethod(spy_decode))
    update = SeqSGD.update
    monkeypatch.setattr(SeqSGD, "update", lambda self, state, mean: seen_by_optimizer.append(mean) or update(self, state, mean))
    engine.execute(job, "local", 3)
    assert len(seen_by_analyzer) == len(seen_by_optimizer) == 15
    for counts in seen_by_analyzer:
        assert type(counts) is ShuffledCounts
        assert counts.centred_ones.shape == (PROBLEM.dim,)
        assert set(vars(counts)) == {"users", "centred_ones"}
    assert all(mean.shape == (PROBLEM.dim,) for mean in seen_by_optimizer)


def test_literal_mode_runs_a_real_shuffle_across_shards_and_matches_local(ray_session):
    """Literal messages go through the two-stage all-to-all; counts do not
    depend on the permutation, so Ray and local agree bit for bit."""
    n = 16
    small = Quadratic(dim=1, radius=1.0)
    optimizer = MeanEstimation.from_config(small, n, 15.0, 0.4)
    job = engine.RunJob(small, optimizer, CjmpVec(), 3, n, 5, engine.LITERAL)
    local = _trace(job, "local", 3)
    remote = _trace(job, "ray", 3)
    assert np.array_equal(local[0], remote[0]) and np.isfinite(local[0]).all()


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "plain"])
def test_a_shard_actor_killed_mid_run_is_restarted_and_the_run_is_bit_identical(ray_session, monkeypatch, compiled):
    """Every full_gd round fans out to both shards and the driver waits for the round's
    total; the victim is killed when the driver has received the total of round KILLED_AFTER
    and submitted the next round (an event of the run, not a timer), so the round is in
    flight or queued on it when it dies. A compiled graph is torn down and rebuilt, and
    the round runs again; plain calls are retried by Ray."""
    import os

    import ray

    from pipeline.engine import ray_pool
    from pipeline.protocols.cjmp import PartialCounts

    monkeypatch.setattr(ray_pool, "COMPILED", compiled)
    n, rounds, killed_after = 20_000, 12, 4
    job = _job(FullGD.from_config(PROBLEM, n, 2.0, 1e-5, rounds=rounds), n, block_size=1024)
    reference = _trace(job, "local", 1)
    pool = ray_pool.RayPool(job, 2)
    victim = pool.actors[0]
    pid_before = ray.get(victim.__ray_call__.remote(lambda self: os.getpid()))
    real_get, totals, killed_at = ray.get, [], []

    def get_killing_after_round_k(refs, *args, **kwargs):
        if len(totals) == killed_after + 1 and not killed_at:  # round k's total is in, round k + 1 submitted
            ray.kill(victim, no_restart=False)
            killed_at.append(len(totals))
        value = real_get(refs, *args, **kwargs)
        if isinstance(value, PartialCounts):  # a round's total (not a graph's set-up or a readiness probe)
            totals.append(value)
        return value

    monkeypatch.setattr(ray_pool.ray, "get", get_killing_after_round_k)
    try:
        state, records = pool.run()
    finally:
        monkeypatch.setattr(ray_pool.ray, "get", real_get)
    pid_after = ray.get(victim.__ray_call__.remote(lambda self: os.getpid()))
    builds = pool.compiled_round.builds if compiled else None
    pool.close()
    assert builds == (2 if compiled else None)  # compiled: built once, rebuilt once after the kill
    # Killed while the run was going on: after round k's total, before the last round's.
    assert killed_at == [killed_after + 1] and len(totals) == rounds == len(records)
    assert pid_after != pid_before  # the actor really died and came back
    assert np.array_equal(np.array([r.excess_loss for r in records]), reference[0])
    assert np.array_equal(job.optimizer.output(state), reference[1])


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "plain"])
def test_the_driver_receives_only_each_rounds_total_even_with_one_user_blocks(ray_session, monkeypatch, compiled):
    """DESIGN §3: no per-user or per-block value reaches the driver. With
    blocks of one user, any per-block partial would be a user's own counts."""
    import ray

    from pipeline.engine import ray_pool
    from pipeline.protocols.cjmp import PartialCounts

    monkeypatch.setattr(ray_pool, "COMPILED", compiled)
    monkeypatch.setattr(ray_pool, "PLAIN_FANOUTS", 0)  # compiled from the first round
    n = 60
    job = _job(FullGD.from_config(PROBLEM, n, 2.0, 1e-5, rounds=3), n, block_size=1)
    fetched = []
    real_get = ray.get

    def spy_get(refs, *args, **kwargs):
        values = real_get(refs, *args, **kwargs)
        fetched.extend(values if isinstance(values, list) else [values])
        return values

    pool = ray_pool.RayPool(job, 3)
    monkeypatch.setattr(ray_pool.ray, "get", spy_get)
    for round_index in range(3):
        plan = job.schedule.plan(round_index)
        params = job.protocol.plan(plan, PROBLEM.dim)
        pool.collect(plan, params, np.zeros(PROBLEM.dim))
    monkeypatch.setattr(ray_pool.ray, "get", real_get)
    builds = pool.compiled_round.builds if pool.compiled_round is not None else 0
    pool.close()
    # The path under test was the one taken (a loaded machine can time a graph's channel out: the
    # round is then run again on a rebuilt graph, by design, and counts as a second build).
    assert (builds >= 1) == compiled
    totals = [value for value in fetched if type(value) is PartialCounts]
    assert len(totals) == 3  # one total per round, and no other partial
    assert all(value.users == n and value.ones_above_floor.shape == (PROBLEM.dim,) for value in totals)
    # The rest is the compiled graph's set-up (channel handles), built on the first round: no arrays.
    assert not [value for value in fetched if isinstance(value, np.ndarray) or hasattr(value, "users")
                and type(value) is not PartialCounts]


def test_a_reused_stream_draws_what_a_new_generator_of_its_key_draws():
    """Rounds re-key one generator per stream kind (Streams) instead of building one per
    (round, block): every key must still give its own stream's draws, whatever the same
    kind drew before, and distinct keys distinct streams."""
    from pipeline.engine.layout import NOISE_STREAM, ROUND_STREAM, SAMPLE_STREAM, Streams, counter, stream

    def draws(generator):  # uses the buffered paths too: 32-bit halves and Philox's 4-word blocks
        return (generator.integers(0, 2**32, size=3, dtype=np.uint32).tolist(), generator.random(3).tolist(),
                generator.binomial(10**12, 0.3, 2).tolist(), generator.standard_normal(3).tolist())

    streams = Streams(7)
    keys = [(ROUND_STREAM, 3, 0), (ROUND_STREAM, 3, 1), (ROUND_STREAM, 4, 0), (SAMPLE_STREAM, 2, 5),
            (SAMPLE_STREAM, 2), (SAMPLE_STREAM, 2, 0), (NOISE_STREAM, 2**64 - 1)]
    fresh = {key: draws(stream(7, *key)) for key in keys}
    for key in keys + keys[::-1]:  # each after others of its kind left the generator mid-block
        assert draws(streams(*key)) == fresh[key]
    assert len({str(value) for value in fresh.values()}) == len(keys)
    assert draws(stream(8, *keys[0])) != fresh[keys[0]]  # the seed is the run's key
    for bad in [(ROUND_STREAM, 1, 2, 3), (ROUND_STREAM, -1), (2**32, 0), (ROUND_STREAM, 2**64)]:
        with pytest.raises(ValueError, match="stream key"):
            counter(*bad)

def test_round_records_pickle_in_columns_and_come_back_the_same():
    """A run's records travel from shard actors to the driver in columns (RoundRecords):
    every field must come back equal, as the same Python types, NaNs and released models
    included, and the rounds' shared parameters shared still."""
    import math
    import pickle

    from pipeline.engine.rounds import RoundRecord, RoundRecords

    params = object()  # a call's parameters: one object for many rounds
    theta = np.array([0.25, -1.5, 3.0])
    records = RoundRecords([
        RoundRecord(0, 0, 7, params, 7, 0.1 + 0.2, 1 / 3, 1.5e-4),
        RoundRecord(1, 7, 14, params, 7, math.nan, math.nan, 2e-4, theta, 0.5, 0.875, 1e-12),
        RoundRecord(2**40, 2**62, 2**62 + 3, params, 3, 5e-324, -0.0, 0.0, None, math.inf),
    ])
    back = pickle.loads(pickle.dumps(records))
    assert type(back) is RoundRecords and len(back) == len(records)
    for before, after in zip(records, back):
        for name, old, new in zip(RoundRecord._fields, before, after):
            if isinstance(old, np.ndarray):
                assert np.array_equal(old, new) and new.dtype == old.dtype, name
            elif isinstance(old, float):
                assert type(new) is float and (math.isnan(old) and math.isnan(new) or old.hex() == new.hex()), name
            elif name != "params":
                assert type(new) is type(old) and new == old, name
    assert back[0].params is back[1].params is back[2].params
    assert pickle.loads(pickle.dumps(RoundRecords())) == []


def test_joining_records_column_by_column_leaves_the_joined_records_whole():
    """A run's records join their trips' chunks a column at a time, dropping each chunk's
    column as it goes (the copy's peak is one column): a trip's own records, extended into
    the run's, must still read whole afterwards."""
    from pipeline.engine.rounds import RoundRecords

    trips = [RoundRecords.from_columns("p", round=np.arange(start, start + 3), first_user=7 * np.arange(start, start + 3),
                                       stop_user=7 * np.arange(start + 1, start + 4), users=np.full(3, 7),
                                       excess_loss=np.full(3, 0.5 * start), population_loss=np.full(3, 1.0),
                                       seconds=np.full(3, 1e-6)) for start in (0, 3, 6)]
    run = RoundRecords()
    for trip in trips:
        run.extend(trip)
    run.append(run[0]._replace(round=9))
    assert run.column("round").tolist() == list(range(10)) and run.column("users").tolist() == [7] * 10
    assert run.column("excess_loss").tolist() == [0.0] * 3 + [1.5] * 3 + [3.0] * 3 + [0.0]
    assert run.params_runs() == [("p", 10)]
    for start, trip in zip((0, 3, 6), trips):
        assert trip.column("round").tolist() == [start, start + 1, start + 2]
        assert trip.column("excess_loss").tolist() == [0.5 * start] * 3


@pytest.mark.parametrize("name", ["seq_sgd", "full_gd", "seq_agd", "cldp_sgd", "full_phased", "seq_phased",
                                  "seq_sgd_robust", "mean_estimation"])
@pytest.mark.parametrize("shards", [1, 3, 8])
def test_a_trip_carries_exactly_the_rounds_whose_users_stay_in_the_shard(name, shards):
    """The driver finds a trip's end group by group; it must be where a round-by-round scan ends it."""
    job = _jobs()[name]()
    pool = LocalPool(job, shards)
    schedule = job.schedule
    for start in range(schedule.rounds):
        owner = pool.owner(schedule.plan(start))
        if owner is None:
            continue
        for last in {start + 1, start + 5, schedule.rounds}:
            last = min(last, schedule.rounds)
            scanned = start + 1
            while scanned < last and pool.owner(schedule.plan(scanned)) == owner:
                scanned += 1
            assert pool._carried_stop(start, owner, last) == scanned, (start, last)
