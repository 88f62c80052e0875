"""Shuffle Gaussian RDP accountant (seed 004, Liew & Takahashi): published numbers, regression
values from the notes (shared/notes/seed-004.md), and the properties the notes prove.

Tolerances: a number printed with d decimals is matched to half a unit of its last digit
(5·10^{-(d+1)}) plus float slack; exact identities are matched to ~1e-12 relative.
"""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from pipeline.accounting import shuffle_gaussian as sg
from pipeline.accounting.rdp import rdp_to_dp

N_TABLE1, SIGMA_TABLE1 = 60000, 9.48
# Balle–Wang analytic Gaussian calibration of (ε = 12, δ = 1e-5, GS = 1), as the reference
# repository's examples compute it (printed there as 0.43164; notes §4.4).
SIGMA_EXAMPLES = 0.43164385963762125


def _half_unit(decimals: int) -> float:
    return 0.5 * 10.0**-decimals + 1e-12


# ------------------------------------------------------------------ published numbers


@pytest.mark.parametrize("rounds, printed", list(enumerate(
    [0.22820, 0.22820, 0.22821, 0.22821, 0.22821, 0.22822, 0.22822], start=1)))
def test_table1_ours_row(rounds, printed):
    """Seed 004 Table 1, "Ours (RDP)": n = 60000, σ = 9.48, λ ≤ 30, δ = 1/n (notes §4.1)."""
    result = sg.shuffle_gaussian_epsilon(N_TABLE1, SIGMA_TABLE1, 1 / N_TABLE1, rounds=rounds, lambda_max=30)
    assert result["epsilon"] == pytest.approx(printed, abs=_half_unit(5))
    # The paper's number is pinned by its λ ≤ 30 cap (trap T4), and we say so.
    assert result["order"] == 30 and result["at_cap"] and "lambda_max" in result["warning"]


def test_table1_is_the_conversion_term_at_the_cap():
    """Notes §4.1: 0.22820 = (ln 60000 + 29 ln(29/30) − ln 30)/29 plus ~2.8e-6 of RDP per round."""
    term = (math.log(60000) + 29 * math.log(29 / 30) - math.log(30)) / 29
    one = sg.shuffle_gaussian_epsilon(N_TABLE1, SIGMA_TABLE1, 1 / N_TABLE1, lambda_max=30)
    seven = sg.shuffle_gaussian_epsilon(N_TABLE1, SIGMA_TABLE1, 1 / N_TABLE1, rounds=7, lambda_max=30)
    rdp30 = sg.shuffle_gaussian_rdp(N_TABLE1, SIGMA_TABLE1, 30)[-1]
    assert one["epsilon"] == pytest.approx(term + rdp30, rel=1e-12)
    assert seven["epsilon"] - one["epsilon"] == pytest.approx(6 * rdp30, rel=1e-6)
    assert 2.7e-6 < rdp30 < 2.9e-6


# ------------------------------------------------------------------ notes' regression values


def test_notes_test_values_at_table1_parameters():
    """Notes §3.3: ε(2) = 1.864878e−7, ε(3) = 2.797317e−7, ε(10) = 9.32439e−7."""
    rdp = sg.shuffle_gaussian_rdp(N_TABLE1, SIGMA_TABLE1, 10)
    assert rdp[0] == pytest.approx(1.864878e-7, abs=0.5e-13)
    assert rdp[1] == pytest.approx(2.797317e-7, abs=0.5e-13)
    assert rdp[8] == pytest.approx(9.32439e-7, abs=0.5e-12)


@pytest.mark.parametrize("lambda_max, rounds, printed, order", [
    (256, 1, 0.0175, 256), (256, 7, 0.0177, 256), (256, 100, 0.0199, 256),
    (256, 1000, 0.0413, 244), (256, 10_000, 0.1455, 85),
    (30, 100, 0.2285, 30), (30, 1000, 0.2310, 30), (30, 10_000, 0.2562, 30), (1000, 1, 0.0032, 1000),
])
def test_notes_reference_values_beyond_table1(lambda_max, rounds, printed, order):
    """Notes §4.1 "Extra reference values" (same n, σ, δ = 1/n), 4 decimals, with λ*."""
    result = sg.shuffle_gaussian_epsilon(N_TABLE1, SIGMA_TABLE1, 1 / N_TABLE1, rounds=rounds, lambda_max=lambda_max)
    assert result["epsilon"] == pytest.approx(printed, abs=_half_unit(4))
    assert result["order"] == order
    assert result["at_cap"] == (order == lambda_max)
    assert (result["warning"] is None) == (order != lambda_max)


