"""Numerical limits (notes seed-000 T11): noise-bit counts far beyond int64
stay exact where they can and finite everywhere, and the normal
approximation, when it is used, is flagged in the ledger."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from pipeline.accounting import SEQUENTIAL, PrivacyLedger
from pipeline.protocols import CjmpVec, cjmp
from pipeline.protocols.sampling import MAX_EXACT_CHUNKS, MAX_TRIALS_PER_DRAW, NORMAL_APPROXIMATION, noise_sampler


def _huge(b_noise: int) -> cjmp.PvecParams:
    base = cjmp.plan_pvec(4096, 3, 1.0, 1e-6, 1.0)
    return dataclasses.replace(base, b_noise=b_noise, p=0.4999999)


def test_b_noise_1e18_gives_finite_unbiased_estimates():
    """b_noise = 1e18 with 4096 users: 4e21 trials per coordinate, beyond the
    exact chunks, so the normal approximation runs; the estimate stays finite
    and unbiased within 5 standard errors of its exact variance."""
    params = _huge(10**18)
    assert params.noise_sampler(4096) == NORMAL_APPROXIMATION
    vectors = np.zeros((3, 4096))
    rng = np.random.default_rng(11)
    trials = 400
    estimates = np.array([cjmp.decode(params, cjmp.finish(params, cjmp.encode_block(params, [vectors.copy()], rng)))
                          for _ in range(trials)])
    assert np.isfinite(estimates).all()
    standard_error = np.sqrt(cjmp.exact_variance(params, vectors) / trials)
    assert np.all(np.abs(estimates.mean(axis=0)) <= 5 * standard_error)


def test_trials_beyond_int64_are_drawn_exactly_in_chunks():
    """1e20 trials (beyond int64, within the exact chunks): exact integers, finite."""
    params = _huge(10**20 // 4096)
    trials = 4096 * params.b_noise
    assert trials > 2**63 and noise_sampler(trials) == "binomial"
    assert trials <= MAX_EXACT_CHUNKS * MAX_TRIALS_PER_DRAW
    total = cjmp.encode_block(params, [np.zeros((3, 4096))], np.random.default_rng(3))
    assert total.ones_above_floor.dtype == np.int64 and isinstance(total.floor_total, int)
    assert total.floor_total > 2**63  # the public part lives in a Python int, exactly
    centred = cjmp.finish(params, total).centred_ones
    assert np.isfinite(centred).all() and np.all(np.abs(centred) < 10 * math.sqrt(trials))


def test_the_ledger_flags_the_normal_approximation():
    params = _huge(10**18)
    ledger = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6)
    exact = cjmp.plan_pvec(4096, 3, 1.0, 1e-6, 1.0)
    ledger.record(0, 0, 4096, CjmpVec.event(exact, 4096))
    assert ledger.to_dict()["accounting"]["paper"]["checks"]["exact_noise_sampler"]
    flagged = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6)
    flagged.record(0, 0, 4096, CjmpVec.event(params, 4096))
    record = flagged.to_dict()
    assert record["events"][0]["noise_sampler"] == NORMAL_APPROXIMATION
    assert record["accounting"]["paper"]["checks"]["exact_noise_sampler"] is False


def test_p1d_noise_beyond_2_to_the_53_bits_ends_and_keeps_the_lemmas_product():
    """Beyond 2⁵³ noise bits b_noise + 1 rounds to b_noise, and the loop that pushes p below ½ spun
    forever (ε = 1e-100, issue #29 item 9): it now ends, with p < ½ and b_noise·p ≥ the threshold
    / 2 that Lemma 3.1 needs (never less noise than asked); a threshold that is not finite is refused."""
    import pytest

    from pipeline.protocols.base import PlanError

    for epsilon in (1e-100, 1e-30, 1e-8):
        g, users, delta = 20, 100, 1e-6
        threshold = 180.0 * g * g * math.log(2.0 / delta) / (epsilon**2 * users)
        b_noise, p = cjmp.p1d_noise(g, users, epsilon, delta)
        assert p < 0.5 and b_noise > threshold and b_noise * p >= threshold / 2 * (1 - 1e-15)
    with pytest.raises(PlanError, match="inf noise bits"):
        cjmp.p1d_noise(20, 100, 1e-300, 1e-6)
