"""The quickstart end to end: MLflow store, Parquet outputs, resume, ledger CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import image as mpl_image
import pytest
from mlflow.tracking import MlflowClient

from pipeline import cli, results
from pipeline.recording import RUN_FIGURE

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"
RUN_COLUMNS = {"run_id", "mlflow_run_id", "config_hash", "seed", "final_excess_loss", "epsilon", "delta",
               "status", "wall_s", "n_users", "problem.dim", "optimizer.name", "privacy.epsilon"}
ROUND_COLUMNS = {"run_id", "mlflow_run_id", "experiment", "round", "users_in_round", "excess_loss",
                 "population_loss", "epsilon_spent", "delta_spent", "wall_s"}


@pytest.fixture(scope="module")
def quickstart(ray_session, tmp_path_factory, new_mlflow_store):
    """Runs experiments/quickstart.yaml, unchanged but for where it writes."""
    root = tmp_path_factory.mktemp("quickstart")
    uri = new_mlflow_store(root / "mlflow.db")
    args = ["run", str(QUICKSTART), "--out", str(root / "results"), "--set", f"tracking.mlflow_uri={uri}"]
    assert cli.main(args) == 0
    return root, uri, args


def _runs_in(uri):
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("quickstart")
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


def test_quickstart_writes_parquet_with_the_contract_columns(quickstart):
    root, _, _ = quickstart
    runs = pd.read_parquet(root / "results" / "runs.parquet")
    rounds = pd.read_parquet(root / "results" / "rounds.parquet")
    assert RUN_COLUMNS <= set(runs.columns) and ROUND_COLUMNS <= set(rounds.columns)
    assert len(runs) == 8 and set(runs["status"]) == {"finished"}
    assert (runs["epsilon"] <= runs["privacy.epsilon"]).all() and (runs["delta"] <= runs["privacy.delta"]).all()
    per_run = rounds.groupby("run_id")["round"].agg(["count", "max"])
    assert (per_run["count"] == per_run["max"] + 1).all() and set(per_run.index) == set(runs["run_id"])
    final = rounds.sort_values("round").groupby("run_id")["excess_loss"].last()
    assert (final.loc[runs["run_id"]].to_numpy() == runs["final_excess_loss"].to_numpy()).all()
    # Both tables are folders of part files, one per attempt (here one attempt per run); each
    # run's artifacts are in artifacts/<run_id>/ (its rounds are in the rounds table only).
    parts = {f"part-{row.run_id}-{row.mlflow_run_id}.parquet" for row in runs.itertuples()}
    for table in ("runs.parquet", "rounds.parquet"):
        assert {p.name for p in (root / "results" / table).iterdir()} == parts
    assert {p.name for p in (root / "results").iterdir()} == {"runs.parquet", "rounds.parquet", "artifacts", ".lock"}
    assert {p.name for p in (root / "results" / "artifacts").iterdir()} == set(runs["run_id"])
    for run_id in runs["run_id"]:
        folder = root / "results" / "artifacts" / run_id
        assert {p.name for p in folder.iterdir()} == {"ledger.json", "config.yaml"}


def test_quickstart_runs_are_in_mlflow_with_params_metrics_and_artifacts(quickstart):
    _, uri, _ = quickstart
    client, runs = _runs_in(uri)
    assert len(runs) == 8 and {r.info.status for r in runs} == {"FINISHED"}
    sgd = next(r for r in runs if r.data.params["optimizer.name"] == "seq_sgd")
    assert float(sgd.data.params["privacy.epsilon"]) in (1.0, 8.0) and "resolved.batch_size" in sgd.data.params
    history = client.get_metric_history(sgd.info.run_id, "excess_loss")
    steps = [m.step for m in history]
    assert len(steps) > 100 and steps == sorted(steps)
    assert {a.path for a in client.list_artifacts(sgd.info.run_id)} == {"ledger.json", "config.yaml", "rounds.parquet",
                                                                       RUN_FIGURE}
    # Issue 44: each run's own figure (loss and ε by round) is a readable PNG, drawn, not blank.
    figure = mpl_image.imread(client.download_artifacts(sgd.info.run_id, RUN_FIGURE))
    assert figure.shape[:2] == (272, 720) and figure.std() > 0.05  # RGBA in [0, 1]
    ledger = json.loads(Path(client.download_artifacts(sgd.info.run_id, "ledger.json")).read_text())
    mode = sgd.data.params["privacy.accounting"]
    assert ledger["accounting_mode"] == mode and set(ledger["accounting"]) == {"paper", "tight"}
    assert ledger["accounting"][mode]["checks"] == {
        "disjoint_batches": True, "within_target": True, "exact_noise_sampler": True}


def test_rerun_skips_finished_runs_and_redoes_interrupted_ones(quickstart, capsys):
    root, uri, args = quickstart
    assert cli.main(args) == 0
    assert "8 runs: 0 finished, 8 skipped, 0 failed" in capsys.readouterr().out
    # Simulate a driver killed mid-run: its MLflow run left RUNNING, its
    # rounds part written, its runs part (the marker that it ended) not yet.
    runs_path = root / "results" / "runs.parquet"
    runs = pd.read_parquet(runs_path)
    victim = runs.iloc[0]
    (runs_path / f"part-{victim['run_id']}-{victim['mlflow_run_id']}.parquet").unlink()
    client, _ = _runs_in(uri)
    client.update_run(victim["mlflow_run_id"], status="RUNNING")
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "7 runs already finished, skipped" in out and "8 runs: 1 finished, 7 skipped, 0 failed" in out
    assert "ETA" in out
    runs = pd.read_parquet(runs_path)  # every attempt that ended: the killed one never did
    assert len(runs) == 8 and runs["run_id"].is_unique and runs["mlflow_run_id"].is_unique
    assert victim["mlflow_run_id"] not in set(runs["mlflow_run_id"])
    # The killed attempt's rounds part stays (files are never rewritten) but is no run's rounds:
    # the folder's runs and rounds (results.load) are each run's finished attempt, once.
    all_rounds = pd.read_parquet(root / "results" / "rounds.parquet")
    assert not all_rounds.duplicated(["mlflow_run_id", "round"]).any()
    runs, rounds = results.load(root / "results")
    assert len(runs) == 8 and runs["run_id"].is_unique
    assert not rounds.duplicated(["run_id", "round"]).any()
    assert set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])
    _, mlflow_runs = _runs_in(uri)
    assert len(mlflow_runs) == 8  # the interrupted attempt is deleted: one run per (grid point, seed)
    statuses = [r.info.status for r in mlflow_runs if r.data.tags["run_id"] == victim["run_id"]]
    assert statuses == ["FINISHED"]


def test_ledger_command_prints_every_grid_point(capsys):
    assert cli.main(["ledger", str(QUICKSTART)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["runs"]) == 8 and all(p["seeds"] == [0] for p in printed["runs"])
    for point in printed["runs"]:
        mode = point["config"]["privacy.accounting"]
        spent = point["ledger"]["accounting"][mode]
        assert spent["epsilon"] <= point["config"]["privacy.epsilon"] and spent["checks"]["within_target"]
        # Both accountants read every call; the tight one never claims more than the paper's where both apply.
        tight, paper = (point["ledger"]["accounting"][m]["epsilon"] for m in ("tight", "paper"))
        assert paper is None or tight <= paper
        for event in point["ledger"]["events"]:
            assert {"users", "dim", "epsilon", "delta", "g", "b_noise", "p", "analysis_bound",
                    "tight_bound", "calibration"} <= set(event)


def test_report_draws_the_figures_and_logs_them_to_mlflow(quickstart, capsys):
    root, uri, _ = quickstart
    for _ in range(2):  # a second report replaces the first
        assert cli.main(["report", str(root / "results")]) == 0
    folder = root / "results" / "report"
    names = {"excess_vs_round.png", "excess_vs_n.png", "epsilon_vs_round.png", "compare_optimizers.png"}
    assert names | {"slopes.csv"} == {p.name for p in folder.iterdir()}
    for name in names:
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    slopes = pd.read_csv(folder / "slopes.csv")
    # One series per optimizer and accounting mode, each fitted over the grid's two n.
    assert len(slopes) == 4 and (slopes["points"] == 2).all()
    assert np.isfinite(slopes[["measured_slope", "theory_slope"]]).all(axis=None)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("quickstart")
    reports = client.search_runs([experiment.experiment_id], filter_string="tags.pipeline_report = 'true'")
    assert len(reports) == 1
    assert names <= {a.path for a in client.list_artifacts(reports[0].info.run_id)}


def test_report_refuses_a_folder_without_results(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("config error: DIR = ")
