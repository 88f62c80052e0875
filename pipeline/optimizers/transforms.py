"""An optimizer's round as small transforms composed by `chain`, in the style of optax
(shared/DESIGN.md, "A round is written once").

A Transform is one piece of a round: the floats it reads (`constants`), the vectors it keeps (its
`vectors` rows of the state's `extra`, pipeline.optimizers.base.CompiledUpdate) and up to three
functions in numba's subset, each of which sees only its own constants and rows:

  query(constants, rows, steps, theta, out): the point the round's users answer at (at most one
    transform of a chain has one; θ itself if none).
  update(constants, rows, steps, theta, direction, advance): changes the direction in place. The
    direction enters the chain as the round's mean gradient ḡ, and the step before projection is
    θ + direction (optax's apply_updates). The chain calls it with advance False to take the
    step, and, once the round's release is accepted, again from ḡ with advance True: then its
    rows advance too, so a round whose release is not finite leaves them as they were.
  release(constants, rows, steps, theta, projected, released) -> bool: the model the round
    releases, from the projected step; False if it is not finite, its rows untouched, else its
    rows advanced (exactly one transform of a chain has one).

`chain(t_1, …, t_k)` is the CompiledUpdate whose stages apply them in order: what the engine
compiles into its round loop or calls one by one, and what `Staged.query` and `update` run in
Python. Its rows are its transforms' rows in order, so the optimizer's state tuple is
(θ, t_1's vectors, …, t_k's vectors, t); t advances by one each accepted round and θ becomes the
projected step. A new update rule is a transform of a few lines (experiments/plugins/).
"""
from __future__ import annotations

import hashlib
from typing import Callable, NamedTuple

import numpy as np

from pipeline.optimizers.base import CompiledUpdate


class Transform(NamedTuple):
    """One piece of an optimizer's round (see the module docstring).

    Attributes:
      constants: the floats its functions read, as `constants[0]`, ….
      vectors: how many rows of the state it keeps.
      query, update, release: its functions, or None.
    """

    constants: tuple[float, ...] = ()
    vectors: int = 0
    query: Callable | None = None
    update: Callable | None = None
    release: Callable | None = None


def chain(*transforms: Transform) -> CompiledUpdate:
    """The round that applies `transforms` in order (see the module docstring).

    Raises:
      ValueError: no transform releases the model, or more than one does, or more than one queries;
        or a transform's function is a closure.
    """
    releasing = [each for each in transforms if each.release is not None]
    querying = [each for each in transforms if each.query is not None]
    if len(releasing) != 1 or len(querying) > 1:
        raise ValueError(f"a chain takes exactly one transform with a release and at most one with a query; "
                         f"got {len(releasing)} and {len(querying)}")
    for function in (each for transform in transforms for each in transform[2:] if each is not None):
        if function.__closure__:
            # numba names compiled code by the function's name: two closures of one name that froze
            # different values could stand in for each other once cached (_prefix).
            raise ValueError(f"transform function {function.__qualname__} is a closure: a transform reads its "
                             f"numbers from its constants, so its functions must be defined at module level")
    shape = tuple((each.query, each.update, each.release, len(each.constants), each.vectors) for each in transforms)
    query, step, release = _stages(shape)
    return CompiledUpdate(query, step, release, tuple(float(c) for each in transforms for c in each.constants),
                          sum(each.vectors for each in transforms))


# --- the transforms every family may use --------------------------------------------------------

def scale(factor: float) -> Transform:
    """direction ← factor · direction (optax.scale)."""
    return Transform((factor,), 0, update=scale_update)


def sgd(step_size: float) -> Transform:
    """A gradient step of size η: direction ← −η · direction (optax.sgd without momentum)."""
    return scale(-step_size)


def trace(decay: float) -> Transform:
    """Heavy-ball momentum (optax.trace): v ← μv + direction, direction ← v; one row, v."""
    return Transform((decay,), 1, update=trace_update)


def average() -> Transform:
    """Releases the average of the iterates before the step, (Σ_{s<t} θ_s + θ_t)/(t + 1), and keeps
    their sum: one row, Σθ (seed 000, Algorithms 3 and 5's output θ̄)."""
    return Transform((), 1, release=average_release)


def last_iterate() -> Transform:
    """Releases the projected step itself: the last iterate (seed 002's PNSGD)."""
    return Transform((), 0, release=last_release)


def scale_update(constants, rows, steps, theta, direction, advance):
    """direction ← constants[0] · direction."""
    for coordinate in range(theta.size):
        direction[coordinate] = constants[0] * direction[coordinate]


def trace_update(constants, rows, steps, theta, direction, advance):
    """v ← μv + direction (μ = constants[0], v = rows[0]), direction ← v."""
    for coordinate in range(theta.size):
        velocity = constants[0] * rows[0, coordinate] + direction[coordinate]
        direction[coordinate] = velocity
        if advance:
            rows[0, coordinate] = velocity


def average_release(constants, rows, steps, theta, projected, released):
    """Releases (Σθ + θ)/(t + 1), then Σθ ← Σθ + θ (Σθ = rows[0]); False, Σθ untouched, if not finite."""
    for coordinate in range(theta.size):
        released[coordinate] = (rows[0, coordinate] + theta[coordinate]) / (steps[0] + 1)
        if not np.isfinite(released[coordinate]):
            return False
    for coordinate in range(theta.size):
        rows[0, coordinate] = rows[0, coordinate] + theta[coordinate]
    return True


