"""Statistical tests of the CJMP summation protocols (seed 000, notes §2.1, §2.2, §3.2, §4.1, §4.2).

What is compared to what:
  * P_1D and P_vec (exact mode, encode_block/merge/finish/decode): the mean error over
    many independent runs against 0, and the empirical MSE against the exact
    variance (Δ/g)²[Σ f(1−f) + n·b_noise·p(1−p)]; the standard error of the
    empirical MSE comes from the exact error distribution (centred Bernoullis
    plus one centred binomial, whose cumulants add).
  * exact mode against literal mode (encode_messages/count_messages): a
    two-sample KS test per coordinate, and each mode's variance against
    exact_variance; the literal message count against d·(g + b_noise).
  * plan_pvec / plan_p1d against the notes' parameter table and rules.
  * sampling.binomial_above_floor, centred by its exact mean, against
    Binomial(trials, p) − trials·p moments,
    also beyond int64.
  * Lemma A.1: the exact hockey-stick divergence of the binomial mechanism
    against the paper's δ.

Every tolerance is a multiple (5) of a standard error derived from the exact
distribution; all seeds are fixed, so the outcomes are deterministic.
"""
from __future__ import annotations

import dataclasses
import fractions
import math

import numpy as np
import pytest
from scipy import special, stats

from pipeline.engine.layout import stream
from pipeline.protocols import cjmp, sampling
from pipeline.protocols.base import add_partials

Z = 5.0  # tolerances are Z standard errors


# ---------------------------------------------------------------------------
# Exact error distribution (notes §4.1): in count units the error is
#   Σ_i (Ber(f_i) − f_i) + (Bin(n·b_noise, p) − n·b_noise·p),
# all terms independent, so its cumulants are sums of the terms' cumulants.
# ---------------------------------------------------------------------------


