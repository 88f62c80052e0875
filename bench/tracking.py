"""Tracking overhead: the share of a run's wall time spent in MLflow and Parquet; and
whether recording a run costs the same in a results folder of 1 run as of 1,000."""
from __future__ import annotations

import datetime
import os
import tempfile
import time
from pathlib import Path

from bench.timing import planned_run, sized
from pipeline import engine, recording, runner
from pipeline.tracking import MlflowTracker, ParquetStore


class _Timed:
    """Wraps a sink and adds up the seconds spent in its methods (its other attributes,
    such as ParquetStore.shown, pass through as they are)."""

    def __init__(self, sink):
        self._sink, self.seconds = sink, 0.0

    def __getattr__(self, name):
        method = getattr(self._sink, name)
        if not callable(method):
            return method

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
    return {**figures, **record_growth(size)}


def record_growth(size: str) -> dict[str, float]:
    """record_run_ms of the 1st run of a results folder and of the Nth (N = 1,000 quick):
    recording.record_run, MLflow and Parquet, for one seq_sgd run of 10⁴ users (196 rounds).

    The runs in between are recorded as the store records any run (its commit of a
    runs row and its rounds), without their MLflow runs: the folder's size is what
    is measured. The first and the Nth recording are each taken 3 times (the
    smallest counts), alternating with the filling.

    Returns:
      record_run_ms_first, record_run_ms_at_N, record_run_at_N_vs_first and
      record_growth_runs (N).
    """
    from pipeline import results

    runs = sized(size, 20, 1_000, 1_000)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        tracker, store = MlflowTracker(uri, "bench"), ParquetStore(root / "out")
        tree = {"experiment": "bench", "n_users": 10_000, "optimizer": {"name": "seq_sgd"},
                "execution": {"backend": "local", "shards": 1}, "tracking": {"mlflow_uri": uri, "out": str(root / "out")}}
        planned = planned_run(tree)
        _, records = engine.execute(planned.job, "local", 1)

        def record() -> float:
            mlflow_run_id = recording.start_run(planned, tracker, store.shown)
            began = time.perf_counter()
            recording.record_run(planned, records, 0.0, mlflow_run_id, datetime.datetime.now(datetime.timezone.utc),
                              tracker, store)
            return time.perf_counter() - began

        first = min(record() for _ in range(3))
        row, rounds = (results.load(root / "out")[index] for index in (0, 1))
        row = row.drop(columns="results_folder").iloc[0].to_dict()
        rounds = rounds[rounds["mlflow_run_id"] == row["mlflow_run_id"]]
        for index in range(runs - 6):  # the folder fills with other runs' files
            attempt = f"{index:032x}"
            store.commit({**row, "run_id": f"filler-{index}", "mlflow_run_id": attempt},
                         rounds.assign(run_id=f"filler-{index}", mlflow_run_id=attempt), results.KINDS)
        late = min(record() for _ in range(3))
    return {"record_run_ms_first": 1e3 * first, "record_run_ms_at_N": 1e3 * late,
            "record_run_at_N_vs_first": late / first, "record_growth_runs": float(runs)}
