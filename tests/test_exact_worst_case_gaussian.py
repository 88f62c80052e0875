"""Every route of the Gaussian accountants against the exact worst case of small instances.

One dimension, inputs in [−1, 1] (norm bound 1, so the ledger's sensitivity Δ = 2 is the
largest change of one user's input). The outputs' exact laws are Gaussian mixtures
(tests/oracles/gaussian_mixtures.py, by quadrature): the (sub)sampled Gaussian sum, a mixture
over the sample's sum; one shuffled report of k = 1 of n users, a mixture over who; two
shuffled reports, whose sum and difference are independent; a Poisson-sampled shuffle of two
users, the three sample sizes' blocks. The scan: the changed user from −1 (or 0) to +1 and
back, the others all at one value or split between −1 and +1. Each route's worst ratio
exact/claimed, at every order the ledger uses, must not exceed 1; `pytest -s` prints them. The
PLD route of Poisson-sampled Gaussians gives an ε, not a curve: the exact hockey-stick
divergence at that ε must not exceed δ.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from oracles.gaussian_mixtures import hockey_stick, log_moment, renyi, shuffled_pair_log_moment
from pipeline.accounting import mechanisms
from pipeline.accounting.events import GaussianSumDpEvent, PoissonGaussianDpEvent, ShuffleGaussianDpEvent

ORDERS = mechanisms.ORDERS
ROUNDING = 1e-9  # quadrature exact to ~1e-12 relative (the oracle's docstring)
SENSITIVITY = 2.0  # inputs in [−1, 1]


def _sum_law(values: list[int], sampling: str, k: int = 0, rate: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(weights, means) of the sampled users' integer sum: k of n uniformly, or each at `rate`."""
    n, offset = len(values), len(values)  # sums lie in [−n, n]
    # ways[j][s + offset]: weight of samples of j users with sum s
    ways = np.zeros((n + 1, 2 * n + 1))
    ways[0, offset] = 1.0
    for value in values:
        ways[1:] = ways[1:] + np.roll(ways[:-1], value, axis=1)
    sums = np.arange(-n, n + 1, dtype=float)
    if sampling == "uniform":
        weights = ways[k] / ways[k].sum()
    else:
        sizes = np.arange(n + 1)
        weights = (ways * (rate**sizes * (1 - rate) ** (n - sizes))[:, None]).sum(axis=0)
    keep = weights > 0
    return weights[keep], sums[keep]


