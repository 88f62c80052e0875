"""Ray scaling: the same fully interactive job on one shard actor and on N."""
from __future__ import annotations

import logging
import multiprocessing
import os
import time

import numpy as np

from bench.timing import best_times, best_values, full_gd_tree, planned_run, sized
from pipeline.engine import RunJob
from pipeline.engine.local import LocalPool
from pipeline.engine.rounds import execute_rounds
from pipeline.engine.shard import Shard

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
    with context.Manager() as manager:
        barrier = manager.Barrier(processes)
        workers = context.Pool(processes)
        try:
            spans = workers.map(_process_rounds, [(job, a, b, barrier) for a, b in layout.shard_blocks(processes)])
        finally:
            # Let the workers exit by themselves: a forked copy of a Ray driver reports a SIGTERM loudly.
            workers.close()
            workers.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _pool_class(size: str):
    """RayPool (Ray started here if it is not), or LocalPool for smoke (see run)."""
    if size == "smoke":
        return LocalPool
    import ray

    from pipeline.engine.ray_pool import RayPool

    if not ray.is_initialized():
        # Two pools stay alive for interleaved timing but only one computes at
        # a time: declare twice the cores so both can be scheduled, one CPU
        # per actor.
        ray.init(num_cpus=2 * (os.cpu_count() or 1), include_dashboard=False, logging_level=logging.ERROR)
    return RayPool


def run(size: str = "quick") -> dict[str, float]:
    """ray_speedup_N: wall time of R rounds with 1 actor over N actors.

    Args:
      size: one of bench.timing.SIZES; full: larger sizes and every N up to the core count.
        Smoke runs everything on in-process shards (the same pool interface): starting a Ray
        cluster and its actors takes longer than every other smoke benchmark together.

    Returns:
      name → value.
    """
    cores = os.cpu_count() or 1
    # Two pools hold the data at once (8·d bytes per user each); keep them
    # within half the machine's memory.
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n_users = sized(size, 70_000, 4_000_000, min(100_000_000, int(memory / 2 / (2 * 8 * DIM))))
    rounds = sized(size, 1, 3, 3)
    repeats = sized(size, 1, 4, 4)
    counts = [n for n in (2, 4, 8, 16, 32) if n <= cores] if size == "full" else [min(2, cores)]
    pool_class = _pool_class(size)
    job = planned_run(full_gd_tree(n_users, DIM, rounds)).job
    figures = {}
    single = pool_class(job, 1)
    for count in counts:
        many = pool_class(job, count)
        times = best_times({"one": single.run, "many": many.run}, repeats=repeats)
        figures[f"ray_speedup_{count}"] = times["one"] / times["many"]
        # The machine's own ceiling for this work: plain processes, no Ray (interleaved, best of 2).
        walls = best_values({"one": lambda: _process_wall(job, 1), "many": lambda: _process_wall(job, count)},
                            repeats=sized(size, 1, 2, 2))
        figures[f"process_speedup_{count}"] = walls["one"] / walls["many"]
        figures[f"ray_round_user_coords_per_s_{count}"] = n_users * DIM * rounds / times["many"]
        many.close()
    single.close()
    figures["ray_work_user_coords_per_round"] = float(n_users * DIM)
    figures.update(_sequential_carry(size))
    figures.update(_fanout_overhead(size))
    return figures


def _fanout_overhead(size: str) -> dict[str, float]:
    """What a fanned-out round costs on Ray beyond its work: `full_gd` on the quadratic,
    n = 10⁴, d = 10, 300 rounds, tight accounting, 2 shards, on Ray (a compiled graph per
    run, and plain actor calls) against in-process shards; interleaved, best of N."""
    from pipeline.engine import ray_pool

    rounds = sized(size, 5, 300, 300)
    tree = full_gd_tree(10_000, DIM, rounds, shards=2)
    tree["privacy"]["accounting"] = "tight"
    tree["execution"]["block_size"] = 1024  # 10 blocks: every round spans both shards
    job = planned_run(tree).job

    def fresh_run(compiled: bool) -> float:
        """A run's own time on new shards, as runs.parquet's wall_s counts it: from its
        shards' start (the graph is compiled inside the run)."""
        ray_pool.COMPILED = compiled
        try:
            pool = _pool_class(size)(job, 2)
            began = time.perf_counter()
            pool.run()
            seconds = time.perf_counter() - began
            pool.close()
            return seconds
        finally:
            ray_pool.COMPILED = True

    def local_run() -> float:
        pool = LocalPool(job, 2)
        began = time.perf_counter()
        pool.run()
        return time.perf_counter() - began

    def build() -> float:  # the graph's compilation, part of the shards' set-up
        pool = _pool_class(size)(job, 2)
        began = time.perf_counter()
        if getattr(pool, "compiled_round", None) is not None:
            pool.compiled_round.close()
            pool.compiled_round.build()
        seconds = time.perf_counter() - began
        pool.close()
        return seconds

    times = best_values({"ray": lambda: fresh_run(True), "local": local_run}, repeats=sized(size, 1, 4, 4))
    plain_s = min(fresh_run(False) for _ in range(sized(size, 1, 2, 2)))
    return {"fanout_round_overhead_ms": (times["ray"] - times["local"]) / rounds * 1e3,
            "ray_vs_local_full_gd": times["ray"] / times["local"],
            "ray_plain_vs_local_full_gd": plain_s / times["local"],
            "compiled_graph_build_s": build()}


def _sequential_carry(size: str) -> dict[str, float]:
    """seq_carry_vs_fanout: the same small sequential rounds run on the actor that
    holds their users (one call for all of them), against one driver round trip
    per round (the pool's collect, as for a round that spans shards). Both sides
    run the first k rounds from the same start, interleaved, best of N."""
    n_users = 100_000
    tree = full_gd_tree(n_users, DIM, rounds=1, shards=2, backend="ray")
    tree["optimizer"] = {"name": "seq_sgd"}
    job = planned_run(tree).job
    pool = _pool_class(size)(job, 2)
    schedule = job.schedule
    owner = pool.owner(schedule.plan(0))
    # The first k rounds, all on the first round's shard.
    k = 1
    while k < min(schedule.rounds, sized(size, 20, 300, 900)) and pool.owner(schedule.plan(k)) == owner:
        k += 1
    start = job.optimizer.start(job.seed)
    times = best_times({"carry": lambda: pool.run_rounds(owner, start, 0, k),
                        "fan-out": lambda: execute_rounds(job, start, 0, k, pool.collect)},
                       repeats=sized(size, 1, 3, 5))
    pool.close()
    return {"seq_carry_vs_fanout": times["fan-out"] / times["carry"], "seq_carry_rounds": float(k),
            "seq_round_us_carried": times["carry"] / k * 1e6}
