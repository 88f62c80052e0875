"""The built-in optimizers' rounds in numpy, as their classes held them before their rounds became
their stage functions (pipeline.optimizers.base.Staged): the tests' independent oracle of the
stages, checked bit for bit in tests/test_stage_oracles.py. Each takes the optimizer (for its
constants and problem) and its state tuple, and returns what the class's query, or update, gave;
the example plug-ins' rounds (experiments/plugins/) are here too, written in numpy."""
from __future__ import annotations

import numpy as np


def averaged_query(optimizer, state) -> np.ndarray:
    """P_SGD / P_GD (seed 000, Algorithms 3 and 5): the query is θ_t."""
    return state.theta


def averaged_update(optimizer, state, noisy_mean: np.ndarray):
    """θ_{t+1} = π(θ_t − ηḡ_t), Σθ gains θ_t, t + 1 (the printed ascent is the notes' typo T1)."""
    theta = optimizer.problem.project(state.theta - optimizer.step_size * noisy_mean)
    return type(state)(theta, state.theta_sum + state.theta, state.steps + 1)


def acsa_query(optimizer, state) -> np.ndarray:
    """AC-SA (seed 000, Algorithm 4): α θ + (1 − α) θ^ag with α = 2/(t + 2)."""
    alpha = 2.0 / (state.t + 2)
    return alpha * state.theta + (1.0 - alpha) * state.theta_ag


def acsa_update(optimizer, state, noisy_mean: np.ndarray):
    """θ ← π(θ − ḡ/L_t), θ^ag ← αθ + (1 − α)θ^ag, t + 1."""
    alpha = 2.0 / (state.t + 2)
    theta = optimizer.problem.project(state.theta - noisy_mean / optimizer.curvature(state.t))
    return type(state)(theta, alpha * theta + (1.0 - alpha) * state.theta_ag, state.t + 1)


def last_iterate_query(optimizer, state) -> np.ndarray:
    """PNSGD (seed 003): the query is θ_t."""
    return state.theta


def last_iterate_update(optimizer, state, noisy_mean: np.ndarray):
    """θ_{t+1} = π(θ_t − ηḡ_t), t + 1; the output is the last iterate."""
    return type(state)(optimizer.problem.project(state.theta - optimizer.step_size * noisy_mean), state.steps + 1)


def momentum_update(optimizer, state, noisy_mean: np.ndarray):
    """experiments/plugins/momentum_sgd.py: v ← μv + ḡ, θ ← π(θ − η(1 − μ)v), Σθ gains θ, t + 1."""
    velocity = optimizer.momentum * state.velocity + noisy_mean
    theta = optimizer.problem.project(state.theta - optimizer.step_size * (1.0 - optimizer.momentum) * velocity)
    return type(state)(theta, velocity, state.theta_sum + state.theta, state.steps + 1)


def adagrad_norm_update(optimizer, state, noisy_mean: np.ndarray):
    """experiments/plugins/adagrad_norm.py: b² ← b² + ‖ḡ‖² (squares added in order), θ ← π(θ − η(ḡ/b)),
    Σθ gains θ, t + 1 (b² is held in every coordinate of a vector)."""
    squared = 0.0
    for value in noisy_mean:
        squared += value * value
    accumulator = state.accumulator[0] + squared
    theta = optimizer.problem.project(state.theta - optimizer.step_size * (noisy_mean / np.sqrt(accumulator)))
    return type(state)(theta, np.full_like(state.accumulator, accumulator), state.theta_sum + state.theta,
                       state.steps + 1)
