"""Record-level accounting of seed 001's CLDP-SGD and DSS-SGD (clients holding m records): the
ledger against Lemma 4.3.1 / 4.4.1, Thm 5.4.1, Thm 5.3.1 and Lemma 2.1.3, written out here from
the notes (shared/notes/seed-001.md §3.3, §3.6–§3.8), never through the pipeline's helpers."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import special, stats

from pipeline import cli
from pipeline.accounting import mechanisms
from pipeline.accounting.events import ShuffleLdpDpEvent
from pipeline.accounting.ledger import FULLY_INTERACTIVE, PrivacyLedger

ALPHAS = np.arange(2.0, 257.0)  # the ledger's documented integer orders 2..256 (mechanisms.ORDERS)
RTOL = 1e-9  # exact formulas: only float rounding differs (log-space sums of ≤ 256 terms)
N, K, M, EPS0, DELTA, T = 1000, 50, 4, 1.0, 1e-6, 200  # n clients, k sampled, m records each
SAMPLE_TAIL = 1e-12  # the ledger's documented mass below its Poisson sample-size bound (folded into ε0-LDP)


# --- the seed's formulas, written out ---------------------------------------------------------------

def _terms_over_j(per_j):
    """log Σ_{j=2..α} exp(per_j(α, j)) at every α of ALPHAS (per_j vectorized; j > α masked)."""
    a, j = ALPHAS[:, None], ALPHAS[None, :]
    log_binom = special.gammaln(a + 1) - special.gammaln(j + 1) - special.gammaln(np.maximum(a - j + 1, 1))
    return np.where(j <= a, per_j(a, j, log_binom), -np.inf)


def thm541(k: int, gamma: float, eps0: float) -> np.ndarray:
    """Thm 5.4.1: subsampled shuffle of k reports, the changed one present with probability γ."""
    kbar = math.floor((k - 1) / (2 * math.exp(eps0))) + 1
    la, lb = math.log(math.expm1(eps0)), math.log(math.expm1(2 * eps0))
    quad = math.log(4) + 2 * math.log(gamma) + 2 * la - math.log(kbar) - eps0
    v = math.log(2) + 2 * lb - math.log(kbar) - 2 * eps0

    def per_j(a, j, log_binom):
        higher = log_binom + j * math.log(gamma) + np.log(j) + special.gammaln(j / 2) + j / 2 * v
        return np.where(j == 2, log_binom + quad, higher)
    # Υ in closed form, ((1+x)^α − 1 − αx)·e^{−(k−1)/(8e^ε0)} with x = γ(e^2ε0−1)/e^ε0, as
    # e^a(−expm1(−a) − αx e^−a), a = α log1p(x): no overflow, no cancellation at small x.
    x = gamma * math.exp(lb - eps0)
    a = ALPHAS * math.log1p(x)
    upsilon = a + np.log(-np.expm1(-a) - ALPHAS * x * np.exp(-a)) - (k - 1) / (8 * math.exp(eps0))
    terms = np.concatenate([np.zeros((len(ALPHAS), 1)), _terms_over_j(per_j), upsilon[:, None]], axis=1)
    return special.logsumexp(terms, axis=1) / (ALPHAS - 1)


def ub1(n: int, eps0: float) -> np.ndarray:
    """Thm 5.3.1 (UB1): one shuffle of n ε0-LDP reports."""
    nbar = math.floor((n - 1) / (2 * math.exp(eps0))) + 1
    la, lb = math.log(math.expm1(eps0)), math.log(math.expm1(2 * eps0))
    v = 2 * lb - math.log(2 * nbar) - 2 * eps0

    def per_j(a, j, log_binom):
        higher = log_binom + np.log(j) + special.gammaln(j / 2) + j / 2 * v
        return np.where(j == 2, log_binom + 2 * la - math.log(nbar) - eps0, higher)
    tail = eps0 * ALPHAS - (n - 1) / (8 * math.exp(eps0))
    terms = np.concatenate([np.zeros((len(ALPHAS), 1)), _terms_over_j(per_j), tail[:, None]], axis=1)
    return special.logsumexp(terms, axis=1) / (ALPHAS - 1)


def ub2(n: int, eps0: float) -> np.ndarray:
    """Thm 5.3.2 (UB2)."""
    nbar = math.floor((n - 1) / (2 * math.exp(eps0))) + 1
    return np.logaddexp(ALPHAS**2 * math.expm1(eps0) ** 2 / nbar,
                        eps0 * ALPHAS - (n - 1) / (8 * math.exp(eps0))) / (ALPHAS - 1)


def cor531(n: int, eps0: float) -> np.ndarray:
    """Cor 5.3.1, only where α⁴e^{5ε0} ≤ n/9 (trap 10: refuse it outside)."""
    value = np.log1p(4 * ALPHAS * (ALPHAS - 1) / 2 * math.expm1(eps0) ** 2 / n) / (ALPHAS - 1)
    return np.where(ALPHAS**4 * math.exp(5 * eps0) <= n / 9, value, np.inf)


def shuffle_min(n: int, eps0: float) -> np.ndarray:
    """§3.10's per-shuffle ledger curve: the minimum of the valid bounds UB1, UB2, Cor 5.3.1, ε0-LDP."""
    return np.minimum.reduce([ub1(n, eps0), ub2(n, eps0), cor531(n, eps0), ldp(eps0)])


