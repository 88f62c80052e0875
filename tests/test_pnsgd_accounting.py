"""Seed 002's PNSGD accountant (Sordello, Bu, Dong, Su) against the notes' reference values.

Tolerances: the notes (shared/notes/seed-002.md §3.3, §4.2) print 4-7 significant digits,
some truncated rather than rounded (0.21999 for 0.2199984), so a printed value is matched
to one unit of its last digit.
"""
from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import common, privacy_loss_distribution, privacy_loss_mechanism
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.accounting import pnsgd

EPS = 1.0  # App. G: ε = 1 throughout


def printed(value, reference):
    """|value − reference| ≤ one unit in the last printed digit of `reference` (a string)."""
    mantissa = reference.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(reference.lower().split("e")[1]) if "e" in reference.lower() else 0
    unit = 10.0 ** (exponent - decimals)
    return abs(value - float(reference)) <= unit * (1.0 + 1e-9)


# --------------------------------------------------------------------------- primitives (§3.1, §3.3)


@pytest.mark.parametrize("r, reference", [(0.5, "0.0068296"), (1.0, "0.1269367"), (2.0, "0.5098617"),
                                          (5.0, "0.9798517")])
def test_theta_test_vectors(r, reference):
    assert printed(pnsgd.gaussian_hockey_stick(r, EPS), reference)


def test_theta_complement_test_vector_and_lemma_8_gap():
    # 1 − θ(10) = 9.4082e−7 exactly; Lemma 8's expansion would give 9.80e−7.
    value = pnsgd.gaussian_hockey_stick_complement(10.0, EPS)
    assert printed(value, "9.4082e-7")
    lemma_8 = math.exp(EPS / 2) * math.exp(-100 / 8) * (4 / 10) / math.sqrt(2 * math.pi)
    assert printed(lemma_8, "9.80e-7") and lemma_8 > value * 1.04


def test_theta_keeps_relative_precision_against_mpmath():
    mpmath.mp.dps = 50
    worst = 0.0
    for r in (1e-3, 0.03, 0.1, 0.5, 2.0, 10.0, 40.0):
        for eps in (0.0, 1e-3, 0.01, 1.0, 5.0, 30.0):
            q = lambda t: mpmath.ncdf(-t)
            exact = q(mpmath.mpf(eps) / r - mpmath.mpf(r) / 2) - mpmath.e**eps * q(mpmath.mpf(eps) / r + mpmath.mpf(r) / 2)
            for got, want in ((pnsgd.gaussian_hockey_stick(r, eps), exact),
                              (pnsgd.gaussian_hockey_stick_complement(r, eps), 1 - exact)):
                if want > 1e-300:
                    worst = max(worst, abs(got / float(want) - 1.0))
    assert worst < 1e-9


