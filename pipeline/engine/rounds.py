"""One round end to end, wherever it runs: query → users' statistic →
analyzer → optimizer update → metrics (shared/DESIGN.md §2)."""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np

from pipeline.protocols.base import RoundPlan

# (plan, protocol parameters, θ) → the analyzer's statistic of the round.
Collect = Callable[[RoundPlan, Any, np.ndarray], Any]


@dataclasses.dataclass(frozen=True)
class RoundRecord:
    """What a round leaves behind: its plan, the protocol parameters it ran
    with (for the ledger), and the released model's loss.

    On a dataset (a problem without exact losses) the losses are NaN until the
    run is over; a round to be measured then carries its released model in
    `released` (pipeline.engine.evaluation), and gets the held-out metrics and the
    optimum's Frank–Wolfe gap too."""

    plan: RoundPlan
    params: Any
    users: int
    excess_loss: float
    population_loss: float
    seconds: float
    released: np.ndarray | None = None
    test_loss: float = math.nan
    test_accuracy: float = math.nan
    optimum_gap: float = math.nan


def execute_rounds(job: Any, state: Any, start: int, stop: int, collect: Collect) -> tuple[Any, list[RoundRecord]]:
    """Runs rounds [start, stop) of a job.

    The optimizer only ever sees the analyzer's estimate: `collect` returns
    the shuffled-message statistic and `decode` turns it into a noisy sum.

    Args:
      job: the RunJob.
      state: the optimizer state before round `start`.
      start, stop: the rounds to run.
      collect: gathers the round's statistic from the users.

    Returns:
      (state after round stop − 1, one record per round).
    """
    records = []
    exact = job.problem.exact_loss
    for round_index in range(start, stop):
        began = time.perf_counter()
        plan = job.schedule.plan(round_index)
        params = job.protocol.planned(plan, job.problem.dim)
        counts = collect(plan, params, job.optimizer.query(state))
        noisy_sum = job.protocol.decode(params, counts)
        # A Poisson or self-sampled round can be empty: the optimizer is told so (None).
        count = job.protocol.released_count(params, counts)
        state = job.optimizer.update(state, noisy_sum / count if count > 0 else None)
        released = job.optimizer.output(state)
        if exact:
            records.append(RoundRecord(plan, params, counts.users, job.problem.excess_loss(released),
                                       job.problem.population_loss(released), time.perf_counter() - began))
        else:  # measured after the run, on the shards that hold the rows
            kept = np.array(released, copy=True) if round_index in job.evaluation_rounds else None
            records.append(RoundRecord(plan, params, counts.users, math.nan, math.nan,
                                       time.perf_counter() - began, kept))
    return state, records
