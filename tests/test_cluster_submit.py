"""The cluster workflow end to end: a Ray cluster started on loopback
(`ray start --head`), an MLflow tracking server (`mlflow server`, SQLite
backend, bound to 127.0.0.1), `ray job submit --working-dir` of a grid, and
the runs, metric histories and artifacts checked through MLflow's REST API."""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import ray

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _wait_until_answering(url: str, what: str, seconds: float = 120.0) -> None:
    """Polls `url` until its server sends any HTTP reply."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:  # it answered, with an error status: it is up
            return
        except OSError:
            assert time.time() < deadline, f"{what} did not start within {seconds:.0f} s"
            time.sleep(1)


@pytest.fixture(scope="module")
def loopback_cluster(tmp_path_factory, new_mlflow_store):
    """A Ray head node and an MLflow server on 127.0.0.1, torn down after."""
    if ray.is_initialized():
        ray.shutdown()  # one Ray per process: the job runs on the cluster below
    root = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    mlflow_port, gcs_port, dashboard_port = _free_port(), _free_port(), _free_port()
    # One worker process (MLflow's default is 4, each importing MLflow: seconds of CPU apiece).
    server = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--backend-store-uri", new_mlflow_store(root / "server.db"),
         "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(mlflow_port),
         "--workers", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = subprocess.run(
        [str(BIN / "ray"), "start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
         "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=true", "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        url, dashboard = f"http://127.0.0.1:{mlflow_port}", f"http://127.0.0.1:{dashboard_port}"
        # Both servers start in the background: wait until each answers (any HTTP reply, even a 401).
        _wait_until_answering(url + "/health", "mlflow server")
        _wait_until_answering(dashboard + "/api/version", "Ray dashboard (job API)")
        yield {"env": env, "mlflow": url, "dashboard": dashboard, "root": root}
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, capture_output=True, timeout=120)
        server.terminate()
        server.wait(timeout=30)


def test_ray_job_submit_runs_a_grid_into_the_tracking_server(loopback_cluster):
    cluster = loopback_cluster
    out = cluster["root"] / "results"
    # The head's job agent registers after the dashboard answers; Ray waits 10 s for it and then
    # refuses the job ("No available agent to submit job, please try again later"): try again.
    deadline = time.time() + 120
    while True:
        submitted = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--working-dir", str(ROOT), "--",
             "python", "-m", "pipeline", "run", "experiments/quickstart.yaml", "--set", "n_users=20000",
             "--set", "grid.privacy.accounting=[tight]", "--set", "grid.privacy.epsilon=[8]",
             "--out", str(out),
             "--set", f"tracking.mlflow_uri={cluster['mlflow']}"],
            cwd=ROOT, env={**cluster["env"], "RAY_ADDRESS": cluster["dashboard"]},
            capture_output=True, text=True, timeout=600)
        if "No available agent" not in submitted.stdout + submitted.stderr or time.time() > deadline:
            break
        time.sleep(2)
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    assert "2 runs: 2 finished, 0 skipped, 0 failed" in submitted.stdout

    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 2 and set(runs["status"]) == {"finished"}

    # Everything a user sees in the UI, through the server's REST API.
    api = cluster["mlflow"] + "/api/2.0/mlflow"
    experiment = _get(api + "/experiments/get-by-name?experiment_name=quickstart")["experiment"]
    found = _post(api + "/runs/search", {"experiment_ids": [experiment["experiment_id"]], "max_results": 100})
    mlflow_runs = found["runs"]
    assert len(mlflow_runs) == 2 and {r["info"]["status"] for r in mlflow_runs} == {"FINISHED"}
    assert {r["info"]["run_id"] for r in mlflow_runs} == set(runs["mlflow_run_id"])
    sgd = next(r for r in mlflow_runs
               if any(p["key"] == "optimizer.name" and p["value"] == "seq_sgd" for p in r["data"]["params"]))
    history = _get(f"{api}/metrics/get-history?run_id={sgd['info']['run_id']}&metric_key=excess_loss")["metrics"]
    assert len(history) > 100 and [m["step"] for m in history] == sorted(m["step"] for m in history)
    listed = _get(f"{cluster['mlflow']}/api/2.0/mlflow/artifacts/list?run_id={sgd['info']['run_id']}")
    assert {f["path"] for f in listed["files"]} == {"ledger.json", "config.yaml", "rounds.parquet"}
