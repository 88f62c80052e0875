"""P_GD: fully interactive noisy projected gradient descent (seed 000, Algorithm 5, Theorem 4.9)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from pipeline.accounting.compositions import FULLY_INTERACTIVE
from pipeline.accounting.paper import full_gd_round_budget, split_below
from pipeline.optimizers import theory
from pipeline.optimizers.averaged import AveragedProjectedDescent
from pipeline.optimizers.base import RoundGroup, Schedule, protocol_mean_mse
from pipeline.problems.base import Problem
from pipeline.problems.smoothed import MoreauSmoothed, require_prox


@dataclasses.dataclass(frozen=True)
class FullGD(AveragedProjectedDescent):
    """Every round asks all n users through P_vec at (ε0, δ0); T rounds compose
    to (ε, δ) by advanced composition (Lemma B.6).

    Algorithm 5 prints a loop t = 1..T that reads the undefined θ_1 and
    outputs the average of θ_0..θ_{T−1}; we loop t = 0..T−1 (notes T2).

    Attributes:
      problem: the SCO problem (0 ∈ Θ).
      n_users: n.
      epsilon, delta: the run's target.
      rounds: T.
      step_size: η.
      accounting: "paper" splits (ε, δ) into per-round (ε0, δ0) by Lemma B.6;
        "tight" calibrates every call so that the T calls' RDP curves, added,
        meet (ε, δ) (pipeline.accounting.pvec_tight).
      gradient_noise: σ², the planned calls' squared error on the mean gradient.
      distance: R, the bound on the root mean square of ‖θ_0 − θ*‖ the step size is
        tuned for (a group of `full_phased`); None: the domain's diameter D.
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    rounds: int
    step_size: float
    accounting: str = "paper"
    gradient_noise: float = 0.0
    distance: float | None = None
    name: ClassVar[str] = "full_gd"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "step_size"})  # every user, every round

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None, distance: float | None = None) -> "FullGD":
        """Resolves Lemma B.6's parameters, honouring overrides.

        T = min(n, ⌊ε²n²/(d ln²(nd/δ))⌋) (at least 1); η = D/(L√T) in paper mode,
        and in calibrated mode η = D/(√T·√(L² + σ²)) with σ² the planned calls' noise on
        the mean gradient (the minimizer of Lemma B.4's D²/(2ηT) + η(L² + σ²)/2). The
        per-round budget always follows the T actually run, so an override of T keeps
        the run (ε, δ)-DP. `batch_size` does not apply (every user, every round).
        D is `distance` when given.
        """
        n, d = n_users, problem.dim
        if rounds is None:
            rounds = max(1, min(n, math.floor(epsilon**2 * n**2 / (d * math.log(n * d / delta) ** 2))))
        budget, folds = ((epsilon, delta), rounds) if accounting == "tight" else (
            full_gd_round_budget(epsilon, delta, rounds), 1)
        noise = protocol_mean_mse(protocol, accounting, n, d, *budget, problem.lipschitz, folds)
        if step_size is None:
            lipschitz_g = math.sqrt(problem.lipschitz**2 + noise) if parameters == "calibrated" else problem.lipschitz
            step_size = (problem.diameter if distance is None else distance) / (lipschitz_g * math.sqrt(rounds))
        return cls(problem, n_users, epsilon, delta, rounds, step_size, accounting, noise, distance)

    def excess_bound(self) -> float:
        """Lemma B.4 + Lemma B.5 (explicit): R²/(2ηT) + η(L² + σ²)/2 + L²Tη/n.

        B.4 holds against any fixed comparator, θ* included, and is linear in
        ‖θ_0 − θ*‖², so R may bound its root mean square; B.5 (uniform stability)
        needs a β-smooth loss and η ≤ 2/β.
        """
        reach = self.problem.diameter if self.distance is None else self.distance
        eta, rounds, lipschitz = self.step_size, self.rounds, self.problem.lipschitz
        return (reach**2 / (2 * eta * rounds) + eta * (lipschitz**2 + self.gradient_noise) / 2
                + lipschitz**2 * rounds * eta / self.n_users)

    def round_budget(self) -> tuple[float, float]:
        """(ε0, δ0) of every round in paper mode; the whole (ε, δ) in tight mode, shared by T calls."""
        if self.accounting == "tight":
            return self.epsilon, self.delta
        return full_gd_round_budget(self.epsilon, self.delta, self.rounds)

    def schedule(self) -> Schedule:
        epsilon0, delta0 = self.round_budget()
        folds = self.rounds if self.accounting == "tight" else 1
        group = RoundGroup(self.rounds, self.n_users, 0, 0, epsilon0, delta0, self.problem.lipschitz, folds)
        return Schedule(FULLY_INTERACTIVE, (group,), slack=split_below(self.delta, self.rounds + 1))

    def theory_rate(self) -> float:
        return theory.full_gd_rate(self.problem, self.n_users, self.epsilon, self.delta)

    def hyperparameters(self) -> dict[str, float | int]:
        if self.accounting == "tight":  # no per-round budget: the T calls are calibrated together
            return {"rounds": self.rounds, "step_size": self.step_size}
        epsilon0, delta0 = self.round_budget()
        return {"rounds": self.rounds, "step_size": self.step_size,
                "round_epsilon": epsilon0, "round_delta": delta0}


@dataclasses.dataclass(frozen=True)
class FullGDSmoothed(FullGD):
    """Theorem 4.9 (non-smooth convex): P_GD on the Moreau envelope ℓ_β, with
    β = (L/D)·min(√n, εn/(√d ln^{3/2}(nd/δ))); users send envelope gradients through
    P_vec with Δ₂ = 2L (pipeline.problems.smoothed), the excess loss is measured on ℓ.
    """

    name: ClassVar[str] = "full_gd_smoothed"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "step_size"})  # passed on to full_gd's

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None, distance: float | None = None) -> "FullGDSmoothed":
        """Smooths the problem with Theorem 4.9's β, then resolves Lemma B.6's parameters on it.

        Raises:
          ConfigError: the problem has no closed-form prox.
        """
        require_prox(problem, cls.name)
        n, d = n_users, problem.dim
        beta = problem.lipschitz / (problem.diameter if distance is None else distance) * min(
            math.sqrt(n), epsilon * n / (math.sqrt(d) * math.log(n * d / delta) ** 1.5))
        inner = FullGD.from_config(MoreauSmoothed(problem, beta), n_users, epsilon, delta, rounds, batch_size,
                                   step_size, accounting, parameters, protocol, distance)
        return cls(**{field.name: getattr(inner, field.name) for field in dataclasses.fields(FullGD)})

    def excess_bound(self) -> float:
        """Lemmas B.4 + B.5 on the envelope plus the smoothing gap L²/(2β) (Lemma 4.6)."""
        return super().excess_bound() + self.problem.unsmoothed.lipschitz**2 / (2 * self.problem.smoothness)
