"""Compiled fully interactive rounds: a shard's share of a round in which every user of the
population sends its gradient at one query point, with P_vec (cjmp_vec) or a sum protocol
(none, central_gaussian, shuffle_gaussian, local_l2) in exact mode on a problem with a compiled
twin (Problem.compiled_problem), as one call of a fused_kernel.block_kernel over the shard's held
users instead of about 12 numpy passes (shared/DESIGN.md §5, "Fast paths are twins of the reference path").

It is the twin of `Shard.python_partial_counts`: the same streams drawn in the same order
and the same float operations, so the partial is the same integers on any CPU
(tests/test_fused_interactive.py). Any other round (sampled users, smoothing, two query
points, another protocol, robust mode) keeps the Python path: `encoding` says None.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.engine.fused import encoding_functions, stage_key, twin_functions
from pipeline.engine.layout import ROUND_STREAM, chunk_users, counter, run_key
from pipeline.optimizers.base import RoundPlan
from pipeline.protocols.base import GRADIENTS


class InteractiveRounds:
    """A shard's compiled fully interactive rounds: each round's share of the statistic from
    its held users, one kernel call (fused_kernel.block_kernel), the twin of
    Shard.python_partial_counts (the protocol's encode_block over the problem's gradients), bit for bit.

    Args:
      shard: a Shard holding its users' single records of a problem with a twin (`interactive_rounds`).
    """

    def __init__(self, shard):
        from pipeline.engine import fused_kernel

        self._kernel = fused_kernel
        self._shard = shard
        self._key = run_key(shard.job.seed)
        self._counter = counter(ROUND_STREAM, 0, 0)  # rewritten by the kernel for every block
        self._state = np.zeros(fused_kernel.STATE_WORDS, np.uint64)
        self._problem = shard.job.problem.compiled_problem()
        self._kernels: dict[type, Any] = {}  # block_kernel by the fused encoding's class

    @staticmethod
    def encoding(plan: RoundPlan, params: Any, theta: np.ndarray, protocol: Any) -> Any | None:
        """The call's constants when a kernel reproduces this round, else None: every user of
        the population sends the gradient at one query point, unsmoothed, with P_vec or a sum protocol."""
        if plan.sampling != "all" or plan.smoothing != 0.0 or plan.inputs != GRADIENTS or theta.ndim != 1:
            return None
        encoding = protocol.fused_encoding(params)
        return encoding if encoding is not None and hasattr(type(encoding), "counts") else None

    def _block_kernel(self, encoding: Any) -> Any:
        """fused_kernel.block_kernel of a protocol's fused encoding and the problem's twin."""
        kind = type(encoding)
        if kind not in self._kernels:
            key = stage_key("blocks", (*encoding_functions(encoding), *twin_functions(self._problem)))
            self._kernels[kind] = self._kernel.block_kernel(kind, type(self._problem), int(key[:15], 16))
        return self._kernels[kind]

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
        counts = np.empty((blocks.size, theta.size), np.int64)
        kernel = self._block_kernel(encoding)
        # θ copied: a read-only query would compile the kernel anew (pipeline.problems.base.writeable)
        if not kernel(self._problem, np.array(theta, np.float64), shard.data, starts, stops, blocks, plan.round, self._key,
                      self._counter, self._state, chunk_users(theta.size), encoding, counts):
            return None
        return shard.job.protocol.merge([encoding.block_partial(users, ones)
                                         for users, ones in zip((stops - starts).tolist(), counts)])


def interactive_rounds(shard) -> InteractiveRounds | None:
    """The shard's compiled fully interactive rounds, or None when its users are not
    held single records of a problem with a compiled twin (Problem.compiled_problem) in exact mode (then every round
    keeps the Python path; a round the kernel does not reproduce keeps it too)."""
    job = shard.job
    held = shard.data is not None and shard.offsets is None
    twin = job.problem.compiled_problem() is not None
    return InteractiveRounds(shard) if held and twin and job.simulation == "exact" else None
