"""The MLflow layout: experiment kind, distinct run names, tags, metric history equal to rounds.parquet."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from pipeline import cli, config
from pipeline.tracking.mlflow_tracker import EXPERIMENT_KIND_TAG, MODEL_TRAINING, MlflowTracker

# Two grid points that differ only in the accounting mode; 300 rounds, so every round is logged.
TINY = """\
experiment: layout
problem: {name: quadratic, dim: 3, radius: 1.0}
n_users: 20000
optimizer: {name: seq_sgd, rounds: 300}
privacy: {model: shuffle, protocol: cjmp_vec, epsilon: 8.0, delta: 1.0e-6}
seeds: [0]
grid:
  privacy.accounting: [paper, tight]
execution: {backend: local, shards: 1, simulation: exact}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, new_mlflow_store):
    """Runs the tiny grid once; returns its MLflow client, experiment, runs and Parquet tables."""
    root = tmp_path_factory.mktemp("layout")
    path = root / "tiny.yaml"
    path.write_text(TINY)
    uri = new_mlflow_store(root / "mlflow.db")
    assert cli.main(["run", str(path), "--out", str(root / "results"), "--set", f"tracking.mlflow_uri={uri}"]) == 0
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("layout")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    return (client, experiment, runs, pd.read_parquet(root / "results" / "runs.parquet"),
            pd.read_parquet(root / "results" / "rounds.parquet"))


def test_metric_history_equals_rounds_parquet_step_for_step(tiny):
    client, _, runs, table, rounds = tiny
    assert len(runs) == 2
    for run in runs:
        run_id = table.loc[table["mlflow_run_id"] == run.info.run_id, "run_id"].item()
        mine = rounds[rounds["run_id"] == run_id].sort_values("round")
        # Each rounds row names its attempt: the rounds of a run are its MLflow run's.
        assert (mine["mlflow_run_id"] == run.info.run_id).all() and (mine["experiment"] == "layout").all()
        assert len(mine) < 500 and mine["round"].iloc[0] == 0
        for column in ("excess_loss", "epsilon_spent"):
            history = sorted(client.get_metric_history(run.info.run_id, column), key=lambda m: m.step)
            assert [m.step for m in history] == mine["round"].tolist(), column
            assert [m.value for m in history] == mine[column].astype(float).tolist(), column


def test_final_metrics_equal_the_runs_parquet_row(tiny):
    """The run's final metrics (logged in its rounds' batch) are its runs.parquet row's."""
    _, _, runs, table, _ = tiny
    for run in runs:
        row = table.loc[table["mlflow_run_id"] == run.info.run_id].iloc[0]
        for key in ("final_excess_loss", "epsilon", "delta", "wall_s", "theory_rate", "nonprivate_rate"):
            assert run.data.metrics[key] == float(row[key]), key


def test_run_names_are_distinct_when_points_differ_only_in_accounting(tiny):
    _, _, runs, _, _ = tiny
    names = {run.info.run_name for run in runs}
    assert names == {"seq_sgd-paper-n20000-eps8-s0", "seq_sgd-tight-n20000-eps8-s0"}


def test_runs_are_tagged_for_group_by_and_filters(tiny):
    client, experiment, runs, _, _ = tiny
    for run in runs:
        tags = run.data.tags
        assert tags["optimizer"] == "seq_sgd" and tags["protocol"] == "cjmp_vec"
        assert tags["privacy_model"] == "shuffle" and tags["accounting"] == run.data.params["privacy.accounting"]
    tight = client.search_runs([experiment.experiment_id], filter_string="tags.accounting = 'tight'")
    assert [r.info.run_name for r in tight] == ["seq_sgd-tight-n20000-eps8-s0"]


def test_experiment_is_a_model_training_experiment(tiny):
    _, experiment, _, _, _ = tiny
    assert experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING == "custom_model_development"


