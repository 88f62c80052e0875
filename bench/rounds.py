"""Exact-mode P_vec round throughput against the RNG ceiling and a per-user loop."""
from __future__ import annotations

import numpy as np

from bench.timing import best_times
from pipeline.engine import RunJob
from pipeline.engine.local import LocalPool
from pipeline.optimizers import FullGD
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec
from pipeline.protocols.cjmp import plan_pvec

DIM = 10


def _one_round(n_users: int):
    """A one-shard pool of a fully interactive job, and a function running one round."""
    problem = Quadratic(dim=DIM, radius=1.0)
    optimizer = FullGD.from_config(problem, n_users, 1.0, 1e-6, rounds=1)
    pool = LocalPool(RunJob(problem, optimizer, CjmpVec(), 0, n_users, 65536), 1)
    plan = optimizer.schedule().plan(0)
    params = plan_pvec(plan.users, DIM, plan.epsilon, plan.delta, plan.norm_bound)
    theta = np.full(DIM, 0.1)
    return pool, lambda: pool.collect(plan, params, theta), params, theta


def _naive_round(problem: Quadratic, data: np.ndarray, params, theta: np.ndarray, rng: np.random.Generator) -> None:
    """A straightforward per-user implementation: gradient, clip, rounding and
    one binomial per user and coordinate (what DESIGN §4 tells us to avoid)."""
    total = np.zeros(DIM)
    for x in data.T:
        gradient = theta - x
        norm = np.linalg.norm(gradient)
        if norm > params.norm_bound:
            gradient *= params.norm_bound / norm
        scaled = (gradient + params.norm_bound) * (params.g / params.value_range)
        floor = np.floor(scaled)
        total += floor + (rng.random(DIM) < scaled - floor) + rng.binomial(params.b_noise, params.p, DIM)


def run(full: bool) -> dict[str, float]:
    """Round throughput figures.

    Args:
      full: larger sizes.

    Returns:
      name → value.
    """
    n_users = 10_000_000 if full else 2_000_000
    _, one_round, params, theta = _one_round(n_users)
    uniforms = np.empty(1 << 15)
    chunks = n_users * DIM // uniforms.size
    rng = np.random.default_rng(0)

    def rng_ceiling():
        for _ in range(chunks):
            rng.random(out=uniforms)

    times = best_times({"round": one_round, "rng": rng_ceiling}, repeats=5)
    per_round_uc = n_users * DIM / times["round"]
    per_rng_uc = chunks * uniforms.size / times["rng"]

    naive_users = 5_000
    problem = Quadratic(dim=DIM, radius=1.0)
    data = problem.sample(np.random.default_rng(1), naive_users)
    naive = best_times({"naive": lambda: _naive_round(problem, data, params, theta, rng)}, repeats=2)["naive"]
    per_naive_uc = naive_users * DIM / naive
    return {
        "round_user_coords_per_s": per_round_uc,
        "rng_uniforms_per_s": per_rng_uc,
        "round_vs_rng_ceiling": per_round_uc / per_rng_uc,
        "round_vs_naive": per_round_uc / per_naive_uc,
    }
