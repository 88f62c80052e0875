"""Composing per-round curves (RDP) or loss distributions (PLD) vs per-round (ε, δ) + advanced composition."""
from __future__ import annotations

import numpy as np
import scipy.special

from bench.timing import best_times, sized
from pipeline.accounting import shuffle_ldp

USERS = 1_000_000
EPS0 = 0.5
DELTA = 1e-8


def _compare(rounds: int, repeats: int, names=("rdp", "pld", "ctd", "kov", "drv")) -> dict[str, float]:
    """ε of each method, and its time: every method timed the same way, interleaved, best of `repeats`
    (no accountant here caches between calls, so every repetition does the whole work)."""
    def advanced(method: str) -> float:
        # The tightest per-round (ε1, δ1) available — FMT22's numerical bound, read off the
        # single-round PLD — then composed as (ε1, δ1) guarantees with the δ split optimized.
        one_round = shuffle_ldp.fmt22_pld(USERS, EPS0, 1e-6, connect_dots=True)
        return shuffle_ldp.compose_approximate_dp(one_round.get_epsilon_for_delta, rounds, DELTA, method)["epsilon"]

    methods = {
        "rdp": lambda: shuffle_ldp.shuffle_ldp_epsilon(USERS, EPS0, DELTA, rounds, "rdp")["epsilon"],
        "pld": lambda: shuffle_ldp.fmt22_epsilon(USERS, EPS0, DELTA, rounds)["epsilon"],
        "ctd": lambda: shuffle_ldp.fmt22_epsilon(USERS, EPS0, DELTA, rounds, connect_dots=True)["epsilon"],
        "kov": lambda: advanced("kov"),
        "drv": lambda: advanced("drv"),
    }
    figures: dict[str, float] = {}

    def keeping(name):
        def call():
            figures[name] = methods[name]()  # the same value every repetition
        return call

    for name, seconds in best_times({name: keeping(name) for name in names}, repeats).items():
        figures[f"{name}_s"] = seconds
    return figures


def _curve_vs_scipy(repeats: int) -> float:
    """Time of Girgis's UB1 curve (n = 1e6, ε0 = 0.5, the default orders) with
    numerics.logsumexp, which the accountants use, over the same curve with scipy's
    logsumexp (interleaved, best of `repeats`); the two curves must be equal bit for bit."""
    def curve_with(logsumexp) -> np.ndarray:
        used, shuffle_ldp.logsumexp = shuffle_ldp.logsumexp, logsumexp
        try:
            return shuffle_ldp.shuffle_rdp_ub1(USERS, EPS0)
        finally:
            shuffle_ldp.logsumexp = used

    ours, theirs = shuffle_ldp.logsumexp, lambda values: float(scipy.special.logsumexp(values))
    assert np.array_equal(curve_with(ours), curve_with(theirs))
    seconds = best_times({"ours": lambda: curve_with(ours), "scipy": lambda: curve_with(theirs)}, repeats)
    return seconds["ours"] / seconds["scipy"]


def run(size: str = "quick") -> dict[str, float]:
    """ε and time of composing T shuffle rounds (n = 1e6, ε0 = 0.5, δ = 1e-8) three ways.

    RDP: Girgis's per-round curve added T times, converted once. PLD: FMT22's dominating
    pair self-composed T times (losses rounded up, and Connect-the-Dots). Advanced: each
    round converted to (ε1, δ1) by FMT22's numerical bound, then KOV15 optimal or DRV10
    strong composition. Ratios below 1 mean the first method is tighter / faster; a small-T
    run (T = 10) shows the regime where per-round conversion is competitive.

    Args:
      size: one of bench.timing.SIZES; full: T = 1e5 (the thesis's Fig. 5.4 regime)
        instead of 1e4; smoke: T = 10.

    Returns:
      name → value.
    """
    rounds = sized(size, 10, 10_000, 100_000)
    big = _compare(rounds, sized(size, 1, 3, 3))
    small = big if rounds == 10 else _compare(10, 1, ("rdp", "pld", "kov"))
    return {
        "composition_rounds": float(rounds),
        "composition_eps_rdp": big["rdp"],
        "composition_eps_pld": big["pld"],
        "composition_eps_pld_connect_dots": big["ctd"],
        "composition_eps_advanced_kov": big["kov"],
        "composition_eps_advanced_drv": big["drv"],
        "composition_eps_ratio_rdp_vs_advanced": big["rdp"] / big["kov"],
        "composition_eps_ratio_pld_vs_advanced": big["pld"] / big["kov"],
        "composition_eps_ratio_pld_vs_rdp": big["pld"] / big["rdp"],
        "composition_eps_ratio_pld_connect_dots_vs_pld": big["ctd"] / big["pld"],
        "composition_eps_ratio_kov_vs_drv": big["kov"] / big["drv"],
        "composition_time_rdp_s": big["rdp_s"],
        "composition_time_pld_s": big["pld_s"],
        "composition_time_ratio_pld_vs_rdp": big["pld_s"] / big["rdp_s"],
        "composition_time_ratio_pld_connect_dots_vs_rdp": big["ctd_s"] / big["rdp_s"],
        "composition_time_ratio_advanced_vs_rdp": big["kov_s"] / big["rdp_s"],
        "composition_t10_eps_ratio_rdp_vs_advanced": small["rdp"] / small["kov"],
        "composition_t10_eps_ratio_pld_vs_advanced": small["pld"] / small["kov"],
        "composition_girgis_curve_vs_scipy_logsumexp": _curve_vs_scipy(sized(size, 1, 5, 10)),
    }
