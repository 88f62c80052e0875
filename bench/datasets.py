"""Datasets as users: how fast shards read their own rows, how much memory a shard
holds per byte of its rows, and a whole `seq_sgd` run over a synthetic table.

References measured in the same run: pyarrow's own read of the whole file into
one float64 array, on one thread (the per-core read ratio) and on its thread
pool; and the rows' own bytes (the memory ratio)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.memory import _PEAK_KB, _python
from bench.timing import best_values, planned_run, sized

DIM = 50
ROOT = Path(__file__).resolve().parent.parent


def _tree(source: str, rows: int, shards: int, backend: str = "local") -> dict:
    return {"experiment": "bench", "n_users": rows, "seeds": [0],
            "problem": {"name": "dataset", "source": source, "dim": DIM, "loss": "logistic", "radius": 1.0},
            "optimizer": {"name": "seq_sgd"}, "privacy": {"epsilon": 1.0, "delta": 1e-6, "accounting": "tight"},
            "execution": {"backend": backend, "shards": shards, "block_size": 65536}}


def _pyarrow_read(source: str, threads: bool) -> float:
    """Seconds pyarrow takes to read every column of the file into one (columns, rows) float64 array,
    on its thread pool (every core) or on one thread."""
    import numpy as np
    import pyarrow.parquet as pq

    began = time.perf_counter()
    table = pq.read_table(source, use_threads=threads)
    out = np.empty((table.num_columns, table.num_rows))
    for index, column in enumerate(table.columns):
        out[index] = column.to_numpy()
    return time.perf_counter() - began


def _shard_read(source: str, rows: int, first: int, stop: int) -> float:
    """Seconds a shard's read of its users takes (what Shard does when it starts)."""
    from pipeline.problems import Dataset

    problem = Dataset(dim=DIM, radius=1.0, source=source)  # the table's scan is cached per process
    began = time.perf_counter()
    problem.read_users(rows, first, stop)
    return time.perf_counter() - began


_PEAK = """
import pickle
import pyarrow.parquet, numpy
import pipeline.problems
problem = pickle.loads(bytes.fromhex({pickled!r}))  # as a shard gets it: planned (scanned) elsewhere
problem.read_users({rows}, 0, 1)  # the table opened, as before any read
before = {peak}
problem.read_users({rows}, {first}, {stop})
print({peak} - before)
"""


def run(size: str = "quick") -> dict[str, float]:
    """Read throughput, peak shard memory and a seq_sgd run on a synthetic logistic table.

    Args:
      size: one of bench.timing.SIZES (rows: 2·10⁴ smoke, 10⁶ quick, 10⁷ full).

    Returns:
      name → value.
    """
    rows = sized(size, 20_000, 1_000_000, 10_000_000)
    cores = max(1, min(os.cpu_count() or 1, 16))
    with tempfile.TemporaryDirectory() as folder:
        source = str(Path(folder) / "synthetic.parquet")
        began = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "experiments" / "make_datasets.py"), "synthetic", "--rows",
                        str(rows), "--dim", str(DIM), "--out", source], check=True, capture_output=True, cwd=ROOT)
        written_s = time.perf_counter() - began
        bounds = [round(i * rows / cores) for i in range(cores + 1)]
        with ProcessPoolExecutor(cores) as pool:
            list(pool.map(_shard_read, [source] * cores, [rows] * cores, [0] * cores, [1] * cores))  # warm imports

            def shards() -> float:
                began = time.perf_counter()
                list(pool.map(_shard_read, [source] * cores, [rows] * cores, bounds[:-1], bounds[1:]))
                return time.perf_counter() - began

            def one_shard() -> float:  # every row in one process: the parallel read's own reference
                began = time.perf_counter()
                pool.submit(_shard_read, source, rows, 0, rows).result()
                return time.perf_counter() - began

            times = best_values({"pyarrow_threads": lambda: _pyarrow_read(source, True),
                                 "pyarrow_one_thread": lambda: _pyarrow_read(source, False), "shards": shards,
                                 "one_shard": one_shard}, repeats=sized(size, 1, 3, 2))
        # One shard's peak memory: its share of the rows, over their bytes as float64.
        share = bounds[1] - bounds[0]
        import pickle

        from pipeline.problems import Dataset

        pickled = pickle.dumps(Dataset(dim=DIM, radius=1.0, source=source)).hex()
        peak_kb = float(_python(_PEAK.format(pickled=pickled, rows=rows, first=0, stop=share, peak=_PEAK_KB)))
        began = time.perf_counter()
        os.environ["SHUFFLE_SCO_CACHE"] = folder  # the run solves its optimum: nothing cached from before
        try:
            if size == "smoke":  # in this process, on local shards: without starting Ray
                from pipeline import engine

                engine.execute(planned_run(_tree(source, rows, cores)).job, "local", cores)
            else:
                _python(f"from bench.datasets import seq_sgd_run; seq_sgd_run({source!r}, {rows}, {cores})")
        finally:
            os.environ.pop("SHUFFLE_SCO_CACHE")
        run_s = time.perf_counter() - began
    return {
        "dataset_rows": float(rows),
        "dataset_write_rows_per_s": rows / written_s,
        # Shards (one process per core) over one thread of pyarrow, per core; and over pyarrow's own threads.
        "dataset_read_vs_pyarrow_per_core": times["pyarrow_one_thread"] / times["shards"] / cores,
        "dataset_read_vs_pyarrow_threads": times["pyarrow_threads"] / times["shards"],
        # What bounds the per-core figure: one shard alone against one pyarrow thread, and the
        # speed-up of the same read from one process to one per core (memory bandwidth).
        "dataset_read_one_shard_vs_pyarrow_one_thread": times["pyarrow_one_thread"] / times["one_shard"],
        "dataset_read_scaling": times["one_shard"] / times["shards"],
        "dataset_read_cores": float(cores),
        "dataset_shard_peak_vs_rows_bytes": peak_kb * 1024 / (share * (DIM + 1) * 8),
        "dataset_seq_sgd_s": run_s,
    }


def seq_sgd_run(source: str, rows: int, shards: int) -> None:
    """A whole seq_sgd run over every row on Ray (planning, scan, optimum, rounds, metrics)."""
    import logging

    import ray

    from pipeline import engine

    ray.init(num_cpus=shards, include_dashboard=False, logging_level=logging.ERROR)
    engine.execute(planned_run(_tree(source, rows, shards, "ray")).job, "ray", shards)
