"""Privacy events: immutable records of what a mechanism call did, in the
style of `dp_accounting.DpEvent` (accountants compute from them separately)."""
from __future__ import annotations

import attr
from dp_accounting import dp_event


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PvecDpEvent(dp_event.DpEvent):
    """One call of P_vec (seed 000, Algorithm 2) with the Theorem 3.2 parameters.

    Attributes:
      users: n, the users in the call.
      dim: d.
      epsilon, delta: the call's target (ε, δ).
      norm_bound: Δ₂.
      g, b_noise, p: the P_1D parameters of every coordinate.
      noise_sampler: "binomial" (exact) or "normal_approximation".
      calibration: the rule that chose g, b_noise, p: "paper" or "tight".
      honest_users: robust mode: how many of the users send (None: all).
    """

    users: int
    dim: int
    epsilon: float
    delta: float
    norm_bound: float
    g: int
    b_noise: int
    p: float
    noise_sampler: str
    calibration: str = "paper"
    honest_users: int | None = None


@attr.s(frozen=True, slots=True, auto_attribs=True)
class GaussianSumDpEvent(dp_event.DpEvent):
    """The Gaussian mechanism on the exact sum of a round's inputs (trusted curator).

    Attributes:
      users: the users whose inputs are summed (all of the round's users, or
        the k sampled from `population` when `population` > `users`).
      population: the users the round samples from (= users when not sampled).
      dim: d.
      sensitivity: Δ₂ of the sum under replacing one user (2·norm bound).
      sigma: the standard deviation of the noise added to each coordinate of the sum.
    """

    users: int
    population: int
    dim: int
    sensitivity: float
    sigma: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PoissonGaussianDpEvent(dp_event.DpEvent):
    """The Gaussian mechanism on the sum of a Poisson sample (DP-SGD, Abadi et al. 2016).

    Attributes:
      population: n, each of whom joins independently with probability `rate`.
      rate: q.
      dim: d.
      sensitivity: Δ₂ of the sum under replacing one user (2·norm bound).
      sigma: the noise standard deviation per coordinate of the sum.
    """

    population: int
    rate: float
    dim: int
    sensitivity: float
    sigma: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffleGaussianDpEvent(dp_event.DpEvent):
    """Every user adds N(0, σ²I) to its input and a shuffler permutes the reports (seed 004, Def. 4).

    Attributes:
      users: the reports shuffled together (uniform sample), or the population (Poisson).
      population: the users sampled from (= users when not sampled).
      dim: d.
      sensitivity: Δ₂ between a user's input and its replacement (2·norm bound).
      sigma: each user's noise standard deviation per coordinate.
      rate: the Poisson rate of self-sampled rounds (0: not Poisson).
    """

    users: int
    population: int
    dim: int
    sensitivity: float
    sigma: float
    rate: float = 0.0


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffleLdpDpEvent(dp_event.DpEvent):
    """Every user sends one ε0-LDP message per stream; each stream is shuffled (seed 001, §3.2).

    Attributes:
      users: the users of the round (uniform sample) or the population (Poisson sample).
      population: the users sampled from.
      sampling: "all", "uniform" (users of population, without replacement) or
        "poisson" (each of population joins with probability `rate`).
      rate: the Poisson rate (0 otherwise).
      stream_epsilons: the actual local ε0 of each stream's message (notes trap 2).
      randomizer: which local randomizer (e.g. "girgis_l2").
      bits_per_user: message bits one user sends.
      record_messages: record-level privacy with several records per user: each answering
        user sends this many of its records (s), one message each; 0: one message per user
        (the neighbours differ in one user's input).
      records_min: m, the records every user is guaranteed to hold (record level).
    """

    users: int
    population: int
    sampling: str
    rate: float
    stream_epsilons: tuple
    randomizer: str
    bits_per_user: int
    record_messages: int = 0
    records_min: int = 1

    @property
    def messages_per_user(self) -> int:
        """Messages each answering user is sure to send per stream: 1, or min(s, m) at record level."""
        return min(self.record_messages, self.records_min) if self.record_messages else 1


@attr.s(frozen=True, slots=True, auto_attribs=True)
class LocalDpEvent(dp_event.DpEvent):
    """Every user releases one ε0-LDP report, unshuffled (local model).

    Attributes:
      users: the users of the round.
      epsilon0: the randomizer's pure local ε0.
      randomizer: which local randomizer.
    """

    users: int
    epsilon0: float
    randomizer: str


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ExactSumDpEvent(dp_event.DpEvent):
    """A round that releases an exact statistic of its users: no privacy.

    Attributes:
      users: the users of the round.
      population: the users it sampled them from.
    """

    users: int
    population: int


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PnsgdDpEvent(dp_event.DpEvent):
    """A whole pass of shuffled projected noisy SGD releasing its final iterate only (seed 002, Thm 2).

    Attributes:
      users: n, the steps of the pass (one user each).
      sigma: the Gaussian noise added to each gradient (before the step size).
      lipschitz, smoothness, strong_convexity: L, β, ρ of ℓ(·, x).
      step_size: η.
      diameter: D_K of the domain.
    """

    users: int
    sigma: float
    lipschitz: float
    smoothness: float
    strong_convexity: float
    step_size: float
    diameter: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class NoisyMaxDpEvent(dp_event.DpEvent):
    """A node of seed 003's Frank–Wolfe tree: its users' gradients reach `leaves`
    report-noisy-max selections, each with Laplace(scale) noise on the scores.

    Attributes:
      users: the node's users (each user is in one node only).
      leaves: how many noisy selections the node's statistic reaches.
      scale: λ, the Laplace scale of every score's noise.
      score_sensitivity: Δ, how much one user moves any score ⟨c_i, v⟩ of those selections.
      candidates: m, the vertices selected among.
    """

    users: int
    leaves: int
    scale: float
    score_sensitivity: float
    candidates: int
