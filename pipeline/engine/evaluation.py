"""Metrics of a run whose users are a dataset's rows (pipeline.problems.dataset):
measured after the rounds, from sums that the shards compute over their own
rows, block by block.

Per-block sums, added on the driver in block order, make every metric
bit-identical for any number of shards and on either backend (the blocks do not
depend on the sharding). They are aggregates over a block's users, never a
user's value; like every excess loss the pipeline reports they are measurements
of the simulation, not releases of the protocol.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline.engine.rounds import RoundRecords

OPTIMUM_TOLERANCE = 1e-12  # SLSQP's ftol; the achieved Frank–Wolfe gap is what is reported
OPTIMUM_ITERATIONS = 1000


def evaluation_rounds(rounds: int, count: int) -> frozenset[int]:
    """The rounds whose metrics are measured: every one if there are at most `count`,
    else about `count` log-spaced ones, the first and the last always among them."""
    if rounds <= count:
        return frozenset(range(rounds))
    spaced = np.unique(np.round(np.geomspace(1, rounds, count)).astype(np.int64) - 1)
    return frozenset(int(r) for r in spaced) | {0, rounds - 1}


# What the optimum cache keeps: the minimal training objective F(θ̂) and its Frank–Wolfe gap (the
# excess losses' reference), never θ̂ itself, an exact statistic of the rows (README, "Your own data").
CACHED = ("loss", "gap", "solver")


def cache_folder() -> Path:
    """Where computed optima are kept: $SHUFFLE_SCO_CACHE, or ~/.cache/shuffle_sco."""
    return Path(os.environ.get("SHUFFLE_SCO_CACHE") or Path.home() / ".cache" / "shuffle_sco") / "optima"


def empirical_optimum(problem, n_users: int, objective: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
    """min over Θ of the training objective F(θ) = (1/n)Σᵢℓ(θ, xᵢ) + (μ/2)‖θ‖², by scipy's
    SLSQP under the ball constraint ‖θ‖² ≤ R² (then, at an interior optimum, L-BFGS-B
    without it), cached by the objective's key (the table's bytes and every option it
    depends on).

    The Frank–Wolfe gap g(θ̂) = ⟨∇F(θ̂), θ̂⟩ + R‖∇F(θ̂)‖ = max_{s∈Θ}⟨∇F(θ̂), θ̂ − s⟩
    bounds F(θ̂) − min F by convexity, so the excess losses measured against F(θ̂) are
    understated by at most g; it is returned and logged with every run.

    Args:
      problem: the dataset problem.
      n_users: n.
      objective: θ ↦ (Σᵢℓ(θ, xᵢ), Σᵢ∇ℓ(θ, xᵢ)) over the users, as one vector.

    Returns:
      (F(θ̂), its Frank–Wolfe gap).
    """
    from filelock import FileLock
    from scipy.optimize import minimize

    path = cache_folder() / f"{problem.objective_key(n_users)}.json"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner-only: it holds statistics of the data
    with FileLock(str(path) + ".lock", mode=0o600):  # concurrent runs on one dataset solve it once
        if path.exists():
            stored = json.loads(path.read_text())
            if set(stored) - set(CACHED):  # written before 0.3 with θ̂ itself: keep only what is needed
                _store(path, {key: stored[key] for key in CACHED if key in stored})
            return stored["loss"], stored["gap"]

        def risk(theta: np.ndarray) -> tuple[float, np.ndarray]:
            sums = objective(theta)
            return problem.risk(sums[0] / n_users, theta), sums[1:] / n_users + problem.l2 * theta

        radius = problem.radius
        solved = minimize(risk, np.zeros(problem.dim), jac=True, method="SLSQP",
                          constraints=[{"type": "ineq", "fun": lambda t: radius**2 - t @ t, "jac": lambda t: -2 * t}],
                          options={"ftol": OPTIMUM_TOLERANCE, "maxiter": OPTIMUM_ITERATIONS})
        theta = problem.project(solved.x)
        if np.linalg.norm(theta) < radius * (1 - 1e-6):
            # An interior optimum: the ball is inactive, so polish without it, to a gradient
            # (hence a gap) far below what SLSQP's function tolerance leaves.
            polished = minimize(risk, theta, jac=True, method="L-BFGS-B",
                                options={"gtol": 1e-14, "ftol": 0.0, "maxiter": OPTIMUM_ITERATIONS})
            if np.linalg.norm(polished.x) <= radius and polished.fun <= risk(theta)[0]:
                theta = polished.x
        loss, gradient = risk(theta)
        gap = max(0.0, float(gradient @ theta) + radius * float(np.linalg.norm(gradient)))
        if not (math.isfinite(loss) and math.isfinite(gap)):
            raise FloatingPointError(f"the empirical optimum's solver ended at a non-finite point: {solved.message}")
        _store(path, {"loss": loss, "gap": gap, "solver": f"scipy SLSQP, ftol {OPTIMUM_TOLERANCE:g}: {solved.message}"})
        return loss, gap


def _store(path: Path, entry: dict) -> None:
    """Writes a cache entry atomically, readable by its owner only."""
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(json.dumps(entry))
    os.replace(temporary, path)


def measure(pool, records: RoundRecords) -> RoundRecords:
    """Fills the measured rounds' metrics of a dataset run (the rest stay NaN).

    Args:
      pool: the run's ShardPool (its shards hold the rows).
      records: the run's RoundRecords; the measured ones carry their released θ.

    Returns:
      The records, with excess_loss (excess empirical risk), population_loss (the
      empirical risk F), test_loss, test_accuracy and optimum_gap where measured.
    """
    job = pool.job
    problem, n = job.problem, job.n_users
    measured = records.released_positions()
    if not measured:
        return records
    optimum, gap = empirical_optimum(problem, n, lambda theta: pool.block_sums("objective_blocks", theta)[0].sum(axis=0))
    thetas = np.stack([records[index].released for index in measured])
    train, heldout = pool.block_sums("metric_blocks", thetas)
    train, heldout = train.sum(axis=0), heldout.sum(axis=0)
    out = records.copy()
    for column, index in enumerate(measured):
        theta = thetas[column]
        risk = problem.risk(train[0, column] / n, theta)
        tested = problem.heldout_users
        out.set(
            index, released=None, excess_loss=risk - optimum, population_loss=risk,
            test_loss=heldout[0, column] / tested if tested else math.nan,
            test_accuracy=heldout[1, column] / tested if tested and problem.loss.classifier else math.nan,
            optimum_gap=gap)
    return out
