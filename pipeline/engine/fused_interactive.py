"""Compiled fully interactive rounds: a shard's share of a round in which every user of the
population sends its gradient at one query point, with a protocol whose fused encoding gives
block partials (`counts`: P_vec, the sum protocols none, central_gaussian, shuffle_gaussian and
local_l2, Girgis's linf, l2 and l1 randomizers, a plug-in's such as the Skellam sum's) in exact
mode on a problem with a compiled twin (Problem.compiled_problem), as one call of a
compiled.block_kernel over the shard's held users instead of about 12 numpy passes
(shared/DESIGN.md §5, "Fast paths are twins of the reference path").

It is the twin of `Shard.python_partial_counts`: the same streams drawn in the same order
and the same float operations, so the partial is the same integers on any CPU
(tests/test_fused_interactive.py). Any other round (sampled users, smoothing, two query
points, another protocol, robust mode) keeps the Python path: `encoding` says None.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pipeline.engine.fused import compiles, encoding_functions, fusable
from pipeline.engine.layout import ROUND_STREAM, chunk_users, counter, run_key
from pipeline.numerics import pairwise_sum
from pipeline.optimizers.base import RoundPlan
from pipeline.protocols.base import GRADIENTS
from pipeline.twins import stage_key


class InteractiveRounds:
    """A shard's compiled fully interactive rounds: each round's share of the statistic from
    its held users, one kernel call (compiled.block_kernel), the twin of
    Shard.python_partial_counts (the protocol's encode_block over the problem's gradients), bit for bit.

    Args:
      shard: a Shard holding its users' single records of a problem with a twin (`interactive_rounds`).
    """

    def __init__(self, shard):
        from pipeline import compiled

        self._shard = shard
        self._key = run_key(shard.job.seed)
        self._counter = counter(ROUND_STREAM, 0, 0)  # rewritten by the kernel for every block
        self._state = np.zeros(compiled.STATE_WORDS, np.uint64)
        self._problem = shard.job.problem.compiled_problem()

    @staticmethod
    def encoding(plan: RoundPlan, params: Any, theta: np.ndarray, protocol: Any) -> Any | None:
        """The call's constants when a kernel reproduces this round, else None: every user of
        the population sends the gradient at one query point, unsmoothed, with a protocol whose
        fused encoding gives block partials (`counts`)."""
        if plan.sampling != "all" or plan.smoothing != 0.0 or plan.inputs != GRADIENTS or theta.ndim != 1:
            return None
        return block_encoding(protocol, params)

    def partial(self, plan: RoundPlan, params: Any, theta: np.ndarray, encoding: Any) -> Any | None:
        """The shard's partial of the round, as Shard.python_partial_counts; None if a gradient is
        not finite or a block's sum leaves the fixed-point range (the Python path then says
        which) or no user of the round is here.

        Args:
          plan, params, theta: the round, its protocol call and its query point.
          encoding: `encoding(...)` of them.
        """
        shard = self._shard
        slices = list(shard._block_slices(plan))
        if not slices:
            return None
        blocks = np.array([block for block, _ in slices], np.int64)
        starts = np.array([users.start for _, users in slices], np.int64)
        stops = np.array([users.stop for _, users in slices], np.int64)
        counts = np.empty((blocks.size, *accumulator_shape(encoding, theta.size)), np.int64)
        kernel = block_kernel(encoding, self._problem)
        # θ copied: a read-only query would compile the kernel anew (pipeline.problems.base.writeable)
        if not kernel(self._problem, np.array(theta, np.float64), shard.data, starts, stops, blocks, plan.round, self._key,
                      self._counter, self._state, chunk_users(theta.size), encoding, counts):
            return None
        return shard.job.protocol.merge([encoding.block_partial(users, ones)
                                         for users, ones in zip((stops - starts).tolist(), counts)])


def block_encoding(protocol: Any, params: Any) -> Any | None:
    """The call's fused encoding (Protocol.fused_encoding) if it gives block partials (`counts`,
    `block_partial`): what block_kernel encodes a fully interactive round's blocks with; else None."""
    encoding = protocol.fused_encoding(params)
    return encoding if hasattr(type(encoding), "counts") else None


