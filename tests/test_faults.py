"""Faults found in use: a new SQLite MLflow store that a killed driver left
half-migrated (every later run refused it), a run that joined whatever Ray
cluster `ray start` had left on the machine, and `ledger | head -1` ending in
a BrokenPipeError traceback."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from pipeline import cli, engine
from pipeline.engine import ray_pool
from pipeline.tracking.mlflow_tracker import PARTIAL_INFIX, STALE_PARTIAL_S, MlflowTracker, create_sqlite_store

ROOT = Path(__file__).resolve().parents[1]
# A child creating a new store is killed when its file reaches these fractions of a whole
# store's size (~930 kB with MLflow 3.17): moments deep in the migrations, where a kill
# left a store that no later run could open before the fix.
KILL_AT_FRACTIONS = (0.45, 0.6, 0.9)
# Creates a new store in a child process: argv[1] is its URI.
CREATE_STORE = "import sys; from pipeline.tracking import MlflowTracker; MlflowTracker(sys.argv[1], 'faults')"


def _debris(folder: Path) -> list[str]:
    """The names of the partial stores (and their journals) in a folder."""
    return sorted(path.name for path in folder.iterdir() if PARTIAL_INFIX in path.name)


def _aged(path: Path, seconds: float) -> Path:
    """Writes a file last modified `seconds` ago."""
    path.write_bytes(b"half a store")
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


# --- 1. A new SQLite MLflow store is created atomically -------------------------------------


def test_a_new_sqlite_store_is_whole_usable_and_clears_stale_partials(tmp_path):
    folder = tmp_path / "new"
    folder.mkdir()
    database = folder / "mlflow.db"
    stale = _aged(folder / f"mlflow.db{PARTIAL_INFIX}dead01", STALE_PARTIAL_S + 60)
    _aged(folder / f"{stale.name}-journal", STALE_PARTIAL_S + 60)
    young = _aged(folder / f"mlflow.db{PARTIAL_INFIX}alive1", 5)  # perhaps another process's, creating

    tracker = MlflowTracker(f"sqlite:///{database}", "faults")
    mlflow_run_id = tracker.start("run-1", "first", {"n_users": 40}, folder="out")
    tracker.end(mlflow_run_id, "FINISHED")

    found = MlflowClient(tracking_uri=f"sqlite:///{database}").get_run(mlflow_run_id)
    assert found.info.status == "FINISHED" and found.data.params == {"n_users": "40"}
    assert _debris(folder) == [young.name]  # its own partial and the stale ones are gone

    # A kill between the link and the clean-up leaves a second name of the store: removed on the next open.
    os.link(database, folder / f"mlflow.db{PARTIAL_INFIX}linked")
    MlflowTracker(f"sqlite:///{database}", "faults")
    assert _debris(folder) == [young.name]
    assert MlflowClient(tracking_uri=f"sqlite:///{database}").get_run(mlflow_run_id).info.status == "FINISHED"


def test_a_store_another_process_created_meanwhile_is_kept(tmp_path, new_mlflow_store):
    database = tmp_path / "mlflow.db"
    uri = new_mlflow_store(database)
    theirs = MlflowClient(tracking_uri=uri).create_experiment("theirs")
    before = database.read_bytes()

    create_sqlite_store(database)  # as if it lost the race: its store is built, then not linked

    assert database.read_bytes() == before
    assert MlflowClient(tracking_uri=uri).get_experiment(theirs).name == "theirs"
    assert _debris(tmp_path) == []


def _store_bytes(folder: Path) -> int:
    """The size of the largest store file (target or partial, not a journal) in a folder."""
    sizes = []
    for path in folder.iterdir():
        try:
            sizes.append(0 if path.name.endswith("-journal") else path.stat().st_size)
        except FileNotFoundError:
            pass  # a partial renamed or cleaned meanwhile
    return max(sizes, default=0)


def test_a_store_creation_killed_at_any_moment_leaves_no_store_or_a_whole_one(tmp_path, new_mlflow_store):
    # Before the fix a kill in the migrations left a store every later open refused:
    # "cannot open the MLflow store ((sqlite3.OperationalError) table secrets already exists)".
    # Each child is killed when its file has grown to a fraction of a whole store: a moment in
    # the migrations whatever the machine's load (a delay would miss them on a slow machine).
    new_mlflow_store(tmp_path / "whole.db")
    whole = (tmp_path / "whole.db").stat().st_size
    folders = [tmp_path / f"killed_at_{fraction:.0%}" for fraction in KILL_AT_FRACTIONS]
    children = []
    for folder in folders:
        folder.mkdir()
        children.append(subprocess.Popen([sys.executable, "-c", CREATE_STORE, f"sqlite:///{folder / 'mlflow.db'}"],
                                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 90
    while any(child.poll() is None for child in children):
        assert time.monotonic() < deadline, "the children neither created their stores nor were killed"
        for folder, child, fraction in zip(folders, children, KILL_AT_FRACTIONS):
            if child.poll() is None and _store_bytes(folder) >= fraction * whole:
                child.kill()  # SIGKILL: no clean-up of any kind runs
                child.wait()
        time.sleep(0.005)
    assert -9 in [child.returncode for child in children], "every child finished before its kill"

    for folder in folders:
        tracker = MlflowTracker(f"sqlite:///{folder / 'mlflow.db'}", "faults")  # raised ConfigError before the fix
        tracker.end(tracker.start("run-1", "after the kill", {}, folder="out"), "FINISHED")


# --- 2. A run starts its own Ray unless RAY_ADDRESS names a cluster -------------------------


def test_ray_address_is_local_unless_ray_address_names_a_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_pool.ray_address() == "local"
    monkeypatch.setenv("RAY_ADDRESS", " ")
    assert ray_pool.ray_address() == "local"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    assert ray_pool.ray_address() == "10.0.0.7:6379"


def _fake_ray(monkeypatch, initialized: bool) -> list[dict]:
    """Stands in for ray.init (recording its arguments) and the few calls describe makes."""
    calls: list[dict] = []
    state = {"on": initialized}

    def init(**kwargs):
        calls.append(kwargs)
        state["on"] = True

    monkeypatch.setattr(ray_pool.ray, "is_initialized", lambda: state["on"])
    monkeypatch.setattr(ray_pool.ray, "init", init)
    monkeypatch.setattr(ray_pool.ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray_pool.ray, "get_runtime_context", lambda: SimpleNamespace(gcs_address="127.0.0.1:6379"))
    monkeypatch.setattr(ray_pool, "_joined", None)
    monkeypatch.setattr(ray_pool, "_unreachable", lambda address: None)  # the cluster's port answers
    return calls


def test_without_ray_address_a_run_starts_its_own_ray_not_a_cluster_on_the_machine(monkeypatch):
    # address=None (before the fix) makes ray.init join any cluster `ray start` left running.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    calls = _fake_ray(monkeypatch, initialized=False)
    ray_pool.ensure_ray()
    assert [call["address"] for call in calls] == ["local"]
    assert engine.describe_backend("ray") == \
        "Ray: a new local instance (set RAY_ADDRESS to use a cluster), 2 CPUs"
    assert len(calls) == 1  # once per process


def test_ray_address_names_the_cluster_a_run_joins(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    calls = _fake_ray(monkeypatch, initialized=False)
    assert engine.describe_backend("ray") == "Ray: the cluster at RAY_ADDRESS=127.0.0.1:6379, 2 CPUs"
    assert [call["address"] for call in calls] == ["127.0.0.1:6379"]


def test_a_ray_the_process_already_has_is_used_as_it_is(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    calls = _fake_ray(monkeypatch, initialized=True)  # a notebook's, or the tests' ray_session
    assert engine.describe_backend("ray") == "Ray: the instance this process had already started or joined, 2 CPUs"
    assert calls == []
    assert engine.describe_backend("local") == "in process, one run at a time (execution.backend: local)"


# --- 3. A closed pipe ends a command quietly -------------------------------------------------


def _small_pipe() -> tuple[int, int]:
    """A pipe that holds one page: a longer output waits for its reader."""
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        pytest.skip("needs Linux's F_SETPIPE_SZ")
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    return read_end, write_end


def _quiet_after_reader_left(child: subprocess.Popen) -> None:
    """Asserts the child, whose reader went away, exited 141 with nothing on stderr."""
    _, stderr = child.communicate(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr and "Exception ignored" not in stderr, stderr
    assert child.returncode == 141  # 128 + SIGPIPE, as a shell reports it; not 1 ("some runs failed")


def test_ledger_piped_into_head_ends_quietly():
    read_end, write_end = _small_pipe()  # the ledger (~22 kB) cannot all be written before the reader leaves
    child = subprocess.Popen([sys.executable, "-m", "pipeline", "ledger", "experiments/quickstart.yaml"],
                             cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    with os.fdopen(read_end) as reader:  # `| head -1`: one line, then the pipe is closed
        assert reader.readline() == "{\n"
    _quiet_after_reader_left(child)


def test_a_command_ends_quietly_when_its_reader_left_before_it_wrote():
    # Every command's output goes through main (argparse's --help ignores a failed write itself).
    read_end, write_end = _small_pipe()
    os.close(read_end)
    command = ["epsilon", "gaussian", "--sigma", "1", "--delta", "1e-6"]
    child = subprocess.Popen([sys.executable, "-m", "pipeline", *command],
                             cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    _quiet_after_reader_left(child)


def test_main_still_returns_its_statuses(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment: x\nn_users: -1\n")
    assert cli.main(["ledger", str(bad)]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("config error")
    assert cli.main(["epsilon", "gaussian", "--sigma", "1", "--delta", "1e-6"]) == cli.EXIT_OK
    assert '"mechanism": "gaussian"' in capsys.readouterr().out
