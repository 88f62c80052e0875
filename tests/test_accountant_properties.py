"""Property tests of the accountants over random parameters (issue: "at least 1000 random
parameter draws per accountant: never below a lower bound, never above the target after
calibration, monotone in rounds"; composed Gaussians against the exact μ-GDP value; the
orderings PLD ≤ RDP ≤ basic composition and lower bound ≤ UB1 ≤ UB2).

Every test is derandomized (the same draws on every run) and sized to run in seconds: RDP
curves at a few orders, small λ_max, small n wherever an exact lower bound is computed. A test
with fewer than 1000 draws says why next to its settings. Each property carries a comment
naming the kind of wrong implementation that would violate it.

P_vec (pvec_tight) already has its 1000-draw lower-bound test in tests/test_pvec_tight.py and
the paper-mode calibration its own in tests/test_ledger_properties.py; neither is repeated here.
"""
from __future__ import annotations

import math

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from pipeline.accounting import pnsgd
from pipeline.accounting import shuffle_gaussian as sg
from pipeline.accounting import shuffle_ldp as S
from pipeline.accounting.rdp import DEFAULT_ORDERS, rdp_to_dp

MANY = settings(derandomize=True, max_examples=1000, deadline=None, database=None)


def _settings(draws: int):
    """Fewer than 1000 draws, for a property whose single evaluation costs tens of ms."""
    return settings(derandomize=True, max_examples=draws, deadline=None, database=None)


def _log_uniform(low: float, high: float):
    """Floats spread evenly in log scale over [low, high]."""
    return st.floats(math.log(low), math.log(high)).map(math.exp)


def _log_uniform_int(low: int, high: int):
    """Integers spread evenly in log scale over [low, high]."""
    return st.floats(math.log(low), math.log(high + 1)).map(lambda x: min(high, max(low, int(math.exp(x)))))


# A handful of Rényi orders: UB1 costs ~100 µs per order, so the full DEFAULT_ORDERS (260
# orders, ~22 ms a curve) is kept for the test that runs fewer draws. Any subset of orders
# gives a valid (larger or equal) converted ε, so the properties stay true, only less tight.
COMPACT_ORDERS = np.array([2.0, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 128, 256])


# =========================================================================== shuffle_ldp


@MANY
@given(log10_n=st.floats(0.0, 7.0), eps0=st.floats(0.01, 6.0), alpha=st.integers(2, 256))
def test_shuffle_ldp_curves_exact_lower_below_every_upper_bound_below_the_ldp_curve(log10_n, eps0, alpha):
    n = max(1, int(10**log10_n))
    order = np.array([float(alpha)])
    lower = S.shuffle_rdp_lower(n, eps0, order)[0]
    ub1, ub2 = S.shuffle_rdp_ub1(n, eps0, order)[0], S.shuffle_rdp_ub2(n, eps0, order)[0]
    cor = S.shuffle_rdp_cor531(n, eps0, order)[0]  # +inf outside α⁴e^(5ε0) ≤ n/9
    ldp = S.ldp_rdp(eps0, order)[0]
    upper = S.shuffle_rdp_upper(n, eps0, order)[0]
    slack = 1 + 1e-9  # log-space sums on both sides; n = 1 makes lower = ldp exactly
    # `lower` is the exact divergence of shuffled binary RR, itself an ε0-LDP randomizer, so every
    # valid upper bound must sit above it. Violated by an upper formula that is too small, e.g.
    # UB1/UB2 with n̄ = n instead of ⌊(n−1)/(2e^ε0)⌋ + 1, or Cor 5.3.1 applied outside its
    # domain; or by an overstated lower bound (at n = 1 it must equal the ε0-LDP curve).
    # Not caught here: UB1/UB2 without their exp(ε0α − (n−1)/(8e^ε0)) tail term, since the
    # shuffled-RR divergence stays below the tail-free formulas too (checked by mutation).
    assert 0.0 <= lower
    for name, bound in (("UB1", ub1), ("UB2", ub2), ("Cor 5.3.1", cor), ("eps0-LDP", ldp), ("combined", upper)):
        assert lower <= bound * slack, (name, lower, bound)
    # The combined curve is the pointwise minimum of the valid bounds, hence ≤ the randomizer's
    # own pure-LDP RDP (< ε0). Violated if the LDP curve is left out of the minimum (UB1 and UB2
    # exceed ε0 at small n), or if the minimum skips any bound.
    assert upper == min(ub1, ub2, cor, ldp)
    assert upper <= ldp <= eps0
    # Notes' ordering UB1 ≤ UB2: it holds at integer orders once ε0 ≥ 0.5 (below that UB1's
    # higher moments outgrow UB2 at large α: tests/test_shuffle_ldp_accounting.py
    # test_ub1_is_not_always_below_ub2). A UB1 that is too large breaks it, e.g. one computed
    # with n̄/2 while UB2 keeps n̄.
    if eps0 >= 0.5:
        assert ub1 <= ub2 * (1 + 1e-12), (ub1, ub2)


