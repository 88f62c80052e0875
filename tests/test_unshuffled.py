"""What shuffle-Gaussian reports spend without the shuffler (pipeline.accounting.unshuffled), the
report's shuffle_gain.csv: checked against the exact divergence of the unshuffled round (by
quadrature), against the exact ε of the Gaussian mechanism (dp_accounting's PLD), and against the
shuffled ledger itself (post-processing: never below it)."""
from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest
import scipy.integrate
import scipy.optimize
import scipy.stats

from pipeline import report
from pipeline.accounting import mechanisms
from pipeline.accounting.compositions import FULLY_INTERACTIVE, SEQUENTIAL
from pipeline.accounting.events import GaussianSumDpEvent, PoissonGaussianDpEvent, ShuffleGaussianDpEvent
from pipeline.accounting.ledger import TIGHT, PrivacyLedger
from pipeline.accounting.rdp import rdp_to_dp
from pipeline.accounting.unshuffled import unshuffled_epsilon, unshuffled_ledger


def _exact_renyi(rate: float, shift: float, sigma: float, order: float) -> float:
    """D_α of (1 − q)·⊥ + q·N(shift, σ²) against (1 − q)·⊥ + q·N(0, σ²), by quadrature: the changed
    user's view of one unshuffled round (its report, or nothing), in the direction of the shift.
    The integrand exp(f) is scaled by its numerically found peak, so large orders do not overflow."""
    def log_integrand(x):
        return order * scipy.stats.norm.logpdf(x, shift, sigma) + (1.0 - order) * scipy.stats.norm.logpdf(x, 0.0, sigma)

    peak = scipy.optimize.minimize_scalar(lambda x: -log_integrand(x), bracket=(-10 * sigma, 10 * sigma)).x
    top = log_integrand(peak)
    scaled, _ = scipy.integrate.quad(lambda x: math.exp(log_integrand(x) - top), peak - 40 * sigma, peak + 40 * sigma,
                                     epsabs=0.0, epsrel=1e-10, limit=400)
    log_moment = top + math.log(scaled)
    return np.logaddexp(math.log1p(-rate) if rate < 1.0 else -np.inf, math.log(rate) + log_moment) / (order - 1.0)


@pytest.mark.parametrize("rate", [0.005, 0.1, 1.0])
@pytest.mark.parametrize("sigma", [1.0, 5.86])
def test_an_unshuffled_rounds_curve_is_the_exact_divergence_of_a_report_or_nothing(rate, sigma):
    population = 1000
    if rate < 1.0:
        event = PoissonGaussianDpEvent(population, rate, 3, 2.0, sigma)
    else:
        event = GaussianSumDpEvent(population, population, 3, 2.0, sigma)
    curve = mechanisms.paper_call(event).rdp
    for order in (2, 3, 8, 32):
        exact = _exact_renyi(rate, 2.0, sigma, order)
        assert curve[order - 2] == pytest.approx(exact, rel=1e-8, abs=1e-13), order


def _ledger_json(composition: str, rounds: int, users: int, population: int, sigma: float, rate: float) -> dict:
    ledger = PrivacyLedger(composition, 100.0, 1e-6, accounting=TIGHT)
    stride = users if composition == SEQUENTIAL else 0
    ledger.record_rounds(0, rounds, 0, stride, population,
                         ShuffleGaussianDpEvent(users, population, 5, 2.0, sigma, rate))
    return ledger.to_dict()


# (composition, rounds, users, population, σ, rate): shuffled check-in as tv16/checkin.yaml plans it
# at ε = 0.25, sequential batches of every user, a uniform sample, and one round.
SETTINGS = [(FULLY_INTERACTIVE, 190, 35946, 35946, 5.858, 0.005286), (SEQUENTIAL, 50, 700, 700, 3.0, 0.0),
            (FULLY_INTERACTIVE, 40, 100, 2000, 4.0, 0.0), (FULLY_INTERACTIVE, 1, 60000, 60000, 5.0, 0.1)]


@pytest.mark.parametrize("setting", SETTINGS)
def test_without_the_shuffler_a_run_never_spends_less(setting):
    """The shuffled reports are a function of the unshuffled ones. (The sum's tight routes, PLD or
    GDP, bound a sum in which an absent user hides: they give the check-in run 0.046 here, below
    the shuffled ledger's 0.25, and are not this bound.)"""
    data = _ledger_json(*setting)
    shuffled = data["accounting"]["tight"]["epsilon"]
    without = unshuffled_epsilon(data)
    assert without >= shuffled
    assert unshuffled_ledger(data).total(TIGHT)[0] >= 0.0  # it composes in either mode


