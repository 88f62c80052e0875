"""Fused sequential rounds (pipeline.engine.fused) against the Python rounds they twin."""
from __future__ import annotations

from pathlib import Path

from bench.timing import best_times, full_gd_tree, planned_run, sized
from pipeline.engine.fused import FusedRounds
from pipeline.engine.layout import DATA_STREAM, stream
from pipeline.engine.shard import Shard


def numpy_normals(job, block: int):
    """numpy's standard_normal of a block's users' normals, on the block's stream: the draw the
    problems' compiled draws replaced, the reference of `numpy_draw_vs_compiled`."""
    first, stop = job.layout.block_users(block)
    return stream(job.seed, DATA_STREAM, block).standard_normal((job.problem.dim, stop - first))


DIM = 10
# The fused runs timed, by the prefix of their metrics: (optimizer, protocol; None: the default,
# cjmp_vec; problem).
# Plug-ins' rounds, compiled from their own files (issue 42 item 3): `<plug-in>_vs_seq` is a fused
# round over seq_sgd's on the quadratic: the momentum and AdaGrad-Norm optimizers' stages, the
# Huber problem's twin (its gradients, losses and users) with seq_sgd, and the Skellam protocol's
# fused encoding (its rounding and Poisson noise) with seq_sgd.
PLUGINS = Path(__file__).resolve().parent.parent / "experiments" / "plugins"
MOMENTUM = f"{PLUGINS / 'momentum_sgd.py'}:MomentumSGD"
ADAGRAD = f"{PLUGINS / 'adagrad_norm.py'}:AdaGradNorm"
HUBER = f"{PLUGINS / 'huber_location.py'}:HuberLocation"
SKELLAM = f"{PLUGINS / 'skellam_sum.py'}:SkellamSum"
RUNS = {"seq": ("seq_sgd", None, "quadratic"), "momentum": (MOMENTUM, None, "quadratic"),
        "adagrad": (ADAGRAD, None, "quadratic"), "huber": ("seq_sgd", None, HUBER),
        "skellam": ("seq_sgd", SKELLAM, "quadratic"),
        "agd": ("seq_agd", None, "quadratic"),
        "gauss": ("seq_sgd", "shuffle_gaussian", "quadratic"), "local": ("seq_sgd", "local_l2", "quadratic"),
        "girgis": ("seq_sgd", "girgis_l2", "quadratic"), "smoothed": ("seq_agd_smoothed", None, "absolute")}


def run(size: str = "quick") -> dict[str, float]:
    """seq_sgd, the momentum and AdaGrad-Norm plug-ins, seq_sgd on the Huber plug-in and seq_agd with
    cjmp_vec, and seq_sgd with shuffle_gaussian, local_l2, girgis_l2 and the Skellam plug-in, on
    the quadratic (d = 10, ε = 1, tight: rounds of 51 users for seq_sgd with cjmp_vec), and
    seq_agd_smoothed with cjmp_vec on the absolute problem (the Moreau envelope's gradients, the
    finite support's losses), one shard holding every user: the same rounds fused and in Python
    from the same start, interleaved, best of N.

    Args:
      size: one of bench.timing.SIZES.

    Returns:
      name → value: µs per round each way, their ratio, and (seq_sgd) the time drawing the
      same users alone over the fused rounds' (the twin's draw: near 1 the rounds wait for
      the draws, which a thread makes while the kernel runs) and numpy's standard_normal of
      the same users' normals over that draw.
    """
    results = {}
    for prefix, (name, protocol, problem) in RUNS.items():
        tree = full_gd_tree(sized(size, 20_000, 10**6, 10**7), DIM, rounds=1)
        tree["problem"]["name"] = problem
        tree["optimizer"] = {"name": name}
        tree["privacy"]["accounting"] = "tight"
        if protocol:
            tree["privacy"]["protocol"] = protocol
        job = planned_run(tree).job
        shard = Shard(job, 0, job.layout.n_blocks)
        start = job.optimizer.start(job.seed)
        rounds = min(job.schedule.rounds, sized(size, 300, 10_000, 100_000))
        python_rounds = max(1, rounds // 10)  # 10x fewer: the Python path is the slow side
        users = rounds * job.optimizer.batch_size
        blocks = range(-(-users // job.block_size))
        shard.run_rounds(start, 0, 1)  # numba compiles or loads its cache outside the timing
        timed = {"fused": lambda: shard.run_rounds(start, 0, rounds),
                 "python": lambda: shard.python_rounds(start, 0, python_rounds)}
        if prefix == "seq":
            fused_draw = FusedRounds(shard).draw_block
            timed["draw"] = lambda: [fused_draw(block) for block in blocks]
            timed["numpy_draw"] = lambda: [numpy_normals(job, block) for block in blocks]
        times = best_times(timed, repeats=sized(size, 1, 3, 3))
        fused_us = times["fused"] / rounds * 1e6
        python_us = times["python"] / python_rounds * 1e6
        results.update({f"{prefix}_round_us_fused": fused_us, f"{prefix}_round_us_python": python_us,
                        f"{prefix}_fused_vs_python": python_us / fused_us})
        if "draw" in times:
            results["fused_users_drawn_share"] = times["draw"] / times["fused"]
            results["numpy_draw_vs_compiled"] = times["numpy_draw"] / times["draw"]
    results["fused_vs_python"] = results.pop("seq_fused_vs_python")  # the name earlier runs reported
    for plugin in ("momentum", "adagrad", "huber", "skellam"):
        results[f"{plugin}_vs_seq"] = results[f"{plugin}_round_us_fused"] / results["seq_round_us_fused"]
    return results
