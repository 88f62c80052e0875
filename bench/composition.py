"""Composing per-round curves (RDP) or loss distributions (PLD) vs per-round (ε, δ) + advanced composition."""
from __future__ import annotations

import time

from pipeline.accounting import shuffle_ldp

USERS = 1_000_000
EPS0 = 0.5
DELTA = 1e-8


def _timed(function):
    began = time.perf_counter()
    value = function()
    return value, time.perf_counter() - began


def _compare(rounds: int) -> dict[str, float]:
    rdp, rdp_s = _timed(lambda: shuffle_ldp.shuffle_ldp_epsilon(USERS, EPS0, DELTA, rounds, "rdp")["epsilon"])
    pld, pld_s = _timed(lambda: shuffle_ldp.fmt22_epsilon(USERS, EPS0, DELTA, rounds)["epsilon"])
    ctd, ctd_s = _timed(lambda: shuffle_ldp.fmt22_epsilon(USERS, EPS0, DELTA, rounds, connect_dots=True)["epsilon"])

    def advanced(method: str) -> float:
        # The tightest per-round (ε1, δ1) available — FMT22's numerical bound, read off the
        # single-round PLD — then composed as (ε1, δ1) guarantees with the δ split optimized.
        one_round = shuffle_ldp.fmt22_pld(USERS, EPS0, 1e-6, connect_dots=True)
        return shuffle_ldp.compose_approximate_dp(one_round.get_epsilon_for_delta, rounds, DELTA, method)["epsilon"]

    kov, kov_s = _timed(lambda: advanced("kov"))
    drv, drv_s = _timed(lambda: advanced("drv"))
    return {"rdp": rdp, "rdp_s": rdp_s, "pld": pld, "pld_s": pld_s, "ctd": ctd, "ctd_s": ctd_s,
            "kov": kov, "kov_s": kov_s, "drv": drv, "drv_s": drv_s}


def run(full: bool) -> dict[str, float]:
    """ε and time of composing T shuffle rounds (n = 1e6, ε0 = 0.5, δ = 1e-8) three ways.

    RDP: Girgis's per-round curve added T times, converted once. PLD: FMT22's dominating
    pair self-composed T times (losses rounded up, and Connect-the-Dots). Advanced: each
    round converted to (ε1, δ1) by FMT22's numerical bound, then KOV15 optimal or DRV10
    strong composition. Ratios below 1 mean the first method is tighter / faster; a small-T
    run (T = 10) shows the regime where per-round conversion is competitive.

    Args:
      full: T = 1e5 (the thesis's Fig. 5.4 regime) instead of 1e4.

    Returns:
      name → value.
    """
    rounds = 100_000 if full else 10_000
    big, small = _compare(rounds), _compare(10)
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
    }
