"""Interleaved, repeated timing: the minimum over repetitions of each of
several functions, run in turn so that load drifts hit all of them alike;
benchmark sizes; and runs planned through the pipeline's own entry points."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

SIZES = ("smoke", "quick", "full")  # smoke: seconds, for tests/test_bench_smoke.py
T = TypeVar("T")


def sized(size: str, smoke: T, quick: T, full: T) -> T:
    """The value for a benchmark size (one of SIZES)."""
    return {"smoke": smoke, "quick": quick, "full": full}[size]


def best_times(functions: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The fastest of `repeats` runs of each function, interleaved.

    Args:
      functions: name → a function to time.
      repeats: runs per function.

    Returns:
      name → seconds.
    """
    def timed(function: Callable[[], object]) -> Callable[[], float]:
        def seconds() -> float:
            began = time.perf_counter()
            function()
            return time.perf_counter() - began

        return seconds

    return best_values({name: timed(function) for name, function in functions.items()}, repeats)


def best_values(functions: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """The smallest of `repeats` values each function returns, interleaved: for
    functions that time a part of their own work (seconds they measured).

    Args:
      functions: name → a function returning seconds.
      repeats: runs per function.

    Returns:
      name → seconds.
    """
    best = {name: float("inf") for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            best[name] = min(best[name], function())
    return best


def planned_run(tree: dict):
    """A run planned as `python -m pipeline run` plans it (config checks, job, ledger).

    Args:
      tree: a config as nested dicts (the YAML's shape), one grid point.

    Returns:
      The runner's PlannedRun (its `.job` is the engine's RunJob).
    """
    from pipeline import config, planning

    (run_config,) = config.expand(tree)
    return planning.plan_run(run_config)


def full_gd_tree(n_users: int, dim: int, rounds: int, shards: int = 1, backend: str = "local") -> dict:
    """Config of a fully interactive run on the quadratic: every user in every round."""
    return {"experiment": "bench", "problem": {"name": "quadratic", "dim": dim, "radius": 1.0},
            "n_users": n_users, "optimizer": {"name": "full_gd", "rounds": rounds},
            "privacy": {"epsilon": 1.0, "delta": 1e-6}, "seeds": [0],
            "execution": {"backend": backend, "shards": shards, "block_size": 65536}}