@pytest.mark.parametrize("rounds, printed, decimals", [
    (1, 0.3951, 4), (10, 1.3463, 4), (100, 4.9068, 4), (1000, 20.743, 3), (10_000, 120.89, 2)])
def test_notes_no_shuffle_reference(rounds, printed, decimals):
    """Notes §4.1: the no-shuffle row, Cor. 1's λ/(2σ²) at λ ≤ 30."""
    orders = sg.rdp_orders(30)
    eps = rdp_to_dp(orders, rounds * sg.gaussian_rdp(SIGMA_TABLE1, 30), 1 / N_TABLE1).epsilon
    assert eps == pytest.approx(printed, abs=_half_unit(decimals))


@pytest.mark.parametrize("rounds, ssg, sci", [
    (1, 0.3301, 0.3301), (100, 2.5042, 2.5043), (1000, 5.5457, 5.5461), (5540, 9.6173, 9.6188)])
def test_notes_subsampled_and_checkin_values(rounds, ssg, sci):
    """Notes §6.4 step 4: n = 60000, γ = 0.1, σ = 5, δ = 1/n, λ ≤ 30, Δ = 0.5."""
    common = {"n": N_TABLE1, "sigma": 5.0, "delta": 1 / N_TABLE1, "rounds": rounds, "lambda_max": 30}
    sub = sg.shuffle_gaussian_epsilon(**common, variant="subsampled", m=6000)
    checkin = sg.shuffle_gaussian_epsilon(**common, variant="checkin", gamma=0.1, slack=0.5)
    assert sub["epsilon"] == pytest.approx(ssg, abs=_half_unit(4))
    assert checkin["epsilon"] == pytest.approx(sci, abs=_half_unit(4))


@pytest.mark.parametrize("delta, row", [
    (1 / 60000, {1: 0.330, 10: 1.087, 100: 2.504, 500: 4.279, 1000: 5.546, 2000: 6.546, 5540: 9.619}),
    (1e-5, {1: 0.348, 10: 1.129, 100: 2.606, 500: 4.450, 1000: 5.802, 2000: 6.801, 5540: 10.13})])
def test_notes_figure1b_gauss_bound(delta, row):
    """Notes §4.3: Thm 3 (Δ = 0.5, σ = 5, γ = 0.1, λ ≤ 30) at 3 decimals (10.13 at 2)."""
    curve = sg.checkin_shuffle_gaussian_rdp(N_TABLE1, 0.1, 5.0, 30, slack=0.5)
    for rounds, printed in row.items():
        eps = rdp_to_dp(sg.rdp_orders(30), rounds * curve, delta).epsilon
        assert eps == pytest.approx(printed, abs=_half_unit(2 if printed > 10 else 3)), rounds
    assert rdp_to_dp(sg.rdp_orders(30), 5540 * curve, delta).order == 2


def test_notes_figure1b_side_values():
    """Notes §4.3: λ ≤ 64 gives 0.200 at T = 1; σ = 2.5 gives 9.629 at T = 5540; WBK19 without
    shuffling gives 0.340 / 3.080 / 8.110 / 18.652."""
    delta = 1 / N_TABLE1
    wide = sg.shuffle_gaussian_epsilon(N_TABLE1, 5.0, delta, lambda_max=64, variant="checkin", gamma=0.1)
    assert wide["epsilon"] == pytest.approx(0.200, abs=_half_unit(3))
    half = sg.shuffle_gaussian_epsilon(N_TABLE1, 2.5, delta, 5540, 30, variant="checkin", gamma=0.1)
    assert half["epsilon"] == pytest.approx(9.629, abs=_half_unit(3))
    plain = sg.wbk_subsampled_rdp(0.1, sg.gaussian_rdp(5.0, 30))
    for rounds, printed in {1: 0.340, 100: 3.080, 1000: 8.110, 5540: 18.652}.items():
        eps = rdp_to_dp(sg.rdp_orders(30), rounds * plain, delta).epsilon
        assert eps == pytest.approx(printed, abs=_half_unit(3))


