"""The compiled body of the fused rounds (pipeline.engine.fused, fused_interactive): numpy's
Philox4x64-10 generator, its uniforms, 32-bit and bounded integers, normals and binomial
sampler, bit for bit; the users of the quadratic, Bernoulli and finite-support problems
drawn from it; one window of sequential rounds with P_vec, a sum protocol or Girgis's
randomizers, on the gradients and losses of a problem's compiled twin (Problem.compiled_problem:
problem_gradients, problem_losses), stepped by an optimizer's stages (Optimizer.compiled_update),
both written in their families' files, the built-ins' and a plug-in's alike (round_kernel); and one
fully interactive round's P_vec or sum protocol over a shard's blocks (block_kernel), operation
for operation as the Python path.

Each step names the reference it reproduces. numba compiles at first use and caches the
machine code next to this file (or under NUMBA_CACHE_DIR). Its cache is keyed by the file
that defines a kernel, not by what it calls: the generator lives here too, so that an edit to
it can never leave a cached kernel built from the old one, and a kernel that inlines functions
of other files (the stages, the twin's, numerics' sums) holds a hash of those files in its key
(round_kernel, block_kernel, fused.stage_key). This is the one module that imports numba.

The generator's state is one uint64 array of STATE_WORDS words, as numpy's
`philox_state`: the counter (4), the key (2), the buffer of the last block's four outputs
(4), the position in it (1), and whether a raw output's upper half waits for the next
32-bit draw (1) and that half (1). Philox: Salmon, Moraes, Dror & Shaw, "Parallel random
numbers: as easy as 1, 2, 3" (SC 2011); numpy increments the counter before each block.
"""
from __future__ import annotations

import hashlib
import os

import filelock

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.caching import FunctionCache, IndexDataCacheFile
from numba.extending import intrinsic, overload, register_jitable
# numba's twin of numpy's BTPE (the Generator path), built over any next_double: the
# rejection scaffolding and the squeeze constants follow the installed numpy.
from numba.cpython._binomial import make_binomial_btpe
from numba.np.random._constants import fi_double, ki_double, wi_double, ziggurat_nor_inv_r, ziggurat_nor_r
from numba.np.random.distributions import _binomial_btpe_squeeze

from pipeline import draws
from pipeline.numerics import pairwise_sum
from pipeline.twins import called_functions


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


@cached()
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


@cached()
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


@cached()
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


@cached()
def next_uint64(state):
    """The next raw 64-bit output (numpy's `random_raw`)."""
    if state[_POSITION] >= 4:
        _next_block(state)
    out = state[_BUFFER + state[_POSITION]]
    state[_POSITION] += _ONE
    return out


