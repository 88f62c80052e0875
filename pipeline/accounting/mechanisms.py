"""Accountants of the companion mechanisms: what each event costs in each mode.

For every event type except P_vec (pipeline.accounting.pvec_tight) this module
says what one call costs:
  paper  the seed's own bound for the call, as an RDP curve (or a pure ε);
  tight  the pointwise minimum of every valid RDP bound we have, or, where a
         run is one kind of call only, an exact or PLD composition.
The ledger (pipeline.accounting.ledger) composes them.

Sampling. A sampled round is a mixture over the sample S, with weights that do
not depend on the data. Given S, the output does not depend on the changed
user unless S holds it; if it does, it is the unsampled mechanism on S. Since
E_Q[(P/Q)^α] is jointly convex in (P, Q),

    e^{(α−1)R(α)} ≤ P(i ∉ S) + Σ_m P(i ∈ S, |S| = m) e^{(α−1)U(α; m)},     (M)

with U(α; m) any RDP bound of the unsampled mechanism on m users. For the
shuffle mechanisms U(α; m) is non-increasing in m (the output on m + 1 users
is a post-processing of the output on m: add a fixed user's report and
re-shuffle), so a lower bound on |S| suffices. (M) is our derivation; it keeps
the replace-one relation the whole pipeline uses. Where the seeds give a
subsampling theorem (seed 001 Thm 5.4.1, seed 004 Thm 2 = Wang–Balle–
Kasiviswanathan 2019 Thm 9) it is used too, and the minimum taken.
"""
from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import math
from typing import Any

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline.accounting import shuffle_gaussian, shuffle_ldp
from pipeline.accounting.events import (ExactSumDpEvent, GaussianSumDpEvent, LocalDpEvent, NoisyMaxDpEvent,
                                        PoissonGaussianDpEvent, ShuffleGaussianDpEvent, ShuffleLdpDpEvent)
from pipeline.accounting.rdp import rdp_to_dp

LAMBDA_MAX = 256
ORDERS = np.arange(2.0, LAMBDA_MAX + 1.0)  # the integer orders every curve here is evaluated at
# Tail mass of the sample size below the lower bound used in (M): folded into the
# "not amplified" branch, never dropped.
_SAMPLE_SIZE_TAIL = 1e-12
_PLD_INTERVAL = 1e-4


@dataclasses.dataclass(frozen=True)
class CallCurve:
    """One call's RDP curve at `ORDERS` (or a pure ε), and the rule behind it."""

    rdp: np.ndarray | None
    pure_epsilon: float | None
    rule: str

    def epsilon(self, delta: float, count: int = 1) -> float:
        """(ε at δ) of `count` adaptive calls, curves added then converted (CKS20 Prop. 12)."""
        if self.rdp is None:
            return count * self.pure_epsilon
        converted = rdp_to_dp(ORDERS, count * self.rdp, delta).epsilon
        return min(converted, count * self.pure_epsilon) if self.pure_epsilon is not None else converted


class CallAccountant(abc.ABC):
    """Accounts one family of companion events: what one call costs in each mode.

    An event family names its accountant as the event class's attribute
    `accountant` (a plug-in protocol's event does; nothing here changes), or an
    accountant is registered with `register`. The ledger composes the curves:
    curves of calls over the same users are added, disjoint calls compose in
    parallel, and one conversion gives ε (pipeline.accounting.ledger).
    """

    @abc.abstractmethod
    def supports(self, event: Any) -> bool:
        """Whether this accountant can bound `event`."""

    @abc.abstractmethod
    def paper_call(self, event: Any) -> CallCurve:
        """The event's own paper's bound on one call (an RDP curve at ORDERS, or a pure ε)."""

    def tight_call(self, event: Any) -> CallCurve:
        """The tightest valid bound on one call (default: the paper's)."""
        return self.paper_call(event)


_REGISTERED: list[CallAccountant] = []


def register(accountant: CallAccountant) -> None:
    """Adds an accountant consulted before the built-in ones."""
    if accountant not in _REGISTERED:
        _REGISTERED.append(accountant)


