"""Tight P_vec calibration against the analytic Gaussian and the paper's rule, measured in one run."""
from __future__ import annotations

import time

from bench.timing import sized
from pipeline.accounting import paper, pvec_tight
from pipeline.protocols.cjmp import plan_pvec

USERS = 10_000
TABLE = [(1, 1.0, 1e-6), (10, 1.0, 1e-6), (100, 1.0, 1e-6), (1000, 1.0, 1e-6),
         (10, 0.25, 1e-8), (10, 4.0, 1e-8), (1000, 8.0, 1e-5)]


def _variance(users: int, g: int, b_noise: int, p: float) -> float:
    """Per-coordinate noise variance of P_vec's estimate, Δ₂ = 1: (2/g)²·n·b_noise·p(1 − p)."""
    return (2.0 / g) ** 2 * users * b_noise * p * (1.0 - p)


def _cold(function):
    """A function's value and its time from empty caches (a calibration's cost is paid once, cold)."""
    for cached in (pvec_tight.gaussian_rdp_multiplier, pvec_tight.analytic_gaussian_sigma,
                   pvec_tight.calibrate_pvec, pvec_tight.shift_by_one):
        cached.cache_clear()
    began = time.perf_counter()
    value = function()
    return value, time.perf_counter() - began


def run(size: str = "quick") -> dict[str, float]:
    """Noise variance of tight and paper P_vec as multiples of the analytic Gaussian (sensitivity 2Δ₂),
    and the calibration's time against the Gaussian's (the reference), for d = 1..1000. Both
    calibrations are timed the same way: from empty caches, once each (a cold calibration is what a
    run pays; a repeat would read the caches).

    Args:
      size: one of bench.timing.SIZES; full: also P_GD's 100 rounds composed, at n = 1e6;
        smoke: the d = 1 row only.
    """
    figures: dict[str, float] = {}
    table = sized(size, TABLE[:1], TABLE, TABLE + [(10, 1.0, 1e-6, 100)])
    for row in table:
        dim, epsilon, delta = row[:3]
        folds = row[3] if len(row) > 3 else 1
        users = 1_000_000 if folds > 1 else USERS
        # The reference: the analytic Gaussian (√T split for T > 1).
        sigma, reference_s = _cold(lambda: pvec_tight.analytic_gaussian_sigma(epsilon / folds**0.5, delta, 2.0))
        tight, tight_s = _cold(lambda: pvec_tight.calibrate_pvec(users, dim, epsilon, delta, folds))
        key = f"d{dim}_eps{epsilon:g}_delta{delta:g}" + (f"_T{folds}" if folds > 1 else "")
        figures[f"pvec_tight_variance_vs_gaussian_{key}"] = _variance(users, tight.g, tight.b_noise, tight.p) / sigma**2
        if folds == 1:
            planned = plan_pvec(users, dim, epsilon, delta, 1.0)
            figures[f"pvec_paper_variance_vs_gaussian_{key}"] = (
                _variance(users, planned.g, planned.b_noise, planned.p) / sigma**2)
        else:
            epsilon0, delta0 = paper.full_gd_round_budget(epsilon, delta, folds)
            planned = plan_pvec(users, dim, epsilon0, delta0, 1.0)
            figures[f"pvec_paper_variance_vs_gaussian_{key}"] = (
                _variance(users, planned.g, planned.b_noise, planned.p) / sigma**2)
        figures[f"pvec_tight_epsilon_used_{key}"] = tight.epsilon / epsilon
        figures[f"pvec_tight_calibration_time_vs_gaussian_{key}"] = tight_s / max(reference_s, 1e-9)
        figures[f"pvec_tight_calibration_s_{key}"] = tight_s
    return figures