def test_hockey_sticks_match_dp_accounting_mechanisms():
    for r in (0.3, 1.0, 4.0):
        gaussian = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=1.0 / r)
        laplace = privacy_loss_mechanism.LaplacePrivacyLoss(parameter=1.0 / r)
        for eps in (0.0, 0.5, 2.0):
            assert pnsgd.gaussian_hockey_stick(r, eps) == pytest.approx(gaussian.get_delta_for_epsilon(eps), rel=1e-9, abs=1e-15)
            assert pnsgd.laplace_hockey_stick(r, eps) == pytest.approx(laplace.get_delta_for_epsilon(eps), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("n, shuffled, random_stop", [(10, "0.46603", "2.5305"), (100, "0.21999", "0.25305"),
                                                      (1000, "0.0253054", "0.0253054")])
def test_shuffled_and_random_stop_test_vectors(n, shuffled, random_stop):
    a = pnsgd.gaussian_hockey_stick(2.0, EPS)
    one_minus_b = pnsgd.gaussian_hockey_stick_complement(5.0, EPS)
    assert printed(pnsgd.shuffled_delta(a, one_minus_b, n), shuffled)
    assert printed(pnsgd.random_stop_delta(a, one_minus_b, n), random_stop)


def test_laplace_shuffled_test_vector():
    # A = 1 − e^{−0.5} needs L/v = 1; B = 1 − e^{−1.5} needs M(b−a)/(2ηv) = 2: L = v = 10, η = .1, b − a = 4.
    a, one_minus_b = pnsgd.step_constants(EPS, 10.0, 10.0, 0.1, 4.0, noise="laplace")
    assert a == pytest.approx(1 - math.exp(-0.5), rel=1e-15)
    assert one_minus_b == pytest.approx(math.exp(-1.5), rel=1e-15)
    assert printed(pnsgd.shuffled_delta(a, one_minus_b, 10), "0.162221")


# --------------------------------------------------------------------------- Thm 4 (§4.2, Laplace)

LAPLACE = {"lipschitz": 10.0, "step_size": 0.1, "diameter": 1.0, "smoothness": 0.5, "noise": "laplace",
               "schedule": "calibrated", "c1": 1e5, "c2": 2.0}
LAPLACE_TABLE = [  # n, v(n), A, 1 − B, δ, n(δ − δ*)
    (10**3, "7.162", "0.59191", "0.8203", "7.2161e-4", "0.716"),
    (10**4, "6.739", "0.62614", "0.7851", "7.9752e-5", "0.737"),
    (10**5, "4.551", "0.81681", "0.5496", "1.4863e-5", "0.880"),
    (10**6, "2.012", "0.98855", "0.1374", "7.1950e-6", "1.130"),
    (10**7, "1.081", "0.99984", "1.616e-2", "6.1856e-6", "1.203"),
    (10**8, "0.724", None, "1.645e-3", "6.0774e-6", "1.212"),
    (10**10, "0.434", None, "1.649e-5", "6.0654e-6", "1.213"),
]


def test_laplace_limit():
    assert printed(pnsgd.shuffled_limit_delta(EPS, 1e5, "laplace"), "6.0653e-6")


@pytest.mark.parametrize("n, v, a, one_minus_b, delta, scaled_gap", LAPLACE_TABLE)
def test_laplace_calibrated_table(n, v, a, one_minus_b, delta, scaled_gap):
    result = pnsgd.pnsgd_delta(n, None, EPS, **LAPLACE)
    assert printed(result["sigma"], v)
    if a is not None:
        assert printed(result["a"], a)
    else:
        assert result["a"] > 0.9999
    assert printed(result["one_minus_b"], one_minus_b)
    assert printed(result["delta"], delta)
    assert printed(n * (result["delta"] - result["delta_limit"]), scaled_gap)
    # C1 = 1e5: Bⁿ ≈ 0, so the randomly-stopped baseline coincides (trap 9).
    assert pnsgd.pnsgd_delta(n, None, EPS, variant="random_stop", **LAPLACE)["delta"] == pytest.approx(result["delta"], rel=1e-12)


# --------------------------------------------------------------------------- Thm 5 (§4.2, Gaussian)

GAUSSIAN = {"lipschitz": 10.0, "diameter": 1.0, "smoothness": 0.5, "schedule": "calibrated", "c1": 1e5, "c2": 100.0}
GAUSSIAN_TABLE = [  # n, σ(n) at η = .1, δ at η = .1, δ/δ*, δ at η = .02, δ at η = .01
    (10**3, "2.717", "9.468e-3", "3122", "2.929e-3", "4.399e-4"),
    (10**4, "2.717", "9.468e-4", "312", "2.929e-4", "4.399e-5"),
    (10**5, "2.717", "9.475e-5", "31.2", "2.932e-5", "4.406e-6"),
    (10**6, "2.673", "1.0140e-5", "3.34", "3.237e-6", "5.021e-7"),
    (10**7, "2.095", "3.6257e-6", "1.196", "1.731e-6", "4.032e-7"),
    (10**8, "1.605", "3.3382e-6", "1.101", "2.222e-6", "7.328e-7"),
    (10**10, "1.169", "3.2039e-6", "1.057", "2.757e-6", "1.291e-6"),
    (10**12, "0.961", "3.1511e-6", "1.039", "2.961e-6", "1.697e-6"),
    (10**15, "0.786", "3.1134e-6", "1.027", "3.058e-6", "2.119e-6"),
]


def test_gaussian_limit():
    assert printed(pnsgd.shuffled_limit_delta(EPS, 1e5, "gaussian"), "3.0327e-6")


@pytest.mark.parametrize("n, sigma, delta, ratio, delta_02, delta_01", GAUSSIAN_TABLE)
def test_gaussian_calibrated_table(n, sigma, delta, ratio, delta_02, delta_01):
    result = pnsgd.pnsgd_delta(n, None, EPS, step_size=0.1, **GAUSSIAN)
    assert printed(result["sigma"], sigma)
    assert printed(result["delta"], delta)
    assert printed(result["delta"] / result["delta_limit"], ratio)
    assert printed(pnsgd.pnsgd_delta(n, None, EPS, step_size=0.02, **GAUSSIAN)["delta"], delta_02)
    assert printed(pnsgd.pnsgd_delta(n, None, EPS, step_size=0.01, **GAUSSIAN)["delta"], delta_01)


def test_gaussian_calibrated_approaches_limit_from_above_and_below():
    # Fig. 3: η = .1 stays above δ*_G; η = .01 dips below and climbs back.
    limit = pnsgd.shuffled_limit_delta(EPS, 1e5)
    high = [pnsgd.pnsgd_delta(10**k, None, EPS, step_size=0.1, **GAUSSIAN)["delta"] for k in (6, 8, 10, 12, 15)]
    low = [pnsgd.pnsgd_delta(10**k, None, EPS, step_size=0.01, **GAUSSIAN)["delta"] for k in (6, 8, 10, 12, 15)]
    assert all(d > limit for d in high) and np.all(np.diff(high) < 0)
    assert all(d < limit for d in low) and np.all(np.diff(low[1:]) > 0)


def test_calibrate_c1_gives_the_target_limit():
    for noise in pnsgd.NOISES:
        c1 = pnsgd.calibrate_c1(0.5, 1e-6, noise)
        assert pnsgd.shuffled_limit_delta(0.5, c1, noise) == pytest.approx(1e-6, rel=1e-12)


# --------------------------------------------------------------------------- Thms 6, 7 (§4.2, online)

ONLINE = {"lipschitz": 10.0, "step_size": 0.01, "diameter": 1.0, "smoothness": 0.5, "schedule": "online",
              "variant": "per_index", "index": 100, "c1": 100.0, "c2": 100.0, "alpha": 1.5}
LIMIT_ARGS = (EPS, 100, 10.0, 0.01, 1.0, 1.0, 100.0, 100.0, 1.5)
ONLINE_TABLE = [  # n, δ_100(n) Laplace, Gaussian
    (10**3, "2.597e-4", "6.474e-15"),
    (10**4, "4.150e-7", "1.475e-20"),
    (10**5, "4.389e-8", "2.115e-22"),
    (10**6, "2.151e-8", "5.407e-23"),
    (10**7, "1.717e-8", "3.499e-23"),
    (10**8, "1.599e-8", "3.046e-23"),
]


def test_online_constants_and_limits():
    laplace = pnsgd.pnsgd_delta(100, None, EPS, noise="laplace", **ONLINE)
    gaussian = pnsgd.pnsgd_delta(100, None, EPS, **ONLINE)
    assert printed(laplace["delta"], "0.356025")  # n = i: δ = A_i
    assert printed(gaussian["delta"], "0.0495035")
    assert printed(gaussian["sigma_index"], "26.73")
    assert printed(pnsgd.online_limit_delta(*LIMIT_ARGS, noise="laplace"), "1.5588e-8")
    assert printed(pnsgd.online_limit_delta(*LIMIT_ARGS, noise="laplace", lower=True), "1.5354e-8")
    assert printed(pnsgd.online_limit_delta(*LIMIT_ARGS, noise="gaussian"), "3.0080e-23")
    assert printed(pnsgd.online_limit_delta(*LIMIT_ARGS, noise="gaussian", lower=True), "2.7118e-23")


@pytest.mark.parametrize("n, laplace, gaussian", ONLINE_TABLE)
def test_online_finite_n_table(n, laplace, gaussian):
    assert printed(pnsgd.pnsgd_delta(n, None, EPS, noise="laplace", **ONLINE)["delta"], laplace)
    result = pnsgd.pnsgd_delta(n, None, EPS, **ONLINE)
    assert printed(result["delta"], gaussian)
    sigma_last = {10**3: "18.08", 10**6: "9.61", 10**8: "7.86"}.get(n)
    if sigma_last:
        assert printed(result["sigma_last"], sigma_last)


def test_online_finite_n_crosses_the_paper_limit_near_2e9():
    # δ^{*,o} bounds the limit from above, so δ_100(n) ends below it (notes §3.5: n ≈ 2e9).
    limit = pnsgd.online_limit_delta(*LIMIT_ARGS, noise="laplace")
    args = (EPS, 100, 10.0, 0.01, 1.0, 1.0, 100.0, 100.0, 1.5, "laplace")
    assert pnsgd.online_delta(args[0], 10**9, *args[1:]) > limit > pnsgd.online_delta(args[0], 3 * 10**9, *args[1:])


def test_online_worst_user_is_the_latest():
    laplace = pnsgd.pnsgd_delta(10**6, None, EPS, noise="laplace", **{**ONLINE, "index": None})
    gaussian = pnsgd.pnsgd_delta(10**6, None, EPS, **{**ONLINE, "index": None})
    assert laplace["index"] == 10**6 and printed(laplace["delta"], "0.93")
    assert printed(gaussian["delta"], "0.54")


def test_online_tail_bound_is_conservative_and_tight(monkeypatch):
    """The integral bound beyond the exact steps against the full product, computed independently."""
    from scipy import special

    n, i = 100_000, 100
    t = np.arange(i + 1, n + 1, dtype=float)
    r = 2 * np.sqrt(special.lambertw(t**3 / (2 * np.pi * 100**2) + 100).real)
    log_b = np.log1p(-(special.ndtr(EPS / r - r / 2) + np.exp(EPS + special.log_ndtr(-EPS / r - r / 2))))
    sigma_i = 1.0 / (2 * 0.01 * math.sqrt(special.lambertw(i**3 / (2 * math.pi * 100**2) + 100).real))
    exact = pnsgd.gaussian_hockey_stick(20.0 / sigma_i, EPS) * math.exp(log_b.sum())
    args = (EPS, n, i, 10.0, 0.01, 1.0, 1.0, 100.0, 100.0, 1.5)
    assert n - i < pnsgd.ONLINE_EXACT_STEPS
    assert pnsgd.online_delta(*args) == pytest.approx(exact, rel=1e-9)  # every factor exact
    monkeypatch.setattr(pnsgd, "ONLINE_EXACT_STEPS", 500)
    bounded = pnsgd.online_delta(*args)
    assert exact < bounded < exact * 1.02


# --------------------------------------------------------------------------- properties the theorems imply

FIXED = {"lipschitz": 1.0, "step_size": 0.1, "diameter": 2.0, "smoothness": 1.0}


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(r_a=st.floats(0.05, 20.0), r_b=st.floats(0.05, 60.0), eps=st.floats(0.0, 8.0), n=st.integers(1, 10**9))
def test_shuffled_sits_between_best_and_worst_index(r_a, r_b, eps, n):
    a = pnsgd.gaussian_hockey_stick(r_a, eps)
    omb = pnsgd.gaussian_hockey_stick_complement(r_b, eps)
    shuffled = pnsgd.shuffled_delta(a, omb, n)
    assert pnsgd.per_index_delta(a, omb, n, 1) * (1 - 1e-12) <= shuffled <= a * (1 + 1e-12)  # Thm 2 ≤ Thm 1 worst
    assert shuffled <= pnsgd.random_stop_delta(a, omb, n) * (1 + 1e-12)  # strictly better baseline
    # The proof's refined random-stop bound at its worst index, i = 1, is Thm 2 itself.
    assert pnsgd.random_stop_delta(a, omb, n, index=1) == pytest.approx(shuffled, rel=1e-9, abs=1e-300)


def test_more_users_give_smaller_delta_at_fixed_noise():
    for noise in pnsgd.NOISES:
        deltas = [pnsgd.pnsgd_delta(n, 3.0, 0.1, noise=noise, **FIXED)["delta"] for n in (1, 10, 100, 10**4, 10**8)]
        assert deltas[-1] > 0 and np.all(np.diff(deltas) < 0)
        worst = [pnsgd.pnsgd_delta(n, 3.0, 0.1, noise=noise, variant="per_index", **FIXED)["delta"] for n in (1, 10**8)]
        assert worst[0] == worst[1] == deltas[0]  # entry i = n: δ = A for every n


@pytest.mark.parametrize("variant", pnsgd.VARIANTS)
@pytest.mark.parametrize("noise", pnsgd.NOISES)
def test_more_noise_gives_smaller_epsilon(variant, noise):
    eps = [pnsgd.pnsgd_epsilon(1000, s, 1e-6, noise=noise, variant=variant, **FIXED)["epsilon"] for s in (1.0, 2.0, 4.0, 8.0)]
    assert np.all(np.diff(eps) < 0)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(sigma=st.floats(0.2, 50.0), log_delta=st.floats(-20.0, -1.0), n=st.integers(1, 10**7),
       noise=st.sampled_from(pnsgd.NOISES), variant=st.sampled_from(pnsgd.VARIANTS))
def test_epsilon_is_the_smallest_that_reaches_delta(sigma, log_delta, n, noise, variant):
    delta = 10.0**log_delta
    eps = pnsgd.pnsgd_epsilon(n, sigma, delta, noise=noise, variant=variant, **FIXED)["epsilon"]
    assert pnsgd.pnsgd_delta(n, sigma, eps, noise=noise, variant=variant, **FIXED)["delta"] <= delta
    if eps > 0.0:  # the bisection's lower end, within 1e-10·max(1, ε), still misses δ
        below = eps - 1.01e-10 * max(1.0, eps)
        assert pnsgd.pnsgd_delta(n, sigma, below, noise=noise, variant=variant, **FIXED)["delta"] > delta


def test_online_delta_falls_with_n_and_rises_with_index():
    args = (EPS, 10.0, 0.01, 1.0, 1.0, 100.0, 100.0, 1.5, "gaussian")
    by_n = [pnsgd.online_delta(args[0], n, 100, *args[1:]) for n in (100, 1000, 10**4, 10**6)]
    by_i = [pnsgd.online_delta(args[0], 10**4, i, *args[1:]) for i in (1, 100, 1000, 10**4)]
    assert np.all(np.diff(by_n) < 0) and np.all(np.diff(by_i) > 0)


# --------------------------------------------------------------------------- multi-epoch composition (Remark 3)


def test_profile_pld_of_one_pair_is_dp_accountings():
    ours = pnsgd.profile_pld([1.0], [1e-5]).self_compose(10)
    theirs = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(1.0, 1e-5)).self_compose(10)
    assert ours.get_epsilon_for_delta(1e-4) == pytest.approx(theirs.get_epsilon_for_delta(1e-4), abs=1e-9)


