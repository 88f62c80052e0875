"""Shuffled ε0-LDP accountants: seed-001 §3.10 reference values, FMT22 against an exact
hockey-stick computation, bound orderings, and composition sanity."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from pipeline.accounting import shuffle_ldp as S
from pipeline.accounting.paper import advanced_composition
from pipeline.accounting.rdp import DEFAULT_ORDERS, rdp_to_dp

TWO = np.array([2.0])


# --- seed-001 notes §3.10: reference values (computed by the notes' author from the formulas) ---

def test_reference_table_n1000_eps05_alpha2():
    assert S.shuffle_rdp_lower(1000, 0.5, TWO)[0] == pytest.approx(2.552e-4, rel=5e-4)
    assert S.shuffle_rdp_ub1(1000, 0.5, TWO)[0] == pytest.approx(8.421e-4, rel=5e-4)
    assert S.shuffle_rdp_ub2(1000, 0.5, TWO)[0] == pytest.approx(5.556e-3, rel=5e-4)
    assert S.shuffle_rdp_cor531(1000, 0.5, TWO, check_domain=False)[0] == pytest.approx(1.682e-3, rel=5e-4)
    # "its domain condition fails here": 2⁴·e^2.5 > 1000/9, so the ledger refuses it.
    assert not S.cor531_domain(1000, 0.5, TWO)[0]
    assert S.shuffle_rdp_cor531(1000, 0.5, TWO)[0] == math.inf


@pytest.mark.parametrize("n,eps0,alpha,lower,ub1,ub2", [
    (10**4, 1.0, 8.0, 4.343e-4, 3.646e-3, 1.467e-2),
    (10**6, 2.0, 2.0, 5.524e-6, 8.164e-5, None),
])
def test_reference_more_cases(n, eps0, alpha, lower, ub1, ub2):
    order = np.array([alpha])
    assert S.shuffle_rdp_lower(n, eps0, order)[0] == pytest.approx(lower, rel=5e-4)
    assert S.shuffle_rdp_ub1(n, eps0, order)[0] == pytest.approx(ub1, rel=5e-4)
    if ub2 is not None:
        assert S.shuffle_rdp_ub2(n, eps0, order)[0] == pytest.approx(ub2, rel=5e-4)


def test_reference_composition_t1e5():
    # T = 1e5, n = 1e6, ε0 = 0.5, δ = 1e-8, α ∈ {2, …, 256}: ε_UB1 ≈ 1.64.
    result = S.shuffle_ldp_epsilon(10**6, 0.5, 1e-8, 10**5, "rdp")
    assert result["epsilon"] == pytest.approx(1.64, abs=0.005)
    assert result["binding_bound"] == "Thm 5.3.1 (UB1)" and not result["at_cap"] and 2 <= result["order"] <= 256
    ub1_only = rdp_to_dp(np.arange(2.0, 257.0), 10**5 * S.shuffle_rdp_ub1(10**6, 0.5, np.arange(2.0, 257.0)), 1e-8)
    assert ub1_only.epsilon == pytest.approx(1.64, abs=0.005)
    # FMT22 closed form + DRV strong composition, δ split optimized: ≈ 47.7.
    drv = S.compose_approximate_dp(lambda d: S.fmt22_closed_form_epsilon(10**6, 0.5, d), 10**5, 1e-8, "drv")
    assert drv["epsilon"] == pytest.approx(47.7, abs=0.1)


# --- the formulas, recomputed independently ---

def test_ub1_and_subsampled_by_hand_at_small_orders():
    n, eps0 = 5000, 1.0
    e = math.e
    nbar = math.floor((n - 1) / (2 * e)) + 1
    v = (e**2 - 1) ** 2 / (2 * nbar * e**2)
    inner = 1 + 3 * (e - 1) ** 2 / (nbar * e) + 1 * 3 * math.gamma(1.5) * v**1.5 + math.exp(3 - (n - 1) / (8 * e))
    assert S.shuffle_rdp_ub1(n, eps0, [3.0])[0] == pytest.approx(math.log(inner) / 2, rel=1e-12)
    k, gamma = 500, 500 / n
    kbar = math.floor((k - 1) / (2 * e)) + 1
    x = gamma * (e - 1 / e)
    upsilon = ((1 + x) ** 2 - 1 - 2 * x) * math.exp(-(k - 1) / (8 * e))
    inner = 1 + 4 * gamma**2 * (e - 1) ** 2 / (kbar * e) + upsilon
    assert S.subsampled_shuffle_rdp_ub(n, k, eps0, TWO)[0] == pytest.approx(math.log(inner), rel=1e-12)


def _shuffled_rr_divergence(n, eps0, alpha):
    """D_α(M(D') ‖ M(D)) for shuffled 2RR, from the two count distributions directly."""
    p = 1 / (1 + math.exp(eps0))
    k = np.arange(n + 1)
    base = stats.binom.pmf(k, n, p)
    other = np.convolve(stats.binom.pmf(np.arange(n), n - 1, p), [p, 1 - p])
    seen = base > 0  # beyond float range the terms are < 1e-300·e^(αε0): nothing
    return math.log(np.sum(base[seen] * (other[seen] / base[seen]) ** alpha)) / (alpha - 1)


@pytest.mark.parametrize("n,eps0", [(40, 1.0), (300, 0.5), (300, 2.5)])
def test_lower_bound_is_the_exact_divergence_and_equation_5_9(n, eps0):
    orders = np.array([2.0, 3.0, 5.0, 8.0, 2.5])
    lower = S.shuffle_rdp_lower(n, eps0, orders)
    for alpha, value in zip(orders, lower):
        assert value == pytest.approx(_shuffled_rr_divergence(n, eps0, alpha), rel=1e-9)
    # (5.9) at integer α: central moments of k ~ Bin(n, 1/(e^ε0+1)).
    p, e = 1 / (1 + math.exp(eps0)), math.exp(eps0)
    k = np.arange(n + 1)
    pmf = stats.binom.pmf(k, n, p)
    for alpha, value in zip(orders[:4], lower[:4]):
        a = int(alpha)
        total = 1 + special.comb(a, 2) * (e - 1) ** 2 / (n * e)
        for i in range(3, a + 1):
            total += special.comb(a, i) * ((e**2 - 1) / (n * e)) ** i * np.sum(pmf * (k - n * p) ** i)
        assert value == pytest.approx(math.log(total) / (a - 1), rel=1e-9)


def test_subsampled_lower_bound_is_the_shuffle_lower_bound_at_gamma_one_and_below_it():
    orders = np.array([2.0, 4.0, 16.0])
    np.testing.assert_allclose(S.subsampled_shuffle_rdp_lower(800, 800, 1.0, orders),
                               S.shuffle_rdp_lower(800, 1.0, orders), rtol=1e-12)
    assert np.all(S.subsampled_shuffle_rdp_lower(8000, 800, 1.0, orders) < S.shuffle_rdp_lower(800, 1.0, orders))


# --- orderings of the curves ---

@pytest.mark.parametrize("n", [100, 1000, 10**4, 10**6])
@pytest.mark.parametrize("eps0", [0.5, 1.0, 2.0, 4.0])
def test_lower_le_ub1_le_ub2_le_cor_per_order(n, eps0):
    orders = DEFAULT_ORDERS
    lower, ub1 = S.shuffle_rdp_lower(n, eps0, orders), S.shuffle_rdp_ub1(n, eps0, orders)
    ub2 = S.shuffle_rdp_ub2(n, eps0, orders)
    assert np.all(lower <= ub1) and np.all(ub1 <= ub2)
    cor = S.shuffle_rdp_cor531(n, eps0, orders)
    assert np.all(ub1[np.isfinite(cor)] <= cor[np.isfinite(cor)])
    upper = S.shuffle_rdp_upper(n, eps0, orders)
    assert np.all(lower <= upper * (1 + 1e-12)) and np.all(upper <= ub1) and np.all(upper < eps0)


def test_ub1_is_not_always_below_ub2():
    """The notes' "LB < UB1 < UB2 in every case" fails at small ε0 and large α: the i ≥ 3
    moment terms of UB1 outgrow UB2's sub-Gaussian exp(α²(e^ε0−1)²/n̄). The combined curve
    takes the minimum, so this costs nothing."""
    orders = np.array([200.0])
    assert S.shuffle_rdp_ub1(1000, 0.05, orders)[0] > 1.04 * S.shuffle_rdp_ub2(1000, 0.05, orders)[0]
    assert S.shuffle_rdp_upper(1000, 0.05, orders)[0] == S.shuffle_rdp_ub2(1000, 0.05, orders)[0]


def test_curves_saturate_near_eps0_and_real_orders_interpolate():
    big = np.array([1024.0])
    assert 0.85 < S.shuffle_rdp_lower(100, 1.0, big)[0] / 1.0 < 1.0
    assert 0.99 < S.shuffle_rdp_upper(100, 1.0, big)[0] < 1.0
    # Remark 5.3.2: (α−1)ε(α) at α = 2.5 is the midpoint of the values at 2 and 3.
    ub1 = S.shuffle_rdp_ub1(5000, 1.0, [2.0, 2.5, 3.0])
    assert 1.5 * ub1[1] == pytest.approx((ub1[0] + 2 * ub1[2]) / 2, rel=1e-12)
    assert S.shuffle_rdp_ub1(5000, 1.0, [1.5])[0] == pytest.approx(ub1[0], rel=1e-12)
    real = np.array([2.5, 7.3, 40.5])
    assert np.all(S.shuffle_rdp_lower(5000, 1.0, real) <= S.shuffle_rdp_upper(5000, 1.0, real))


@pytest.mark.parametrize("n,k,eps0", [(10**5, 100, 1.0), (10**6, 1000, 2.0), (6 * 10**4, 10**4, 1.5)])
def test_subsampled_orderings(n, k, eps0):
    orders = DEFAULT_ORDERS
    lower, ub = S.subsampled_shuffle_rdp_lower(n, k, eps0, orders), S.subsampled_shuffle_rdp_ub(n, k, eps0, orders)
    upper = S.subsampled_shuffle_rdp_upper(n, k, eps0, orders)
    assert np.all(lower <= upper) and np.all(upper <= ub) and np.all(upper <= S.shuffle_rdp_upper(k, eps0, orders))
    assert np.all(ub[:20] < S.shuffle_rdp_ub1(k, eps0, orders[:20]))  # subsampling helps at small α


@settings(derandomize=True, max_examples=60, deadline=None)
@given(log10_n=st.floats(0.0, 7.0), eps0=st.floats(0.01, 6.0), alpha=st.one_of(
    st.integers(2, 1024).map(float), st.floats(1.01, 300.0)))
def test_property_lower_curve_below_upper_curve(log10_n, eps0, alpha):
    n = max(1, int(10**log10_n))
    order = np.array([alpha])
    lower, upper = S.shuffle_rdp_lower(n, eps0, order)[0], S.shuffle_rdp_upper(n, eps0, order)[0]
    assert 0.0 <= lower <= upper * (1 + 1e-9) + 1e-300
    assert upper <= eps0
    if alpha == int(alpha) and eps0 >= 0.5:
        assert S.shuffle_rdp_ub1(n, eps0, order)[0] <= S.shuffle_rdp_ub2(n, eps0, order)[0] * (1 + 1e-12)


# --- FMT22 ---

def _fmt22_exact_epsilon(n, eps0, delta):
    """Bisection on the exact hockey-stick divergence of FMT22's full pair (all c, all x)."""
    q = math.exp(eps0) / (1 + math.exp(eps0))
    pieces_p, pieces_q = [], []
    for c, weight in enumerate(stats.binom.pmf(np.arange(n), n - 1, math.exp(-eps0))):
        x = np.arange(c + 2)
        low = stats.binom.pmf(x - 1, c, 0.5)  # A + 1 = x
        same = stats.binom.pmf(x, c, 0.5)     # A = x
        pieces_p.append(weight * (q * low + (1 - q) * same))
        pieces_q.append(weight * ((1 - q) * low + q * same))
    p_mass, q_mass = np.concatenate(pieces_p), np.concatenate(pieces_q)
    lo, hi = 0.0, eps0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if np.maximum(p_mass - math.exp(mid) * q_mass, 0).sum() <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("n,eps0", [(200, 1.0), (1000, 0.5), (600, 3.0)])
def test_fmt22_pld_matches_exact_hockey_stick(n, eps0):
    exact = _fmt22_exact_epsilon(n, eps0, 1e-6)
    every_c = S.fmt22_epsilon(n, eps0, 1e-6, 1, 1e-5, c_blocks=10**6)["epsilon"]
    blocked = S.fmt22_epsilon(n, eps0, 1e-6, 1, 1e-5)["epsilon"]
    dots = S.fmt22_epsilon(n, eps0, 1e-6, 1, 1e-4, connect_dots=True)["epsilon"]
    assert exact - 1e-9 <= every_c <= exact + 2e-5
    assert every_c - 1e-12 <= blocked <= exact + 1e-4  # coarser blocks of C: pessimistic, barely
    assert exact - 1e-9 <= dots <= exact + 1e-4
    assert S.shuffle_ldp_lower_epsilon(n, eps0, 1e-6)["epsilon"] <= exact


def test_fmt22_closed_form_formula_domain_and_numerical_is_tighter():
    n, eps0, delta = 10**4, 1.0, 1e-6
    e = math.e
    by_hand = math.log(1 + (e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n))
    closed = S.fmt22_closed_form_epsilon(n, eps0, delta)
    assert closed == pytest.approx(by_hand, rel=1e-13)
    numerical = S.fmt22_epsilon(n, eps0, delta)["epsilon"]
    assert S.shuffle_ldp_lower_epsilon(n, eps0, delta)["epsilon"] < numerical < closed
    assert not S.fmt22_closed_form_domain(1000, 3.0, 1e-6)
    with pytest.raises(ValueError, match=r"eps0=3.0 is outside FMT22 Thm 3.1's domain"):
        S.fmt22_closed_form_epsilon(1000, 3.0, 1e-6)
    with pytest.raises(ValueError, match="fmt-closed|FMT22"):
        S.shuffle_ldp_epsilon(1000, 3.0, 1e-6, 1, "fmt-closed")


def test_kov_composition_is_exact_on_its_atoms():
    # KOV15 Thm 3.3: T-fold (ε1, 0) is ((T − 2i)ε1, δ_i)-DP with
    # δ_i = Σ_{l<i} C(T,l)(e^{(T−l)ε1} − e^{(T−2i+l)ε1})/(1+e^ε1)^T, and this is tight.
    eps1, rounds, i = 0.3, 12, 3
    delta_i = sum(special.comb(rounds, l) * (math.exp((rounds - l) * eps1) - math.exp((rounds - 2 * i + l) * eps1))
                  for l in range(i)) / (1 + math.exp(eps1)) ** rounds
    assert S.kov_composition_epsilon(eps1, 0.0, rounds, delta_i) == pytest.approx((rounds - 2 * i) * eps1, rel=1e-9)
    assert S.kov_composition_epsilon(eps1, 0.0, rounds, delta_i * 1.01) < (rounds - 2 * i) * eps1
    assert S.kov_composition_epsilon(eps1, 1e-7, 1, 1e-7) == pytest.approx(eps1, rel=1e-12)
    # Optimal, so never above DRV's strong composition at the same total δ = Tδ1 + δ'.
    drv = advanced_composition(eps1, 1e-7, 100, 1e-6)[0]
    assert S.kov_composition_epsilon(eps1, 1e-7, 100, 100 * 1e-7 + 1e-6) <= drv


# --- composition ---

@pytest.mark.parametrize("rounds", [1, 5])
def test_pld_beats_rdp_where_the_notes_say_fmt_wins(rounds):
    # §3.10: "FMT22 + KOV15 wins only when T ≲ 10 and ε0 = 2"; the PLD-composed pair does too.
    n, eps0, delta = 10**4, 2.0, 1e-8
    rdp = S.shuffle_ldp_epsilon(n, eps0, delta, rounds, "rdp")["epsilon"]
    pld = S.fmt22_epsilon(n, eps0, delta, rounds, 1e-5)["epsilon"]
    one_round = S.fmt22_pld(n, eps0, 1e-5)
    per_round_kov = S.compose_approximate_dp(one_round.get_epsilon_for_delta, rounds, delta, "kov")["epsilon"]
    assert pld <= per_round_kov * (1 + 1e-9) and per_round_kov < rdp
    assert S.shuffle_ldp_lower_epsilon(n, eps0, delta, rounds)["epsilon"] <= pld


def test_rdp_beats_per_round_conversion_for_many_rounds():
    # §3.10 / Fig. 5.4: over many rounds the RDP ledger beats FMT22 numerical + KOV15.
    n, eps0, delta, rounds = 10**4, 0.5, 1e-8, 1000
    rdp = S.shuffle_ldp_epsilon(n, eps0, delta, rounds, "rdp")["epsilon"]
    one_round = S.fmt22_pld(n, eps0, 1e-5)
    kov = S.compose_approximate_dp(one_round.get_epsilon_for_delta, rounds, delta, "kov")["epsilon"]
    drv = S.compose_approximate_dp(one_round.get_epsilon_for_delta, rounds, delta, "drv")["epsilon"]
    assert rdp < kov / 3 and kov <= drv


def test_composed_within_basic_composition():
    n, eps0, rounds, delta1 = 10**4, 1.0, 20, 1e-9
    # PLD: T-fold ε at T·δ1 ≤ T·ε1(δ1).
    one = S.fmt22_epsilon(n, eps0, delta1, 1, 1e-4)["epsilon"]
    many = S.fmt22_epsilon(n, eps0, rounds * delta1, rounds, 1e-4)["epsilon"]
    assert many <= rounds * one
    # RDP: composed curve at δ ≤ T × the one-round conversion at δ/T.
    curve = S.shuffle_rdp_upper(n, eps0)
    assert rdp_to_dp(DEFAULT_ORDERS, rounds * curve, rounds * delta1).epsilon \
        <= rounds * rdp_to_dp(DEFAULT_ORDERS, curve, delta1).epsilon
    # KOV ≤ DRV ≤ basic for a per-round (ε1, δ1).
    kov = S.kov_composition_epsilon(one, delta1, rounds, 2 * rounds * delta1)
    drv = advanced_composition(one, delta1, rounds, rounds * delta1)[0]
    assert kov <= min(drv, rounds * one)


def test_top_level_results_are_json_and_best_is_the_minimum():
    result = S.shuffle_ldp_epsilon(10**4, 1.0, 1e-6, 3)
    json.dumps(result)
    assert {"epsilon", "delta", "method", "winner", "candidates", "bound"} <= set(result)
    valid = {name: c["epsilon"] for name, c in result["candidates"].items() if "epsilon" in c}
    assert set(valid) == {"fmt", "fmt-closed", "rdp"} and result["epsilon"] == min(valid.values())
    assert result["winner"] == "fmt" and "order" in result["candidates"]["rdp"]
    outside = S.shuffle_ldp_epsilon(1000, 3.0, 1e-6, 1)
    assert "error" in outside["candidates"]["fmt-closed"] and outside["winner"] in {"fmt", "rdp"}
    sub = S.subsampled_shuffle_epsilon(10**5, 1000, 1.0, 1e-6, 100)
    json.dumps(sub)
    assert {"epsilon", "delta", "method", "order", "at_cap", "baseline"} <= set(sub)
    assert sub["epsilon"] < sub["baseline"]["epsilon"]


@pytest.mark.parametrize("call,message", [
    (lambda: S.shuffle_ldp_epsilon(0, 1.0, 1e-6), r"n=0: must be an integer ≥ 1"),
    (lambda: S.shuffle_ldp_epsilon(10.5, 1.0, 1e-6), r"n=10.5: must be an integer ≥ 1"),
    (lambda: S.shuffle_ldp_epsilon(True, 1.0, 1e-6), r"n=True: must be an integer"),
    (lambda: S.shuffle_ldp_epsilon(100, 0.0, 1e-6), r"eps0=0.0: must be a number in \(0, inf\)"),
    (lambda: S.shuffle_ldp_epsilon(100, math.inf, 1e-6), r"eps0=inf: must be a number in \(0, inf\)"),
    (lambda: S.shuffle_ldp_epsilon(100, 1.0, 1.0), r"delta=1.0: must be a number in \(0, 1\)"),
    (lambda: S.shuffle_ldp_epsilon(100, 1.0, 1e-6, 0), r"rounds=0: must be an integer ≥ 1"),
    (lambda: S.shuffle_ldp_epsilon(100, 1.0, 1e-6, 1, "pld"), r"bound must be one of"),
    (lambda: S.subsampled_shuffle_epsilon(100, 101, 1.0, 1e-6), r"k must satisfy 2 ≤ k ≤ n = 100, got 101"),
    (lambda: S.subsampled_shuffle_epsilon(100, 1, 1.0, 1e-6), r"k=1: must be an integer ≥ 2"),
    (lambda: S.shuffle_rdp_ub1(100, 1.0, [2.0, 1.0]), r"orders must be finite Rényi orders > 1, got 1.0"),
    (lambda: S.fmt22_pld(100, 1.0, 0.0), r"value_discretization_interval=0.0: must be a number in \(0, inf\)"),
    (lambda: S.kov_composition_epsilon(0.1, 1.0, 2, 1e-6), r"delta1 must lie in \[0, 1\), got 1.0"),
    (lambda: S.compose_approximate_dp(lambda d: 0.1, 2, 1e-6, "kov15"), r"method must be 'kov' or 'drv'"),
])
def test_bad_parameters_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