def test_mnist_sci_example_includes_the_chernoff_term():
    """Notes §4.4/§6.3 B1: the repository's mnist_sci.py inputs give 6.7554 by Thm 3 (λ* = 3),
    while the repository prints 5.1435 / 8.2196 / 4.8359: plain eq. (16) at shuffle size
    ⌊(1−Δ)nγ⌋ + 1 = 33, without the Chernoff term. We reproduce both."""
    result = sg.shuffle_gaussian_epsilon(60000, SIGMA_EXAMPLES, 1e-5, rounds=9375, lambda_max=20,
                                         variant="checkin", gamma=64 / 60000, slack=0.5)
    assert result["epsilon"] == pytest.approx(6.7554, abs=_half_unit(4))
    assert result["order"] == 3
    buggy = sg.wbk_subsampled_rdp(64 / 60000, sg.shuffle_gaussian_rdp(33, SIGMA_EXAMPLES, 20))
    for rounds, printed in {9375: 5.1435, 93750: 8.2196, 937.5: 4.8359}.items():
        conversion = rdp_to_dp(sg.rdp_orders(20), rounds * buggy, 1e-5)
        assert conversion.epsilon == pytest.approx(printed, abs=_half_unit(4))
        assert conversion.order == 3


def test_cifar_sub_example():
    """Notes §4.4: cifar_sub.py (n = 5e4, m = 59, 8333 updates, δ = 1e-5, λ ≤ 20) prints
    5.0012 (λ = 3), 6.7964 at 10× and 3.6266 at 0.1× the updates; Thm 2 is unaffected by B1."""
    curve = sg.subsampled_shuffle_gaussian_rdp(50000, 59, SIGMA_EXAMPLES, 20)
    for rounds, printed in {8333: 5.0012, 83330: 6.7964, 833.3: 3.6266}.items():
        assert rdp_to_dp(sg.rdp_orders(20), rounds * curve, 1e-5).epsilon == pytest.approx(printed, abs=_half_unit(4))
    assert sg.shuffle_gaussian_epsilon(50000, SIGMA_EXAMPLES, 1e-5, 8333, 20, "subsampled", m=59)["order"] == 3


# ------------------------------------------------------------------ Thm 1: exactness


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 50, 60000])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0, 9.48])
def test_series_matches_partition_enumeration_at_small_orders(n, sigma):
    """All orders ≤ 8 (n + 1 < 8 takes the binary-powering path, the rest Miller's recurrence)."""
    series = sg.shuffle_gaussian_rdp(n, sigma, 8)
    for order in range(2, 9):
        assert series[order - 2] == pytest.approx(sg.partition_enumeration_rdp(n, sigma, order), rel=1e-10, abs=0)


@pytest.mark.parametrize("order", [20, 30])
def test_series_matches_partition_enumeration_at_table1_orders(order):
    series = sg.shuffle_gaussian_rdp(N_TABLE1, SIGMA_TABLE1, order)[-1]
    assert series == pytest.approx(sg.partition_enumeration_rdp(N_TABLE1, SIGMA_TABLE1, order), rel=1e-10)


def test_partition_enumeration_drops_partitions_longer_than_n():
    """Notes T5 / B4: n = 1, λ = 5, σ = 1 is the plain Gaussian 2.5 (the repository gives 2.5310)."""
    assert sg.partition_enumeration_rdp(1, 1.0, 5) == pytest.approx(2.5, rel=1e-14)
    assert sg.partition_enumeration_rdp(3, 1.0, 5) == pytest.approx(sg.shuffle_gaussian_rdp(3, 1.0, 5)[-1], rel=1e-12)


@pytest.mark.parametrize("n", [40, 100])
def test_recurrence_and_binary_powering_agree(n):
    """The same n through Miller's recurrence (λ_max ≤ n + 1) and binary powering (λ_max > n + 1)."""
    miller = sg.shuffle_gaussian_rdp(n, 1.3, n + 1)
    powering = sg.shuffle_gaussian_rdp(n, 1.3, n + 20)
    np.testing.assert_allclose(powering[: miller.size], miller, rtol=1e-10)


