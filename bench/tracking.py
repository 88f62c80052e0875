"""Tracking overhead: the share of a run's wall time spent in MLflow and Parquet."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.timing import planned_run, sized
from pipeline import runner
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


def run(size: str = "quick") -> dict[str, float]:
    """tracking_overhead for a sequential run (many rounds) and a one-round run.

    One store serves a warm-up run first (a new store's first writes pay for
    its creation), then each case runs twice and the smaller share counts:
    SQLite commit latency on shared disks varies several-fold between runs.

    Args:
      size: one of bench.timing.SIZES (users: 1e4, 1e6, 1e7).

    Returns:
      name → value.
    """
    n_users = sized(size, 10_000, 1_000_000, 10_000_000)
    figures = {}
    # Smoke measures nothing: its store goes to memory where it can, sparing the disk's commit latency.
    memory = "/dev/shm" if size == "smoke" and os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=memory) as folder:
        root = Path(folder)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        tracker = _Timed(MlflowTracker(uri, "bench"))
        store = _Timed(ParquetStore(root / "out"))

        def share(name: str, users: int, seed: int) -> tuple[float, int]:
            tree = {"experiment": "bench", "n_users": users, "optimizer": {"name": name}, "seeds": [seed],
                    "execution": {"backend": "local", "shards": 1},
                    "tracking": {"mlflow_uri": uri, "out": str(root / "out")}}
            planned = planned_run(tree)
            tracker.seconds = store.seconds = 0.0
            began = time.perf_counter()
            runner.execute_run(planned, tracker, store)  # what `run` does for each grid point
            total = time.perf_counter() - began
            return (tracker.seconds + store.seconds) / total, planned.job.schedule.rounds

        if size != "smoke":
            share("mean_estimation", 10_000, 0)  # warm-up
        for name in ("seq_sgd", "mean_estimation"):
            shares = [share(name, n_users, seed) for seed in sized(size, (1,), (1, 2), (1, 2))]
            figures[f"tracking_overhead_{name}"] = min(value for value, _ in shares)
            figures[f"rounds_{name}"] = float(shares[0][1])
    return figures