def test_an_existing_experiment_gets_the_kind_unless_the_user_chose_one(tmp_path, new_mlflow_store):
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    bare = client.create_experiment("bare")
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    MlflowTracker(uri, "bare")
    MlflowTracker(uri, "chosen")
    assert client.get_experiment(bare).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_varying_keys_stay_out_of_the_hash_params_and_columns():
    tree = {"experiment": "e", "n_users": 1000, "grid": {"privacy.accounting": ["paper", "tight"],
                                                         "problem.dim": [2], "problem.radius": [0.5, 2.0]}}
    runs = config.expand(tree)
    assert runs[0].varying == ("privacy.accounting", "problem.radius")  # problem.dim has one value
    bare = dataclasses.replace(runs[0], varying=())
    assert bare.config_hash == runs[0].config_hash and bare.flat() == runs[0].flat() and bare == runs[0]
    assert "varying" not in runs[0].flat() and "varying" not in runs[0].nested()
    assert [r.display_name() for r in runs] == [
        "seq_sgd-paper-R0.5-n1000-eps1-s0", "seq_sgd-paper-R2-n1000-eps1-s0",
        "seq_sgd-tight-R0.5-n1000-eps1-s0", "seq_sgd-tight-R2-n1000-eps1-s0"]


def test_long_names_are_bounded_and_stay_distinct():
    long = ["x" * 150 + "a", "x" * 150 + "b"]
    runs = [config.RunConfig({"optimizer.name": "seq_sgd", "n_users": 10, "privacy.epsilon": 1.0,
                              "problem.name": name}, 3, ("problem.name",)) for name in long]
    names = [r.display_name() for r in runs]
    assert all(len(n) <= config.NAME_LIMIT for n in names) and len(set(names)) == 2
    assert all(n.startswith("seq_sgd-xxx") and n.endswith("-n10-eps1-s3") for n in names)


def test_runs_ended_on_a_tracking_server_print_no_genai_links(tmp_path, new_mlflow_store, monkeypatch, capsys):
    """Issue 44: MLflow printed "View run … / View experiment …" after every run ended on a server
    (RestStore), links that open its GenAI view; the tracker turns them off
    (MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT) unless the user chose otherwise."""
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.tracking._tracking_service.client import TrackingServiceClient

    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    MlflowTracker(new_mlflow_store(tmp_path / "m.db"), "links")
    server = RestStore(lambda: None)

    def printing(*args, **kwargs):
        raise AssertionError("MLflow went on to look up the run to print its links")

    monkeypatch.setattr(server, "get_run", printing)
    monkeypatch.setattr(TrackingServiceClient, "store", property(lambda self: server))
    TrackingServiceClient("http://127.0.0.1:1")._log_url("a-run")  # what set_terminated calls
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("mode, limit, drawn", [("auto", 100, True), ("auto", 1, False), ("none", 100, False),
                                                ("all", 1, True)])
def test_each_run_gets_its_figure_unless_the_grid_is_large_or_it_is_turned_off(tmp_path, new_mlflow_store, monkeypatch,
                                                                                 mode, limit, drawn):
    """Issue 44 item 4: a run's page in MLflow shows its own loss and ε curve; `tracking.run_plots`
    turns it off, and `auto` leaves it out of grids of more than AUTO_PLOTS runs (0.1 s a figure)."""
    from pipeline import run_plot
    from pipeline.recording import RUN_FIGURE

    monkeypatch.setattr(run_plot, "AUTO_PLOTS", limit)
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    assert cli.main(["run", str(path), "--out", str(tmp_path / "results"), "--set", f"tracking.mlflow_uri={uri}",
                     "--set", f"tracking.run_plots={mode}"]) == 0
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("layout").experiment_id])
    assert len(runs) == 2
    for run in runs:
        assert (RUN_FIGURE in {a.path for a in client.list_artifacts(run.info.run_id)}) == drawn


@pytest.mark.parametrize("excess_loss, epsilon_spent", [
    ([np.nan, 0.2, np.nan, 0.05], [1.0] * 4),  # a dataset's run: measured at some rounds only
    ([0.3, 0.2, 0.1, 0.05], [np.inf] * 4),  # a non-private run
    ([0.0] * 4, [0.5, 0.5, 1.0, 1.0]),  # nothing positive to draw on a log scale
], ids=["unmeasured-rounds", "non-private", "zero-loss"])
def test_a_runs_figure_is_drawn_for_runs_with_nothing_to_log_scale(excess_loss, epsilon_spent):
    """The figures that failed whole golden runs when first written ("cannot be log-scaled")."""
    from pipeline.run_plot import run_figure

    png = run_figure("run", np.arange(4), np.array(excess_loss), np.array(epsilon_spent),
                     {"theory_rate": 0.1, "nonprivate_rate": np.nan}, 1.0)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


