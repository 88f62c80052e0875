"""Fused sequential rounds: a shard's carried rounds run as one compiled function per window of
rounds instead of ~22 numpy calls a round (shared/DESIGN.md §5, "Fast paths are twins of the
reference path"), when each family states its compiled twin: the optimizer its update
(Optimizer.compiled_update), the problem its gradients, losses and draws
(Problem.compiled_problem: its twin), the protocol its call's constants
(Protocol.fused_encoding). This module names no particular family.

The compiled rounds (pipeline.compiled) are a twin of `Shard.python_rounds`:
the same counter-based streams drawn in the same order (pipeline.compiled) and the
same float operations in the same order, so every round's θ, estimate and losses are
bit-identical to the Python path's, on any CPU (tests/test_fused.py checks them round by
round). Anything else (a plug-in or subclass, another problem, protocol or optimizer,
sampled users, dropouts, records) keeps the Python path: `fused_rounds` says None.

The users of a block are Shard.draw_block's, bit for bit: the problem's twin's `draw`, which
its `sample` runs too, here in a kernel that releases the GIL, so that a thread draws the next
block while the rounds run.

A record's `seconds` is its window's time (the wait for its users' draw included) divided
by its rounds (timing each round inside the compiled loop would slow it).
"""
from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.draws import state_words, tape_for
from pipeline.engine.job import drawn_per_block
from pipeline.engine.layout import DATA_STREAM, NOISE_STREAM, ROUND_STREAM, chunk_users, counter, run_key, stream
from pipeline.engine.rounds import RoundRecords
from pipeline.errors import NonFiniteError
from pipeline.numerics import pairwise_sum, project_to_ball
from pipeline.optimizers.base import RoundGroup, gradient_problem
from pipeline.problems.base import draw_key, twin_draw
from pipeline.protocols.base import GRADIENTS
from pipeline.twins import stage_key

# What a group must leave at its defaults to be fused: every user of a contiguous batch
# sends one gradient, with no sampling, dropouts or records (a phase's smoothing is its problem's).
_PLAIN = RoundGroup(rounds=1, users=1, first_user=0, user_stride=1, epsilon=1.0, delta=0.0, norm_bound=1.0)
# (A fixed noise, pan_agd's, is the protocol's σ, and the calls' folds (tight P_GD's budget split)
# are the protocol's plan: the call's fused constants carry both.)
_PLAIN_FIELDS = ("sampling", "sample_size", "rate", "noisy_max", "honest_fraction",
                 "records_per_round", "per_record", "records_min")


def _plain(group: RoundGroup) -> bool:
    """Consecutive batches (sequential) or the same users every round (fully interactive, the
    shard holding them), each round's users all sending, one record each."""
    return group.user_stride in (group.users, 0) and all(getattr(group, name) == getattr(_PLAIN, name)
                                                          for name in _PLAIN_FIELDS)


def fusable(job: Any) -> bool:
    """Whether a job's carried rounds have a compiled twin: every optimizer the rounds step with
    states a compiled update (Optimizer.compiled_update: P_SGD's averaged projected steps, AC-SA's,
    PNSGD's last iterate; seq_phased's phases in turn), every group's problem a compiled twin
    (Problem.compiled_problem, the group's smoothing applied), the protocol a `fused_encoding` for
    every group's call (P_vec, a sum protocol or Girgis's, in exact mode), synthetic users with
    one record each (drawn per block, or held for a fully interactive run), and plain groups
    (`_plain`: sequential batches, or every user every round, as full_gd's on one shard).

    Args:
      job: the RunJob.
    """
    if not all(optimizer.compiled_update() for optimizer in job.optimizer.steppers()):
        return False
    if job.simulation != "exact" or job.problem.reads_rows or not job.records.one_each:
        return False
    schedule = job.schedule
    plain = all(_plain(group) and gradient_problem(job.problem, group.smoothing).compiled_problem() is not None
                for group in schedule.groups)
    return plain and schedule.inputs == GRADIENTS and all(_encoding(job, first) is not None
                                                           for first in schedule.group_starts)


