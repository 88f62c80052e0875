"""A run as the engine carries it: everything a shard needs, picklable."""
from __future__ import annotations

import dataclasses
import functools

from pipeline.engine.layout import BlockLayout
from pipeline.optimizers.base import Optimizer, Schedule
from pipeline.problems.base import Problem

EXACT = "exact"
LITERAL = "literal"
SIMULATIONS = (EXACT, LITERAL)


@dataclasses.dataclass(frozen=True)
class RunJob:
    """One run: problem, optimizer, protocol, seed and simulation mode.

    Attributes:
      problem: the SCO problem.
      optimizer: the resolved optimizer.
      protocol: the protocol (e.g. pipeline.protocols.CjmpVec()).
      seed: the run's seed.
      n_users: n.
      block_size: users per block (part of the results' identity).
      simulation: EXACT or LITERAL.
    """

    problem: Problem
    optimizer: Optimizer
    protocol: object
    seed: int
    n_users: int
    block_size: int
    simulation: str = EXACT

    @functools.cached_property
    def schedule(self) -> Schedule:
        return self.optimizer.schedule()

    @property
    def layout(self) -> BlockLayout:
        return BlockLayout(self.n_users, self.block_size)