@MANY
@given(n=_log_uniform_int(1, 10**5), eps0=st.floats(0.01, 6.0), log10_delta=st.floats(-10.0, -2.0),
       rounds=st.integers(1, 6), more=st.integers(0, 10**4))
def test_shuffle_ldp_composed_rdp_is_monotone_in_rounds_and_above_the_true_lower_bound(
        n, eps0, log10_delta, rounds, more):
    delta = 10.0**log10_delta
    curve = S.shuffle_rdp_upper(n, eps0, COMPACT_ORDERS)
    eps_t = rdp_to_dp(COMPACT_ORDERS, rounds * curve, delta).epsilon
    eps_more = rdp_to_dp(COMPACT_ORDERS, (rounds + more) * curve, delta).epsilon
    # More rounds never cost less. Violated by a composition that is not additive in the curve
    # (e.g. averaging over rounds) or a conversion that is not monotone in the curve.
    assert eps_t <= eps_more
    # Never below the true (ε, δ) of T shuffles of binary RR (an ε0-LDP randomizer), computed
    # with an optimistic PLD (grid 1e-3, each round rounded down: a lower estimate). Violated by
    # any RDP curve that is not an upper bound, or by a conversion that is not valid (e.g.
    # converting the lower-bound curve instead, or dropping the log(1/δ)/(α−1) term).
    lower = S.shuffle_ldp_lower_epsilon(n, eps0, delta, rounds, 1e-3)["epsilon"]
    assert lower <= eps_t * (1 + 1e-9), (lower, eps_t)


# The full accountant (`shuffle_ldp_epsilon(bound="rdp")`, 260 orders) costs ~22 ms a call (two
# per draw) and the FMT22 PLD ~5-15 ms even at a coarse grid: 100 draws keep this test near
# 5 s. The 1000-draw test above checks the same orderings on the compact grid.
@_settings(100)
@given(n=_log_uniform_int(1, 10**5), eps0=st.floats(0.05, 5.0), log10_delta=st.floats(-10.0, -3.0),
       rounds=st.integers(1, 4), more=st.integers(1, 1000))
def test_shuffle_ldp_accountants_at_full_resolution_never_below_the_true_lower_bound(
        n, eps0, log10_delta, rounds, more):
    delta = 10.0**log10_delta
    lower = S.shuffle_ldp_lower_epsilon(n, eps0, delta, rounds, 1e-3)["epsilon"]
    result = S.shuffle_ldp_epsilon(n, eps0, delta, rounds, bound="rdp")
    rdp = result["epsilon"]
    # The public accountant is the module's curve times T, converted (checked at the order it
    # reports), and monotone in rounds. Violated by rounds ignored, or applied after conversion.
    at = np.array([result["order"]])
    assert rdp == rdp_to_dp(at, rounds * S.shuffle_rdp_upper(n, eps0, at), delta).epsilon
    assert rdp <= S.shuffle_ldp_epsilon(n, eps0, delta, rounds + more, bound="rdp")["epsilon"]
    compact = rdp_to_dp(COMPACT_ORDERS, rounds * S.shuffle_rdp_upper(n, eps0, COMPACT_ORDERS), delta).epsilon
    # Soundness (see above) and consistency: the accountant scans a superset of COMPACT_ORDERS,
    # so it can only do better. Violated if the accountant's curve or rounds handling differs
    # from the module's own curve.
    assert lower <= rdp * (1 + 1e-9) and rdp <= compact * (1 + 1e-12), (lower, rdp, compact)
    # FMT22's dominating pair, PLD-composed with losses rounded up (coarse blocks of C are
    # pessimistic too): must also dominate the exact shuffled-RR pair. Violated by an optimistic
    # rounding, a dropped infinity mass, or a pair that is not dominating.
    fmt = S.fmt22_epsilon(n, eps0, delta, rounds, 1e-3, c_blocks=32)["epsilon"]
    assert lower <= fmt * (1 + 1e-9), (lower, fmt)