def ldp(eps0: float) -> np.ndarray:
    """eq. (3.4): RDP of binary randomized response, which every ε0-LDP report satisfies."""
    lq, l1q = -math.log1p(math.exp(-eps0)), -math.log1p(math.exp(eps0))
    return np.logaddexp(ALPHAS * lq + (1 - ALPHAS) * l1q, ALPHAS * l1q + (1 - ALPHAS) * lq) / (ALPHAS - 1)


def mixture(rate: float, parts) -> np.ndarray:
    """Joint convexity: log(1 − rate + Σ w·e^{(α−1)U})/(α−1), the weights w summing to rate."""
    terms = [np.full(ALPHAS.shape, math.log1p(-rate))] + [math.log(w) + (ALPHAS - 1) * u for w, u in parts]
    return np.logaddexp.reduce(terms) / (ALPHAS - 1)


def wbk(gamma: float, rdp: np.ndarray) -> np.ndarray:
    """WBK19 Thm 9 (seed 004 eq. 16, ε(∞) = ∞): k-of-n subsampling at rate γ of a curve ε(j) on ALPHAS,
    ε'(λ) = log(1 + γ²C(λ,2)·min{4(e^{ε(2)} − 1), 2e^{ε(2)}} + Σ_{j=3..λ} 2γ^j C(λ,j) e^{(j−1)ε(j)})/(λ−1)."""
    out = np.empty_like(ALPHAS)
    second = min(math.log(4.0) + math.log(math.expm1(rdp[0])), math.log(2.0) + rdp[0])
    for index, lam in enumerate(ALPHAS.astype(int)):
        j = np.arange(3, lam + 1)
        log_binom = special.gammaln(lam + 1) - special.gammaln(j + 1) - special.gammaln(lam - j + 1)
        terms = [0.0, 2 * math.log(gamma) + math.log(lam * (lam - 1) / 2) + second,
                 *(math.log(2.0) + j * math.log(gamma) + log_binom + (j - 1) * rdp[j - 2])]
        out[index] = special.logsumexp(terms) / (lam - 1)
    return out


def to_dp(rdp: np.ndarray, delta: float) -> float:
    """Lemma 2.1.3 (CKS20 Prop 12, as pipeline/accounting/rdp.py documents): min over α."""
    return float(np.min(rdp + (math.log(1 / delta) + (ALPHAS - 1) * np.log(1 - 1 / ALPHAS) - np.log(ALPHAS))
                        / (ALPHAS - 1)))


def rr_pair(log_pmf, ratio) -> np.ndarray:
    """Exact D_α of shuffled 2RR on D = 0…0 vs D' = 0…01: log E_Q[ratio^α]/(α−1) (Thm 5.3.3/5.4.2 pair)."""
    return special.logsumexp(log_pmf[None, :] + ALPHAS[:, None] * np.log(ratio)[None, :], axis=1) / (ALPHAS - 1)


