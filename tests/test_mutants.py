"""Tests that kill mutants an audit found surviving (issue 17, item 1).

Every expected value here is derived independently of the code under test:
from the theorem's formula written out in plain math, from an exact
hockey-stick divergence of a real pair of neighbouring inputs, or from the
exact mean and variance of a sum of independent Bernoulli draws. Each test
names the mutant it kills; each was applied to the code, seen to fail the
test, and reverted.

  (a) the tight sequential ledger total reported ×0.8;
  (b) seq_sgd's step size ×0.1, ×2 or ×10 (and the paper-mode parameters of
      seq_agd and full_gd pinned the same way);
  (c) literal-mode randomized rounding with its probability ×1.05;
  (d) Girgis UB1 (Thm 5.3.1) without its tail term exp(ε0α − (n−1)/(8e^ε0)).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pipeline.accounting import pvec_tight
from pipeline.accounting import shuffle_ldp
from pipeline.config import expand
from pipeline.protocols import cjmp
from pipeline.planning import plan_run


def _planned(name: str, n: int, dim: int, epsilon: float, delta: float, radius: float,
             accounting: str = "paper", **optimizer):
    """plan_run of one quadratic-problem run, through the public config entry point."""
    tree = {"problem": {"name": "quadratic", "dim": dim, "radius": radius}, "n_users": n,
            "optimizer": {"name": name, "parameters": "paper", **optimizer},
            "privacy": {"epsilon": epsilon, "delta": delta, "accounting": accounting}}
    (run,) = expand(tree)
    return plan_run(run)


# --------------------------------------------------------------------------------------------
# (a) tight sequential ledger total
# --------------------------------------------------------------------------------------------

def _exact_shift_epsilon(shift: int, trials: int, p: float, delta: float) -> float:
    """Exact ε(δ) of the pair Bin(N, p) + shift vs Bin(N, p), both directions (bisection on
    δ(ε) = Σ_z max(0, P(z) − e^ε Q(z))). The pmf is kept on ±14 sd; dropping the rest only
    drops non-negative terms of the hockey-stick sum, so this is never above the true ε(δ)."""
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    z = np.arange(max(0, math.floor(mean - 14 * sd)), min(trials, math.ceil(mean + 14 * sd)) + 1)
    base = np.pad(stats.binom.pmf(z, trials, p), shift)
    moved = np.roll(base, shift)
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        worst = max(np.maximum(moved - math.exp(mid) * base, 0.0).sum(),
                    np.maximum(base - math.exp(mid) * moved, 0.0).sum())
        lo, hi = (mid, hi) if worst > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("n,batch,dim,epsilon,delta", [(200, 40, 1, 1.0, 1e-5), (300, 60, 2, 2.0, 1e-5)])
def test_tight_sequential_total_is_the_per_batch_calibration_and_above_a_real_pair(n, batch, dim, epsilon, delta):
    """Kills: the tight sequential total ×0.8 (ledger._tight_spent)."""
    planned = _planned("seq_sgd", n, dim, epsilon, delta, 1.0, "tight", batch_size=batch)
    ledger = planned.ledger
    assert planned.job.optimizer.hyperparameters()["rounds"] == n // batch
    document = ledger.to_dict()
    (event,) = document["events"]  # every batch is the same call
    assert event["rounds"] == [0, n // batch] and event["users"] == batch
    # Parallel composition over disjoint batches: the run's ε is one batch's ε, the proven ε of
    # the call the calibration chose.
    calibration = pvec_tight.calibrate_pvec(batch, dim, epsilon, delta)
    assert (event["g"], event["b_noise"], event["p"]) == (calibration.g, calibration.b_noise, calibration.p)
    total_epsilon, total_delta = ledger.total()
    assert total_epsilon == pytest.approx(calibration.epsilon, rel=1e-12) and total_delta == delta
    assert document["accounting"]["tight"]["epsilon"] == pytest.approx(calibration.epsilon, rel=1e-12)
    assert total_epsilon <= epsilon
    # A real pair of neighbours: one coordinate moved from −Δ₂ to +Δ₂ (the others equal), so that
    # coordinate's count shifts by exactly g with no rounding randomness. No valid accountant
    # reports less than this pair's exact ε; the proven bound is 8-17 % above it here.
    exact = _exact_shift_epsilon(event["g"], batch * event["b_noise"], event["p"], delta)
    assert exact <= total_epsilon <= 1.2 * exact, (exact, total_epsilon)


# --------------------------------------------------------------------------------------------
# (b) paper-mode parameters of seq_sgd, seq_agd and full_gd, from the theorems by hand
# --------------------------------------------------------------------------------------------
# Quadratic problem of radius R: L = 2R, D = 2R, β = 1 (README, Problems).
# B and T are worked out by hand below each case; η (and σ) follow from the formula.

SEQ_SGD_CASES = [
    # √5·ln(5·10⁶) = 2.23607·15.42495 = 34.491 → B = 35; T = ⌊10000/35⌋ = 285
    (10_000, 5, 1.0, 1e-6, 1.0, 35, 285),
    # √10·ln(10⁹)/4 = 3.16228·20.72327/4 = 16.383 → B = 17; T = ⌊50000/17⌋ = 2941
    (50_000, 10, 4.0, 1e-8, 0.5, 17, 2941),
    # √2·ln(2·10⁵)/0.5 = 1.41421·12.20607/0.5 = 34.524 → B = 35; T = ⌊3000/35⌋ = 85
    (3_000, 2, 0.5, 1e-5, 2.0, 35, 85),
]


@pytest.mark.parametrize("n,dim,epsilon,delta,radius,batch,rounds", SEQ_SGD_CASES)
def test_seq_sgd_paper_parameters_follow_theorem_4_1(n, dim, epsilon, delta, radius, batch, rounds):
    """Kills: seq_sgd's step size ×0.1, ×2 or ×10; a changed B or T."""
    lipschitz, diameter = 2 * radius, 2 * radius
    # Theorem 4.1 (README): B = ⌈√d ln(d/δ)/ε⌉, T = ⌊n/B⌋, η = D/(L_G√T), L_G = L(1 + √d ln(d/δ)/(εB)).
    assert batch == math.ceil(math.sqrt(dim) * math.log(dim / delta) / epsilon) and rounds == n // batch
    lipschitz_g = lipschitz * (1 + math.sqrt(dim) * math.log(dim / delta) / (epsilon * batch))
    step_size = diameter / (lipschitz_g * math.sqrt(rounds))
    got = _planned("seq_sgd", n, dim, epsilon, delta, radius).job.optimizer.hyperparameters()
    assert got["batch_size"] == batch and got["rounds"] == rounds
    assert got["step_size"] == pytest.approx(step_size, rel=1e-12)