# =========================================================================== shuffle_gaussian


@MANY
@given(n=_log_uniform_int(1, 10**9), sigma=_log_uniform(0.3, 30.0), lambda_max=st.integers(2, 64),
       factor=_log_uniform(1.0001, 100.0), log10_delta=st.floats(-12.0, -2.0), rounds=st.integers(1, 10**4),
       more=st.integers(1, 10**4))
def test_shuffle_gaussian_rdp_between_its_bounds_and_monotone(n, sigma, lambda_max, factor, log10_delta, rounds, more):
    curve = sg.shuffle_gaussian_rdp(n, sigma, lambda_max)
    plain = sg.gaussian_rdp(sigma, lambda_max)  # λ/(2σ²): Cor. 1, the unshuffled Gaussian
    # Notes §3.3 (and test_bounds_and_monotonicity_in_n): max(0, λ/(2σ²) − log n) ≤ ε_SG,n(λ) ≤
    # λ/(2σ²), with equality on both sides at n = 1. Violated by any curve off by a constant
    # factor (even 1 %), divided by λ instead of λ − 1, or missing the "all λ balls in one bin"
    # term n·n^{−λ}·e^{λ(λ−1)/(2σ²)} that holds it above λ/(2σ²) − log n.
    assert np.all(curve <= plain * (1 + 1e-12))
    assert np.all(curve >= np.maximum(0.0, plain - math.log(n)) * (1 - 1e-12))
    # Rényi divergence is non-decreasing in the order. Violated by a recurrence that is wrong at
    # some orders only (n + 1 < λ_max takes the binary-powering path, the rest Miller's); curves
    # indexed off by one (entry i holding order i + 3) are caught by the bounds above.
    assert np.all(np.diff(curve) >= -1e-12 * curve[1:])
    # Non-increasing in n (Conjecture 1, proven in notes §3.4): shuffling more reports together
    # never hurts. Violated by an n-dependence with the wrong sign (e.g. n^{+λ}).
    bigger = min(10**9, max(n + 1, int(n * factor)))
    assert np.all(sg.shuffle_gaussian_rdp(bigger, sigma, lambda_max) <= curve * (1 + 1e-10))
    # Composed over rounds by the public accountant: T times the curve, converted; monotone in
    # rounds and never worse than the unshuffled Gaussian at the same orders. Violated by a
    # rounds multiplier applied to the conversion instead of the curve, or rounds ignored.
    delta = 10.0**log10_delta
    one = sg.shuffle_gaussian_epsilon(n, sigma, delta, rounds, lambda_max)["epsilon"]
    many = sg.shuffle_gaussian_epsilon(n, sigma, delta, rounds + more, lambda_max)["epsilon"]
    assert one == rdp_to_dp(sg.rdp_orders(lambda_max), rounds * curve, delta).epsilon
    assert one <= many
    assert one <= rdp_to_dp(sg.rdp_orders(lambda_max), rounds * plain, delta).epsilon * (1 + 1e-12)


# =========================================================================== pnsgd


def _pnsgd_problem(draw):
    """A valid fixed-noise PNSGD setting: ρ ≤ β, η ≤ 2/(β+ρ)."""
    smoothness = draw(_log_uniform(0.1, 10.0))
    strong_convexity = smoothness * draw(st.floats(0.0, 1.0))
    step_size = 2.0 / (smoothness + strong_convexity) * draw(st.floats(0.01, 1.0))
    return {"lipschitz": draw(_log_uniform(0.1, 10.0)), "step_size": step_size,
            "diameter": draw(_log_uniform(0.1, 100.0)), "smoothness": smoothness,
            "strong_convexity": strong_convexity, "noise": draw(st.sampled_from(pnsgd.NOISES))}


pnsgd_problems = st.composite(lambda draw: _pnsgd_problem(draw))()


@MANY
@given(problem=pnsgd_problems, n=_log_uniform_int(1, 10**7), sigma=_log_uniform(0.1, 50.0),
       epsilon=st.floats(0.0, 10.0), step=st.floats(0.0, 2.0))