def _bernoulli_k2_k4(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Second and fourth cumulants of Bernoulli(q) (the binomial's are m times these)."""
    k2 = q * (1.0 - q)
    return k2, k2 * (1.0 - 6.0 * k2)


def _error_cumulants(params: cjmp.PvecParams, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate (κ2, κ4) of decode(...) − Σx, computed from first principles."""
    scaled = (vectors + params.norm_bound) * (params.g / params.value_range)
    frac = scaled - np.floor(scaled)
    round_k2, round_k4 = _bernoulli_k2_k4(frac)
    trials = params.users * params.b_noise
    noise_k2, noise_k4 = _bernoulli_k2_k4(np.float64(params.p))
    scale = params.value_range / params.g
    k2 = scale**2 * (round_k2.sum(axis=0) + trials * noise_k2)
    k4 = scale**4 * (round_k4.sum(axis=0) + trials * noise_k4)
    return k2, k4


def _se_of_mse(k2: np.ndarray, k4: np.ndarray, trials: int) -> np.ndarray:
    """SE of the mean of X² for a centred X: Var(X²) = E X⁴ − σ⁴ = κ4 + 2κ2²."""
    return np.sqrt((k4 + 2.0 * k2**2) / trials)


def _se_of_sample_variance(k2: np.ndarray, k4: np.ndarray, draws: int) -> np.ndarray:
    """SE of the unbiased sample variance of `draws` i.i.d. values."""
    return np.sqrt(k4 / draws + 2.0 * k2**2 / (draws - 1))


# ---------------------------------------------------------------------------
# Estimates
# ---------------------------------------------------------------------------


def _exact_estimate(params, blocks, rng):
    """One exact-mode run: encode each (block index, slice), merge, decode.

    Inputs here are (users, d); the protocol takes (d, users) chunks, which it
    overwrites, hence the copy.
    """
    partials = [cjmp.encode_block(params, [part.T.copy()], rng) for _, part in blocks]
    return cjmp.decode(params, cjmp.finish(params, add_partials(partials))), partials


def _literal_estimate(params, vectors, rng, permute=False):
    labels, bits = cjmp.encode_messages(params, vectors.T, rng)
    if permute:
        order = rng.permutation(labels.size)
        labels, bits = labels[order], bits[order]
    return cjmp.decode(params, cjmp.count_messages(params, labels, bits))


# ---------------------------------------------------------------------------
# 1, 2. P_1D: unbiased, MSE equals the exact variance
# ---------------------------------------------------------------------------

P1D_TRIALS = 4000
# (n, Δ, ε, δ): the brief's noise-dominated setting, and a high-ε setting with
# Δ ≠ 1 where the randomized rounding's share of the variance is large enough
# that deterministic rounding would show up as bias and as a variance deficit.
P1D_SETTINGS = [(50, 1.0, 1.0, 1e-3), (50, 2.0, 15.0, 0.4)]


@pytest.fixture(scope="module", params=P1D_SETTINGS, ids=["n50-eps1", "n50-range2-eps15"])
def p1d_runs(request):
    users, value_range, epsilon, delta = request.param
    params = cjmp.plan_p1d(users, value_range, epsilon, delta)
    data_rng = np.random.default_rng(np.random.SeedSequence(1001))
    x = data_rng.uniform(0.0, value_range, users)
    x[:3] = [0.0, value_range, value_range / 2]  # the range's ends and its centre
    # Half the users sit at fractional part 0.3 of the fixed-point grid.
    grid = data_rng.integers(0, params.g, users // 2)
    x[3 : 3 + users // 2] = (grid + 0.3) * (value_range / params.g)
    vectors = (x - value_range / 2)[:, None]  # P_1D is P_vec's machinery on x − Δ/2
    rng = np.random.default_rng(np.random.SeedSequence(1002))
    errors = np.empty(P1D_TRIALS)
    for t in range(P1D_TRIALS):
        estimate, _ = _exact_estimate(params, [(0, vectors)], rng)
        errors[t] = estimate[0] + users * value_range / 2 - x.sum()
    return request.param, params, vectors, errors


def test_p1d_exact_variance_matches_first_principles_and_lemma_3_1_bound(p1d_runs):
    (users, value_range, epsilon, delta), params, vectors, _ = p1d_runs
    k2, _ = _error_cumulants(params, vectors)
    np.testing.assert_allclose(cjmp.exact_variance(params, vectors.T), k2, rtol=1e-12)
    # The proof's explicit bound (notes §4.1): Δ²n/(4g²) + 90Δ² ln(2/δ)/ε².
    bound = value_range**2 * users / (4 * params.g**2) + 90 * value_range**2 * math.log(2 / delta) / epsilon**2
    assert k2[0] <= bound


def test_p1d_is_unbiased(p1d_runs):
    _, params, vectors, errors = p1d_runs
    variance = cjmp.exact_variance(params, vectors.T)[0]
    standard_error = math.sqrt(variance / P1D_TRIALS)
    assert abs(errors.mean()) <= Z * standard_error, (errors.mean(), standard_error)


def test_p1d_mse_matches_exact_variance(p1d_runs):
    _, params, vectors, errors = p1d_runs
    exact = cjmp.exact_variance(params, vectors.T)[0]
    k2, k4 = _error_cumulants(params, vectors)
    standard_error = _se_of_mse(k2, k4, P1D_TRIALS)[0]
    mse = np.mean(errors**2)
    assert abs(mse - exact) <= Z * standard_error, (mse, exact, standard_error)


# ---------------------------------------------------------------------------
# 3. P_vec over several blocks: unbiased, MSE equals the exact variance,
#    merge independent of the order of its partials
# ---------------------------------------------------------------------------

PVEC_USERS, PVEC_DIM, PVEC_EPSILON, PVEC_DELTA, PVEC_NORM = 200, 4, 2.0, 1e-4, 1.0
PVEC_TRIALS = 4000
PVEC_BLOCKS = [(0, slice(0, 70)), (1, slice(70, 140)), (2, slice(140, 200))]


def _pvec_inputs() -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence(2001))
    directions = rng.standard_normal((PVEC_USERS, PVEC_DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radii = rng.uniform(0.0, 1.0, (PVEC_USERS, 1)) ** (1.0 / PVEC_DIM)
    vectors = PVEC_NORM * radii * directions
    vectors[0] = [PVEC_NORM, 0, 0, 0]  # coordinate at +Δ₂
    vectors[1] = [0, -PVEC_NORM, 0, 0]  # coordinate at −Δ₂
    vectors[2] = [0.5, -0.5, 0.5, -0.5]  # norm exactly Δ₂
    vectors[3] = 0.0
    vectors[75] = [0, 0, 0, -PVEC_NORM]  # boundaries in the other blocks too
    vectors[150] = [0, 0, PVEC_NORM, 0]
    vectors[151] = [-0.5, -0.5, -0.5, -0.5]
    assert np.all(np.linalg.norm(vectors, axis=1) <= PVEC_NORM * (1 + 1e-15))
    return vectors


@pytest.fixture(scope="module")
def pvec_runs():
    params = cjmp.plan_pvec(PVEC_USERS, PVEC_DIM, PVEC_EPSILON, PVEC_DELTA, PVEC_NORM)
    vectors = _pvec_inputs()
    blocks = [(index, vectors[rows]) for index, rows in PVEC_BLOCKS]
    rng = np.random.default_rng(np.random.SeedSequence(2002))
    errors = np.empty((PVEC_TRIALS, PVEC_DIM))
    order_mismatches = 0
    integer_partials = True
    for t in range(PVEC_TRIALS):
        estimate, partials = _exact_estimate(params, blocks, rng)
        errors[t] = estimate - vectors.sum(axis=0)
        integer_partials &= all(part.ones_above_floor.dtype == np.int64 for part in partials)
        reference = cjmp.finish(params, add_partials(partials)).centred_ones.tobytes()
        for permuted in ([partials[2], partials[1], partials[0]], [partials[1], partials[2], partials[0]]):
            counts = cjmp.finish(params, add_partials(permuted))
            order_mismatches += counts.centred_ones.tobytes() != reference
            order_mismatches += cjmp.decode(params, counts).tobytes() != estimate.tobytes()
    return params, vectors, errors, order_mismatches, integer_partials


def test_pvec_exact_variance_matches_first_principles(pvec_runs):
    params, vectors, *_ = pvec_runs
    k2, _ = _error_cumulants(params, vectors)
    np.testing.assert_allclose(cjmp.exact_variance(params, vectors.T), k2, rtol=1e-12)


def test_pvec_is_unbiased_per_coordinate(pvec_runs):
    params, vectors, errors, *_ = pvec_runs
    standard_error = np.sqrt(cjmp.exact_variance(params, vectors.T) / PVEC_TRIALS)
    assert np.all(np.abs(errors.mean(axis=0)) <= Z * standard_error), (errors.mean(axis=0), standard_error)


def test_pvec_mse_matches_exact_variance(pvec_runs):
    params, vectors, errors, *_ = pvec_runs
    exact = cjmp.exact_variance(params, vectors.T)
    k2, k4 = _error_cumulants(params, vectors)
    mse = np.mean(errors**2, axis=0)
    per_coordinate_se = _se_of_mse(k2, k4, PVEC_TRIALS)
    assert np.all(np.abs(mse - exact) <= Z * per_coordinate_se), (mse, exact, per_coordinate_se)
    # Summed over coordinates (independent, so Var of the sum of X_j² adds).
    total_se = math.sqrt(np.sum(per_coordinate_se**2))
    assert abs(mse.sum() - exact.sum()) <= Z * total_se, (mse.sum(), exact.sum(), total_se)
    # Notes §4.2's explicit bound d·(2Δ₂/g)²(n/4 + n·b_noise·p).
    bound = PVEC_DIM * (2 * PVEC_NORM / params.g) ** 2 * PVEC_USERS * (0.25 + params.b_noise * params.p)
    assert exact.sum() <= bound


def test_pvec_merge_is_bit_identical_for_any_order_of_partials(pvec_runs):
    *_, order_mismatches, integer_partials = pvec_runs
    # Partials are exact integers, so their sum cannot depend on the order.
    assert integer_partials and order_mismatches == 0


# ---------------------------------------------------------------------------
# 4. Exact mode against literal mode
# ---------------------------------------------------------------------------

TINY_USERS, TINY_EPSILON, TINY_DELTA, TINY_NORM = 16, 15.0, 0.4, 1.0
MODE_TRIALS = 1500
PERMUTED_TRIALS = 40  # literal runs that go through a real shuffle (counts are invariant)


def _tiny_inputs(dim: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([3001, dim]))
    directions = rng.standard_normal((TINY_USERS, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    vectors = TINY_NORM * rng.uniform(0.0, 1.0, (TINY_USERS, 1)) * directions
    vectors[0] = 0.0
    vectors[1, 0] = TINY_NORM  # boundaries ±Δ₂
    vectors[1, 1:] = 0.0
    vectors[2, 0] = -TINY_NORM
    vectors[2, 1:] = 0.0
    return vectors


@pytest.mark.parametrize("dim", [1, 2])
def test_exact_and_literal_modes_agree_in_distribution(dim):
    params = cjmp.plan_pvec(TINY_USERS, dim, TINY_EPSILON, TINY_DELTA, TINY_NORM)
    vectors = _tiny_inputs(dim)
    truth = vectors.sum(axis=0)
    exact_rng = np.random.default_rng(np.random.SeedSequence([3002, dim]))
    literal_rng = np.random.default_rng(np.random.SeedSequence([3003, dim]))
    exact = np.array([_exact_estimate(params, [(0, vectors)], exact_rng)[0] for _ in range(MODE_TRIALS)])
    literal = np.array(
        [_literal_estimate(params, vectors, literal_rng, permute=t < PERMUTED_TRIALS) for t in range(MODE_TRIALS)]
    )
    k2, k4 = _error_cumulants(params, vectors)
    variance = cjmp.exact_variance(params, vectors.T)
    variance_se = _se_of_sample_variance(k2, k4, MODE_TRIALS)
    for name, estimates in (("exact", exact), ("literal", literal)):
        mean_error = estimates.mean(axis=0) - truth
        assert np.all(np.abs(mean_error) <= Z * np.sqrt(variance / MODE_TRIALS)), (name, mean_error)
        sample_variance = estimates.var(axis=0, ddof=1)
        assert np.all(np.abs(sample_variance - variance) <= Z * variance_se), (name, sample_variance, variance)
    for j in range(dim):
        # Both modes' estimates lie on the same lattice; rounding removes ulp-level
        # differences between their float paths so that ties stay ties.
        result = stats.ks_2samp(np.round(exact[:, j], 8), np.round(literal[:, j], 8))
        assert result.pvalue > 1e-3, (dim, j, result)


@pytest.mark.parametrize("dim", [1, 2])
def test_literal_message_count_is_fixed_and_data_independent(dim):
    params = cjmp.plan_pvec(TINY_USERS, dim, TINY_EPSILON, TINY_DELTA, TINY_NORM)
    per_user = dim * (params.g + params.b_noise)
    assert params.messages_per_user == per_user
    assert cjmp.literal_messages(params) == TINY_USERS * per_user
    rng = np.random.default_rng(np.random.SeedSequence([4001, dim]))
    datasets = [
        _tiny_inputs(dim),
        np.zeros((TINY_USERS, dim)),
        np.full((TINY_USERS, dim), TINY_NORM / math.sqrt(dim)),
        np.full((TINY_USERS, dim), -TINY_NORM / math.sqrt(dim)),
    ]
    for vectors in datasets:
        labels, bits = cjmp.encode_messages(params, vectors.T, rng)
        assert labels.shape == bits.shape == (TINY_USERS * per_user,)
        assert set(np.unique(bits)) <= {0, 1}
        np.testing.assert_array_equal(np.bincount(labels, minlength=dim), np.full(dim, TINY_USERS * (params.g + params.b_noise)))
        for user in (0, 1, TINY_USERS - 1):
            one_labels, one_bits = cjmp.encode_messages(params, vectors[user : user + 1].T, rng)
            assert one_labels.size == one_bits.size == per_user


def test_count_messages_matches_independent_count_and_ignores_order():
    dim = 2
    params = cjmp.plan_pvec(TINY_USERS, dim, TINY_EPSILON, TINY_DELTA, TINY_NORM)
    rng = np.random.default_rng(np.random.SeedSequence(4101))
    labels, bits = cjmp.encode_messages(params, _tiny_inputs(dim).T, rng)
    ones = np.bincount(labels[bits == 1], minlength=dim)
    centre = fractions.Fraction(params.p) * (params.users * params.b_noise)
    reference = np.array([float(int(k) - centre) for k in ones])
    counts = cjmp.count_messages(params, labels, bits)
    assert counts.users == TINY_USERS
    np.testing.assert_allclose(counts.centred_ones, reference, rtol=0, atol=1e-9)
    order = rng.permutation(labels.size)
    shuffled = cjmp.count_messages(params, labels[order], bits[order])
    assert shuffled.centred_ones.tobytes() == counts.centred_ones.tobytes()


# ---------------------------------------------------------------------------
# 5. Parameter values (notes §5 table) and rules (notes §2.1, §2.2, T5)
# ---------------------------------------------------------------------------


def test_plan_pvec_matches_notes_table():
    big = cjmp.plan_pvec(1000, 10, 1.0, 1e-6, 1.0)
    assert big.g == 64
    assert abs(big.b_noise / 6.55e7 - 1) < 0.01
    tiny = cjmp.plan_pvec(16, 1, 15.0, 0.4, 1.0)
    assert (tiny.g, tiny.b_noise) == (8, 3843)


@pytest.mark.parametrize(
    "users, dim, epsilon, delta, norm_bound",
    [(1000, 10, 1.0, 1e-6, 1.0), (16, 1, 15.0, 0.4, 1.0), (16, 2, 15.0, 0.4, 1.0), (200, 4, 2.0, 1e-4, 1.0),
     (3, 100, 0.5, 1e-3, 0.1), (10**5, 10, 1.0, 1e-6, 1.0)],
)
def test_plan_pvec_follows_theorem_3_2_rule(users, dim, epsilon, delta, norm_bound):
    params = cjmp.plan_pvec(users, dim, epsilon, delta, norm_bound)
    delta_hat = delta / (dim + 1)
    epsilon_hat = epsilon / (18 * math.sqrt(math.log(1 / delta_hat)))
    assert math.isclose(params.delta_hat, delta_hat, rel_tol=1e-15)
    assert math.isclose(params.epsilon_hat, epsilon_hat, rel_tol=1e-15)
    assert 0 < params.p < 0.5
    assert isinstance(params.g, int) and params.g >= max(2 * norm_bound * math.sqrt(users), math.sqrt(dim), 4)
    assert params.g - 1 < max(2 * norm_bound * math.sqrt(users), math.sqrt(dim), 4)  # the ceiling, not more
    target = 90 * params.g**2 * math.log(2 / delta_hat) / epsilon_hat**2
    assert math.isclose(params.b_noise * params.p * users, target, rel_tol=1e-12)
    threshold = 180 * params.g**2 * math.log(2 / delta_hat) / (epsilon_hat**2 * users)
    assert params.b_noise - 1 <= threshold < params.b_noise  # smallest integer strictly above


@pytest.mark.parametrize("users, value_range, epsilon, delta", [(50, 1.0, 1.0, 1e-3), (20, 1.0, 2.0, 1e-2), (7, 3.0, 15.0, 0.3)])
def test_plan_p1d_follows_lemma_3_1_rule(users, value_range, epsilon, delta):
    params = cjmp.plan_p1d(users, value_range, epsilon, delta)
    assert params.dim == 1 and params.norm_bound == value_range / 2 and params.value_range == value_range
    assert params.g == math.ceil(value_range * math.sqrt(users))
    assert 0 < params.p < 0.5
    target = 90 * params.g**2 * math.log(2 / delta) / epsilon**2
    assert math.isclose(params.b_noise * params.p * users, target, rel_tol=1e-12)
    threshold = 180 * params.g**2 * math.log(2 / delta) / (epsilon**2 * users)
    assert params.b_noise - 1 <= threshold < params.b_noise


# ---------------------------------------------------------------------------
# 6. centred_binomial
# ---------------------------------------------------------------------------

BINOMIAL_DRAWS = 200_000


def _centred_binomial(rng, trials, p, size):
    """Binomial(trials, p) − trials·p from the pipeline's exact-integer draw."""
    above, floor_total = sampling.binomial_above_floor(rng, trials, p, size)
    whole, fraction = sampling.split_mean(trials, p)
    return (above + (floor_total - whole)).astype(np.float64) - fraction


def _check_centred_binomial_moments(draws: np.ndarray, trials: int, p: float) -> None:
    k2_unit, k4_unit = _bernoulli_k2_k4(np.float64(p))
    k2, k4 = trials * k2_unit, trials * k4_unit
    m = draws.size
    assert np.all(np.isfinite(draws))
    assert abs(draws.mean()) <= Z * math.sqrt(k2 / m), (draws.mean(), math.sqrt(k2 / m))
    variance = draws.var(ddof=1)
    variance_se = float(_se_of_sample_variance(k2, k4, m))
    assert abs(variance - k2) <= Z * variance_se, (variance / k2, variance_se / k2)
    # Standardized fourth moment about the known centre: E z⁴ = 3 + κ4/κ2², and for a
    # near-normal z, Var(z⁴) = E z⁸ − (E z⁴)² ≈ 105 − 9 = 96.
    fourth = np.mean((draws / math.sqrt(k2)) ** 4)
    assert abs(fourth - (3 + k4 / k2**2)) <= Z * math.sqrt(96 / m), fourth


@pytest.mark.parametrize("trials, p", [(1000, 0.3), (10**12, 0.4999), (2**59, 0.5), (2**62, 0.3), (2**62, 0.4999999)])
def test_centred_binomial_moments_within_int64(trials, p):
    assert sampling.noise_sampler(trials) == sampling.EXACT
    rng = np.random.default_rng(np.random.SeedSequence([5001, trials.bit_length()]))
    draws = _centred_binomial(rng, trials, p, BINOMIAL_DRAWS)
    assert draws.shape == (BINOMIAL_DRAWS,)
    _check_centred_binomial_moments(draws, trials, p)


def test_centred_binomial_beyond_int64():
    trials, p = 5 * 2**62 + 12345, 0.4999999
    assert trials > np.iinfo(np.int64).max
    assert sampling.noise_sampler(trials) == sampling.EXACT
    rng = np.random.default_rng(np.random.SeedSequence(5101))
    draws = _centred_binomial(rng, trials, p, BINOMIAL_DRAWS)
    _check_centred_binomial_moments(draws, trials, p)
    # Centring is exact beyond int64: Binomial(m, 1) − m and Binomial(m, 0) are 0 exactly.
    np.testing.assert_array_equal(_centred_binomial(rng, trials, 1.0, 5), np.zeros(5))
    np.testing.assert_array_equal(_centred_binomial(rng, trials, 0.0, 5), np.zeros(5))


# ---------------------------------------------------------------------------
# 7. Lemma A.1: exact hockey-stick divergence of the binomial mechanism
# ---------------------------------------------------------------------------


def _hockey_stick(trials: int, p: float, shift: int, epsilon: float) -> tuple[float, float]:
    """δ(ε) of Bin(m, p) against shift + Bin(m, p), in both directions (exact, log-space)."""
    support = np.arange(trials + shift + 1)
    log_p = stats.binom.logpmf(support, trials, p)  # −inf above m
    log_q = stats.binom.logpmf(support - shift, trials, p)  # −inf below shift

    def one_direction(log_a, log_b):
        gap = log_a - log_b  # +inf where b has no mass
        above = gap > epsilon
        # a − e^ε b = a·(1 − e^{ε − gap}) where positive.
        terms = log_a[above] + np.log1p(-np.exp(epsilon - gap[above]))
        return float(np.exp(special.logsumexp(terms))) if terms.size else 0.0

    return one_direction(log_p, log_q), one_direction(log_q, log_p)


@pytest.mark.parametrize("users, epsilon, delta", [(50, 1.0, 1e-3), (20, 2.0, 1e-2)])
def test_binomial_mechanism_exact_delta_within_lemma_a1_bound(users, epsilon, delta):
    params = cjmp.plan_p1d(users, 1.0, epsilon, delta)
    trials = params.b_noise * users
    shift = params.g
    alpha = epsilon / (3 * params.g)
    assert alpha * trials * params.p >= 2 * shift  # Lemma A.1's condition
    assert math.isclose(2 * math.exp(-alpha**2 * trials * params.p / 10), delta, rel_tol=1e-9)
    epsilon_k = shift * math.log((1 + alpha) / (1 - alpha))
    forward, backward = _hockey_stick(trials, params.p, shift, epsilon_k)
    assert max(forward, backward) <= delta, (forward, backward)
    # The computation itself: at ε = 0 the divergence is the total variation
    # distance, which for a shift of k ≪ σ is ≈ k·φ(0)/σ, far above δ(ε_k).
    tv_forward, tv_backward = _hockey_stick(trials, params.p, shift, 0.0)
    sigma = math.sqrt(trials * params.p * (1 - params.p))
    approx_tv = shift / (sigma * math.sqrt(2 * math.pi))
    assert math.isclose(tv_forward, tv_backward, rel_tol=1e-6)
    assert math.isclose(tv_forward, approx_tv, rel_tol=0.05), (tv_forward, approx_tv)
    assert max(forward, backward) < tv_forward


# ---------------------------------------------------------------------------
# 8. The exact-mode rounding sampler: one random byte per user-coordinate,
#    ties (probability 1/256) settled by a uniform. Each user's x̂ must be
#    ⌊s⌋ + Bernoulli(s − ⌊s⌋) exactly, also for fractions off the 8-bit grid.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [1 / 512, 0.3, 0.5, 37 / 256, 37.75 / 256, 255.9 / 256, 1 - 2**-40])
def test_byte_rounding_sampler_is_exact_bernoulli(fraction):
    users, dim = 1 << 18, 2
    params = cjmp.plan_pvec(1000, dim, 1.0, 1e-6, 1.0)
    # Inputs whose scaled value is 3 + fraction (coordinate 0) and 0.5·g − fraction (coordinate 1).
    targets = np.array([3.0 + fraction, params.g / 2 - fraction])
    vectors = np.repeat((targets * params.value_range / params.g - params.norm_bound)[:, None], users, axis=1)
    scaled = cjmp._shift_and_scale(params, vectors.copy(), 256) / 256  # the value the sampler rounds
    probability = scaled - np.floor(scaled)
    no_noise = dataclasses.replace(params, b_noise=0)  # the rounded sum alone (cjmp.rounded_chunk)
    total = cjmp.encode_block(no_noise, [vectors], stream(8001, 2, users, 0)).ones_above_floor
    successes = total - users * np.floor(scaled[:, 0])
    standard_error = np.sqrt(users * probability[:, 0] * (1 - probability[:, 0]))
    assert np.all(np.abs(successes - users * probability[:, 0]) <= Z * standard_error + 1e-9), (
        successes, users * probability[:, 0], standard_error)


@pytest.mark.parametrize("parent_name", ["shuffle_gaussian", "local_l2", "central_gaussian"])
def test_a_renamed_subclass_of_a_sum_protocol_sends_what_its_parent_sends(parent_name):
    """A sum protocol's reports carry its class's noise (SumProtocol.noise), whatever a subclass
    names itself: once read from the name, a renamed subclass of shuffle_gaussian sent its users'
    inputs bare and of local_l2 unrandomized, while its ledger stated the parent's event."""
    from pipeline.protocols import PROTOCOLS
    from pipeline.protocols.base import RoundPlan

    parent = PROTOCOLS[parent_name]
    renamed = type("Renamed", (parent,), {"name": "renamed"})
    plan = RoundPlan(0, 0, 500, 1.0, 1e-6, 1.0, "gradients")
    inputs = np.random.default_rng(0).normal(size=(3, 500))
    sent = [protocol.finish(params, protocol.encode_block(params, [inputs.copy()], np.random.default_rng(1)),
                            np.random.default_rng(2)).total
            for protocol in (parent("tight"), renamed("tight")) for params in [protocol.plan(plan, 3)]]
    assert np.array_equal(sent[0], sent[1])
    bare = (inputs * np.minimum(1.0, 1.0 / np.linalg.norm(inputs, axis=0))).sum(axis=1)  # clipped, no noise
    assert np.abs(sent[1] - bare).max() > 1.0
