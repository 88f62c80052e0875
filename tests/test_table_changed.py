"""A table changed after its run was planned is refused by the shards that read it (issue #29
item 2): the run fails naming the file, instead of reading flipped labels, scaled features, a label
outside the loss's domain, or rows past a shrunk file's end as uninitialised memory."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import cli, runner

ROWS, D = 600, 3


def _write(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    columns = {f"x{k}": features[:, k] for k in range(D)}
    if path.suffix == ".csv":
        pd.DataFrame({**columns, "label": labels}).to_csv(path, index=False)
    else:
        pq.write_table(pa.table({**columns, "label": labels}), path, row_group_size=100)


def _flip(features, labels):
    return features, 1 - labels


def _scale(features, labels):
    return features * 1e6, labels


def _label_7(features, labels):
    labels = labels.copy()
    labels[np.argmax(labels == 1)] = 7
    return features, labels


def _shrink(features, labels):
    return features[:100], labels[:100]


@pytest.mark.parametrize("change", [_flip, _scale, _label_7, _shrink], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_table_changed_after_planning_fails_its_run_naming_the_file(tmp_path, monkeypatch, change, suffix):
    rng = np.random.default_rng(0)
    features, labels = rng.uniform(-0.5, 0.5, (ROWS, D)), rng.integers(0, 2, ROWS)
    source = tmp_path / f"t{suffix}"
    _write(source, features, labels)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "experiment": "changed", "n_users": 500, "problem": {"name": "dataset", "source": str(source), "dim": D,
                                                              "radius": 1.0, "loss": "logistic"},
        "optimizer": {"name": "seq_sgd"}, "privacy": {"epsilon": 4.0, "delta": 1e-6},
        "execution": {"backend": "local", "shards": 2, "block_size": 64},
        "tracking": {"out": str(tmp_path / "out"), "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    execute = runner.engine.execute

    def change_then_execute(job, *args):  # planned and checked; now the file changes under the run
        _write(source, *change(features, labels))
        return execute(job, *args)

    monkeypatch.setattr(runner.engine, "execute", change_then_execute)
    assert cli.main(["run", str(config)]) != 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "failed" and str(source) in row["error"], row["error"]


def test_a_label_outside_the_domain_is_refused_even_with_size_and_time_kept(tmp_path, monkeypatch):
    """A CSV label 1 → 7 keeps the file's size; its modification time is put back: the shard's own
    check of every value it reads still refuses it (it coded 7 as +1 before)."""
    rng = np.random.default_rng(1)
    features, labels = rng.uniform(-0.5, 0.5, (ROWS, D)), rng.integers(0, 2, ROWS)
    source = tmp_path / "t.csv"
    _write(source, features, labels)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "experiment": "changed", "n_users": 500, "problem": {"name": "dataset", "source": str(source), "dim": D,
                                                              "radius": 1.0, "loss": "logistic"},
        "optimizer": {"name": "full_gd", "rounds": 2}, "privacy": {"epsilon": 4.0, "delta": 1e-6},
        "execution": {"backend": "local", "shards": 1, "block_size": 64},
        "tracking": {"out": str(tmp_path / "out"), "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    execute = runner.engine.execute

    def change_then_execute(job, *args):
        before = os.stat(source)
        text = source.read_text().splitlines()
        at = next(i for i, line in enumerate(text[1:], 1) if line.endswith(",1"))
        text[at] = text[at][:-1] + "7"
        source.write_text("\n".join(text) + "\n")
        assert os.stat(source).st_size == before.st_size
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
        return execute(job, *args)

    monkeypatch.setattr(runner.engine, "execute", change_then_execute)
    assert cli.main(["run", str(config)]) != 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "failed" and "labels outside the loss's domain" in row["error"], row["error"]
