"""The results dataset: two Parquet tables that runs append to, and one folder of
artifacts per run, in a local folder or under a URI (pipeline.tracking.location).

Layout of a results folder OUT:

    OUT/runs.parquet/part-<run_id>-<attempt>.parquet     one row per attempt of a run
    OUT/rounds.parquet/part-<run_id>-<attempt>.parquet   a finished attempt's rounds
    OUT/artifacts/<run_id>/                              ledger.json, config.yaml (traceback.txt)

Each attempt (one MLflow run: <attempt> is its MLflow run id) writes its own
immutable files, its rounds first and its runs row last: the runs row is the
marker that the attempt ended, finished or failed. Recording never reads or
rewrites another run's files, so it costs the same for the 1st and the 1,000th
run of a folder, and needs neither rename nor lock on an object store.
`pd.read_parquet("OUT/runs.parquet")` reads a table; pipeline.results.load reads
tables of many folders and keeps each run's latest finished attempt.
"""
from __future__ import annotations

import datetime
import io
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import ConfigError
from pipeline.tracking.column_table import ColumnTable
from pipeline.tracking.location import Location, check_writable, open_location
from pipeline.uris import first_line

FINISHED = "finished"
FAILED = "failed"
RUNS, ROUNDS, ARTIFACTS = "runs.parquet", "rounds.parquet", "artifacts"
# The lock file that one run holds on a local results folder (left in place: deleting it would race).
LOCK_NAME = ".lock"
MIGRATE_HINT = "python -m pipeline migrate"
_WHAT_TO_DO = "move it aside (the runs it recorded are then redone), then rerun"
# Arrow types of the columns' Python kinds: every file of a table has one schema, null where unset.
_ARROW_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(),
                datetime.datetime: pa.timestamp("us", tz="UTC")}
ROW_GROUP = 1 << 20  # rows a table is written by (write_frame)


def typed_table(rows: list[dict] | pd.DataFrame, kinds: dict[str, type]) -> pa.Table:
    """A table whose columns named in `kinds` have that kind's Arrow type (null where unset).

    Args:
      rows: the rows, as dicts (every dict with the same keys) or a DataFrame.
      kinds: column → int, float, str, bool or datetime.datetime; other columns
        keep the type Arrow infers.

    Returns:
      The table.
    """
    if isinstance(rows, pd.DataFrame):
        return pa.Table.from_pandas(rows, schema=_frame_schema(rows, kinds), preserve_index=False)
    columns = list(rows[0])
    schema = pa.schema([pa.field(name, _ARROW_TYPES[kinds[name]]) if name in kinds else
                        pa.field(name, pa.array([row[name] for row in rows]).type) for name in columns])
    return pa.Table.from_pylist([{name: _cell(row[name], kinds.get(name)) for name in columns} for row in rows],
                                schema=schema)


def _frame_schema(frame: pd.DataFrame, kinds: dict[str, type]) -> pa.Schema:
    """A DataFrame's Arrow schema, the columns named in `kinds` of that kind's type (typed_table);
    pandas' metadata as its first row's conversion writes it (the caller may pass just that row)."""
    inferred = pa.Schema.from_pandas(frame, preserve_index=False)
    typed = pa.schema([pa.field(f.name, _ARROW_TYPES[kinds[f.name]]) if f.name in kinds else f for f in inferred])
    return pa.Table.from_pandas(frame.iloc[:1], schema=typed, preserve_index=False).schema


def write_frame(frame: pd.DataFrame | ColumnTable, sink, kinds: dict[str, type] | None = None) -> None:
    """Writes a table as one Parquet file, ROW_GROUP rows converted to Arrow at a time:
    a run's rounds table (2·10⁷ rows for 10⁹ users) is never a whole Arrow table, nor
    (as a ColumnTable) a whole DataFrame, in memory.

    Args:
      frame: the rows.
      sink: a path, or a writable binary stream (left open).
      kinds: as typed_table (None: the types Arrow infers).
    """
    def rows(start: int, stop: int) -> pd.DataFrame:
        return frame.frame(start, stop) if isinstance(frame, ColumnTable) else frame.iloc[start:stop]

    # A DataFrame's object columns are typed from all their values; a ColumnTable's are constants or arrays.
    schema = _frame_schema(rows(0, 1) if isinstance(frame, ColumnTable) else frame, kinds or {})
    with pq.ParquetWriter(sink, schema) as writer:
        for start in range(0, max(len(frame), 1), ROW_GROUP):
            writer.write_table(pa.Table.from_pandas(rows(start, start + ROW_GROUP), schema=schema,
                                                    preserve_index=False))