def _log_binom_pmf(c, trials, p):
    return (special.gammaln(trials + 1) - special.gammaln(c + 1) - special.gammaln(trials - c + 1)
            + c * math.log(p) + (trials - c) * math.log1p(-p))


def rr_uniform_lower(reports: int, present: float, eps0: float) -> np.ndarray:
    """2RR pair, R reports shuffled, the changed record's among them w.p. γ = `present`."""
    # count c ~ Bin(R, 1/(e^ε0+1)) under D; P(D')/P(D) = 1 − γ + γ((R−c)e^−ε0 + c·e^ε0)/R
    c = np.arange(reports + 1.0)
    r = ((reports - c) * math.exp(-eps0) + c * math.exp(eps0)) / reports
    return rr_pair(_log_binom_pmf(c, reports, 1 / (1 + math.exp(eps0))), 1 - present + present * r)


def rr_poisson_lower(n: int, q: float, m: int, eps0: float) -> np.ndarray:
    """2RR pair under self-sampling (q of n clients join, one of m records each), output (J joiners, count c)."""
    # Given J, the changed record's report is present w.p. J/(nm):
    # ratio 1 + ((J−c)(e^−ε0 − 1) + c(e^ε0 − 1))/(nm).
    # J is summed where its pmf is within e^−80 of the mode: the rest, even times ratio^α ≤ e^22 here, is nil.
    joiners = np.arange(n + 1.0)
    joint = _log_binom_pmf(joiners, n, q)
    joiners = joiners[joint >= joint.max() - 80.0]
    jj, cc = np.meshgrid(joiners, np.arange(joiners.max() + 1), indexing="ij")
    keep = cc <= jj
    jj, cc = jj[keep], cc[keep]
    log_pmf = _log_binom_pmf(jj, n, q) + _log_binom_pmf(cc, jj, 1 / (1 + math.exp(eps0)))
    return rr_pair(log_pmf, 1 + ((jj - cc) * math.expm1(-eps0) + cc * math.expm1(eps0)) / (n * m))


def dss_curve(n: int, q: float, m: int, eps0s, bound=ub1) -> np.ndarray:
    """Lemma 4.4.1's rate q̄ = q/m over `bound` at the sample's lower bound m0, its tail by ε0-LDP."""
    # m0: the 1e-12 quantile of the sample holding the record's client, 1 + Bin(n−1, q); streams added.
    cdf = stats.binom.cdf(np.arange(n), n - 1, q)
    m0 = 1 + int(np.argmax(cdf >= SAMPLE_TAIL))
    below = float(cdf[m0 - 2]) if m0 >= 2 else 0.0
    rate = q / m
    return mixture(rate, [(rate * (1 - below), sum(bound(m0, e) for e in eps0s)),
                          (rate * below, sum(ldp(e) for e in eps0s))])


# --- the ledger -------------------------------------------------------------------------------------

def event(s: int, m: int = M, sampling: str = "uniform", users: int = K, rate: float = 0.0, population: int = N):
    """One round of s of m records per answering client; s = 0: user level (one report per client)."""
    return ShuffleLdpDpEvent(users, population, sampling, rate, (EPS0,), "girgis_l1", 1, s, m)


def spent(ev, rounds: int, mode: str) -> float:
    """ε at δ of `rounds` calls, through the ledger's public record / spent_after."""
    ledger = PrivacyLedger(FULLY_INTERACTIVE, 1.0, DELTA, accounting=mode, unit="record")
    for r in range(rounds):
        ledger.record(r, 0, ev.population, ev)
    return ledger.spent_after(rounds - 1, mode)[0]