def test_profile_pld_keeps_tiny_deltas():
    setting = pnsgd._setting(1000, 4.0, 1.0, 0.1, 2.0, 1.0, 0.0, "gaussian", "fixed", "shuffled", None, None, None, None)
    grid, deltas = pnsgd._profile_grid(setting, 1e-25)
    pld = pnsgd.profile_pld(grid, deltas)
    for eps in (0.0, 1.0, 3.0, 4.0, 5.0):
        # Equal up to float rounding at the grid points (the profile is a valid one here).
        assert pld.get_delta_for_epsilon(eps) == pytest.approx(float(setting.delta(eps)), rel=1e-9)


def test_pld_composition_is_exact_for_the_gaussian_per_index_case():
    # Entry i = n: δ(ε) = θ(2L/σ, ε), the Gaussian mechanism; E epochs = θ(2L√E/σ, ε).
    for epochs in (4, 25):
        ours = pnsgd.pnsgd_epsilon(1000, 4.0, 1e-6, variant="per_index", epochs=epochs, **FIXED)
        exact = pnsgd._epsilon_for_delta(lambda e, k=epochs: pnsgd.gaussian_hockey_stick(0.5 * math.sqrt(k), e), 1e-6)
        assert exact <= ours["epsilon"] <= exact + epochs * 1e-4  # discretization rounds up by ≤ Δ per epoch


