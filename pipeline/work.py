"""What a run will cost before it starts: its work counted from the schedule (rounds, and the
answering users' records times d), turned into seconds at this machine's speed, announced,
and held to `execution.max_minutes` before any work (issue 46: a 10⁹-user run ran for
minutes without a word)."""
from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np

from pipeline import engine
from pipeline.accounting.compositions import FINAL_ITERATE, SEQUENTIAL
from pipeline.config import RunConfig
from pipeline.engine.job import LITERAL
from pipeline.errors import ConfigError

# What one round and one user-coordinate (an answering user's record, one of d coordinates: its
# gradient, encoding and share of the analyzer) cost on one core, in probes: the time this
# machine's numpy takes to draw one standard normal. Measured on the built-in methods (`python -m
# bench --only work` prints each one's measured/estimated ratio): a compiled round 300–1,000
# probes, a numpy one 7,000–13,000, a coordinate 0.8–5.7; rounded up, so the estimate is an
# upper bound on those runs. A fully interactive round on Ray also fans out to every shard:
# about a millisecond of actor calls.
ROUND_PROBES = {True: 1_500.0, False: 15_000.0}  # by whether the run compiles (engine.compiles)
COORDINATE_PROBES = 6.0
# A dataset's metrics, measured after the run at its evaluation rounds over every training and
# held-out record (a matrix product a block at a time): 0.1 probes a coordinate measured on
# MovieLens' 100,004 ratings, rounded up.
EVALUATION_PROBES = 0.5
FANOUT_PROBES = 100_000.0
PROBE_DRAWS = 2**18
CARRIED = (SEQUENTIAL, FINAL_ITERATE)  # rounds carried from shard to shard, never fanned out


@dataclasses.dataclass(frozen=True)
class Work:
    """A run's work, counted from its schedule before it starts.

    Attributes:
      rounds: protocol rounds.
      coordinates: answering users' records used, times d, summed over the rounds.
      compiled: whether its rounds run on the compiled kernels (engine.compiles).
      fanouts: rounds that fan out to every shard actor (fully interactive rounds on Ray).
      evaluated: record-coordinates a dataset's metrics read after the run (its evaluation rounds
        times its training and held-out records times the data's rows).
    """

    rounds: int
    coordinates: float
    compiled: bool
    fanouts: int = 0
    evaluated: float = 0.0

    def seconds(self, probe_s: float) -> float:
        """An upper estimate of the run's compute on one core, on a machine drawing a normal in `probe_s`."""
        return probe_s * (ROUND_PROBES[self.compiled] * self.rounds + COORDINATE_PROBES * self.coordinates
                          + FANOUT_PROBES * self.fanouts + EVALUATION_PROBES * self.evaluated)


def _answering(group) -> float:
    """Users who answer each round of a schedule's group."""
    if group.sampling == "uniform":
        return group.sample_size
    if group.sampling == "poisson":
        return group.rate * group.users
    return group.users


def work_of(job: engine.RunJob, backend: str) -> Work:
    """The run's work (see Work) on a backend ("ray" or "local")."""
    schedule = job.schedule
    held = job.problem.records_held(job.n_users)  # a dataset's users: their rows, not records_per_user
    held = job.n_users * job.records.mean if held is None else held
    records = job.records_per_round or held / job.n_users
    coordinates = sum(group.rounds * _answering(group) * group.folds for group in schedule.groups)
    fanouts = schedule.rounds if backend == "ray" and schedule.composition not in CARRIED else 0
    measured = 0 if job.problem.exact_loss else len(job.evaluation_rounds) * (held + job.problem.heldout_users)
    return Work(schedule.rounds, coordinates * records * job.problem.dim, engine.compiles(job), fanouts,
                measured * job.problem.data_dim)


@functools.cache
def probe_seconds() -> float:
    """Seconds this machine's numpy takes to draw one standard normal (the least of three timed draws)."""
    generator = np.random.default_rng(0)
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        generator.standard_normal(PROBE_DRAWS)
        best = min(best, time.perf_counter() - began)
    return best / PROBE_DRAWS


def duration(seconds: float) -> str:
    """"0.27 s", "45 s", "12 min", "3.2 h"."""
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate(run: RunConfig, job: engine.RunJob) -> float | None:
    """An upper estimate of a run's compute in seconds on one core of this machine (None in literal
    simulation, whose cost is its messages), held to `execution.max_minutes` before any work.

    Raises:
      ConfigError: naming execution.max_minutes, for a run estimated above it (with the estimate and
        the work it counts), or a literal run, which is not estimated.
    """
    limit = run["execution.max_minutes"]
    if job.simulation == LITERAL:
        if limit is not None:
            raise ConfigError("execution.max_minutes", limit, "literal simulation is not estimated (its cost is "
                                                              "the messages it materializes): unset the limit or "
                                                              "use execution.simulation: exact")
        return None
    work = work_of(job, run["execution.backend"])
    seconds = work.seconds(probe_seconds())
    if limit is not None and seconds > 60 * limit:
        raise ConfigError("execution.max_minutes", limit,
                          f"run {run.run_id} is estimated at up to {duration(seconds)} on one core ({work.rounds:,} "
                          f"rounds, {work.coordinates:.3g} user-coordinates; pipeline/work.py): raise the limit, or "
                          "lower n_users, problem.dim or the rounds")
    return seconds
