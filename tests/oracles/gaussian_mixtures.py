"""Exact divergences between one-dimensional Gaussian mixtures of one variance, by quadrature.

The Gaussian mechanisms' outputs on a small instance are such mixtures: a (sub)sampled
Gaussian sum is a mixture over which users the sample holds; one shuffled Gaussian report
drawn from k = 1 of n users is a mixture over who; two shuffled reports decompose into their
sum, a plain Gaussian, and their difference, a symmetric mixture (see `shuffled_pair_log_moment`).

∫ p^α q^(1−α) is computed on a uniform grid of spacing h = σ/16 around where each order's
integrand lives: for integrands this smooth (entire, with Gaussian tails) the trapezoid
rule's error decays like exp(−2π²σ²/h²), below float rounding, so it is exact to ~1e-12
relative. ∫ (p − e^ε q)₊ has a kink where p = e^ε q, so the rule's error is O(h²) there:
h = σ/2048 keeps it near 4e-8 relative.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special


def _log_density(y: np.ndarray, weights: np.ndarray, means: np.ndarray, sigma: float) -> np.ndarray:
    """log Σ_i w_i N(y; μ_i, σ²) at every y."""
    z = (y[:, None] - means[None, :]) / sigma
    return special.logsumexp(-0.5 * z**2 + np.log(weights)[None, :], axis=1) - math.log(sigma * math.sqrt(2 * math.pi))


def _grid(means: np.ndarray, sigma: float, largest_order: float, step: float) -> np.ndarray:
    spread = float(means.max() - means.min())
    reach = largest_order * spread + 40.0 * sigma  # log(p/q) has slope ≤ spread/σ²: the tilted peak moves ≤ α·spread
    return np.arange(means.min() - reach, means.max() + reach + step, step)


def log_moment(p: tuple, q: tuple, sigma: float, orders: np.ndarray) -> np.ndarray:
    """log ∫ p^α q^(1−α) dy at each order, for mixtures p = (weights, means), q likewise.

    A coarse pass (step σ/2) over the whole reach finds where each order's integrand is within
    e^−80 of its peak; the fine pass (step σ/16) integrates every order over the union of those
    windows, 8σ wider (what lies outside adds under 1e-30 relative).
    """
    pw, pm = (np.asarray(a, dtype=float) for a in p)
    qw, qm = (np.asarray(a, dtype=float) for a in q)

    def integrands(y: np.ndarray) -> np.ndarray:
        log_q = _log_density(y, qw, qm, sigma)
        return orders[:, None] * (_log_density(y, pw, pm, sigma) - log_q)[None, :] + log_q[None, :]

    coarse = _grid(np.concatenate([pm, qm]), sigma, float(np.max(orders)), sigma / 2.0)
    values = integrands(coarse)
    alive = values >= values.max(axis=1, keepdims=True) - 80.0
    low, high = coarse[alive.any(axis=0)].min() - 8.0 * sigma, coarse[alive.any(axis=0)].max() + 8.0 * sigma
    step = sigma / 16.0
    return special.logsumexp(integrands(np.arange(low, high + step, step)), axis=1) + math.log(step)


def renyi(p: tuple, q: tuple, sigma: float, orders: np.ndarray) -> np.ndarray:
    """D_α(p ‖ q) at each order."""
    return log_moment(p, q, sigma, orders) / (orders - 1.0)


def hockey_stick(p: tuple, q: tuple, sigma: float, epsilons: list[float]) -> np.ndarray:
    """max over both directions of ∫ (p − e^ε q)₊ dy at each ε: the smallest δ at which p and q are (ε, δ)-close.

    The grid reaches 12σ beyond the outermost means (the tails beyond add under e^−72).
    """
    pw, pm = (np.asarray(a, dtype=float) for a in p)
    qw, qm = (np.asarray(a, dtype=float) for a in q)
    means = np.concatenate([pm, qm])
    step = sigma / 2048.0  # a kink where p = e^ε q: the rule's error is O(h²), ~4e-8 relative
    y = np.arange(means.min() - 12.0 * sigma, means.max() + 12.0 * sigma + step, step)
    density_p, density_q = np.exp(_log_density(y, pw, pm, sigma)), np.exp(_log_density(y, qw, qm, sigma))
    return np.array([max(np.sum(np.maximum(density_p - math.exp(e) * density_q, 0.0)),
                         np.sum(np.maximum(density_q - math.exp(e) * density_p, 0.0))) * step for e in epsilons])


def shuffled_pair_log_moment(changed: tuple[float, float], other: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """log ∫∫ p^α q^(1−α) for two users' shuffled Gaussian reports, user 0 at changed[0] (p) or changed[1] (q).

    With u = (y1 + y2)/√2 and v = (y1 − y2)/√2 the shuffled pair's density factorizes: u ~ N((x0 + x1)/√2, σ²)
    and v ~ ½N(ν, σ²) + ½N(−ν, σ²) with ν = (x0 − x1)/√2 (the shuffle swaps the sign of v), independently.
    """
    a, b = changed
    mean_gap = (a - b) / math.sqrt(2.0)  # the sums' means differ by this
    gaussian = orders * (orders - 1.0) * mean_gap**2 / (2.0 * sigma**2)
    nu_p, nu_q = (a - other) / math.sqrt(2.0), (b - other) / math.sqrt(2.0)
    return gaussian + log_moment(([0.5, 0.5], [nu_p, -nu_p]), ([0.5, 0.5], [nu_q, -nu_q]), sigma, orders)