def accumulator_shape(encoding: Any, dim: int) -> tuple[int, ...]:
    """The shape of a block's accumulator (the encoding's `counts`: P_vec's ones and a sum's
    units per coordinate, Girgis's histograms per level, index and bit), from its work arrays."""
    return np.shape(encoding.counts(encoding.work(dim, 1)))


_BLOCK_KERNELS: dict = {}  # (the encoding's class, the twin's class) → its block kernel, for this process


def block_kernel(encoding: Any, twin: Any) -> Any:
    """compiled.block_kernel of a protocol's fused encoding and a compiled twin's gradients,
    keyed by the sources of the functions it inlines (twins.stage_key)."""
    kinds = (type(encoding), type(twin))
    if kinds not in _BLOCK_KERNELS:
        from pipeline import compiled

        key = stage_key("blocks", (*encoding_functions(encoding), type(twin).gradients, pairwise_sum))
        _BLOCK_KERNELS[kinds] = compiled.block_kernel(*kinds, int(key[:15], 16))
    return _BLOCK_KERNELS[kinds]


class GivenInputs(NamedTuple):
    """A compiled twin whose users' gradients are given, its data's columns themselves: the
    audit's neighbouring inputs, encoded by the run's compiled encoding (encoded_blocks)."""

    dim: int

    def gradients(self, query, data, column, users, out):
        """Data columns [column, column + users) into `out` in (coordinate, user) order."""
        for coordinate in range(self.dim):
            row = data[coordinate, column: column + users]
            target = out[coordinate * users: (coordinate + 1) * users]
            for user in range(users):
                target[user] = row[user]


def encoded_blocks(encoding: Any, inputs: np.ndarray, block_size: int, key: np.ndarray, round_index: int) -> list | None:
    """A call's block partials on given inputs, as a fully interactive round's kernel encodes a
    shard's blocks: block k is columns [k·block_size, (k + 1)·block_size), encoded from the stream
    (ROUND_STREAM, round_index, k) of `key` (the kernel's norms, clip and randomizer: the code a
    compiled run sends its users' messages with).

    Args:
      encoding: the protocol's fused encoding, with `counts` and `block_partial`.
      inputs: (d, users) float64, C-contiguous.
      block_size: users per block.
      key: the Philox key (two uint64 words).
      round_index: the streams' round word.

    Returns:
      Each block's partial (encoding.block_partial), or None if a block cannot finish (a value
      not finite, a fixed-point overflow).
    """
    from pipeline import compiled

    dim, users = inputs.shape
    starts = np.arange(0, users, block_size, dtype=np.int64)
    stops = np.minimum(starts + block_size, users)
    counts = np.empty((starts.size, *accumulator_shape(encoding, dim)), np.int64)
    twin = GivenInputs(dim)
    kernel = block_kernel(encoding, twin)
    state = np.zeros(compiled.STATE_WORDS, np.uint64)
    if not kernel(twin, np.zeros(dim), inputs, starts, stops, np.arange(starts.size), round_index, key,
                  counter(ROUND_STREAM, 0, 0), state, chunk_users(dim), encoding, counts):
        return None
    return [encoding.block_partial(int(size), row) for size, row in zip(stops - starts, counts)]


def interactive_rounds(shard) -> InteractiveRounds | None:
    """The shard's compiled fully interactive rounds, or None when its users are not
    held single records of a problem with a compiled twin (Problem.compiled_problem) in exact mode (then every round
    keeps the Python path; a round the kernel does not reproduce keeps it too)."""
    job = shard.job
    held = shard.data is not None and shard.offsets is None
    twin = job.problem.compiled_problem() is not None
    return InteractiveRounds(shard) if held and twin and job.simulation == "exact" else None


def encodes_compiled(job: Any, plan: RoundPlan, params: Any) -> bool:
    """Whether a run sends its users' messages of the call at `plan` with the protocol's fused
    encoding: its carried rounds are fused (fused.fusable), or its shards run compiled fully
    interactive rounds (fused.compiles) and this round is one the block kernel reproduces
    (InteractiveRounds.encoding, at one query point)."""
    if fusable(job):
        return True
    return compiles(job) and InteractiveRounds.encoding(plan, params, np.zeros(job.problem.dim), job.protocol) is not None