def accountant_for(event: Any) -> CallAccountant | None:
    """The plug-in accountant of `event`: a registered one that supports it, or its class's `accountant`."""
    for accountant in _REGISTERED:
        if accountant.supports(event):
            return accountant
    declared = getattr(type(event), "accountant", None)
    return declared if isinstance(declared, CallAccountant) and declared.supports(event) else None


BUILT_IN_EVENTS = (ExactSumDpEvent, GaussianSumDpEvent, LocalDpEvent, NoisyMaxDpEvent, PoissonGaussianDpEvent,
                   ShuffleGaussianDpEvent, ShuffleLdpDpEvent)


def supports(event: Any) -> bool:
    """Whether some accountant here (built-in or plug-in) bounds `event`."""
    return isinstance(event, BUILT_IN_EVENTS) or accountant_for(event) is not None


def _mixture(rate_in: float, size_weights: list[tuple[float, np.ndarray]]) -> np.ndarray:
    """(M): log(1 − rate_in + Σ w_m e^{(α−1)U_m(α)})/(α−1), in log space.

    Args:
      rate_in: P(the changed user is sampled).
      size_weights: (P(sampled and |S| in class m), U_m) pairs; weights sum to rate_in.
    """
    terms = [np.full(ORDERS.shape, math.log1p(-rate_in)) if rate_in < 1.0 else np.full(ORDERS.shape, -np.inf)]
    terms += [math.log(w) + (ORDERS - 1.0) * curve for w, curve in size_weights if w > 0.0]
    return np.maximum(scipy.special.logsumexp(np.stack(terms), axis=0), 0.0) / (ORDERS - 1.0)


def _gaussian_curve(sensitivity: float, sigma: float) -> np.ndarray:
    """Gaussian mechanism RDP αΔ²/(2σ²) (Mironov 2017, Prop. 7)."""
    return ORDERS * sensitivity**2 / (2.0 * sigma**2)


def _stream_curves(epsilons: tuple, users: int, bound) -> np.ndarray:
    """Σ over streams of one stream's RDP bound at `users` reports (streams compose: notes trap 15)."""
    total = np.zeros_like(ORDERS)
    for eps0, streams in collections.Counter(epsilons).items():  # a level's s streams share one ε0
        total += streams * (bound(users, eps0, ORDERS) if users >= 1 else shuffle_ldp.ldp_rdp(eps0, ORDERS))
    return total


def _poisson_lower_size(population: int, rate: float) -> tuple[int, float]:
    """A lower bound m0 on 1 + Bin(population − 1, rate) and the mass below it."""
    m0 = max(1, int(scipy.stats.binom.ppf(_SAMPLE_SIZE_TAIL, population - 1, rate)) + 1)
    return m0, float(scipy.stats.binom.cdf(m0 - 2, population - 1, rate)) if m0 >= 2 else 0.0


def _record_share(event: ShuffleLdpDpEvent) -> float:
    """P(a given record is among an answering user's messages): s/m at record level, else 1."""
    return min(1.0, event.record_messages / event.records_min) if event.record_messages else 1.0


def _shuffle_ldp_curve(event: ShuffleLdpDpEvent, bound, rate_in: float | None = None) -> np.ndarray:
    """RDP of a (sampled) multi-stream shuffle with `bound` per stream and (M) over the sample.

    At record level the shuffled reports are the records' messages (each user's min(s, m)), and
    the changed record is present with probability P(its user answers)·s/m, unless `rate_in`
    says otherwise (the paper's Lemma 4.3.1 rate): given the sample and the records each user
    uses, the output does not depend on the changed record unless it is used, so (M) holds.
    """
    local = _stream_curves(event.stream_epsilons, 0, None)
    share, per_user = _record_share(event), event.messages_per_user
    if event.sampling == "all":
        curve = _stream_curves(event.stream_epsilons, event.users * per_user, bound)
        rate = share if rate_in is None else rate_in
        return curve if rate >= 1.0 else _mixture(rate, [(rate, curve)])
    if event.sampling == "uniform":
        rate = event.users / event.population * share if rate_in is None else rate_in
        return _mixture(rate, [(rate, _stream_curves(event.stream_epsilons, event.users * per_user, bound))])
    m0, below = _poisson_lower_size(event.population, event.rate)
    rate = event.rate * share if rate_in is None else rate_in
    return _mixture(rate, [(rate * (1.0 - below), _stream_curves(event.stream_epsilons, m0 * per_user, bound)),
                           (rate * below, local)])