@cached()
def unit(raw):
    """A raw output's uniform double on [0, 1) (numpy's `next_double`: the top 53 bits)."""
    return np.float64(raw >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@cached()
def next_double(state):
    """The next uniform double on [0, 1) (numpy's `random()`)."""
    return unit(next_uint64(state))


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
TAPE_WORDS = 2048  # raw outputs a bulk draw holds at a time (fill_bounded's tape): small enough for the first cache


@cached()
def next_uint32(state):
    """numpy's 32-bit draw of Philox: a raw output's low half, then at the next call its high half."""
    if state[_HAS_HALF]:
        state[_HAS_HALF] = 0
        return state[_HALF]
    raw = next_uint64(state)
    state[_HAS_HALF], state[_HALF] = 1, raw >> np.uint64(32)
    return raw & _LOW_HALF


@cached()
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


_btpe = make_binomial_btpe(next_double, _binomial_btpe_squeeze)


@cached()
def _inversion(state, n, p):
    """numpy's random_binomial_inversion: Binomial(n, p) for n·p ≤ 30, p ≤ ½."""
    q = 1.0 - p
    qn = np.exp(n * np.log(q))
    mean = n * p
    bound = min(n, mean + 10.0 * np.sqrt(mean * q + 1))
    x = 0
    px = qn
    u = next_double(state)
    while u > px:
        x += 1
        if x > bound:
            x = 0
            px = qn
            u = next_double(state)
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


# numpy's ziggurat tables (distributions/ziggurat_constants.h), as numba's port of numpy's
# Generator carries them: 256 layers, the tail's start r and 1/r.
_KI, _WI, _FI = ki_double, wi_double, fi_double
_NOR_R, _NOR_INV_R = ziggurat_nor_r, ziggurat_nor_inv_r
_LOW_52 = np.uint64(0x000FFFFFFFFFFFFF)
_LAYER = np.uint64(0xFF)
_ONES_BYTES = np.uint64(0x0101010101010101)  # a byte of 1 in every byte of a word


@cached()
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


_normal_of_state = _ziggurat(next_uint64)


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
    return next_uint64(state)


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


def _by_twin(name: str):
    """What the kernels call on a problem's compiled twin (pipeline.problems.base): its class's
    function `name`, which numba resolves from the twin's type when it compiles a kernel."""

    def call(problem, *args):
        return getattr(type(problem), name)(problem, *args)

    @overload(call)
    def typed(problem, *args):
        function = jitable(getattr(problem.instance_class, name))
        return lambda problem, *args: function(problem, *args)

    call.__name__ = call.__qualname__ = f"problem_{name}"
    return call


problem_gradients = _by_twin("gradients")  # (twin, query, data, column, users, out): the gradients into out
problem_losses = _by_twin("losses")  # (twin, released, squares) → (excess, population)
problem_draw = _by_twin("draw")  # (twin, state, out, tape): a block's users into out (d, users)


# The draws a twin may make (pipeline.draws), compiled into their implementations here.
overload(draws.normals)(lambda state, out, tape: lambda state, out, tape: normals(state, out, tape))
overload(draws.raw_outputs)(lambda state, out, count: lambda state, out, count: fill_raw(state, out, count))
overload(draws.unit)(lambda raw: lambda raw: unit(raw))
overload(draws.integers)(lambda state, bound: lambda state, bound: bounded(state, bound))
overload(draws.fill_integers)(lambda state, bound, out, tape: lambda state, bound, out, tape: fill_bounded(state, bound,
                                                                                                           out, tape))


@register_jitable
def _gradients(problem, query, data, column, users, out, norms):
    """The problem's gradients of a chunk of users (data columns [column, column + users)) into
    `out` in (coordinate, user) order (problem_gradients), and their norms, summed coordinate by
    coordinate (numerics.column_norms); False if a gradient is not finite (Shard._compute raises on it)."""
    dim = query.size
    problem_gradients(problem, query, data, column, users, out)
    norms[:users] = 0.0
    for coordinate in range(dim):
        row = out[coordinate * users: (coordinate + 1) * users]
        for user in range(users):
            norms[user] += row[user] * row[user]
    overflow = False  # an infinite or NaN gradient, or a finite one whose square overflows
    for user in range(users):
        overflow |= not np.isfinite(norms[user])
        norms[user] = np.sqrt(norms[user])
    if overflow:
        for index in range(dim * users):
            if not np.isfinite(out[index]):
                return False
    return True


@cached()
def _scaled(gradient, factor, scale_bound, top):
    """One user-coordinate's 256·s: its gradient clipped and scaled, shifted, clamped to [0, top]
    (cjmp._shift_and_scale's multiply, add and clip, rounded as numpy rounds them)."""
    return min(max(gradient * factor + scale_bound, 0.0), top)


_LOW_BYTE = np.uint64(0xFF)
_HIGH_BITS = np.uint64(0x8080808080808080)


@cached()
def _note_ties(lows, size, ties):
    """The indices below `size` whose byte in `lows` (uint64 words read as little-endian bytes)
    is 255, in order, into `ties`; returns how many. Eight bytes a test: a word holds a 255
    exactly when its complement holds a zero byte, (v − 0x01…01) & ~v & 0x80…80 ≠ 0."""
    count = 0
    for word in range(lows.size):
        complement = ~lows[word]
        if (complement - _ONES_BYTES) & ~complement & _HIGH_BITS:
            for byte in range(8):
                index = 8 * word + byte
                if index < size and (lows[word] >> np.uint64(8 * byte)) & _LOW_BYTE == _LOW_BYTE:
                    ties[count] = index
                    count += 1
    return count


@register_jitable
def _rounded_chunk(problem, query, data, column, users, state, scale_bound, bound, top, gradients, factors, raws, lows, ties,
                   rounded):
    """cjmp._rounded_sum of one chunk of users (data columns [column, column + users)), added
    to `rounded`; False if a gradient is not finite.

    The gradients and norms (_gradients) and the clip-and-scale factors (g/Δ·256)·Δ₂/max(‖g‖, Δ₂)
    of cjmp._shift_and_scale; the fixed point T + U with one random byte U per coordinate, bytes
    in (coordinate, user) order from ⌈size/8⌉ raw outputs (fill_raw, read as little-endian bytes
    as numpy's `view(np.uint8)`); the low bytes of T + U kept to find the ties after the loop
    (noting them inside it kept the loop from being vectorized: twice as slow); then one
    uniform per tie, in order.
    """
    dim = query.size
    if not _gradients(problem, query, data, column, users, gradients, factors):
        return False
    for user in range(users):
        factors[user] = scale_bound / max(factors[user], bound)
    size = dim * users
    words = (size + 7) // 8
    fill_raw(state, raws, words)
    random_bytes, low_bytes = raws.view(np.uint8), lows.view(np.uint8)
    for coordinate in range(dim):
        first = coordinate * users
        row = gradients[first: first + users]
        row_bytes, row_lows = random_bytes[first: first + users], low_bytes[first: first + users]
        whole = 0
        for user in range(users):
            fixed = np.uint32(_scaled(row[user], factors[user], scale_bound, top)) + np.uint32(row_bytes[user])
            row_lows[user] = np.uint8(fixed & 0xFF)
            whole += np.int64(fixed >> 8)
        rounded[coordinate] += whole
    for tie in range(_note_ties(lows[:words], size, ties)):
        value = _scaled(gradients[ties[tie]], factors[ties[tie] % users], scale_bound, top)
        if next_double(state) >= 1.0 - (value - np.floor(value)):
            rounded[ties[tie] // users] += 1
    return True


@cached()
def _column_norms(values, dim, users, norms):
    """numerics.column_norms of a (d, users) array in (coordinate, user) order: each column's
    squares added coordinate by coordinate."""
    for user in range(users):
        total = 0.0
        for coordinate in range(dim):
            total += values[coordinate * users + user] * values[coordinate * users + user]
        norms[user] = np.sqrt(total)


@cached()
def _duchi_reports(inputs, dim, users, state, radius, agreement, report_norm, norms, work):
    """sums.duchi_reports of a chunk's clipped inputs, in place: per user a sign, one uniform
    each; the sphere's normals in (coordinate, user) order, each column normalized; one
    uniform each for the half-space; the report B·(±sphere). `work`: (signs, sphere's norms,
    sphere), of a chunk's sizes."""
    signs, sphere_norms, sphere = work
    _column_norms(inputs, dim, users, norms)
    for user in range(users):
        signs[user] = 1.0 if next_double(state) < 0.5 + norms[user] / (2.0 * radius) else -1.0
    standard_normals(state, sphere, dim * users)
    _column_norms(sphere, dim, users, sphere_norms)
    for user in range(users):
        for coordinate in range(dim):
            sphere[coordinate * users + user] /= sphere_norms[user]
    for user in range(users):
        agree = next_double(state) < agreement
        side = 0.0  # column_dots(sphere, pole), the pole the input's direction times its sign
        for coordinate in range(dim):
            if norms[user] > 0:
                direction = inputs[coordinate * users + user] / max(norms[user], 1e-300)
            else:  # a zero input's direction: the first axis
                direction = 1.0 if coordinate == 0 else 0.0
            side += sphere[coordinate * users + user] * (direction * signs[user])
        flip = (side >= 0) != agree
        for coordinate in range(dim):
            value = sphere[coordinate * users + user]
            inputs[coordinate * users + user] = report_norm * (-value if flip else value)


@register_jitable
def _summed_chunk(problem, query, data, column, users, state, norm_bound, user_noise, user_sigma, local_reports, agreement,
                  report_norm, inputs, norms, local_work, total):
    """sums._reports of one chunk of users (data columns [column, column + users)), summed per
    coordinate as `.sum(axis=1)` sums a (d, users) row (numpy's pairwise sum) and added to
    `total`; False if a gradient is not finite.

    The gradients (_gradients); clip_l2's factor min(1, C/max(‖g‖, 1e-300)); with user noise
    (shuffle_gaussian) x + σz, the normals drawn in (coordinate, user) order; with local
    reports (local_l2) Duchi et al.'s randomizer (_duchi_reports).
    """
    dim = query.size
    if not _gradients(problem, query, data, column, users, inputs, norms):
        return False
    for user in range(users):  # the norms become the clip factors (_duchi_reports recomputes the norms)
        norms[user] = min(1.0, norm_bound / max(norms[user], 1e-300))
    for coordinate in range(dim):
        row = inputs[coordinate * users: (coordinate + 1) * users]
        for user in range(users):
            row[user] *= norms[user]
    if user_noise:
        noise = local_work[2]
        standard_normals(state, noise, dim * users)
        for index in range(dim * users):
            inputs[index] = inputs[index] + user_sigma * noise[index]
    if local_reports:
        _duchi_reports(inputs, dim, users, state, norm_bound, agreement, report_norm, norms, local_work)
    for coordinate in range(dim):
        total[coordinate] += pairwise_sum(inputs, coordinate * users, users)
    return True


@cached()
def _hadamard(values, spare, size, columns):
    """girgis._fwht along the first axis of values (size × columns, row-major), in place: the
    butterflies of each stage written to `spare` and back (the same sums and differences in
    the same order as the numpy stages); returns the array holding the result."""
    half = 1
    while half < size:
        for start in range(0, size, 2 * half):
            for row in range(start, start + half):
                for column in range(columns):
                    upper, lower = values[row * columns + column], values[(row + half) * columns + column]
                    spare[row * columns + column] = upper + lower
                    spare[(row + half) * columns + column] = upper - lower
        values, spare = spare, values
        half *= 2
    return values


# Girgis's randomizers the compiled rounds twin (multi_message.FUSED_KINDS: their index).
_LINF, _L2, _L1 = 0, 1, 2


@cached()
def _girgis_cube(inputs, norms, users, kind, coded, ball, clip_radius, signs, units, spare):
    """girgis._unit_cube of a chunk's gradients for linf or l2: the projection into the ball
    (linf: each coordinate clipped to ±r; l2: scaled by r/max(‖g‖, r), padded, signed by D,
    rotated by H/√d_pad, clipped to ±r∞), then z = (w + r)/(2r); returns the array holding z."""
    dim = inputs.size // users
    if kind == _LINF:
        for index in range(dim * users):
            units[index] = (min(max(inputs[index], -ball), ball) + ball) / (2.0 * ball)
        return units
    units[: coded * users] = 0.0
    for user in range(users):
        factor = ball / max(norms[user], ball)
        for coordinate in range(dim):
            units[coordinate * users + user] = inputs[coordinate * users + user] * factor * signs[coordinate]
    cube, root = _hadamard(units, spare, coded, users), np.sqrt(coded)
    for index in range(coded * users):
        cube[index] = (min(max(cube[index] / root, -clip_radius), clip_radius) + clip_radius) / (2.0 * clip_radius)
    return cube


@cached()
def _girgis_l1(inputs, users, state, coded, ball, hadamard, units, spare, indices, hist):
    """girgis._encode_l1 of a chunk's gradients: each scaled into the ℓ1 ball of radius r (its
    |coordinates| summed in order, numerics.column_sums), padded and transformed by H; one
    index j below d_pad per user (`bounded`), then one uniform per user for σ = +1 with
    probability ½ + ½·clip((Hx)_j/r, ±1)/c."""
    dim = inputs.size // users
    units[: coded * users] = 0.0
    for user in range(users):
        total = 0.0
        for coordinate in range(dim):
            total += abs(inputs[coordinate * users + user])
        factor = ball / max(total, ball)
        for coordinate in range(dim):
            units[coordinate * users + user] = inputs[coordinate * users + user] * factor
    coefficients = _hadamard(units, spare, coded, users)
    for user in range(users):
        indices[user] = bounded(state, coded)
    for user in range(users):
        picked = indices[user]
        t = min(max(coefficients[picked * users + user] / ball, -1.0), 1.0)
        hist[0, picked, 0] += 1
        if next_double(state) < 0.5 + 0.5 * t / hadamard:
            hist[0, picked, 1] += 1


@register_jitable
def _girgis_chunk(problem, query, data, column, users, state, kind, coded, width, levels, messages, ball, clip_radius,
                  hadamard, flips, signs, work, hist):
    """girgis.encode_block of one chunk of users (data columns [column, column + users)) for
    linf, l2 or l1 (`kind`), into `hist` (levels × s·a × 2); False if a gradient is not finite.

    The gradients and their norms (_gradients); l1: _girgis_l1. linf, l2: the unit cube
    (_girgis_cube); then per level the (s, users) indices (fill_bounded, one block of width a per
    message), the (s, users) uniforms, and each message's bit (a plane of F or the rounding
    plane, through 2RR) counted at its index.
    """
    inputs, norms, units, spare, indices = work
    if not _gradients(problem, query, data, column, users, inputs, norms[:users]):
        return False
    if kind == _L1:
        _girgis_l1(inputs[: query.size * users], users, state, coded, ball, hadamard, units, spare, indices, hist)
        return True
    cube = _girgis_cube(inputs[: query.size * users], norms, users, kind, coded, ball, clip_radius, signs, units,
                        spare)
    scale = 2.0 ** (levels - 1)
    drawn = indices[:messages * users]
    tape = np.empty(max(1, min(TAPE_WORDS, (drawn.size + 1) // 2)), np.uint64)
    for level in range(levels):
        fill_bounded(state, width, drawn, tape)
        for index in range(messages * users):
            indices[index] += (index // users) * width
        for index in range(messages * users):
            picked = indices[index]
            value = cube[picked * users + index % users] if picked < coded else 0.0  # zero padding
            scaled = value * scale
            floor = min(max(np.floor(scaled), 0.0), scale - 1.0)  # girgis._bit_planes
            uniform, p = next_double(state), flips[level]
            if level < levels - 1:
                sent = ((np.int64(floor) >> (levels - 2 - level)) & 1 == 1) != (uniform < p)
            else:
                sent = uniform < p + (1.0 - 2.0 * p) * min(max(scaled - floor, 0.0), 1.0)
            hist[level, picked, 0] += 1
            if sent:
                hist[level, picked, 1] += 1
    return True


@cached()
def _girgis_estimate(hist, users, kind, dim, coded, width, levels, ball, clip_radius, hadamard, flips, weights, signs,
                     sums, spare, estimate):
    """girgis.decode of a round's histograms into `estimate`. l1: r·c·H(2·ones − counts).
    linf, l2: per level the debiased counts weight_k·a/(1 − 2p_k)·(ones − p_k·counts) summed
    into ẑ, then 2r∞·ẑ − r∞·n, and for l2 Uᵀ = D·H/√d_pad of it; the first d coordinates."""
    padded = hist.shape[1]
    if kind == _L1:
        for index in range(coded):
            sums[index] = 2.0 * np.float64(hist[0, index, 1]) - np.float64(hist[0, index, 0])
        back = _hadamard(sums[:coded], spare[:coded], coded, 1)
        for coordinate in range(dim):
            estimate[coordinate] = (ball * hadamard) * back[coordinate]
        return
    sums[:padded] = 0.0
    for level in range(levels):
        p = flips[level]
        coefficient = weights[level] * width / (1.0 - 2.0 * p)
        for index in range(padded):
            sums[index] += coefficient * (np.float64(hist[level, index, 1]) - p * np.float64(hist[level, index, 0]))
    for index in range(coded):
        sums[index] = 2.0 * clip_radius * sums[index] - clip_radius * users
    if kind == _L2:
        back, root = _hadamard(sums[:coded], spare[:coded], coded, 1), np.sqrt(coded)
        for coordinate in range(dim):
            estimate[coordinate] = back[coordinate] / root * signs[coordinate]
    else:
        estimate[:] = sums[:dim]


@register_jitable
def _project(step, radius, squares):
    """π onto the problem's ball, in place (problems.base.ball_projection; for every problem with a
    twin, an envelope's is its base's): its norm numpy's pairwise sum of the squares."""
    dim = step.size
    for coordinate in range(dim):
        squares[coordinate] = step[coordinate] * step[coordinate]
    norm = np.sqrt(pairwise_sum(squares, 0, dim))
    if not norm <= radius:
        shrink = radius / norm
        for coordinate in range(dim):
            step[coordinate] *= shrink


@cached()
def _segment(user, stop_user, block_size, round_index, key, counter, state):
    """The end of the part of a round's users [user, stop_user) in user's block; `state` set to
    that block's stream (ROUND_STREAM, round, block) (`counter`: its first counter, any round
    and block; word 1 holds the stream's kind)."""
    block = user // block_size
    counter[0], counter[2], counter[3] = 0, round_index, block
    rekey(state, key, counter)
    return min(stop_user, (block + 1) * block_size)


def _round_loop(segment, analyzer, query_stage, step_stage, release_stage):
    """A window of sequential rounds (Shard.python_rounds) whose protocol encodes each block's
    part of a round with `segment` and turns the round's encoding into the estimated sum with
    `analyzer`, and whose optimizer's round is its three stages (Optimizer.compiled_update).

    Per round: the query (query_stage); each block's part of the batch encoded from the stream
    (ROUND_STREAM, round, block) (`counter`: that stream's first counter, any round and block):
    segment(encoding, work, problem, query, data, first, stop, chunk, state) for data columns
    [first, stop), chunk by chunk, the gradients its twin's (_gradients), False on a
    non-finite value; analyzer(encoding, work, round, batch, key, noise_counter, state,
    estimate), which also clears the round's encoding, False if it cannot; the mean ḡ =
    estimate/batch (False if not finite), step_stage, the projection (_project), release_stage
    (in place on the optimizer's state (θ, extra, t); False if not finite); the released
    model's losses (problem_losses) into excess and population. It returns how many rounds ran:
    `count`, or the first round that failed (the Python round then says why).

    A factory of register_jitable functions (as _ziggurat), called from a cached kernel
    (round_kernel): numba cannot take functions as arguments of a cached kernel.
    """

    @register_jitable
    def rounds(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count, first_user,
               batch, block_size, chunk, encoding, work, constants, radius, problem, excess, population):
        dim = theta.size
        query, estimate, mean = np.empty(dim), np.empty(dim), np.empty(dim)
        step, released = np.empty(dim), np.empty(dim)
        squares = np.empty(dim)  # what pairwise_sum adds: numpy squares a vector first, then sums it
        for done in range(count):
            round_index = start + done
            query_stage(constants, theta, extra, steps, query)
            user = first_user + done * batch
            stop_user = user + batch
            while user < stop_user:
                segment_stop = _segment(user, stop_user, block_size, round_index, key, counter, state)
                if not segment(encoding, work, problem, query, data, user - data_first, segment_stop - data_first, chunk,
                               state):
                    return done
                user = segment_stop
            if not analyzer(encoding, work, round_index, batch, key, noise_counter, state, estimate):
                return done
            for coordinate in range(dim):
                if not np.isfinite(estimate[coordinate]):
                    return done
                mean[coordinate] = estimate[coordinate] / batch
            step_stage(constants, theta, extra, steps, mean, step)
            _project(step, radius, squares)
            if not release_stage(constants, theta, extra, steps, mean, step, released):
                return done
            excess[done], population[done] = problem_losses(problem, released, squares)
        return count

    return rounds


@register_jitable
def _pvec_segment(encoding, work, problem, query, data, first, stop, chunk, state):
    """cjmp.encode_block of a block's users: the chunks' rounded sums (_rounded_chunk), then
    one Binomial(users·b_noise, p) per coordinate, added to the round's ones."""
    scale_bound, bound, top, b_noise, p = encoding[:5]
    gradients, factors, raws, lows, ties, ones = work
    for low in range(first, stop, chunk):
        if not _rounded_chunk(problem, query, data, low, min(chunk, stop - low), state, scale_bound, bound, top, gradients,
                              factors, raws, lows, ties, ones):
            return False
    for coordinate in range(query.size):
        ones[coordinate] += binomial(state, (stop - first) * b_noise, p)
    return True


@register_jitable
def _pvec_analyzer(encoding, work, round_index, batch, key, noise_counter, state, estimate):
    """cjmp.finish and decode: (Δ/g)·(ones − n·b_noise·p) − n·Δ₂, the mean split exactly."""
    whole, fraction, decode_scale, shift = encoding[5:]
    ones = work[5]
    for coordinate in range(estimate.size):
        estimate[coordinate] = decode_scale * (np.float64(ones[coordinate] - whole) - fraction) - shift
    ones[:] = 0
    return True


@register_jitable
def _pvec_work(dim, chunk):
    """_pvec_segment's work: the gradients, clip factors, raw outputs, low bytes and ties of a
    chunk, and the ones."""
    words = -(-dim * chunk // 8)
    return (np.empty(dim * chunk), np.empty(chunk), np.empty(words, np.uint64), np.empty(words, np.uint64),
            np.empty(dim * chunk, np.int64), np.zeros(dim, np.int64))


def _pvec_kernel(rounds):
    """The kernel of `rounds` (_round_loop) with P_vec (round_kernel)."""

    @njit(nogil=True)  # nogil: the next block's users are drawn meanwhile (fused.FusedRounds)
    def rounds_pvec(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count,
                    first_user, batch, block_size, chunk, scale_bound, bound, top, b_noise, p, whole, fraction,
                    decode_scale, shift, constants, radius, problem, excess, population):
        """Rounds [start, start + count) with P_vec (cjmp_vec), as _round_loop runs them
        (`noise_counter` is unused: P_vec has no curator's noise).

        Returns:
          How many rounds ran: `count`, or the first round with a non-finite value.
        """
        work = _pvec_work(theta.size, chunk)
        return rounds(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count,
                      first_user, batch, block_size, chunk,
                      (scale_bound, bound, top, b_noise, p, whole, fraction, decode_scale, shift), work, constants,
                      radius, problem, excess, population)

    return rounds_pvec


@register_jitable
def _sum_segment(encoding, work, problem, query, data, first, stop, chunk, state):
    """sums.SumProtocol.encode_block of a block's users: the chunks' clipped reports
    (_summed_chunk) summed in floats, then rounded to fixed point, rint(total/quantum), added
    to the round's units; False on a non-finite value or at 2⁶² units (encode_block's
    OverflowError)."""
    norm_bound, quantum, user_noise, central_noise, sigma, local_reports, agreement, report_norm = encoding
    inputs, norms, local_work, total, units, central = work
    total[:] = 0.0
    for low in range(first, stop, chunk):
        if not _summed_chunk(problem, query, data, low, min(chunk, stop - low), state, norm_bound, user_noise, sigma,
                             local_reports, agreement, report_norm, inputs, norms, local_work, total):
            return False
    for coordinate in range(query.size):
        rounded = np.rint(total[coordinate] / quantum)
        if not abs(rounded) < 2.0**62:  # or a NaN
            return False
        units[coordinate] += np.int64(rounded)
    return True


@register_jitable
def _sum_analyzer(encoding, work, round_index, batch, key, noise_counter, state, estimate):
    """The analyzer's total units·quantum, plus σz from the stream (NOISE_STREAM, round) with
    `central_noise` (`noise_counter`: its first counter, any round)."""
    quantum, central_noise, sigma = encoding[1], encoding[3], encoding[4]
    units, central = work[4], work[5]
    for coordinate in range(estimate.size):
        estimate[coordinate] = np.float64(units[coordinate]) * quantum
    units[:] = 0
    if central_noise:
        noise_counter[0], noise_counter[2] = 0, round_index
        rekey(state, key, noise_counter)
        standard_normals(state, central, estimate.size)
        for coordinate in range(estimate.size):
            estimate[coordinate] = estimate[coordinate] + sigma * central[coordinate]
    return True


@register_jitable
def _sum_work(dim, chunk, user_noise, local_reports):
    """_sum_segment's work: a chunk's inputs and norms, _duchi_reports' (signs, sphere's norms,
    sphere, whose sphere holds shuffle_gaussian's noise too), the block's total, the units and
    the curator's noise."""
    local_work = (np.empty(chunk), np.empty(chunk), np.empty(dim * chunk if local_reports or user_noise else 0))
    return np.empty(dim * chunk), np.empty(chunk), local_work, np.empty(dim), np.zeros(dim, np.int64), np.empty(dim)


def _sum_kernel(rounds):
    """The kernel of `rounds` (_round_loop) with a sum protocol (round_kernel)."""

    @njit(nogil=True)
    def rounds_sum(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count, first_user,
                   batch, block_size, chunk, norm_bound, quantum, user_noise, central_noise, sigma, local_reports,
                   agreement, report_norm, constants, radius, problem, excess, population):
        """Rounds [start, start + count) with a sum protocol (sums.SumProtocol: `none`,
        `central_gaussian`, `shuffle_gaussian`, `local_l2`), as _round_loop runs them: per block
        the chunks' reports (σ = `sigma` per user with `user_noise`, Duchi et al.'s reports with
        `local_reports`) in fixed point, blocks added exactly, and the curator's noise.

        Returns:
          How many rounds ran: `count`, or the first round with a non-finite value or a fixed-point overflow.
        """
        work = _sum_work(theta.size, chunk, user_noise, local_reports)
        return rounds(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count,
                      first_user, batch, block_size, chunk,
                      (norm_bound, quantum, user_noise, central_noise, sigma, local_reports, agreement, report_norm),
                      work, constants, radius, problem, excess, population)

    return rounds_sum


@register_jitable
def _girgis_segment(encoding, work, problem, query, data, first, stop, chunk, state):
    """girgis.encode_block of a block's users, chunk by chunk (_girgis_chunk), into the round's histograms."""
    kind, coded, width, levels, messages, ball, clip_radius, hadamard, flips, weights, signs = encoding
    chunk_work, hist = work[:5], work[5]
    for low in range(first, stop, chunk):
        if not _girgis_chunk(problem, query, data, low, min(chunk, stop - low), state, kind, coded, width, levels, messages,
                             ball, clip_radius, hadamard, flips, signs, chunk_work, hist):
            return False
    return True


@register_jitable
def _girgis_analyzer(encoding, work, round_index, batch, key, noise_counter, state, estimate):
    """girgis.decode of the round's histograms (_girgis_estimate): n is their users, the batch."""
    kind, coded, width, levels, messages, ball, clip_radius, hadamard, flips, weights, signs = encoding
    hist, sums, spare = work[5], work[6], work[7]
    _girgis_estimate(hist, batch, kind, estimate.size, coded, width, levels, ball, clip_radius, hadamard, flips,
                     weights, signs, sums, spare, estimate)
    hist[:] = 0
    return True


def _girgis_kernel(rounds):
    """The kernel of `rounds` (_round_loop) with Girgis's randomizers (round_kernel)."""

    @njit(nogil=True)
    def rounds_girgis(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count,
                      first_user, batch, block_size, chunk, kind, coded, width, levels, messages, ball, clip_radius,
                      hadamard, flips, weights, signs, constants, radius, problem, excess, population):
        """Rounds [start, start + count) with Girgis's linf, l2 or l1 randomizer (multi_message's
        girgis_linf, girgis_l2, girgis_l1: `kind`), as _round_loop runs them (`noise_counter` is
        unused): per block the chunks' messages counted in the round's histograms (_girgis_chunk),
        then the analyzer (_girgis_estimate).

        Returns:
          How many rounds ran: `count`, or the first round with a non-finite value.
        """
        dim = theta.size
        rows, padded = max(coded, dim), coded if kind == _L1 else messages * width  # girgis.statistic_shape
        work = (np.empty(dim * chunk), np.empty(chunk), np.empty(rows * chunk), np.empty(rows * chunk),
                np.empty(max(messages, 1) * chunk, np.int64), np.zeros((levels, padded, 2), np.int64),
                np.empty(max(padded, coded)), np.empty(max(padded, coded)))
        return rounds(theta, extra, steps, data, data_first, key, counter, noise_counter, state, start, count,
                      first_user, batch, block_size, chunk,
                      (kind, coded, width, levels, messages, ball, clip_radius, hadamard, flips, weights, signs),
                      work, constants, radius, problem, excess, population)

    return rounds_girgis


# --- the rounds of a protocol's kernel with an optimizer's stages ----------------------------

# A protocol's kernel (its fused_encoding's `kernel`) → its segment, analyzer and cached entry.
_KERNELS = {"rounds_pvec": (_pvec_segment, _pvec_analyzer, _pvec_kernel),
            "rounds_sum": (_sum_segment, _sum_analyzer, _sum_kernel),
            "rounds_girgis": (_girgis_segment, _girgis_analyzer, _girgis_kernel)}
_BUILT: dict = {}  # (kernel, stages, problem's twin) → its compiled rounds, for this process


def round_kernel(kind: str, update, twin: type, tag: int):
    """The compiled rounds of a protocol's kernel with an optimizer's stages (CompiledUpdate) on a
    problem's compiled twin: built once per process, cached on disk by numba (_KeyedCache), keyed
    by this file, the kernel, the stages' and the twin's names, and `tag`.

    Args:
      kind: the protocol's kernel, its fused_encoding's `kernel` ("rounds_pvec", "rounds_sum",
        "rounds_girgis").
      update: the optimizer's CompiledUpdate.
      twin: the class of the problem's compiled twin (pipeline.problems.base), whose `gradients`
        and `losses` the kernel inlines.
      tag: a hash of the sources of the stages, the twin's functions and what they call below 2⁶⁰
        (fused.stage_key): numba keys a cached kernel by the file that defines it, not by what it
        calls, so an edit to those files must change the key to compile it again.

    Returns:
      A compiled function of (θ, extra, steps, …, the protocol's constants, update.constants,
      radius, problem, excess, population) → rounds run.
    """
    stages = (update.query, update.step, update.release)
    key = (kind, *stages, twin, tag)
    if key not in _BUILT:
        for stage in stages:
            jitable(stage)
        segment, analyzer, entry = _KERNELS[kind]
        kernel = entry(_round_loop(segment, analyzer, *stages))
        _BUILT[key] = _keyed(kernel, kind, (*stages, twin), tag)
    return _BUILT[key]


def block_kernel(kind: str, twin: type, tag: int):
    """A fully interactive round's kernel over a shard's blocks (_block_loop) for a protocol's
    kernel ("rounds_pvec" → blocks_pvec, "rounds_sum" → blocks_sum) on a problem's compiled twin,
    built and cached as round_kernel's (`tag`: fused.stage_key of the twin's functions)."""
    key = (kind, twin, tag)
    if key not in _BUILT:
        _BUILT[key] = _keyed(_BLOCK_KERNELS[kind](), kind, (twin,), tag)
    return _BUILT[key]


def draw_kernel(twin: type, tag: int):
    """The compiled draw of a block's users by a problem's compiled twin (its class's `draw`),
    built and cached as round_kernel's (`tag`: fused.stage_key of the twin's draw)."""
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


def compiled_stages(update) -> tuple:
    """An optimizer's stages (CompiledUpdate) compiled one by one, for the rounds the engine runs in
    Python (pipeline.engine.rounds): the functions the round kernels inline, called here with the
    problem's own projection between the step and the release. numba caches each by its file;
    a stage shipped by value to a node without its file compiles in each process.

    Returns:
      (query, step, release), compiled.
    """
    for stage in (update.query, update.step, update.release):
        if stage not in _ALONE:
            _ALONE[stage] = (cached() if os.path.isfile(stage.__code__.co_filename) else njit)(stage)
    return _ALONE[update.query], _ALONE[update.step], _ALONE[update.release]


_ALONE: dict = {}  # a stage function → its compiled twin, for this process


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


def _block_loop(segment):
    """One fully interactive round over a shard's blocks (Shard.partial_counts): block k's users
    are data columns [starts[k], stops[k]), encoded by the protocol's `segment` (as in
    _round_loop) from the stream (ROUND_STREAM, round, blocks[k]) (`counter`: that stream's
    first counter, any round and block) into `accumulator`, which counts[k] then takes. The
    loop returns False if a segment fails (a non-finite gradient, a fixed-point overflow)."""

    @register_jitable
    def blocks_of(problem, query, data, starts, stops, blocks, round_index, key, counter, state, chunk, encoding, work,
                  accumulator, counts):
        for index in range(blocks.size):
            counter[0], counter[2], counter[3] = 0, round_index, blocks[index]
            rekey(state, key, counter)
            if not segment(encoding, work, problem, query, data, starts[index], stops[index], chunk, state):
                return False
            counts[index] = accumulator
            accumulator[:] = 0
        return True

    return blocks_of


def _blocks_pvec():
    """A new blocks_pvec kernel (block_kernel): the protocol's constants are P_vec's (cjmp_vec)."""
    blocks = _block_loop(_pvec_segment)

    @njit(nogil=True)
    def blocks_pvec(problem, query, data, starts, stops, blocks_held, round_index, key, counter, state, chunk,
                    scale_bound, bound, top, b_noise, p, whole, fraction, decode_scale, shift, counts):
        """A fully interactive round's P_vec over a shard's blocks (_block_loop, cjmp.encode_block):
        counts[k] = block k's ones, its users' rounded sums plus one Binomial(users·b_noise, p)
        draw per coordinate (the caller checks that the trials fit one draw). The analyzer's
        constants are unused."""
        work = _pvec_work(query.size, chunk)
        return blocks(problem, query, data, starts, stops, blocks_held, round_index, key, counter, state, chunk,
                      (scale_bound, bound, top, b_noise, p, whole, fraction, decode_scale, shift), work, work[5], counts)

    return blocks_pvec


def _blocks_sum():
    """A new blocks_sum kernel (block_kernel): the protocol's constants are a sum protocol's."""
    blocks = _block_loop(_sum_segment)

    @njit(nogil=True)
    def blocks_sum(problem, query, data, starts, stops, blocks_held, round_index, key, counter, state, chunk,
                   norm_bound, quantum, user_noise, central_noise, sigma, local_reports, agreement, report_norm, counts):
        """A fully interactive round's sum protocol over a shard's blocks (_block_loop,
        sums.SumProtocol.encode_block): counts[k] = block k's reports summed in fixed point,
        rint(total/quantum) (the curator's noise is the analyzer's, after the merge)."""
        work = _sum_work(query.size, chunk, user_noise, local_reports)
        return blocks(problem, query, data, starts, stops, blocks_held, round_index, key, counter, state, chunk,
                      (norm_bound, quantum, user_noise, central_noise, sigma, local_reports, agreement, report_norm),
                      work, work[4], counts)

    return blocks_sum


_BLOCK_KERNELS = {"rounds_pvec": _blocks_pvec, "rounds_sum": _blocks_sum}