def _cell(value, kind: type | None):
    """A value as its column stores it: a missing value (NaN or NaT, as pandas reads a null back)
    is null outside float columns, and a whole number computed as a float (a plug-in's batch
    size 26.0) goes into its integer column."""
    missing = value is pd.NaT or (isinstance(value, (float, np.floating)) and np.isnan(value))
    if missing and kind not in (float, None):
        return None
    if kind is int and isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return value


def _parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _part_name(run_id: str, attempt: str) -> str:
    return f"part-{run_id}-{attempt}.parquet"


# The columns without which a file is not one of this pipeline's tables.
NEEDED = {RUNS: ("run_id", "mlflow_run_id", "status"), ROUNDS: ("run_id", "round")}


# Part files read at once (read_table).
READ_THREADS = 16


class DamagedTable(Exception):
    """A file of a table that cannot be read, or that is not one of this pipeline's tables.

    Args:
      path: the file, on its file system.
      problem: what is wrong with it, e.g. "is damaged and cannot be read (...)".
    """

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path} {problem}")


def read_table(location: Location, path: str, name: str) -> pd.DataFrame:
    """A table: a folder of part files, or one Parquet file (the layout before 0.2).

    Args:
      location: the file system.
      path: the table's folder (or file).
      name: RUNS or ROUNDS (the columns it needs).

    Returns:
      Its rows; empty if there are none.

    Raises:
      DamagedTable: the first file that is damaged, or lacks a column of NEEDED.
    """
    single = location.kind(path) == pa.fs.FileType.File
    files = [path] if single else location.files(path, ".parquet")

    def read(file: str) -> pa.Table | DamagedTable:
        try:
            table = pq.read_table(file, filesystem=location.filesystem)
        except Exception as err:  # pyarrow raises ArrowInvalid, OSError and more for a damaged file
            return DamagedTable(file, f"is damaged and cannot be read ({first_line(err)})")
        missing = [column for column in NEEDED[name] if column not in table.column_names]
        if missing:
            return DamagedTable(file, f"lacks the column(s) {', '.join(missing)}, so it is not this pipeline's {name}")
        return table

    # The parts at once (pyarrow reads without the GIL; on an object store each is a request):
    # a rerun of a 1,000-run grid read them one by one three times.
    with ThreadPoolExecutor(READ_THREADS) as pool:
        tables = list(pool.map(read, files))
    damaged = next((table for table in tables if isinstance(table, DamagedTable)), None)
    if damaged is not None:  # the first in the folder's order, as one by one
        raise damaged
    if not tables:
        return pd.DataFrame()
    try:
        return pa.concat_tables(tables, promote_options="permissive").to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        raise _mistyped_part(files, tables, name) from None


