"""Theory curves: the exponents the theorems state, and the slope fit."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline.optimizers import FullGD, MeanEstimation, SeqSGD, theory
from pipeline.problems import Quadratic
from pipeline.report import fit_slope

PROBLEM = Quadratic(dim=10, radius=1.0)


def test_fit_slope_recovers_a_power_law():
    n = np.array([1e3, 1e4, 1e5, 1e6])
    assert fit_slope(n, 3.0 * n**-0.8) == pytest.approx(-0.8, abs=1e-12)
    assert math.isnan(fit_slope(np.array([10.0, 10.0]), np.array([1.0, 2.0])))


def _slope(rate, low=1e6, high=1e7):
    return math.log(rate(high) / rate(low)) / math.log(high / low)


def test_rates_have_the_theorems_exponents_in_n():
    # Theorem 4.1: n^{-1/2} exactly.
    assert _slope(lambda n: SeqSGD.from_config(PROBLEM, int(n), 1.0, 1e-6).theory_rate()) == pytest.approx(-0.5, abs=1e-9)
    # Theorem 4.9: the privacy term n^{-1} dominates at small n, 1/√n at large n.
    full = lambda n: FullGD.from_config(PROBLEM, int(n), 0.1, 1e-6, rounds=1).theory_rate()  # noqa: E731
    assert _slope(full, 1e2, 1e3) == pytest.approx(-1.0, abs=0.02)
    assert _slope(full, 1e12, 1e13) == pytest.approx(-0.5, abs=0.02)
    # Mean estimation: the protocol's variance over n², while it dominates Var(x)/n.
    mean = lambda n: MeanEstimation.from_config(PROBLEM, int(n), 1.0, 1e-6).theory_rate()  # noqa: E731
    assert _slope(mean, 1e3, 1e4) == pytest.approx(-2.0, abs=0.05)


def test_reference_rates_are_ordered():
    for n in (10**3, 10**5, 10**7):
        nonprivate = theory.nonprivate_rate(Quadratic(dim=10, radius=1.0), n)
        central = theory.central_rate(PROBLEM, n, 1.0)
        local = theory.local_rate(PROBLEM, n, 1.0)
        shuffle_full = theory.full_gd_rate(PROBLEM, n, 1.0, 1e-6)
        assert nonprivate <= central <= local
        assert central <= shuffle_full  # the shuffle bound carries extra log factors


def test_report_fits_one_slope_per_configuration(tmp_path):
    """Runs that differ in anything but n (here d) are separate series; each
    exactly ∝ n⁻² must fit −2, not a mixture."""
    from pipeline import results
    from pipeline.report import build_report
    from pipeline.tracking import ParquetStore

    store = ParquetStore(tmp_path)  # a results folder as the pipeline writes it: one part file per run
    for dim in (5, 50):
        for n in (1_000, 10_000, 100_000):
            run_id, mlflow_run_id = f"d{dim}-n{n}", f"mlflow-d{dim}-n{n}"
            row = {"run_id": run_id, "mlflow_run_id": mlflow_run_id, "experiment": "theory", "status": "finished",
                   "config_hash": run_id, "seed": 0, "n_users": n,
                   "optimizer.name": "mean_estimation", "privacy.epsilon": 1.0, "privacy.accounting": "paper",
                   "problem.dim": dim, "final_excess_loss": dim * n**-2.0, "theory_rate": dim * n**-2.0,
                   "central_rate": 1.0, "local_rate": 1.0, "nonprivate_rate": 1.0}
            rounds = pd.DataFrame([{"run_id": run_id, "mlflow_run_id": mlflow_run_id, "experiment": "theory",
                                    "round": 0, "excess_loss": dim * n**-2.0, "epsilon_spent": 1.0}])
            store.commit(row, rounds, results.KINDS)
    build_report(tmp_path)
    slopes = pd.read_csv(tmp_path / "report" / "slopes.csv")
    assert len(slopes) == 2 and np.allclose(slopes["measured_slope"], -2.0) and np.allclose(slopes["theory_slope"], -2.0)
    assert sorted(slopes["series"]) == ["mean_estimation ε=1 dim=5", "mean_estimation ε=1 dim=50"]


def test_report_slope_interval_is_the_bootstrap_of_the_seeds_within_each_n():
    """slopes.csv's interval resamples each n's seeds. With loss = e^{σz}/n (σ = 0.05, 50
    seeds at each of three n) its width is the delta method's 2·z_{0.95}·SE of the slope
    within 10%: the Monte Carlo error of a 2000-resample 90% percentile width is 2%, and
    10% is 5 of those. It holds the fitted slope, and is the slope itself when seeds agree."""
    from pipeline.report import SLOPE_LEVEL, fit_slope, slope_interval

    n_users = np.array([1e3, 1e4, 1e5])
    seeds, sigma = 50, 0.05
    losses = [np.exp(sigma * np.random.default_rng(5).standard_normal(seeds)) / n for n in n_users]
    low, high = slope_interval(n_users, losses)
    assert low < fit_slope(n_users, [loss.mean() for loss in losses]) < high
    centred = np.log(n_users) - np.log(n_users).mean()
    weights = centred / (centred @ centred)
    # A resampled mean's variance is the seeds' variance (divisor k) over k; log's derivative is 1/mean.
    variance = sum(w**2 * loss.var() / seeds / loss.mean() ** 2 for w, loss in zip(weights, losses))
    expected = 2 * stats.norm.ppf(0.5 + SLOPE_LEVEL / 2) * math.sqrt(variance)
    assert abs((high - low) / expected - 1) < 0.10
    assert slope_interval(n_users, [np.full(4, 1 / n) for n in n_users]) == pytest.approx((-1.0, -1.0))
    assert all(math.isnan(bound) for bound in slope_interval(n_users, [np.ones(1)] * 3))  # one seed: no interval
