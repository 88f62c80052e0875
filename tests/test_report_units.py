"""`python -m pipeline report` on runs that vary privacy.unit: accuracy against ε for record- and
user-level privacy side by side (one panel each) and accuracy.csv with a row per unit and ε
(pipeline/report.py, `_accuracy_vs_epsilon`). A tiny partitioned table written here: 40 clients
of 5 records each, d = 4, CLDP-SGD with the ℓ∞ randomizer on the local backend."""
from __future__ import annotations

import json
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import cli, report, results

CLIENTS, RECORDS, DIM, TEST_ROWS = 40, 5, 4, 200
EPSILONS = [4.0, 15.0]
SEEDS = [0, 1]


def _table(path, rows: int, rng: np.random.Generator, clients: bool) -> None:
    """Logistic labels of a fixed model; with `clients`, a client column (RECORDS rows each, contiguous)."""
    x = rng.normal(size=(rows, DIM))
    label = (x @ np.array([2.0, -1.0, 0.5, 1.0]) + 0.3 * rng.normal(size=rows) > 0).astype(np.int64)
    columns = {f"x{j}": x[:, j] for j in range(DIM)} | {"label": label}
    if clients:
        columns["client"] = np.repeat(np.arange(rows // RECORDS, dtype=np.int64), RECORDS)
    pq.write_table(pa.table(columns), path)


def _config(tmp_path, uri: str, private: bool) -> str:
    problem = {"name": "dataset", "source": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet"),
               "user_column": "client", "features": "x*", "dim": DIM, "loss": "logistic", "radius": 5.0,
               "rows": "normalize", "feature_bound": 1.0, "evaluations": 2}
    tree = {"experiment": "units", "n_users": CLIENTS, "problem": problem, "seeds": SEEDS,
            "execution": {"backend": "local"}, "tracking": {"mlflow_uri": uri, "out": str(tmp_path / "out")}}
    if private:
        problem["min_records"] = RECORDS
        tree |= {"optimizer": {"name": "cldp_sgd"},
                 "privacy": {"protocol": "girgis_linf", "delta": 1e-5, "accounting": "tight"},
                 "grid": {"privacy.unit": ["record", "user"], "privacy.epsilon": EPSILONS}}
    else:  # the non-private reference: exact sums, user level
        tree |= {"optimizer": {"name": "sgd"}, "privacy": {"protocol": "none", "epsilon": 15.0, "delta": 1e-5}}
    path = tmp_path / ("private.yaml" if private else "nonprivate.yaml")
    path.write_text(yaml.safe_dump(tree))
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, new_mlflow_store):
    """A results folder of both units (2 ε × 2 seeds each) and a non-private run, reported."""
    tmp_path = tmp_path_factory.mktemp("units")
    rng = np.random.default_rng(7)
    _table(tmp_path / "train.parquet", CLIENTS * RECORDS, rng, clients=True)
    _table(tmp_path / "test.parquet", TEST_ROWS, rng, clients=False)
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    for private in (True, False):
        assert cli.main(["run", _config(tmp_path, uri, private)]) == 0
    assert cli.main(["report", str(tmp_path / "out")]) == 0
    return tmp_path / "out"


def test_the_report_draws_both_units_and_writes_their_means(folder):
    assert (folder / "report" / "accuracy_vs_epsilon.png").stat().st_size > 10_000
    table = pd.read_csv(folder / "report" / "accuracy.csv")
    runs, _ = results.load(folder)
    private = table[table["privacy.model"] != "none"]
    assert sorted(private["privacy.unit"]) == ["record"] * len(EPSILONS) + ["user"] * len(EPSILONS)
    assert sorted(set(private["privacy.epsilon"])) == EPSILONS
    for _, row in private.iterrows():
        seeds = runs[(runs["privacy.unit"] == row["privacy.unit"]) & (runs["privacy.epsilon"] == row["privacy.epsilon"])
                     & (runs["optimizer.name"] == "cldp_sgd")]["final_test_accuracy"]
        assert len(seeds) == row["seeds"] == len(SEEDS)
        assert row["accuracy"] == pytest.approx(seeds.mean(), abs=1e-12)
        assert row["spread"] == pytest.approx(seeds.std(), abs=1e-12)
        assert row["epsilon_spent"] <= row["privacy.epsilon"]
    reference = table[table["privacy.model"] == "none"]
    assert list(reference["privacy.unit"]) == ["user"]
    assert reference["accuracy"].iloc[0] == pytest.approx(
        runs[runs["optimizer.name"] == "sgd"]["final_test_accuracy"].mean(), abs=1e-12)


def test_the_local_budget_comes_from_each_runs_ledger(folder):
    """local_epsilon0: one report's stream ε0 summed, from OUT/artifacts/<run_id>/ledger.json;
    at record level the sampling rate is k/(n·m) instead of k/n, so the calibrated budgets differ."""
    table = pd.read_csv(folder / "report" / "accuracy.csv")
    runs, _ = results.load(folder)
    run = runs[(runs["privacy.unit"] == "record") & (runs["privacy.epsilon"] == EPSILONS[-1])].iloc[0]
    ledger = json.loads((folder / "artifacts" / run["run_id"] / "ledger.json").read_text())
    assert ledger["unit"]["name"] == "record" and ledger["events"][0]["records_min"] == RECORDS
    row = table[(table["privacy.unit"] == "record") & (table["privacy.epsilon"] == EPSILONS[-1])].iloc[0]
    assert row["local_epsilon0"] == pytest.approx(sum(ledger["events"][0]["stream_epsilons"]))
    private = table[table["privacy.model"] != "none"].set_index(["privacy.unit", "privacy.epsilon"])
    assert (private["local_epsilon0"] > 0).all()
    assert private.loc[("record", 15.0), "local_epsilon0"] != private.loc[("user", 15.0), "local_epsilon0"]
    assert math.isnan(table[table["privacy.model"] == "none"]["local_epsilon0"].iloc[0])  # exact sums: no ε0


def test_one_panel_per_unit_each_with_the_non_private_line(folder):
    runs, _ = results.load(folder)
    figure, _ = report._accuracy_vs_epsilon(runs)
    try:
        assert [axis.get_title().split(" ")[1] for axis in figure.axes] == ["record", "user"]
        for axis in figure.axes:
            assert sum(line.get_linestyle() == "--" for line in axis.get_lines()) == 1  # the non-private line
    finally:
        plt.close(figure)


def test_a_folder_without_the_unit_column_keeps_one_panel(folder, tmp_path):
    """Folders written before privacy.unit existed (its user-level runs' parts, the column dropped):
    loaded at user level, one panel, as before."""
    import shutil

    import pyarrow.parquet as pq

    old_folder = tmp_path / "old"
    shutil.copytree(folder, old_folder)
    for part in (old_folder / "runs.parquet").glob("*.parquet"):
        table = pq.read_table(part)
        if "record" in table.column("privacy.unit").to_pylist():
            part.unlink()
        else:
            pq.write_table(table.drop_columns(["privacy.unit"]), part)
    runs, _ = results.load(old_folder)
    figure, summary = report._accuracy_vs_epsilon(runs)
    try:
        assert len(figure.axes) == 1 and set(summary["privacy.unit"]) == {"user"}
    finally:
        plt.close(figure)


@pytest.mark.parametrize("source, label", [
    ("data/digits_dirichlet0.1_c100_train.parquet", "dirichlet α=0.1, 100 clients"),
    ("s3://bucket/data/digits_pathological3_c20_train.parquet?endpoint_override=x", "pathological K=3, 20 clients"),
    ("data/breast_cancer_iid_c30_train.parquet", "iid, 30 clients"),
    ("data/digits_train.parquet", "digits_train"),
])
def test_partition_labels_from_make_datasets_file_names(source, label):
    assert report.partition_label(source) == label
