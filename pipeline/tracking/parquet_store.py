"""The Parquet results folder: OUT/runs.parquet, OUT/rounds.parquet and one
folder of artifacts per run, each written whole or not at all."""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from pipeline.errors import ConfigError

FINISHED = "finished"
FAILED = "failed"
# The lock file that one run holds on its results folder (left in place: deleting it would race).
LOCK_NAME = ".lock"
# Columns without which a table cannot say which runs are done.
REQUIRED_COLUMNS = {"runs.parquet": ("run_id", "status"), "rounds.parquet": ("run_id",)}
_WHAT_TO_DO = ("move it aside (the runs it recorded are then redone), or delete the folder to redo all; "
               "then rerun")


def _temporary(folder: Path, name: str) -> Path:
    """A fresh file in `folder`, created with the mode the umask allows (0666 & ~umask):
    mkstemp's owner-only 0600 would lock a teammate's notebook out of a shared folder."""
    while True:
        path = folder / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return path
        except FileExistsError:
            continue


def _replace_table(path: Path, table: pd.DataFrame) -> None:
    """Writes a Parquet file through a temporary file and an atomic rename."""
    temporary = _temporary(path.parent, path.name)
    try:
        table.to_parquet(temporary, index=False)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


class ParquetStore:
    """One results folder; the only writer of its files.

    Args:
      out: the folder (created on first commit).
    """

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.runs_path = self.out / "runs.parquet"
        self.rounds_path = self.out / "rounds.parquet"
        self.lock_path = self.out / LOCK_NAME
        self._lock = None

    def check_writable(self) -> None:
        """Refuses, before any work, a results folder that cannot be written.

        A folder that does not exist yet is probed by creating and removing
        an empty folder in its nearest existing ancestor: permission bits
        alone pass /proc, or a read-only mount, for root.

        Raises:
          ConfigError: the folder, or its nearest existing ancestor, is not a
            writable directory.
        """
        existing = self.out
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError("tracking.out", str(self.out), f"cannot be created: {existing} is not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError("tracking.out", str(self.out), f"is not writable ({existing} denies writing)")
        if existing == self.out:  # it exists: `lock`, its first write, reports what the bits hide
            return
        try:
            os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".probe."))
        except OSError as err:
            raise ConfigError("tracking.out", str(self.out),
                              f"is not writable: a folder cannot be made in {existing} "
                              f"({err.strerror or err})") from None

    def lock(self) -> None:
        """Takes this folder's lock for this process, creating the folder; kept until `unlock`.

        Two processes recording into one folder would interleave their
        rewrites of runs.parquet and lose rows: the second is refused at once.

        Raises:
          ConfigError: another process holds the folder, or the folder cannot
            be written.
        """
        from filelock import FileLock, Timeout  # a well-kept lock (flock on POSIX), loaded where it is needed

        if self._lock is not None:  # held already: a second flock of ours would refuse ourselves
            return
        lock = FileLock(self.lock_path, timeout=0)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except Timeout:
            if not self.lock_path.exists():  # filelock times out on a file it cannot make, too (/proc)
                raise ConfigError("tracking.out", str(self.out),
                                  f"is not writable: the lock file {self.lock_path} cannot be made") from None
            raise ConfigError("tracking.out", str(self.out),
                              f"another run holds this results folder (lock {self.lock_path}); wait for it "
                              "to end, or record into another folder (--out)") from None
        except OSError as err:
            raise ConfigError("tracking.out", str(self.out),
                              f"is not writable: its lock file cannot be made ({err.strerror or err})") from None
        self._lock = lock

    def unlock(self) -> None:
        """Releases the lock taken by `lock` (nothing if none)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def check_readable(self) -> None:
        """Refuses, before any work, a folder whose tables cannot be read whole.

        A truncated or overwritten Parquet file fails to open (its footer is
        gone); skipping or extending it would lose the runs it recorded.

        Raises:
          ConfigError: naming the file, what is wrong, and what to do.
        """
        for path in (self.runs_path, self.rounds_path):
            self._read(path)

    def _read(self, path: Path) -> pd.DataFrame:
        """A table of the folder, read whole; empty if it does not exist yet.

        Raises:
          ConfigError: the file is not a readable Parquet file with the columns it needs.
        """
        if not path.exists():
            return pd.DataFrame()
        if not path.is_file():
            raise ConfigError("tracking.out", str(self.out), f"{path.name} is not a file but a "
                              f"{'folder' if path.is_dir() else 'special file'}: {_WHAT_TO_DO}")
        try:
            table = pd.read_parquet(path)
        except Exception as err:  # pyarrow raises ArrowInvalid, OSError and more for a damaged file
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError("tracking.out", str(self.out),
                              f"{path.name} is damaged and cannot be read ({reason}): {_WHAT_TO_DO}") from None
        missing = [column for column in REQUIRED_COLUMNS[path.name] if column not in table.columns]
        if missing and len(table.columns):
            raise ConfigError("tracking.out", str(self.out),
                              f"{path.name} lacks the column(s) {', '.join(missing)}, so it is not this pipeline's "
                              f"table: {_WHAT_TO_DO}")
        return table

    def finished_runs(self) -> dict[str, str]:
        """The runs recorded as finished: run_id → mlflow_run_id.

        Raises:
          ConfigError: runs.parquet cannot be read (see `check_readable`).
        """
        runs = self._read(self.runs_path)
        if runs.empty:
            return {}
        done = runs[runs["status"] == FINISHED]
        ids = done["mlflow_run_id"] if "mlflow_run_id" in done else pd.Series("", index=done.index)
        return dict(zip(done["run_id"], ids.astype(str)))

    def completed(self) -> set[str]:
        """The run_ids recorded as finished."""
        return set(self.finished_runs())

    def stage(self, run_id: str, rounds: pd.DataFrame | None, files: dict[str, bytes]) -> Path:
        """Writes a run's artifact folder OUT/runs/<run_id>/ whole or not at all.

        Args:
          run_id: the run.
          rounds: the run's rounds, written as its own rounds.parquet (None: a
            failed run, which has none).
          files: other artifacts, name → content.

        Returns:
          The folder.
        """
        folder = self.out / "runs" / run_id
        folder.parent.mkdir(parents=True, exist_ok=True)
        # The umask applies to mkdir's 0777, unlike mkdtemp's 0700; the folder's lock rules out a rival writer.
        staging = folder.parent / f".{run_id}.{secrets.token_hex(6)}.tmp"
        staging.mkdir(0o777)
        try:
            for name, content in files.items():
                (staging / name).write_bytes(content)
            if rounds is not None:
                rounds.to_parquet(staging / "rounds.parquet", index=False)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(staging, folder)
        finally:  # a full disk must not leave half a staging folder behind
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return folder

    def commit(self, run_row: dict, rounds: pd.DataFrame) -> None:
        """Records a run in rounds.parquet, then in runs.parquet.

        The row in runs.parquet is written last and is what marks the run
        done; an earlier crash leaves the run to be redone, and the rows it
        left are replaced, never duplicated.

        Args:
          run_row: the run's runs.parquet row (must hold run_id and status).
          rounds: the run's rounds.parquet rows (may be empty).
        """
        self.out.mkdir(parents=True, exist_ok=True)
        run_id = run_row["run_id"]
        for path, rows in ((self.rounds_path, rounds), (self.runs_path, pd.DataFrame([run_row]))):
            table = self._read(path)
            kept = table[table["run_id"] != run_id] if not table.empty else table
            if rows.empty and len(kept) == len(table):
                continue
            parts = [part for part in (kept, rows) if not part.empty]
            _replace_table(path, pd.concat(parts, ignore_index=True) if parts else kept)