def last_release(constants, rows, steps, theta, projected, released):
    """Releases the projected step; False if it is not finite."""
    for coordinate in range(theta.size):
        released[coordinate] = projected[coordinate]
        if not np.isfinite(released[coordinate]):
            return False
    return True


# --- the chain's stages --------------------------------------------------------------------------

_CHAINS: dict = {}  # a chain's shape → its three stages: one set of functions, so one compiled kernel


def _stages(shape: tuple) -> tuple[Callable, Callable, Callable]:
    """The chain's (query, step, release) for its shape: each transform's (query, update, release,
    number of constants, rows). Built once per shape: the engine keys its compiled kernels by the
    stage functions, and numba's disk cache by their names, which state the whole shape."""
    if shape not in _CHAINS:
        _CHAINS[shape] = _build(shape, _prefix(shape))
    return _CHAINS[shape]


def _prefix(shape: tuple) -> str:
    """`chain_<hash of the shape>`: what every function a chain generates is named under. numba
    names compiled code by the function's qualified name and a per-process counter, and links
    code of one name as one definition; a cached kernel of another process whose closure of the
    same name froze other transforms or slices would otherwise stand in for this one's."""
    def name(function):
        return "-" if function is None else f"{function.__module__}.{function.__qualname__}"
    description = ";".join(f"{name(q)},{name(u)},{name(r)},{c},{v}" for q, u, r, c, v in shape)
    return "chain_" + hashlib.sha256(description.encode()).hexdigest()[:16]


def _named(function: Callable, prefix: str, role: str) -> Callable:
    """`function`, its qualified name `<prefix>.<role>`."""
    function.__qualname__ = f"{prefix}.{role}"
    return function


def _build(shape: tuple, prefix: str) -> tuple[Callable, Callable, Callable]:
    """The three stage functions of a chain of this shape (see _stages), each function it
    generates named under `prefix` (_prefix)."""
    placed, constant, row = [], 0, 0  # each transform's functions, its constants' and its rows' slices
    for query, update, release, constants, vectors in shape:
        placed.append((query, update, release, (constant, constant + constants, row, row + vectors)))
        constant, row = constant + constants, row + vectors
    queries = [_sliced_query(query, *at) for query, _, _, at in placed if query is not None]
    pick_query = _named(queries[0], prefix, "own_query") if queries else _theta_query
    (pick_release,) = [_named(_sliced_release(release, *at), prefix, "own_release")
                       for _, _, release, at in placed if release is not None]
    updates = [(update, *at) for _, update, _, at in placed if update is not None]
    directions = _updates(updates, prefix)
    # Only a chain whose updates keep rows takes its directions again (all of them, in order: an
    # update's row advances from the direction the updates before it left), to advance the rows.
    keeps_rows = any(row < row_stop for _, _, _, row, row_stop in updates)

    def query(constants, theta, extra, steps, out):
        pick_query(constants, theta, extra, steps, out)

    def step(constants, theta, extra, steps, mean, out):
        for coordinate in range(theta.size):
            out[coordinate] = mean[coordinate]
        directions(constants, theta, extra, steps, out, False)
        for coordinate in range(theta.size):
            out[coordinate] = theta[coordinate] + out[coordinate]

    def release(constants, theta, extra, steps, mean, projected, released):
        if not pick_release(constants, theta, extra, steps, projected, released):
            return False
        if keeps_rows:
            directions(constants, theta, extra, steps, mean.copy(), True)
        steps[0] += 1
        for coordinate in range(theta.size):
            theta[coordinate] = projected[coordinate]
        return True

    return _named(query, prefix, "query"), _named(step, prefix, "step"), _named(release, prefix, "release")


def _theta_query(constants, theta, extra, steps, out):
    """The query of a chain none of whose transforms has one: θ."""
    for coordinate in range(theta.size):
        out[coordinate] = theta[coordinate]


def _sliced_query(query, first, stop, row, row_stop):
    """A transform's query, given its own constants [first, stop) and rows [row, row_stop)."""
    def sliced(constants, theta, extra, steps, out):
        query(constants[first:stop], extra[row:row_stop], steps, theta, out)
    return sliced


def _sliced_release(release, first, stop, row, row_stop):
    """A transform's release, given its own constants [first, stop) and rows [row, row_stop)."""
    def sliced(constants, theta, extra, steps, projected, released):
        return release(constants[first:stop], extra[row:row_stop], steps, theta, projected, released)
    return sliced


def _no_updates(constants, theta, extra, steps, direction, advance):
    """The updates of a chain with none."""


def _updates(updates: list, prefix: str) -> Callable:
    """One function applying `updates` ((update, first constant, stop, first row, stop)) in order,
    named `<prefix>.updates_from_<k>` (the chain's last k updates): nested closures, since numba
    compiles no loop over distinct functions."""
    if not updates:
        return _no_updates
    (update, first, stop, row, row_stop), rest = updates[0], _updates(updates[1:], prefix)

    def applied(constants, theta, extra, steps, direction, advance):
        update(constants[first:stop], extra[row:row_stop], steps, theta, direction, advance)
        rest(constants, theta, extra, steps, direction, advance)
    return _named(applied, prefix, f"updates_from_{len(updates)}")
