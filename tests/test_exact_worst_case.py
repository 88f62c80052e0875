"""Every route of the shuffled-LDP accountant against the exact worst case of small instances.

The ledger's bounds for a shuffled ε0-LDP call (`mechanisms.tight_routes`, `paper_call`) hold
for every ε0-LDP randomizer, so they must lie above the exact Rényi divergence of shuffled
binary randomized response, the canonical ε0-LDP randomizer, on every pair of neighbouring
datasets. The exact law (tests/oracles/shuffled_rr.py: a generating function over clients) is
evaluated at every order the ledger uses (2..256), in both directions, over an adversarial
scan: the changed client's other records (0..m−1 ones), and the other clients all of one kind
or split between all-ones and all-zeros. Each route's worst ratio exact/claimed over the scan
must not exceed 1; `pytest -s` prints them.

Not one friendly pair: the nested route this ledger used to take (a client-sampling theorem
fed a curve for one changed record) is below 1 on the all-zeros pair and 22.8 on the scan.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from oracles.shuffled_rr import output_law, renyi
from pipeline.accounting import mechanisms, shuffle_gaussian, shuffle_ldp
from pipeline.accounting.events import ShuffleLdpDpEvent

ORDERS = mechanisms.ORDERS  # 2..256, every order the ledger's curves are evaluated at
ROUNDING = 1e-9  # the laws are sums of positive terms: relative float error ~1e-13, far below this


class Case:
    """One small instance: n clients of m records each, s sent per answering client.

    s = 0 is user level: one record and one message per user, neighbours differ in a user's bit.
    `held` gives each client its own count of records instead (the ledger's m is their minimum).
    """

    def __init__(self, sampling: str, n: int, eps0: float, k: int = 0, rate: float = 0.0, m: int = 1, s: int = 0,
                 streams: int = 1, held: tuple = ()):
        self.sampling, self.n, self.eps0, self.k, self.rate = sampling, n, eps0, k, rate
        self.s, self.streams = s, streams
        self.held = list(held) or [m] * n
        self.m = min(self.held)

    @property
    def event(self) -> ShuffleLdpDpEvent:
        users = self.k if self.sampling == "uniform" else self.n
        return ShuffleLdpDpEvent(users, self.n, self.sampling, self.rate, (self.eps0,) * self.streams, "rr", 1,
                                 self.s, self.m if self.s else 1)

    def law(self, ones: list[int]) -> np.ndarray:
        return output_law(ones, self.held, max(self.s, 1), self.eps0, self.streams, self.sampling, self.k, self.rate)

    def neighbours(self):
        """(changed client's law input, its neighbour's) over the scan: one record of client 0 from 0 to 1.

        Its other records hold b ones (0 … its count − 1); the others hold no ones, all ones, or
        are split between the two.
        """
        n, held = self.n, self.held
        others = [[0] * (n - 1), held[1:]]
        others += [held[1:j + 1] + [0] * (n - 1 - j) for j in sorted({1, n // 2, n - 2}) if 0 < j < n - 1]
        others += [[t] * (n - 1) for t in range(1, min(held[1:]))]  # mixed clients, every one alike
        for rest in others:
            for b in range(held[0]):
                yield [b] + rest, [b + 1] + rest

    def __repr__(self) -> str:
        level = f"record m={self.m} s={self.s}" if self.s else "user"
        if len(set(self.held)) > 1:
            level += f" held={self.held[0]},{self.held[1]}…"
        size = {"all": "", "uniform": f" k={self.k}", "poisson": f" q={self.rate}"}[self.sampling]
        return f"{self.sampling}{size} n={self.n} {level} ε0={self.eps0} streams={self.streams}"


CASES = [
    Case("uniform", 30, 2.0, k=1, m=4, s=4),  # issue 41's counterexample to the nested route
    Case("uniform", 20, 1.0, k=3, m=4, s=2),
    Case("uniform", 12, 1.5, k=4, m=3, s=1),  # s = 1: the paper's rate keeps both sampling levels
    Case("uniform", 10, 0.5, k=5, m=2, s=2, streams=2),
    Case("all", 10, 1.0, m=4, s=2),
    Case("all", 8, 2.0, m=2, s=1, streams=2),
    Case("poisson", 20, 1.0, rate=0.2, m=4, s=1),  # DSS-SGD's self-sampling, Lemma 4.4.1
    Case("poisson", 12, 2.0, rate=0.3, m=2, s=2),
    Case("all", 30, 1.0),
    Case("all", 20, 3.0, streams=2),
    Case("uniform", 30, 1.0, k=5),
    Case("uniform", 20, 2.0, k=2),
    Case("poisson", 25, 1.0, rate=0.2),
    # clients holding different numbers of records: the ledger's m is the fewest
    Case("uniform", 30, 2.0, k=1, s=2, held=(2,) + (1,) * 29),  # s > m: a client's message count can stand out
    Case("uniform", 12, 1.0, k=2, s=2, held=(4,) + (2,) * 11),
    Case("uniform", 12, 1.0, k=2, s=2, held=(2,) + (4,) * 11),
    Case("poisson", 10, 2.0, rate=0.3, s=2, held=(3,) + (1,) * 9),
]


def exact_worst(case: Case) -> np.ndarray:
    """max over the scan and both directions of the exact D_α, at every order."""
    worst = np.zeros_like(ORDERS)
    for before, after in case.neighbours():
        p, q = case.law(after), case.law(before)
        worst = np.maximum.reduce([worst, renyi(p, q, ORDERS), renyi(q, p, ORDERS)])
    return worst


def worst_ratio(exact: np.ndarray, claimed: np.ndarray) -> float:
    return float(np.max(exact / claimed))


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_every_route_bounds_the_exact_worst_case(case):
    """Each tight route, the tight minimum and the paper bound: worst exact/claimed ≤ 1."""
    exact = exact_worst(case)
    claims = {**mechanisms.tight_routes(case.event), "tight (the ledger's minimum)": mechanisms.tight_call(case.event).rdp,
              "paper": mechanisms.paper_call(case.event).rdp}
    ratios = {route: worst_ratio(exact, curve) for route, curve in claims.items()}
    print(f"\n{case}:" + "".join(f"\n  {ratio:8.5f}  {route}" for route, ratio in ratios.items()))
    over = {route: ratio for route, ratio in ratios.items() if ratio > 1.0 + ROUNDING}
    assert not over, f"{case}: routes under-report the exact worst case: {over}"
    # The scan has teeth: the ledger's minimum is within 5× of the exact worst case at some order, so a
    # route that under-reports by more than that anywhere the minimum is set turns this red.
    assert ratios["tight (the ledger's minimum)"] > 0.2


def exact_epsilon_floor(case: Case, calls: int, delta: float) -> float:
    """A lower bound on the true ε at δ of `calls` composed calls: the largest over the scan's pairs of
    dp_accounting's optimistic PLD (it rounds every privacy loss down), both directions."""
    worst = 0.0
    for before, after in case.neighbours():
        p, q = ({i: math.log(v) for i, v in enumerate(case.law(x))} for x in (after, before))
        pld = pld_lib.from_two_probability_mass_functions(q, p, pessimistic_estimate=False, symmetric=False)
        worst = max(worst, pld.self_compose(calls).get_epsilon_for_delta(delta))
    return worst


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[7], CASES[11]], ids=repr)
def test_the_ledgers_epsilon_is_above_the_exact_pairs(case):
    """The ε both modes report for 1 and 20 calls at δ = 1e-6 is at least the scanned pairs' exact ε."""
    for calls in (1, 20):
        floor = exact_epsilon_floor(case, calls, 1e-6)
        claimed = {mode: mechanisms.composed_epsilon(case.event, calls, 1e-6, mode) for mode in ("tight", "paper")}
        print(f"\n{case}, {calls} calls: exact ≥ {floor:.4f}, tight {claimed['tight']:.4f}, paper {claimed['paper']:.4f}")
        assert min(claimed.values()) >= floor
    assert claimed["tight"] <= 10.0 * floor  # the floor is at the ledger's scale: the check has teeth