@pytest.mark.parametrize("n, sigma", [(2, 0.7), (10, 1.0), (1000, 3.0), (60000, 9.48), (10**9, 2.0)])
def test_closed_forms_at_orders_2_and_3(n, sigma):
    """Notes §3.3: E_n(2) = 1 + (e^{1/σ²} − 1)/n and E_n(3) − 1 = [3(n−1)(e^{1/σ²} − 1) + e^{3/σ²} − 1]/n²."""
    rdp = sg.shuffle_gaussian_rdp(n, sigma, 3)
    assert rdp[0] == pytest.approx(math.log1p(math.expm1(sigma**-2) / n), rel=1e-13)
    u3 = (3 * (n - 1) * math.expm1(sigma**-2) + math.expm1(3 * sigma**-2)) / n**2
    assert rdp[1] == pytest.approx(math.log1p(u3) / 2, rel=1e-12)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 9.48])
def test_one_user_is_the_plain_gaussian(sigma):
    """Notes §3.3: ε_SG,1(λ) = λ/(2σ²), Cor. 1 with equality."""
    np.testing.assert_allclose(sg.shuffle_gaussian_rdp(1, sigma, 64), sg.gaussian_rdp(sigma, 64), rtol=1e-13)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 4.0])
def test_bounds_and_monotonicity_in_n(sigma):
    """Cor. 1 upper bound, the notes' lower bound max(0, λ/(2σ²) − log n), and the strict
    decrease in n (Conjecture 1, proven in notes §3.4)."""
    upper = sg.gaussian_rdp(sigma, 200)
    previous = upper
    for n in [1, 2, 3, 10, 100, 199, 1000, 10**5, 10**8]:
        rdp = sg.shuffle_gaussian_rdp(n, sigma, 200)
        assert np.all(rdp <= upper * (1 + 1e-12))
        assert np.all(rdp >= np.maximum(0.0, upper - math.log(n)) * (1 - 1e-12))
        if n > 1:
            assert np.all(rdp < previous)
        previous = rdp


def test_large_n_asymptote():
    """Notes §3.3: ε(λ) ≈ λ(e^{1/σ²} − 1)/(2n) as n → ∞ (relative error O(λ²/n))."""
    n, sigma = 10**9, 2.0
    rdp = sg.shuffle_gaussian_rdp(n, sigma, 50)
    np.testing.assert_allclose(rdp, sg.rdp_orders(50) * math.expm1(sigma**-2) / (2 * n), rtol=1e-5)


def test_amplification_vanishes_past_two_sigma_squared_log_n():
    """Notes §3.3/T4: once λ ≫ 2σ² log n the "all λ balls in one bin" term dominates, so ε(λ)
    meets its lower bound λ/(2σ²) − log n and the shuffle gain is only log n/(λ − 1)."""
    n, sigma = 100, 1.0
    rdp = sg.shuffle_gaussian_rdp(n, sigma, 400)
    lower = sg.gaussian_rdp(sigma, 400) - math.log(n)
    np.testing.assert_allclose(rdp[18:], lower[18:], rtol=1e-6)  # λ ≥ 20 > 2σ² log n ≈ 9.2
    assert rdp[2] < 0.02 * sg.gaussian_rdp(sigma, 4)[-1]  # λ = 4: still a 50× gain


# ------------------------------------------------------------------ Thm 2 / Thm 3


def test_subsampled_bound_properties():
    """Thm 2: below the unshuffled WBK bound, non-increasing in the shuffle size (monotone Thm 1
    into eq. (16)), and above the σ-independent floor (1/(λ−1)) log(1 + 2Σ_{j≥3} C(λ,j)γ^j) (T6)."""
    gamma, lambda_max = 0.1, 40
    plain = sg.wbk_subsampled_rdp(gamma, sg.gaussian_rdp(2.0, lambda_max))
    curves = [sg.wbk_subsampled_rdp(gamma, sg.shuffle_gaussian_rdp(m, 2.0, lambda_max)) for m in (1, 10, 1000, 10**6)]
    np.testing.assert_allclose(curves[0], plain, rtol=1e-12)
    for smaller, larger in itertools.pairwise(curves):
        assert np.all(larger <= smaller)
    orders = np.arange(2, lambda_max + 1)
    floor = np.array([math.log1p(2 * sum(math.comb(lam, j) * gamma**j for j in range(3, lam + 1))) / (lam - 1)
                      for lam in orders])
    assert np.all(curves[-1] >= floor * (1 - 1e-12))
    assert curves[-1][-1] == pytest.approx(floor[-1], rel=1e-3)


