"""The interface every SCO problem implements (shared/DESIGN.md §2, `problems/`)."""
from __future__ import annotations

import abc
import dataclasses
import functools
import math
import numbers
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from pipeline import draws
from pipeline.errors import ConfigError, shown
from pipeline.numerics import project_to_ball
from pipeline.options import Option
from pipeline.twins import keeps_twin, stage_key
# How users hold records (one each, m, or a law of counts; the records a round uses) is part of the
# problem contract: the engine reads it from here. Its machinery lives in records.py.
from pipeline.problems.records import ONE_EACH, RecordsPerUser, choose_records, offsets_of  # noqa: F401


def ball_projection(theta: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto {‖θ‖₂ ≤ radius}: numerics.project_to_ball, compiled (the
    compiled rounds inline it), on a copy.

    Returns:
      A new float64 array.
    """
    projected = np.array(theta, np.float64)
    compiled_function(project_to_ball)(projected, float(radius), np.empty(projected.size))
    return projected


def compiled_function(function):
    """A function in numba's subset compiled alone (pipeline.compiled.compiled_function): numba
    loads at a problem's first call of one, not when the problems are imported."""
    from pipeline import compiled

    return compiled.compiled_function(function)


def draw_key(twin_type: type) -> str:
    """The stage_key of a twin class's users' draw: its compiled kernel's cache key (twin_draw)."""
    return stage_key("draw", (twin_type.draw,))


def twin_draw(twin_type: type):
    """A twin class's users' draw, compiled (compiled.draw_kernel, which releases the GIL), one per
    class: what Twinned.sample runs, and the fused rounds in the thread that draws ahead."""
    from pipeline import compiled

    return compiled.draw_kernel(twin_type, int(draw_key(twin_type)[:15], 16))


def drawn_users(draw, constants: tuple, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Users drawn by a compiled draw, `draw(*constants, state, out, tape)` (pipeline.draws), from
    `rng`'s stream (draws.drawn_in_compiled_code: a Philox generator gives numpy's draws, the
    generator left where numpy's would be; another seeds a stream of its own).

    Returns:
      A new float64 array of `shape`.
    """
    users = np.empty(shape)
    with draws.drawn_in_compiled_code(rng) as state:
        draw(*constants, state, users, draws.tape_for(users.size))
    return users


def _floats(values) -> np.ndarray:
    """`values` as a C-ordered, writeable float64 array, copied only if it is not one already: the
    argument types a twin's function is compiled for once (numba compiles anew for read-only or
    strided arrays)."""
    return np.require(values, np.float64, ("C", "W"))


# --- A problem's compiled twin (Problem.compiled_problem) -----------------------------------------
# What the compiled rounds (pipeline.compiled) take of a problem: a NamedTuple of its
# constants whose class defines, in numba's subset, how a user's gradient is made from its data
# point, the released model's losses and how its users are drawn (the draw: each float operation in
# the order `sample` applies it to numpy's draws, so that both give the same bits):
#   gradients(self, query, data, column, users, out): the gradients at `query` of data columns
#     [column, column + users) into `out`, a flat (coordinate, user) array (`gradients`' (d, users));
#   losses(self, released, squares) -> (excess, population): `excess_loss` and `population_loss`
#     of the released model (`squares`: a d-vector the function may write);
#   draw(self, state, out, tape): users into `out` (d, users), drawn from the kernel's generator
#     `state` with pipeline.draws (`tape`: a uint64 scratch buffer): what `sample` returns.
# They are written once, in the family's file: the quadratic's and Bernoulli's θ − x
# (quadratic.QuadraticTwin, bernoulli.BernoulliTwin), the absolute deviation's sign(θ − x) + λθ
# and the Moreau envelope of it (absolute.SignTwin, absolute.EnvelopeTwin, which is never drawn
# from: the unsmoothed problem draws; Elastic's λ), and the kernels call them by the twin's type.
# A Twinned problem's public gradients, losses and `sample` are these functions too, compiled alone
# (numba loads at the first call, not at import); their numpy forms are the tests' oracle
# (tests/oracles/problems.py). Anything else (logistic: numpy's SIMD exp and log are not libm's;
# a plug-in that gives none) keeps numpy and the Python path.
CompiledProblem = NamedTuple  # a problem's compiled twin: its constants, its class the functions above


def writeable(values: np.ndarray) -> np.ndarray:
    """A writeable C-ordered float64 copy: numba compiles a kernel anew for each combination of
    read-only and writeable arrays it is called with (a problem's cached constants are read-only)."""
    return np.array(values, np.float64, order="C")


@dataclasses.dataclass(frozen=True)
class Constant:
    """A constant the problem contract declares: what it is and the values it may take.

    Attributes:
      meaning: what it stands for, as an error line says it.
      rule: the values it may take, as an error line says it.
      holds: whether a value follows the rule.
    """

    meaning: str
    rule: str
    holds: Callable[[Any], bool]


def _is_number(value: Any) -> bool:
    """Whether a value is a real number (numpy's included), and not a bool: True is no constant."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive_integer(value: Any) -> bool:
    """Whether a value is an integer ≥ 1 (numpy's included), and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def _finite_positive(value: Any) -> bool:
    """Whether a value is a finite number > 0."""
    return _is_number(value) and math.isfinite(value) and value > 0


def _finite_non_negative(value: Any) -> bool:
    """Whether a value is a finite number ≥ 0."""
    return _is_number(value) and math.isfinite(value) and value >= 0


def _positive_or_infinite(value: Any) -> bool:
    """Whether a value is a number > 0, inf included (NaN > 0 is False)."""
    return _is_number(value) and value > 0


# The constants every problem has (the class docstring's Attributes), each with its rule.
# L and D are divided by (step sizes η = D/(L√T)) and protocols clip to L and the data
# bound, so they must be finite and > 0; β may be inf (not smooth) but not 0 (η ≤ 1/β).
CONSTANTS: dict[str, Constant] = {
    "dim": Constant("d, the dimension of θ", "an integer ≥ 1", _positive_integer),
    "lipschitz": Constant("L, the bound on ‖∇ℓ‖₂ that protocols clip to", "a finite number > 0", _finite_positive),
    "smoothness": Constant("β, the smoothness", "a number > 0, inf if the loss is not smooth", _positive_or_infinite),
    "strong_convexity": Constant("λ, the strong convexity", "a finite number ≥ 0 (0 if not strongly convex)",
                                 _finite_non_negative),
    "diameter": Constant("D, the diameter of Θ", "a finite number > 0", _finite_positive),
    "data_norm_bound": Constant("the bound on ‖x‖₂ that protocols clip data to", "a finite number > 0",
                                _finite_positive),
}


def constant_error(problem: "Problem", member: str) -> str | None:
    """What is wrong with one declared constant of a problem.

    Args:
      problem: the problem a run uses.
      member: a key of CONSTANTS.

    Returns:
      The rule it breaks, in words naming the class and the member; None if it holds.
    """
    constant, owner = CONSTANTS[member], type(problem).__qualname__
    contract = "the problem contract (pipeline.problems.base.Problem)"
    try:
        value = getattr(problem, member)
    except AttributeError as error:
        if hasattr(type(problem), member):  # a property that fails is the plug-in's bug, not an omission
            return (f"{owner}.{member} raises AttributeError ({error}); {contract} declares it "
                    f"({constant.meaning}): {constant.rule}")
        return f"{owner} does not define {member} ({constant.meaning}), which {contract} declares: {constant.rule}"
    if constant.holds(value):
        return None
    return f"{owner}.{member} = {shown(value)} breaks {contract}: {constant.meaning} must be {constant.rule}"


def check_constants(problem: "Problem", name: str) -> None:
    """Refuses a problem whose declared constants break the contract's rules (CONSTANTS).

    Args:
      problem: the problem a run uses (what `for_run` returned).
      name: the config's problem.name, which the error names.

    Raises:
      ConfigError: naming problem.name, the class, the member and its rule.
    """
    for member in CONSTANTS:
        error = constant_error(problem, member)
        if error is not None:
            raise ConfigError("problem.name", name, error)


class Problem(abc.ABC):
    """A loss ℓ(θ, x) over a convex domain Θ, with a data distribution whose
    population loss and optimum are known exactly (the problem contract).

    Blocks of users are arrays of shape (dim, count): users along the last
    axis, so that per-coordinate work runs over long contiguous rows.

    Subclasses are constructed as `cls(dim=d, radius=R, **options)`, on the
    driver and again in every shard (the object is pickled to the shards).

    What the engine guarantees a problem: `sample` is called once per block of
    users, with that block's own generator keyed by (seed, block) and valid during
    the call, inside the shard that holds the block; the data never leave the shard.

    What a problem must guarantee: `sample` depends only on its generator and
    count (so any sharding gives the same users); `gradients` has ℓ2 norm at
    most `lipschitz` on Θ (protocols clip to that bound, so a wrong constant
    biases, it never leaks); `population_loss` and `optimum` are exact or
    documented high-precision values (every excess loss is measured with them);
    the constants below follow their rules (CONSTANTS) on the problem `for_run`
    returns. The runner checks that before any work (`check_constants`), so a
    constant left out, or outside its rule, is one config error naming it.

    Class attributes:
      name: the short name (`problem.name`).
      options: its options (config fields problem.<name>), passed to the constructor.
      data_kind: "real", or "binary" for points in {0, 1}^d (protocols declare
        which kinds they encode).
      reads_rows: False: users are drawn by `sample`; True: they are rows read
        by `read_users` (a dataset: pipeline.problems.dataset).
      exact_loss: True: `population_loss` and `optimum` are exact and cheap, so
        every round is measured where it runs; False: the loss is a sum over the
        rows, measured after the run from the shards' block sums
        (pipeline.engine.evaluation: `metric_sums`, `objective_sums`, `risk`).

    Attributes (the constants the theorems of seed 000 need):
      dim: d, the dimension of θ and of the data.
      lipschitz: L, a bound on ‖∇_θ ℓ(θ, x)‖₂ over Θ and the data's support.
      smoothness: β (``inf`` if the loss is not smooth).
      strong_convexity: λ (0 if the loss is not strongly convex).
      diameter: D, the diameter of Θ (not its radius; notes seed-000 T18).
      data_norm_bound: a bound on ‖x‖₂ over the data's support.
    """

    name: str
    options: ClassVar[tuple[Option, ...]] = ()
    data_kind: ClassVar[str] = "real"
    reads_rows: ClassVar[bool] = False
    exact_loss: ClassVar[bool] = True
    evaluations: int = 0  # rounds measured after the run when exact_loss is False
    heldout_users: int = 0  # held-out records the shards measure (a dataset's test rows)
    dim: int
    lipschitz: float
    smoothness: float
    strong_convexity: float
    diameter: float
    data_norm_bound: float

    @abc.abstractmethod
    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """Draws `count` users' data points.

        Args:
          rng: the generator of the users' block.
          count: how many users.

        Returns:
          float64 array of shape (dim, count).
        """

    @abc.abstractmethod
    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Per-user gradients ∇_θ ℓ(θ, x_i), vectorized over a block of users.

        Args:
          theta: the model, shape (dim,).
          data: the users' points, shape (dim, count).
          out: where to write them (same shape as data), or None.

        Returns:
          float64 array of shape (dim, count).
        """

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        """Per-user proximal points argmin_{θ'∈ℝ^d} ℓ(θ', x_i) + ‖θ' − θ‖²/(2·step).

        Args:
          theta: the point, shape (dim,).
          data: the users' points, shape (dim, count).
          step: the prox step > 0.

        Returns:
          float64 array of shape (dim, count).

        Raises:
          NotImplementedError: the problem has no closed-form prox.
        """
        raise NotImplementedError(f"{self.name} has no closed-form prox")

    @abc.abstractmethod
    def project(self, theta: np.ndarray) -> np.ndarray:
        """Euclidean projection π_Θ onto the domain."""

    @abc.abstractmethod
    def population_loss(self, theta: np.ndarray) -> float:
        """The exact population loss E_x ℓ(θ, x)."""

    @property
    @abc.abstractmethod
    def optimum(self) -> np.ndarray:
        """θ* = argmin_Θ of the population loss."""

    def excess_loss(self, theta: np.ndarray) -> float:
        """Excess population loss F(θ) − F(θ*)."""
        return self.population_loss(theta) - self.population_loss(self.optimum)

    def excess_and_population_loss(self, theta: np.ndarray) -> tuple[float, float]:
        """(excess_loss(θ), population_loss(θ)), what each round records: one call, for a problem
        that computes both at once (Twinned)."""
        return self.excess_loss(theta), self.population_loss(theta)

    def read_user_records(self, n_users: int, first: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Users first … stop−1's records (problems with `reads_rows`), user by user, and how many
        records each holds (None: one each). The default reads one record per user (`read_users`)."""
        return self.read_users(n_users, first, stop), None

    def for_run(self, run) -> "Problem":
        """The problem a run uses: itself, unless it depends on the run's (n, ε, δ)
        (the lower-bound instances, pipeline.problems.hard) or cannot serve its n
        users (a dataset's rows).

        Args:
          run: the run's config (pipeline.config.RunConfig).

        Returns:
          The problem.

        Raises:
          ConfigError: a field the problem cannot be run with.
        """
        return self

    @property
    def data_dim(self) -> int:
        """Rows of a user's data point: d, or more for labelled data (features, then the label)."""
        return self.dim

    def records_held(self, n_users: int) -> float | None:
        """At most how many records n of this problem's users hold together, where its own data
        says (a dataset's user column), or None: the run's problem.records_per_user says
        (RunJob.records). What the work estimate counts (pipeline/work.py)."""
        return None

    def compiled_problem(self) -> CompiledProblem | None:
        """This problem's compiled twin (`CompiledProblem`: its constants, whose class defines its
        gradients and losses in numba's subset), or None: its rounds run in numpy. A class that
        returns one promises that the twin's functions reproduce its gradients, losses and user
        draws bit for bit, and guards its subclasses with pipeline.twins.keeps_twin."""
        return None

    def compiled_envelope(self, beta: float) -> CompiledProblem | None:
        """The compiled twin of this problem's Moreau envelope with smoothing β
        (pipeline.problems.smoothed), or None."""
        return None

    @property
    def unsmoothed(self) -> "Problem":
        """The problem whose loss runs are measured on: itself, unless this is a smoothed stand-in."""
        return self

    def constants(self) -> dict[str, float]:
        """The declared constants, for logging."""
        return {
            "L": self.lipschitz,
            "beta": self.smoothness,
            "lambda": self.strong_convexity,
            "D": self.diameter,
        }


def twin_gradients(twin: CompiledProblem, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Problem.gradients by a compiled twin's `gradients`, compiled alone (compiled_function).

    Args:
      twin: the compiled twin.
      theta: the model, shape (dim,).
      data: the users' points, shape (dim, count), any layout and real dtype.
      out: where to write them (shape (dim, count)), or None.

    Returns:
      float64 array of shape (dim, count): `out` if given.
    """
    query, data = _floats(theta), _floats(data)
    users = data.shape[1]
    target = out if out is not None and out.flags.c_contiguous and out.flags.writeable \
        else np.empty((query.size, users))
    compiled_function(type(twin).gradients)(twin, query, data, 0, users, target.reshape(-1))
    if out is not None and target is not out:
        out[...] = target
        return out
    return target


TWINNED = ("gradients", "population_loss", "excess_loss")  # what Twinned runs of its twin


class Twinned(Problem):
    """A problem whose gradients, losses and users are written once, as its compiled twin's
    functions (`twin`, a CompiledProblem): `gradients`, `population_loss` and `excess_loss` run
    them compiled one call at a time (compiled_function), `sample` its draw's kernel (twin_draw),
    and the compiled rounds inline the same functions. Their numpy forms are the tests' oracle (tests/oracles/problems.py).

    Class attributes:
      twin_reproduces: what else of the class the twin reproduces (`sample`, its `draw`; the
        kernels' projection: `project`). A subclass that overrides one of these, or `gradients`,
        `population_loss` or `excess_loss`, keeps the Python path (twins.keeps_twin).
      losses_restate: the methods the twin's `losses` restate inline (absolute's per-user
        `losses`): a subclass that overrides one measures its losses with the next class's
        methods in its MRO (FiniteBallProblem's weighted sums).
    """

    twin_reproduces: ClassVar[tuple[str, ...]] = ("sample", "project")
    losses_restate: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def twin(self) -> CompiledProblem:
        """This problem's compiled twin: its constants, whose class defines `gradients`, `losses`
        and `draw` in numba's subset (CompiledProblem)."""

    @functools.cached_property
    def _twin(self) -> CompiledProblem:
        return self.twin()

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return drawn_users(twin_draw(type(self._twin)), (self._twin,), rng, (self.data_dim, count))

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return twin_gradients(self._twin, theta, data, out)

    def _losses(self, theta: np.ndarray) -> tuple[float, float]:
        """(excess, population) of θ, the twin's `losses`."""
        released = _floats(theta)
        return compiled_function(type(self._twin).losses)(self._twin, released, np.empty(released.size))

    @functools.cached_property
    def _twin_measures(self) -> bool:
        """Whether the twin's losses are this class's (no method they restate overridden)."""
        return keeps_twin(self, "twin", self.losses_restate)

    def population_loss(self, theta: np.ndarray) -> float:
        return self._losses(theta)[1] if self._twin_measures else super().population_loss(theta)

    def excess_loss(self, theta: np.ndarray) -> float:
        return self._losses(theta)[0] if self._twin_measures else super().excess_loss(theta)

    @functools.cached_property
    def _twin_measures_both(self) -> bool:
        """Whether both losses are the twin's (neither overridden below Twinned)."""
        return self._twin_measures and keeps_twin(self, "twin", ("excess_loss", "population_loss"))

    def excess_and_population_loss(self, theta: np.ndarray) -> tuple[float, float]:
        return self._losses(theta) if self._twin_measures_both else super().excess_and_population_loss(theta)

    def compiled_problem(self) -> CompiledProblem | None:
        kept = keeps_twin(self, "twin", (*TWINNED, *self.twin_reproduces))
        return self._twin if kept else None