@pytest.mark.parametrize("rounds", [1, 190])
def test_a_checkin_runs_unshuffled_epsilon_is_its_exact_curve_converted(rounds):
    """End to end: the ε of T shuffled check-in rounds without the shuffler is T times the exact
    curve of one unshuffled round (quadrature, every order the ledgers use), converted as every
    ledger converts (CKS20 Prop. 12): the event's rate, σ and Δ carried over, and nothing else."""
    sigma, rate = 5.858, 0.005286
    data = _ledger_json(FULLY_INTERACTIVE, rounds, 35946, 35946, sigma, rate)
    exact = np.array([_exact_renyi(rate, 2.0, sigma, order) for order in mechanisms.ORDERS])
    converted = rdp_to_dp(mechanisms.ORDERS, rounds * exact, 1e-6).epsilon
    assert unshuffled_epsilon(data) == pytest.approx(converted, rel=1e-7)


@pytest.mark.parametrize("rounds, sigma", [(1, 3.0), (20, 8.0), (190, 30.0)])
def test_every_user_answering_it_lies_between_the_exact_gaussian_and_the_classic_conversion(rounds, sigma):
    """With every user answering (no sampling), unshuffled reports are T Gaussian mechanisms: their
    exact ε (dp_accounting's PLD of the Gaussian, a lower bound on any valid accountant) is below
    this bound, and Mironov's conversion of the same RDP, min_α TαΔ²/(2σ²) + log(1/δ)/(α − 1),
    above it (the ledger converts more tightly, CKS20 Prop. 12)."""
    delta, sensitivity = 1e-6, 2.0
    data = _ledger_json(FULLY_INTERACTIVE, rounds, 500, 500, sigma, 0.0)
    ours = unshuffled_epsilon(data)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(sigma / sensitivity), rounds)
    exact = pld.get_epsilon(delta)
    orders = np.arange(2.0, 257.0)
    classic = float(np.min(rounds * orders * sensitivity**2 / (2 * sigma**2) + math.log(1 / delta) / (orders - 1)))
    assert exact <= ours <= classic


def test_the_report_gives_both_epsilons_per_target_and_the_same_runs_accuracy(tmp_path):
    rows = []
    for target, sigma in ((1.0, 6.0), (4.0, 2.0)):
        for seed in range(3):
            run_id = f"r{target:g}-{seed}"
            data = _ledger_json(FULLY_INTERACTIVE, 50, 5000, 5000, sigma, 0.01)
            (tmp_path / "artifacts" / run_id).mkdir(parents=True)
            (tmp_path / "artifacts" / run_id / "ledger.json").write_text(json.dumps(data))
            rows.append({"run_id": run_id, "results_folder": str(tmp_path), "optimizer.name": "dss_sgd",
                         "privacy.protocol": "shuffle_gaussian", "privacy.accounting": "tight",
                         "privacy.epsilon": target, "epsilon": data["accounting"]["tight"]["epsilon"],
                         "final_test_accuracy": 0.6 + 0.05 * seed + 0.1 * target})
    rows.append({**rows[0], "run_id": "central", "privacy.protocol": "central_gaussian"})  # not compared
    gain = report.shuffle_gain(pd.DataFrame(rows))
    assert list(gain["privacy.epsilon"]) == [1.0, 4.0] and set(gain["seeds"]) == {3}
    for _, row in gain.iterrows():
        data = _ledger_json(FULLY_INTERACTIVE, 50, 5000, 5000, 6.0 if row["privacy.epsilon"] == 1.0 else 2.0, 0.01)
        assert row["epsilon_unshuffled"] == unshuffled_epsilon(data) > row["epsilon"]
        assert row["ratio"] == row["epsilon_unshuffled"] / row["epsilon"]
        assert row["accuracy"] == pytest.approx(0.65 + 0.1 * row["privacy.epsilon"])
        assert row["accuracy_se"] == pytest.approx(0.05 / math.sqrt(3))
    assert report.shuffle_gain(pd.DataFrame(rows[-1:])).empty
