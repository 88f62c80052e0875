"""Ray scaling: the same fully interactive job on one shard actor and on N."""
from __future__ import annotations

import logging
import multiprocessing
import os
import time

import numpy as np
import ray

from bench.timing import best_times
from pipeline.engine import RunJob
from pipeline.engine.ray_pool import RayPool
from pipeline.engine.shard import Shard
from pipeline.optimizers import FullGD, SeqSGD
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec

DIM = 10


def _process_rounds(args) -> tuple[float, float]:
    """One plain process: its share of the blocks, then the rounds, timed
    after every process has built its data (the barrier)."""
    job, first_block, stop_block, barrier = args
    shard = Shard(job, first_block, stop_block)
    schedule = job.schedule
    barrier.wait()
    began = time.perf_counter()
    for round_index in range(schedule.rounds):
        plan = schedule.plan(round_index)
        params = job.protocol.plan(plan, DIM)
        shard.partial_counts(plan, params, np.zeros(DIM))
    return began, time.perf_counter()


def _process_wall(job: RunJob, processes: int) -> float:
    """Wall time of the job's rounds split over plain processes (no Ray)."""
    layout = job.layout
    context = multiprocessing.get_context("fork")
    barrier = context.Manager().Barrier(processes)
    with context.Pool(processes) as workers:
        spans = workers.map(_process_rounds, [(job, a, b, barrier) for a, b in layout.shard_blocks(processes)])
    return max(end for _, end in spans) - min(start for start, _ in spans)


def run(full: bool) -> dict[str, float]:
    """ray_speedup_N: wall time of R rounds with 1 actor over N actors.

    Args:
      full: larger sizes and every N up to the core count.

    Returns:
      name → value.
    """
    cores = os.cpu_count() or 1
    # Two pools hold the data at once (8·d bytes per user each); keep them
    # within half the machine's memory.
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n_users = min(100_000_000, int(memory / 2 / (2 * 8 * DIM))) if full else 4_000_000
    rounds = 3
    counts = [n for n in (2, 4, 8, 16, 32) if n <= cores] if full else [min(2, cores)]
    if not ray.is_initialized():
        # Two pools stay alive for interleaved timing but only one computes at
        # a time: declare twice the cores so both can be scheduled, one CPU
        # per actor.
        ray.init(num_cpus=2 * cores, include_dashboard=False, logging_level=logging.ERROR)
    problem = Quadratic(dim=DIM, radius=1.0)
    optimizer = FullGD.from_config(problem, n_users, 1.0, 1e-6, rounds=rounds)
    job = RunJob(problem, optimizer, CjmpVec(), 0, n_users, 65536)
    figures = {}
    single = RayPool(job, 1)
    for count in counts:
        many = RayPool(job, count)
        times = best_times({"one": single.run, "many": many.run}, repeats=4)
        figures[f"ray_speedup_{count}"] = times["one"] / times["many"]
        # The machine's own ceiling for this work: plain processes, no Ray.
        figures[f"process_speedup_{count}"] = min(_process_wall(job, 1) for _ in range(2)) / min(
            _process_wall(job, count) for _ in range(2))
        figures[f"ray_round_user_coords_per_s_{count}"] = n_users * DIM * rounds / times["many"]
        many.close()
    single.close()
    figures["ray_work_user_coords_per_round"] = float(n_users * DIM)
    figures.update(_sequential_carry(problem))
    return figures


def _sequential_carry(problem: Quadratic) -> dict[str, float]:
    """seq_carry_vs_fanout: many small sequential rounds run on the actor that
    holds their users, against one driver round trip per round."""
    n_users = 100_000
    optimizer = SeqSGD.from_config(problem, n_users, 1.0, 1e-6)
    pool = RayPool(RunJob(problem, optimizer, CjmpVec(), 0, n_users, 65536), 2)
    carried = best_times({"carry": pool.run}, repeats=2)["carry"]
    pool.owner = lambda plan: None  # force every round through the driver
    fanned = best_times({"fan-out": pool.run}, repeats=1)["fan-out"]
    pool.close()
    return {"seq_carry_vs_fanout": fanned / carried, "seq_round_us_carried": carried / optimizer.rounds * 1e6}
