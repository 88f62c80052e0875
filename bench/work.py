"""How the work estimate (pipeline/work.py) holds: each built-in method's measured compute over
its estimate, in the same run on the same machine. Every ratio should be ≤ 1 (an upper bound);
the smallest shows how loose it is."""
from __future__ import annotations

import time

from bench.timing import planned_run, sized

# (optimizer, protocol, problem, n, d): a compiled and a numpy path of each shape of schedule.
CASES = (("mean_estimation", "cjmp_vec", "quadratic", 10**6, 5), ("mean_estimation", "girgis_linf", "quadratic", 10**6, 5),
         ("seq_sgd", "cjmp_vec", "quadratic", 10**5, 5), ("seq_sgd", "girgis_linf", "quadratic", 10**5, 5),
         ("seq_sgd", "shuffle_gaussian", "quadratic", 10**5, 5), ("seq_sgd", "cjmp_vec", "logistic", 10**5, 5),
         ("seq_agd", "cjmp_vec", "quadratic", 10**5, 20), ("full_gd", "cjmp_vec", "quadratic", 3000, 5),
         ("full_gd", "cjmp_vec", "logistic", 3000, 5))


def run(size: str) -> dict[str, float]:
    from pipeline import engine

    scale = sized(size, 0.01, 1.0, 10.0)
    ratios = {}
    for optimizer, protocol, problem, n, dim in CASES:
        users = max(200, int(n * scale))
        planned = planned_run({"experiment": "bench", "problem": {"name": problem, "dim": dim}, "n_users": users,
                               "optimizer": {"name": optimizer}, "seeds": [0],
                               "privacy": {"epsilon": 1.0, "delta": 1e-6, "protocol": protocol},
                               "execution": {"backend": "local", "shards": 1}})
        engine.execute(planned.job, "local", 1)  # compiled once, loaded once
        began = time.perf_counter()
        engine.execute(planned.job, "local", 1)
        seconds = time.perf_counter() - began
        ratios[f"work_measured_vs_estimate_{optimizer}_{protocol}_{problem}"] = seconds / planned.estimate_s
    return {**ratios, "work_measured_vs_estimate_max": max(ratios.values()),
            "work_measured_vs_estimate_min": min(ratios.values())}
