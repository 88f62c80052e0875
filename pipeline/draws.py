"""The random draws a compiled twin may make (a problem's users, a protocol's randomizer), each
defined once, in pipeline.compiled, bit for bit as numpy's Generator makes it from a
Philox stream held as the kernel's state words (state_words).

A twin's functions, written in numba's subset in their family's file, call the names below; the
kernel compiles each call into its implementation (numba's `overload`). They exist in compiled
code only (this module imports nothing of the engine, which imports it): in Python, draw with
numpy's Generator, whose draws these are.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np


def _declared(function):
    """Marks a draw the kernel implements (pipeline.twins.called_functions leaves it out)."""
    function.declared = True
    return function


def _compiled_only(name: str):
    raise RuntimeError(f"pipeline.draws.{name} is drawn in compiled code only (pipeline.compiled); "
                       "in Python, draw with numpy's Generator")


@_declared
def normals(state: np.ndarray, out: np.ndarray, tape: np.ndarray) -> None:
    """Fills `out` with what `standard_normal(out.size)` draws (numpy's ziggurat), the raw
    outputs drawn in bulk into `tape`, a scratch buffer; `state` is left after them."""
    _compiled_only("normals")


@_declared
def raw_outputs(state: np.ndarray, out: np.ndarray, count: int) -> None:
    """Fills out[:count] with the stream's next `count` raw 64-bit outputs (`random_raw`)."""
    _compiled_only("raw_outputs")


@_declared
def unit(raw: np.uint64) -> float:
    """The double in [0, 1) that `random()` makes of one raw output (its top 53 bits)."""
    _compiled_only("unit")


@_declared
def integers(state: np.ndarray, bound: int) -> int:
    """One `integers(0, bound)` draw, 1 ≤ bound < 2³² (numpy's Lemire multiply and reject over
    32-bit halves of the raw outputs)."""
    _compiled_only("integers")


@_declared
def fill_integers(state: np.ndarray, bound: int, out: np.ndarray, tape: np.ndarray) -> None:
    """Fills the int64 array `out` with the next out.size `integers(0, bound)` draws (as many
    `integers` calls, in bulk: their 32-bit halves read from raw outputs drawn into `tape`)."""
    _compiled_only("fill_integers")


@_declared
def uniform(state: np.ndarray) -> float:
    """The next uniform double on [0, 1) (`random()`)."""
    _compiled_only("uniform")


@_declared
def standard_normals(state: np.ndarray, out: np.ndarray, count: int) -> None:
    """Fills out[:count] with the next `count` draws of `standard_normal` (numpy's ziggurat), one at a time."""
    _compiled_only("standard_normals")


@_declared
def binomial(state: np.ndarray, trials: int, probability: float) -> int:
    """One `binomial(trials, probability)` draw (numpy's inversion and BTPE, numba's port)."""
    _compiled_only("binomial")


@_declared
def poisson(state: np.ndarray, mean: float) -> int:
    """One `poisson(mean)` draw, 0 ≤ mean < 2⁶³ (numpy's multiplication method below 10,
    Hörmann's PTRS from 10 on)."""
    _compiled_only("poisson")


@_declared
def fill_poisson(state: np.ndarray, mean: float, out: np.ndarray) -> None:
    """Fills the int64 array `out` with the next out.size `poisson(mean)` draws (`poisson(mean, size)`)."""
    _compiled_only("fill_poisson")


# --- a numpy generator's stream as the kernel's state, and back -------------------------------

# Raw outputs a draw takes from its stream a tape at a time: small enough to stay in the core's
# first cache. The draws' values do not depend on it.
TAPE_RAWS = 2048


def tape_for(values: int) -> np.ndarray:
    """A draw's scratch buffer of raw outputs (the `tape` above) for `values` draws: TAPE_RAWS, or fewer."""
    return np.empty(max(1, min(TAPE_RAWS, values)), np.uint64)


def state_words(generator: np.random.Generator) -> np.ndarray:
    """A Philox generator's state as the kernel's uint64 words (pipeline.compiled.STATE_WORDS: the
    counter, the key, the buffer of four outputs, the position in it, whether a 32-bit half waits
    and that half), a copy.

    Raises:
      TypeError: the generator is not Philox's.
    """
    now = generator.bit_generator.state
    if now["bit_generator"] != "Philox":
        raise TypeError(f"a {now['bit_generator']} generator: the kernel's draws are Philox's")
    return np.array([*now["state"]["counter"], *now["state"]["key"], *now["buffer"], now["buffer_pos"],
                     now["has_uint32"], now["uinteger"]], np.uint64)


def set_state_words(generator: np.random.Generator, words: np.ndarray) -> None:
    """Moves a Philox generator to the kernel's state `words` (state_words' inverse)."""
    generator.bit_generator.state = {
        "bit_generator": "Philox", "state": {"counter": words[0:4].copy(), "key": words[4:6].copy()},
        "buffer": words[6:10].copy(), "buffer_pos": int(words[10]), "has_uint32": int(words[11]),
        "uinteger": int(words[12])}


@contextlib.contextmanager
def drawn_in_compiled_code(generator: np.random.Generator) -> Iterator[np.ndarray]:
    """The kernel's state of `generator`'s stream, for compiled code to draw from, the generator
    moved past those draws on exit: numpy's draws and the compiled ones then follow one another
    on one stream, as on the engine's (Philox) streams. Another generator seeds a Philox stream
    of its own (one 128-bit key drawn from it): the same law, its own bits.

    Yields:
      The state words.
    """
    if generator.bit_generator.state["bit_generator"] != "Philox":
        generator = np.random.Generator(np.random.Philox(key=generator.integers(0, 2**64, 2, dtype=np.uint64)))
    words = state_words(generator)
    yield words
    set_state_words(generator, words)
