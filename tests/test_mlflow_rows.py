"""Runs written as rows (pipeline/tracking/mlflow_rows.py) read back through MLflow's client exactly
as the same run written by the client's own calls: info, tags, params, latest metrics, every metric
history, searches and orderings, deletion, and MLflow's validation of keys and values."""
from __future__ import annotations

import math
import time

import pytest
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline.tracking.mlflow_rows import RunRows, sql_store
from pipeline.tracking.mlflow_tracker import MlflowTracker

TAGS = {"optimizer": "seq_sgd", "accounting": "tight", "run_id": "abc-s0", "long": "y" * 8001}
# A value past MLflow's length limit, which log_batch's validation cuts (and a tag's, which create_run keeps).
PARAMS = {"n_users": "1000", "privacy.epsilon": "2.0", "optimizer.name": "seq_sgd", "empty": "", "long": "x" * 6001}
NOW = 1_790_000_000_000
# Steps out of order, a step logged twice at different times, an exact duplicate (MLflow keeps one),
# a NaN and infinities (stored as flags and the largest floats), a key whose latest value is at a
# smaller timestamp than an earlier step's.
METRICS = [Metric("excess_loss", 0.5, NOW, 2), Metric("excess_loss", 0.9, NOW, 0), Metric("excess_loss", 0.7, NOW, 1),
           Metric("excess_loss", 0.4, NOW + 5, 2), Metric("excess_loss", 0.4, NOW + 5, 2),
           Metric("epsilon_spent", math.nan, NOW, 0), Metric("epsilon_spent", math.inf, NOW, 1),
           Metric("epsilon_spent", -math.inf, NOW, 2), Metric("wall_s", 3.0, NOW + 9, 0), Metric("wall_s", 1.0, NOW, 4),
           Metric("same_step", 2.0, NOW, 3), Metric("same_step", 1.0, NOW, 3)]


@pytest.fixture
def store(tmp_path, new_mlflow_store):
    """A new SQLite store's client, an experiment and the rows writer on it."""
    client = MlflowClient(tracking_uri=new_mlflow_store(tmp_path / "mlflow.db"))
    experiment = client.create_experiment("rows", artifact_location=(tmp_path / "art").as_uri())
    location = client.get_experiment(experiment).artifact_location
    return client, experiment, RunRows(sql_store(client), experiment, location)


def _by_client(client: MlflowClient, experiment: str, status: str) -> str:
    run_id = client.create_run(experiment, run_name="same", tags=TAGS).info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in PARAMS.items()])
    client.log_batch(run_id, metrics=METRICS)
    client.set_terminated(run_id, status)
    return run_id


def _by_rows(rows: RunRows, status: str, hold: bool = False) -> str:
    run_id = rows.create("same", TAGS, PARAMS, hold=hold)
    rows.log_metrics(run_id, METRICS)
    rows.end(run_id, status, hold)
    rows.flush()
    return run_id


def _seen(client: MlflowClient, run_id: str) -> dict:
    """Everything the client reads of a run, its id and times aside."""
    run = client.get_run(run_id)
    info = {key: getattr(run.info, key) for key in ("experiment_id", "run_name", "status", "lifecycle_stage", "user_id")}
    histories = {key: sorted((m.step, m.timestamp, repr(m.value)) for m in client.get_metric_history(run_id, key))
                 for key in run.data.metrics}
    return {"info": info, "artifact_uri": run.info.artifact_uri.replace(run_id, "<id>"), "tags": run.data.tags,
            "params": run.data.params, "metrics": {k: repr(v) for k, v in run.data.metrics.items()},
            "histories": histories}


@pytest.mark.parametrize("hold", [False, True])
@pytest.mark.parametrize("status", ["FINISHED", "FAILED"])
def test_a_run_written_as_rows_reads_back_as_the_clients_own(store, status, hold):
    client, experiment, rows = store
    began = int(time.time() * 1000)
    theirs, ours = _by_client(client, experiment, status), _by_rows(rows, status, hold)
    assert _seen(client, ours) == _seen(client, theirs)
    seen = _seen(client, ours)
    # The oracle is the client; these pin what it does, so the comparison cannot pass on two empty runs.
    assert seen["metrics"] == {"excess_loss": "0.4", "epsilon_spent": repr(-1.7976931348623157e308), "wall_s": "1.0",
                               "same_step": "2.0"}
    assert [value for *_, value in seen["histories"]["epsilon_spent"]] == ["nan", repr(1.7976931348623157e308),
                                                                            repr(-1.7976931348623157e308)]
    assert len(seen["histories"]["excess_loss"]) == 4 and seen["params"] == {**PARAMS, "long": "x" * 6000}
    assert seen["tags"] == {**TAGS, "mlflow.runName": "same"} and seen["info"]["status"] == status
    info = client.get_run(ours).info
    assert began <= info.start_time <= info.end_time <= int(time.time() * 1000)


