"""Start-up time of the command line, over `python -c "import numpy"` timed in the same run.

Each command is a fresh process, so these figures include the interpreter's start and
every import the command needs: `--help` should load no accountant, `epsilon gaussian`
dp_accounting only, and `ledger` neither Ray, MLflow nor pandas. `shard_job` is what
every shard actor of a run pays before its first round: loading the pickled job (the
modules of its problem, optimizer and protocol), without the accountants.
"""
from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.timing import best_times, planned_run, sized

ROOT = Path(__file__).resolve().parent.parent  # where `python -m pipeline` finds the package

# One grid point: the quickstart's sequential SGD run, in process.
_ONE_RUN = """\
experiment: startup
problem: {name: quadratic, dim: 5, radius: 1.0}
n_users: 100000
optimizer: {name: seq_sgd}
privacy: {model: shuffle, protocol: cjmp_vec, epsilon: 1.0, delta: 1.0e-6, accounting: paper}
seeds: [0]
execution: {backend: local, shards: 1}
tracking: {mlflow_uri: "sqlite:///%(folder)s/mlflow.db", out: "%(folder)s/results"}
"""


def _command(*args: str):
    """A function running `python ARGS` to completion in a fresh process (a failure raises)."""
    def call() -> None:
        subprocess.run([sys.executable, *args], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    return call


def run(size: str = "quick") -> dict[str, float]:
    """Wall time of `python -m pipeline --help`, `... epsilon gaussian ...`, `... ledger CONFIG`
    (a one-run config) and of loading that run's pickled job in a fresh process (a shard
    actor's imports) over `python -c "import numpy"`: interleaved, best of N.

    Args:
      size: one of bench.timing.SIZES (N = 1, 5, 10).

    Returns:
      name → value.
    """
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "one_run.yaml"
        config.write_text(_ONE_RUN % {"folder": folder})
        job = Path(folder) / "job.pickle"
        job.write_bytes(pickle.dumps(planned_run(yaml.safe_load(config.read_text())).job))
        times = best_times({
            "numpy": _command("-c", "import numpy"),
            "help": _command("-m", "pipeline", "--help"),
            "epsilon_gaussian": _command("-m", "pipeline", "epsilon", "gaussian", "--sigma", "1", "--q", "0.01",
                                         "--rounds", "1000", "--delta", "1e-5"),
            "ledger": _command("-m", "pipeline", "ledger", str(config)),
            "shard_job": _command("-c", f"import pickle; pickle.loads(open({str(job)!r}, 'rb').read())"),
        }, repeats=sized(size, 1, 5, 10))
    figures = {f"startup_{name}_s": seconds for name, seconds in times.items()}
    for name in ("help", "epsilon_gaussian", "ledger", "shard_job"):
        figures[f"startup_{name}_vs_numpy"] = times[name] / times["numpy"]
    return figures
