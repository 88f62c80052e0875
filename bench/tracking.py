"""Tracking overhead: the share of a run's wall time spent in MLflow and Parquet."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from pipeline import config, runner
from pipeline.tracking import MlflowTracker, ParquetStore


class _Timed:
    """Wraps a sink and adds up the seconds spent in its methods."""

    def __init__(self, sink):
        self._sink, self.seconds = sink, 0.0

    def __getattr__(self, name):
        method = getattr(self._sink, name)

        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began

        return timed


def run(full: bool) -> dict[str, float]:
    """tracking_overhead for a sequential run (many rounds) and a mean estimate.

    Args:
      full: more users.

    Returns:
      name → value.
    """
    n_users = 10_000_000 if full else 1_000_000
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name in ("seq_sgd", "mean_estimation"):
            tree = {"experiment": "bench", "n_users": n_users, "optimizer": {"name": name},
                    "execution": {"backend": "local", "shards": 1},
                    "tracking": {"mlflow_uri": f"sqlite:///{root / 'mlflow.db'}", "out": str(root / name)}}
            (run_config,) = config.expand(tree)
            planned = runner.plan_run(run_config)
            tracker = _Timed(MlflowTracker(run_config["tracking.mlflow_uri"], "bench"))
            store = _Timed(ParquetStore(run_config["tracking.out"]))
            began = time.perf_counter()
            runner.execute_run(planned, tracker, store)
            total = time.perf_counter() - began
            figures[f"tracking_overhead_{name}"] = (tracker.seconds + store.seconds) / total
            figures[f"rounds_{name}"] = float(planned.job.schedule.rounds)
    return figures