@pytest.mark.parametrize("page", [10_000, 2], ids=["one page", "pages of 2"])
@pytest.mark.parametrize("folder", ["/a", "/it's a", '/a "b"', "/a's \"b\""])
def test_a_new_attempt_deletes_the_runs_earlier_attempts_in_its_folder_only(tmp_path, new_mlflow_store, monkeypatch,
                                                                            page, folder):
    """Issue 43: a grid reads the earlier attempts once (one paged search of its folder's runs), not
    once a run. It deletes every earlier attempt of a run recorded for the same folder, on any page,
    and none recorded for another folder sharing the experiment (one that differs by a character
    too), nor another run's; whatever quote marks the folder holds."""
    from pipeline.tracking import mlflow_tracker

    monkeypatch.setattr(mlflow_tracker, "SEARCH_PAGE", page)
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    first = MlflowTracker(uri, "attempts")
    earlier = [first.start("r1", "r1", {}, folder) for _ in range(3)]  # three attempts a killed grid left
    other_folder = first.start("r1", "r1", {}, "/b")
    near_folder = first.start("r1", "r1", {}, folder + "x")
    other_run = first.start("r2", "r2", {}, folder)
    again = MlflowTracker(uri, "attempts")  # the next grid into the folder
    latest = again.start("r1", "r1", {}, folder)
    client = MlflowClient(tracking_uri=uri)
    active = {run.info.run_id for run in client.search_runs([again.experiment_id], max_results=100)}
    assert active == {other_folder, near_folder, other_run, latest}
    assert {client.get_run(run_id).info.lifecycle_stage for run_id in earlier} == {"deleted"}


@pytest.mark.parametrize("location", ["local", "elsewhere"])
def test_artifacts_land_where_mlflow_reads_them(tmp_path, new_mlflow_store, location):
    """A run's artifacts written straight into a local artifact folder (no temporary copy) are the
    ones MLflow lists and downloads; an experiment whose artifacts live elsewhere (any location
    that is not a local file URI) is uploaded through MLflow as before."""
    from pipeline.tracking import mlflow_tracker
    from pipeline.tracking.column_table import ColumnTable

    uri = new_mlflow_store(tmp_path / "mlflow.db")
    tracker = MlflowTracker(uri, "artifacts")
    if location == "elsewhere":  # as a tracking server's mlflow-artifacts:/ location would be: never written to directly
        assert mlflow_tracker._local_folder("mlflow-artifacts:/1") is None
        assert mlflow_tracker._local_folder("s3://bucket/mlruns") is None
        tracker._artifact_root = None
    else:
        assert tracker._artifact_root is not None
    run_id = tracker.start("run-a", "a", {"n": 3}, folder=str(tmp_path / "out"))
    rounds = ColumnTable({"run_id": "run-a", "round": np.arange(1, 4), "excess_loss": np.array([0.5, 0.25, 0.125])})
    tracker.finish(run_id, {"ledger.json": b'{"a": 1}', "config.yaml": b"n: 3\n"}, rounds, "FINISHED")
    client = MlflowClient(tracking_uri=uri)
    assert {a.path for a in client.list_artifacts(run_id)} == {"ledger.json", "config.yaml", "rounds.parquet"}
    (tmp_path / "d").mkdir()
    assert open(client.download_artifacts(run_id, "ledger.json", str(tmp_path / "d")), "rb").read() == b'{"a": 1}'
    logged = pd.read_parquet(client.download_artifacts(run_id, "rounds.parquet", str(tmp_path / "d")))
    assert logged["excess_loss"].tolist() == [0.5, 0.25, 0.125] and set(logged["run_id"]) == {"run-a"}
    assert client.get_run(run_id).info.status == "FINISHED"