def _paper_record_rate(event: ShuffleLdpDpEvent) -> float:
    """The seed's rate for a record-level event: Lemma 4.3.1 (k of n clients, s of m records;
    s > 1 loses the client factor) or Lemma 4.4.1 (self-sampling at q: q̄ = q/m)."""
    if event.sampling == "poisson":
        return event.rate * _record_share(event)
    clients = event.users if event.sampling == "uniform" else event.population
    return shuffle_ldp.record_sampling_rate(clients, event.population, event.record_messages, event.records_min)


@functools.lru_cache(maxsize=1024)
def paper_call(event) -> CallCurve:
    """The seed's own bound of one call (see the module docstring for each event type).

    Args:
      event: a companion event (not P_vec).

    Returns:
      The call's curve.

    Raises:
      TypeError: no accountant supports the event (the ledger refuses it when recorded).
    """
    plugged = accountant_for(event)
    if plugged is not None:
        return plugged.paper_call(event)
    if isinstance(event, ExactSumDpEvent):
        return CallCurve(None, math.inf, "exact statistic: no privacy")
    if isinstance(event, LocalDpEvent):
        return CallCurve(None, event.epsilon0, "pure ε0-LDP report (basic composition)")
    if isinstance(event, NoisyMaxDpEvent):
        return CallCurve(None, event.leaves * noisy_max_epsilon(event),
                         "report-noisy-max with Laplace scores, 2Δ/λ each (Dwork–Roth Claim 3.9), basic composition "
                         "over the node's leaves")
    if isinstance(event, GaussianSumDpEvent):
        curve = _gaussian_curve(event.sensitivity, event.sigma)
        if event.users < event.population:
            rate = event.users / event.population
            return CallCurve(_mixture(rate, [(rate, curve)]), None,
                             "Gaussian RDP (Mironov 2017) sampled without replacement, by joint convexity (M)")
        return CallCurve(curve, None, "Gaussian mechanism RDP αΔ²/(2σ²) (Mironov 2017, Prop. 7)")
    if isinstance(event, PoissonGaussianDpEvent):
        curve = _mixture(event.rate, [(event.rate, _gaussian_curve(event.sensitivity, event.sigma))])
        return CallCurve(curve, None, "Poisson-subsampled Gaussian RDP by joint convexity (M), replace-one")
    if isinstance(event, ShuffleGaussianDpEvent) and event.rate > 0.0:
        m0, below = _poisson_lower_size(event.population, event.rate)
        shuffled = shuffle_gaussian.shuffle_gaussian_rdp(m0, event.sigma / event.sensitivity, LAMBDA_MAX)
        curve = _mixture(event.rate, [(event.rate * (1.0 - below), shuffled),
                                      (event.rate * below, _gaussian_curve(event.sensitivity, event.sigma))])
        return CallCurve(curve, None, "shuffle Gaussian RDP (seed 004 Thm 1) at the sample size's lower bound, "
                         "Poisson-sampled by joint convexity (M)")
    if isinstance(event, ShuffleGaussianDpEvent):
        curve = shuffle_gaussian.shuffle_gaussian_rdp(event.users, event.sigma / event.sensitivity, LAMBDA_MAX)
        if event.users < event.population:
            curve = shuffle_gaussian.wbk_subsampled_rdp(event.users / event.population, curve)
        return CallCurve(curve, None, "shuffle Gaussian RDP, seed 004 Thm 1 (Thm 2 when subsampled)")
    if isinstance(event, ShuffleLdpDpEvent) and event.record_messages:
        rate = _paper_record_rate(event)
        messages = event.users * event.messages_per_user
        if event.sampling != "poisson" and len(event.stream_epsilons) == 1 and messages >= 2:
            curve = shuffle_ldp.record_subsampled_shuffle_rdp_ub(messages, rate, event.stream_epsilons[0], ORDERS)
            return CallCurve(curve, None, "seed 001 Thm 5.4.1 at the record's rate of Lemma 4.3.1 (k·s messages)")
        curve = _shuffle_ldp_curve(event, shuffle_ldp.shuffle_rdp_ub1, rate)
        return CallCurve(curve, None, "seed 001 Thm 5.3.1 per stream, streams added, at the record's rate of "
                         + ("Lemma 4.4.1" if event.sampling == "poisson" else "Lemma 4.3.1") + " by joint convexity (M)")
    if isinstance(event, ShuffleLdpDpEvent):
        if event.sampling == "uniform" and len(event.stream_epsilons) == 1 and event.users >= 2:
            curve = shuffle_ldp.subsampled_shuffle_rdp_ub(event.population, event.users, event.stream_epsilons[0], ORDERS)
            return CallCurve(curve, None, "seed 001 Thm 5.4.1 (subsampled shuffle)")
        curve = _shuffle_ldp_curve(event, shuffle_ldp.shuffle_rdp_ub1)
        return CallCurve(curve, None, "seed 001 Thm 5.3.1 per stream, streams added"
                         + ("" if event.sampling == "all" else ", sampled by joint convexity (M)"))
    raise TypeError(f"no accountant for {type(event).__name__}")


