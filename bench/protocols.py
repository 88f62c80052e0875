"""The companion protocols' users' side: one block's encode throughput against the
per-core RNG ceiling (float64 `rng.random` draws of the same user-coordinate count),
and each protocol's calibration time against the P_vec tight calibration's."""
from __future__ import annotations

import time

import numpy as np

from bench.timing import best_times, sized
from pipeline.optimizers import GRADIENTS, RoundPlan
from pipeline.protocols import build_protocol

DIM = 10  # one engine block of d = 10
NAMES = ("central_gaussian", "shuffle_gaussian", "local_l2", "girgis_l1", "girgis_linf", "girgis_l2", "cjmp_vec")


def _plan(users: int) -> RoundPlan:
    """One round over `users` users, all answering, at (ε, δ) = (1, 1e-6) with Δ₂ = 1, as a schedule builds it."""
    return RoundPlan(round=0, first_user=0, stop_user=users, epsilon=1.0, delta=1e-6, norm_bound=1.0, inputs=GRADIENTS)


def run(size: str = "quick") -> dict[str, float]:
    """Encode throughput over the RNG ceiling, and calibration seconds, per protocol.

    Args:
      size: one of bench.timing.SIZES; full: a 16× larger call (n = 65536 users per call)
        for the calibrations; smoke: the paper-mode calibrations (the tight ones take seconds each).

    Returns:
      name → value.
    """
    users = 4096
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((DIM, users))
    inputs /= np.linalg.norm(inputs, axis=0) * 1.01
    results = {}
    calls = {}
    for name in NAMES:
        protocol = build_protocol(name, sized(size, "paper", "tight", "tight"))
        began = time.perf_counter()
        calls[name] = (protocol, protocol.plan(_plan(users * (16 if size == "full" else 1)), DIM))
        results[f"protocol_{name}_calibration_s"] = time.perf_counter() - began
    functions = {name: (lambda p=protocol, c=call: p.encode_block(c, [inputs.copy()], np.random.default_rng(1)))
                 for name, (protocol, call) in calls.items()}
    functions["rng"] = lambda: np.random.default_rng(1).random(DIM * users)
    times = best_times(functions, repeats=sized(size, 1, 7, 7))
    for name in NAMES:
        results[f"protocol_{name}_encode_vs_rng_ceiling"] = times["rng"] / times[name]
    return results
