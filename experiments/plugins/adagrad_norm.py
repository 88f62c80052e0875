"""An example optimizer plug-in whose update is written once and runs compiled: AdaGrad-Norm
(Ward, Wu & Bottou 2019, "AdaGrad stepsizes: sharp convergence over nonconvex landscapes",
Algorithm 1) on P_SGD's schedule. Run it with

    optimizer: {name: "experiments/plugins/adagrad_norm.py:AdaGradNorm", initial_accumulator: 1.0}

It reuses `seq_sgd`'s schedule (seed 000, Algorithm 3: disjoint batches of B users, each user
answers once), so its ledger is `seq_sgd`'s: the step size is post-processing of the analyzer's
estimates. Each round

    b²_{t+1} = b²_t + ‖ḡ_t‖²,   θ_{t+1} = π_Θ(θ_t − η ḡ_t / b_{t+1}),

with η Theorem 4.1's step size and b²_0 = `initial_accumulator`; the output is the average of
θ_0..θ_{T−1}, as P_SGD's. Theorem 4.1's rate is not claimed.

The round is one new transform (`scale_by_norm_accumulator`, a dozen lines) chained with the
package's (pipeline.optimizers.transforms, in the style of optax): its `query` and `update`,
inherited (pipeline.optimizers.base.Staged), run the chain in Python, the engine's Python rounds
compile its stages one by one, and the fused rounds into the engine's round loop, so every path
computes the same bits from one source, with no package edit.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.optimizers.base import CompiledUpdate
from pipeline.optimizers.seq_sgd import SeqSGD
from pipeline.optimizers.transforms import Transform, average, chain, sgd
from pipeline.options import Option, real


class AdaGradNormState(NamedTuple):
    """θ_t, b²_t (in every coordinate of a vector: the stages' state holds vectors), Σ_{s<t} θ_s and t."""

    theta: np.ndarray
    accumulator: np.ndarray
    theta_sum: np.ndarray
    steps: int


@dataclasses.dataclass(frozen=True)
class AdaGradNorm(SeqSGD):
    """P_SGD with AdaGrad-Norm's step size (see the module docstring).

    Attributes:
      initial_accumulator: b²_0 > 0.
    """

    initial_accumulator: float = 1.0
    name: ClassVar[str] = "adagrad_norm"
    overrides: ClassVar[frozenset] = frozenset({"rounds", "batch_size", "step_size"})
    options: ClassVar[tuple] = (Option("initial_accumulator", real(0.0, float("inf"), True, True),
                                       "b²_0, the squared-norm accumulator's start", 1.0),)

    @classmethod
    def from_config(cls, problem, n_users, epsilon, delta, rounds=None, batch_size=None, step_size=None,
                    accounting="paper", parameters="paper", protocol=None, initial_accumulator=1.0) -> "AdaGradNorm":
        """Theorem 4.1's B, T and η (as `seq_sgd` resolves them), plus b²_0."""
        base = SeqSGD.from_config(problem, n_users, epsilon, delta, rounds, batch_size, step_size, accounting,
                                  parameters, protocol)
        return cls(**{field.name: getattr(base, field.name) for field in dataclasses.fields(SeqSGD)},
                   initial_accumulator=initial_accumulator)

    def init(self) -> AdaGradNormState:
        zero = np.zeros(self.problem.dim)
        return AdaGradNormState(zero, np.full(self.problem.dim, self.initial_accumulator), zero.copy(), 0)

    def output(self, state: AdaGradNormState) -> np.ndarray:
        return state.theta_sum / state.steps if state.steps else state.theta

    def hyperparameters(self) -> dict[str, float | int]:
        return {**super().hyperparameters(), "initial_accumulator": self.initial_accumulator}

    def stages(self) -> CompiledUpdate:
        """The round, as transforms: ḡ/b_{t+1}, the step −η of it, the average released."""
        return chain(scale_by_norm_accumulator(), sgd(self.step_size), average())


def scale_by_norm_accumulator() -> Transform:
    """b² ← b² + ‖direction‖², direction ← direction/b; one row, b² in every coordinate (the state's
    rows are vectors)."""
    return Transform((), 1, update=norm_accumulator_update)


def norm_accumulator_update(constants, rows, steps, theta, direction, advance):
    """direction/√(b² + ‖direction‖²), its squares added coordinate by coordinate; b² advanced too."""
    squared = 0.0
    for coordinate in range(theta.size):
        squared += direction[coordinate] * direction[coordinate]
    accumulator = rows[0, 0] + squared
    root = np.sqrt(accumulator)
    for coordinate in range(theta.size):
        direction[coordinate] = direction[coordinate] / root
        if advance:
            rows[0, coordinate] = accumulator
