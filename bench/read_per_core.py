"""Users holding several records (`problem.user_column`): how fast a shard reads its
users' records, and how much memory it holds per byte of them, against today's one
record per user.

One synthetic table of N records (d = 10 float64 features and an int64 label, in row
groups of 262,144 rows, snappy, as `experiments/make_datasets.py synthetic` writes them),
written three times with the same rows: without a user column (each row one user: the
reference, read by `Dataset.read_users`), and with an int64 column `client` grouping the
rows into U users of N/U records each, either contiguous (each user's rows together, as
`make_datasets.py --partition` writes them) or shuffled (each row's user uniform, the hard
case: every shard's rows are spread over every row group). Shards read theirs by
`Dataset.read_user_records`, as `pipeline.engine.shard.Shard` does.

Figures, each measured in the same run against its reference:
  * records per second per core: one process per core (at most 16), each reading its share
    of the users (1/cores of them) at once, as a new shard does it: the problem unpickled as
    the driver sent it (planned, and with its user column's grouping: nothing cached before),
    then `read_user_records`. `_vs_rows`: the shards' records per CPU second (user and system
    time of the shard processes, page faults included: robust on a shared machine) over the
    one-record shards' (goal ≥ 0.9); `_vs_rows_wall`: the same from the wall time the shards
    took together; interleaved, best of N. `_grouping_s`: seconds one process takes to group
    the user column itself (the driver, once per table; a shard only when it was not sent).
    With shuffled rows every shard decodes every row group of every column to keep 1/cores
    of it, so that ratio falls with the cores.
  * a shard's peak memory: the growth of its process's peak resident set (VmHWM, so
    pyarrow's buffers count; not tracemalloc, which misses them) while it reads the first
    share of users, in a fresh process, over those records' bytes, (d + 1) · 8 per record
    (goal ≤ 1.1).

`python -m bench --only read_per_core` runs it at 10⁷ records (`--smoke`: 2·10⁴);
`python -m bench.read_per_core N [U]` at N records and U users (default N/100).
"""
from __future__ import annotations

import os
import pickle
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.memory import _PEAK_KB, _python
from bench.timing import best_values, sized

DIM = 10
ROW_GROUP = 262_144
KINDS = ("rows", "contiguous", "shuffled")  # the one-record table, then the two user-column tables


def write_tables(folder: str, records: int, users: int, seed: int = 0) -> dict[str, str]:
    """The three tables (module docstring), written one row group at a time.

    Returns:
      kind → path.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    contiguous = np.arange(records, dtype=np.int64) * users // records  # user u: rows u·N/U … (u+1)·N/U − 1
    shuffled = rng.permutation(contiguous)
    names = [f"x{j}" for j in range(DIM)]
    paths = {kind: str(Path(folder) / f"{kind}.parquet") for kind in KINDS}
    fields = [pa.field(name, pa.float64(), nullable=False) for name in names] + \
        [pa.field("label", pa.int64(), nullable=False)]
    client = [pa.field("client", pa.int64(), nullable=False)]
    writers = {kind: pq.ParquetWriter(path, pa.schema(fields if kind == "rows" else fields + client),
                                      compression="snappy", use_dictionary=["label", "client"])
               for kind, path in paths.items()}
    try:
        for first in range(0, records, ROW_GROUP):
            rows = min(ROW_GROUP, records - first)
            xt = rng.standard_normal((DIM, rows)) / np.sqrt(DIM)
            label = (rng.random(rows) < 0.5).astype(np.int64)
            arrays = [pa.array(column) for column in xt] + [pa.array(label)]
            ids = {"contiguous": contiguous[first: first + rows], "shuffled": shuffled[first: first + rows]}
            for kind, writer in writers.items():
                columns = arrays if kind == "rows" else arrays + [pa.array(ids[kind])]
                writer.write_table(pa.Table.from_arrays(columns, schema=writer.schema), row_group_size=rows)
    finally:
        for writer in writers.values():
            writer.close()
    return paths


def _problem(path: str, kind: str):
    from pipeline.problems import Dataset

    return Dataset(dim=DIM, radius=1.0, source=path, features="x*",
                   user_column=None if kind == "rows" else "client")


_PLANNED: dict[str, bytes] = {}  # kind → the pickled Dataset, as the driver sends it to its shards


def _receive(planned: dict[str, bytes]) -> None:
    """A worker's initializer: the problems as planned (scanned, grouped) by the driver."""
    _PLANNED.update(planned)


def _shard_read(kind: str, n_users: int, first: int, stop: int) -> tuple[int, float]:
    """A shard's read of users first … stop − 1, as a new shard does it: the problem unpickled
    (with what the driver sends along), then its users' records read.

    Returns:
      (records read, CPU seconds the process spent on it).
    """
    from pipeline.problems.dataset import forget_users

    forget_users()  # a new shard's process holds no grouping but the one it is sent
    began = time.process_time()
    problem = pickle.loads(_PLANNED[kind])
    data, _ = problem.read_user_records(n_users, first, stop)
    return data.shape[1], time.process_time() - began