def _encoding(job: Any, round_index: int) -> Any:
    """The protocol's fused_encoding of a job's call at `round_index` (None: no compiled twin)."""
    return job.protocol.fused_encoding(job.protocol.planned(job.schedule.plan(round_index), job.problem.dim))


def compiles(job: Any) -> bool:
    """Whether a job's rounds call the compiled kernels: its carried rounds (`fusable`), or a
    fully interactive round's share where the shards hold single records of a problem with a
    compiled twin in exact mode (pipeline.engine.fused_interactive)."""
    held = job.records.one_each and not job.problem.reads_rows and not drawn_per_block(job)
    return fusable(job) or (held and job.simulation == "exact" and job.problem.compiled_problem() is not None)


_COMPILED = Path(__file__).resolve().parent.parent / "compiled.py"  # the kernels' source (not imported: numba)


def _cache_folder() -> Path:
    """Where numba caches the kernels: $NUMBA_CACHE_DIR, or beside compiled.py."""
    return Path(os.environ.get("NUMBA_CACHE_DIR") or _COMPILED.parent)


def kernels_cached(jobs: tuple = ()) -> bool:
    """Whether numba's cache holds kernels of the current compiled.py (an index file newer than
    it: an edit, or a fresh install, makes numba compile again, about 15 s of a core), the round
    kernel of every (protocol, optimizer's stages, problem's twin) that the fusable `jobs` drawing
    their users per block run, and the draw of every twin they draw users with (each compiles on
    its first use, 1-10 s: a marker written once it has run, `_mark_built`). File checks: numba
    is not loaded."""
    folder = _cache_folder()
    source = _COMPILED.stat().st_mtime
    if not any(index.stat().st_mtime > source for index in folder.rglob("compiled.*.nbi")):
        return False
    # A fully interactive run's round kernel runs only where one shard holds every user: it compiles
    # at its first use, as the block kernels do.
    drawn = tuple(job for job in jobs if fusable(job) and drawn_per_block(job))
    keys = {stage_key("rounds", kernel_functions(_encoding(job, first), optimizer.compiled_update(),
                                                 gradient_problem(job.problem, group.smoothing).compiled_problem()))
            for job in drawn for first, group in zip(job.schedule.group_starts, job.schedule.groups)
            for optimizer in job.optimizer.steppers()}
    keys |= {draw_key(type(job.problem.unsmoothed.compiled_problem())) for job in drawn}
    return all(_marker(key).exists() and _marker(key).stat().st_mtime > source for key in keys)


def kernel_functions(encoding: Any, update: Any, twin: Any) -> tuple:
    """What a round kernel inlines: the protocol's fused encoding's functions, the optimizer's three
    stages, the problem's twin's gradients and losses, and numerics' sums, norms and projection
    (twin_functions: outside compiled's file)."""
    return *encoding_functions(encoding), update.query, update.step, update.release, *twin_functions(twin)


# The functions a protocol's fused encoding gives the kernels (compiled.protocol_work, …);
# `counts` only where its fully interactive rounds are compiled (fused_interactive).
ENCODING_FUNCTIONS = ("work", "encode", "finish_block", "analyze", "counts")


def encoding_functions(encoding: Any) -> tuple:
    """A protocol's fused encoding's functions (ENCODING_FUNCTIONS that its class defines)."""
    return tuple(getattr(type(encoding), name) for name in ENCODING_FUNCTIONS if hasattr(type(encoding), name))


def twin_functions(twin: Any) -> tuple:
    """A problem's compiled twin's gradients and losses, and numerics' pairwise_sum and
    project_to_ball, which every kernel calls."""
    return type(twin).gradients, type(twin).losses, pairwise_sum, project_to_ball


def _marker(key: str) -> Path:
    return _cache_folder() / "__pycache__" / f"round-kernel-{key[:32]}.built"


_MARKED: set[str] = set()  # the round kernels this process has marked built


def _mark_built(key: str) -> None:
    """Notes, once a round kernel has run, that numba's cache holds it (kernels_cached); a folder
    that cannot be written only means the next grid warms it again."""
    if key in _MARKED:
        return
    _MARKED.add(key)
    with contextlib.suppress(OSError):
        marker = _marker(key)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


