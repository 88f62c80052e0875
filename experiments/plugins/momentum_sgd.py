"""An example optimizer plug-in: heavy-ball momentum on top of sequential SGD.

One file outside the package; run it with

    optimizer: {name: "experiments/plugins/momentum_sgd.py:MomentumSGD", momentum: 0.9}

It reuses P_SGD's schedule (seed 000, Algorithm 3: disjoint batches of B users,
each user answers once), so its ledger is exactly `seq_sgd`'s and every
protocol that runs `seq_sgd` runs it. Only the state update differs:

    v_{t+1} = μ v_t + ḡ_t,   θ_{t+1} = π_Θ(θ_t − η(1 − μ) v_{t+1}),

with η Theorem 4.1's step size: the (1 − μ) keeps the effective step of a
constant gradient equal to η. The output is the average of θ_0..θ_{T−1}, as
P_SGD's. Momentum is post-processing of the analyzer's estimates, so privacy
is unchanged; Theorem 4.1's rate is not claimed for μ > 0.

Its round is written once, as the built-in optimizers' are: transforms composed by `chain`
(pipeline.optimizers.transforms, in the style of optax), which its inherited `query` and `update`
run in Python and the engine compiles. Nothing in the package names this file.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.optimizers.base import CompiledUpdate
from pipeline.optimizers.seq_sgd import SeqSGD
from pipeline.optimizers.transforms import average, chain, scale, trace
from pipeline.options import Option, real


class MomentumState(NamedTuple):
    """θ_t, the velocity v_t, Σ_{s<t} θ_s and t."""

    theta: np.ndarray
    velocity: np.ndarray
    theta_sum: np.ndarray
    steps: int


@dataclasses.dataclass(frozen=True)
class MomentumSGD(SeqSGD):
    """P_SGD with heavy-ball momentum μ (see the module docstring).

    Attributes:
      momentum: μ ∈ [0, 1); 0 is `seq_sgd` itself.
    """

    momentum: float = 0.9
    name: ClassVar[str] = "momentum_sgd"
    # The optimizer.<field>s from_config reads (it passes them on to seq_sgd's); any other is refused.
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size", "step_size"})
    options: ClassVar[tuple] = (Option("momentum", real(0.0, 1.0, False, True), "μ, the heavy-ball momentum", 0.9),)

    @classmethod
    def from_config(cls, problem, n_users, epsilon, delta, rounds=None, batch_size=None, step_size=None,
                    accounting="paper", parameters="paper", protocol=None, momentum=0.9) -> "MomentumSGD":
        """Theorem 4.1's B, T and η (as `seq_sgd` resolves them), plus μ."""
        base = SeqSGD.from_config(problem, n_users, epsilon, delta, rounds, batch_size, step_size, accounting,
                                  parameters, protocol)
        return cls(**{field.name: getattr(base, field.name) for field in dataclasses.fields(SeqSGD)},
                   momentum=momentum)

    def init(self) -> MomentumState:
        zero = np.zeros(self.problem.dim)
        return MomentumState(zero, zero.copy(), zero.copy(), 0)

    def output(self, state: MomentumState) -> np.ndarray:
        return state.theta_sum / state.steps if state.steps else state.theta

    def hyperparameters(self) -> dict[str, float | int]:
        return {**super().hyperparameters(), "momentum": self.momentum}

    def stages(self) -> CompiledUpdate:
        """The round, as transforms: v ← μv + ḡ, the step −η(1 − μ)v, the average released. `query` and
        `update` (pipeline.optimizers.base.Staged) run it in Python; the engine compiles it."""
        return chain(trace(self.momentum), scale(-(self.step_size * (1.0 - self.momentum))), average())
