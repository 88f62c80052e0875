"""Memory per shard, and the largest run that completes here."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.timing import full_gd_tree, planned_run, sized

DIM = 10
ROOT = Path(__file__).resolve().parent.parent  # the subprocesses import bench and pipeline from here

# Peak resident memory of this address space (VmHWM, kB). Unlike ru_maxrss,
# which Linux carries across exec from a large parent, it starts afresh.
_PEAK_KB = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"

_SHARD = """
import numpy as np
import pipeline.runner  # imported before the baseline is read, as in the n = 0 run
from bench.timing import full_gd_tree, planned_run
from pipeline.engine.local import LocalPool
before = {peak}
n = {n}
if n:
    job = planned_run(full_gd_tree(n, {dim}, rounds=1)).job
    pool = LocalPool(job, 1)
    plan = job.schedule.plan(0)
    pool.collect(plan, job.protocol.plan(plan, {dim}), np.zeros({dim}))
print({peak} - before)
"""

def largest_run(n_users: int, backend: str) -> float:
    """A mean estimate over n_users users (d = DIM) on all cores; its excess loss."""
    import logging
    import os

    from pipeline import engine

    if backend == "ray":
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.ERROR)
    tree = full_gd_tree(n_users, DIM, rounds=1)
    tree["optimizer"] = {"name": "mean_estimation"}
    _, records = engine.execute(planned_run(tree).job, backend, os.cpu_count())
    return records[-1].excess_loss


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()


def run(size: str = "quick") -> dict[str, float]:
    """Peak memory of one shard per user, and the largest mean estimate run.

    Args:
      size: one of bench.timing.SIZES; full runs the 1e8-user target instead
        of 1e7 on Ray (smoke: 1e5 users, in this process).

    Returns:
      name → value.
    """
    n_users = sized(size, 200_000, 2_000_000, 2_000_000)
    # The same script without the shard: what the peak gains by itself (0 up to noise; skipped in smoke).
    baseline_kb = 0.0 if size == "smoke" else float(_python(_SHARD.format(n=0, dim=DIM, peak=_PEAK_KB)))
    shard_kb = float(_python(_SHARD.format(n=n_users, dim=DIM, peak=_PEAK_KB)))
    largest = sized(size, 100_000, 10_000_000, 100_000_000)
    began = time.perf_counter()
    if size == "smoke":  # in this process: the run's code, without another interpreter's start
        largest_run(largest, "local")
    else:
        _python(f"from bench.memory import largest_run; print(largest_run({largest}, 'ray'))")
    return {
        "shard_bytes_per_user": (shard_kb - baseline_kb) * 1024 / n_users,
        "shard_bytes_per_user_data": 8.0 * DIM,
        "largest_run_users": float(largest),
        "largest_run_s": time.perf_counter() - began,
    }