SEQ_AGD_CASES = [
    # 10⁴^0.6·5^0.2·(2·ln(5·10⁶))^0.4/(1·1·2)^0.4 = 251.19·1.3797·3.9419/1.3195 = 1035.3 → B = 1036, T = 9
    (10_000, 5, 1.0, 1e-6, 1.0, 1036, 9),
    # 5·10⁴^0.6·10^0.2·(1·ln(10⁹))^0.4/(4·1·1)^0.4 = 659.75·1.5849·3.3619/1.7411 = 2019.0 → B = 2020, T = 24
    (50_000, 10, 4.0, 1e-8, 0.5, 2020, 24),
    # 3000^0.6·2^0.2·(4·ln(2·10⁵))^0.4/(0.5·1·4)^0.4 = 121.98·1.1487·4.7365/1.3195 = 502.9 → B = 503, T = 5
    (3_000, 2, 0.5, 1e-5, 2.0, 503, 5),
]


@pytest.mark.parametrize("n,dim,epsilon,delta,radius,batch,rounds", SEQ_AGD_CASES)
def test_seq_agd_paper_parameters_follow_theorem_4_3(n, dim, epsilon, delta, radius, batch, rounds):
    """Pins Theorem 4.3's B, T, σ and step sizes 1/L_t (README, notes §2.4)."""
    lipschitz, diameter, beta = 2 * radius, 2 * radius, 1.0
    log = math.log(dim / delta)
    assert batch == math.ceil(n**0.6 * dim**0.2 * (lipschitz * log) ** 0.4 / (epsilon * beta * diameter) ** 0.4)
    assert rounds == n // batch
    # Proof of Theorem 4.3 (O-constants dropped): σ² = L²/B + d L² ln²(d/δ)/(εB)².
    sigma = math.sqrt(lipschitz**2 / batch + dim * lipschitz**2 * log**2 / (epsilon * batch) ** 2)
    optimizer = _planned("seq_agd", n, dim, epsilon, delta, radius).job.optimizer
    got = optimizer.hyperparameters()
    assert got["batch_size"] == batch and got["rounds"] == rounds
    assert got["sigma"] == pytest.approx(sigma, rel=1e-12)
    # L_t = ((T+2)^{3/2} σ/D + β)/(t+1), the inverse step size of round t = 1..T.
    for t in (1, 2, rounds):
        curvature = ((rounds + 2) ** 1.5 * sigma / diameter + beta) / (t + 1)
        assert optimizer.curvature(t) == pytest.approx(curvature, rel=1e-12)


