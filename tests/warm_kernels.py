"""Compiles the fused rounds' numba kernels, and the functions the Python rounds compile one by
one (the problems' and protocols' compiled functions), into their cache (pipeline/engine/__pycache__ or
$NUMBA_CACHE_DIR) by running tiny jobs that reach each kernel, so that the test processes, Ray
actors and command-line children a test run starts load the kernels instead of each compiling
them (15 s and more of a core apiece on a fresh checkout). conftest.py runs it before the
tests, in two processes that share the kernels between them.

Usage: python tests/warm_kernels.py PART PARTS (this process runs the jobs PART, PART + PARTS, ...).
"""
from __future__ import annotations

import sys

import numpy as np

from pipeline import config, engine, planning

# (problem, optimizer, protocol, accounting): one job a kernel or a variant of its arguments'
# types, the slowest to compile first. A round kernel is compiled per (protocol, optimizer's stages, problem's twin).
JOBS = (
    ("quadratic", "seq_sgd", "cjmp_vec", "tight"),            # rounds_pvec, averaged stages, the quadratic twin's draw
    ("quadratic", "seq_sgd", "girgis_l2", "paper"),           # rounds_girgis
    ("quadratic", "seq_sgd", "shuffle_gaussian", "tight"),    # rounds_sum
    ("quadratic", "seq_agd", "cjmp_vec", "tight"),            # rounds_pvec, AC-SA stages
    ("quadratic", "seq_agd", "shuffle_gaussian", "tight"),    # rounds_sum, AC-SA stages
    ("quadratic", "pnsgd", "central_gaussian", "tight"),      # rounds_sum, last-iterate stages
    ("quadratic", "full_gd", "cjmp_vec", "tight"),            # blocks_pvec on two shards, rounds_pvec on one
    ("quadratic", "full_gd", "local_l2", "tight"),            # blocks_sum on two shards, rounds_sum on one
    ("quadratic", "seq_sgd", "cjmp_vec", "paper"),
    ("absolute", "seq_sgd", "cjmp_vec", "tight"),             # the finite twins' draw
    ("bernoulli", "seq_sgd", "cjmp_vec", "tight"),            # Bernoulli's twin's draw
)


def _girgis() -> None:
    from pipeline.engine.layout import stream
    from pipeline.protocols import girgis

    params = girgis.plan_girgis("l2", 4, 3, 1.0, 2.0)
    girgis.decode(params, girgis.encode_block(params, np.zeros((3, 4)), stream(0, 2, 0, 0)))


def _sums_and_pvec() -> None:
    from pipeline.engine.layout import stream
    from pipeline.protocols import build_protocol
    from pipeline.protocols.base import GRADIENTS, RoundPlan

    for name in ("shuffle_gaussian", "cjmp_vec"):
        protocol = build_protocol(name, "tight")
        params = protocol.plan(RoundPlan(0, 0, 4, 1.0, 1e-6, 1.0, GRADIENTS), 3)
        protocol.encode_block(params, [np.zeros((3, 4))], stream(0, 2, 0, 0), protocol.workspace(4, 3))


def _problems() -> None:
    from pipeline.optimizers.base import gradient_problem
    from pipeline.problems import build_problem

    for name in ("quadratic", "bernoulli", "absolute", "elastic"):
        problem = build_problem(name, 3, 1.0)
        problem.gradients(np.zeros(3), problem.sample(np.random.default_rng(0), 2))
        problem.excess_loss(problem.project(np.ones(3)))
        if name == "elastic":
            problem.prox(np.zeros(3), np.zeros((3, 2)), 0.5)
            gradient_problem(problem, 2.0).gradients(np.zeros(3), np.zeros((3, 2)))


# The functions the Python rounds compile alone (pipeline.compiled.compiled_function), in two parts.
FUNCTIONS = (_girgis, _problems, _sums_and_pvec)


def cached() -> bool:
    """Whether numba's cache holds kernels of the current source (engine.kernels_cached: an edit
    makes numba recompile, and Ray actors compiling for seconds time out a compiled graph's first round)."""
    return engine.kernels_cached()


def warm(part: int, parts: int) -> None:
    """Runs this process's share of JOBS on the local backend, one shard."""
    for functions in FUNCTIONS[part::parts]:
        functions()
    for problem, optimizer, protocol, accounting in JOBS[part::parts]:
        interactive = optimizer == "full_gd"
        tree = {"experiment": "warm", "problem": {"name": problem, "dim": 3, "radius": 1.0}, "n_users": 600,
                "optimizer": {"name": optimizer, **({"rounds": 2} if interactive else {})},
                "privacy": {"epsilon": 1.0, "delta": 1e-6, "protocol": protocol, "accounting": accounting},
                "seeds": [0], "execution": {"backend": "local", "shards": 1, "block_size": 300}}
        (run,) = config.expand(tree)
        job = planning.plan_run(run).job
        # A fully interactive run carries its rounds in a round kernel where one shard holds every
        # user, and sends its blocks' partials (block kernels) from several.
        for shards in (1, 2) if interactive else (1,):
            engine.execute(job, "local", shards)


if __name__ == "__main__":
    warm(int(sys.argv[1]), int(sys.argv[2]))
