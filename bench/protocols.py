"""The companion protocols' users' side: one block's encode throughput against the
per-core RNG ceiling (float64 `rng.random` draws of the same user-coordinate count),
and each protocol's calibration time against the P_vec tight calibration's."""
from __future__ import annotations

import time
import types

import numpy as np

from bench.timing import best_times
from pipeline.protocols import build_protocol

DIM, USERS = 10, 4096  # one engine block of d = 10
NAMES = ("central_gaussian", "shuffle_gaussian", "local_l2", "girgis_l1", "girgis_linf", "girgis_l2", "cjmp_vec")


def _plan(users: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(users=users, population=users, sampling="all", rate=0.0, epsilon=1.0, delta=1e-6,
                                 norm_bound=1.0, folds=1, inputs="gradients", noise_std=0.0, noisy_max=())


def run(full: bool) -> dict[str, float]:
    """Encode throughput over the RNG ceiling, and calibration seconds, per protocol.

    Args:
      full: a 16× larger call (n = 65536 users per call) for the calibrations.

    Returns:
      name → value.
    """
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((DIM, USERS))
    inputs /= np.linalg.norm(inputs, axis=0) * 1.01
    results = {}
    calls = {}
    for name in NAMES:
        protocol = build_protocol(name, "tight")
        began = time.perf_counter()
        calls[name] = (protocol, protocol.plan(_plan(USERS * (16 if full else 1)), DIM))
        results[f"protocol_{name}_calibration_s"] = time.perf_counter() - began
    functions = {name: (lambda p=protocol, c=call: p.encode_block(c, [inputs.copy()], np.random.default_rng(1)))
                 for name, (protocol, call) in calls.items()}
    functions["rng"] = lambda: np.random.default_rng(1).random(DIM * USERS)
    times = best_times(functions, repeats=7)
    for name in NAMES:
        results[f"protocol_{name}_encode_vs_rng_ceiling"] = times["rng"] / times[name]
    return results
