"""Tests of the Girgis randomizers (seed 001 ch. 3, notes §2.1–2.6, §2.14, §4, traps 1–6).

What is compared to what:
  * 2RR's p(v) against the closed forms ε0 = 2·asinh(v/2), p(1−p)/(1−2p)² = 1/v²
    and the notes' numbers (v = 2: p = 0.14645, ε0 = 1.7627).
  * exact_mse against brute-force enumeration of the mechanisms as the notes
    define them (below: every message's index, rounding bit and flip, each
    (level, block) term independent and zero-mean), which also gives each
    coordinate's exact variance and checks E y = x exactly.
  * Monte Carlo: the mean of decoded sums against the true sum, per coordinate,
    with the standard error from the enumerated variances; the mean squared
    error against Σ exact_mse, with the standard error from the sample.
  * exact_mse ≤ exact_mse_bound, stream ε0s, water-filling, bit counts, the
    statistic's invariants, additivity, determinism, and bad inputs.

Every statistical tolerance is Z = 5 standard errors; seeds are fixed.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.linalg import hadamard

from pipeline.protocols import girgis

Z = 5.0


# ---------------------------------------------------------------------------
# Independent oracles, written from the notes' pseudo-code.
# ---------------------------------------------------------------------------


def _p_of(v: float) -> float:
    """Lemma 2.4.1 as printed: p(v) = ½(1 − √(v²/(v²+4)))."""
    return 0.5 * (1.0 - math.sqrt(v * v / (v * v + 4.0)))


def _water_filling(v: float, m: int) -> list[float]:
    """Alg. 3.5.1: v_k = 4^{−k/3} v/S (k < m), v_m = 4^{−(m−1)/3} v/S."""
    total = sum(4.0 ** (-l / 3.0) for l in range(1, m)) + 4.0 ** (-(m - 1) / 3.0)
    return [4.0 ** (-k / 3.0) * v / total for k in range(1, m)] + [4.0 ** (-(m - 1) / 3.0) * v / total]


def _planes_by_iteration(z: np.ndarray, m: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Alg. 3.5.1's loop, with the clamp to {0, 1} of trap 4."""
    partial = np.zeros_like(z)
    planes = []
    for k in range(1, m):
        bit = np.clip(np.floor(2.0**k * (z - partial)), 0.0, 1.0)
        partial = partial + 2.0**-k * bit
        planes.append(bit)
    return planes, np.clip(2.0 ** (m - 1) * (z - partial), 0.0, 1.0)


def _rotation(params: girgis.GirgisParams) -> np.ndarray:
    """U = H·D/√d_pad (Alg. 3.6.1), explicitly."""
    size = params.coded_dim
    return hadamard(size) * girgis.rotation_signs(params)[None, :] / math.sqrt(size)


