"""Executes runs on shards of users: in process or on Ray actors (the only
layer that imports ray; shared/DESIGN.md §2)."""
from __future__ import annotations

import time
from typing import Any, Callable

from pipeline.engine.job import EXACT, LITERAL, SIMULATIONS, RunJob
from pipeline.engine.rounds import COLUMNS as ROUND_COLUMNS, RoundRecord, RoundRecords
from pipeline.engine.job import drawn_per_block
from pipeline.engine.fused import compiles, kernels_cached

BACKENDS = ("ray", "local")


# (run key, rounds done, rounds in the run, seconds since the run began) → None.
RunProgress = Callable[[Any, int, int, float], None]


class LocalExecutor:
    """Runs jobs one at a time, in process, when the driver asks for the next.

    Args:
      progress: told how far the run in progress got, about once a second.
    """

    def __init__(self, progress: RunProgress | None = None):
        self._queue: list = []
        self._progress = progress

    def capacity(self) -> int:
        return 1

    def submit(self, key, job: RunJob, shards: int) -> None:
        self._queue.append((key, job, shards))

    def next_done(self):
        key, job, shards = self._queue.pop(0)
        began = time.perf_counter()
        told = None if self._progress is None else (
            lambda done, total: self._progress(key, done, total, time.perf_counter() - began))
        try:
            return key, (*execute(job, "local", shards, told), time.perf_counter() - began)
        except Exception as err:  # reported for that run only
            return key, err

    def in_flight(self) -> int:
        return len(self._queue)

    def cancel(self) -> None:
        self._queue.clear()

    def close(self) -> None:
        """Nothing to release in process."""


def executor(backend: str, progress: RunProgress | None = None):
    """A LocalExecutor, or a RayExecutor that runs grid points concurrently; either tells
    `progress` how far each run in progress got, about once a second."""
    if backend == "ray":
        from pipeline.engine.ray_pool import RayExecutor

        return RayExecutor(progress)
    return LocalExecutor(progress)


def describe_backend(backend: str) -> str:
    """One progress line saying where the runs execute: for "ray", which Ray
    (a new local instance, or the cluster RAY_ADDRESS names) and its CPUs,
    starting or joining it first if needed.

    Args:
      backend: "ray" or "local".

    Returns:
      The line, without a newline.
    """
    if backend == "ray":
        from pipeline.engine.ray_pool import describe

        return describe()
    return "in process, one run at a time (execution.backend: local)"


def driver_runs(jobs: list[RunJob], backend: str) -> int:
    """How many of a grid's runs on `backend` execute in the driver's process although the backend is
    Ray: tiny ones, whose compute is less than a Ray task's own cost (ray_pool.in_driver)."""
    if backend != "ray":
        return 0
    from pipeline.engine.ray_pool import in_driver

    return sum(map(in_driver, jobs))


def execute(job: RunJob, backend: str, shards: int,
            progress: Callable[[int, int], None] | None = None) -> tuple[Any, RoundRecords]:
    """Runs a job to completion.

    Args:
      job: the run.
      backend: "ray" or "local" (bit-identical results).
      shards: the number of shards (results do not depend on it).
      progress: told (rounds done, rounds) about once a second.

    Returns:
      (final optimizer state, one record per round).
    """
    if backend == "ray":
        from pipeline.engine.ray_pool import RayPool as Pool
    else:
        from pipeline.engine.local import LocalPool as Pool
    pool = Pool(job, shards)
    try:
        return pool.run(progress)
    finally:
        pool.close()


__all__ = ["BACKENDS", "EXACT", "LITERAL", "SIMULATIONS", "LocalExecutor", "ROUND_COLUMNS", "RoundRecord", "RoundRecords", "RunJob",
           "compiles", "describe_backend", "drawn_per_block", "driver_runs", "execute", "executor", "kernels_cached"]
