"""P_AGD: sequentially interactive private AC-SA (seed 000, Algorithm 4, Theorem 4.3)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.errors import ConfigError
from pipeline.optimizers import theory
from pipeline.optimizers.base import (STATE_FUNCTIONS, CompiledUpdate, Optimizer, RoundGroup, Schedule, Staged,
                                      best_batch_size, protocol_mean_mse)
from pipeline.optimizers.transforms import Transform, chain
from pipeline.problems.base import Problem
from pipeline.problems.smoothed import MoreauSmoothed, require_prox

PAPER, CALIBRATED = "paper", "calibrated"
PARAMETER_MODES = (PAPER, CALIBRATED)


def acsa_bound(smoothness: float, distance: float, sigma: float, rounds: int) -> float:
    """Lemma 4.4 (Lan 2012, Thm 2) with its O-constant taken as 1: βR²/T² + Rσ/√T.

    The seed gives no constant (notes §4.3); calibrated mode minimizes this shape
    and the phased reduction sizes its next phase from it (notes §2.6's suggestion).
    """
    return smoothness * distance**2 / rounds**2 + distance * sigma / math.sqrt(rounds)


class AcsaState(NamedTuple):
    """θ_t, θ^ag_t and t (rounds start at t = 1)."""

    theta: np.ndarray
    theta_ag: np.ndarray
    t: int


def oracle_std(problem: Problem, batch_size: int, n_users: int, epsilon: float, delta: float,
               accounting: str, parameters: str, protocol=None) -> float:
    """σ, the noisy gradient's standard deviation: σ² = L²/B + (protocol MSE)/B².

    Paper mode takes the MSE as d L² ln²(d/δ)/ε² (proof of Theorem 4.3, O-constants
    dropped); calibrated mode takes the planned P_vec call's MSE bound (notes §4.2).
    """
    d, lipschitz = problem.dim, problem.lipschitz
    if parameters == PAPER:
        noise = d * lipschitz**2 * math.log(d / delta) ** 2 / (epsilon * batch_size) ** 2
    else:
        noise = protocol_mean_mse(protocol, accounting, batch_size, d, epsilon, delta, lipschitz)
    return math.sqrt(lipschitz**2 / batch_size + noise)


@dataclasses.dataclass(frozen=True)
class SeqAGD(Staged, Optimizer):
    """AC-SA (Lan 2012) on T disjoint batches of B users, each batch's gradient
    mean estimated by one P_vec call at the full (ε, δ) (parallel composition).

    Round t (1-based): α_t = 2/(t+2), θ^md_t = α_t θ_t + (1 − α_t) θ^ag_t is the
    query; θ_{t+1} = π_Θ(θ_t − ḡ_t/L_t); θ^ag_{t+1} = α_t θ_{t+1} + (1 − α_t) θ^ag_t;
    the output is θ^ag_{T+1} (Theorem 4.3 prints θ^ag_{t+1}: notes T16).
    L_t = ((T+2)^{3/2} σ/D + β)/(t+1) as printed (paper mode). Lan's Corollary 1
    has step sizes (t+1)/2·min(1/(4β), √6 D/(σ(T+2)^{3/2})), which the paper's
    O-form drops; calibrated mode uses them: L_t = 2·max(4β, σ(T+2)^{3/2}/(√6 D))/(t+1).

    Attributes:
      problem: a β-smooth problem.
      n_users: n.
      epsilon, delta: the run's target, spent by every batch.
      batch_size: B.
      rounds: T ≤ n/B.
      sigma: σ of the noisy gradient (oracle_std).
      accounting: "paper" or "tight" (how P_vec is calibrated).
      parameters: "paper" (the theorem's formulas) or "calibrated" (exact protocol variance, Lan's constants).
      distance: R, the bound on ‖θ_1 − θ*‖ the parameters are tuned for (a phase of
        `seq_phased`); None: the domain's diameter D. The projection is always onto Θ.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    batch_size: int
    rounds: int
    sigma: float
    accounting: str = "paper"
    parameters: str = PAPER
    distance: float | None = None
    name: ClassVar[str] = "seq_agd"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size"})  # AC-SA's steps follow L_t

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = PAPER, protocol=None, distance: float | None = None) -> "SeqAGD":
        """Resolves Theorem 4.3's parameters, honouring overrides.

        Paper mode: B = n^{3/5} d^{1/5} L^{2/5} ln^{2/5}(d/δ)/(ε^{2/5} β^{2/5} D^{2/5}),
        rounded up and clamped to [1, n] (notes T17). Calibrated mode: the B that
        minimizes Lemma 4.4's βD²/T² + Dσ(B)/√T with T = ⌊n/B⌋ and the protocol's
        exact σ(B). T = ⌊n/B⌋. D is `distance` when given.

        Raises:
          ConfigError: a non-smooth problem, a step size (AC-SA's follow L_t), or rounds × batch_size > n.
        """
        if step_size is not None:
            raise ConfigError("optimizer.step_size", step_size, f"does not apply to optimizer {cls.name} (L_t sets it)")
        if not math.isfinite(problem.smoothness):
            raise ConfigError("optimizer.name", cls.name, f"needs a smooth loss (Theorem 4.3); {problem.name} is not")
        d, lipschitz, beta = problem.dim, problem.lipschitz, problem.smoothness
        reach = problem.diameter if distance is None else distance
        if batch_size is None:
            if parameters == PAPER:
                batch_size = math.ceil(n_users**0.6 * d**0.2 * (lipschitz * math.log(d / delta)) ** 0.4
                                       / (epsilon * beta * reach) ** 0.4)
            else:
                def bound(size: int) -> float:
                    sigma = oracle_std(problem, size, n_users, epsilon, delta, accounting, parameters, protocol)
                    return acsa_bound(beta, reach, sigma, n_users // size)
                batch_size = best_batch_size(n_users, bound)
            batch_size = min(max(1, batch_size), n_users)
        elif batch_size > n_users:
            raise ConfigError("optimizer.batch_size", batch_size, f"must be ≤ n_users = {n_users}")
        if rounds is None:
            rounds = n_users // batch_size
        elif rounds * batch_size > n_users:
            raise ConfigError("optimizer.rounds", rounds,
                              f"rounds × batch_size ({batch_size}) must be ≤ n_users = {n_users}: "
                              "each user answers once (seed 000, Theorem 4.3)")
        sigma = oracle_std(problem, batch_size, n_users, epsilon, delta, accounting, parameters, protocol)
        return cls(problem, n_users, epsilon, delta, batch_size, rounds, sigma, accounting, parameters, distance)

    @property
    def reach(self) -> float:
        """R, the distance the parameters are tuned for: `distance`, else D."""
        return self.problem.diameter if self.distance is None else self.distance

    def excess_bound(self) -> float:
        """Lemma 4.4 at its printed order with the constant taken as 1: βR²/T² + Rσ/√T."""
        return acsa_bound(self.problem.smoothness, self.reach, self.sigma, self.rounds)

    def schedule(self) -> Schedule:
        group = RoundGroup(self.rounds, self.batch_size, 0, self.batch_size,
                           self.epsilon, self.delta, self.problem.lipschitz)
        return Schedule(SEQUENTIAL, (group,))

    @property
    def curvature_scale(self) -> float:
        """L_t·(t + 1), the same every round: (T + 2)^{3/2}σ/R + β as printed (paper mode),
        2·max(4β, σ(T + 2)^{3/2}/(√6 R)) (calibrated mode, Lan's Corollary 1)."""
        growth = (self.rounds + 2) ** 1.5 * self.sigma / self.reach
        if self.parameters == PAPER:
            return growth + self.problem.smoothness
        return 2.0 * max(4.0 * self.problem.smoothness, growth / math.sqrt(6.0))

    def curvature(self, t: int) -> float:
        """L_t of round t (1-based): the inverse step size."""
        return self.curvature_scale / (t + 1)

    def init(self) -> AcsaState:
        zero = np.zeros(self.problem.dim)
        return AcsaState(zero, zero.copy(), 1)

    def output(self, state: AcsaState) -> np.ndarray:
        return state.theta_ag

    reproduces: ClassVar[tuple[str, ...]] = (*STATE_FUNCTIONS, "curvature", "curvature_scale")

    def stages(self) -> CompiledUpdate:
        """AC-SA's round (Lan 2012; seed 000 Algorithm 4): the transforms below, L_t = curvature_scale/(t + 1)
        (a subclass that changes `curvature` changes `stages` with it)."""
        return chain(acsa_step(self.curvature_scale), acsa_aggregate())

    def theory_rate(self) -> float:
        return theory.seq_agd_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        return {"batch_size": self.batch_size, "rounds": self.rounds, "sigma": self.sigma}


# AC-SA's transforms (pipeline.optimizers.transforms), in numba's subset: α_t = 2/(t + 2) and
# L_t = constants[0]/(t + 1) (SeqAGD.curvature); rows[0] = θ^ag.

def acsa_step(curvature_scale: float) -> Transform:
    """direction ← −direction/L_t: the step θ − ḡ/L_t (Lan 2012's AC-SA; seed 000, Algorithm 4)."""
    return Transform((curvature_scale,), 0, update=inverse_curvature_update)


def acsa_aggregate() -> Transform:
    """AC-SA's query αθ + (1 − α)θ^ag and release θ^ag ← απ(step) + (1 − α)θ^ag; one row, θ^ag."""
    return Transform((), 1, query=acsa_query, release=acsa_release)


def inverse_curvature_update(constants, rows, steps, theta, direction, advance):
    """direction ← −direction/L_t."""
    for coordinate in range(theta.size):
        direction[coordinate] = -(direction[coordinate] / (constants[0] / (steps[0] + 1)))


def acsa_query(constants, rows, steps, theta, out):
    """αθ + (1 − α)θ^ag (SeqAGD.query)."""
    alpha = 2.0 / (steps[0] + 2)
    for coordinate in range(theta.size):
        out[coordinate] = alpha * theta[coordinate] + (1.0 - alpha) * rows[0, coordinate]


def acsa_release(constants, rows, steps, theta, projected, released):
    """Releases θ^ag ← απ(step) + (1 − α)θ^ag and keeps it; False, θ^ag untouched, if not finite."""
    alpha = 2.0 / (steps[0] + 2)
    for coordinate in range(theta.size):
        released[coordinate] = alpha * projected[coordinate] + (1.0 - alpha) * rows[0, coordinate]
        if not np.isfinite(released[coordinate]):
            return False
    for coordinate in range(theta.size):
        rows[0, coordinate] = released[coordinate]
    return True


def smoothing_parameter(problem: Problem, n_users: int, epsilon: float, delta: float, distance: float) -> float:
    """β = ε^{2/3} n^{2/3} L/(d^{1/3} D ln^{2/3}(d/δ)), the proof of Theorem 4.7's choice (D = `distance`)."""
    d = problem.dim
    return (epsilon * n_users) ** (2 / 3) * problem.lipschitz / (
        d ** (1 / 3) * distance * math.log(d / delta) ** (2 / 3))


@dataclasses.dataclass(frozen=True)
class SeqAGDSmoothed(SeqAGD):
    """Theorem 4.7: P_AGD on the Moreau envelope ℓ_β of a non-smooth convex loss.

    Each user sends its envelope gradient β(θ − prox_{ℓ/β}(θ)), through P_vec with
    Δ₂ = 2L (pipeline.problems.smoothed). The run's problem is the envelope; its
    excess loss is measured on ℓ itself, which exceeds ℓ_β by at most L²/(2β).
    Paper mode takes Theorem 4.7's β; calibrated mode takes the β that minimizes
    the calibrated AC-SA bound plus L²/(2β).
    """

    name: ClassVar[str] = "seq_agd_smoothed"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size"})  # passed on to seq_agd's

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = PAPER, protocol=None, distance: float | None = None) -> "SeqAGDSmoothed":
        """Smooths the problem, then resolves Theorem 4.3's parameters on the envelope.

        Raises:
          ConfigError: the problem has no closed-form prox, or the overrides break Theorem 4.3's rules.
        """
        require_prox(problem, cls.name)
        paper_beta = smoothing_parameter(problem, n_users, epsilon, delta,
                                         problem.diameter if distance is None else distance)
        betas = [paper_beta] if parameters == PAPER else list(paper_beta * np.geomspace(1e-3, 1e3, 25))

        def build(beta: float) -> "SeqAGDSmoothed":
            inner = SeqAGD.from_config(MoreauSmoothed(problem, float(beta)), n_users, epsilon, delta, rounds,
                                       batch_size, step_size, accounting, parameters, protocol, distance)
            return cls(**{field.name: getattr(inner, field.name) for field in dataclasses.fields(SeqAGD)})

        return min((build(beta) for beta in betas), key=cls.excess_bound)

    def excess_bound(self) -> float:
        """Lemma 4.4 on the envelope (constant 1) plus the smoothing gap L²/(2β) (Lemma 4.6)."""
        return super().excess_bound() + self.problem.unsmoothed.lipschitz**2 / (2 * self.problem.smoothness)

    def theory_rate(self) -> float:
        return theory.seq_agd_smoothed_rate(self.problem, self.n_users, self.epsilon, self.delta)
