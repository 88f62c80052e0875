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

The round is three stage functions (pipeline.optimizers.base.CompiledUpdate) and nothing else:
its `query` and `update`, inherited (pipeline.optimizers.base.Staged), run them in Python, the
engine's Python rounds compile them one by one, and the fused rounds into the engine's round
loop, so every path computes the same bits from one source, with no package edit.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.optimizers.averaged import point_query
from pipeline.optimizers.base import CompiledUpdate
from pipeline.optimizers.seq_sgd import SeqSGD
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
        """The round: `query` and `update` (pipeline.optimizers.base.Staged) run these in Python."""
        return CompiledUpdate(point_query, adagrad_norm_step, adagrad_norm_release, (float(self.step_size),), 2)


# The round's stages, in numba's subset: state (θ, b², Σθ, t), extra = [b² in every coordinate, Σθ].

def adagrad_norm_step(constants, theta, extra, steps, mean, out):
    """θ − η ḡ/b_{t+1}, b²_{t+1} = b²_t + ‖ḡ‖² (its squares added coordinate by coordinate)."""
    squared = 0.0
    for coordinate in range(theta.size):
        squared += mean[coordinate] * mean[coordinate]
    scale = constants[0] / np.sqrt(extra[0, 0] + squared)
    for coordinate in range(theta.size):
        out[coordinate] = theta[coordinate] - scale * mean[coordinate]


def adagrad_norm_release(constants, theta, extra, steps, mean, projected, released):
    """Releases (Σθ + θ)/(t + 1), then advances (θ, b², Σθ, t) to (π(step), b²_{t+1}, Σθ + θ, t + 1);
    False, the state untouched, if not finite."""
    for coordinate in range(theta.size):
        released[coordinate] = (extra[1, coordinate] + theta[coordinate]) / (steps[0] + 1)
        if not np.isfinite(released[coordinate]):
            return False
    squared = 0.0
    for coordinate in range(theta.size):
        squared += mean[coordinate] * mean[coordinate]
    accumulator = extra[0, 0] + squared
    steps[0] += 1
    for coordinate in range(theta.size):
        extra[0, coordinate] = accumulator
        extra[1, coordinate] = extra[1, coordinate] + theta[coordinate]
        theta[coordinate] = projected[coordinate]
    return True
