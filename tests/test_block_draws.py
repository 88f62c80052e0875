"""Users drawn per block (#28 item 2): a sequential run's shards draw each block's users
when a round asks for them, bit-identical to holding every user, in memory O(block)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from pipeline import engine
from pipeline.engine import shard as shard_module
from pipeline.engine.shard import Shard
from pipeline.optimizers import FullGD, MeanEstimation, SeqSGD
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec

PROBLEM = Quadratic(dim=3, radius=1.0)
N = 3000


def _job(optimizer, simulation="exact", n=N) -> engine.RunJob:
    return engine.RunJob(PROBLEM, optimizer, CjmpVec("paper"), 11, n, 128, simulation)


def _outcome(job, shards, held: bool, monkeypatch) -> tuple[np.ndarray, np.ndarray]:
    monkeypatch.setattr(shard_module, "drawn_per_block", lambda job: False if held else engine.drawn_per_block(job))
    state, records = engine.execute(job, "local", shards)
    return np.array([(r.users, r.excess_loss) for r in records]), job.optimizer.output(state)


@pytest.mark.parametrize("case", ["seq_sgd", "mean_estimation", "seq_sgd_literal"])
def test_drawn_per_block_is_bit_identical_to_holding_every_user(case, monkeypatch):
    if case == "mean_estimation":
        job = _job(MeanEstimation.from_config(PROBLEM, N, 2.0, 1e-5))
    elif case == "seq_sgd":  # batches of 37 straddle blocks of 128
        job = _job(SeqSGD.from_config(PROBLEM, N, 2.0, 1e-5, batch_size=37))
    else:  # literal messages: few users and little noise (tests/test_engine.py's literal case), blocks of 5
        small = Quadratic(dim=1, radius=1.0)
        job = engine.RunJob(small, SeqSGD.from_config(small, 32, 15.0, 0.4, batch_size=8), CjmpVec(), 3, 32, 5,
                            engine.LITERAL)
    assert engine.drawn_per_block(job)
    held = _outcome(job, 3, True, monkeypatch)
    for shards in (1, 3):
        drawn = _outcome(job, shards, False, monkeypatch)
        assert all(np.array_equal(a, b) for a, b in zip(drawn, held))


def test_fully_interactive_runs_hold_their_users():
    job = _job(FullGD.from_config(PROBLEM, N, 2.0, 1e-5, rounds=3))
    assert not engine.drawn_per_block(job)
    assert Shard(job, 0, job.layout.n_blocks).data.shape == (3, N)


def test_a_sequential_shard_of_10_8_users_holds_one_block():
    """Building the shard and running a round allocate O(block): a held shard would need 2.4 GB."""
    n = 10**8
    job = engine.RunJob(PROBLEM, SeqSGD.from_config(PROBLEM, n, 2.0, 1e-5, batch_size=1000), CjmpVec("paper"), 3,
                        n, 4096)
    tracemalloc.start()
    try:
        shard = Shard(job, 0, job.layout.n_blocks)
        plan = job.schedule.plan(50_000)  # users 5·10⁷ onwards, a block in the middle of the shard
        params = job.protocol.plan(plan, 3)
        shard.partial_counts(plan, params, np.zeros(3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shard.data is None and peak < 16 * 2**20, peak