def test_pld_composition_matches_dp_accountings_laplace_mechanism():
    ours = pnsgd.pnsgd_epsilon(1000, 2.0, 1e-6, noise="laplace", variant="per_index", epochs=10, **FIXED)
    theirs = privacy_loss_distribution.from_laplace_mechanism(parameter=2.0, sensitivity=2.0).self_compose(10)
    assert ours["epsilon"] == pytest.approx(theirs.get_epsilon_for_delta(1e-6), abs=1e-3)


def test_pld_composition_beats_basic_and_grows_with_epochs():
    single = pnsgd.pnsgd_epsilon(1000, 4.0, 1e-6, **FIXED)
    assert pnsgd.pnsgd_epsilon(1000, 4.0, 1e-6, epochs=1, composition="basic", **FIXED)["epsilon"] == single["epsilon"]
    previous = single["epsilon"]
    for epochs in (2, 10):
        pld = pnsgd.pnsgd_epsilon(1000, 4.0, 1e-6, epochs=epochs, **FIXED)
        basic = pnsgd.pnsgd_epsilon(1000, 4.0, 1e-6, epochs=epochs, composition="basic", **FIXED)
        assert previous < pld["epsilon"] < basic["epsilon"]
        assert basic["epsilon"] == pytest.approx(epochs * pnsgd.pnsgd_epsilon(1000, 4.0, 1e-6 / epochs, **FIXED)["epsilon"])
        back = pnsgd.pnsgd_delta(1000, 4.0, pld["epsilon"], epochs=epochs, **FIXED)["delta"]
        assert back == pytest.approx(1e-6, rel=1e-3)
        previous = pld["epsilon"]


