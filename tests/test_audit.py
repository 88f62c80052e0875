"""The empirical privacy audit: its lower bound never exceeds the ledger, and
it does catch a mechanism with too little noise."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats

from pipeline import cli
from pipeline.accounting import ledger, pvec_tight
from pipeline.accounting.paper import pvec_analysis_bound
from pipeline.audit import audit_pvec, audit_shuffle_gaussian
from pipeline.protocols import CjmpVec
from pipeline.protocols.cjmp import plan_p1d, plan_pvec, plan_pvec_tight


def _exact_epsilon(trials: int, p: float, shift: int, delta: float) -> float:
    """The exact ε(δ) of Bin(trials, p) against Bin(trials, p) + shift: the
    smallest ε whose hockey-stick divergence, both ways, is at most δ."""
    support = np.arange(trials + shift + 1)
    null, moved = stats.binom.pmf(support, trials, p), stats.binom.pmf(support - shift, trials, p)

    def divergence(epsilon):
        return max(np.maximum(0, moved - math.exp(epsilon) * null).sum(),
                   np.maximum(0, null - math.exp(epsilon) * moved).sum())

    low, high = 0.0, 60.0
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (low, middle) if divergence(middle) <= delta else (middle, high)
    return high


def test_p1d_lower_bound_is_below_the_exact_epsilon_and_lemma_3_1():
    params = plan_p1d(16, 2.0, 15.0, 0.4)  # b_noise = 6: little noise, so the attack gets somewhere
    found = audit_pvec(params, trials=20_000)
    # The worst-case neighbours move one user's count by exactly g (0 vs g ones).
    exact = _exact_epsilon(params.users * params.b_noise, params.p, params.g, params.delta)
    # Lemma 3.1: standalone P_1D is (ε(1 + 2/g), δ)-DP in the worst case (notes T12).
    assert 0.0 < found["epsilon_lower_bound"] <= exact <= 15.0 * (1 + 2 / params.g)
    # The attack gets within a factor of the truth, so a ledger under-reporting by more would show.
    assert found["epsilon_lower_bound"] >= 0.3 * exact, (found["epsilon_lower_bound"], exact)


def test_pvec_lower_bound_is_below_the_paper_ledger():
    params = plan_pvec(16, 2, 15.0, 0.4, 1.0)
    bound, _ = pvec_analysis_bound(CjmpVec.event(params, 4096))
    assert audit_pvec(params, trials=20_000)["epsilon_lower_bound"] <= bound


def test_the_audit_catches_a_mechanism_with_too_little_noise():
    honest = plan_pvec(16, 1, 1.0, 0.1, 1.0)  # the ledger claims ε ≈ 0.34 for this call
    broken = dataclasses.replace(honest, b_noise=1, p=0.01)  # the same call with nearly noise-free counts
    found = audit_pvec(broken, trials=20_000)
    # ln(10000 / ln(40)) ≈ 7.9 is the most 10^4 trials can show at 95%.
    assert found["epsilon_lower_bound"] > 5.0 > pvec_analysis_bound(CjmpVec.event(honest, 4096))[0]


@pytest.mark.parametrize("dim,epsilon", [(2, 4.0), (1, 2.0)])
def test_tight_pvec_lower_bound_is_below_the_tight_ledger_and_near_it(dim, epsilon):
    """Where the bound can be approached (tight noise, few users): the attack's 95% lower bound is
    below the ledger, and at least 0.45 of it (measured: 0.59 and 0.63 at 20,000 trials), so a
    ledger that over-claimed its noise, or an attack that lost its power, would fail here."""
    params = plan_pvec_tight(16, dim, epsilon, 0.01, 1.0)
    claimed = pvec_tight.composed_epsilon(ledger.tight_bound(CjmpVec.event(params, 4096)), 1, 0.01)[0]
    found = audit_pvec(params, trials=20_000)["epsilon_lower_bound"]
    assert 0.45 * claimed <= found <= claimed <= epsilon, (found, claimed)


@pytest.mark.parametrize("accounting", ["paper", "tight"])
def test_audit_command_reports_both_numbers(tmp_path, capsys, accounting):
    path = tmp_path / "a.yaml"
    path.write_text("problem: {dim: 2}\nn_users: 64\noptimizer: {name: mean_estimation}\n"
                    f"privacy: {{epsilon: 15.0, delta: 0.4, accounting: {accounting}}}\nexecution: {{backend: local}}\n")
    assert cli.main(["audit", str(path), "--trials", "4000"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["ledger"]["accounting"] == accounting == printed["call"]["calibration"]
    assert printed["audit"]["epsilon_lower_bound"] <= printed["ledger"]["epsilon"] <= 15.0
    assert printed["call"]["users"] == 64 and math.isclose(printed["audit"]["confidence"], 0.95)
    assert cli.main(["audit", str(path), "--trials", "5"]) == 2


@pytest.mark.parametrize("users,sigma", [(2, 0.5), (10, 0.5)])
def test_shuffle_gaussian_lower_bound_is_below_its_accountant(users, sigma):
    from pipeline.accounting.shuffle_gaussian import shuffle_gaussian_epsilon

    delta = 1e-3
    claimed = shuffle_gaussian_epsilon(users, sigma, delta, lambda_max=256)["epsilon"]
    found = audit_shuffle_gaussian(users, sigma, delta, trials=20_000)["epsilon_lower_bound"]
    # Sound, and the attack finds a real share of it (more users: more amplification, a weaker attack).
    assert 0.25 * claimed <= found <= claimed, (found, claimed)