def test_pnsgd_shuffled_delta_between_best_and_worst_index_and_falling_in_epsilon(problem, n, sigma, epsilon, step):
    def delta(eps, **kwargs):
        return pnsgd.pnsgd_delta(n, sigma, eps, **problem, **kwargs)["delta"]

    shuffled = delta(epsilon)
    worst = delta(epsilon, variant="per_index")            # entry i = n: δ = A
    best = delta(epsilon, variant="per_index", index=1)    # entry i = 1: δ = A·B^{n−1}
    stopped = delta(epsilon, variant="random_stop")        # baseline A/(n(1−B))
    # Thm 2 is the average over positions of Thm 1's δ_i = A·B^{n−i}, so it lies between the
    # best and the worst position, and below the randomly-stopped baseline (Σ_{j<n} B^j ≤ 1/(1−B)).
    # Violated by Bⁿ in place of the mean power (1 − Bⁿ)/(n(1 − B)), a missing 1/n, or B and
    # 1 − B swapped.
    assert best * (1 - 1e-12) <= shuffled <= worst * (1 + 1e-12), (best, shuffled, worst)
    assert shuffled <= stopped * (1 + 1e-12), (shuffled, stopped)
    # A privacy profile is non-increasing in ε (the bisection in pnsgd_epsilon relies on it).
    # Violated by a hockey-stick with the e^ε factor on the wrong side.
    assert delta(epsilon + step) <= shuffled * (1 + 1e-12)


@MANY
@given(problem=pnsgd_problems, n=_log_uniform_int(1, 10**7), sigma=_log_uniform(0.1, 50.0),
       log10_delta=st.floats(-12.0, -1.0), factor=_log_uniform(1.01, 10.0),
       variant=st.sampled_from(pnsgd.VARIANTS), epochs=st.integers(1, 20), more=st.integers(1, 20),
       limit_eps=st.floats(0.0, 10.0))
def test_pnsgd_calibrated_epsilon_meets_its_target_and_is_monotone(problem, n, sigma, log10_delta, factor,
                                                                   variant, epochs, more, limit_eps):
    delta = 10.0**log10_delta

    def result(noise_level, **kwargs):
        return pnsgd.pnsgd_epsilon(n, noise_level, delta, variant=variant, **problem, **kwargs)

    def delta_at(eps):
        return pnsgd.pnsgd_delta(n, sigma, eps, variant=variant, **problem)["delta"]

    eps = result(sigma)["epsilon"]
    # Never above the target after calibration: the ε it returns reaches δ. Violated by a
    # bisection that returns its lower end (or any ε a little too small, e.g. 0.999·ε), or by a
    # δ(ε) that is not the one it inverted.
    assert delta_at(eps) <= delta
    # More noise, less ε (A falls and B falls as σ grows, for every variant). Violated by the
    # noise entering A or B inverted (σ/L instead of L/σ). Tolerance: the bisection width.
    assert result(sigma * factor)["epsilon"] <= eps + 2e-10 * max(1.0, eps)
    # Basic composition over E epochs: E·ε₀ with ε₀ calibrated to δ/E (itself never above its
    # target), hence ≥ one epoch's ε and non-decreasing in E. Violated by ε₀ calibrated to δ·E
    # or δ, or an ε not multiplied by E.
    basic = result(sigma, epochs=epochs, composition="basic")
    if epochs > 1:
        assert basic["per_epoch_delta"] == delta / epochs and delta_at(basic["per_epoch_epsilon"]) <= delta / epochs
        assert basic["epsilon"] == epochs * basic["per_epoch_epsilon"]
    assert eps <= basic["epsilon"] * (1 + 1e-12)
    assert basic["epsilon"] <= result(sigma, epochs=epochs + more, composition="basic")["epsilon"] * (1 + 1e-12)
    # calibrate_c1: the n → ∞ limit δ* it implies never exceeds the requested one (notes' rule).
    for noise in pnsgd.NOISES:
        c1 = pnsgd.calibrate_c1(limit_eps, delta, noise)
        assert pnsgd.shuffled_limit_delta(limit_eps, c1, noise) <= delta * (1 + 1e-12)


# The per-epoch privacy profile (4000 points) becomes a PLD through a convex hull built in
# Python, ~30-40 ms a call whatever the parameters (more when ε is in the hundreds, so the noise
# is drawn relative to L: the per-step ratio 2L/σ stays ≤ 3); two calls per draw, so 60 draws
# (~5 s). The 1000-draw test above checks monotonicity in epochs under basic composition.
@_settings(60)
@given(problem=pnsgd_problems, n=_log_uniform_int(1, 10**6), ratio=_log_uniform(0.05, 3.0),
       log10_delta=st.floats(-10.0, -3.0), epochs=st.integers(2, 6), more=st.integers(1, 6),
       variant=st.sampled_from(["shuffled", "per_index"]))
