"""A run's rounds table is written ROW_GROUP rows at a time (a 10⁹-user run has 2·10⁷ rounds,
which as one Arrow table took about 140 bytes a round more at the peak): the same rows, types
and schema as one table, and a write that fails leaves no file on a local folder or a store."""
from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import cli
from pipeline.tracking import parquet_store
from pipeline.tracking.column_table import ColumnTable
from pipeline.tracking.location import Location
from pipeline.tracking.parquet_store import typed_table, write_frame


def _frame(rows: int) -> pd.DataFrame:
    return pd.DataFrame({"run_id": "a-run", "round": np.arange(rows), "excess_loss": np.linspace(0, 1, rows),
                         "users_in_round": np.full(rows, 51.0)})


@pytest.mark.parametrize("rows", [0, 1, 3, 10])
def test_slices_write_the_rows_types_and_schema_of_one_table(monkeypatch, rows):
    monkeypatch.setattr(parquet_store, "ROW_GROUP", 3)
    kinds = {"round": int, "users_in_round": int, "run_id": str}
    sliced, whole = io.BytesIO(), io.BytesIO()
    write_frame(_frame(rows), sliced, kinds)
    pq.write_table(typed_table(_frame(rows), kinds), whole)
    file = pq.ParquetFile(io.BytesIO(sliced.getvalue()))
    assert file.metadata.num_row_groups == max(1, -(-rows // 3))
    assert file.schema_arrow.equals(pq.ParquetFile(io.BytesIO(whole.getvalue())).schema_arrow, check_metadata=True)
    got, expected = (pd.read_parquet(io.BytesIO(buffer.getvalue())) for buffer in (sliced, whole))
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert str(got["users_in_round"].dtype) == "int64"


@pytest.mark.parametrize("rows", [0, 1, 3, 10])
def test_a_column_table_writes_the_file_of_the_frame_it_stands_for(monkeypatch, rows):
    """A run's rounds table is columns and constants (never a whole DataFrame): its file must be
    the one its rows written out as a DataFrame give, byte for byte, pandas' metadata included."""
    monkeypatch.setattr(parquet_store, "ROW_GROUP", 3)
    kinds = {"round": int, "users_in_round": int, "run_id": str, "test_loss": float}
    table = ColumnTable({"run_id": "a-run", "round": np.arange(rows), "excess_loss": np.linspace(0, 1, rows),
                         "users_in_round": np.full(rows, 51.0), "test_loss": math.nan})
    frame = pd.DataFrame({"run_id": pd.array(["a-run"] * rows, dtype="str"), "round": np.arange(rows),
                          "excess_loss": np.linspace(0, 1, rows), "users_in_round": np.full(rows, 51.0),
                          "test_loss": np.full(rows, math.nan)})
    from_table, from_frame = io.BytesIO(), io.BytesIO()
    write_frame(table, from_table, kinds)
    write_frame(frame, from_frame, kinds)
    assert from_table.getvalue() == from_frame.getvalue()
    assert len(table) == rows and table.names == list(frame.columns)
    picked = table.take([rows - 1] if rows else [])
    assert picked.column("round").tolist() == frame["round"].tolist()[-1:] and picked.column("run_id").tolist() == (
        ["a-run"] if rows else [])


def test_a_column_table_refuses_columns_of_different_lengths():
    with pytest.raises(ValueError, match=r"lengths \[2, 3\]"):
        ColumnTable({"round": np.arange(3), "excess_loss": np.zeros(2)})
    with pytest.raises(ValueError, match=r"lengths \[\]"):
        ColumnTable({"run_id": "a-run"})


def test_a_run_writes_its_rounds_in_row_groups_through_the_cli(tmp_path, monkeypatch, new_mlflow_store):
    monkeypatch.setattr(parquet_store, "ROW_GROUP", 7)
    tree = {"experiment": "groups", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 1000,
            "optimizer": {"name": "seq_sgd", "batch_size": 20}, "privacy": {"epsilon": 2.0, "delta": 1e-5},
            "execution": {"backend": "local"},
            "tracking": {"mlflow_uri": new_mlflow_store(tmp_path / "mlflow.db"), "out": str(tmp_path / "out")}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tree))
    assert cli.main(["run", str(tmp_path / "c.yaml")]) == 0
    (part,) = (tmp_path / "out" / "rounds.parquet").iterdir()
    assert pq.ParquetFile(part).metadata.num_row_groups == 50 // 7 + 1
    rounds = pd.read_parquet(part)
    assert rounds["round"].tolist() == list(range(50)) and (rounds["users_in_round"] == 20).all()


class _Broken(Exception):
    pass


def _failing_fill(stream) -> None:
    stream.write(b"PAR1 half a file")
    raise _Broken


@pytest.mark.parametrize("store", ["local", "object store"])
def test_a_write_that_fails_midway_leaves_nothing(tmp_path, store):
    if store == "local":
        location = Location(str(tmp_path), pafs.LocalFileSystem(), str(tmp_path))
    else:
        location = Location("mock://", pafs._MockFileSystem(), "bucket")
    with pytest.raises(_Broken):
        location.write_with(location.path("rounds.parquet", "part.parquet"), _failing_fill)
    left = location.filesystem.get_file_info(pafs.FileSelector(location.root, recursive=True, allow_not_found=True))
    assert [info.path for info in left if info.type == pafs.FileType.File] == []
