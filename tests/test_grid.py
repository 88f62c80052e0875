"""Grids: concurrent runs on Ray match local runs bit for bit, and an
interrupted grid resumes without duplicates."""
from __future__ import annotations

import json
import signal
import textwrap

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from interrupted_grid import GRID  # tests/interrupted_grid.py
from pipeline import cli, config, engine, planning, results, runner


class _refused:
    """A stand-in for the run task: a run in the driver submits none."""

    @staticmethod
    def options(**_):
        raise AssertionError("a task was submitted")


def _config(tmp_path, text=GRID):
    path = tmp_path / "grid.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("placement", ["shard actors", "one task", "the driver"])
def test_concurrent_ray_grid_matches_the_local_backend(ray_session, tmp_path, new_mlflow_store, monkeypatch, capsys,
                                                      placement):
    """The grid's four runs of seed 0 give the local backend's run ids and results, bit for bit,
    on shard actors (twelve Ray processes: a run task and two shard actors each, on two CPUs),
    each in one task (ray_pool.in_one_task), and, as these tiny runs go by default
    (ray_pool.in_driver: a task costs more than their compute), in the driver, with no task."""
    from pipeline.engine import ray_pool

    if placement == "shard actors":
        monkeypatch.setattr(ray_pool, "TASK_WORK", 0)
    monkeypatch.setattr(ray_pool, "DRIVER_WORK", 2**16 if placement == "the driver" else 0)
    monkeypatch.setattr(ray_pool, "_execute", _refused if placement == "the driver" else ray_pool._execute)
    jobs = [planning.plan_run(run).job for run in config.expand(config.read_config(_config(tmp_path), ["seeds=[0]"]))]
    assert all(ray_pool.in_one_task(job) == (placement != "shard actors") for job in jobs)
    assert all(ray_pool.in_driver(job) == (placement == "the driver") for job in jobs)
    path = _config(tmp_path)
    results = {}
    for backend in ("ray", "local"):
        out = tmp_path / backend
        args = ["run", str(path), "--out", str(out), "--set", f"execution.backend={backend}", "--set", "seeds=[0]",
                "--set", f"tracking.mlflow_uri={new_mlflow_store(tmp_path / f'{backend}.db')}"]
        assert cli.main(args) == 0
        said = "4 of 4 runs are tiny and run in this process" in capsys.readouterr().out
        assert said == (backend == "ray" and placement == "the driver")  # the user is told where they ran
        runs = pd.read_parquet(out / "runs.parquet").set_index("run_id").sort_index()
        assert len(runs) == 4 and set(runs["status"]) == {"finished"}
        results[backend] = runs["final_excess_loss"]
    # The run ids do not depend on the backend, and neither do the results.
    assert results["ray"].index.equals(results["local"].index)
    assert (results["ray"].to_numpy() == results["local"].to_numpy()).all()


def test_an_interrupted_grid_resumes_without_duplicates(background):
    """A local grid Ctrl-C'd after its second run (tests/interrupted_grid.py, run in the
    background from the start of the test run) stops with 130 and says how to resume; the
    rerun completes it, with nothing duplicated in Parquet or MLflow."""
    out = background("interrupted_grid").out
    outcome = json.loads((out / "outcome.json").read_text())
    assert outcome["first"]["returncode"] == 130 and "rerun the same command to resume" in outcome["first"]["stderr"]
    partial = pd.read_parquet(out / "partial_runs.parquet")
    assert 2 <= (partial["status"] == "finished").sum() < 12
    assert outcome["rerun"]["returncode"] == 0, outcome["rerun"]["stderr"]
    # Every attempt that ended has its own row: the runs the interrupt stopped (failed) stay as
    # they were, and the rerun adds one finished attempt for each run not finished before.
    attempts = pd.read_parquet(out / "out" / "runs.parquet")
    assert attempts["mlflow_run_id"].is_unique and set(attempts["status"]) <= {"finished", "failed"}
    finished = attempts[attempts["status"] == "finished"]
    assert len(finished) == 12 and finished["run_id"].is_unique
    failed = attempts[attempts["status"] == "failed"]
    assert set(failed["mlflow_run_id"]) == set(partial.loc[partial["status"] == "failed", "mlflow_run_id"])
    assert set(partial.loc[partial["status"] == "finished", "mlflow_run_id"]) <= set(finished["mlflow_run_id"])
    all_rounds = pd.read_parquet(out / "out" / "rounds.parquet")
    assert not all_rounds.duplicated(["mlflow_run_id", "round"]).any()
    assert set(all_rounds["mlflow_run_id"]) <= set(attempts["mlflow_run_id"])  # no attempt left unended
    # The folder's runs: each run's finished attempt, once, and exactly its rounds.
    runs, rounds = results.load(out / "out")
    assert len(runs) == 12 and runs["run_id"].is_unique and set(runs["status"]) == {"finished"}
    assert set(runs["mlflow_run_id"]) == set(finished["mlflow_run_id"])
    assert not rounds.duplicated(["run_id", "round"]).any()
    assert set(rounds["run_id"]) == set(runs["run_id"])
    assert set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("grid")
    mlflow_runs = client.search_runs([experiment.experiment_id], max_results=1000)
    assert len(mlflow_runs) == 12 and {r.info.status for r in mlflow_runs} == {"FINISHED"}
    assert sorted(r.data.tags["run_id"] for r in mlflow_runs) == sorted(runs["run_id"])
    assert {r.info.run_id for r in mlflow_runs} == set(runs["mlflow_run_id"])


