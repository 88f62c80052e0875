"""The Moreau envelope of a problem's loss (seed 000, Definition 4.5, Lemma 4.6)."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from pipeline.errors import ConfigError
from pipeline.problems.base import CompiledProblem, Problem, twin_gradients
from pipeline.twins import keeps_twin


def require_prox(problem: Problem, optimizer_name: str) -> None:
    """Refuses a smoothed optimizer on a problem without a closed-form prox.

    Raises:
      ConfigError: naming optimizer.name.
    """
    try:
        problem.prox(np.zeros(problem.dim), np.zeros((problem.dim, 1)), 1.0)
    except NotImplementedError:
        raise ConfigError("optimizer.name", optimizer_name,
                          f"needs a closed-form prox; problem {problem.name} has none") from None


@dataclasses.dataclass(frozen=True)
class MoreauSmoothed(Problem):
    """ℓ_β(θ, x) = min_{θ'} ℓ(θ', x) + (β/2)‖θ − θ'‖²: what smoothed optimizers descend.

    Users send ∇ℓ_β(θ, x) = β(θ − prox_{ℓ(·,x)/β}(θ)) (Lemma 4.6), computed from the
    base problem's closed-form prox over ℝ^d. The paper's prox is constrained to Θ
    and its envelope 2L-Lipschitz; over ℝ^d the envelope gradient is a point of
    ∂ℓ(prox), so its norm is at most L. We still declare 2L, the Δ₂ the paper runs
    P_vec with (Theorem 4.7), so paper mode is literal. Everything that measures the
    run (sampling, projection, population loss, optimum) is the base problem's:
    Theorem 4.7 bounds the excess loss of ℓ itself.

    Args:
      base: the problem whose loss is smoothed (it must implement `prox`).
      beta: β > 0, the smoothing parameter (the envelope's smoothness).
    """

    base: Problem
    beta: float

    @property
    def unsmoothed(self) -> Problem:
        return self.base

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def dim(self) -> int:
        return self.base.dim

    @property
    def data_dim(self) -> int:
        return self.base.data_dim

    @property
    def lipschitz(self) -> float:
        return 2.0 * self.base.lipschitz

    @property
    def smoothness(self) -> float:
        return self.beta

    @property
    def strong_convexity(self) -> float:
        # The envelope of a λ-strongly convex function is λβ/(λ + β)-strongly convex.
        lam = self.base.strong_convexity
        return lam * self.beta / (lam + self.beta) if lam > 0 else 0.0

    @property
    def diameter(self) -> float:
        return self.base.diameter

    @property
    def data_norm_bound(self) -> float:
        return self.base.data_norm_bound

    @property
    def optimum(self) -> np.ndarray:
        return self.base.optimum

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return self.base.sample(rng, count)

    @functools.cached_property
    def _envelope(self) -> CompiledProblem | None:
        return self.base.compiled_envelope(self.beta)

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """β(θ − prox_{ℓ/β}(θ)): the base's compiled envelope where it has one (written once, there),
        else from its numpy prox."""
        if self._envelope is not None:
            return twin_gradients(self._envelope, theta, data, out)
        return np.multiply(self.beta, theta[:, None] - self.base.prox(theta, data, 1.0 / self.beta), out=out)

    def project(self, theta: np.ndarray) -> np.ndarray:
        return self.base.project(theta)

    def population_loss(self, theta: np.ndarray) -> float:
        return self.base.population_loss(theta)

    def excess_loss(self, theta: np.ndarray) -> float:
        return self.base.excess_loss(theta)

    def constants(self) -> dict[str, float]:
        return {**self.base.constants(), "beta_smoothing": self.beta}

    def compiled_problem(self) -> CompiledProblem | None:
        """The base's compiled envelope (Problem.compiled_envelope), if it has one."""
        kept = keeps_twin(self, "compiled_problem", ("sample", "gradients", "project", "population_loss", "excess_loss"))
        return self._envelope if kept else None
