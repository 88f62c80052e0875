"""Shuffle Gaussian RDP (seed 004 Thm 1): the O(λ²) series against partition enumeration,
and what shuffling buys over the plain Gaussian at the paper's Table 1 parameters."""
from __future__ import annotations

import numpy as np

from bench.timing import best_times, sized
from pipeline.accounting import shuffle_gaussian as sg
from pipeline.accounting.rdp import rdp_to_dp

N_USERS, SIGMA = 60000, 9.48  # seed 004 Table 1
DELTA = 1 / N_USERS


def run(size: str = "quick") -> dict[str, float]:
    """Series vs enumeration time for all orders ≤ L (both timed the same way: interleaved,
    best of N), and ε ratios measured in this run.

    Args:
      size: one of bench.timing.SIZES; full: enumerate up to order 64 (~30 s a run)
        instead of 56 (~7 s); smoke: up to 12.

    Returns:
      name → value.
    """
    top = sized(size, 12, 56, 64)
    results = {}

    def enumeration():
        results["enumerated"] = np.array([sg.partition_enumeration_rdp(N_USERS, SIGMA, order)
                                          for order in range(2, top + 1)])

    def series():
        results["series"] = sg.shuffle_gaussian_rdp(N_USERS, SIGMA, top)

    times = best_times({"enumeration": enumeration, "series": series}, repeats=sized(size, 1, 2, 3))
    series_1024 = best_times({"series_1024": lambda: sg.shuffle_gaussian_rdp(10**6, 1.0, 1024)},
                             repeats=sized(size, 1, 5, 5))["series_1024"]
    enumerated, series_values = results["enumerated"], results["series"]

    # Table 1 parameters, 1000 rounds, λ ≤ 256 (optimum below the cap): shuffle vs no shuffle.
    rounds, lambda_max = 1000, 256
    shuffled = sg.shuffle_gaussian_epsilon(N_USERS, SIGMA, DELTA, rounds, lambda_max)["epsilon"]
    plain = rdp_to_dp(sg.rdp_orders(lambda_max), rounds * sg.gaussian_rdp(SIGMA, lambda_max), DELTA).epsilon
    # Fig. 1(b) setting: check-in γ = 0.1, σ = 5, 5540 rounds, λ ≤ 30 (Thm 3 vs WBK19 without shuffling).
    checkin = sg.shuffle_gaussian_epsilon(N_USERS, 5.0, DELTA, 5540, 30, "checkin", gamma=0.1)["epsilon"]
    subsampled_plain = rdp_to_dp(sg.rdp_orders(30), 5540 * sg.wbk_subsampled_rdp(0.1, sg.gaussian_rdp(5.0, 30)),
                                 DELTA).epsilon
    return {
        "shuffle_gaussian_orders": float(top),
        "shuffle_gaussian_enumeration_s": times["enumeration"],
        "shuffle_gaussian_series_s": times["series"],
        "shuffle_gaussian_series_speedup": times["enumeration"] / times["series"],
        "shuffle_gaussian_series_max_rel_diff": float(np.max(np.abs(series_values / enumerated - 1.0))),
        "shuffle_gaussian_series_1024_s": series_1024,
        "shuffle_gaussian_eps": shuffled,
        "shuffle_gaussian_eps_gaussian": plain,
        "shuffle_gaussian_eps_ratio_vs_gaussian": shuffled / plain,
        "shuffle_gaussian_checkin_eps_ratio_vs_subsampled_gaussian": checkin / subsampled_plain,
    }