# --------------------------------------------------------------------------- interface


def test_result_is_json_and_names_theorem_and_release():
    result = pnsgd.pnsgd_epsilon(10**5, 2.0, 1e-6, epochs=3, **FIXED)
    text = json.dumps(result, allow_nan=False)
    assert {"epsilon", "delta", "method"} <= set(json.loads(text))
    assert "Thm 2" in result["method"] and "final iterate" in result["method"]
    assert "Thm 5" in pnsgd.pnsgd_epsilon(10**5, None, 1e-6, step_size=0.1, **GAUSSIAN)["method"]
    assert "Thm 7" in pnsgd.pnsgd_epsilon(10**5, None, 1e-20, **ONLINE)["method"]


@pytest.mark.parametrize("change, name", [
    ({"sigma": 0.0}, "sigma"), ({"sigma": None}, "sigma"), ({"step_size": 3.0}, "step_size"),
    ({"strong_convexity": 2.0}, "strong_convexity"), ({"delta": 1.0}, "delta"), ({"n": 0}, "n"),
    ({"n": 10.5}, "n"), ({"index": 5}, "index"), ({"variant": "per_index", "index": 10**6}, "index"),
    ({"noise": "poisson"}, "noise"), ({"schedule": "calibrated"}, "sigma"), ({"epochs": 0}, "epochs"),
    ({"lipschitz": math.inf}, "lipschitz"), ({"diameter": -1.0}, "diameter"), ({"composition": "rdp"}, "composition"),
    ({"c1": 10.0}, "c1"),
])
def test_bad_parameters_name_themselves(change, name):
    args = dict(n=1000, sigma=2.0, delta=1e-6, **FIXED)
    args.update(change)
    with pytest.raises(ValueError, match=rf"^{name}="):
        pnsgd.pnsgd_epsilon(**args)


@pytest.mark.parametrize("change, name", [
    ({"alpha": 1.0}, "alpha"), ({"variant": "shuffled", "index": None}, "variant"), ({"epochs": 2}, "epochs"),
    ({"c2": None}, "c2"), ({"noise": "laplace", "c2": 0.5, "c1": 1e9}, "c2"),
])
def test_bad_schedule_parameters_name_themselves(change, name):
    args = {**ONLINE, **change}
    with pytest.raises(ValueError, match=rf"^{name}="):
        pnsgd.pnsgd_delta(1000, None, EPS, **args)
