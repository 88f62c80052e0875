"""Tight P_vec accounting: the proven bound against exact hockey-stick divergences
of real neighbouring pairs, its calibration against the analytic Gaussian, and
its place in the ledger."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from pipeline.accounting import ledger as ledger_module
from pipeline.accounting import pvec_tight
from pipeline.accounting.ledger import PrivacyLedger
from pipeline.optimizers import FullGD
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec
from pipeline.protocols.cjmp import PvecParams, plan_pvec, plan_pvec_tight


def _pmf(trials: int, p: float, width: float = 12.0) -> tuple[np.ndarray, np.ndarray]:
    """Bin(trials, p) on its support within ±width sd (the rest is < 1e-25, far below δ here)."""
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    z = np.arange(max(0, math.floor(mean - width * sd)), min(trials, math.ceil(mean + width * sd)) + 1)
    return z, stats.binom.pmf(z, trials, p)


def _hockey_stick(shifted: np.ndarray, base: np.ndarray, epsilon: float) -> float:
    return float(np.maximum(shifted - math.exp(epsilon) * base, 0.0).sum())


def _exact_epsilon(shifts: tuple[int, ...], trials: int, p: float, delta: float) -> float:
    """The exact ε(δ) of one neighbouring pair whose roundings differ by `shifts`
    (integer inputs: no rounding randomness), both directions, by bisection on
    δ(ε) = Σ_z max(0, P(z) − e^ε Q(z)) over the product of the coordinates."""
    _, pmf = _pmf(trials, p)
    reach = max(abs(s) for s in shifts)
    padded = np.pad(pmf, reach)
    base, moved = np.array(1.0), np.array(1.0)
    for s in shifts:  # outer products over coordinates (d ≤ 2 here)
        base = np.multiply.outer(base, padded)
        moved = np.multiply.outer(moved, np.roll(padded, s))
    lo, hi = 0.0, 50.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        worst = max(_hockey_stick(moved, base, mid), _hockey_stick(base, moved, mid))
        lo, hi = (mid, hi) if worst > delta else (lo, mid)
    return hi


def test_shift_by_one_equals_the_renyi_divergence_of_the_restricted_pair():
    trials, p = 60, 0.3  # the window covers the whole support: W = [1, 60]
    bound, outside = pvec_tight.shift_by_one(trials, p)
    z = np.arange(0, trials + 2)
    base, shifted = stats.binom.pmf(z, trials, p), stats.binom.pmf(z - 1, trials, p)
    inside = (z >= 1) & (z <= trials)
    base_w, shifted_w = base[inside] / base[inside].sum(), shifted[inside] / shifted[inside].sum()
    for alpha, value in zip(pvec_tight.ORDERS, bound):
        forward = special.logsumexp(alpha * np.log(shifted_w) + (1 - alpha) * np.log(base_w)) / (alpha - 1)
        backward = special.logsumexp(alpha * np.log(base_w) + (1 - alpha) * np.log(shifted_w)) / (alpha - 1)
        assert value == pytest.approx(max(forward, backward), rel=1e-8, abs=2e-15)
    # Set aside: Z = 0 under Bin (prob q^M) or Z + 1 = M + 1 under the shifted law (p^M).
    assert outside == pytest.approx(max((1 - p) ** trials, p**trials), rel=1e-12)


def test_shift_by_one_approaches_the_gaussian_rdp_for_many_trials():
    trials, p = 4_000_000, 0.5
    bound, outside = pvec_tight.shift_by_one(trials, p)
    gaussian = pvec_tight.ORDERS / (2 * trials * p * (1 - p))  # αΔ²/(2σ²), Δ = 1
    assert np.all(bound >= gaussian * (1 - 1e-3)) and np.all(bound <= gaussian * 1.01)
    assert outside < 1e-40


@pytest.mark.parametrize("dim,epsilon", [(1, 1.0), (2, 4.0)])
def test_the_bound_is_above_the_exact_epsilon_of_every_worst_pair_and_close_to_it(dim, epsilon):
    delta = 1e-5
    params = plan_pvec_tight(40, dim, epsilon, delta, 1.0)
    trials, g = params.users * params.b_noise, params.g
    claimed = pvec_tight.composed_epsilon(pvec_tight.pvec_rdp(40, dim, g, params.b_noise, params.p), 1, delta)[0]
    assert claimed <= epsilon
    if dim == 1:
        pairs = [(s,) for s in range(1, g + 1)]
    else:  # integer points u, u' of the input disk (radius g/2): the longest differences, on the axis and diagonals
        pairs = [(a, b) for a in range(g + 1) for b in range(a + 1) if (g - 1) ** 2 < a * a + b * b <= g * g]
    exact = max(_exact_epsilon(pair, trials, params.p, delta) for pair in pairs)
    # Sound: no real pair is worse than the bound. Tight: the bound is within 40 % of the worst pair found.
    assert exact <= claimed <= 1.4 * exact, (exact, claimed)


@pytest.mark.parametrize("dim", [1, 10, 100, 1000])
@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-6), (4.0, 1e-8)])
def test_calibrated_noise_is_within_twice_the_analytic_gaussian(dim, epsilon, delta):
    users = 10_000
    params = plan_pvec_tight(users, dim, epsilon, delta, 1.0)
    noise = (2.0 / params.g) ** 2 * users * params.b_noise * params.p * (1 - params.p)
    gaussian = pvec_tight.analytic_gaussian_sigma(epsilon, delta, 2.0) ** 2  # sensitivity 2Δ₂
    assert noise < 2.0 * gaussian, noise / gaussian
    spent = pvec_tight.composed_epsilon(pvec_tight.pvec_rdp(users, dim, params.g, params.b_noise, params.p), 1, delta)
    assert 0.98 * epsilon <= spent[0] <= epsilon
    # Rounding adds at most n/4 per coordinate in count units: a sixteenth of the noise or less.
    assert (2.0 / params.g) ** 2 * users / 4 <= noise / 16 * 1.001


@pytest.mark.parametrize("users,dim,epsilon,delta", [(1000, 10, 1.0, 1e-6), (64, 2, 15.0, 0.4), (5000, 3, 0.5, 1e-8)])
def test_tight_accounting_of_paper_parameters_is_below_the_paper_bound(users, dim, epsilon, delta):
    event = CjmpVec.event(plan_pvec(users, dim, epsilon, delta, 1.0), 4096)
    paper_epsilon = ledger_module.paper_bound(event)[0]
    tight_epsilon = pvec_tight.composed_epsilon(ledger_module.tight_bound(event), 1, delta)[0]
    assert tight_epsilon < paper_epsilon <= epsilon


def _full_gd_ledger(accounting: str) -> PrivacyLedger:
    optimizer = FullGD.from_config(Quadratic(dim=3, radius=1.0), 2000, 1.0, 1e-6, rounds=50, accounting=accounting)
    schedule, protocol = optimizer.schedule(), CjmpVec(accounting)
    ledger = PrivacyLedger(schedule.composition, 1.0, 1e-6, schedule.slack, accounting)
    for r in range(schedule.rounds):
        plan = schedule.plan(r)
        ledger.record(r, plan.first_user, plan.stop_user, CjmpVec.event(protocol.plan(plan, 3), 4096))
    return ledger


def test_tight_full_gd_spends_its_whole_budget_and_paper_leaves_a_third():
    tight, paper = _full_gd_ledger("tight"), _full_gd_ledger("paper")
    spent = [tight.spent_after(r)[0] for r in range(tight.rounds)]
    assert all(a < b for a, b in zip(spent, spent[1:]))  # monotone in rounds
    assert 0.98 <= spent[-1] <= 1.0 and tight.within_target()
    assert paper.total()[0] < 0.7  # the notes: Lemma B.6's split spends 0.55-0.75 of ε = 1
    # The tight ledger also accounts the paper's calls, far below the paper's own total.
    assert tight.total()[1] == 1e-6 and paper.total("tight")[0] < 0.25 * paper.total()[0]
    document = tight.to_dict()
    assert document["accounting_mode"] == "tight" and list(document["accounting"]) == ["tight", "paper"]
    assert document["accounting"]["paper"]["epsilon"] is None  # tight noise is outside Theorem 3.2
    assert document["events"][0]["analysis_bound"] is None and document["events"][0]["calibration"] == "tight"


@settings(derandomize=True, max_examples=1000, deadline=None)
@given(users=st.integers(4, 60), b_noise=st.integers(1, 60), p=st.floats(0.05, 0.5),
       g=st.integers(1, 12), dim=st.integers(1, 50), delta=st.sampled_from([1e-2, 1e-4, 1e-6]))
def test_the_bound_is_never_below_the_exact_epsilon_of_a_one_coordinate_pair(users, b_noise, p, g, dim, delta):
    bound = pvec_tight.pvec_rdp(users, dim, g, b_noise, p) if users * b_noise >= g else None
    if bound is None:
        return
    claimed = pvec_tight.composed_epsilon(bound, 1, delta)[0]
    # One coordinate moved across its whole range: a real pair of neighbours for every d.
    assert claimed >= _exact_epsilon((g,), users * b_noise, p, delta)


def test_pvec_params_record_the_calibration():
    params = plan_pvec_tight(500, 4, 2.0, 1e-6, 3.0)
    assert isinstance(params, PvecParams) and params.calibration == "tight" and params.norm_bound == 3.0
    assert CjmpVec.event(params, 4096).calibration == "tight"
    assert plan_pvec(500, 4, 2.0, 1e-6, 3.0).calibration == "paper"


def test_what_the_orders_cannot_certify_is_refused_with_the_floor():
    with pytest.raises(ValueError, match="below 0.0646, the least the orders up to 256 can certify"):
        pvec_tight.calibrate_pvec(1000, 10, 0.02, 1e-10)


def test_split_pieces_refuse_where_their_series_would_cancel():
    # At variance 2 and α = 96 the series cancels completely (it would report ~0 for a true 2.04).
    with pytest.raises(ArithmeticError, match="variance ≥ 1e4"):
        pvec_tight.split_shift_by_one(8, np.array([1.0]), 0.5)
    # At production piece sizes the split bound equals the direct one for K = 1 and is above it for K > 1.
    piece = 1_000_000
    direct_one, _ = pvec_tight.shift_by_one(piece, 0.5)
    split, _ = pvec_tight.split_shift_by_one(piece, np.array([1.0, 4.0]), 0.5)
    integer = pvec_tight.ORDERS == np.round(pvec_tight.ORDERS)
    assert np.allclose(split[integer, 0], direct_one[integer], rtol=1e-8)
    direct_four, _ = pvec_tight.shift_by_one(4 * piece, 0.5)
    assert np.all(split[:, 1] >= direct_four * (1 - 1e-9))