def test_subsampled_matches_direct_formula():
    """Eq. (16) evaluated term by term in plain floats at a small order."""
    n, m, sigma, lam = 1000, 100, 1.5, 6
    eps = sg.shuffle_gaussian_rdp(m, sigma, lam)
    gamma = m / n
    total = 1 + gamma**2 * math.comb(lam, 2) * min(4 * math.expm1(eps[0]), 2 * math.exp(eps[0]))
    total += sum(2 * gamma**j * math.comb(lam, j) * math.exp((j - 1) * eps[j - 2]) for j in range(3, lam + 1))
    ours = sg.subsampled_shuffle_gaussian_rdp(n, m, sigma, lam)[-1]
    assert ours == pytest.approx(math.log(total) / (lam - 1), rel=1e-12)


def test_checkin_bound_components():
    """Thm 3: exactly the two-term formula with K = ⌊(1−Δ)nγ⌋; above the bulk term alone;
    a slack grid is never worse than one of its members."""
    n, gamma, sigma, lambda_max = 2000, 0.05, 1.0, 24
    curve = sg.checkin_shuffle_gaussian_rdp(n, gamma, sigma, lambda_max, slack=0.5)
    scale = np.arange(1.0, lambda_max)
    lone = scale * sg.wbk_subsampled_rdp(gamma, sg.gaussian_rdp(sigma, lambda_max))
    bulk = scale * sg.wbk_subsampled_rdp(gamma, sg.shuffle_gaussian_rdp(51, sigma, lambda_max))  # K = 50
    np.testing.assert_allclose(curve, np.logaddexp(lone - 0.25 * 100 / 2, bulk) / scale, rtol=1e-12)
    assert np.all(curve > bulk / scale)
    grid = sg.checkin_shuffle_gaussian_rdp(n, gamma, sigma, lambda_max, slack=[0.1, 0.3, 0.5, 0.7])
    assert np.all(grid <= curve)
    assert np.any(grid < curve)


def test_checkin_floor_is_conservative_for_non_integer_split():
    """(1−Δ)nγ = 2.5 → K = 2 and the Chernoff exponent uses Δ' = 1 − K/(nγ) = 0.6 (valid in Thm 3)."""
    n, gamma, sigma, lambda_max = 50, 0.1, 1.0, 10
    curve = sg.checkin_shuffle_gaussian_rdp(n, gamma, sigma, lambda_max, slack=0.5)
    scale = np.arange(1.0, lambda_max)
    lone = scale * sg.wbk_subsampled_rdp(gamma, sg.gaussian_rdp(sigma, lambda_max))
    bulk = scale * sg.wbk_subsampled_rdp(gamma, sg.shuffle_gaussian_rdp(3, sigma, lambda_max))
    np.testing.assert_allclose(curve, np.logaddexp(lone - 0.6**2 * 5 / 2, bulk) / scale, rtol=1e-12)


# ------------------------------------------------------------------ composition, cap, API


@pytest.mark.parametrize("variant, params", [
    ("shuffle", {}), ("subsampled", {"m": 500}), ("checkin", {"gamma": 0.05})])
def test_composition_adds_rdp_curves(variant, params):
    n, sigma, delta, lambda_max = 10_000, 2.0, 1e-6, 128
    curve = {"shuffle": lambda: sg.shuffle_gaussian_rdp(n, sigma, lambda_max),
             "subsampled": lambda: sg.subsampled_shuffle_gaussian_rdp(n, 500, sigma, lambda_max),
             "checkin": lambda: sg.checkin_shuffle_gaussian_rdp(n, 0.05, sigma, lambda_max)}[variant]()
    orders = sg.rdp_orders(lambda_max)
    for rounds in (1, 3, 250):
        result = sg.shuffle_gaussian_epsilon(n, sigma, delta, rounds, lambda_max, variant, **params)
        summed = np.sum([curve] * rounds, axis=0)
        expected = rdp_to_dp(orders, summed, delta)
        assert result["epsilon"] == pytest.approx(expected.epsilon, rel=1e-12)
        assert result["order"] == expected.order
        assert result["rdp_at_order"] == pytest.approx(summed[int(expected.order) - 2], rel=1e-12)
    one = sg.shuffle_gaussian_epsilon(n, sigma, delta, 1, lambda_max, variant, **params)["epsilon"]
    many = sg.shuffle_gaussian_epsilon(n, sigma, delta, 250, lambda_max, variant, **params)["epsilon"]
    assert one < many