def test_searches_and_orderings_see_rows_as_client_runs(store):
    client, experiment, rows = store
    theirs, ours = _by_client(client, experiment, "FINISHED"), _by_rows(rows, "FINISHED")
    for query in ("params.`privacy.epsilon` = '2.0'", "tags.accounting = 'tight'", "metrics.wall_s < 2",
                  "attributes.status = 'FINISHED'", "attributes.run_name = 'same'"):
        assert {run.info.run_id for run in client.search_runs([experiment], query)} == {theirs, ours}, query
    assert client.search_runs([experiment], "metrics.wall_s > 2") == []
    ordered = client.search_runs([experiment], order_by=["metrics.excess_loss DESC", "attributes.start_time ASC"])
    assert [run.info.run_id for run in ordered] == [theirs, ours]
    client.delete_run(ours)
    assert [run.info.run_id for run in client.search_runs([experiment])] == [theirs]


def test_mlflows_validation_refuses_what_it_refuses_from_the_client(store):
    client, experiment, rows = store
    for params, tags in (({"bad/../key": "1"}, {}), ({"": "1"}, {})):
        with pytest.raises(MlflowException):
            rows.create("refused", tags, params)
    running = rows.create("ok", {}, {})
    with pytest.raises(MlflowException):
        rows.log_metrics(running, [Metric("m", "not a number", NOW, 0)])
    assert [run.info.run_name for run in client.search_runs([experiment])] == ["ok"]  # nothing half-written


def test_the_tracker_writes_rows_into_sql_stores_only(tmp_path, new_mlflow_store):
    assert MlflowTracker(new_mlflow_store(tmp_path / "mlflow.db"), "e")._rows is not None
    assert sql_store(MlflowClient(tracking_uri="http://127.0.0.1:9")) is None  # a server: the client's calls


def test_held_rows_wait_for_the_next_transaction_and_keep_their_order(store, monkeypatch):
    """A tiny run is created with its metrics (one transaction), and a held end waits for the next
    transaction or a flush; an end not held is written at once."""
    client, experiment, rows = store
    transactions = []
    begin = rows.store.engine.begin
    monkeypatch.setattr(type(rows.store.engine), "begin", lambda engine: transactions.append(1) or begin())
    first = rows.create("first", {}, {"p": "1"}, hold=True)
    assert client.search_runs([experiment]) == [] and transactions == []
    rows.log_metrics(first, [Metric("m", 1.0, NOW, 0)])
    assert client.get_run(first).info.status == "RUNNING" and len(transactions) == 1
    rows.end(first, "FINISHED", hold=True)
    assert client.get_run(first).info.status == "RUNNING" and len(transactions) == 1  # held
    second = rows.create("second", {}, {}, hold=True)
    rows.log_metrics(second, [Metric("m", 2.0, NOW, 0)])  # writes the first's end with it
    assert client.get_run(first).info.status == "FINISHED" and len(transactions) == 2
    rows.end(second, "FAILED")
    assert client.get_run(second).info.status == "FAILED" and len(transactions) == 3
    third = rows.create("third", {}, {}, hold=True)
    rows.end(third, "FINISHED", hold=True)
    rows.flush()
    assert client.get_run(third).info.status == "FINISHED" and len(transactions) == 4


def test_a_grid_of_tiny_runs_commits_once_a_run(tmp_path, new_mlflow_store, monkeypatch):
    """`python -m pipeline run` of four tiny runs: each run's MLflow rows (its creation, parameters,
    metrics and the previous run's end) in one transaction, the last end at the grid's end; every
    run FINISHED with its metrics."""
    from pipeline import cli

    config = tmp_path / "tiny.yaml"
    config.write_text("experiment: tiny\nproblem: {name: quadratic, dim: 3, radius: 1.0}\nn_users: 1000\n"
                      "optimizer: {name: seq_sgd}\nprivacy: {epsilon: 2.0, delta: 1.0e-6}\nseeds: [0, 1, 2, 3]\n"
                      "execution: {backend: local, shards: 1}\n")
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    transactions = []
    begin = type(sql_store(MlflowClient(tracking_uri=uri)).engine).begin
    monkeypatch.setattr(type(sql_store(MlflowClient(tracking_uri=uri)).engine), "begin",
                        lambda engine: transactions.append(1) or begin(engine))
    assert cli.main(["run", str(config), "--out", str(tmp_path / "out"), "--set", f"tracking.mlflow_uri={uri}"]) == 0
    assert len(transactions) == 4 + 1
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == 4 and all(run.info.status == "FINISHED" and run.data.metrics["epsilon"] > 0 for run in runs)