@pytest.mark.parametrize("s,gamma,reports", [
    (1, K / (N * M), K),  # Lemma 4.3.1, s = 1: both levels amplify, k reports
    (2, 2 / M, 2 * K),    # s > 1: only s/m amplifies (trap 12), k·s reports
    (M, 1.0, M * K),      # s = m: every record of a sampled client is sent
])
def test_cldp_paper_is_thm541_at_lemma431_rate(s, gamma, reports):
    """Lemma 4.3.1's rate in Thm 5.4.1 per call; Thm 5.4.3 (T calls, Lemma 2.1.3) for the ledger's ε."""
    expected = thm541(reports, gamma, EPS0)
    call = mechanisms.paper_call(event(s))
    np.testing.assert_allclose(call.rdp, expected, rtol=RTOL)
    assert spent(event(s), T, "paper") == pytest.approx(to_dp(T * expected, DELTA), rel=RTOL)


@pytest.mark.parametrize("n", [N, 20 * N])  # at 20n the sample tail's ε0-LDP branch shows at large α
def test_dss_paper_is_lemma441_rate_with_sample_tail(n):
    """Lemma 4.4.1 (rate q/m) with Thm 5.3.1 at the sample's lower bound, T calls composed."""
    q = 0.05
    ev = event(1, sampling="poisson", users=n, rate=q, population=n)
    expected = dss_curve(n, q, M, (EPS0,))
    np.testing.assert_allclose(mechanisms.paper_call(ev).rdp, expected, rtol=RTOL)
    assert spent(ev, T, "paper") == pytest.approx(to_dp(T * expected, DELTA), rel=RTOL)


@pytest.mark.parametrize("s", [1, 2])
def test_cldp_tight_between_exact_rr_pair_and_paper(s):
    """Tight CLDP-SGD: the minimum of paper, (M) at the true rate ks/(nm), WBK19 over the clients (k/n) of the
    shuffle of k client bundles (each s·ε0-LDP: Thm 9 needs a curve for a whole client replaced), and the
    record's own ε0-LDP; between the exact 2RR pair and paper."""
    # (M): joint convexity over §3.10's per-shuffle curve at k·s reports. The ledger's bound holds for
    # every ε0-LDP randomizer, 2RR among them, so it must lie above 2RR's exact RDP on a neighbouring pair
    # (tests/test_exact_worst_case.py scans the pairs; this is the homogeneous one at the ledger's sizes).
    ev, present, reports = event(s), K * s / (N * M), K * s
    tight, paper = mechanisms.tight_call(ev).rdp, mechanisms.paper_call(ev).rdp
    shuffled = shuffle_min(reports, EPS0)
    clients = wbk(K / N, shuffle_min(K, s * EPS0))
    expected = np.minimum.reduce([paper, mixture(present, [(present, shuffled)]), clients, ldp(EPS0)])
    np.testing.assert_allclose(tight, expected, rtol=RTOL)
    lower = rr_uniform_lower(reports, present, EPS0)
    assert np.all(lower <= tight * (1 + RTOL)) and np.all(tight <= paper * (1 + RTOL))
    assert np.any(lower < 0.5 * tight)  # the band is not degenerate: the checks can fail on both sides
    eps_tight, eps_paper = spent(ev, T, "tight"), spent(ev, T, "paper")
    assert to_dp(T * lower, DELTA) <= eps_tight <= eps_paper
    if s > 1:  # the paper drops the client factor k/n = 0.05, the tight bound keeps it
        assert eps_tight < 0.5 * eps_paper
    else:  # s = 1: a changed record changes one client's one report, a user-level neighbour: never above it
        assert eps_tight < 0.5 * spent(event(0, m=1), T, "tight")


def test_dss_tight_between_exact_rr_pair_and_paper():
    """Tight DSS-SGD (Thm 4.4.1): the paper's mixture over §3.10's curve, between the 2RR pair and paper."""
    q = 0.05
    ev = event(1, sampling="poisson", users=N, rate=q)
    tight, paper = mechanisms.tight_call(ev).rdp, mechanisms.paper_call(ev).rdp
    np.testing.assert_allclose(tight, np.minimum(paper, dss_curve(N, q, M, (EPS0,), shuffle_min)), rtol=RTOL)
    lower = rr_poisson_lower(N, q, M, EPS0)
    assert np.all(lower <= tight * (1 + RTOL)) and np.all(tight <= paper * (1 + RTOL))
    assert np.any(lower < 0.5 * tight)
    assert to_dp(T * lower, DELTA) <= spent(ev, T, "tight") <= spent(ev, T, "paper")
    # one report per joiner: a changed record is a user-level neighbour, and it is used only w.p. 1/m
    assert spent(ev, T, "tight") < 0.5 * spent(event(0, m=1, sampling="poisson", users=N, rate=q), T, "tight")