@functools.lru_cache(maxsize=1024)
def tight_call(event) -> CallCurve:
    """The pointwise minimum of every valid bound of one call (`tight_routes`).

    Args:
      event: a companion event (not P_vec).

    Returns:
      The call's curve; its rule names every route it is the minimum of.
    """
    plugged = accountant_for(event)
    if plugged is not None:
        return plugged.tight_call(event)
    paper = paper_call(event)
    routes = tight_routes(event)
    if not routes:
        return paper
    pure = (sum(event.stream_epsilons) if isinstance(event, ShuffleLdpDpEvent) else paper.pure_epsilon)
    return CallCurve(np.minimum.reduce(list(routes.values())), pure, "minimum of: " + "; ".join(routes)
                     + (f"; and pure {pure:.6g}-DP" if pure is not None and isinstance(event, ShuffleLdpDpEvent) else ""))


@functools.lru_cache(maxsize=1024)
def tight_routes(event) -> dict[str, np.ndarray]:
    """Every valid RDP bound of one built-in call, by the rule (theorem and hypothesis) that gives it.

    Each route is checked in the tests against the exact output law of small instances over
    adversarially scanned neighbours (tests/test_exact_worst_case.py). A shuffled ε0-LDP call
    is also pure (Σ ε0)-DP: the changed user's (record's) one message per stream, each ε0-LDP,
    post-processed by the shuffler; `tight_call` keeps that as the call's pure ε.

    Args:
      event: a built-in companion event (not P_vec).

    Returns:
      {rule: curve at ORDERS}; empty where the paper's bound is the only one (a non-private call).
    """
    paper = paper_call(event)
    paper_route = {"paper: " + paper.rule: paper.rdp} if paper.rdp is not None else {}
    if isinstance(event, ExactSumDpEvent):
        return {}
    if isinstance(event, (LocalDpEvent, NoisyMaxDpEvent)):
        single = event.epsilon0 if isinstance(event, LocalDpEvent) else noisy_max_epsilon(event)
        count = 1 if isinstance(event, LocalDpEvent) else event.leaves
        # Every pure ε-DP mechanism is a post-processing of randomized response (KOV15 Thm 2.4).
        return {"pure ε-DP as randomized response's RDP (KOV15 Thm 2.4), added over the selections":
                count * shuffle_ldp.ldp_rdp(single, ORDERS)}
    if isinstance(event, GaussianSumDpEvent) and event.users < event.population:
        # WBK19 Thm 9 needs the base curve for samples differing in one whole element: the Gaussian
        # sum's Δ bounds the replacement of one user's input, which is that element.
        return {**paper_route, "WBK19 Thm 9 (k of n without replacement) of the Gaussian RDP":
                shuffle_gaussian.wbk_subsampled_rdp(event.users / event.population,
                                                    _gaussian_curve(event.sensitivity, event.sigma))}
    if isinstance(event, ShuffleGaussianDpEvent) and event.rate == 0.0:
        unshuffled = _gaussian_curve(event.sensitivity, event.sigma)
        if event.users < event.population:
            rate = event.users / event.population
            shuffled = shuffle_gaussian.shuffle_gaussian_rdp(event.users, event.sigma / event.sensitivity, LAMBDA_MAX)
            return {**paper_route, "(M) at k/n over seed 004 Thm 1's shuffle of k": _mixture(rate, [(rate, shuffled)])}
        return {**paper_route, "the plain Gaussian mechanism (the shuffle is post-processing)": unshuffled}
    if isinstance(event, ShuffleLdpDpEvent):
        return {**paper_route, **_shuffle_ldp_routes(event)}
    return paper_route