FULL_GD_CASES = [
    # ε²n²/(d ln²(nd/δ)) = 10⁸/(5·ln²(5·10¹⁰)) = 10⁸/(5·24.635²) = 32954 > n → T = n = 10000
    (10_000, 5, 1.0, 1e-6, 1.0, 10_000),
    # 0.25·4·10⁶/(10·ln²(2·10¹²)) = 10⁶/(10·28.324²) = 124.6 → T = 124
    (2_000, 10, 0.5, 1e-8, 0.5, 124),
    # 0.25·9·10⁶/(2·ln²(6·10⁸)) = 2.25·10⁶/(2·20.212²) = 2753.7 → T = 2753
    (3_000, 2, 0.5, 1e-5, 2.0, 2753),
]


@pytest.mark.parametrize("n,dim,epsilon,delta,radius,rounds", FULL_GD_CASES)
def test_full_gd_paper_parameters_follow_theorem_4_9(n, dim, epsilon, delta, radius, rounds):
    """Pins Theorem 4.9 / Lemma B.6's T, η and per-round (ε0, δ0) (README, notes §2.7)."""
    lipschitz, diameter = 2 * radius, 2 * radius
    assert rounds == min(n, math.floor(epsilon**2 * n**2 / (dim * math.log(n * dim / delta) ** 2)))
    got = _planned("full_gd", n, dim, epsilon, delta, radius).job.optimizer.hyperparameters()
    assert got["rounds"] == rounds
    assert got["step_size"] == pytest.approx(diameter / (lipschitz * math.sqrt(rounds)), rel=1e-12)
    assert got["round_epsilon"] == pytest.approx(epsilon / (2 * math.sqrt(2 * rounds * math.log(1 / delta))),
                                                 rel=1e-12)
    assert got["round_delta"] == pytest.approx(delta / (rounds + 1), rel=1e-12)
    assert got["round_delta"] * (rounds + 1) <= delta  # T·δ0 + δ' ≤ δ, never above


# --------------------------------------------------------------------------------------------
# (c) literal-mode randomized rounding
# --------------------------------------------------------------------------------------------