def test_an_interrupt_swallowed_during_a_run_still_stops_the_grid(tmp_path, monkeypatch, new_mlflow_store):
    """Python drops a KeyboardInterrupt raised inside a finalizer ("Exception ignored
    in …"); the grid must still stop at the next run boundary, not run to the end."""
    path = _config(tmp_path, GRID.replace("backend: ray", "backend: local"))
    runs = config.expand(config.read_config(path, [f"tracking.out={tmp_path / 'out'}",
                                                   f"tracking.mlflow_uri={new_mlflow_store(tmp_path / 'mlflow.db')}"]))
    execute = engine.execute

    def swallowing(job, backend, shards, progress=None):
        try:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C lands where something ignores it
        except KeyboardInterrupt:
            pass
        return execute(job, backend, shards, progress)

    monkeypatch.setattr(engine, "execute", swallowing)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run_grid(runs, say=lambda line: None)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
    finally:
        signal.signal(signal.SIGINT, previous)
    recorded = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(recorded["status"]) == ["finished"] and len(runs) == 8


def test_an_interrupt_while_a_run_is_recorded_waits_for_the_record_and_leaves_no_run_running(
        tmp_path, monkeypatch, new_mlflow_store):
    """Ctrl-C inside MLflow's log_batch left SQLite's write transaction open: marking the runs
    failed met "database is locked" and they stayed RUNNING. A signal while a run is recorded
    now waits for the record; the grid stops right after it."""
    from mlflow.tracking import MlflowClient

    from pipeline.tracking.mlflow_tracker import MlflowTracker

    store = new_mlflow_store(tmp_path / "mlflow.db")
    path = _config(tmp_path, GRID.replace("backend: ray", "backend: local"))
    runs = config.expand(config.read_config(path, [f"tracking.out={tmp_path / 'out'}", f"tracking.mlflow_uri={store}"]))
    log_metrics = MlflowTracker.log_metrics

    def interrupted_inside(self, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C lands while the run's metrics are written
        return log_metrics(self, *args, **kwargs)

    monkeypatch.setattr(MlflowTracker, "log_metrics", interrupted_inside)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run_grid(runs, say=lambda line: None)
    finally:
        signal.signal(signal.SIGINT, previous)
    recorded = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(recorded["status"]) == ["finished"] and len(runs) == 8
    statuses = [r.info.status for r in MlflowClient(store).search_runs(
        [MlflowClient(store).get_experiment_by_name("grid").experiment_id])]
    assert statuses == ["FINISHED"]


def test_a_rerun_skips_before_it_plans_and_starts_no_backend(tmp_path, new_mlflow_store, monkeypatch, capsys):
    """Issue 43: the finished runs are read from the results folder first and never planned again;
    a grid with nothing left to run starts no executor (no Ray); a new seed plans that run alone."""
    from pipeline import planning

    path = _config(tmp_path)
    args = ["run", str(path), "--out", str(tmp_path / "out"), "--set", "execution.backend=local",
            "--set", "seeds=[0]", "--set", f"tracking.mlflow_uri={new_mlflow_store(tmp_path / 'm.db')}"]
    assert cli.main(args) == 0
    capsys.readouterr()
    planned, real_plan_run = [], planning.plan_run
    monkeypatch.setattr(planning, "plan_run", lambda run: planned.append(run.run_id) or real_plan_run(run))

    def no_executor(*args, **kwargs):
        raise AssertionError("an executor started for a finished grid")

    with monkeypatch.context() as patched:
        patched.setattr(engine, "executor", no_executor)
        assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert planned == [] and "planning" not in out and "4 runs: 0 finished, 4 skipped, 0 failed" in out
    assert cli.main([*args, "--set", "seeds=[0, 1]"]) == 0  # the later --set wins
    assert len(planned) == 4 and all(run_id.endswith("-s1") for run_id in planned)
    assert "8 runs: 4 finished, 4 skipped, 0 failed" in capsys.readouterr().out