def _shuffle_ldp_routes(event: ShuffleLdpDpEvent) -> dict[str, np.ndarray]:
    """The tight routes of a shuffled ε0-LDP call besides the paper's (see `tight_routes`)."""
    routes = {"(M) at the changed input's exact rate over the shuffle (per stream the minimum of seed 001 UB1, UB2, "
              "Cor 5.3.1 and ε0-LDP, streams added)": _shuffle_ldp_curve(event, shuffle_ldp.shuffle_rdp_upper),
              "the changed input's own messages, ε0-LDP per stream, added": _stream_curves(event.stream_epsilons, 0, None)}
    if event.sampling == "uniform" and not event.record_messages:
        # Given the sample, the k users' shuffle bounds replacing one user (a whole element), as Thm 9 needs.
        routes["WBK19 Thm 9 (k of n users) of the shuffle of the k sampled users"] = shuffle_gaussian.wbk_subsampled_rdp(
            event.users / event.population,
            _stream_curves(event.stream_epsilons, event.users, shuffle_ldp.shuffle_rdp_upper))
    if event.sampling == "uniform" and 0 < event.record_messages <= event.records_min:
        # WBK19 Thm 9 over the clients needs a curve for sampled sets that differ in one WHOLE client.
        # Every client holds at least s records, so each sends exactly s messages per stream (with
        # fewer records than s for some, the count of a client's messages would tell who it is).
        # Given the sample and every client's choice of records (data-independent positions, so
        # joint convexity over them), the streams are independent, and in each stream a client's
        # s messages form one (s·ε0)-LDP bundle whose shuffle the stream's shuffled messages
        # post-process: the k-bundle shuffle per stream, streams added, is such a curve. (A curve
        # for one changed record given the sample is not: a client whose other records stand out
        # reveals whether it was sampled — issue 41's counterexample, exact/claimed 22.8.)
        per_client = event.messages_per_user
        routes[f"WBK19 Thm 9 (k of n clients) of each stream's shuffle of k client bundles ({per_client}·ε0-LDP "
               "each), streams added"] = shuffle_gaussian.wbk_subsampled_rdp(
            event.users / event.population,
            _stream_curves(tuple(per_client * e for e in event.stream_epsilons), event.users,
                           shuffle_ldp.shuffle_rdp_upper))
    return routes


