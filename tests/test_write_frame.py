"""A run's rounds table is written ROW_GROUP rows at a time (a 10⁹-user run has 2·10⁷ rounds,
which as one Arrow table took about 140 bytes a round more at the peak): the same rows, types
and schema as one table, and a write that fails leaves no file on a local folder or a store."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import cli
from pipeline.tracking import parquet_store
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
