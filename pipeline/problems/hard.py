"""Lower-bound instances (issue #18): the DP-SCO constructions behind Table 1's
rows, with exact population loss and optimum and a certified lower bound on the
excess loss of any (ε, δ)-DP algorithm.

Both instances share one data law, indexed by a vertex v ∈ {±1}^d (the Assouad
construction of the DP-SCO lower bounds: Bassily–Smith–Thakurta 2014 §5 and
Bassily–Feldman–Talwar–Thakurta 2019 §4 for the convex and strongly convex rows
of seed 000's Table 1, which both interaction models share; made private by the
coupling of Acharya–Sun–Zhang 2021). With m the expected flipped users per
coordinate ("flips"), ρ ("mass") and q = m/n:

  each user: J uniform on {1…d}; with probability ρ the point is x = R·s·e_J,
  s = v_J with probability (1 + γ)/2 and −v_J otherwise, γ = q·d/ρ ≤ 1;
  otherwise x = 0.

So one user's masses at ±R·v_j·e_j are α = ρ(1+γ)/(2d), β = ρ(1−γ)/(2d), and
E x = R·q·v =: μ_v. Flipping v_j moves mass α − β = q (lower_bounds.py). The
default ρ = m·d/n (γ = 1: every non-zero point points along v) is the private
construction; ρ = 1 with m ≈ √n is Le Cam's sampling construction.

The bound is on the excess loss averaged over v uniform on {±1}^d (the audit
draws a vertex per seed): a single instance has no lower bound, since an
algorithm may guess it. With τ = lower_bounds.pair_error(n, α, β, ε, δ), a
lower bound on the mean of one coordinate pair's two testing errors:

Assouad's step (Yu 1997, Lemma 2; the DP version is Acharya–Sun–Zhang 2021,
Thm 3): if the excess loss satisfies E_v(θ) ≥ Σ_j w·1{θ_j v_j ≤ 0} for all θ
and v, then E_{v} E[E_v(θ̂)] ≥ Σ_j w·2^{−d} Σ_{v: v_j = 1}(P_v[θ̂_j ≤ 0] +
P_{v^(j)}[θ̂_j ≥ 0]) ≥ d·w·τ, since each bracket is the pair's two testing
errors of the test sign(θ̂_j) (a tie θ̂_j = 0 counts as an error under both:
the separation holds for it under both, so both events may include it).

That closed form (`closed_form_bound`) is loose by a constant: τ is a testing
bound and w charges only a wrong sign. Where the construction is the private
one (β = 0, the default; a `mass` with γ < 1 keeps the closed form),
`lower_bound` is the larger of it and linear-programming bounds
(pipeline/problems/minimax.py: the least Bayes risk of an (ε, δ)-DP algorithm on
one coordinate, over its output law on each count vector, certified by weak
duality and charged for its output grid): d one-coordinate quadratic problems for
lb_strongly_convex, the exact test of v for lb_convex at d = 1, and for d > 1
the larger of Assouad with the program's testing error and a Lagrangian step
from the quadratic program (HardConvex). `lower_bound_method` names the one used.
About 4.5–5.1× the closed form for lb_strongly_convex and 2.3–2.4× (d = 1),
3.8–4.2× (d = 4) for lb_convex at ε ∈ [0.05, 1], n = 2,000.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import numpy as np

from pipeline.errors import ConfigError
from pipeline.options import Option, integer, real
from pipeline.problems import lower_bounds, minimax
from pipeline.problems.base import Problem, ball_projection

MAX_VERTEX = 2**62 - 1
# Candidate m = n·q for the default: log-spaced; any m gives a valid bound, this only picks a large one.
_FLIP_GRID = np.geomspace(0.05, 1e7, 400)
_REFERENCE_USERS = 10**9
# Built-in optimizers that send raw data, not gradients (problems sit below optimizers: named, not imported).
_DATA_OPTIMIZERS = ("mean_estimation",)
CLOSED_FORM = "closed form (Assouad + pair_error)"


@dataclasses.dataclass(frozen=True)
class _HardInstance(Problem):
    """The shared data law and bound (module docstring); subclasses give the loss.

    Args:
      dim: d.
      radius: R (the domain {‖θ‖₂ ≤ R} and the data's norm).
      vertex: v by its bits (bit j set: v_j = −1), 0 ≤ vertex < 2^min(d, 62).
      flips: m, expected flipped users per coordinate (default: the m whose bound is largest).
      mass: ρ, the probability of a non-zero point (default m·d/n).
      users, epsilon, delta: the run's n, ε, δ (set by `for_run`; the bound depends on them).
    """

    dim: int
    radius: float
    vertex: int = 0
    flips: float | None = None
    mass: float | None = None
    users: int | None = None
    epsilon: float | None = None
    delta: float | None = None
    options: ClassVar[tuple[Option, ...]] = (
        Option("vertex", integer(0, MAX_VERTEX), "v ∈ {±1}^d by its bits (bit j set: v_j = −1)", 0),
        Option("flips", real(0.0, math.inf, True, True),
               "m: expected users per coordinate moved by one flip of v (default: the m of the largest bound)"),
        Option("mass", real(0.0, 1.0, True, False),
               "ρ: probability of a non-zero point (default m·d/n, the private construction; 1: Le Cam's)"),
    )

    # ----- the run's parameters -------------------------------------------------------------------
    def for_run(self, run) -> "_HardInstance":
        """The instance at the run's (n, ε, δ), after the construction's rules.

        Raises:
          ConfigError: a non-private protocol, an optimizer the instance does not
            apply to, a vertex outside {±1}^d, or n below the construction's range.
        """
        if run["privacy.model"] == "none":
            raise ConfigError("privacy.protocol", run["privacy.protocol"],
                              f"problem {self.name} certifies a lower bound for (ε, δ)-private runs only: "
                              "use a private protocol")
        self._check_optimizer(run)
        if self.dim < 63 and self.vertex >= 2**self.dim:
            raise ConfigError("problem.vertex", self.vertex, f"must be < 2^d = {2**self.dim} (a vertex of {{±1}}^d)")
        bound = dataclasses.replace(self, users=run["n_users"], epsilon=run["privacy.epsilon"],
                                    delta=run["privacy.delta"])
        needed = bound.flips_used * self.dim / (self.mass if self.mass is not None else 1.0)
        if run["n_users"] < needed:
            raise ConfigError("n_users", run["n_users"],
                              f"problem {self.name} needs n ≥ m·d/ρ = {needed:.6g} (γ = m·d/(nρ) is a probability ≤ 1)")
        return bound

    def _check_optimizer(self, run) -> None:
        """Refuses optimizers the instance does not apply to (none by default)."""

    @functools.cached_property
    def flips_used(self) -> float:
        """m: the given one, or the grid value with the largest certified bound."""
        if self.flips is not None:
            return self.flips
        self._require_run()
        # With ρ given, γ = m·d/(nρ) ≤ 1 caps m; otherwise ρ = m·d/n follows m, and n ≥ m·d is for_run's rule.
        cap = self.users * self.mass / self.dim if self.mass is not None else math.inf
        candidates = [m for m in _FLIP_GRID if m <= cap] or [cap]
        # Without ρ, m is chosen for n → ∞ (K ~ Poisson(m)), so it depends on (ε, δ) only and
        # n ≥ m·d is a range the construction has, not one it adapts to.
        chooser = self if self.mass is not None else dataclasses.replace(self, users=_REFERENCE_USERS)
        return max(candidates, key=lambda m: chooser._bound_at(m, checked=False) * chooser.users**2)

    def _require_run(self) -> None:
        if self.users is None or self.epsilon is None or self.delta is None:
            raise ValueError(f"{self.name} needs the run's n, ε and δ (users, epsilon, delta) first")

    def _masses(self, flips: float) -> tuple[float, float, float]:
        """(ρ, α, β) for m = flips."""
        q = flips / self.users
        rho = self.mass if self.mass is not None else q * self.dim
        gamma = q * self.dim / rho
        return rho, rho * (1 + gamma) / (2 * self.dim), rho * (1 - gamma) / (2 * self.dim)

    def _outside(self, flips: float) -> bool:
        """Whether m = flips leaves the construction's range: γ > 1 or ρ > 1."""
        rho, alpha, beta = self._masses(flips)
        return rho > 1.0 or (alpha - beta) * self.dim > rho * (1 + 1e-12)

    def _bound_at(self, flips: float, checked: bool = True) -> float:
        rho, alpha, beta = self._masses(flips)
        # Unchecked: the formula's value for m alone, used to choose the default m (ρ = m·d/n may exceed 1 there).
        if checked and self._outside(flips):
            return 0.0
        return self.per_coordinate_weight(flips / self.users) * self.dim * lower_bounds.pair_error(
            self.users, alpha, beta, self.epsilon, self.delta)

    def per_coordinate_weight(self, q: float) -> float:
        """w: E_v(θ) ≥ Σ_j w·1{θ_j v_j ≤ 0} (subclasses derive it)."""
        raise NotImplementedError

    @functools.cached_property
    def closed_form_bound(self) -> float:
        """The closed-form certified bound d·w·τ on E_v E[excess loss] of any (ε, δ)-DP algorithm."""
        self._require_run()
        return self._bound_at(self.flips_used)

    @functools.cached_property
    def program_bounds(self) -> dict[str, float]:
        """Certified bounds from minimax.py's linear programs, by method (empty where none applies).

        They need β = 0 (γ = 1: the private construction; a `mass` with γ < 1 puts data on
        both signs, and minimax.py's states do not cover it) and a program that runs.
        """
        self._require_run()
        _, alpha, beta = self._masses(self.flips_used)
        if beta != 0.0 or self._outside(self.flips_used):
            return {}
        return self._program_bounds(alpha)

    def _program_bounds(self, flip: float) -> dict[str, float]:
        raise NotImplementedError

    @functools.cached_property
    def lower_bound(self) -> float:
        """The certified lower bound on E_v E[excess loss] of any (ε, δ)-DP algorithm: the largest of
        the closed form and the linear programs' bounds (lower_bound_method says which)."""
        return max([self.closed_form_bound, *self.program_bounds.values()])

    @property
    def lower_bound_method(self) -> str:
        """Which bound lower_bound is: a program's method, or the closed form."""
        best = max(self.program_bounds.items(), key=lambda item: item[1], default=None)
        if best is None or best[1] <= self.closed_form_bound:
            return CLOSED_FORM
        return best[0]

    # ----- the data ---------------------------------------------------------------------------------
    @functools.cached_property
    def signs(self) -> np.ndarray:
        bits = [(self.vertex >> j) & 1 if j < 62 else 0 for j in range(self.dim)]
        signs = 1.0 - 2.0 * np.array(bits, dtype=float)
        signs.flags.writeable = False
        return signs

    @functools.cached_property
    def mean(self) -> np.ndarray:
        """μ_v = R·q·v."""
        self._require_run()
        mean = self.radius * self.flips_used / self.users * self.signs
        mean.flags.writeable = False
        return mean

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        self._require_run()
        rho, alpha, _ = self._masses(self.flips_used)
        coordinate = rng.integers(0, self.dim, count)
        present = rng.random(count) < rho
        # Given a non-zero point, s = v_J with probability (1 + γ)/2 = α/ρ·d.
        along = rng.random(count) < alpha * self.dim / rho
        data = np.zeros((self.dim, count))
        users = np.flatnonzero(present)
        data[coordinate[users], users] = self.radius * self.signs[coordinate[users]] * np.where(along[users], 1.0, -1.0)
        return data

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    @property
    def data_norm_bound(self) -> float:
        return self.radius

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    def constants(self) -> dict[str, float]:
        constants = super().constants()
        if self.users is not None:
            constants.update(lower_bound=self.lower_bound, flips=self.flips_used,
                             lower_bound_closed_form=self.closed_form_bound,
                             lower_bound_program=max(self.program_bounds.values(), default=0.0))
        return constants


@dataclasses.dataclass(frozen=True)
class HardStronglyConvex(_HardInstance):
    """ℓ(θ, x) = ½‖θ − x‖² on the hard data law: Table 1's strongly convex rows
    (λ = 1, β = 1; the central lower bound Ω(d/(εn)²) of BFTT19 / BST14 Thm 5.3).

    Exact loss: E x = μ_v = R·q·v and E‖x‖² = R²ρ, so F(θ) = ½‖θ − μ_v‖² + ½(R²ρ − ‖μ_v‖²),
    θ* = μ_v (‖μ_v‖ = R·q·√d ≤ R·q·d ≤ R·ρ ≤ R: inside Θ), excess ½‖θ − μ_v‖².
    Constants: ‖∇ℓ‖ = ‖θ − x‖ ≤ 2R = L, D = 2R.

    Certified bound (module docstring, Assouad): if θ_j v_j ≤ 0 then
    |θ_j − μ_{v,j}| ≥ R·q, so excess ≥ Σ_j w·1{θ_j v_j ≤ 0} with w = ½(R·q)², and

        E_v E[excess] ≥ d·½·(R·m/n)²·τ,

    τ from lower_bounds.pair_error. For small ε and δ the private part of τ is
    ≈ 1/(1 + e^{mε}) (K concentrates at m), maximized near m = 2.4/ε:
    bound ≈ 0.24·d·R²/(εn)², slope −2 in n as Table 1's d/(ε²n²).

    Program bound (β = 0): giving the algorithm v_{−j} for free, coordinate j's data
    is a per-user randomized map of a one-coordinate dataset (a user at R·v_j·e_j
    with probability q; otherwise drawn from a law that v_j does not change), so
    θ̂_j is an (ε, δ)-DP estimate on it and E ½(θ̂_j − R·q·v_j)² ≥ (Rq)²·r, r from
    minimax.estimation_risk; summed, E_v E[excess] ≥ d·(Rq)²·r (1.18·d·R²/(εn)² at
    ε = 0.05, n = 2,000).
    """

    name: ClassVar[str] = "lb_strongly_convex"

    @property
    def lipschitz(self) -> float:
        return 2.0 * self.radius

    @property
    def smoothness(self) -> float:
        return 1.0

    @property
    def strong_convexity(self) -> float:
        return 1.0

    def per_coordinate_weight(self, q: float) -> float:
        return 0.5 * (self.radius * q) ** 2

    def _program_bounds(self, flip: float) -> dict[str, float]:
        found = minimax.estimation_risk(self.users, flip, self.epsilon, self.delta)
        if found is None:
            return {}
        target = self.radius * self.flips_used / self.users  # μ = R·q
        return {f"LP minimax ({found.formulation}; d one-coordinate problems)": self.dim * target**2 * found.value}

    @property
    def optimum(self) -> np.ndarray:
        return self.mean

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.subtract(theta[:, None], data, out=out)

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        # argmin ½‖θ' − x‖² + ‖θ' − θ‖²/(2s) = (θ + s·x)/(1 + s).
        return (theta[:, None] + step * data) / (1.0 + step)

    def population_loss(self, theta: np.ndarray) -> float:
        gap = theta - self.mean
        return 0.5 * float(gap @ gap) + 0.5 * (self.radius**2 * self._masses(self.flips_used)[0]
                                               - float(self.mean @ self.mean))

    def excess_loss(self, theta: np.ndarray) -> float:
        gap = theta - self.mean
        return 0.5 * float(gap @ gap)


@dataclasses.dataclass(frozen=True)
class HardConvex(_HardInstance):
    """ℓ(θ, x) = −⟨θ, x⟩ on the hard data law: Table 1's convex rows, Lipschitz and
    smooth alike (a linear loss is β-smooth for every β ≥ 0; the central lower
    bound Ω(LD·√d/(εn)) of BST14 Thm 5.3 / BFTT19).

    Exact loss: F(θ) = −⟨θ, μ_v⟩, θ* = R·v/√d, F* = −R‖μ_v‖ = −R²·q·√d, so the
    excess is R·q·(R√d − ⟨θ, v⟩). Constants: ‖∇ℓ‖ = ‖x‖ ≤ R = L; β declared as
    L/D (an upper bound: the true smoothness is 0; the accelerated optimizers
    divide by β); λ = 0; D = 2R.

    Certified bound. Let W = {j: θ_j v_j ≤ 0}, w = |W|, ‖θ‖ ≤ R. Then
    ⟨θ, v⟩ ≤ Σ_{j∉W} |θ_j| ≤ √(d − w)·R (Cauchy–Schwarz), so
    excess ≥ R²q(√d − √(d − w)) ≥ R²q·w·(√d − √(d−1)): f(w) = √d − √(d − w)
    is convex with f(0) = 0, so f(w)/w is non-decreasing and f(w) ≥ w·f(1) for
    w ≥ 1. Hence w_j = R²q(√d − √(d − 1)) and

        E_v E[excess] ≥ d·R²·(m/n)·(√d − √(d − 1))·τ

    (outputs must lie in Θ, as every optimizer's projection ensures). Since
    √d − √(d−1) ≥ 1/(2√d), for small ε this is ≈ 0.28·R²·d(√d − √(d−1))/(εn)
    ≥ 0.07·√d·L·D/(εn) (m ≈ 1.3/ε): slope −1 in n as Table 1's √d/(εn).

    Program bounds (β = 0). d = 1: randomized rounding of θ̂ ∈ [−R, R] to ±R with
    mean θ̂ (post-processing) keeps E θ̂v, so the Bayes risk is exactly
    R·q·2R·P[sign wrong] ≥ 2R²q·τ*, τ* from minimax.testing_error (the least mean
    testing error). d > 1: Assouad's d·w·τ*; and a Lagrangian step: for λ > 0,
    θ_j v_j − λθ_j² = 1/(4λ) − λ(θ_j − v_j/(2λ))², and by the strongly convex
    instance's one-coordinate reduction E_v E(θ̂_j − v_j/(2λ))² ≥ r/(2λ²) (r from
    minimax.estimation_risk), so E_v E⟨θ̂, v⟩ ≤ λE‖θ̂‖² + d(1 − 2r)/(4λ) ≤
    λR² + d(1 − 2r)/(4λ); at the best λ, R·√(d(1 − 2r)), and
    E_v E[excess] ≥ R²q√d·(1 − √(1 − 2r)).
    """

    name: ClassVar[str] = "lb_convex"

    @property
    def lipschitz(self) -> float:
        return self.radius

    @property
    def smoothness(self) -> float:
        return 0.5  # L/D

    @property
    def strong_convexity(self) -> float:
        return 0.0

    def per_coordinate_weight(self, q: float) -> float:
        return self.radius**2 * q * (math.sqrt(self.dim) - math.sqrt(self.dim - 1))

    def _program_bounds(self, flip: float) -> dict[str, float]:
        q, bounds = self.flips_used / self.users, {}
        test = minimax.testing_error(self.users, flip, self.epsilon, self.delta)
        if test is not None and self.dim == 1:
            bounds[f"LP minimax ({test.formulation}; the test of v, outputs ±R)"] = 2 * self.radius**2 * q * test.value
        elif test is not None:
            bounds[f"Assouad with the LP's testing error ({test.formulation})"] = (
                self.dim * self.per_coordinate_weight(q) * test.value)
        if self.dim > 1:  # for d = 1 the test's bound is the larger
            found = minimax.estimation_risk(self.users, flip, self.epsilon, self.delta)
            if found is not None:
                bounds[f"LP minimax of the one-coordinate quadratic ({found.formulation}; Lagrangian step)"] = (
                    self.radius**2 * q * math.sqrt(self.dim) * (1.0 - math.sqrt(1.0 - 2.0 * min(found.value, 0.5))))
        return bounds

    def _check_optimizer(self, run) -> None:
        if run["optimizer.name"] in _DATA_OPTIMIZERS:
            raise ConfigError("optimizer.name", run["optimizer.name"],
                              f"sends raw data, which estimates E x, not the minimizer of problem {self.name}'s "
                              "linear loss: use a gradient optimizer, or problem lb_strongly_convex")
        if run["optimizer.name"] in ("seq_phased", "full_phased"):
            raise ConfigError("optimizer.name", run["optimizer.name"],
                              f"needs a strongly convex loss (λ > 0), and problem {self.name} has λ = 0: "
                              "use problem lb_strongly_convex")

    @property
    def optimum(self) -> np.ndarray:
        optimum = self.radius * self.signs / math.sqrt(self.dim)
        optimum.flags.writeable = False
        return optimum

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.negative(data, out=out)

    def prox(self, theta: np.ndarray, data: np.ndarray, step: float) -> np.ndarray:
        # argmin −⟨θ', x⟩ + ‖θ' − θ‖²/(2s) = θ + s·x.
        return theta[:, None] + step * data

    def population_loss(self, theta: np.ndarray) -> float:
        return -float(theta @ self.mean)

    def excess_loss(self, theta: np.ndarray) -> float:
        return self.radius * float(np.linalg.norm(self.mean)) - float(theta @ self.mean)
