"""Executes runs on shards of users: in process or on Ray actors (the only
layer that imports ray; shared/DESIGN.md §2)."""
from __future__ import annotations

import time
from typing import Any

from pipeline.engine.job import EXACT, LITERAL, SIMULATIONS, RunJob
from pipeline.engine.rounds import RoundRecord, RoundRecords

BACKENDS = ("ray", "local")


class LocalExecutor:
    """Runs jobs one at a time, in process, when the driver asks for the next."""

    def __init__(self):
        self._queue: list = []

    def capacity(self) -> int:
        return 1

    def submit(self, key, job: RunJob, shards: int) -> None:
        self._queue.append((key, job, shards))

    def next_done(self):
        key, job, shards = self._queue.pop(0)
        began = time.perf_counter()
        try:
            return key, (*execute(job, "local", shards), time.perf_counter() - began)
        except Exception as err:  # reported for that run only
            return key, err

    def in_flight(self) -> int:
        return len(self._queue)

    def cancel(self) -> None:
        self._queue.clear()


def executor(backend: str):
    """A LocalExecutor, or a RayExecutor that runs grid points concurrently."""
    if backend == "ray":
        from pipeline.engine.ray_pool import RayExecutor

        return RayExecutor()
    return LocalExecutor()


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


def execute(job: RunJob, backend: str, shards: int) -> tuple[Any, RoundRecords]:
    """Runs a job to completion.

    Args:
      job: the run.
      backend: "ray" or "local" (bit-identical results).
      shards: the number of shards (results do not depend on it).

    Returns:
      (final optimizer state, one record per round).
    """
    if backend == "ray":
        from pipeline.engine.ray_pool import RayPool as Pool
    else:
        from pipeline.engine.local import LocalPool as Pool
    pool = Pool(job, shards)
    try:
        return pool.run()
    finally:
        pool.close()


__all__ = ["BACKENDS", "EXACT", "LITERAL", "SIMULATIONS", "LocalExecutor", "RoundRecord", "RoundRecords", "RunJob",
           "describe_backend", "execute", "executor"]