def noisy_max_epsilon(event: NoisyMaxDpEvent) -> float:
    """ε of one report-noisy-max selection: 2Δ/λ (Laplace noise of scale λ on scores of sensitivity Δ)."""
    return 2.0 * event.score_sensitivity / event.scale


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε at δ of a μ-GDP mechanism (Dong, Roth, Su 2019, Cor. 2.13).

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), decreasing in ε; solved by bisection
    and rounded up.
    """
    def excess(eps: float) -> float:
        # e^ε Φ(·) in log space: each factor alone overflows at large μ.
        normal = scipy.stats.norm
        return normal.cdf(-eps / mu + mu / 2) - math.exp(eps + normal.logcdf(-eps / mu - mu / 2)) - delta

    if excess(0.0) <= 0.0:
        return 0.0
    lo, hi = 0.0, 1.0
    while excess(hi) > 0.0:
        lo, hi = hi, 2.0 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0.0 else (lo, mid)
    return hi


def exact_composition(events_counts: list[tuple[object, int]], delta: float) -> float | None:
    """ε at δ of a run made of one kind of call, where an exact or PLD composition exists.

    All unsampled Gaussian sums: exactly μ-GDP with μ² = Σ count·(Δ/σ)² (Dong, Roth,
    Su 2019, Cor. 3.3). All Poisson-subsampled Gaussians: the PLD of dp_accounting
    (pessimistic, replace-one) composed.

    Args:
      events_counts: (event, how many calls) pairs.
      delta: the target δ.

    Returns:
      ε, or None when the run has no such composition.
    """
    events = [event for event, _ in events_counts]
    if all(isinstance(e, GaussianSumDpEvent) and e.users == e.population for e in events):
        mu = math.sqrt(sum(count * (e.sensitivity / e.sigma) ** 2 for e, count in events_counts))
        return gaussian_epsilon(mu, delta)
    if all(isinstance(e, PoissonGaussianDpEvent) for e in events):
        # The PLD's grid scales with the loss: the RDP estimate sets it, so that large ε stay cheap.
        rough = CallCurve(sum(count * paper_call(e).rdp for e, count in events_counts), None, "").epsilon(delta)
        interval = _PLD_INTERVAL * max(1.0, min(rough, 100.0))
        return _poisson_pld_epsilon(tuple((e.rate, e.sigma, e.sensitivity, count) for e, count in events_counts),
                                    delta, interval)
    return None


@functools.lru_cache(maxsize=4096)
def _poisson_pld_epsilon(calls: tuple, delta: float, interval: float) -> float:
    """PLD composition of Poisson-subsampled Gaussians under replace-one (dp_accounting).

    dp_accounting's replace-one pair is (1 − q)N(0, σ²) + qN(±C, σ²): its
    `sensitivity` is the distance of one record's contribution from zero, C = Δ/2.
    The estimate is pessimistic at any grid `interval`: a coarser grid only loosens it.
    """
    composed = None
    for rate, sigma, sensitivity, count in calls:
        pld = pld_lib.from_gaussian_mechanism(
            sigma, sensitivity=sensitivity / 2.0, sampling_prob=rate, value_discretization_interval=interval,
            neighboring_relation=pld_lib.NeighborRel.REPLACE_ONE,
        ).self_compose(count)
        composed = pld if composed is None else composed.compose(pld)
    return float(composed.get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=65536)
def composed_epsilon(event, count: int, delta: float, accounting: str) -> float:
    """ε at δ of `count` adaptive calls of one event, as the ledger would report it.

    Args:
      event: a companion event.
      count: how many calls compose.
      delta: the target δ.
      accounting: "paper" or "tight".

    Returns:
      ε (inf for a non-private event).
    """
    if accounting == "paper":
        return paper_call(event).epsilon(delta, count)
    epsilon = tight_call(event).epsilon(delta, count)
    exact = exact_composition([(event, count)], delta)
    return epsilon if exact is None else min(epsilon, exact)


def pnsgd_release_epsilon(release, per_step, delta: float, accounting: str) -> tuple[float, str]:
    """ε at δ of a PNSGD pass that releases its final iterate (seed 002).

    Paper: Thm 2 (pipeline.accounting.pnsgd). Tight: the smaller of Thm 2 and the
    per-step Gaussian mechanism, which covers even releasing every iterate (each
    user is one step: parallel composition).

    Args:
      release: the pass's PnsgdDpEvent.
      per_step: one step's GaussianSumDpEvent.
      delta: the target δ.
      accounting: "paper" or "tight".

    Returns:
      (ε, the rule).
    """
    from pipeline.accounting import pnsgd

    theorem = pnsgd.pnsgd_epsilon(release.users, release.sigma, delta, release.lipschitz, release.step_size,
                                  release.diameter, release.smoothness,
                                  strong_convexity=release.strong_convexity)["epsilon"]
    rule = "seed 002 Thm 2 (shuffled PNSGD, final iterate only)"
    if accounting == "paper":
        return theorem, rule
    every = composed_epsilon(per_step, 1, delta, "tight")
    return min(theorem, every), rule + "; or the per-step Gaussian mechanism (every iterate), whichever is smaller"
