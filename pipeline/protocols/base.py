"""The contract every protocol implements, the round plan it is called with,
and the types the engine moves between shards and the analyzer
(shared/DESIGN.md §2, "Extension contracts").

A protocol is one local randomizer + shuffler + analyzer family. The engine
drives it through this class only: it never imports a particular protocol
module, and the runner's pairing rules read the capabilities declared here.

What the engine guarantees a protocol:
  - `encode_block` sees one block of users at a time, with a generator keyed
    by (seed, round, block): the same block gets the same stream whatever the
    number of shards or the backend (valid during the call only: the engine
    re-keys the same generator for the next block);
  - only the merged total of a call reaches the analyzer (`finish`, `decode`);
    raw inputs and per-user values never leave the shard (DESIGN §3);
  - the optimizer sees only `decode`'s estimate divided by `released_count`.

What a protocol must guarantee:
  - partials are frozen dataclasses whose every field adds exactly (Python
    ints, integer numpy arrays): `merge` adds them field by field, so totals
    are bit-identical for any sharding and any order;
  - `plan` is a pure function of (round plan, d, accounting, options), and
    `event` states, for the ledger, everything the call spent;
  - the released statistic and the event agree: the ledger must never report
    less than was spent.
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import operator
import pickle
from typing import Any, ClassVar, Iterable

import numpy as np

from pipeline.options import Option

GRADIENTS = "gradients"  # users send ∇ℓ(θ, x) at the queried θ
DATA = "data"  # users send their raw points (mean estimation)

PRIVACY_MODELS = ("shuffle", "central", "local", "none")
REAL = "real"  # any vector in the norm ball
BINARY = "binary"  # vectors in {0, 1}^d

# What an optimizer may require of its protocol (Optimizer.requires), and what protocols declare.
FIXED_NOISE = "fixed_noise"  # plan() honours RoundPlan.noise_std: the optimizer fixes the noise
CENTRAL_GAUSSIAN_NOISE = "central_gaussian_noise"  # a curator adds N(0, σ²I) to the exact total
GAUSSIAN_SUM = "gaussian_sum"  # the released sum is the exact sum plus Gaussian noise (σ ≥ 0)
NOISY_MAX = "noisy_max"  # the curator releases report-noisy-max selections (RoundPlan.noisy_max)
CAPABILITIES = (FIXED_NOISE, CENTRAL_GAUSSIAN_NOISE, GAUSSIAN_SUM, NOISY_MAX)


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """One round as a protocol call sees it: its population [first_user,
    stop_user), who of them answer (all, or a fresh sample), the budget and the
    input kind. Built by the optimizer's schedule, before any data is read.

    Attributes:
      round: the round's index.
      first_user, stop_user: the population.
      epsilon, delta: the call's budget.
      norm_bound: Δ₂ of the inputs (the randomizer clips to it).
      inputs: GRADIENTS or DATA.
      folds: how many calls share this budget by composition.
      sampling: "all", "uniform" (sample_size of the population) or "poisson" (rate).
      sample_size, rate: the sampling's parameter.
      noise_std: > 0 when the optimizer fixes the noise (FIXED_NOISE).
      noisy_max: the report-noisy-max selections the round feeds (NOISY_MAX).
      honest_fraction: robust mode's γ (supports_robust).
      smoothing: > 0 when users send the Moreau envelope's gradient with this β.
      records_per_round: s, how many of each answering user's records it uses (0: all of them).
      per_record: record-level privacy: each used record sends its own message (seed 001
        Alg. 4.3.1's s messages per client); False: the user sends one input, the mean of
        its used records' (user-level privacy, or one record each).
      records_min: m, the records every user is guaranteed to hold (public; the
        record-level accountant's sampling rate s/m).
    """

    round: int
    first_user: int
    stop_user: int
    epsilon: float
    delta: float
    norm_bound: float
    inputs: str
    folds: int = 1
    sampling: str = "all"
    sample_size: int = 0
    rate: float = 0.0
    noise_std: float = 0.0
    noisy_max: tuple = ()
    honest_fraction: float = 1.0
    smoothing: float = 0.0
    records_per_round: int = 0
    per_record: bool = False
    records_min: int = 1

    @property
    def messages_per_user(self) -> int:
        """Messages each answering user is sure to send: one, or at record level min(s, m)."""
        return min(self.records_per_round, self.records_min) if self.per_record else 1

    @property
    def population(self) -> int:
        """The users the round may ask."""
        return self.stop_user - self.first_user

    @property
    def users(self) -> int:
        """The users the call is planned for: the sample size when sampled
        uniformly, else the population (a Poisson sample's size is random)."""
        return self.sample_size if self.sampling == "uniform" else self.population


class PlanError(ValueError):
    """A call that cannot be planned, blamed on the config field that would fix it.

    Args:
      field: the dotted config field, e.g. "problem.radius".
      rule: what is wrong and what to do.
    """

    def __init__(self, field: str, rule: str):
        self.field = field
        super().__init__(rule)


# The round plan's fields that make a call's budget (not which round, not which users).
_BUDGET_FIELDS = tuple(field.name for field in dataclasses.fields(RoundPlan)
                       if field.name not in ("round", "first_user", "stop_user"))


def _budget(round_plan: RoundPlan) -> tuple:
    """The round plan as a call's budget: its population as a count and its budget fields
    (a tuple, cheap enough for every round)."""
    return (round_plan.population, *[getattr(round_plan, name) for name in _BUDGET_FIELDS])


def add_partials(partials: Iterable[Any]) -> Any:
    """Adds partial statistics field by field (exact integers: any order, same total).

    Args:
      partials: at least one partial, all of one frozen dataclass type.

    Returns:
      Their total.
    """
    partials = list(partials)
    first = partials[0]
    if len(partials) == 1:  # a round inside one block (most sequential rounds): nothing to add
        return first
    return dataclasses.replace(first, **{field.name: functools.reduce(operator.add, [getattr(p, field.name)
                                                                                    for p in partials])
                                         for field in dataclasses.fields(first)})


class Protocol(abc.ABC):
    """A shuffle (or central, local, non-private) protocol as the engine drives it.

    A call goes: plan (driver and shards, from the round plan) → encode_block
    (each shard, block by block) → merge (shards, exact) → finish (the
    analyzer's statistic; central noise here) → decode (the estimated sum).

    Class attributes (the declared capabilities the runner's pairing rules read):
      name: the short name (`privacy.protocol`).
      model: the privacy model, one of PRIVACY_MODELS.
      options: the options it takes (config fields privacy.<name>).
      capabilities: what optimizers may require (see CAPABILITIES).
      data_kinds: the kinds of input vectors it can encode (REAL, BINARY).
      supports_sampling: its events account sampled rounds (uniform, Poisson).
      supports_literal: encode_messages / count_messages materialize every message.
      supports_robust: it plans robust mode's dropouts (RoundPlan.honest_fraction < 1).
      supports_audit: `python -m pipeline audit` can attack its calls (`audit_pair`,
        `audit_statistic`); when False, `audit_refusal` says why, and the audit prints it.
      supports_records: its events account record-level privacy when users hold several
        records (RoundPlan.per_record: seed 001's two-level sampling, Lemma 4.3.1).

    Args:
      accounting: "paper" or "tight", the ledger mode its noise is calibrated for.
      **options: the declared options' values.
    """

    name: ClassVar[str]
    model: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    capabilities: ClassVar[frozenset[str]] = frozenset()
    data_kinds: ClassVar[frozenset[str]] = frozenset({REAL})
    supports_sampling: ClassVar[bool] = False
    supports_literal: ClassVar[bool] = False
    supports_robust: ClassVar[bool] = False
    supports_audit: ClassVar[bool] = True
    audit_refusal: ClassVar[str] = ""
    supports_records: ClassVar[bool] = False

    def __init__(self, accounting: str = "paper"):
        self.accounting = accounting

    @abc.abstractmethod
    def plan(self, round_plan: RoundPlan, dim: int) -> Any:
        """The parameters of one round's call (noise calibrated to its budget).

        Args:
          round_plan: the round.
          dim: d.

        Returns:
          The call's parameters: a frozen, picklable value.

        Raises:
          PlanError: the call cannot be planned, naming the config field to change;
          ValueError: the budget cannot be met (blamed on privacy.accounting).
        """

    def planned(self, round_plan: RoundPlan, dim: int) -> Any:
        """`plan`, remembered per budget: the parameters the runner planned on the driver
        (`remember`) travel with the protocol to the shards, so a shard never repeats a
        calibration (seconds for tight accounting) that the driver has done.

        The memo's key is the round plan without its index and with its population as a
        count; `remember` checks that the parameters do not depend on more (a plug-in
        whose plan reads the round index or the user ids is planned afresh each round).
        """
        memo = self.__dict__.get("_plans", {})
        if memo is None:
            return self.plan(round_plan, dim)
        key = (_budget(round_plan), dim)
        if key not in memo:
            memo[key] = self.plan(round_plan, dim)
            self.__dict__["_plans"] = memo
        return memo[key]

    def remember(self, round_plan: RoundPlan, dim: int, params: Any) -> None:
        """Keeps a round's planned parameters for `planned` (called by the runner for every round).

        Args:
          round_plan: the round.
          dim: d.
          params: what `plan` returned for it.
        """
        memo = self.__dict__.setdefault("_plans", {})
        if memo is None:
            return
        known = memo.setdefault((_budget(round_plan), dim), params)
        if known is not params and pickle.dumps(known) != pickle.dumps(params):
            self.__dict__["_plans"] = None  # this protocol's plan depends on the round itself: never remembered

    @abc.abstractmethod
    def event(self, params: Any, block_size: int) -> Any:
        """The privacy event of one call, for the ledger.

        Args:
          params: the call's parameters.
          block_size: users per engine block (may decide a sampler it records).

        Returns:
          A dp_accounting DpEvent that an accountant of pipeline.accounting supports.
        """

    @abc.abstractmethod
    def encode_block(self, params: Any, chunks: Iterable[np.ndarray], rng: np.random.Generator,
                     work: Any = None) -> Any:
        """One block of users' share of the call's statistic.

        Args:
          params: the call.
          chunks: the block's inputs, (d, users) arrays, each valid only until
            the next is drawn; the randomizer clips them to its bound.
          rng: the generator keyed by (seed, round, block), valid during this call only.
          work: this shard's `workspace`, reused across chunks.

        Returns:
          The block's partial (see the module docstring: fields add exactly).
        """

    @abc.abstractmethod
    def decode(self, params: Any, statistic: Any) -> np.ndarray:
        """The analyzer: the estimated sum of the call's inputs.

        Args:
          params: the call.
          statistic: `finish`'s output.

        Returns:
          float64 array of shape (d,).
        """

    @abc.abstractmethod
    def sum_mse(self, params: Any) -> float:
        """E‖estimated sum − true sum‖² of a call at the worst input (calibrated optimizers use it)."""

    def merge(self, partials: Iterable[Any]) -> Any:
        """Adds partials exactly (the default adds every field; see add_partials)."""
        return add_partials(partials)

    def finish(self, params: Any, total: Any, rng: np.random.Generator) -> Any:
        """The analyzer's statistic from the call's merged total.

        Args:
          params: the call.
          total: the merged partial of all its users.
          rng: the curator's generator, keyed by (seed, round) (central noise only), valid during this call only.

        Returns:
          The statistic; it has `users`, the count of users whose messages arrived.
        """
        return total

    def released_count(self, params: Any, statistic: Any) -> float:
        """What the estimated sum is divided by to estimate the mean (0: nobody answered)."""
        return statistic.users

    def mean_mse(self, users: int, dim: int, epsilon: float, delta: float, norm_bound: float,
                 folds: int = 1, inputs: str = GRADIENTS) -> float:
        """E‖estimated mean − mean‖² of one unsampled call of `users` users (calibrated parameters);
        `inputs` is what the users send (GRADIENTS, or DATA: some protocols encode data only)."""
        plan = RoundPlan(0, 0, users, epsilon, delta, norm_bound, inputs, folds)
        return self.sum_mse(self.plan(plan, dim)) / users**2

    def workspace(self, users: int, dim: int) -> Any:
        """Buffers a shard reuses across chunks of at most `users` users (None: none needed)."""
        return None

    def plans_per_budget(self) -> bool:
        """Whether this protocol's plan depends on the round's budget alone (Protocol.planned's
        key), so that one round plans a whole group of equal rounds. False unless a class says
        so: a plug-in may read the round or its users."""
        return False

    def fused_encoding(self, params: Any) -> tuple | None:
        """A call's compiled twin (pipeline.engine.fused; for fully interactive rounds,
        pipeline.engine.fused_interactive), or None: the engine runs the call in Python. P_vec in
        exact mode (cjmp.FusedEncoding), the sum protocols `none`, `central_gaussian`,
        `shuffle_gaussian` and `local_l2` (sums.FusedSum), and Girgis's linf, l2 and l1
        randomizers (girgis.GirgisEncoding) have one: a NamedTuple of the call's constants
        whose class defines, in numba's subset (the kernels call them by its type):
          work(self, dim, chunk) → the arrays the others use (a round's accumulator among them);
          encode(self, work, gradients, norms, dim, users, state): a chunk of users' reports
            ((coordinate, user) order, their norms; `norms` may be overwritten), drawing from
            the block's stream with pipeline.draws;
          finish_block(self, work, users, state) → bool: a block's last step (P_vec's noise bits,
            a sum's fixed point), False if it cannot (an overflow);
          analyze(self, work, batch, state, estimate) → bool: the round's estimated sum, the
            accumulator cleared (`state`: the round's noise stream);
          counts(self, work), optional: a block's accumulator, for fully interactive rounds.
        The built-ins' encode_block runs the same `encode` (and finish_block) compiled alone: one
        definition. A plug-in that returns one promises that these reproduce its encode_block,
        finish, decode and released_count bit for bit."""
        return None

    def check_call(self, params: Any, literal: bool) -> None:
        """Refuses a planned call the engine cannot run (a sampler's limit, too many literal messages).

        Raises:
          PlanError: naming the config field to change.
        """

    def audit_pair(self, round_plan: RoundPlan, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """The worst-case neighbouring inputs the audit attacks a call with (supports_audit).

        The default is the worst case of a sum protocol: user 0 at −Δ₂·e₁ against +Δ₂·e₁, the
        largest change one user can make, all on one coordinate, and every other user at −Δ₂·e₁
        too, where a randomizer's rounding of the others is deterministic (P_vec, the Girgis
        bits). Under Poisson sampling the others sit at 0 instead: their number is random and
        not released, so anywhere else their count's spread would hide user 0 in the sum.
        Binary inputs: every user at 0 against user 0 at e₁. A protocol whose worst case is
        elsewhere overrides this, and `audit_statistic` with it.

        Args:
          round_plan: the audited round (its population, Δ₂, input kind).
          dim: d.

        Returns:
          (base, moved): float64 arrays of shape (d, population) that differ in column 0 only.
        """
        binary = BINARY in self.data_kinds and REAL not in self.data_kinds
        low, high = (0.0, 1.0) if binary else (-round_plan.norm_bound, round_plan.norm_bound)
        base = np.zeros((dim, round_plan.population))
        base[0, :] = 0.0 if round_plan.sampling == "poisson" else low
        base[0, 0] = low
        moved = base.copy()
        moved[0, 0] = high
        return base, moved

    def audit_statistic(self, params: Any, statistic: Any) -> float:
        """The audit's test statistic of one call's released statistic: larger under `moved`.

        The default is the analyzer's estimate of the coordinate the pair differs in. Where the
        release is a shift family with a monotone likelihood ratio in that coordinate and
        independent of the others (P_vec's counts, Gaussian and Skellam sums), it is a monotone
        function of the likelihood ratio of the two neighbours, so thresholding it is the most
        powerful test (Neyman–Pearson); elsewhere it is a valid, possibly weaker, statistic.

        Args:
          params: the call.
          statistic: `finish`'s (or `count_messages`') output for one run of the call.

        Returns:
          A float.
        """
        return float(self.decode(params, statistic)[0])

    def encode_messages(self, params: Any, vectors: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Literal mode: every message of some users, as (labels, bits) (supports_literal only)."""
        raise NotImplementedError(f"{self.name} does not materialize messages")

    def count_messages(self, params: Any, labels: np.ndarray, bits: np.ndarray) -> Any:
        """Literal mode: the analyzer's statistic from the shuffled messages (supports_literal only)."""
        raise NotImplementedError(f"{self.name} does not materialize messages")
