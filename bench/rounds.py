"""Exact-mode P_vec round throughput against the RNG ceiling and a per-user loop."""
from __future__ import annotations

import numpy as np

from bench.timing import best_times, full_gd_tree, planned_run, sized
from pipeline.engine.local import LocalPool

DIM = 10


def _one_round(n_users: int):
    """A one-shard pool of a fully interactive job (planned by the runner), and functions running one
    round: through the pool (compiled, pipeline.engine.fused_interactive) and the shard's Python path."""
    job = planned_run(full_gd_tree(n_users, DIM, rounds=1)).job
    pool = LocalPool(job, 1)
    plan = job.schedule.plan(0)
    params = job.protocol.plan(plan, DIM)
    theta = np.full(DIM, 0.1)
    (shard,) = pool.shards
    return (job, lambda: pool.collect(plan, params, theta), lambda: shard.python_partial_counts(plan, params, theta),
            params, theta)


def _naive_round(data: np.ndarray, params, theta: np.ndarray, rng: np.random.Generator) -> None:
    """A straightforward per-user implementation: gradient, clip, rounding and
    one binomial per user and coordinate (what DESIGN §4 tells us to avoid)."""
    total = np.zeros(DIM)
    for x in data.T:
        gradient = theta - x  # the quadratic's gradient
        norm = np.linalg.norm(gradient)
        if norm > params.norm_bound:
            gradient *= params.norm_bound / norm
        scaled = (gradient + params.norm_bound) * (params.g / params.value_range)
        floor = np.floor(scaled)
        total += floor + (rng.random(DIM) < scaled - floor) + rng.binomial(params.b_noise, params.p, DIM)


def run(size: str = "quick") -> dict[str, float]:
    """Round throughput figures; the round, the RNG ceiling and the per-user loop are timed interleaved.

    Args:
      size: one of bench.timing.SIZES.

    Returns:
      name → value.
    """
    n_users = sized(size, 20_000, 2_000_000, 10_000_000)
    job, one_round, python_round, params, theta = _one_round(n_users)
    uniforms = np.empty(1 << 15)
    chunks = max(1, n_users * DIM // uniforms.size)
    rng = np.random.default_rng(0)

    def rng_ceiling():
        for _ in range(chunks):
            rng.random(out=uniforms)

    naive_users = sized(size, 200, 5_000, 5_000)
    data = job.problem.sample(np.random.default_rng(1), naive_users)
    times = best_times({"round": one_round, "python": python_round, "rng": rng_ceiling,
                        "naive": lambda: _naive_round(data, params, theta, rng)},
                       repeats=sized(size, 1, 5, 5))
    per_round_uc = n_users * DIM / times["round"]
    per_rng_uc = chunks * uniforms.size / times["rng"]
    per_naive_uc = naive_users * DIM / times["naive"]
    return {
        "round_user_coords_per_s": per_round_uc,
        "rng_uniforms_per_s": per_rng_uc,
        "round_vs_rng_ceiling": per_round_uc / per_rng_uc,
        "round_vs_naive": per_round_uc / per_naive_uc,
        "round_vs_python_path": times["python"] / times["round"],
    }