def _sum_neighbours(n: int):
    """(before, after) inputs: user 0 moves to +1 from −1 or 0; the others all alike or split ±1."""
    others = [[0] * (n - 1)] + [[1] * j + [-1] * (n - 1 - j) for j in sorted({0, 1, n // 2, n - 2, n - 1})]
    for rest in others:
        for start in (-1, 0):
            yield [start] + rest, [1] + rest


def _worst_sum(n: int, sigma: float, sampling: str, k: int = 0, rate: float = 0.0) -> np.ndarray:
    worst = np.zeros_like(ORDERS)
    for before, after in _sum_neighbours(n):
        p, q = _sum_law(after, sampling, k, rate), _sum_law(before, sampling, k, rate)
        worst = np.maximum.reduce([worst, renyi(p, q, sigma, ORDERS), renyi(q, p, sigma, ORDERS)])
    return worst


def _check(name: str, exact: np.ndarray, claims: dict) -> None:
    ratios = {route: float(np.max(exact / curve)) for route, curve in claims.items()}
    print(f"\n{name}:" + "".join(f"\n  {ratio:8.5f}  {route}" for route, ratio in ratios.items()))
    over = {route: ratio for route, ratio in ratios.items() if ratio > 1.0 + ROUNDING}
    assert not over, f"{name}: routes under-report the exact worst case: {over}"
    assert ratios["tight (the ledger's minimum)"] > 0.2  # the scan reaches the ledger's scale: the check can fail


def _claims(event) -> dict:
    return {**mechanisms.tight_routes(event), "tight (the ledger's minimum)": mechanisms.tight_call(event).rdp,
            "paper": mechanisms.paper_call(event).rdp}


@pytest.mark.parametrize("n,k,sigma", [(10, 3, 2.0), (12, 1, 1.0), (6, 5, 4.0)])
def test_sampled_gaussian_sum_routes(n, k, sigma):
    """k of n without replacement: the paper's joint convexity (M) and WBK19 Thm 9."""
    event = GaussianSumDpEvent(k, n, 1, SENSITIVITY, sigma)
    _check(f"Gaussian sum, k={k} of n={n}, σ={sigma}", _worst_sum(n, sigma, "uniform", k), _claims(event))


@pytest.mark.parametrize("n,rate,sigma", [(12, 0.1, 1.0), (8, 0.5, 2.0)])
def test_poisson_gaussian_routes_and_pld(n, rate, sigma):
    """Poisson sampling: (M)'s curve against the exact RDP; the ledger's ε of one call (the smaller of
    that curve's conversion and dp_accounting's PLD) against the exact hockey-stick divergence."""
    event = PoissonGaussianDpEvent(n, rate, 1, SENSITIVITY, sigma)
    _check(f"Poisson Gaussian, q={rate}, n={n}, σ={sigma}", _worst_sum(n, sigma, "poisson", rate=rate),
           _claims(event))
    deltas = np.array([1e-3, 1e-6])
    epsilons = [mechanisms.composed_epsilon(event, 1, delta, "tight") for delta in deltas]
    worst = np.max([hockey_stick(_sum_law(after, "poisson", rate=rate), _sum_law(before, "poisson", rate=rate), sigma,
                                 epsilons) for before, after in _sum_neighbours(n)], axis=0)
    print("".join(f"\n  δ = {d}: ε {e:.5f}, exact δ(ε) {w:.4e}" for d, e, w in zip(deltas, epsilons, worst)))
    assert np.all(worst <= deltas * (1 + 1e-6))  # the quadrature's error is ~4e-8 relative
    assert np.all(worst >= 0.5 * deltas)  # the PLD is nearly exact: the check is at the bound's scale


def _single_report_law(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.full(len(values), 1.0 / len(values)), np.asarray(values, dtype=float)


OTHERS = (-1.0, -0.5, 0.0, 0.5, 1.0)
MOVES = ((-1.0, 1.0), (0.0, 1.0), (1.0, -1.0))


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_shuffle_gaussian_two_users_routes(sigma):
    """Seed 004 Thm 1 at n = 2 and the plain Gaussian, over changed and other users' inputs."""
    event = ShuffleGaussianDpEvent(2, 2, 1, SENSITIVITY, sigma)
    worst = np.zeros_like(ORDERS)
    for a, b in MOVES:
        for other in OTHERS:
            worst = np.maximum(worst, shuffled_pair_log_moment((a, b), other, sigma, ORDERS) / (ORDERS - 1))
    _check(f"shuffle Gaussian, n=2, σ={sigma}", worst, _claims(event))


@pytest.mark.parametrize("n,sigma", [(10, 1.0), (4, 2.0)])
def test_subsampled_shuffle_gaussian_one_of_n_routes(n, sigma):
    """k = 1 of n: seed 004 Thm 2 (WBK19 over Thm 1) and (M), with the other users scanned."""
    event = ShuffleGaussianDpEvent(1, n, 1, SENSITIVITY, sigma)
    worst = np.zeros_like(ORDERS)
    for before, after in _sum_neighbours(n):
        p, q = _single_report_law(after), _single_report_law(before)
        worst = np.maximum.reduce([worst, renyi(p, q, sigma, ORDERS), renyi(q, p, sigma, ORDERS)])
    _check(f"shuffle Gaussian, k=1 of n={n}, σ={sigma}", worst, _claims(event))


def _poisson_pair_log_moment(a: float, b: float, other: float, rate: float, sigma: float) -> np.ndarray:
    """log ∫ p^α q^(1−α) of two users' Poisson-sampled shuffled reports (the report count is seen)."""
    none = np.full_like(ORDERS, 2 * math.log1p(-rate))
    one = math.log(2 * rate * (1 - rate)) + log_moment(([0.5, 0.5], [a, other]), ([0.5, 0.5], [b, other]), sigma,
                                                         ORDERS)
    both = 2 * math.log(rate) + shuffled_pair_log_moment((a, b), other, sigma, ORDERS)
    return np.logaddexp.reduce([none, one, both])


@pytest.mark.parametrize("rate,sigma", [(0.3, 1.0), (0.8, 0.5)])
def test_poisson_shuffle_gaussian_two_users_routes(rate, sigma):
    """Poisson-sampled shuffle Gaussian on two users: (M) at the sample size's lower bound."""
    event = ShuffleGaussianDpEvent(2, 2, 1, SENSITIVITY, sigma, rate)
    worst = np.zeros_like(ORDERS)
    for a, b in MOVES:
        for other in OTHERS:
            worst = np.maximum(worst, _poisson_pair_log_moment(a, b, other, rate, sigma) / (ORDERS - 1))
    _check(f"Poisson shuffle Gaussian, n=2, q={rate}, σ={sigma}", worst, _claims(event))


def test_unsampled_gaussian_sum_is_exactly_gdp():
    """All users: the ledger's ε is exactly μ-GDP's (the exact hockey stick at that ε is δ)."""
    sigma, delta = 1.5, 1e-5
    event = GaussianSumDpEvent(5, 5, 1, SENSITIVITY, sigma)
    epsilon = mechanisms.composed_epsilon(event, 1, delta, "tight")
    (exact,) = hockey_stick(([1.0], [SENSITIVITY]), ([1.0], [0.0]), sigma, [epsilon])
    assert exact == pytest.approx(delta, rel=1e-6)