def _mistyped_part(files: list[str], tables: list[pa.Table], name: str) -> DamagedTable:
    """The part whose column type no other part's merges with (a foreign or older writer's: a text `seed`)."""
    columns = {column for table in tables for column in table.column_names}
    for column in sorted(columns):
        found = [(file, table.schema.field(column).type) for file, table in zip(files, tables)
                 if column in table.column_names]
        try:
            pa.unify_schemas([pa.schema([pa.field(column, kind)]) for _, kind in found], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            kinds = [str(kind) for _, kind in found]
            usual = max(set(kinds), key=kinds.count)
            file, kind = next((file, kind) for file, kind in found if str(kind) != usual)
            return DamagedTable(file, f"holds {column} as {kind} where the other parts hold {usual}, so it is not "
                                      f"this pipeline's {name} (a foreign or older writer's)")
    return DamagedTable(files[0], f"does not merge with the other parts of {name}")


class ParquetStore:
    """One results folder (a path or a URI); the only writer of its files.

    Args:
      out: the folder, as tracking.out gives it.

    Raises:
      ConfigError: a URI that cannot be opened (see open_location).
    """

    def __init__(self, out: str | Path):
        self.location: Location = open_location(str(out))
        self._read: dict[str, tuple[list, pd.DataFrame]] = {}  # table → (its parts' listing, their rows): _read_parts
        local = self.location.local
        self.lock_path = local / LOCK_NAME if local is not None else None
        self._lock = None

    @property
    def shown(self) -> str:
        """The folder as the summary and MLflow's folder tag name it (absolute path or URI)."""
        return self.location.shown

    def table_addresses(self) -> tuple[str, str]:
        """Where the runs and rounds tables are, as pandas, polars or DuckDB open them."""
        return tuple(self.location.address(self.location.path(name)) for name in (RUNS, ROUNDS))

    def check_writable(self) -> None:
        """Refuses, before any work, a results folder that cannot be written (pipeline.tracking.location)."""
        check_writable(self.location)

    def lock(self) -> None:
        """Takes the folder for this driver until `unlock`: a local folder's lock file, or
        an object store's lease (pipeline.tracking.lease); creates a local folder.

        Two drivers recording into one folder would run the same runs twice
        (and end each other's MLflow runs): the second is refused at once.

        Raises:
          ConfigError: another driver holds the folder, or the folder cannot
            be written.
        """
        from filelock import FileLock, Timeout  # a well-kept lock (flock on POSIX), loaded where it is needed

        if self._lock is not None:  # held already: a second flock of ours would refuse ourselves
            return
        if self.lock_path is None:
            from pipeline.tracking.lease import Lease

            lease = Lease(self.location)
            lease.acquire()
            self._lock = lease
            return
        lock = FileLock(self.lock_path, timeout=0)
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except Timeout:
            if not self.lock_path.exists():  # filelock times out on a file it cannot make, too (/proc)
                raise ConfigError("tracking.out", self.shown,
                                  f"is not writable: the lock file {self.lock_path} cannot be made") from None
            raise ConfigError("tracking.out", self.shown,
                              f"another run holds this results folder (lock {self.lock_path}); wait for it "
                              "to end, or record into another folder (--out)") from None
        except OSError as err:
            raise ConfigError("tracking.out", self.shown,
                              f"is not writable: its lock file cannot be made ({err.strerror or err})") from None
        self._lock = lock

    def check_held(self) -> None:
        """Before a write to an object store: the lease is still this driver's.

        Raises:
          LeaseLost: another driver took the folder over (pipeline.tracking.lease).
        """
        if self.lock_path is None and self._lock is not None:
            self._lock.held()

    def unlock(self) -> None:
        """Releases the lock or lease taken by `lock` (nothing if none)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def held_elsewhere(self) -> bool:
        """Whether another driver may hold the folder (a local lock file, or a live lease): `lock` says."""
        if self.lock_path is not None:
            return self.lock_path.is_file()
        from pipeline.tracking.lease import Lease

        return Lease(self.location).live() is not None

    def _table_folder(self, name: str) -> str:
        """A table's folder; refuses a file in its place (a folder of the layout before 0.2, or a foreign file).

        Raises:
          ConfigError: naming the file and what to do.
        """
        path = self.location.path(name)
        kind = self.location.kind(path)
        if kind == pa.fs.FileType.File:
            raise ConfigError("tracking.out", self.shown,
                              f"{name} is one file, the layout before results became a dataset: convert the folder "
                              f"with `{MIGRATE_HINT} {self.shown}`, or record into another folder (--out)")
        if kind not in (pa.fs.FileType.NotFound, pa.fs.FileType.Directory):
            raise ConfigError("tracking.out", self.shown, f"{name} is not a folder: {_WHAT_TO_DO}")
        return path

    def _read_parts(self, name: str) -> pd.DataFrame:
        """A table's part files, read; empty if there are none. Read again only when a part was added,
        removed or written since (its listing of names, sizes and times): a grid's start reads the
        runs table three times (checked, then its finished runs before and under the lock), and a
        1,000-run folder takes 1.5 s a read.

        Raises:
          ConfigError: a part that is not a readable Parquet file with the columns it needs, named.
        """
        folder = self._table_folder(name)
        listing = self.location.listing(folder, ".parquet")
        read = self._read.get(name)
        if read is not None and read[0] == listing:
            return read[1]
        try:
            table = read_table(self.location, folder, name)
        except DamagedTable as damaged:
            raise ConfigError("tracking.out", self.shown, f"{name}/{posixpath.basename(damaged.path)} "
                                                          f"{damaged.problem}: {_WHAT_TO_DO}") from None
        self._read[name] = listing, table
        return table

    def check_readable(self) -> None:
        """Refuses, before any work, a folder whose runs table cannot be read whole, whose
        rounds parts have no readable footer (a truncated file), or whose tables are single
        files (the layout before 0.2: `migrate` converts it).

        Raises:
          ConfigError: naming the file, what is wrong, and what to do.
        """
        local = self.location.local
        if local is not None and any((local / name).exists() for name in _migration_leftovers()):
            raise ConfigError("tracking.out", self.shown, f"an interrupted `migrate` left it half converted: run "
                                                          f"`{MIGRATE_HINT} {self.shown}` again first")
        def unreadable(path: str) -> str | None:  # why its footer cannot be read, or None
            try:
                pq.read_metadata(path, filesystem=self.location.filesystem)
            except Exception as err:  # pyarrow raises ArrowInvalid, OSError and more for a damaged file
                return first_line(err)
            return None

        paths = self.location.files(self._table_folder(ROUNDS))
        with ThreadPoolExecutor(READ_THREADS) as pool:  # the footers at once, as read_table's parts
            reasons = list(pool.map(unreadable, paths))
        for path, reason in zip(paths, reasons):
            if reason is not None:
                raise ConfigError("tracking.out", self.shown, f"{ROUNDS}/{posixpath.basename(path)} is damaged and "
                                  f"cannot be read ({reason}): move it aside, and its runs part of the same name "
                                  "(the run is then redone), then rerun")
        self._read_parts(RUNS)

    def finished_runs(self) -> dict[str, str]:
        """The runs recorded as finished: run_id → the MLflow run id of its latest finished attempt.
        An attempt whose rounds part is gone (moved aside) is not finished: the run is redone.

        Raises:
          ConfigError: the runs table cannot be read (see `check_readable`).
        """
        runs = self._read_parts(RUNS)
        if runs.empty:
            return {}
        rounds = {posixpath.basename(path) for path in self.location.files(self._table_folder(ROUNDS))}
        parts = [_part_name(run_id, attempt) for run_id, attempt in zip(runs["run_id"], runs["mlflow_run_id"])]
        done = runs[(runs["status"] == FINISHED) & pd.Series([part in rounds for part in parts], index=runs.index)]
        if "ended_at" in done:
            done = done.sort_values("ended_at", kind="stable")
        return dict(zip(done["run_id"], done["mlflow_run_id"].astype(str)))

    def stage(self, run_id: str, files: dict[str, bytes]) -> None:
        """Writes a run's artifacts to OUT/artifacts/<run_id>/, each file whole; files an
        earlier attempt left there and this one does not write are removed.

        Args:
          run_id: the run.
          files: name → content.
        """
        self.check_held()
        folder = self.location.path(ARTIFACTS, run_id)
        for stale in self.location.files(folder):
            if posixpath.basename(stale) not in files:
                self.location.filesystem.delete_file(stale)
        for name, content in files.items():
            self.location.write(f"{folder}/{name}", content)

    def commit(self, run_row: dict, rounds: pd.DataFrame | ColumnTable, kinds: dict[str, type]) -> None:
        """Records an attempt: its rounds (if any), then its runs row, which marks it ended.

        Args:
          run_row: the attempt's runs row (run_id, mlflow_run_id, status, ...).
          rounds: its rounds rows (empty for a failed attempt).
          kinds: the Python kind of each known column (typed_table).
        """
        self.check_held()
        part = _part_name(run_row["run_id"], run_row["mlflow_run_id"])
        if len(rounds):
            self.location.write_with(self.location.path(ROUNDS, part), lambda stream: write_frame(rounds, stream, kinds))
        self.location.write(self.location.path(RUNS, part), _parquet_bytes(typed_table([run_row], kinds)))


def _migration_leftovers() -> list[str]:
    """What an interrupted `migrate` leaves in a folder: the old tables set aside, the new ones being built."""
    return [f".{name}.{suffix}" for name in (RUNS, ROUNDS) for suffix in ("before-0.2", "migrating")]


def migrate(out: str | Path, kinds: dict[str, type]) -> str:
    """Converts a local results folder of the layout before 0.2 (runs.parquet and
    rounds.parquet as single files, a copy of each run's rounds in runs/<run_id>/)
    into the dataset layout, keeping every row.

    The new tables are built beside the old files, which are swapped out only
    once both are whole; run it again after an interruption: where a table is
    already a dataset folder, the old rows' parts are added to it (named by run
    and attempt, so adding them again changes nothing), never put in its place,
    so no part recorded since is lost. Rounds rows of no finished run are kept
    in artifacts/unplaced-rounds.parquet. `run` refuses a folder a migration left
    half converted.

    Args:
      out: the results folder.
      kinds: the Python kind of each known column (typed_table).

    Returns:
      What was done, in one line.

    Raises:
      ConfigError: not a local results folder, one that cannot be written, or
        tables that cannot be read.
    """
    folder = _local_folder(out)
    old = {name: folder / name for name in (RUNS, ROUNDS)}
    backup = {name: folder / f".{name}.before-0.2" for name in old}  # an interrupted swap left these
    source = {name: old[name] if old[name].is_file() else backup[name] for name in old}
    if not source[RUNS].is_file():
        return f"{folder}: already in the dataset layout, nothing to do"
    try:
        runs = pd.read_parquet(source[RUNS])
        rounds = pd.read_parquet(source[ROUNDS]) if source[ROUNDS].is_file() else pd.DataFrame(columns=["run_id"])
    except Exception as err:
        raise ConfigError("DIR", str(out), f"a table cannot be read ({first_line(err)})") from None
    try:
        unplaced = _migrate_tables(folder, runs, rounds, old, backup, kinds)
    except OSError as err:
        raise ConfigError("DIR", str(out), f"cannot be converted in place ({err.strerror or err}): no row was lost; "
                                           "make it writable (or migrate a copy) and run migrate again") from None
    kept = f"; {unplaced} rounds rows of no finished run kept in {ARTIFACTS}/unplaced-rounds.parquet" if unplaced else ""
    return f"{folder}: {len(runs)} runs and {len(rounds) - unplaced} rounds moved into the dataset layout{kept}"


def _local_folder(out: str | Path) -> Path:
    """The local folder `migrate` converts.

    Raises:
      ConfigError: not a local folder.
    """
    location = open_location(str(out), "DIR")
    folder = location.local
    if folder is None or not folder.is_dir():
        raise ConfigError("DIR", str(out), "must be a local results folder (the old layout was local only)")
    return folder


def _migrate_tables(folder: Path, runs: pd.DataFrame, rounds: pd.DataFrame, old: dict, backup: dict,
                    kinds: dict[str, type]) -> int:
    """Writes the old rows as parts and swaps the tables in (see `migrate`); returns the rounds rows kept aside."""
    import shutil

    # A table already swapped in (a dataset folder) gets the parts directly; the others are built aside.
    target = {name: old[name] if old[name].is_dir() else folder / f".{name}.migrating" for name in old}
    for name, path in target.items():
        if path != old[name]:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
    placed = np.zeros(len(rounds), dtype=bool)
    for row in runs.to_dict("records"):
        attempt = row.get("mlflow_run_id") or f"migrated-{row['run_id']}"  # the oldest tables had no MLflow id
        row = {**row, "mlflow_run_id": attempt}
        part = _part_name(row["run_id"], attempt)
        mine = (rounds["run_id"] == row["run_id"]).to_numpy()
        if row["status"] == FINISHED and mine.any():
            own = rounds[mine].assign(mlflow_run_id=attempt, experiment=row.get("experiment"))
            pq.write_table(typed_table(own.reset_index(drop=True), kinds), target[ROUNDS] / part)
            placed |= mine
        pq.write_table(typed_table([row], kinds), target[RUNS] / part)
    if not placed.all():
        (folder / ARTIFACTS).mkdir(exist_ok=True)
        rounds[~placed].to_parquet(folder / ARTIFACTS / "unplaced-rounds.parquet", index=False)
    legacy = folder / "runs"  # per-run folders: ledger.json and config.yaml move; the rounds copy goes
    for run_folder in sorted(legacy.iterdir()) if legacy.is_dir() else []:
        moved = folder / ARTIFACTS / run_folder.name
        moved.mkdir(parents=True, exist_ok=True)
        for file in run_folder.iterdir():
            if file.name != ROUNDS:
                os.replace(file, moved / file.name)
    for name in old:  # the swap: each old file out of the way, then the new folder in its place
        if target[name] == old[name]:
            continue  # swapped in by an earlier attempt, and holding whatever was recorded since
        if old[name].is_file():
            os.replace(old[name], backup[name])
        os.replace(target[name], old[name])
    shutil.rmtree(legacy, ignore_errors=True)
    for path in backup.values():
        path.unlink(missing_ok=True)
    return int((~placed).sum())