def test_result_is_json_and_names_its_method():
    result = sg.shuffle_gaussian_epsilon(60000, 5.0, 1e-5, rounds=10, lambda_max=64, variant="checkin",
                                         gamma=0.1, slack=[0.25, 0.5])
    assert json.loads(json.dumps(result)) == result
    assert {"epsilon", "delta", "method", "order", "at_cap", "warning"} <= result.keys()
    assert "Thm 3" in result["method"] and "eq. (4)" in result["method"]
    assert result["warning"] is None and result["at_cap"] is False
    assert "Thm 1" in sg.shuffle_gaussian_epsilon(100, 1.0, 1e-5)["method"]
    assert "Thm 2" in sg.shuffle_gaussian_epsilon(100, 1.0, 1e-5, variant="subsampled", m=10)["method"]


def test_cap_warning_triggers_and_clears():
    capped = sg.shuffle_gaussian_epsilon(N_TABLE1, SIGMA_TABLE1, 1 / N_TABLE1, lambda_max=256)
    assert capped["at_cap"] and capped["order"] == 256 and "λ*=256" in capped["warning"]
    wider = sg.shuffle_gaussian_epsilon(N_TABLE1, SIGMA_TABLE1, 1 / N_TABLE1, rounds=1000, lambda_max=256)
    assert not wider["at_cap"] and wider["warning"] is None


@pytest.mark.parametrize("call, message", [
    (lambda: sg.shuffle_gaussian_rdp(0, 1.0, 10), r"n=0"),
    (lambda: sg.shuffle_gaussian_rdp(2.5, 1.0, 10), r"n=2\.5.*integer"),
    (lambda: sg.shuffle_gaussian_rdp(-3, 1.0, 10), r"n=-3: must be an integer ≥"),
    (lambda: sg.shuffle_gaussian_rdp(10, 0.0, 10), r"sigma=0\.0: must be a number in \(0, inf\)"),
    (lambda: sg.shuffle_gaussian_rdp(10, math.nan, 10), r"sigma=nan"),
    (lambda: sg.shuffle_gaussian_rdp(10, 1.0, 1), r"lambda_max=1"),
    (lambda: sg.shuffle_gaussian_rdp(10, 1.0, 10**6), r"lambda_max=1000000"),
    (lambda: sg.partition_enumeration_rdp(10, 1.0, 1), r"order=1"),
    (lambda: sg.subsampled_shuffle_gaussian_rdp(10, 11, 1.0, 10), r"m=11: must be an integer ≥ 1 and ≤ 10"),
    (lambda: sg.wbk_subsampled_rdp(0.0, np.zeros(3)), r"gamma=0\.0"),
    (lambda: sg.wbk_subsampled_rdp(0.5, np.array([-1.0])), r"rdp"),
    (lambda: sg.checkin_shuffle_gaussian_rdp(10, 0.5, 1.0, 10, slack=1.0), r"slack=1\.0"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1.0), r"delta=1\.0"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1e-5, rounds=0), r"rounds=0"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1e-5, variant="poisson"), r"variant='poisson'"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1e-5, variant="subsampled"), r"m=None"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1e-5, m=3), r"m=3.*only applies"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1e-5, variant="checkin"), r"gamma=None"),
    (lambda: sg.shuffle_gaussian_epsilon(10, 1.0, 1e-5, variant="checkin", gamma=1.5), r"gamma=1\.5"),
])
def test_bad_parameters_raise_value_errors_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_an_integral_float_is_an_integer_as_everywhere_else():
    """1e6-style sizes (from YAML or the command line) mean the same as ints in every accountant."""
    assert np.array_equal(sg.shuffle_gaussian_rdp(6e4, 1.0, 10), sg.shuffle_gaussian_rdp(60000, 1.0, 10))