def test_pnsgd_pld_composition_is_monotone_in_epochs_and_below_basic(problem, n, ratio, log10_delta, epochs, more,
                                                                     variant):
    delta, grid = 10.0**log10_delta, 1e-3
    sigma = 2.0 * problem["lipschitz"] / ratio

    def result(e):
        return pnsgd.pnsgd_epsilon(n, sigma, delta, epochs=e, pld_discretization=grid, variant=variant, **problem)

    fewer, larger = result(epochs), result(epochs + more)
    single = pnsgd.pnsgd_epsilon(n, sigma, delta, variant=variant, **problem)["epsilon"]
    # PLD composition ≤ basic composition (min of two valid bounds), and ≥ one epoch's ε at the
    # same δ (composition only adds loss).
    assert fewer["epsilon"] <= fewer["basic_composition_epsilon"]
    assert single <= fewer["epsilon"] + 1e-9 * max(1.0, single)
    # Discretization: the profile PMF is the Connect-the-Dots PMF of the sampled points (ε grid of
    # spacing top/4000), dominated by rounding each epoch's loss up to the next point, then
    # rounded up to the loss grid: an E-epoch value is overstated by at most E·(grid + spacing).
    setting = pnsgd._setting(n, sigma, problem["lipschitz"], problem["step_size"], problem["diameter"],
                             problem["smoothness"], problem["strong_convexity"], problem["noise"], "fixed",
                             variant, None, None, None, None)
    spacing = float(pnsgd._profile_grid(setting, delta * 1e-6 / epochs)[0][1])
    slack = epochs * (grid + spacing)
    # Monotone in epochs up to that slack: the larger count is never understated. Violated by
    # composing a different number of epochs than asked, or a profile read at ε/E.
    assert fewer["epsilon"] <= larger["epsilon"] + slack, (fewer["epsilon"], larger["epsilon"], slack)
    # Gaussian noise at the last position (Thm 1, i = n): δ(ε) = θ(2L/σ, ε), the Gaussian
    # mechanism, so E epochs are exactly μ-GDP with μ = 2L√E/σ. Violated by a composition that
    # is skipped (ε stuck at one epoch's) or doubled, or a profile PMF that is not pessimistic.
    if variant == "per_index" and problem["noise"] == "gaussian":
        exact = _gdp_epsilon(ratio * math.sqrt(epochs), delta)
        assert exact * (1 - 1e-9) <= fewer["epsilon"] <= exact + slack, (exact, fewer["epsilon"], slack)


# =========================================================================== Gaussian: exact μ-GDP