class FusedRounds:
    """A shard's compiled rounds.

    Args:
      shard: the Shard whose users answer (its `draw_block` gives a block's users).
    """

    def __init__(self, shard):
        from pipeline import compiled  # numba compiles (or loads its cache) only for fused runs

        self._kernel = compiled
        self._shard = shard
        self._job = shard.job
        self._key = run_key(shard.job.seed)
        self._counter = counter(ROUND_STREAM, 0, 0)  # rewritten by the kernel for every (round, block)
        self._noise_counter = counter(NOISE_STREAM, 0)  # for every round of a central curator's noise
        self._generator = np.zeros(compiled.STATE_WORDS, np.uint64)
        self._problems: dict[float, Any] = {}  # compiled_problem by a group's smoothing
        self._twin = shard.job.problem.unsmoothed.compiled_problem()  # whose `draw` draws the users
        self._draw_key = draw_key(type(self._twin))
        self._draw = twin_draw(type(self._twin))
        self._kernels: dict[tuple, tuple] = {}  # (round kernel, its stage_key) by the functions it inlines
        self._calls: dict[tuple, tuple] = {}  # _call's, by group (or round) and phase
        self._plans_per_budget = shard.job.protocol.plans_per_budget()
        self._chunk = chunk_users(shard.job.problem.dim)
        # π is the ball's (ball_projection) for every problem with a twin; an envelope's is its base's
        self._radius = shard.job.problem.unsmoothed.radius
        # Blocks drawn or being drawn: a round may straddle the last one and the next, and the
        # block after is drawn in a thread while the kernel (which releases the GIL) runs rounds.
        self._blocks: dict[int, Future] = {}
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="fused-draw")

    def draw_block(self, block: int) -> np.ndarray:
        """Shard.draw_block(block), bit for bit: the unsmoothed problem's twin's `draw`, which its
        `sample` runs too, in a kernel that releases the GIL (the next block is drawn in a thread)."""
        job = self._job
        first, stop = job.layout.block_users(block)
        users = np.empty((job.problem.dim, stop - first))
        self._draw(self._twin, state_words(stream(job.seed, DATA_STREAM, block)), users, tape_for(users.size))
        _mark_built(self._draw_key)
        return users

    def _round_kernel(self, encoding: Any, update: Any, twin: Any) -> tuple[Any, str]:
        """compiled.round_kernel of a protocol's fused encoding, an optimizer's stages and a
        problem's compiled twin, and its stage_key."""
        functions = kernel_functions(encoding, update, twin)
        if functions not in self._kernels:
            key = stage_key("rounds", functions)
            self._kernels[functions] = (self._kernel.round_kernel(type(encoding), update, type(twin), int(key[:15], 16)),
                                        key)
        return self._kernels[functions]

    def _call(self, round_index: int, group_start: int, group: Any, optimizer: Any) -> tuple:
        """What a window's kernel call needs that its group and phase fix: the optimizer's stages
        (CompiledUpdate), the call's parameters and fused encoding, the problem's twin, the round
        kernel and its stage_key. Made once per group and phase (per window's first round for a
        protocol whose plan may read the round: Protocol.plans_per_budget), so that a window's
        Python work is its arrays and its records."""
        job = self._job
        memo = (group_start if self._plans_per_budget else round_index, id(optimizer))
        if memo not in self._calls:
            if len(self._calls) >= 64:  # a plug-in's phase made anew at each `stepping` would add one a window
                self._calls.clear()
            update = optimizer.compiled_update()
            params = job.protocol.planned(job.schedule.plan(round_index), job.problem.dim)
            encoding = job.protocol.fused_encoding(params)
            twin = self._problem(group.smoothing)
            self._calls[memo] = (optimizer, update, params, encoding, twin, *self._round_kernel(encoding, update, twin))
        return self._calls[memo][1:]  # the optimizer is kept: its id names it while it is here

    def _problem(self, smoothing: float) -> Any:
        """The kernel's `problem` of a group that smooths with `smoothing`: its compiled twin
        (Problem.compiled_problem), whose type tells the kernel its gradients and losses."""
        if smoothing not in self._problems:
            self._problems[smoothing] = gradient_problem(self._job.problem, smoothing).compiled_problem()
        return self._problems[smoothing]

    def _block(self, block: int) -> Future:
        if block not in self._blocks:
            self._blocks[block] = self._ahead.submit(self.draw_block, block)
        return self._blocks[block]

    def _window(self, first_user: int, stop_user: int, last_user: int) -> tuple[np.ndarray, int]:
        """The data of the whole blocks holding users [first_user, stop_user), and its first user;
        the next block starts drawing if a round up to `last_user` will ask for it."""
        size = self._job.block_size
        blocks = range(first_user // size, (stop_user - 1) // size + 1)
        drawn = [self._block(block).result() for block in blocks]
        self._blocks = {block: drawing for block, drawing in self._blocks.items() if block >= blocks[-1]}
        if (blocks[-1] + 1) * size < last_user:
            self._block(blocks[-1] + 1)
        return (drawn[0] if len(drawn) == 1 else np.concatenate(drawn, axis=1)), blocks[0] * size

    def run(self, state: tuple, start: int, stop: int) -> tuple[tuple, RoundRecords]:
        """Rounds [start, stop), as Shard.python_rounds, window by window: the rounds that
        start in one block (their users end at most one block further on), or a group's rounds
        over the users the shard holds.

        Raises:
          NonFiniteError: as the Python path (which runs the failing round to say it).
        """
        job, schedule = self._job, self._job.schedule
        problem = job.problem
        records = RoundRecords()
        round_index = start
        while round_index < stop:
            group, group_start = schedule.group_of(round_index)
            batch, stride = group.users, group.user_stride
            first_user = group.first_user + (round_index - group_start) * stride
            began = time.perf_counter()  # the wait for the users' draw counts in the rounds' time
            if self._shard.data is not None:  # held for the run (the same users every round): the group's rounds
                end = min(stop, group_start + group.rounds)
                data, data_first = self._shard.data, self._shard.first_user
            else:  # the rounds that start in one block, their users drawn
                block_stop = (first_user // job.block_size + 1) * job.block_size
                end = min(stop, group_start + group.rounds, round_index + -(-(block_stop - first_user) // batch))
                last_user = group.first_user + group.rounds * batch  # the group's, past this trip's
                data, data_first = self._window(first_user, first_user + (end - round_index) * batch, last_user)
            optimizer, running = job.optimizer.stepping(state)  # a window's rounds are in one group: one phase
            update, params, encoding, twin, kernel, key = self._call(round_index, group_start, group, optimizer)
            theta, steps = running[0].copy(), np.array([running[-1]], np.int64)
            # The state's vectors between θ and t (CompiledUpdate): rows of one array the stages update in place.
            extra = np.array(running[1:1 + update.vectors], np.float64).reshape(update.vectors, problem.dim)
            excess, population = np.empty(end - round_index), np.empty(end - round_index)
            window = (theta, extra, steps, data, data_first, self._key, self._counter)
            rounds = (round_index, end - round_index, first_user, batch, stride, job.block_size, self._chunk)
            step = (tuple(map(float, update.constants)), self._radius, twin, excess, population)
            done = kernel(*window, self._noise_counter, self._generator, *rounds, encoding, *step)
            _mark_built(key)
            running = type(running)(theta, *extra, int(steps[0]))
            state = job.optimizer.advanced(state, running, done)
            seconds = (time.perf_counter() - began) / max(done, 1)
            firsts = first_user + np.arange(done, dtype=np.int64) * stride
            records.extend(RoundRecords.from_columns(
                params, round=np.arange(round_index, round_index + done), first_user=firsts, stop_user=firsts + batch,
                users=np.full(done, batch), excess_loss=excess[:done], population_loss=population[:done],
                seconds=np.full(done, seconds)))
            round_index += done
            if round_index < end:  # a non-finite value: the Python round says which, and raises
                self._shard.python_rounds(state, round_index, round_index + 1)
                raise NonFiniteError(f"round {round_index}: a non-finite value that the Python round did not find")
        return state, records


def fused_rounds(shard) -> FusedRounds | None:
    """The shard's compiled rounds, or None when its job keeps the Python path (`fusable`)."""
    return FusedRounds(shard) if fusable(shard.job) else None
