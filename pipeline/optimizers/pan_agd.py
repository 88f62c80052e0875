"""Pan-private AC-SA (seed 000, Algorithm 6, Appendix C, Theorem C.3 (2), Lemma C.4)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from pipeline.errors import ConfigError
from pipeline.optimizers.base import RoundGroup, Schedule
from pipeline.optimizers.seq_agd import PAPER, SeqAGD
from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.problems.base import Problem
from pipeline.protocols.base import CENTRAL_GAUSSIAN_NOISE, FIXED_NOISE


def pan_noise(lipschitz: float, batch_size: int, epsilon: float, delta: float) -> float:
    """ζ, each draw's standard deviation on the batch mean: ζ² = 8L² ln(2/δ)/(B²ε²),
    the Gaussian mechanism of Lemma C.5 (2Δ² ln(2/δ)/ε², valid for ε < 1) at Δ = 2L/B."""
    return math.sqrt(8.0 * lipschitz**2 * math.log(2.0 / delta)) / (batch_size * epsilon)


@dataclasses.dataclass(frozen=True)
class PanAGD(SeqAGD):
    """AC-SA on T disjoint batches of B users, the curator adding N(0, ζ²I) to its
    accumulator before reading a batch and again after (Algorithm 6): an intruder who
    reads the state once sees at least one draw, so Lemma C.4 makes the run (ε, δ)-pan-
    private against a single intrusion, with the output.

    The run uses the `central_gaussian` protocol with its noise fixed to the two draws,
    B·√2·ζ on the sum; the ledger accounts the released outputs (each user in one
    batch: the worst batch's Gaussian mechanism), never less than a single draw's
    (ε, δ). The intrusion guarantee is the lemma's, stated, not accounted.
    B = n^{3/5} d^{1/5} L^{2/5} ln^{1/5}(1/δ)/(ε^{2/5} β^{2/5} D^{2/5}) (the notes' analogue of
    Theorem 4.3's with ln^{1/2}(1/δ) for ln(d/δ)); the AC-SA noise level is exact:
    σ² = L²/B + 2dζ².
    """

    name: ClassVar[str] = "pan_agd"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size"})  # passed on to seq_agd's
    requires: ClassVar[frozenset] = frozenset({CENTRAL_GAUSSIAN_NOISE, FIXED_NOISE})

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = PAPER, protocol=None) -> "PanAGD":
        """Resolves Algorithm 6's parameters.

        Raises:
          ConfigError: ε ≥ 1 (Lemma C.5), a non-smooth problem, a step size, or rounds × B > n.
        """
        if epsilon >= 1.0:
            raise ConfigError("privacy.epsilon", epsilon, f"must be < 1 for {cls.name} (Lemma C.5's Gaussian mechanism)")
        if batch_size is None and math.isfinite(problem.smoothness):
            d, lipschitz, beta, diameter = problem.dim, problem.lipschitz, problem.smoothness, problem.diameter
            batch_size = min(n_users, max(1, math.ceil(
                n_users**0.6 * d**0.2 * lipschitz**0.4 * math.log(1 / delta) ** 0.2
                / (epsilon * beta * diameter) ** 0.4)))
        inner = SeqAGD.from_config(problem, n_users, epsilon, delta, rounds, batch_size, step_size, accounting,
                                   parameters, protocol)
        zeta = pan_noise(problem.lipschitz, inner.batch_size, epsilon, delta)
        sigma = math.sqrt(problem.lipschitz**2 / inner.batch_size + 2 * problem.dim * zeta**2)
        fields = {field.name: getattr(inner, field.name) for field in dataclasses.fields(SeqAGD)}
        return cls(**{**fields, "sigma": sigma})

    @property
    def zeta(self) -> float:
        return pan_noise(self.problem.lipschitz, self.batch_size, self.epsilon, self.delta)

    def schedule(self) -> Schedule:
        group = RoundGroup(self.rounds, self.batch_size, 0, self.batch_size, self.epsilon, self.delta,
                           self.problem.lipschitz, noise_std=self.batch_size * math.sqrt(2.0) * self.zeta)
        return Schedule(SEQUENTIAL, (group,))

    def theory_rate(self) -> float:
        """Theorem C.3 (2): DL/√n + d^{2/5} β^{1/5} D^{6/5} L^{4/5} ln^{2/5}(1/δ)/(εn)^{4/5}."""
        problem, n = self.problem, self.n_users
        d, diameter, lipschitz = problem.dim, problem.diameter, problem.lipschitz
        return diameter * lipschitz / math.sqrt(n) + (
            d**0.4 * problem.smoothness**0.2 * diameter**1.2 * lipschitz**0.8 * math.log(1 / self.delta) ** 0.4
            / (self.epsilon * n) ** 0.8)

    def hyperparameters(self) -> dict[str, float | int]:
        return {**super().hyperparameters(), "zeta": self.zeta}