# --- the public command -----------------------------------------------------------------------------

def _ledger_json(tmp_path, capsys, config: str, *overrides: str) -> dict:
    path = tmp_path / "run.yaml"
    path.write_text(config)
    assert cli.main(["ledger", str(path), *sum((["--set", o] for o in overrides), [])]) == 0
    return json.loads(capsys.readouterr().out)["runs"][0]["ledger"]


CLDP = """
problem: {name: quadratic, dim: 3, radius: 1.0, records_per_user: 4}
optimizer: {name: cldp_sgd, records_per_round: 2}
privacy: {protocol: girgis_l2, unit: record, epsilon: 2.0, delta: 1.0e-6, accounting: paper}
"""


def test_cli_cldp_record_level_ledger(tmp_path, capsys):
    """`python -m pipeline ledger` on CLDP-SGD: unit stated, ε ≤ target, ε = our formula at its ε0."""
    # girgis_l2 at d = 3 has 3 streams: the paper route is (M) at Lemma 4.3.1's s/m = 1/2 over
    # Thm 5.3.1 at k·s = 200 reports per stream, streams added; k = T = √n = 100 (the defaults).
    ledger = _ledger_json(tmp_path, capsys, CLDP)
    (ev,) = ledger["events"]
    assert ledger["rounds"] == 100
    assert ledger["unit"]["name"] == "record"
    assert (ev["users"], ev["population"], ev["record_messages"], ev["records_min"]) == (100, 10_000, 2, 4)
    paper = ledger["accounting"]["paper"]
    assert paper["epsilon"] <= 2.0 and paper["checks"]["within_target"]
    curve = mixture(0.5, [(0.5, sum(ub1(200, e) for e in ev["stream_epsilons"]))])
    assert ev["analysis_bound"]["epsilon"] == pytest.approx(to_dp(curve, 1e-6), rel=RTOL)
    assert paper["epsilon"] == pytest.approx(to_dp(100 * curve, 1e-6), rel=RTOL)
    # tight at the same ε0: ≤ paper, ≥ one stream's exact 2RR pair at the true rate ks/(nm) = 0.005
    lower = rr_uniform_lower(200, 0.005, ev["stream_epsilons"][0])
    assert to_dp(100 * lower, 1e-6) <= ledger["accounting"]["tight"]["epsilon"] <= paper["epsilon"]
    user = _ledger_json(tmp_path, capsys, CLDP.replace(", records_per_round: 2", ""), "privacy.unit=user")
    assert user["unit"]["name"] == "user" and user["events"][0]["record_messages"] == 0


def test_cli_dss_record_level_ledger(tmp_path, capsys):
    """`python -m pipeline ledger` on DSS-SGD: unit stated, ε ≤ target, ε = Lemma 4.4.1's route over T = 20."""
    ledger = _ledger_json(tmp_path, capsys, """
n_users: 2000
problem: {name: quadratic, dim: 3, radius: 1.0, records_per_user: 4}
optimizer: {name: dss_sgd, rounds: 20, batch_size: 100}
privacy: {protocol: girgis_l1, unit: record, epsilon: 1.0, delta: 1.0e-6, accounting: paper}
""")
    (ev,) = ledger["events"]
    assert ledger["unit"]["name"] == "record" and ledger["rounds"] == 20
    assert (ev["sampling"], ev["rate"], ev["record_messages"], ev["records_min"]) == ("poisson", 0.05, 1, 4)
    paper = ledger["accounting"]["paper"]
    assert paper["epsilon"] <= 1.0 and paper["checks"]["within_target"]
    curve = dss_curve(2000, 0.05, 4, ev["stream_epsilons"])
    assert paper["epsilon"] == pytest.approx(to_dp(20 * curve, 1e-6), rel=RTOL)