def _oracle(params: girgis.GirgisParams, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One user's exact E y, per-coordinate Var y, and target, by enumeration.

    Args:
      params: the randomizer.
      x: one input, shape (d,).

    Returns:
      (mean, variance, target), each of shape (d,); target is x projected into
      the ball (and for l2 clipped in the rotated space).
    """
    d, r = params.dim, params.radius
    if params.kind == "l1":
        size = params.coded_dim
        target = x * min(1.0, r / np.abs(x).sum()) if np.abs(x).sum() > 0 else x.copy()
        h = hadamard(size)
        t = h[:, :d] @ target / r
        c = (math.exp(params.budget) + 1.0) / (math.exp(params.budget) - 1.0)
        mean, second = np.zeros(d), np.zeros(d)
        for j in range(size):
            for sigma in (1.0, -1.0):
                prob = (0.5 + sigma * t[j] / (2.0 * c)) / size
                y = sigma * r * c * h[:d, j]
                mean += prob * y
                second += prob * y * y
        return mean, second - mean**2, target

    # Coded space, and the linear map from it to the output (without offset).
    m, s = params.levels, params.messages
    if params.kind == "binary":
        z, target = x.copy(), x.copy()
        to_output, offset = (lambda vec: vec[:d]), np.zeros(d)
    elif params.kind == "linf":
        target = np.clip(x, -r, r)
        z = (target + r) / (2.0 * r)
        to_output, offset = (lambda vec: 2.0 * r * vec[:d]), -r * np.ones(d)
    else:
        norm = np.linalg.norm(x)
        clipped = x * min(1.0, r / norm) if norm > 0 else x.copy()
        u = _rotation(params)
        padded = np.zeros(params.coded_dim)
        padded[:d] = clipped
        rc = params.clip_radius
        w = np.clip(u @ padded, -rc, rc)
        target = (u.T @ w)[:d]
        z = (w + rc) / (2.0 * rc)
        to_output = lambda vec: (u.T @ (2.0 * rc * vec))[:d]  # noqa: E731
        offset = (u.T @ (-rc * np.ones(params.coded_dim)))[:d]
    coded = z.size
    a = -(-coded // s)
    planes, residual = _planes_by_iteration(z, m)
    betas = planes + [residual]
    weights = [2.0**-k for k in range(1, m)] + [2.0 ** -(m - 1)]
    variance = np.zeros(d)
    for level, (v_k, beta, weight) in enumerate(zip(_water_filling(params.budget, m), betas, weights)):
        p = _p_of(v_k / s)
        rounding = level == m - 1
        for block in range(s):
            cells = range(block * a, (block + 1) * a)
            expected = np.zeros(coded)
            real = [c for c in cells if c < coded]
            expected[real] = beta[real]
            first = np.zeros(d)
            for c in cells:
                value = beta[c] if c < coded else 0.0
                outcomes = [(value, 1.0)] if not rounding else [(1.0, value), (0.0, 1.0 - value)]
                for bit, prob_bit in outcomes:
                    for sent, prob_sent in ((bit, 1.0 - p), (1.0 - bit, p)):
                        message = np.zeros(coded)
                        if c < coded:
                            message[c] = a * (sent - p) / (1.0 - 2.0 * p)
                        term = to_output(weight * (message - expected))
                        prob = prob_bit * prob_sent / a
                        first += prob * term
                        variance += prob * term * term
            np.testing.assert_allclose(first, 0.0, atol=1e-9)  # each term is zero-mean
    return to_output(z) + offset, variance, target


# ---------------------------------------------------------------------------
# Cases: (kind, d, v, m, s), with d non-powers of 2 and s not dividing d.
# ---------------------------------------------------------------------------

CASES = [
    ("binary", 1, 2.0, 1, 1),
    ("binary", 3, 0.5, 1, 2),
    ("binary", 10, 4.0, 1, 4),  # a = 3, padded to 12
    ("binary", 8, 8.0, 1, 8),
    ("linf", 1, 1.0, 1, 1),
    ("linf", 3, 2.0, 3, 2),
    ("linf", 10, 4.0, 2, 3),  # a = 4, padded to 12
    ("linf", 8, 6.0, 4, 8),
    ("linf", 10, 3.0, 5, 6),  # a = 2: the sixth block is all padding
    ("l1", 1, 1.0, 1, 1),
    ("l1", 3, 0.5, 1, 1),
    ("l1", 8, 2.0, 1, 1),
    ("l1", 10, 5.0, 1, 1),
    ("l2", 1, 2.0, 2, 1),
    ("l2", 3, 3.0, 2, 2),  # d_pad = 4
    ("l2", 10, 4.0, 3, 3),  # d_pad = 16, a = 6, padded to 18
    ("l2", 8, 1.0, 1, 1),
]


def _case_id(case) -> str:
    return "{}-d{}-v{}-m{}-s{}".format(*case)


def _params(case, radius: float = 0.7) -> girgis.GirgisParams:
    kind, d, v, m, s = case
    return girgis.plan_girgis(kind, users=100, dim=d, radius=radius, budget=v, levels=m, messages=s,
                              rotation_seed=11)


def _inputs(params: girgis.GirgisParams, users: int, seed: int) -> np.ndarray:
    """Random inputs in the ball plus edge cases (ball boundary, corners, zero)."""
    rng = np.random.default_rng(seed)
    d, r = params.dim, params.radius
    if params.kind == "binary":
        x = rng.integers(0, 2, size=(d, users)).astype(np.float64)
        x[:, 0], x[:, 1] = 1.0, 0.0
        return x
    if params.kind == "linf":
        x = rng.uniform(-r, r, size=(d, users))
        x[:, 0], x[:, 1], x[:, 2] = r, -r, 0.0
        x[:, 3] = np.where(np.arange(d) % 2 == 0, r, -r)  # a corner
        return x
    direction = rng.normal(size=(d, users))
    norms = np.abs(direction).sum(axis=0) if params.kind == "l1" else np.linalg.norm(direction, axis=0)
    x = direction / norms * r * rng.uniform(0.0, 1.0, size=users)
    x[:, 0] = 0.0
    x[:, 1] = 0.0
    x[0, 1] = r  # on the boundary
    x[:, 2] = direction[:, 2] / norms[2] * r  # on the boundary
    return x


# ---------------------------------------------------------------------------
# 2RR, water-filling, stream budgets, bits.
# ---------------------------------------------------------------------------


def test_rr_parametrization_closed_forms():
    for v in [1e-3, 0.1, 0.5, 1.0, 2.0, 3.7, 10.0, 100.0]:
        p = girgis.flip_probability(v)
        assert p == pytest.approx(_p_of(v), rel=1e-9)
        assert math.log((1.0 - p) / p) == pytest.approx(2.0 * math.asinh(v / 2.0), rel=1e-9)
        assert 2.0 * math.asinh(v / 2.0) <= v
        assert p * (1.0 - p) / (1.0 - 2.0 * p) ** 2 == pytest.approx(1.0 / v**2, rel=1e-9)
    assert girgis.flip_probability(2.0) == pytest.approx(0.14645, abs=5e-6)
    assert math.log((1.0 - girgis.flip_probability(2.0)) / girgis.flip_probability(2.0)) == pytest.approx(
        1.7627, abs=5e-5)
    binary = girgis.plan_girgis("binary", 10, 1, 1.0, 2.0)
    assert binary.messages == 1
    assert girgis.stream_epsilons(binary) == pytest.approx((1.7627,), abs=5e-5)


@pytest.mark.parametrize("kind", ["binary", "linf", "l2"])
def test_water_filling_and_stream_epsilons(kind):
    for v in [1e-6, 0.3, 1.0, 2.5, 7.0, 40.0]:
        for m in ([1] if kind == "binary" else [1, 2, 3, 6]):
            for s in [1, 2, 5]:
                params = girgis.plan_girgis(kind, 50, 10, 1.0, v, levels=m, messages=s)
                budgets = params.level_budgets
                assert budgets == pytest.approx(_water_filling(v, m), rel=1e-12)
                assert math.fsum(budgets) == pytest.approx(v, rel=1e-12)
                if m > 1:  # v_k ∝ 4^{−k/3}; the rounding plane shares plane m−1's budget
                    assert budgets[1:-1] == pytest.approx([b * 4.0 ** (-1 / 3) for b in budgets[:-2]], rel=1e-12)
                    assert budgets[-1] == pytest.approx(budgets[-2], rel=1e-12)
                eps = girgis.stream_epsilons(params)
                assert len(eps) == m * s
                expected = [2.0 * math.asinh(vk / (2.0 * s)) for vk in _water_filling(v, m) for _ in range(s)]
                assert eps == pytest.approx(expected, rel=1e-12)
                for p, vk in zip(params.flip_probabilities, budgets):  # ε0 = log((1−p)/p), trap 2
                    assert math.log((1.0 - p) / p) == pytest.approx(2.0 * math.asinh(vk / (2.0 * s)), rel=1e-6)
                assert sum(eps) <= v and math.fsum(eps) <= v


def test_l1_stream_epsilon_is_budget():
    params = girgis.plan_girgis("l1", 50, 10, 1.0, 1.3)
    assert girgis.stream_epsilons(params) == (1.3,)


def test_bits_per_user_thesis_formula():
    assert girgis.bits_per_user(girgis.plan_girgis("linf", 9, 10, 1.0, 2.0, levels=3, messages=2)) == 3 * 2 * (3 + 1)
    assert girgis.bits_per_user(girgis.plan_girgis("binary", 9, 10, 1.0, 2.0, messages=4)) == 4 * (2 + 1)
    assert girgis.bits_per_user(girgis.plan_girgis("binary", 9, 1, 1.0, 2.0)) == 1
    assert girgis.bits_per_user(girgis.plan_girgis("l1", 9, 10, 1.0, 2.0)) == 4 + 1  # d_pad = 16
    assert girgis.bits_per_user(girgis.plan_girgis("l1", 9, 1, 1.0, 2.0)) == 1
    # l2 works in d_pad = 16: a = 8.
    assert girgis.bits_per_user(girgis.plan_girgis("l2", 9, 10, 1.0, 2.0, levels=3, messages=2)) == 3 * 2 * (3 + 1)
    assert girgis.bits_per_user(girgis.plan_girgis("linf", 9, 784, 1.0, 2.0, levels=1, messages=2)) == 2 * (9 + 1)


def test_plan_defaults_and_clip_radius():
    assert girgis.plan_girgis("binary", 9, 10, 5.0, 2.5).messages == 3  # ⌈v⌉
    assert girgis.plan_girgis("binary", 9, 10, 5.0, 2.5).radius == 1.0
    assert girgis.plan_girgis("linf", 9, 2, 1.0, 7.0).messages == 2  # capped at d
    assert girgis.plan_girgis("l2", 9, 3, 1.0, 7.0).messages == 4  # capped at d_pad
    assert girgis.plan_girgis("linf", 9, 5, 1.0, 0.2).messages == 1
    assert girgis.plan_girgis("l1", 9, 5, 1.0, 4.0).messages == 1
    # Thesis's r∞ = 10·r2·√(log(n·d/β)/d), d = d_pad, capped at r2.
    big = girgis.plan_girgis("l2", 1, 2000, 2.0, 1.0, beta=0.5)
    assert big.clip_radius == pytest.approx(10.0 * 2.0 * math.sqrt(math.log(2048 / 0.5) / 2048), rel=1e-12)
    assert big.clip_radius < 2.0
    assert girgis.plan_girgis("l2", 100, 10, 2.0, 1.0).clip_radius == 2.0
    assert girgis.plan_girgis("linf", 100, 10, 2.0, 1.0).clip_radius == 2.0


# ---------------------------------------------------------------------------
# Exact formulas against enumeration, and against the thesis's bounds.
# ---------------------------------------------------------------------------


def test_bit_planes_match_the_iteration():
    for m in [1, 2, 3, 5, 12]:
        params = girgis.plan_girgis("linf", 9, 1, 1.0, 1.0, levels=m)
        z = np.concatenate([np.random.default_rng(m).uniform(0.0, 1.0, 500), [0.0, 1.0, 0.5, 0.25, 0.75,
                            1.0 - 2.0**-53, 2.0**-60, 0.375]])
        floor, residual = girgis._bit_planes(params, z)
        planes, w = _planes_by_iteration(z, m)
        for level, plane in enumerate(planes):
            np.testing.assert_array_equal(girgis._plane(params, floor, level), plane)
        np.testing.assert_allclose(residual, w, rtol=0, atol=1e-12)


def test_fast_hadamard_transform():
    rng = np.random.default_rng(3)
    for size in [1, 2, 4, 8, 32]:
        values = rng.normal(size=(size, 5))
        np.testing.assert_allclose(girgis._fwht(values), hadamard(size) @ values, atol=1e-12)
        np.testing.assert_array_equal(girgis._hadamard_rows(3 if size > 2 else size, size),
                                      hadamard(size)[:3 if size > 2 else size])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_exact_mse_matches_enumeration(case):
    params = _params(case)
    x = _inputs(params, 6, seed=5)
    mse = girgis.exact_mse(params, x)
    assert mse.shape == (6,)
    for i in range(x.shape[1]):
        mean, variance, target = _oracle(params, x[:, i])
        np.testing.assert_allclose(mean, x[:, i], atol=1e-12)  # unbiased, exactly
        np.testing.assert_allclose(target, x[:, i], atol=1e-12)
        assert mse[i] == pytest.approx(variance.sum(), rel=1e-9, abs=1e-12)


def test_exact_mse_with_active_clipping_includes_the_bias():
    # l2 with r∞ below the coordinates of U·x; linf and l1 inputs outside the ball.
    l2 = dataclasses.replace(_params(("l2", 3, 3.0, 2, 2)), clip_radius=0.2)
    linf = _params(("linf", 3, 2.0, 3, 2))
    l1 = _params(("l1", 3, 0.5, 1, 1))
    for params, x in [(l2, np.array([[0.7], [0.0], [0.0]])), (linf, np.array([[1.5], [-0.2], [-3.0]])),
                      (l1, np.array([[1.0], [-1.0], [0.5]]))]:
        mean, variance, target = _oracle(params, x[:, 0])
        np.testing.assert_allclose(mean, target, atol=1e-12)
        assert np.abs(target - x[:, 0]).max() > 0.1
        expected = variance.sum() + np.sum((target - x[:, 0]) ** 2)
        assert girgis.exact_mse(params, x)[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_exact_mse_within_thesis_bound(case):
    params = _params(case)
    bound = girgis.exact_mse_bound(params)
    mse = girgis.exact_mse(params, _inputs(params, 400, seed=8))
    assert (mse <= bound * (1.0 + 1e-12)).all()
    if params.kind == "binary":  # eq. 3.10 is attained at b = 1
        ones = np.ones((params.dim, 1))
        assert girgis.exact_mse(params, ones)[0] == pytest.approx(bound, rel=1e-12)
    if params.kind == "l1":  # Lemma 3.4.1: the bound is E‖y‖², attained at x = 0
        assert girgis.exact_mse(params, np.zeros((params.dim, 1)))[0] == pytest.approx(bound, rel=1e-12)


def test_bounds_reduce_to_the_thesis_when_s_divides_d():
    d, v, s, m, r = 8, 3.0, 4, 3, 0.5
    binary = girgis.plan_girgis("binary", 9, d, 1.0, v, messages=s)
    assert girgis.exact_mse_bound(binary) == pytest.approx(d * d * (1 / s - 1 / d + s / v**2), rel=1e-12)
    linf = girgis.plan_girgis("linf", 9, d, r, v, levels=m, messages=s)
    expected = 4 * r * r * (4 * d * d / (3 * s) + 5 * d * d * s / v**2 + d / 4**m)
    assert girgis.exact_mse_bound(linf) == pytest.approx(expected, rel=1e-12)
    l1 = girgis.plan_girgis("l1", 9, 5, r, v)
    assert girgis.exact_mse_bound(l1) == pytest.approx(r * r * 5 * ((math.exp(v) + 1) / (math.exp(v) - 1)) ** 2)


# ---------------------------------------------------------------------------
# Monte Carlo: unbiasedness and MSE of the decoded sum.
# ---------------------------------------------------------------------------

REPEATS = 2000
USERS = 6
COPIES = 40  # each distinct input repeated: a relative bias grows like √(users) in z-scores


def _decoded_sums(params: girgis.GirgisParams, x: np.ndarray, repeats: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([girgis.decode(params, girgis.encode_block(params, x, rng)) for _ in range(repeats)])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_unbiased_and_mse_monte_carlo(case):
    params = _params(case)
    distinct = _inputs(params, USERS, seed=21)
    variance = COPIES * sum(_oracle(params, distinct[:, i])[1] for i in range(USERS))
    x = np.repeat(distinct, COPIES, axis=1)
    sums = _decoded_sums(params, x, REPEATS, seed=CASES.index(case))
    error = sums - x.sum(axis=1)
    z_mean = error.mean(axis=0) / np.sqrt(variance / REPEATS)
    assert np.abs(z_mean).max() < Z, z_mean
    squared = np.einsum("ij,ij->i", error, error)
    expected = girgis.exact_mse(params, x).sum()  # users independent and unbiased
    assert expected == pytest.approx(variance.sum(), rel=1e-9)
    z_mse = (squared.mean() - expected) / (squared.std(ddof=1) / math.sqrt(REPEATS))
    assert abs(z_mse) < Z, (squared.mean(), expected, z_mse)


def test_clipped_l2_monte_carlo():
    params = dataclasses.replace(_params(("l2", 3, 3.0, 2, 2)), clip_radius=0.25)
    x = np.array([[0.6], [-0.2], [0.1]])
    _, variance, target = _oracle(params, x[:, 0])
    sums = _decoded_sums(params, x, REPEATS, seed=4)
    z_mean = (sums.mean(axis=0) - target) / np.sqrt(variance / REPEATS)
    assert np.abs(z_mean).max() < Z
    squared = np.sum((sums - x[:, 0]) ** 2, axis=1)
    z_mse = (squared.mean() - girgis.exact_mse(params, x)[0]) / (squared.std(ddof=1) / math.sqrt(REPEATS))
    assert abs(z_mse) < Z


# ---------------------------------------------------------------------------
# The statistic: shape, invariants, additivity, determinism.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_statistic_invariants(case):
    params = _params(case)
    users = 37
    stat = girgis.encode_block(params, _inputs(params, users, seed=2), np.random.default_rng(1))
    assert stat.dtype == np.int64 and stat.shape == girgis.statistic_shape(params)
    assert stat.shape == (params.levels, params.padded_dim, 2)
    counts, ones = stat[..., 0], stat[..., 1]
    assert (0 <= ones).all() and (ones <= counts).all()
    if params.kind == "l1":
        assert counts.sum() == users
    else:  # one message per block and level
        per_block = counts.reshape(params.levels, params.messages, params.block_width).sum(axis=2)
        assert (per_block == users).all()
    assert girgis.users_in(params, stat) == users
    empty = girgis.encode_block(params, np.zeros((params.dim, 0)), np.random.default_rng(1))
    assert not empty.any()
    np.testing.assert_array_equal(girgis.decode(params, empty), np.zeros(params.dim))


@pytest.mark.parametrize("case", CASES[2::4], ids=_case_id)
def test_additivity_and_determinism(case):
    params = _params(case)
    x = _inputs(params, 30, seed=9)
    parts = [girgis.encode_block(params, x[:, lo:hi], np.random.default_rng(lo))
             for lo, hi in [(0, 7), (7, 20), (20, 30)]]
    again = [girgis.encode_block(params, x[:, lo:hi], np.random.default_rng(lo))
             for lo, hi in [(0, 7), (7, 20), (20, 30)]]
    for first, second in zip(parts, again):
        np.testing.assert_array_equal(first, second)
    left = (parts[0] + parts[1]) + parts[2]
    right = parts[0] + (parts[2] + parts[1])
    np.testing.assert_array_equal(left, right)
    assert girgis.users_in(params, left) == 30
    total = girgis.decode(params, left)
    np.testing.assert_array_equal(total, girgis.decode(params, right))
    np.testing.assert_allclose(total, sum(girgis.decode(params, part) for part in parts), rtol=1e-10, atol=1e-9)


def test_rotation_is_shared_orthogonal_and_seeded():
    params = girgis.plan_girgis("l2", 9, 5, 1.0, 1.0, rotation_seed=-3)
    signs = girgis.rotation_signs(params)
    assert signs.shape == (8,) and set(np.unique(signs)) <= {-1.0, 1.0}
    np.testing.assert_array_equal(signs, girgis.rotation_signs(dataclasses.replace(params)))
    u = _rotation(params)
    np.testing.assert_allclose(u @ u.T, np.eye(8), atol=1e-12)
    x = np.random.default_rng(0).normal(size=(5, 4))
    padded = np.vstack([x, np.zeros((3, 4))])
    np.testing.assert_allclose(girgis._rotate(params, x), u @ padded, atol=1e-12)
    others = {girgis.rotation_signs(girgis.plan_girgis("l2", 9, 64, 1.0, 1.0, rotation_seed=seed)).tobytes()
              for seed in range(4)}
    assert len(others) == 4


# ---------------------------------------------------------------------------
# Bad inputs.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, name", [
    (dict(kind="l3"), "kind"),
    (dict(users=0), "users"),
    (dict(users=2.5), "users"),
    (dict(dim=0), "dim"),
    (dict(radius=0.0), "radius"),
    (dict(radius=float("inf")), "radius"),
    (dict(budget=0.0), "budget"),
    (dict(budget=float("nan")), "budget"),
    (dict(budget="2"), "budget"),
    (dict(levels=0), "levels"),
    (dict(levels=girgis.MAX_LEVELS + 1), "levels"),
    (dict(kind="binary", levels=2), "levels"),
    (dict(kind="l1", levels=2), "levels"),
    (dict(messages=0), "messages"),
    (dict(messages=11), "messages"),
    (dict(kind="l1", messages=2), "messages"),
    (dict(kind="l2", messages=17), "messages"),
    (dict(rotation_seed=1.5), "rotation_seed"),
    (dict(beta=0.0), "beta"),
    (dict(beta=1.0), "beta"),
])
def test_plan_rejects_bad_arguments(kwargs, name):
    arguments = dict(kind="linf", users=10, dim=10, radius=1.0, budget=2.0, levels=1, messages=1)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        girgis.plan_girgis(**arguments)


def test_encode_and_decode_reject_bad_inputs():
    linf = girgis.plan_girgis("linf", 10, 4, 1.0, 2.0, levels=2, messages=2)
    binary = girgis.plan_girgis("binary", 10, 4, 1.0, 2.0)
    rng = np.random.default_rng(0)
    for params, x in [(linf, np.zeros((3, 5))), (linf, np.zeros(4)), (linf, np.full((4, 2), np.nan)),
                      (binary, np.full((4, 2), 0.5))]:
        with pytest.raises(ValueError, match=r"^inputs"):
            girgis.encode_block(params, x, rng)
        with pytest.raises(ValueError, match=r"^inputs"):
            girgis.exact_mse(params, x)
    stat = girgis.encode_block(linf, rng.uniform(-1, 1, (4, 5)), rng)
    bad_counts = stat.copy()
    bad_counts[1, 0, 0] += 1
    bad_ones = stat.copy()
    bad_ones[0, 0, 1] = bad_ones[0, 0, 0] + 1
    for bad in [stat[:1], stat.astype(np.float64), bad_counts, bad_ones]:
        with pytest.raises(ValueError, match=r"^statistic"):
            girgis.decode(linf, bad)
