"""One round end to end, wherever it runs: query → users' statistic →
analyzer → optimizer update → metrics (shared/DESIGN.md §2)."""
from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple

import numpy as np

from pipeline.errors import NonFiniteError, value_class
from pipeline.protocols.base import RoundPlan

# (plan, protocol parameters, θ) → the analyzer's statistic of the round.
Collect = Callable[[RoundPlan, Any, np.ndarray], Any]


class RoundRecord(NamedTuple):
    """What a round leaves behind: which round and users, the protocol parameters
    it ran with (for the ledger), and the released model's loss.

    On a dataset (a problem without exact losses) the losses are NaN until the
    run is over; a round to be measured then carries its released model in
    `released` (pipeline.engine.evaluation), and gets the held-out metrics and the
    optimum's Frank–Wolfe gap too."""

    round: int
    first_user: int
    stop_user: int
    params: Any
    users: int
    excess_loss: float
    population_loss: float
    seconds: float
    released: np.ndarray | None = None
    test_loss: float = math.nan
    test_accuracy: float = math.nan
    optimum_gap: float = math.nan


# The record fields that pickle as numeric arrays; the others (params, released) as lists.
_NUMERIC = {"round": np.int64, "first_user": np.int64, "stop_user": np.int64, "users": np.int64,
            "excess_loss": np.float64, "population_loss": np.float64, "seconds": np.float64,
            "test_loss": np.float64, "test_accuracy": np.float64, "optimum_gap": np.float64}


class RoundRecords(list):
    """Round records in order: a list of RoundRecord that pickles in columns, one array
    per numeric field. Records travel from a shard's carried rounds to the run, and from
    the run to the driver (a 10⁸-user seq_sgd has 2·10⁶ rounds): a pickle round trip of
    records holding their RoundPlan took 14 µs a record, in columns 4 µs (most of it
    rebuilding the tuples)."""

    def __reduce__(self):
        columns = zip(*self) if self else [()] * len(RoundRecord._fields)
        return _unpickle_records, (tuple(np.array(values, dtype=_NUMERIC[name]) if name in _NUMERIC else list(values)
                                         for name, values in zip(RoundRecord._fields, columns)),)


def _unpickle_records(columns: tuple) -> RoundRecords:
    """RoundRecords from its pickled columns (numeric ones back to Python numbers)."""
    lists = [column.tolist() if isinstance(column, np.ndarray) else column for column in columns]
    return RoundRecords(map(RoundRecord._make, zip(*lists)))


def execute_rounds(job: Any, state: Any, start: int, stop: int, collect: Collect) -> tuple[Any, RoundRecords]:
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
    records = RoundRecords()
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
        for name, value in (("the analyzer's estimate", noisy_sum), ("the model θ", released)):
            if not np.isfinite(value).all():
                raise NonFiniteError(f"round {round_index}: {name} holds {value_class(value)}")
        if exact:
            records.append(RoundRecord(round_index, plan.first_user, plan.stop_user, params, counts.users,
                                       job.problem.excess_loss(released),
                                       job.problem.population_loss(released), time.perf_counter() - began))
        else:  # measured after the run, on the shards that hold the rows
            kept = np.array(released, copy=True) if round_index in job.evaluation_rounds else None
            records.append(RoundRecord(round_index, plan.first_user, plan.stop_user, params, counts.users,
                                       math.nan, math.nan, time.perf_counter() - began, kept))
    return state, records
