"""A shard: the users of a group of blocks, their data kept in place for the
whole run, and their side of every round (the trust boundary of DESIGN §3:
nothing per-user leaves this object, only protocol output)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pipeline.engine.job import RunJob, drawn_per_block
from pipeline.engine.layout import (DATA_STREAM, NOISE_STREAM, PERMUTE_STREAM, RECORD_STREAM, RECORDS_STREAM,
                                    ROUND_STREAM, SCATTER_STREAM, Streams, chunk_users, sampled_users, stream)
from pipeline.engine.rounds import RoundRecords, execute_rounds
from pipeline.errors import NonFiniteError, value_class
from pipeline.problems.base import choose_records, offsets_of
from pipeline.optimizers.base import answer
from pipeline.protocols.base import DATA, RoundPlan

class Shard:
    """The users of blocks [first_block, stop_block) of one run.

    Args:
      job: the run.
      first_block, stop_block: the shard's blocks.
      heldout_blocks: the blocks of held-out records it measures (a dataset's test rows; job.heldout_layout).
    """

    def __init__(self, job: RunJob, first_block: int, stop_block: int, heldout_blocks: tuple[int, int] = (0, 0)):
        self.job = job
        self.streams = Streams(job.seed)  # each generator valid during the call it is passed to
        layout = job.layout
        self.blocks = range(first_block, stop_block)
        self.first_user = layout.block_users(first_block)[0]
        self.stop_user = layout.block_users(stop_block - 1)[1]
        # (rows, records): d rows, or d + 1 for labelled data (features, then the label); user by
        # user. Users holding several records have them at offsets[u] … offsets[u + 1] − 1 (None:
        # one record each, record u).
        self.offsets = None
        if job.problem.reads_rows:  # a dataset: this shard reads its users' rows, and no others
            self.data, counts = job.problem.read_user_records(job.n_users, self.first_user, self.stop_user)
            if counts is not None:
                self.offsets = offsets_of(counts)
        elif drawn_per_block(job):
            self.data = None  # each block's users are drawn when a round asks for them (_block_data)
        elif job.records.one_each:
            # Each block's data come from its own stream: the same whatever the sharding.
            # Filled block by block: peak memory is the data plus one block.
            self.data = np.empty((job.problem.data_dim, self.stop_user - self.first_user))
            for block in self.blocks:
                first, stop = layout.block_users(block)
                self.data[:, first - self.first_user: stop - self.first_user] = self.draw_block(block)
        else:  # each block's users' record counts, then their records, from the block's own streams
            counts = []
            for block in self.blocks:
                first, stop = layout.block_users(block)
                counts.append(job.records.draw(self.streams(RECORDS_STREAM, block), stop - first))
            self.offsets = offsets_of(np.concatenate(counts))
            self.data = np.empty((job.problem.data_dim, int(self.offsets[-1])))
            for block, block_counts in zip(self.blocks, counts):
                first = self.offsets[layout.block_users(block)[0] - self.first_user]
                self.data[:, first: first + block_counts.sum()] = job.problem.sample(
                    self.streams(DATA_STREAM, block), int(block_counts.sum()))
        self.counts = None if self.offsets is None else np.diff(self.offsets)
        self.heldout_blocks = range(*heldout_blocks)
        heldout = job.heldout_layout
        self.heldout_first = heldout.block_users(heldout_blocks[0])[0] if self.heldout_blocks else 0
        self.heldout = (job.problem.read_heldout(self.heldout_first, heldout.block_users(heldout_blocks[1] - 1)[1])
                        if self.heldout_blocks else None)
        self.dim = job.problem.dim
        self._step = chunk_users(self.dim)
        self._buffer = np.empty(self.dim * self._step)
        self._work = job.protocol.workspace(self._step, self.dim)

        self._drawn: tuple[int, np.ndarray] | None = None  # (block, its users' data): the block drawn last
        self._fused = None  # the compiled rounds (False: none for this job), built at the first carried rounds
        self._interactive = None  # the compiled fully interactive rounds (False: none), built at the first round

    def users(self) -> int:
        """How many users this shard holds (also a readiness probe for actors)."""
        return self.stop_user - self.first_user

    def draw_block(self, block: int) -> np.ndarray:
        """A block's users' data, from the block's own stream: the same whenever and wherever drawn
        (from a generator of its own, so any thread may draw: pipeline.engine.fused draws ahead)."""
        first, stop = self.job.layout.block_users(block)
        return self.job.problem.sample(stream(self.job.seed, DATA_STREAM, block), stop - first)

    def _block_data(self, block: int) -> tuple[np.ndarray, int]:
        """The data holding a block's users, and the shard position of its first column: the
        shard's data (held for the run), or the block's alone, drawn now (drawn_per_block)."""
        if self.data is not None:
            return self.data, 0
        if self._drawn is None or self._drawn[0] != block:
            self._drawn = (block, self.draw_block(block))
        return self._drawn[1], self.job.layout.block_users(block)[0] - self.first_user

    def _input_chunks(self, plan: RoundPlan, theta: np.ndarray, users: slice | np.ndarray, block: int):
        """The inputs of some of this block's users (a slice of shard positions, or their
        positions), chunk by chunk, as contiguous (d, inputs) views of one reused buffer
        (each chunk is consumed before the next is made). The protocol's randomizer clips
        them to its bound.

        An input is a user's gradient (or data point); a user holding several records sends
        the mean over the records it uses, or at record level (plan.per_record) one input per
        record used."""
        if self.offsets is not None:
            yield from self._record_chunks(plan, theta, users, block)
            return
        contiguous = isinstance(users, slice)
        first, stop = (users.start, users.stop) if contiguous else (0, users.size)
        held, offset = self._block_data(block)
        for low in range(first, stop, self._step):
            high = min(low + self._step, stop)
            # A slice stays a view of the held data; sampled positions are gathered.
            data = held[:, low - offset: high - offset] if contiguous else held[:, users[low:high] - offset]
            out = self._buffer[: self.dim * (high - low)].reshape(self.dim, high - low)
            yield self._compute(plan, theta, data, out, lambda: np.arange(low, high) if contiguous else users[low:high])

    def _compute(self, plan: RoundPlan, theta: np.ndarray, data: np.ndarray, out: np.ndarray, owners) -> np.ndarray:
        """The inputs of some records into out (d, records) (pipeline.optimizers.base.answer).

        Args:
          owners: () → the shard positions of the records' users (called only to name one).

        Raises:
          NonFiniteError: an input that is NaN or infinite (a randomizer would cast it silently).
        """
        answer(self.job.problem, plan, theta, data, out)
        if not np.isfinite(out).all():
            column = int(np.flatnonzero(~np.isfinite(out).all(axis=0))[0])
            what = "data point" if plan.inputs == DATA else "gradient"
            raise NonFiniteError(f"round {plan.round}: user {self.first_user + int(owners()[column])}'s {what} "
                                 f"holds {value_class(out[:, column])}")
        return out

    def _record_chunks(self, plan: RoundPlan, theta: np.ndarray, users: slice | np.ndarray, block: int):
        """_input_chunks for users holding several records: the records each uses (all, or
        plan.records_per_round of them drawn from the round's and block's stream), then one
        input per record (record level) or per user, the mean of its records' (in record
        order, so the same for any sharding)."""
        positions = np.arange(users.start, users.stop) if isinstance(users, slice) else np.asarray(users)
        counts = self.counts[positions]
        if plan.records_per_round:
            within, owner = choose_records(self.streams(RECORD_STREAM, plan.round, block), counts,
                                           plan.records_per_round)
        else:
            owner = np.repeat(np.arange(positions.size), counts)
            within = np.arange(owner.size) - np.repeat(offsets_of(counts)[:-1], counts)
        records = self.offsets[positions[owner]] + within
        if plan.per_record:
            for low in range(0, records.size, self._step):
                high = min(low + self._step, records.size)
                yield self._compute(plan, theta, self.data[:, records[low:high]],
                                    self._buffer[: self.dim * (high - low)].reshape(self.dim, high - low),
                                    lambda: positions[owner[low:high]])
            return
        starts = offsets_of(np.bincount(owner, minlength=positions.size))
        for low in range(0, positions.size, self._step):
            high = min(low + self._step, positions.size)
            first, stop = starts[low], starts[high]
            inputs = self._compute(plan, theta, self.data[:, records[first:stop]],
                                   np.empty((self.dim, stop - first)), lambda: positions[owner[first:stop]])
            out = self._buffer[: self.dim * (high - low)].reshape(self.dim, high - low)
            np.add.reduceat(inputs, starts[low:high] - first, axis=1, out=out)
            out /= np.diff(starts[low: high + 1])
            yield out

    def _inputs(self, plan: RoundPlan, theta: np.ndarray, users: slice | np.ndarray, block: int) -> np.ndarray:
        """The inputs of some of this block's users as one (d, inputs) array."""
        return np.concatenate([chunk.copy() for chunk in self._input_chunks(plan, theta, users, block)], axis=1)

    def _block_slices(self, plan: RoundPlan):
        """(block, shard positions) of the round's users in this shard: a slice,
        or for a sampled round the sampled users' positions (possibly none)."""
        if plan.sampling != "all":
            chosen = sampled_users(self.job.layout, self.streams, plan, self.blocks)
            for block in self.job.layout.blocks_overlapping(max(plan.first_user, self.first_user),
                                                            min(plan.stop_user, self.stop_user)):
                yield block, chosen.get(block, np.zeros(0, np.int64)) - self.first_user
            return
        first = max(plan.first_user, self.first_user)
        stop = min(plan.stop_user, self.stop_user)
        for block in self.job.layout.blocks_overlapping(first, stop):
            block_first, block_stop = self.job.layout.block_users(block)
            yield block, slice(max(first, block_first) - self.first_user, min(stop, block_stop) - self.first_user)

    def partial_counts(self, plan: RoundPlan, params: Any, theta: np.ndarray) -> Any:
        """Exact mode: this shard's users' share of the round's statistic, compiled
        (pipeline.engine.fused_interactive) when the kernel reproduces the round, else
        `python_partial_counts`.

        Blocks are merged here, so nothing finer than a shard's total leaves it.

        Args:
          plan: the round.
          params: the protocol parameters.
          theta: the queried model.

        Returns:
          The shard's partial, or None if none of its users is in the round.
        """
        if self._interactive is None:
            from pipeline.engine.fused_interactive import interactive_rounds  # it builds on this module

            self._interactive = interactive_rounds(self) or False
        encoding = self._interactive.encoding(plan, params, theta, self.job.protocol) if self._interactive else None
        partial = None if encoding is None else self._interactive.partial(plan, params, theta, encoding)
        return self.python_partial_counts(plan, params, theta) if partial is None else partial

    def python_partial_counts(self, plan: RoundPlan, params: Any, theta: np.ndarray) -> Any:
        """partial_counts in Python, numpy call by numpy call: the reference of the compiled one."""
        parts = [
            self.job.protocol.encode_block(
                params, self._input_chunks(plan, theta, users, block),
                self.streams(ROUND_STREAM, plan.round, block), self._work,
            )
            for block, users in self._block_slices(plan)
        ]
        return self.job.protocol.merge(parts) if parts else None

    def _per_block(self, layout, blocks: range, data: np.ndarray | None, first_user: int, measure,
                   offsets: np.ndarray | None = None) -> np.ndarray:
        """measure(block's records) for each block, stacked in block order; with `offsets` (users
        holding several records) measure(records, weights): each record weighs 1/(its user's records),
        so that every user counts once."""
        if not blocks:
            return None
        parts = []
        for block in blocks:
            first, stop = (user - first_user for user in layout.block_users(block))
            if offsets is None:
                parts.append(measure(data[:, first:stop]))
            else:
                counts = np.diff(offsets[first: stop + 1])
                parts.append(measure(data[:, offsets[first]: offsets[stop]], np.repeat(1.0 / counts, counts)))
        return np.stack(parts)

    def objective_blocks(self, theta: np.ndarray) -> tuple[np.ndarray]:
        """Per block: the loss sum and its gradient at θ (a dataset's optimum; pipeline.engine.evaluation).

        Returns:
          ((blocks, 1 + dim),).
        """
        sums = self._per_block(self.job.layout, self.blocks, self.data, self.first_user,
                               lambda *data: self.job.problem.objective_sums(theta, *data), self.offsets)
        return (sums,)

    def metric_blocks(self, thetas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per block of users and of held-out records: loss sums and correct counts of T models.

        Returns:
          ((blocks, 2, T), (held-out blocks, 2, T)).
        """
        measure = lambda *data: self.job.problem.metric_sums(thetas, *data)  # noqa: E731
        train = self._per_block(self.job.layout, self.blocks, self.data, self.first_user, measure, self.offsets)
        heldout = self._per_block(self.job.heldout_layout, self.heldout_blocks, self.heldout, self.heldout_first,
                                  measure)
        return train, heldout if heldout is not None else np.zeros((0, 2, len(thetas)))

    def merge(self, *partials: Any) -> Any:
        """Adds the shards' partials of a round, so that only the total goes
        to the analyzer (on shard actors, in a tree on Ray), or None if none of them has users."""
        present = [part for part in partials if part is not None]
        return self.job.protocol.merge(present) if present else None

    def run_rounds(self, state: Any, start: int, stop: int) -> tuple[Any, RoundRecords]:
        """Runs rounds whose users all live here, without a trip to the driver: compiled
        (pipeline.engine.fused) when the run has a fused twin, else round by round as
        `python_rounds`, each round's partial from `partial_counts` (a fully interactive
        round's kernel, pipeline.engine.fused_interactive, where it has one).

        Args:
          state: the optimizer state before round `start`.
          start, stop: the rounds.

        Returns:
          (state, records), as execute_rounds.
        """
        if self._fused is None:
            from pipeline.engine.fused import fused_rounds  # it builds on this module

            self._fused = fused_rounds(self) or False
        if self._fused:
            return self._fused.run(state, start, stop)
        return self._rounds(state, start, stop, self.partial_counts)

    def python_rounds(self, state: Any, start: int, stop: int) -> tuple[Any, RoundRecords]:
        """run_rounds in Python, numpy call by numpy call: the reference of the compiled rounds."""
        return self._rounds(state, start, stop, self.python_partial_counts)

    def _rounds(self, state: Any, start: int, stop: int, partial: Callable) -> tuple[Any, RoundRecords]:
        """Rounds [start, stop) (execute_rounds), each round's statistic from `partial`."""
        def collect(plan, params, theta):
            return self.job.protocol.finish(params, partial(plan, params, theta), self.streams(NOISE_STREAM, plan.round))

        return execute_rounds(self.job, state, start, stop, collect)

    def literal_scatter(self, plan: RoundPlan, params: Any, theta: np.ndarray,
                        destinations: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Literal mode, shuffle stage 1: this shard's users' labelled bits,
        each sent to a uniformly random destination shard.

        Args:
          plan, params, theta: the round.
          destinations: the number of shards.

        Returns:
          For each destination, (labels, bits) of the messages sent to it.
        """
        parts = [
            self.job.protocol.encode_messages(
                params, self._inputs(plan, theta, users, block),
                self.streams(ROUND_STREAM, plan.round, block),
            )
            for block, users in self._block_slices(plan)
        ]
        if not parts:
            empty = (np.zeros(0, np.int32), np.zeros(0, np.uint8))
            return [empty] * destinations
        labels = np.concatenate([part[0] for part in parts])
        bits = np.concatenate([part[1] for part in parts])
        rng = self.streams(SCATTER_STREAM, plan.round, self.blocks.start)
        target = rng.integers(destinations, size=labels.size)
        return [(labels[target == d], bits[target == d]) for d in range(destinations)]

    def literal_gather(self, round_index: int, *chunks: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Literal mode, shuffle stage 2: a uniform permutation of the messages
        this shard received. Uniform destinations plus uniform permutations
        within each destination make the concatenation a uniform permutation.

        Args:
          round_index: the round.
          *chunks: (labels, bits) from every source shard.

        Returns:
          The permuted (labels, bits).
        """
        labels = np.concatenate([chunk[0] for chunk in chunks])
        bits = np.concatenate([chunk[1] for chunk in chunks])
        order = self.streams(PERMUTE_STREAM, round_index, self.blocks.start).permutation(labels.size)
        return labels[order], bits[order]
