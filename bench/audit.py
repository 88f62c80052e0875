"""The audit's speed: trials of P_vec (n = 2,000, d = 1, ε = 1, tight) per second,
against the protocol's own encoder in a bare loop (the ceiling of any audit that
runs the protocol object once per trial), in process against Ray (one worker
vs all), and the compiled encoding a compiled run sends with against encode_block."""
from __future__ import annotations

import time

import numpy as np

from bench.timing import sized
from pipeline import audit
from pipeline.protocols import CjmpVec
from pipeline.protocols.base import RoundPlan

USERS = 2000


def _bare_calls_per_s(call: audit.AuditedCall, calls: int) -> float:
    """encode_block + finish on the base neighbour, nothing else: the protocol's own cost."""
    protocol, params = call.protocol, call.params
    rng = np.random.default_rng(0)
    work = protocol.workspace(USERS, 1)
    began = time.perf_counter()
    for _ in range(calls):
        protocol.finish(params, protocol.encode_block(params, [call.pair[0].copy()], rng, work), rng)
    return calls / (time.perf_counter() - began)


def run(size: str) -> dict[str, float]:
    trials = sized(size, 2_000, 100_000, 1_000_000)
    plan = RoundPlan(0, 0, USERS, 1.0, 1e-6, 1.0, "gradients")
    call = audit.audited_call(CjmpVec("tight"), plan, 1)
    bare = _bare_calls_per_s(call, sized(size, 500, 10_000, 20_000))
    local_trials = sized(size, 1_000, 20_000, 50_000)
    began = time.perf_counter()
    audit.attack(call, 1e-6, local_trials, backend="local")
    local = local_trials / (time.perf_counter() - began)
    compiled_call = audit.audited_call(CjmpVec("tight"), plan, 1, compiled=True)
    audit.attack(compiled_call, 1e-6, 200, backend="local")  # numba compiles or loads its kernel outside the timing
    began = time.perf_counter()
    audit.attack(compiled_call, 1e-6, local_trials, backend="local")
    compiled = local_trials / (time.perf_counter() - began)
    audit.attack(call, 1e-6, 2 * audit.BATCH if size != "smoke" else 1_000, backend="ray")  # Ray started, workers warm
    began = time.perf_counter()
    audit.attack(call, 1e-6, trials, backend="ray")
    seconds = time.perf_counter() - began
    ray = trials / seconds
    return {
        # Trials per neighbour per second: each trial runs the protocol once on each neighbour.
        "audit_trials_per_s": ray,
        "audit_seconds": seconds,
        "audit_trials": trials,
        "audit_local_trials_per_s": local,
        "audit_local_vs_bare_protocol": 2 * local / bare,  # 1: no overhead beyond the protocol's own calls
        "audit_ray_vs_local": ray / local,
        "audit_compiled_vs_numpy": compiled / local,  # the compiled route's trials over encode_block's, in process
    }
