"""A run as the engine carries it: everything a shard needs, picklable."""
from __future__ import annotations

import dataclasses
import functools

from pipeline.accounting.compositions import FINAL_ITERATE, SEQUENTIAL
from pipeline.engine.evaluation import evaluation_rounds
from pipeline.engine.layout import BlockLayout
from pipeline.optimizers.base import Optimizer, Schedule, with_dropouts, with_records
from pipeline.problems.base import ONE_EACH, Problem, RecordsPerUser
from pipeline.protocols.base import Protocol

EXACT = "exact"
LITERAL = "literal"
SIMULATIONS = (EXACT, LITERAL)


@dataclasses.dataclass(frozen=True)
class RunJob:
    """One run: problem, optimizer, protocol, seed and simulation mode.

    Attributes:
      problem: the SCO problem.
      optimizer: the resolved optimizer.
      protocol: the protocol, planning for the run's accounting mode.
      seed: the run's seed.
      n_users: n.
      block_size: users per block (part of the results' identity).
      simulation: EXACT or LITERAL.
      honest_fraction: robust mode's γ (1: nobody drops out).
      records: how many records each synthetic user holds (a dataset's user column says it for its users).
      records_min: the records every user is guaranteed to hold (public: a fixed m, or a dataset's declared minimum).
      records_per_round: s, how many of its records an answering user uses (0: all of them).
      per_record: record-level privacy: each used record sends its own message.
      unit: the unit of privacy the ledger states ("user" or "record").
    """

    problem: Problem
    optimizer: Optimizer
    protocol: Protocol
    seed: int
    n_users: int
    block_size: int
    simulation: str = EXACT
    honest_fraction: float = 1.0
    records: RecordsPerUser = ONE_EACH
    records_min: int = 1
    records_per_round: int = 0
    per_record: bool = False
    unit: str = "user"

    @functools.cached_property
    def schedule(self) -> Schedule:
        schedule = self.optimizer.schedule()
        schedule = schedule if self.honest_fraction == 1.0 else with_dropouts(schedule, self.honest_fraction)
        return with_records(schedule, self.records_per_round, self.per_record, self.records_min)

    @functools.cached_property
    def evaluation_rounds(self) -> frozenset[int]:
        """The rounds measured after the run (problems without exact losses only)."""
        return evaluation_rounds(self.schedule.rounds, self.problem.evaluations)

    @property
    def heldout_layout(self) -> BlockLayout:
        """The held-out records (a dataset's test rows) in blocks: shards measure them block by block."""
        return BlockLayout(self.problem.heldout_users, self.block_size)

    @functools.cached_property
    def layout(self) -> BlockLayout:
        """The users in blocks (made once: every round asks for it)."""
        return BlockLayout(self.n_users, self.block_size)


def drawn_per_block(job: RunJob) -> bool:
    """Whether a run's shards draw each block's users when a round asks for them instead of
    holding every user for the run: synthetic users with one record each, in a schedule
    that asks each user once (SEQUENTIAL: disjoint batches; FINAL_ITERATE: pnsgd's one
    pass, a user a step), so memory is one block, not n.
    Fully interactive runs ask every user every round and keep holding them."""
    return (not job.problem.reads_rows and job.records.one_each
            and job.schedule.composition in (SEQUENTIAL, FINAL_ITERATE))