def _gdp_delta(eps: float, mu: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), in log space (no cancellation)."""
    log_a, log_b = special.log_ndtr(-eps / mu + mu / 2.0), special.log_ndtr(-eps / mu - mu / 2.0)
    return math.exp(log_a) * -math.expm1(min(0.0, eps + log_b - log_a))


def _gdp_epsilon(mu: float, delta: float) -> float:
    """The exact ε of μ-GDP at δ, by bisection (rounded up; to 1e-13 relative)."""
    if _gdp_delta(0.0, mu) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while _gdp_delta(high, mu) > delta:
        low, high = high, 2.0 * high
    while high - low > 1e-13 * max(1.0, high):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if _gdp_delta(mid, mu) > delta else (low, mid)
    return high


def test_exact_gdp_epsilon_matches_dp_accountings_hockey_stick():
    """The reference used below, against an independent formula (pnsgd's θ, dp_accounting's)."""
    for mu, delta in ((0.3, 1e-5), (1.0, 1e-6), (4.0, 1e-10)):
        eps = _gdp_epsilon(mu, delta)
        assert abs(pnsgd.gaussian_hockey_stick(mu, eps) - delta) <= 1e-9 * delta
        gaussian = pld_lib.from_gaussian_mechanism(1.0 / mu, value_discretization_interval=1e-4)
        assert eps <= gaussian.get_epsilon_for_delta(delta) <= eps + 1e-4


# T-fold composition of N(0, σ²) with sensitivity 1 is exactly μ-GDP, μ = √T/σ.
# Discretization: dp_accounting's pessimistic PLD on a grid Δ; the composed loss of T rounds,
# each rounded up by less than Δ, exceeds the true one by less than TΔ, so the PLD's ε at δ is
# at most exact + TΔ (Connect-the-Dots, dp_accounting's default, is dominated by the
# rounded-up PMF on the same grid: Doroshenko et al. 2022). We pick Δ = 0.008/T (TΔ = 0.008);
# the remaining 0.002 of the 0.01 tolerance covers the tail mass (≤ 1e-15 added to δ ≥ 1e-10
# by self_compose, ≤ e^−50 by the Gaussian PLD's truncation). The PLDAccountant collapses the
# T events into one Gaussian of σ/√T (an exact identity), one grid step: we use Δ = 0.008.
# Observed: at most 7e-4 above exact, and RDP at least 0.014 above the PLDs, over these draws.
# Cost: ~15-40 ms per draw (Δ ∝ 1/T keeps the grid near 2500·μ·√T bins), so 200 draws (~3 s).
@_settings(200)
@given(mu=_log_uniform(0.05, 4.0), rounds=st.integers(1, 16), log10_delta=st.floats(-10.0, -3.0))
def test_composed_gaussian_pld_and_rdp_against_the_exact_gdp_epsilon(mu, rounds, log10_delta):
    delta = 10.0**log10_delta
    sigma = math.sqrt(rounds) / mu
    exact = _gdp_epsilon(mu, delta)
    grid = 0.008 / rounds
    composed = pld_lib.from_gaussian_mechanism(sigma, sensitivity=1.0, value_discretization_interval=grid)
    if rounds > 1:
        composed = composed.self_compose(rounds)
    pld = composed.get_epsilon_for_delta(delta)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=0.008)
    collapsed = accountant.compose(dp_event.GaussianDpEvent(sigma), rounds).get_epsilon(delta)
    # Pessimistic PLDs are never below the exact value (an optimistic or mis-scaled PLD, e.g.
    # sensitivity 2 ↔ 1 or σ² for σ, is), and never more than the discretization above it (a
    # PLD composed T + 1 times, or with tails dropped into δ the wrong way, is).
    for value in (pld, collapsed):
        assert exact * (1 - 1e-6) <= value <= exact + 0.01, (exact, pld, collapsed)
    # RDP (α/(2σ²)·T over DEFAULT_ORDERS, CKS20 conversion) is a valid but looser bound: at least
    # the exact ε, and at least the PLD's value (no tolerance needed: the PLDs are within 7e-4 of
    # exact, the conversion's overhead is larger). Violated by a conversion missing a term, or a
    # curve composed fewer than T times.
    rdp = rdp_to_dp(DEFAULT_ORDERS, rounds * DEFAULT_ORDERS / (2.0 * sigma**2), delta).epsilon
    assert exact * (1 - 1e-9) <= rdp, (exact, rdp)
    assert pld <= rdp and collapsed <= rdp, (pld, collapsed, rdp)


@MANY
@given(sigma=_log_uniform(0.5, 100.0), rounds=_log_uniform_int(2, 10**4), log10_delta=st.floats(-12.0, -3.0))
def test_composed_gaussian_rdp_between_exact_and_basic_composition(sigma, rounds, log10_delta):
    delta = 10.0**log10_delta
    exact = _gdp_epsilon(math.sqrt(rounds) / sigma, delta)
    rdp = rdp_to_dp(DEFAULT_ORDERS, rounds * DEFAULT_ORDERS / (2.0 * sigma**2), delta).epsilon
    basic = rounds * _gdp_epsilon(1.0 / sigma, delta / rounds)  # T rounds, each exact at δ/T
    # Exact ≤ RDP: the RDP route is a valid upper bound (a wrong conversion breaks this).
    assert exact * (1 - 1e-9) <= rdp, (exact, rdp)
    # RDP ≤ basic composition. Not a theorem: it fails at T = 1 (the RDP conversion is looser
    # than the exact single-round ε) and at a few small T with δ ≥ 1e-2 or σ ≤ 0.4 (ε of tens,
    # where the conversion's overhead exceeds the (T − √T)·μ₁·√(2 log(1/δ)) that composition
    # saves). The domain here (T ≥ 2, σ ≥ 0.5, δ ≤ 1e-3) is where it held on 20 000 random
    # draws. Violated by an RDP curve composed more than T times (e.g. 3T).
    assert rdp <= basic, (rdp, basic)
    # Monotone in rounds through the exact value as well (sanity of the reference itself).
    assert _gdp_epsilon(math.sqrt(rounds - 1) / sigma, delta) <= exact