def test_literal_rounding_ones_are_floor_plus_bernoulli_of_the_fraction():
    """Kills: literal-mode rounding probability ×1.05 (cjmp._randomized_rounding).

    With b_noise = 0 every message is a rounding bit: a user with scaled value s sends
    ⌊s⌋ + Bernoulli(s − ⌊s⌋) ones, so a label's count is Σ⌊s⌋ plus a sum of independent
    Bernoulli(f) with mean Σf and variance Σf(1 − f), checked to 5 standard errors. A 5 %
    bias moves the mean by 0.05·Σf, 13 SE per coordinate and 18 SE in total here.
    """
    users, dim, g, norm_bound = 50_000, 2, 8, 1.0
    params = cjmp.PvecParams(users, dim, 1.0, 1e-6, norm_bound, g, 0, 0.25, None, None)
    # s = (x + Δ₂)·g/(2Δ₂) = 4(x + 1): choose s = k + f with k ∈ {2..5}, f ∈ {1/8..7/8}, so
    # x = s/4 − 1 is dyadic, |x_j| ≤ 0.47 and ‖x‖₂ < 1 (no clipping; every step exact).
    index = np.arange(users * dim).reshape(dim, users)
    whole = 2 + (index // 7) % 4
    fraction = (1 + index % 7) / 8.0
    scaled = whole + fraction
    vectors = scaled / 4.0 - 1.0
    assert np.all(np.linalg.norm(vectors, axis=0) < norm_bound)
    labels, bits = cjmp.encode_messages(params, vectors, np.random.default_rng(20260517))
    assert bits.size == users * dim * g  # g value bits per user and coordinate, no noise bits
    ones = cjmp.count_messages(params, labels, bits).centred_ones  # n·b_noise·p = 0: the raw counts
    mean = whole.sum(axis=1) + fraction.sum(axis=1)
    standard_error = np.sqrt((fraction * (1 - fraction)).sum(axis=1))
    assert np.all(np.abs(ones - mean) <= 5 * standard_error), (ones - mean) / standard_error
    total_error = math.sqrt((standard_error**2).sum())
    assert abs(ones.sum() - mean.sum()) <= 5 * total_error, (ones.sum() - mean.sum()) / total_error


# --------------------------------------------------------------------------------------------
# (d) Girgis UB1 at small n, where its tail term matters
# --------------------------------------------------------------------------------------------

def _ub1(n: int, eps0: float, alpha: int) -> tuple[float, float]:
    """Seed 001, Thm 5.3.1 (notes seed-001 §3.6), integer α ≥ 2, written out in plain floats,
    with and without its tail term:
    ε(α) ≤ 1/(α−1)·log(1 + C(α,2)(e^ε0−1)²/(n̄e^ε0)
                         + Σ_{i=3..α} C(α,i)·i·Γ(i/2)·((e^{2ε0}−1)²/(2n̄e^{2ε0}))^{i/2}
                         + exp(ε0α − (n−1)/(8e^ε0))),   n̄ = ⌊(n−1)/(2e^ε0)⌋ + 1."""
    e = math.exp(eps0)
    nbar = math.floor((n - 1) / (2 * e)) + 1
    quadratic = math.comb(alpha, 2) * (e - 1) ** 2 / (nbar * e)
    v = (e * e - 1) ** 2 / (2 * nbar * e * e)
    higher = sum(math.comb(alpha, i) * i * math.gamma(i / 2) * v ** (i / 2) for i in range(3, alpha + 1))
    tail = math.exp(eps0 * alpha - (n - 1) / (8 * e))
    return math.log(1 + quadratic + higher + tail) / (alpha - 1), math.log(1 + quadratic + higher) / (alpha - 1)


@pytest.mark.parametrize("n,eps0,alpha", [(20, 1.0, 2), (20, 1.0, 4), (50, 0.5, 3), (100, 1.0, 8)])
def test_ub1_at_small_n_keeps_its_tail_term(n, eps0, alpha):
    """Kills: UB1 with the tail term exp(ε0α − (n−1)/(8e^ε0)) dropped."""
    expected, without_tail = _ub1(n, eps0, alpha)
    assert without_tail < 0.8 * expected  # the case discriminates: the tail is ≥ 20 % of the bound
    assert shuffle_ldp.shuffle_rdp_ub1(n, eps0, [float(alpha)])[0] == pytest.approx(expected, rel=1e-10)


def test_ub1_at_a_real_order_interpolates_the_integer_bounds():
    """Remark 5.3.2 (eq. 5.6): at α = 2.5, ε ≤ (½·1·ε(2) + ½·2·ε(3))/1.5."""
    n, eps0 = 50, 0.5
    expected = (0.5 * 1 * _ub1(n, eps0, 2)[0] + 0.5 * 2 * _ub1(n, eps0, 3)[0]) / 1.5
    assert shuffle_ldp.shuffle_rdp_ub1(n, eps0, [2.5])[0] == pytest.approx(expected, rel=1e-10)
