"""Executes runs on shards of users: in process or on Ray actors (the only
layer that imports ray; shared/DESIGN.md §2)."""
from __future__ import annotations

from typing import Any

from pipeline.engine.job import EXACT, LITERAL, SIMULATIONS, RunJob
from pipeline.engine.rounds import RoundRecord

BACKENDS = ("ray", "local")


def execute(job: RunJob, backend: str, shards: int) -> tuple[Any, list[RoundRecord]]:
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


__all__ = ["BACKENDS", "EXACT", "LITERAL", "SIMULATIONS", "RoundRecord", "RunJob", "execute"]
