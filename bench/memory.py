"""Memory per shard, and the largest run that completes here."""
from __future__ import annotations

import subprocess
import sys
import time

DIM = 10

# Peak resident memory of this address space (VmHWM, kB). Unlike ru_maxrss,
# which Linux carries across exec from a large parent, it starts afresh.
_PEAK_KB = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"

_SHARD = """
import numpy as np
from pipeline.engine import RunJob
from pipeline.engine.local import LocalPool
from pipeline.optimizers import FullGD
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec
from pipeline.protocols.cjmp import plan_pvec
before = {peak}
n = {n}
if n:
    problem = Quadratic(dim={dim}, radius=1.0)
    optimizer = FullGD.from_config(problem, n, 1.0, 1e-6, rounds=1)
    pool = LocalPool(RunJob(problem, optimizer, CjmpVec(), 0, n, 65536), 1)
    plan = optimizer.schedule().plan(0)
    pool.collect(plan, plan_pvec(n, {dim}, plan.epsilon, plan.delta, plan.norm_bound), np.zeros({dim}))
print({peak} - before)
"""

_LARGEST = """
import logging, os, ray
from pipeline import engine
from pipeline.optimizers import MeanEstimation
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec
ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.ERROR)
problem = Quadratic(dim={dim}, radius=1.0)
job = engine.RunJob(problem, MeanEstimation.from_config(problem, {n}, 1.0, 1e-6), CjmpVec(), 0, {n}, 65536)
_, records = engine.execute(job, "ray", os.cpu_count())
print(records[-1].excess_loss)
"""


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def run(full: bool) -> dict[str, float]:
    """Peak memory of one shard per user, and the largest mean estimate run.

    Args:
      full: the 1e8-user target run instead of 1e7.

    Returns:
      name → value.
    """
    n_users = 2_000_000
    baseline_kb = float(_python(_SHARD.format(n=0, dim=DIM, peak=_PEAK_KB)))
    shard_kb = float(_python(_SHARD.format(n=n_users, dim=DIM, peak=_PEAK_KB)))
    largest = 100_000_000 if full else 10_000_000
    began = time.perf_counter()
    _python(_LARGEST.format(n=largest, dim=DIM))
    return {
        "shard_bytes_per_user": (shard_kb - baseline_kb) * 1024 / n_users,
        "shard_bytes_per_user_data": 8.0 * DIM,
        "largest_run_users": float(largest),
        "largest_run_s": time.perf_counter() - began,
    }
