"""How many package files one round reads (issue 42 item 5): `sys.setprofile` records the
package files whose functions one round calls, and the moves between files, on a shard after
two warm-up rounds (imports, compilation and the first block's draw done), for `seq_sgd` and
`full_gd` with `cjmp_vec` on the quadratic, on the Python path and fused. A count, not a time:
the goal is at most five files a round, and README's "One round passes through" lists them."""
from __future__ import annotations

import collections
import sys
from pathlib import Path

from bench.timing import planned_run

PACKAGE = str(Path(__file__).resolve().parent.parent / "pipeline")
RUNS = {"seq": {"name": "seq_sgd"}, "full_gd": {"name": "full_gd", "rounds": 5}}


def _one_round(optimizer: dict, fused_path: bool) -> tuple[collections.Counter, int]:
    """The package files (relative to pipeline/) one round's calls enter, and the moves between them."""
    from pipeline.engine.shard import Shard

    job = planned_run({"experiment": "round-files", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0},
                       "n_users": 20_000, "optimizer": optimizer, "seeds": [0],
                       "privacy": {"protocol": "cjmp_vec", "epsilon": 1.0, "delta": 1e-6, "accounting": "tight"},
                       "execution": {"backend": "local", "shards": 1}}).job
    shard = Shard(job, 0, job.layout.n_blocks)
    rounds = shard.run_rounds if fused_path else shard.python_rounds
    state, _ = rounds(job.optimizer.start(job.seed), 0, 2)
    files, moves, last = collections.Counter(), 0, None

    def entered(frame, event, arg):
        nonlocal moves, last
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(PACKAGE):
            files[name[len(PACKAGE) + 1:]] += 1
            moves, last = moves + (name != last), name

    sys.setprofile(entered)
    try:
        rounds(state, 2, 3)
    finally:
        sys.setprofile(None)
    return files, moves


def run(size: str = "quick") -> dict[str, float]:
    """Files and file-to-file moves of one round, each path (the size does not matter).

    Returns:
      name → value: {run}_{python|fused}_files and _moves.
    """
    results = {}
    for prefix, optimizer in RUNS.items():
        for path in ("python", "fused"):
            files, moves = _one_round(optimizer, path == "fused")
            results[f"{prefix}_{path}_files"], results[f"{prefix}_{path}_moves"] = len(files), moves
    return results
