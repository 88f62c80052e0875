"""Theoretical excess-loss rates to draw next to measured curves.

The seeds state their rates up to constants; every rate here takes the
hidden constant as 1, so curves compare in slope and order of magnitude, not
as bounds (notes seed-000 §4.3: "check log-log slopes").
"""
from __future__ import annotations

import math

from pipeline.problems.base import Problem

# The columns of runs.parquet (and MLflow metrics) that hold these rates.
THEORY_COLUMNS = ("theory_rate", "central_rate", "local_rate", "nonprivate_rate")


def nonprivate_rate(problem: Problem, n: int) -> float:
    """Non-private SCO: DL/√n (convex), L²/(λn) if strongly convex (notes §6)."""
    if problem.strong_convexity > 0:
        return problem.lipschitz**2 / (problem.strong_convexity * n)
    return problem.diameter * problem.lipschitz / math.sqrt(n)


def central_rate(problem: Problem, n: int, epsilon: float) -> float:
    """Central DP SCO: DL(1/√n + √d/(εn)) (Bassily et al. 2019, cited in seed 000;
    notes §6); with strong convexity (L²/λ)(1/n + d/(ε²n²)) (Lemma B.7 with ρ = ε)."""
    d = problem.dim
    if problem.strong_convexity > 0:
        return problem.lipschitz**2 / problem.strong_convexity * (1 / n + d / (epsilon * n) ** 2)
    return problem.diameter * problem.lipschitz * (1 / math.sqrt(n) + math.sqrt(d) / (epsilon * n))


def local_rate(problem: Problem, n: int, epsilon: float) -> float:
    """Local DP SCO: DL(1/√n + √d/(ε√n)) (Duchi, Jordan, Wainwright 2018, cited in
    seed 000; notes §6)."""
    return problem.diameter * problem.lipschitz * (1 / math.sqrt(n) + math.sqrt(problem.dim) / (epsilon * math.sqrt(n)))


def seq_sgd_rate(problem: Problem, n: int, epsilon: float, delta: float) -> float:
    """Theorem 4.1 of seed 000: d^{1/4} D L ln^{1/2}(d/δ)/√(εn)."""
    d = problem.dim
    return d**0.25 * problem.diameter * problem.lipschitz * math.sqrt(math.log(d / delta) / (epsilon * n))


def seq_agd_rate(problem: Problem, n: int, epsilon: float, delta: float) -> float:
    """Theorem 4.3 of seed 000: DL/√n + d^{2/5} β^{1/5} D^{6/5} L^{4/5} ln^{4/5}(d/δ)/(εn)^{4/5}."""
    d, diameter, lipschitz = problem.dim, problem.diameter, problem.lipschitz
    return diameter * lipschitz / math.sqrt(n) + (
        d**0.4 * problem.smoothness**0.2 * diameter**1.2 * lipschitz**0.8 * math.log(d / delta) ** 0.8
        / (epsilon * n) ** 0.8)


def seq_agd_smoothed_rate(problem: Problem, n: int, epsilon: float, delta: float) -> float:
    """Theorem 4.7 of seed 000: DL/√n + d^{1/3} D L ln^{2/3}(d/δ)/(εn)^{2/3} (L of the loss itself)."""
    d, diameter, lipschitz = problem.dim, problem.diameter, problem.unsmoothed.lipschitz
    return diameter * lipschitz / math.sqrt(n) + (
        d ** (1 / 3) * diameter * lipschitz * math.log(d / delta) ** (2 / 3) / (epsilon * n) ** (2 / 3))


def phased_rate(problem: Problem, n: int, epsilon: float, delta: float) -> float:
    """Theorem 4.8 of seed 000 (λ-strongly convex): L²/(λn) plus
    d^{2/3} L² ln^{4/3}(d/δ)/(λ(εn)^{4/3}) (non-smooth) or d β^{1/2} L² ln²(d/δ)/(λ^{3/2}(εn)²) (β-smooth)."""
    loss, d = problem.unsmoothed, problem.dim
    lipschitz, lam = loss.lipschitz, loss.strong_convexity
    if math.isfinite(loss.smoothness):
        private = d * loss.smoothness**0.5 * lipschitz**2 * math.log(d / delta) ** 2 / (lam**1.5 * (epsilon * n) ** 2)
    else:
        private = d ** (2 / 3) * lipschitz**2 * math.log(d / delta) ** (4 / 3) / (lam * (epsilon * n) ** (4 / 3))
    return lipschitz**2 / (lam * n) + private


def full_phased_rate(problem: Problem, n: int, epsilon: float, delta: float) -> float:
    """Theorem 4.9, λ-strongly convex: (L²/λ)(1/n + d ln³(nd/δ)/(ε²n²)) (Lemma B.7 with
    ρ = ε/ln^{3/2}(nd/δ), notes §4.3; L of the loss itself)."""
    loss, d = problem.unsmoothed, problem.dim
    return loss.lipschitz**2 / loss.strong_convexity * (1 / n + d * math.log(n * d / delta) ** 3 / (epsilon * n) ** 2)


def full_gd_rate(problem: Problem, n: int, epsilon: float, delta: float) -> float:
    """Theorem 4.9 / Lemma B.6 of seed 000: DL(1/√n + √d ln^{3/2}(d/δ)/(εn)), L of the loss itself."""
    d = problem.dim
    return problem.diameter * problem.unsmoothed.lipschitz * (
        1 / math.sqrt(n) + math.sqrt(d) * math.log(d / delta) ** 1.5 / (epsilon * n))


def mean_estimation_rate(problem: Problem, n: int, noise_variance: float) -> float:
    """E ½‖θ̂ − θ*‖² before projection, for the quadratic's mean estimate:
    ½(Var(x)·/n + Σ_j Var_j(P_vec)/n²), with Var(x) = E‖x − μ‖² bounded by the
    data's norm bound squared and the protocol's variance given (exact
    noise part plus the rounding bound, notes §4.2)."""
    return 0.5 * (problem.data_norm_bound**2 / n + noise_variance / n**2)