def _grouping(kind: str) -> float:
    """Seconds a process takes to group a user column it was not sent (the driver's planning does
    it once; a shard only for a column of more than SHIPPED_USERS users)."""
    from pipeline.problems.dataset import forget_users

    problem = pickle.loads(_PLANNED[kind])
    forget_users()
    began = time.perf_counter()
    problem.users_available
    return time.perf_counter() - began


_PEAK = """
import pickle
import numpy, pyarrow.parquet
import pipeline.problems
from pipeline.problems.tables import Table
Table({source!r}).read(['x0'], 0, 1)  # pyarrow started and the table opened, as before any read
before = {peak}
with open({pickled!r}, "rb") as planned:
    problem = pickle.load(planned)  # as a shard gets it: planned (scanned, grouped) by the driver
data, _ = problem.read_user_records({n_users}, {first}, {stop})
print({peak} - before, data.shape[1])
"""


def run(size: str = "quick", records: int | None = None, users: int | None = None) -> dict[str, float]:
    """Records per second per core and a shard's peak memory, users with several records over one each.

    Args:
      size: one of bench.timing.SIZES (records: 2·10⁴ smoke, 10⁷ quick and full; users N/100).
      records, users: N and U instead of the size's.

    Returns:
      name → value.
    """
    records = records or sized(size, 20_000, 10_000_000, 10_000_000)
    users = users or max(1, records // 100)
    cores = max(1, min(os.cpu_count() or 1, 16))
    counts = {"rows": records, "contiguous": users, "shuffled": users}  # the users of each table
    figures: dict[str, float] = {"read_per_core_records": float(records), "read_per_core_users": float(users),
                                 "read_per_core_shards": float(cores)}
    with tempfile.TemporaryDirectory() as folder:
        paths = write_tables(folder, records, users)
        planned = {kind: pickle.dumps(_problem(paths[kind], kind)) for kind in KINDS}
        with ProcessPoolExecutor(cores, initializer=_receive, initargs=(planned,)) as pool:
            cpu = {kind: float("inf") for kind in KINDS}  # the least CPU time of all shards together

            def shards(kind: str):
                bounds = [round(i * counts[kind] / cores) for i in range(cores + 1)]

                def seconds() -> float:
                    began = time.perf_counter()
                    done = list(pool.map(_shard_read, [kind] * cores, [counts[kind]] * cores, bounds[:-1], bounds[1:]))
                    wall = time.perf_counter() - began
                    assert sum(read for read, _ in done) == records, (kind, done, records)
                    cpu[kind] = min(cpu[kind], sum(seconds for _, seconds in done))
                    return wall

                return seconds

            list(pool.map(_shard_read, KINDS, [counts[kind] for kind in KINDS], [0] * 3, [1] * 3))  # warm
            times = best_values({kind: shards(kind) for kind in KINDS}, repeats=sized(size, 1, 5, 5))
            grouping = {kind: min(pool.submit(_grouping, kind).result() for _ in range(sized(size, 1, 2, 2)))
                        for kind in KINDS[1:]}
        for kind in KINDS:
            figures[f"read_per_core_{kind}_records_per_cpu_s"] = records / cpu[kind]
        for kind in KINDS[1:]:
            # The goal: ≥ 0.9, a shard reads its users' records nearly as fast as one-record users:
            # records per CPU second of the shards, then per core of the wall time they took together.
            figures[f"read_per_core_{kind}_vs_rows"] = cpu["rows"] / cpu[kind]
            figures[f"read_per_core_{kind}_vs_rows_wall"] = times["rows"] / times[kind]
            figures[f"read_per_core_{kind}_grouping_s"] = grouping[kind]
        # One shard's peak memory over its records' bytes, in a fresh process.
        for kind in KINDS:
            share = round(counts[kind] / cores)
            pickled = Path(folder) / f"{kind}.pickle"
            pickled.write_bytes(planned[kind])
            script = _PEAK.format(source=paths[kind], pickled=str(pickled), n_users=counts[kind], first=0, stop=share,
                                  peak=_PEAK_KB)
            peak_kb, read = map(float, _python(script).split())
            figures[f"read_per_core_{kind}_peak_vs_rows_bytes"] = peak_kb * 1024 / (read * (DIM + 1) * 8)
    return figures


if __name__ == "__main__":  # python -m bench.read_per_core [RECORDS [USERS]]: another size
    import sys

    for key, value in run("quick", *map(int, sys.argv[1:3])).items():
        print(f"{key}={value:.4g}", flush=True)
