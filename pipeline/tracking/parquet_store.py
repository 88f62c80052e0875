"""The Parquet results folder: OUT/runs.parquet, OUT/rounds.parquet and one
folder of artifacts per run, each written whole or not at all."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from pipeline.errors import ConfigError

FINISHED = "finished"
FAILED = "failed"


def _replace_table(path: Path, table: pd.DataFrame) -> None:
    """Writes a Parquet file through a temporary file and an atomic rename."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
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

    def check_writable(self) -> None:
        """Refuses, before any work, a results folder that cannot be written.

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

    def _read(self, path: Path) -> pd.DataFrame:
        return pd.read_parquet(path) if path.exists() else pd.DataFrame()

    def completed(self) -> set[str]:
        """The run_ids recorded as finished."""
        runs = self._read(self.runs_path)
        if runs.empty:
            return set()
        return set(runs.loc[runs["status"] == FINISHED, "run_id"])

    def stage(self, run_id: str, rounds: pd.DataFrame, files: dict[str, bytes]) -> Path:
        """Writes a run's artifact folder OUT/runs/<run_id>/ whole or not at all.

        Args:
          run_id: the run.
          rounds: the run's rounds, written as its own rounds.parquet.
          files: other artifacts, name → content.

        Returns:
          The folder.
        """
        folder = self.out / "runs" / run_id
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{run_id}."))
        for name, content in files.items():
            (staging / name).write_bytes(content)
        rounds.to_parquet(staging / "rounds.parquet", index=False)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
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
