"""The driver's side of a run, over any pool of shards (in-process or Ray
actors): which rounds travel to the shard holding their users, which fan out,
and how the statistic of a fanned-out round is gathered (shared/DESIGN.md §2)."""
from __future__ import annotations

import abc
import time
from typing import Any, Callable

import numpy as np

from pipeline.engine import evaluation
from pipeline.engine.job import EXACT, RunJob
from pipeline.engine.layout import NOISE_STREAM, Streams
from pipeline.engine.rounds import RoundRecords, execute_rounds
from pipeline.protocols.base import RoundPlan

Messages = tuple[np.ndarray, np.ndarray]
# (rounds done, rounds in the run) → None: told about once a PROGRESS_S while a run goes on.
Progress = Callable[[int, int], None]
PROGRESS_S = 1.0
FIRST_CARRY = 1024  # rounds of the first carried trip to a shard; later trips last about PROGRESS_S


class ShardPool(abc.ABC):
    """Shards of one run, and the calls the driver makes on them.

    Args:
      job: the run.
      shards: the requested number of shards (capped at the number of blocks).
    """

    def __init__(self, job: RunJob, shards: int):
        self.job = job
        self._streams = Streams(job.seed)  # the curator's noise, drawn on the driver
        layout = job.layout
        self.shard_blocks = layout.shard_blocks(shards)
        self.user_ranges = [(layout.block_users(a)[0], layout.block_users(b - 1)[1]) for a, b in self.shard_blocks]
        # A dataset's held-out records, in blocks spread over the shards the same way (some may hold none).
        heldout = job.heldout_layout
        groups = heldout.shard_blocks(len(self.shard_blocks)) if heldout.n_blocks else []
        self.heldout_blocks = groups + [(0, 0)] * (len(self.shard_blocks) - len(groups))

    def owner(self, plan: RoundPlan) -> int | None:
        """The shard holding every user of the round, if one does."""
        for index, (first, stop) in enumerate(self.user_ranges):
            if first <= plan.first_user and plan.stop_user <= stop:
                return index
        return None

    def _carried_stop(self, start: int, owner: int, last: int) -> int:
        """The end of the rounds from `start` (whose users all live in shard `owner`) up to `last`
        that one trip can carry: the first round with a user elsewhere, found group by group
        (a group's rounds move their users by a fixed stride, so those inside a shard's range
        are one interval) instead of round by round."""
        schedule = self.job.schedule
        first, stop_user = self.user_ranges[owner]
        stop = start + 1
        while stop < last:
            group, group_start = schedule.group_of(stop)
            inside = group_start + group.rounds  # a stride of 0: the same users every round
            if group.user_stride:  # rounds i with first ≤ f + i·s and f + i·s + users ≤ stop_user
                lowest = -(-(first - group.first_user) // group.user_stride)
                highest = (stop_user - group.users - group.first_user) // group.user_stride
                inside = group_start + highest + 1 if lowest <= stop - group_start <= highest else stop
            elif not (first <= group.first_user and group.first_user + group.users <= stop_user):
                inside = stop
            if inside <= stop:
                break
            stop = min(inside, last, group_start + group.rounds)
        return stop

    @abc.abstractmethod
    def run_rounds(self, shard: int, state: Any, start: int, stop: int) -> tuple[Any, RoundRecords]:
        """Shard.run_rounds on one shard."""

    @abc.abstractmethod
    def total_counts(self, plan: RoundPlan, params: Any, theta: np.ndarray) -> Any:
        """Exact mode: the round's total over every shard, merged among the
        shards so that the driver receives the total only (DESIGN §3)."""

    @abc.abstractmethod
    def shuffle_messages(self, plan: RoundPlan, params: Any, theta: np.ndarray) -> list[Messages]:
        """Literal mode: every shard's messages through the two-stage shuffle."""

    @abc.abstractmethod
    def call_all(self, method: str, *args: Any) -> list:
        """Shard.<method>(*args) on every shard, the results in shard order."""

    def block_sums(self, method: str, *args: Any) -> tuple[np.ndarray, ...]:
        """A Shard method's per-block arrays from every shard, concatenated in block order
        (what makes a dataset's metrics independent of the sharding)."""
        results = self.call_all(method, *args)
        return tuple(np.concatenate([result[part] for result in results]) for part in range(len(results[0])))

    def close(self) -> None:
        """Releases the shards."""

    def collect(self, plan: RoundPlan, params: Any, theta: np.ndarray) -> Any:
        """The analyzer's statistic of a round that spans shards."""
        protocol = self.job.protocol
        if self.job.simulation == EXACT:
            return protocol.finish(params, self.total_counts(plan, params, theta),
                                   self._streams(NOISE_STREAM, plan.round))
        shuffled = self.shuffle_messages(plan, params, theta)
        labels = np.concatenate([part[0] for part in shuffled])
        bits = np.concatenate([part[1] for part in shuffled])
        return protocol.count_messages(params, labels, bits)

    def run(self, progress: Progress | None = None) -> tuple[Any, RoundRecords]:
        """Runs every round of the job.

        Consecutive rounds whose users all live in one shard run there (exact
        mode), so sequential protocols pay one trip per about PROGRESS_S seconds of
        rounds, not one per round. Rounds are pure functions of (state, round), so
        where the trips end changes nothing in the results.

        Args:
          progress: told (rounds done, rounds) about once a PROGRESS_S seconds.

        Returns:
          (final optimizer state, one record per round).
        """
        schedule = self.job.schedule
        state = self.job.optimizer.start(self.job.seed)
        records = RoundRecords()
        start, carry = 0, FIRST_CARRY
        noted = time.perf_counter()
        while start < schedule.rounds:
            owner = self.owner(schedule.plan(start)) if self.job.simulation == EXACT else None
            stop = start + 1
            if owner is None:
                state, batch = execute_rounds(self.job, state, start, stop, self.collect)
            else:
                stop = self._carried_stop(start, owner, min(schedule.rounds, start + carry))
                began = time.perf_counter()
                state, batch = self.run_rounds(owner, state, start, stop)
                # The next trip lasts about PROGRESS_S at this trip's rate.
                carry = max(FIRST_CARRY, int((stop - start) * PROGRESS_S / max(time.perf_counter() - began, 1e-6)))
            records.extend(batch)
            start = stop
            if progress is not None and time.perf_counter() - noted >= PROGRESS_S:
                noted = time.perf_counter()
                progress(start, schedule.rounds)
        if not self.job.problem.exact_loss:  # a dataset: its metrics are sums over the shards' rows
            records = evaluation.measure(self, records)
        return state, records
