"""The compiled body of the fused rounds (pipeline.engine.fused, fused_interactive): numpy's
Philox4x64-10 generator, its uniforms, 32-bit and bounded integers, normals, binomial and
Poisson samplers, bit for bit (the draws a family's twin makes, pipeline.draws); and the loops that
compose the families' compiled twins, written in their own files, the built-ins' and a plug-in's
alike: one window of sequential rounds (round_kernel) of a protocol's fused encoding (its
randomizer and analyzer: Protocol.fused_encoding; protocol_encode, protocol_analyze, …) on the
gradients and losses of a problem's twin (Problem.compiled_problem; problem_gradients,
problem_losses), stepped by an optimizer's stages (Optimizer.compiled_update); one fully
interactive round over a shard's blocks (block_kernel); a block's users (draw_kernel); and any
one of those functions compiled alone (compiled_function), for the code that calls them one call
at a time. It names no particular problem, protocol or optimizer: numba resolves each twin's
functions from its type. It sits below the families (layer 0), which import it inside the
functions that run compiled code, so numba loads at their first call.

Each step names the reference it reproduces. numba compiles at first use and caches the
machine code next to this file (or under NUMBA_CACHE_DIR). Its cache is keyed by the file
that defines a kernel, not by what it calls: the generator lives here too, so that an edit to
it can never leave a cached kernel built from the old one, and a kernel that inlines functions
of other files (the stages, the twins', numerics' sums) holds a hash of those files in its key
(round_kernel, block_kernel, twins.stage_key). This is the one module that imports numba.

The generator's state is one uint64 array of STATE_WORDS words, as numpy's
`philox_state`: the counter (4), the key (2), the buffer of the last block's four outputs
(4), the position in it (1), and whether a raw output's upper half waits for the next
32-bit draw (1) and that half (1). Philox: Salmon, Moraes, Dror & Shaw, "Parallel random
numbers: as easy as 1, 2, 3" (SC 2011); numpy increments the counter before each block.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
import secrets

import filelock

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.bytecode import FunctionIdentity
from numba.core.caching import FunctionCache, IndexDataCacheFile
from numba.extending import intrinsic, overload, register_jitable
# numba's twin of numpy's BTPE (the Generator path), built over any next_double: the
# rejection scaffolding and the squeeze constants follow the installed numpy.
from numba.cpython._binomial import make_binomial_btpe
from numba.np.random._constants import fi_double, ki_double, wi_double, ziggurat_nor_inv_r, ziggurat_nor_r
from numba.np.random.distributions import _binomial_btpe_squeeze

from pipeline import draws
from pipeline.numerics import column_norms_into, pairwise_sum, project_to_ball
from pipeline.twins import called_functions, stage_key

# numba names compiled code `qualname$n`, n counting from 1 in each process, and links code of one
# name as one definition. Two processes that compiled different bodies under one name (a plug-in
# edited between two runs, each saving its kernels to the disk cache) handed a third process that
# loaded both the first's function in place of the second's, with no error
# (tests/test_transforms.py). Each process now counts from a random point of 2⁴⁸.
FunctionIdentity._unique_ids = itertools.count(secrets.randbits(48))


# --- numba's on-disk cache, safe across processes -------------------------------------------

class _LockedCacheFile(IndexDataCacheFile):
    """numba's index and data files of one function's cache, read and written under a file lock.

    numba saves an entry by reading the index, naming the data file by the first free number,
    then writing both; two processes compiling different signatures (or, here, different round
    kernels, which share one index: _KeyedCache) at once both take number 1, and whichever data
    file lands last is then loaded for the other's key: the wrong machine code for its
    arguments, a crash or wrong numbers (numba issues 4807, 10128). The lock makes each save a
    whole read-modify-write and each load a consistent read.
    """

    LOCK_TIMEOUT_S = 60.0  # past it the cache is skipped: a compile, never a wait without end

    def _locked(self):
        return filelock.FileLock(self._index_path + ".lock", timeout=self.LOCK_TIMEOUT_S)

    def save(self, key, data):
        try:
            with self._locked():
                super().save(key, data)
        except filelock.Timeout:
            pass

    def load(self, key):
        try:
            with self._locked():
                return super().load(key)
        except filelock.Timeout:
            return None


class _LockedCache(FunctionCache):
    """numba's FunctionCache over _LockedCacheFile, its files named by the function (numba's
    name) and `suffix`."""

    def __init__(self, py_func, suffix: str = ""):
        super().__init__(py_func)
        self._cache_file = _LockedCacheFile(self._cache_path, self._impl.filename_base + suffix,
                                            self._impl.locator.get_source_stamp())


def cached(**options):
    """numba's njit with its on-disk cache (what cache=True gives) behind a file lock (_LockedCache).

    Args:
      **options: njit's options (nogil, …), not `cache`.

    Returns:
      A decorator: function → its dispatcher.
    """
    def compile_later(function):
        dispatcher = njit(**options)(function)
        dispatcher._cache = _LockedCache(dispatcher.py_func)
        return dispatcher

    return compile_later


_REGISTERED: set = set()  # the functions outside this file numba compiles where a kernel calls them


def jitable(function):
    """`function` and the functions it calls by name (pipeline.twins.called_functions: a stage's
    helpers, in numba's subset), registered with numba (register_jitable) once: compiled into the
    kernels that call them, whose cache key names their files (round_kernel's `tag`).

    Returns:
      `function`, callable from compiled code.
    """
    for each in called_functions(function):
        if each not in _REGISTERED:
            register_jitable(each)
            _REGISTERED.add(each)
    return function


jitable(pairwise_sum)  # numerics' sums, which the kernels and the problems' twins share
jitable(project_to_ball)  # the ball's projection, problems.base.ball_projection's
jitable(column_norms_into)  # the gradients' norms the protocols clip by


# --- the generator ----------------------------------------------------------------------

STATE_WORDS = 13
_COUNTER, _KEY, _BUFFER, _POSITION, _HAS_HALF, _HALF = 0, 4, 6, 10, 11, 12

_M0 = np.uint64(0xD2E7470EE14C6C93)
_M1 = np.uint64(0xCA5A826395121157)
_W0 = np.uint64(0x9E3779B97F4A7C15)
_W1 = np.uint64(0xBB67AE8584CAA73B)
_ONE = np.uint64(1)


@intrinsic
def _mulhilo(typing_context, a, b):
    """(high, low) 64-bit words of the 128-bit product a·b of two uint64 (one LLVM i128
    multiply: numba has no 128-bit integers, and four 32-bit products took twice as long)."""
    signature = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        high = builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))
        return context.make_tuple(builder, signature.return_type, (high, builder.trunc(product, ir.IntType(64))))

    return signature, codegen


# The generator's per-draw steps are inlined where they are called (numba's IR inlining): a call
# of another compiled function costs its array arguments' reference counts and stops LLVM's
# optimizations at it. next_double took 27 ns a draw as a function of its own, 2.2 ns inlined
# (numpy's `random()`, 3.3 ns); Girgis's fused round went from 27 to 14 µs. Where a call's cost
# matters little, samplers call one compiled copy instead (_called_uint64), as each inlined copy
# adds to the first compile.
inlined = njit(inline="always")


@inlined
def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x64-10 of the counter (c0..c3) under the key (k0, k1): four raw outputs."""
    for step in range(10):
        if step:
            k0 += _W0
            k1 += _W1
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


@inlined
def _increment(c0, c1, c2, c3):
    """The 256-bit counter plus one (numpy increments it before each block)."""
    c0 += _ONE
    if c0 == 0:
        c1 += _ONE
        if c1 == 0:
            c2 += _ONE
            if c2 == 0:
                c3 += _ONE
    return c0, c1, c2, c3


@inlined
def _next_block(state):
    """Advances the counter by one (with carry) and fills the buffer with Philox4x64-10 of it."""
    c0, c1, c2, c3 = _increment(state[0], state[1], state[2], state[3])
    state[0], state[1], state[2], state[3] = c0, c1, c2, c3
    block = _philox(c0, c1, c2, c3, state[_KEY], state[_KEY + 1])
    for word in range(4):
        state[_BUFFER + word] = block[word]
    state[_POSITION] = 0


@cached()
def fill_raw(state, out, count):
    """out[:count] = the next `count` raw outputs (numpy's `random_raw(count)`): the buffer's
    rest, then whole blocks with the counter held in registers (a call per output took 1.7
    times as long), then a last block's first outputs, its rest left in the buffer."""
    index = 0
    while state[_POSITION] < 4 and index < count:
        out[index] = state[_BUFFER + state[_POSITION]]
        state[_POSITION] += _ONE
        index += 1
    if count - index >= 4:
        c0, c1, c2, c3 = state[0], state[1], state[2], state[3]
        k0, k1 = state[_KEY], state[_KEY + 1]
        while count - index >= 4:
            c0, c1, c2, c3 = _increment(c0, c1, c2, c3)
            out[index], out[index + 1], out[index + 2], out[index + 3] = _philox(c0, c1, c2, c3, k0, k1)
            index += 4
        state[0], state[1], state[2], state[3] = c0, c1, c2, c3
        for word in range(4):  # the last block, spent (as numpy's buffer after it)
            state[_BUFFER + word] = out[index - 4 + word]
    while index < count:
        out[index] = next_uint64(state)
        index += 1


@inlined
def next_uint64(state):
    """The next raw 64-bit output (numpy's `random_raw`)."""
    if state[_POSITION] >= 4:
        _next_block(state)
    out = state[_BUFFER + state[_POSITION]]
    state[_POSITION] += _ONE
    return out


@inlined
def unit(raw):
    """A raw output's uniform double on [0, 1) (numpy's `next_double`: the top 53 bits)."""
    return np.float64(raw >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@inlined
def next_double(state):
    """The next uniform double on [0, 1) (numpy's `random()`)."""
    return unit(next_uint64(state))


@cached()
def _called_uint64(state):
    """next_uint64 as a call, where a call's cost matters little (the binomial's samplers, drawn
    a few times a block; the ziggurat's tail and the draws past its tape, 1% of normals): one
    compiled copy of the generator, not one inlined at every use (each adds to the first compile)."""
    return next_uint64(state)


@cached()
def _called_double(state):
    """next_double as a call (_called_uint64)."""
    return next_double(state)


@cached()
def rekey(state, key, counter):
    """Sets `state` to a new generator's: the run's key, the stream's first counter, an
    empty buffer (Streams.__call__ in pipeline.engine.layout)."""
    for word in range(4):
        state[_COUNTER + word] = counter[word]
    state[_KEY], state[_KEY + 1] = key[0], key[1]
    state[_POSITION] = 4
    state[_HAS_HALF] = 0


_LOW_HALF = np.uint64(0xFFFFFFFF)


@inlined
def next_uint32(state):
    """numpy's 32-bit draw of Philox: a raw output's low half, then at the next call its high half."""
    if state[_HAS_HALF]:
        state[_HAS_HALF] = 0
        return state[_HALF]
    raw = next_uint64(state)
    state[_HAS_HALF], state[_HALF] = 1, raw >> np.uint64(32)
    return raw & _LOW_HALF


@inlined
def bounded(state, bound):
    """One `Generator.integers(0, bound)` draw for 1 ≤ bound < 2³² (numpy's
    buffered_bounded_lemire_uint32: Lemire's multiply and reject over 32-bit draws); a bound
    of 1 draws nothing."""
    if bound == 1:
        return 0
    excluded = np.uint64(bound)
    product = next_uint32(state) * excluded
    if product & _LOW_HALF < excluded:
        threshold = (_LOW_HALF - (excluded - _ONE)) % excluded
        while product & _LOW_HALF < threshold:
            product = next_uint32(state) * excluded
    return np.int64(product >> np.uint64(32))


@cached()
def fill_bounded(state, bound, out, tape):
    """out[:] = the next out.size `integers(0, bound)` draws, 1 ≤ bound < 2³² (`bounded` one after
    another: the same draws, the same state after them), their 32-bit halves read from raw
    outputs drawn a tape at a time (fill_raw; a call of next_uint32 per draw took three times as
    long). Lemire's rule: a draw u is accepted when the low half of u·bound is at least
    (2³² − bound) mod bound (`bounded`'s threshold), and is then the high half."""
    count = out.size
    if bound == 1:
        out[:] = 0
        return
    excluded = np.uint64(bound)
    threshold = (_LOW_HALF - (excluded - _ONE)) % excluded
    done, cursor, held = 0, 0, 0  # halves of the tape: the next one read, and how many were drawn
    while done < count:
        if state[_HAS_HALF]:  # a high half an earlier 32-bit draw left
            state[_HAS_HALF] = 0
            half = state[_HALF]
        else:
            if cursor == held:
                raws = min(tape.size, (count - done + 1) // 2)
                fill_raw(state, tape, raws)
                cursor, held = 0, 2 * raws
            raw = tape[cursor // 2]
            half = raw & _LOW_HALF if cursor % 2 == 0 else raw >> np.uint64(32)
            cursor += 1
        product = half * excluded
        if product & _LOW_HALF >= threshold:
            out[done] = np.int64(product >> np.uint64(32))
            done += 1
    if cursor < held:  # the last raw output's high half waits for the next 32-bit draw
        state[_HAS_HALF], state[_HALF] = 1, tape[cursor // 2] >> np.uint64(32)


_btpe = make_binomial_btpe(_called_double, _binomial_btpe_squeeze)


@cached()
def _inversion(state, n, p):
    """numpy's random_binomial_inversion: Binomial(n, p) for n·p ≤ 30, p ≤ ½."""
    q = 1.0 - p
    qn = np.exp(n * np.log(q))
    mean = n * p
    bound = min(n, mean + 10.0 * np.sqrt(mean * q + 1))
    x = 0
    px = qn
    u = _called_double(state)
    while u > px:
        x += 1
        if x > bound:
            x = 0
            px = qn
            u = _called_double(state)
        else:
            u -= px
            px = ((n - x + 1) * p * px) / (x * q)
    return x


@cached()
def binomial(state, n, p):
    """One Binomial(n, p) draw, as `Generator.binomial(n, p)` (numpy's random_binomial)."""
    if n == 0 or p == 0.0:
        return 0
    if p <= 0.5:
        return _inversion(state, n, p) if p * n <= 30.0 else _btpe(state, n, p)
    q = 1.0 - p
    return n - (_inversion(state, n, q) if q * n <= 30.0 else _btpe(state, n, q))


# numpy's random_loggam's series coefficients, a[0] … a[9].
_LOGGAM = np.array([8.333333333333333e-02, -2.777777777777778e-03, 7.936507936507937e-04, -5.952380952380952e-04,
                    8.417508417508418e-04, -1.917526917526918e-03, 6.410256410256410e-03, -2.955065359477124e-02,
                    1.796443723688307e-01, -1.39243221690590e+00])


@register_jitable
def _loggam(x):
    """numpy's random_loggam: log Γ(x) for x ≥ 1, Stirling's series at x + n ≥ 7 (n = ⌊7 − x⌋
    for x < 7), then log(x₀ − 1) subtracted n times (numba's port builds its coefficients'
    list at every call: a heap allocation per PTRS log test)."""
    if x == 1.0 or x == 2.0:
        return 0.0
    n = np.int64(7 - x) if x < 7.0 else 0
    x0 = x + n
    x2 = (1.0 / x0) * (1.0 / x0)
    gl0 = _LOGGAM[9]
    for k in range(8, -1, -1):
        gl0 *= x2
        gl0 += _LOGGAM[k]
    gl = gl0 / x0 + 0.5 * 1.8378770664093453e+00 + (x0 - 0.5) * np.log(x0) - x0
    for _ in range(n):
        gl -= np.log(x0 - 1.0)
        x0 -= 1.0
    return gl


@register_jitable
def _ptrs_constants(lam):
    """PTRS's constants of λ (log λ, b, a, 1/α, v_r), as numpy computes them at each draw."""
    b = 0.931 + 2.53 * np.sqrt(lam)
    return np.log(lam), b, -0.059 + 0.02483 * b, 1.1239 + 1.1328 / (b - 3.4), 0.9277 - 3.6224 / (b - 2)


@register_jitable
def _poisson_product(state, threshold):
    """numpy's random_poisson_mult, for 0 < λ < 10: uniforms multiplied until their product falls
    to `threshold` = e^−λ or below; at least one uniform a draw."""
    count = 0
    total = 1.0
    while True:
        total *= next_double(state)
        if total > threshold:
            count += 1
        else:
            return np.int64(count)


@register_jitable
def _poisson_ptrs(state, lam, constants):
    """numpy's random_poisson_ptrs, for λ ≥ 10: Hörmann's transformed rejection with squeeze ("The
    transformed rejection method for generating Poisson random variables", Insurance: Mathematics
    and Economics 12, 1993), at least two uniforms a draw; its candidate numpy's floor (numba's own
    port truncates toward 0, which keeps some negative candidates numpy rejects), log-gamma
    numpy's random_loggam (_loggam); `constants`: _ptrs_constants(λ)."""
    loglam, b, a, invalpha, vr = constants
    while True:
        u = next_double(state) - 0.5
        v = next_double(state)
        us = 0.5 - abs(u)
        k = np.int64(np.floor((2 * a / us + b) * u + lam + 0.43))
        if us >= 0.07 and v <= vr:
            return k
        if k < 0 or (us < 0.013 and v > us):
            continue
        if np.log(v) + np.log(invalpha) - np.log(a / (us * us) + b) <= \
                -lam + k * loglam - _loggam(np.float64(k + 1)):
            return k


@cached()
def fill_poisson(state, lam, out):
    """out[:] = the next out.size Poisson(λ) draws, as `Generator.poisson(λ, size)` (`poisson`'s
    one after another), each branch's constants computed once."""
    if lam >= 10:
        constants = _ptrs_constants(lam)
        for index in range(out.size):
            out[index] = _poisson_ptrs(state, lam, constants)
    elif lam == 0:
        out[:] = 0
    else:
        threshold = np.exp(-lam)
        for index in range(out.size):
            out[index] = _poisson_product(state, threshold)


@cached()
def poisson(state, lam):
    """One Poisson(λ) draw, as `Generator.poisson(λ)`: fill_poisson's, whose branches are numpy's
    random_poisson (none for λ = 0, the product of uniforms below 10, PTRS from 10 on)."""
    out = np.empty(1, np.int64)
    fill_poisson(state, lam, out)
    return out[0]


# numpy's ziggurat tables (distributions/ziggurat_constants.h), as numba's port of numpy's
# Generator carries them: 256 layers, the tail's start r and 1/r.
_KI, _WI, _FI = ki_double, wi_double, fi_double
_NOR_R, _NOR_INV_R = ziggurat_nor_r, ziggurat_nor_inv_r
_LOW_52 = np.uint64(0x000FFFFFFFFFFFFF)
_LAYER = np.uint64(0xFF)
_ONES_BYTES = np.uint64(0x0101010101010101)  # a byte of 1 in every byte of a word


@inlined
def _box(raw):
    """The ziggurat's first test of a raw output: its low 8 bits pick a layer, bit 8 a sign,
    the next 52 a magnitude; whether that lands inside the layer's box (99% of draws), and
    the normal it makes (the normal if inside)."""
    layer = raw & _LAYER
    magnitude = (raw >> np.uint64(9)) & _LOW_52
    x = np.float64(magnitude) * _WI[layer]
    return magnitude < _KI[layer], -x if (raw >> np.uint64(8)) & _ONE else x


def _ziggurat(next_raw):
    """numpy's random_standard_normal over a source of raw outputs, `next_raw(source)`: a raw
    output inside its layer's box (_box) is the normal; else the tail (layer 0, Marsaglia's
    exponential pair, its sign bit 17 of the raw output) or a wedge test against the density,
    and a new raw output if that rejects."""

    @register_jitable
    def normal(source):
        while True:
            raw = next_raw(source)
            inside, x = _box(raw)
            if inside:
                return x
            layer = raw & _LAYER
            if layer == 0:
                while True:
                    xx = -_NOR_INV_R * np.log1p(-unit(next_raw(source)))
                    yy = -np.log1p(-unit(next_raw(source)))
                    if yy + yy > xx * xx:
                        return -(_NOR_R + xx) if (raw >> np.uint64(17)) & _ONE else _NOR_R + xx
            elif (_FI[layer - 1] - _FI[layer]) * unit(next_raw(source)) + _FI[layer] < np.exp(-0.5 * x * x):
                return x

    return normal


_normal_of_state = _ziggurat(_called_uint64)


@cached()
def standard_normal(state):
    """One standard normal from the generator `state`, as numpy's (_ziggurat)."""
    return _normal_of_state(state)


@cached()
def standard_normals(state, out, count):
    """out[:count] = `count` standard normals from the generator `state`, as numpy's draw
    them: the box's test inline in the loop (a call a normal took twice as long), else
    _ziggurat from the same raw output."""
    for index in range(count):
        if state[_POSITION] >= 4:
            _next_block(state)  # the raw output is read before it is taken: _ziggurat takes it below
        inside, x = _box(state[_BUFFER + state[_POSITION]])
        if inside:
            state[_POSITION] += _ONE
            out[index] = x
        else:
            out[index] = standard_normal(state)


@cached()
def _next_on_tape(source):
    """The next raw output of a (tape, cursor, state) source: the tape's while it lasts, then
    the generator `state`'s (which continues the stream past the tape)."""
    tape, cursor, state = source
    index = cursor[0]
    if index < tape.size:
        cursor[0] = index + 1
        return tape[index]
    return _called_uint64(state)


_normal_on_tape = _ziggurat(_next_on_tape)


@cached(nogil=True)  # nogil: the next block's users are drawn while the kernel runs
def normals(state, out, tape):
    """Fills `out` with the standard normals that numpy's `standard_normal(out.size)` draws from
    the generator `state`, and leaves `state` after them. Raw outputs are drawn a tape at a time
    in bulk (fill_raw into `tape`, a scratch buffer), never more than the normals still wanted
    (each takes at least one), so none is drawn that numpy would not draw.

    A raw output's box test and candidate normal depend on it alone (_box), so they are
    computed for the whole tape in one loop without branches, which the compiler vectorizes;
    then the normals are the candidates of the raw outputs inside their boxes, copied a run at
    a time, and at each raw output outside its box the whole ziggurat (_ziggurat) from it, its
    further raw outputs taken from the tape (then past it from `state`): the candidates of the
    raw outputs it took are skipped."""
    cursor = np.zeros(1, np.int64)
    candidates = np.empty(tape.size)
    words = np.zeros(tape.size // 8 + 1, np.uint64)  # the box tests, a byte each (1 inside), read 8 at a time
    inside = words.view(np.uint8)
    done = 0
    while done < out.size:
        size = min(tape.size, out.size - done)
        fill_raw(state, tape, size)
        drawn = tape[:size]
        for index in range(size):
            test, candidates[index] = _box(drawn[index])
            inside[index] = test
        inside[size] = 0  # a sentinel: every run below ends by the tape's end
        used = 0
        while used < size:
            stop = used
            while stop % 8 and inside[stop]:
                stop += 1
            if stop % 8 == 0:
                while words[stop // 8] == _ONES_BYTES:
                    stop += 8
                while inside[stop]:
                    stop += 1
            out[done: done + stop - used] = candidates[used: stop]
            done += stop - used
            used = stop
            if used < size:  # the raw output `used` is outside its box
                cursor[0] = used
                out[done] = _normal_on_tape((drawn, cursor, state))
                used = cursor[0]
                done += 1


# --- the rounds -------------------------------------------------------------------------


def _by_type(name: str):
    """What the kernels call on a family's compiled twin (a problem's, pipeline.problems.base; a
    protocol's fused encoding, Protocol.fused_encoding): its class's function `name`, which numba
    resolves from the twin's type when it compiles a kernel."""

    def call(twin, *args):
        return getattr(type(twin), name)(twin, *args)

    @overload(call)
    def typed(twin, *args):
        function = jitable(getattr(twin.instance_class, name))
        return lambda twin, *args: function(twin, *args)

    call.__name__ = call.__qualname__ = f"twin_{name}"
    return call


problem_gradients = _by_type("gradients")  # (twin, query, data, column, users, out): the gradients into out
problem_losses = _by_type("losses")  # (twin, released, squares) → (excess, population)
problem_draw = _by_type("draw")  # (twin, state, out, tape): a block's users into out (d, users)
# A protocol's fused encoding (Protocol.fused_encoding) is its twin the same way:
protocol_work = _by_type("work")  # (encoding, dim, chunk) → its work arrays
protocol_encode = _by_type("encode")  # (encoding, work, gradients, norms, dim, users, state): a chunk's reports
protocol_finish_block = _by_type("finish_block")  # (encoding, work, users, state) → False if it cannot
protocol_analyze = _by_type("analyze")  # (encoding, work, batch, state, estimate) → the round's sum; False if it cannot
protocol_counts = _by_type("counts")  # (encoding, work) → a block's accumulator (fully interactive rounds)


def _implements(declared):
    """Makes the decorated function what each compiled call of a declared draw (pipeline.draws)
    runs: a call of this module's implementation, with the declaration's arguments."""

    def register(implementation):
        # numba requires the typing function's signature to be the implementation's (wraps lends it)
        overload(declared)(functools.wraps(implementation)(lambda *types: implementation))
        return implementation

    return register


@_implements(draws.normals)
def _normals(state, out, tape):
    normals(state, out, tape)


@_implements(draws.raw_outputs)
def _raw_outputs(state, out, count):
    fill_raw(state, out, count)


@_implements(draws.unit)
def _unit(raw):
    return unit(raw)


@_implements(draws.uniform)
def _uniform(state):
    return next_double(state)


@_implements(draws.integers)
def _integers(state, bound):
    return bounded(state, bound)


@_implements(draws.fill_integers)
def _fill_integers(state, bound, out, tape):
    fill_bounded(state, bound, out, tape)


@_implements(draws.standard_normals)
def _standard_normals(state, out, count):
    standard_normals(state, out, count)


@_implements(draws.binomial)
def _binomial(state, trials, probability):
    return binomial(state, trials, probability)


@_implements(draws.poisson)
def _poisson(state, mean):
    return poisson(state, mean)


@_implements(draws.fill_poisson)
def _fill_poisson(state, mean, out):
    fill_poisson(state, mean, out)


@register_jitable
def _gradients(problem, query, data, column, users, out, norms):
    """The problem's gradients of a chunk of users (data columns [column, column + users)) into
    `out` in (coordinate, user) order (problem_gradients), and their norms, summed coordinate by
    coordinate (numerics.column_norms); False if a gradient is not finite (Shard._compute raises on it)."""
    dim = query.size
    problem_gradients(problem, query, data, column, users, out)
    column_norms_into(out, dim, users, norms)
    overflow = False  # an infinite or NaN gradient, or a finite one whose square overflows
    for user in range(users):
        overflow |= not np.isfinite(norms[user])
    if overflow:
        for index in range(dim * users):
            if not np.isfinite(out[index]):
                return False
    return True


@cached()
def _segment(user, stop_user, block_size, round_index, key, counter, state):
    """The end of the part of a round's users [user, stop_user) in user's block; `state` set to
    that block's stream (ROUND_STREAM, round, block) (`counter`: its first counter, any round
    and block; word 1 holds the stream's kind)."""
    block = user // block_size
    counter[0], counter[2], counter[3] = 0, round_index, block
    rekey(state, key, counter)
    return min(stop_user, (block + 1) * block_size)


@register_jitable
def _encode_block(encoding, work, problem, query, data, first, stop, chunk, state, gradients, norms):
    """A block's part of a round (data columns [first, stop)) encoded, chunk by chunk: the
    problem's gradients and their norms (_gradients), then the protocol's `encode`; then its
    `finish_block`. False on a non-finite gradient or if the protocol cannot finish (a
    fixed-point overflow): the Python round then says which."""
    dim = query.size
    for low in range(first, stop, chunk):
        users = min(chunk, stop - low)
        if not _gradients(problem, query, data, low, users, gradients, norms):
            return False
        protocol_encode(encoding, work, gradients, norms, dim, users, state)
    return protocol_finish_block(encoding, work, stop - first, state)


def _round_loop(query_stage, step_stage, release_stage):
    """A window of carried rounds (Shard.python_rounds) whose protocol is its fused encoding's
    functions (Protocol.fused_encoding: work, encode, finish_block, analyze), whose problem is
    its compiled twin (problem_gradients, problem_losses) and whose optimizer's round is its three
    stages (Optimizer.compiled_update).

    Per round: the query (query_stage); each block's part of the batch (`batch` users from
    first_user + round·stride: consecutive batches, or with stride 0 the same users every round)
    encoded from the stream
    (ROUND_STREAM, round, block) (`counter`: that stream's first counter, any round and block)
    by _encode_block, False on a non-finite value; the analyzer's estimate of the sum from the
    stream (NOISE_STREAM, round) (`noise_counter`: its first counter, any round; a curator's noise
    draws there), which also clears the round's encoding, False if it cannot; the mean
    ḡ = estimate/batch (False if not finite), step_stage, the projection (numerics.project_to_ball),
    release_stage (in place on the optimizer's state (θ, extra, t); False if not finite); the
    released model's losses (problem_losses) into excess and population. It returns how many
    rounds ran: `count`, or the first round that failed (the Python round then says why).

    A factory (as _ziggurat): numba cannot take functions as arguments of a cached kernel.
    """

    @njit(nogil=True)  # nogil: the next block's users are drawn meanwhile (fused.FusedRounds)
    def rounds(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count, first_user,
               batch, stride, block_size, chunk, encoding, constants, radius, problem, excess, population):
        dim = theta.size
        work = protocol_work(encoding, dim, chunk)
        gradients, norms = np.empty(dim * chunk), np.empty(chunk)
        query, estimate, mean = np.empty(dim), np.empty(dim), np.empty(dim)
        step, released = np.empty(dim), np.empty(dim)
        squares = np.empty(dim)  # what pairwise_sum adds: numpy squares a vector first, then sums it
        for done in range(count):
            round_index = start + done
            query_stage(constants, theta, extra, steps, query)
            user = first_user + done * stride
            stop_user = user + batch
            while user < stop_user:
                segment_stop = _segment(user, stop_user, block_size, round_index, key, counter, state)
                if not _encode_block(encoding, work, problem, query, data, user - data_first, segment_stop - data_first,
                                     chunk, state, gradients, norms):
                    return done
                user = segment_stop
            noise_counter[0], noise_counter[2] = 0, round_index
            rekey(state, key, noise_counter)
            if not protocol_analyze(encoding, work, batch, state, estimate):
                return done
            for coordinate in range(dim):
                if not np.isfinite(estimate[coordinate]):
                    return done
                mean[coordinate] = estimate[coordinate] / batch
            step_stage(constants, theta, extra, steps, mean, step)
            project_to_ball(step, radius, squares)
            if not release_stage(constants, theta, extra, steps, mean, step, released):
                return done
            excess[done], population[done] = problem_losses(problem, released, squares)
        return count

    return rounds


# --- the kernels, built per (protocol, optimizer, problem) and cached by what they inline ----------

_BUILT: dict = {}  # (encoding, stages, problem's twin) → its compiled rounds, for this process


def round_kernel(encoding: type, update, twin: type, tag: int):
    """The compiled rounds of a protocol's fused encoding, an optimizer's stages (CompiledUpdate)
    and a problem's compiled twin: built once per process, cached on disk by numba (_KeyedCache),
    keyed by this file, the names of the encoding, the stages and the twin, and `tag`.

    Args:
      encoding: the class of the protocol's fused encoding (Protocol.fused_encoding), whose
        functions the kernel inlines.
      update: the optimizer's CompiledUpdate.
      twin: the class of the problem's compiled twin (pipeline.problems.base), whose `gradients`
        and `losses` the kernel inlines.
      tag: a hash of the sources of all these functions and what they call below 2⁶⁰
        (twins.stage_key): numba keys a cached kernel by the file that defines it, not by what it
        calls, so an edit to those files must change the key to compile it again.

    Returns:
      A compiled function of (θ, extra, steps, …, the encoding, update.constants, radius, the twin,
      excess, population) → rounds run.
    """
    stages = (update.query, update.step, update.release)
    key = (encoding, *stages, twin, tag)
    if key not in _BUILT:
        for stage in stages:
            jitable(stage)
        _BUILT[key] = _keyed(_round_loop(*stages), "rounds", (encoding, *stages, twin), tag)
    return _BUILT[key]


def block_kernel(encoding: type, twin: type, tag: int):
    """A fully interactive round's kernel over a shard's blocks (_blocks) for a protocol's fused
    encoding and a problem's compiled twin, built and cached as round_kernel's (`tag`:
    twins.stage_key of their functions)."""
    key = ("blocks", encoding, twin, tag)
    if key not in _BUILT:
        _BUILT[key] = _keyed(_blocks(), "blocks", (encoding, twin), tag)
    return _BUILT[key]


def draw_kernel(twin: type, tag: int):
    """The compiled draw of a block's users by a problem's compiled twin (its class's `draw`),
    built and cached as round_kernel's (`tag`: twins.stage_key of the twin's draw)."""
    key = ("draw", twin, tag)
    if key not in _BUILT:
        @njit(nogil=True)  # nogil: the next block's users are drawn while the kernel runs
        def draw_users(problem, state, out, tape):
            problem_draw(problem, state, out, tape)

        _BUILT[key] = _keyed(draw_users, "draw", (twin,), tag)
    return _BUILT[key]


def _keyed(kernel, kind: str, parts: tuple, tag: int):
    """`kernel` with numba's on-disk cache keyed by its kind, the names of `parts` and `tag` (_KeyedCache)."""
    names = ",".join(f"{part.__module__}.{part.__qualname__}" for part in parts)
    kernel._cache = _KeyedCache(kernel.py_func, f"{kind}:{names}:{tag}")  # numba's enable_caching, keyed
    return kernel


def compiled_function(function):
    """A function in numba's subset (a twin's, a stage, a helper) compiled alone, with the functions
    it calls (jitable), for the code that calls it one call at a time: the rounds the engine runs
    in Python (pipeline.engine.rounds), the problems' public methods (problems.base.Twinned) and
    the built-in protocols' encode_block and girgis.decode.
    Cached on disk as the kernels are (_keyed, by twins.stage_key of it and what it calls, in
    other files too: a chain's stages call its transforms); a function shipped by value to a node
    without its file compiles in each process.

    Returns:
      Its compiled twin, one per function for this process.
    """
    if function not in _ALONE:
        jitable(function)
        compiled = njit(function)
        if os.path.isfile(function.__code__.co_filename):
            compiled = _keyed(compiled, "stage", (function,), stage_key("stage", (function,)))
        _ALONE[function] = compiled
    return _ALONE[function]


def compiled_stages(update) -> tuple:
    """An optimizer's stages (CompiledUpdate) compiled one by one (compiled_function), for the
    rounds the engine runs in Python, with the problem's own projection between step and release.

    Returns:
      (query, step, release), compiled.
    """
    return tuple(compiled_function(stage) for stage in (update.query, update.step, update.release))


_ALONE: dict = {}  # a function → its compiled twin, for this process (compiled_function)


class _KeyedCache(_LockedCache):
    """numba's on-disk cache of a kernel that inlines functions of other files (round_kernel,
    block_kernel, draw_kernel), in files of its own, its entries keyed by the kernel's bytecode and
    `identity` (its kind, the names of the stages and twin it inlines and their sources' hash).

    numba's own key adds a pickle of the closure's cells, which here hold dispatchers that
    pickle with a uuid drawn per process: no other process computed the same key, so every
    process (each run's shards, each Ray worker) compiled its kernel again, 3–10 s, and the
    index grew by an entry each time. What the cells hold is named by `identity`, and the
    rest of this file by the source stamp numba checks on every load.
    """

    def __init__(self, py_func, identity: str):
        self._identity = hashlib.sha256(identity.encode()).hexdigest()
        # A file of its own: its keys name the twin's class, which loading the index imports, so
        # a shared index holding a plug-in's kernel would fail in every process without the plug-in.
        super().__init__(py_func, "." + self._identity[:20])

    def _index_key(self, sig, codegen):
        return sig, codegen.magic_tuple(), (hashlib.sha256(self._py_func.__code__.co_code).hexdigest(), self._identity)


def _blocks():
    """A new kernel of one fully interactive round over a shard's blocks (Shard.partial_counts):
    block k's users are data columns [starts[k], stops[k]), encoded (_encode_block) from the
    stream (ROUND_STREAM, round, blocks[k]) (`counter`: that stream's first counter, any round and
    block); counts[k] = the block's accumulator (the encoding's `counts`: P_vec's ones, a sum's
    units), then cleared. False if a block fails (a non-finite gradient, a fixed-point overflow).
    The analyzer runs after the merge, in Python."""

    @njit(nogil=True)
    def blocks_of(problem, query, data, starts, stops, blocks, round_index, key, counter, state, chunk, encoding,
                  counts):
        dim = query.size
        work = protocol_work(encoding, dim, chunk)
        gradients, norms = np.empty(dim * chunk), np.empty(chunk)
        accumulator = protocol_counts(encoding, work)
        for index in range(blocks.size):
            counter[0], counter[2], counter[3] = 0, round_index, blocks[index]
            rekey(state, key, counter)
            if not _encode_block(encoding, work, problem, query, data, starts[index], stops[index], chunk, state,
                                 gradients, norms):
                return False
            counts[index] = accumulator
            accumulator[:] = 0
        return True

    return blocks_of