def _nested_route(ev: ShuffleLdpDpEvent) -> np.ndarray:
    """The withdrawn route: WBK19 over the clients of (M) at s/m over the k·s messages' shuffle (one stream)."""
    shuffled = shuffle_ldp.shuffle_rdp_upper(ev.users * ev.messages_per_user, ev.stream_epsilons[0], ORDERS)
    share = ev.record_messages / ev.records_min
    given_sample = shuffled if share >= 1 else mechanisms._mixture(share, [(share, shuffled)])
    return shuffle_gaussian.wbk_subsampled_rdp(ev.users / ev.population, given_sample)


def test_the_scan_catches_the_withdrawn_nested_route():
    """A deliberately wrong route fails the scan (issue 41: 22.8), though the all-zeros pair passes it."""
    case = CASES[0]
    nested = _nested_route(case.event)
    assert worst_ratio(exact_worst(case), nested) > 20.0
    friendly = renyi(case.law([1] + [0] * (case.n - 1)), case.law([0] * case.n), ORDERS)
    assert worst_ratio(friendly, nested) < 1.0
    # and the ledger no longer takes it: its minimum is above the exact worst case where nested was 22.8× below
    assert np.all(mechanisms.tight_call(case.event).rdp >= exact_worst(case) * (1 - ROUNDING))


def test_tight_call_epsilon_never_above_its_pure_epsilon():
    """A shuffled call is pure (Σε0)-DP (its changed input's messages): the ledger's ε of a call takes that minimum."""
    ev = Case("uniform", 30, 2.0, k=1, m=4, s=4).event
    call = mechanisms.tight_call(ev)
    assert call.pure_epsilon == pytest.approx(2.0)
    converted = mechanisms.CallCurve(call.rdp, None, "").epsilon(1e-6)
    assert converted > 2.0  # the conversion alone would report more than the call can spend
    assert mechanisms.composed_epsilon(ev, 1, 1e-6, "tight") == pytest.approx(2.0)
    assert mechanisms.composed_epsilon(ev, 3, 1e-6, "tight") <= 3 * 2.0


def test_record_level_calibration_moves_as_stated():
    """The pinned n = 10⁴, k = 100, s = 2, m = 4, T = 100 call: the valid routes, not the nested one (issue 41)."""
    ev = ShuffleLdpDpEvent(100, 10_000, "uniform", 0.0, (1.0,), "rr", 1, 2, 4)
    tight = mechanisms.composed_epsilon(ev, 100, 1e-6, "tight")
    nested = mechanisms.CallCurve(100 * np.minimum(mechanisms.tight_call(ev).rdp, _nested_route(ev)), None,
                                  "").epsilon(1e-6)
    assert tight > 1.5 * nested
    assert tight <= mechanisms.composed_epsilon(ev, 100, 1e-6, "paper")


def test_pure_epsilon_is_the_sum_over_streams():
    ev = Case("all", 20, 3.0, streams=2).event
    assert mechanisms.tight_call(ev).pure_epsilon == pytest.approx(6.0)
    assert math.isclose(mechanisms.composed_epsilon(ev, 1, 1e-6, "tight"),
                        min(6.0, mechanisms.CallCurve(mechanisms.tight_call(ev).rdp, None, "").epsilon(1e-6)))
