"""The README's cluster recipe, run as written (issue 44 item 5): its commands are read from the
README's "Running a grid on a Ray cluster" blocks and run with only the substitutions SUBSTITUTED
names (ports, paths, the bucket, and options that keep this Ray apart from other tests'): a
token, an MLflow tracking server, a Ray head and two workers on loopback, an S3-compatible object
store (moto's server) for the results, `ray job submit --working-dir` of a grid with `--out
s3://...`, a worker node's raylet killed during the job, the job submitted again, and every run
found exactly once by `pipeline.results.load` of the S3 URI, by pandas and polars as the README
reads the tables, and in MLflow (its REST API)."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

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


def _recipe() -> tuple[list[str], str]:
    """The README's cluster recipe: its shell commands (comments dropped, continued lines joined)
    and its Python block."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Running a grid on a Ray cluster"):]
    shell = section[section.index("```bash\n") + 8:]
    shell = shell[:shell.index("```")].replace("\\\n", " ")
    python = section[section.index("```python\n") + 10:]
    commands = [re.sub(r"\s+", " ", line).strip() for line in shell.splitlines() if line.strip()
                and not line.lstrip().startswith("#")]
    return commands, python[:python.index("```")]


def _substituted(text: str, table: dict[str, str]) -> str:
    """`text` with each key of `table` replaced, every key required to occur (the README changed
    under the test otherwise)."""
    for old, new in table.items():
        assert old in text, f"the README's recipe no longer has {old!r}: {text!r}"
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def object_store(s3_server):
    """The loopback S3 server (conftest) with this module's bucket `cluster`."""
    s3_server["filesystem"].create_dir("cluster")
    return s3_server


@pytest.fixture(scope="module")
def loopback_cluster(tmp_path_factory, new_mlflow_store, object_store):
    """The README's cluster started as it says: its token, its MLflow server, a head and two workers
    on 127.0.0.1; torn down after. Yields the addresses and the recipe's remaining commands."""
    if ray.is_initialized():
        ray.shutdown()  # one Ray per process: the job runs on the cluster below
    root = tmp_path_factory.mktemp("cluster")
    token_line, server_line, head_line, worker_line, submit_line, read_line = (recipe := _recipe())[0]
    # The nodes' processes (the job's driver among them) reach the object store with these keys.
    base = {**os.environ, **object_store["keys"], "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            # The GCS declares the killed node dead after 3 missed checks a second apart (by default
            # 5, 3 s apart: 15-25 s of the test spent waiting); a 5 s timeout keeps a busy node alive.
            "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
            "RAY_health_check_timeout_ms": "5000"}
    base.pop("RAY_ADDRESS", None)
    here = {".venv/bin/": f"{BIN}/"}  # the README's virtual environment is the test's
    exported = subprocess.run(["bash", "-c", _substituted(token_line, here) + " && env -0"], env=base, cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=True)
    env = dict(item.split("=", 1) for item in exported.stdout.split("\0") if "=" in item)
    assert env["RAY_AUTH_MODE"] == "token" and re.fullmatch(r"[0-9a-f]{64}", env["RAY_AUTH_TOKEN"])
    ports = {"mlflow": _free_port(), "gcs": _free_port(), "dashboard": _free_port()}
    server = subprocess.Popen(shlex.split(_substituted(server_line, {
        **here, "sqlite:///mlflow.db": new_mlflow_store(root / "server.db"),  # migrated once per test run
        "./mlartifacts": str(root / "artifacts"), "--port 5000": f"--port {ports['mlflow']}", " &": ""})),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Each node's dashboard agent on a port of its own: its default, 52365, is taken by the
    # agent of the other test process's Ray (conftest's ray_session) when that one is running,
    # and the head's job agent then never starts ("No available agent to submit job").
    # Every node's processes name the cluster's own temp dir (short: Unix socket paths stop at
    # 107 bytes), by which the teardown finds them and no other Ray's.
    temp_dir = tempfile.mkdtemp(prefix="ray-cluster-")

    def node_options() -> list[str]:
        return [f"--temp-dir={temp_dir}", f"--dashboard-agent-listen-port={_free_port()}",
                f"--dashboard-agent-grpc-port={_free_port()}", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]

    try:  # a start that fails or hangs is torn down too (the nodes started before it)
        head = shlex.split(_substituted(head_line, {**here, "--port=6379": f"--port={ports['gcs']}"}))
        started = subprocess.run([*head, f"--dashboard-port={ports['dashboard']}", "--num-cpus=2", *node_options()],
                                 env=env, capture_output=True, text=True, timeout=120)
        # Two worker nodes, each with its own CPU and raylet (found by its node manager port, to be killed).
        worker = shlex.split(_substituted(worker_line, {**here, "HEAD:6379": f"127.0.0.1:{ports['gcs']}"}))
        worker_ports = [_free_port(), _free_port()]
        workers = [subprocess.run([*worker, "--num-cpus=1", f"--node-manager-port={port}", *node_options()],
                                  env=env, capture_output=True, text=True, timeout=120) for port in worker_ports]
        assert started.returncode == 0, started.stderr
        assert all(worker.returncode == 0 for worker in workers), [worker.stderr[-2000:] for worker in workers]
        url, dashboard = f"http://127.0.0.1:{ports['mlflow']}", f"http://127.0.0.1:{ports['dashboard']}"
        # Both servers start in the background: wait until each answers (any HTTP reply, even a 401).
        _wait_until_answering(url + "/health", "mlflow server")
        _wait_until_answering(dashboard + "/api/version", "Ray dashboard (job API)")
        ports_named = {"127.0.0.1:8265": f"127.0.0.1:{ports['dashboard']}", "127.0.0.1:5000": f"127.0.0.1:{ports['mlflow']}"}
        yield {"env": env, "mlflow": url, "dashboard": dashboard, "root": root, "worker_ports": worker_ports,
               "store": object_store, "submit": _substituted(submit_line, {**here, **ports_named}),
               "read": _substituted(read_line, here), "python": recipe[1]}
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        server.terminate()
        server.wait(timeout=30)


# What the test adds to the README's submission: a grid of 2 runs large enough for shard actors
# (the quickstart's 8 small runs each run in one task), which the killed node's raylet takes with it.
GRID_OVERRIDES = "--set grid.n_users=[200000] --set grid.privacy.accounting=[tight] --set grid.privacy.epsilon=[8]"


def _submit(cluster: dict, out: str, *, wait: bool = True) -> subprocess.CompletedProcess:
    """The README's `ray job submit` line, into `out` (2 runs: GRID_OVERRIDES)."""
    command = _substituted(cluster["submit"], {"--working-dir .": f"--working-dir {shlex.quote(str(ROOT))}",
                                               "s3://my-bucket/sco/quickstart": shlex.quote(out),
                                               "ray job submit": "ray job submit" + ("" if wait else " --no-wait")})
    # The head's job agent registers after the dashboard answers; Ray waits 10 s for it and then
    # refuses the job ("No available agent to submit job, please try again later"): try again.
    deadline = time.time() + 120
    while True:
        submitted = subprocess.run(["bash", "-c", f"{command} {GRID_OVERRIDES}"], cwd=ROOT, env=cluster["env"],
                                   capture_output=True, text=True, timeout=600)
        if "No available agent" not in submitted.stdout + submitted.stderr or time.time() > deadline:
            return submitted
        time.sleep(2)


def _kill_raylet(node_manager_port: int) -> int:
    """SIGKILLs the raylet of the node started with this node manager port; returns its pid."""
    import psutil

    for process in psutil.process_iter(["name", "cmdline"]):
        if "raylet" in (process.info["name"] or "") and \
                f"--node_manager_port={node_manager_port}" in " ".join(process.info["cmdline"] or []):
            process.kill()
            return process.pid
    raise AssertionError(f"no raylet with node manager port {node_manager_port}")


def _stop_cluster(temp_dir: str) -> None:
    """SIGKILLs the cluster's processes: those whose command line names its temp dir, and their
    descendants (the workers, which rename themselves ray::..., are the raylets' children).

    Not `ray stop --force`: that kills every Ray process on the machine, the other test process's
    own Ray among them (its raylet gone, that process died in whatever test it was running).
    """
    import psutil

    named = [process for process in psutil.process_iter(["cmdline"])
             if temp_dir in " ".join(process.info["cmdline"] or [])]
    doomed = {process.pid: process for process in named}
    for process in named:
        try:
            doomed.update((child.pid, child) for child in process.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    for process in doomed.values():
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(doomed.values()), timeout=30)


def _job_status(cluster: dict, job_id: str) -> str:
    """A submitted job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), from the Jobs
    REST API (GET /api/jobs/<id>, the cluster's token as a bearer). Not `ray job status`: each
    such command costs 1.8 s of CPU, and polled every second it took a core from the job."""
    request = urllib.request.Request(f"{cluster['dashboard']}/api/jobs/{job_id}",
                                     headers={"Authorization": f"Bearer {cluster['env']['RAY_AUTH_TOKEN']}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())["status"]
    except urllib.error.HTTPError as error:
        if error.code < 500:  # a refused token or an unknown job: asking again will not help
            raise
        return f"unknown ({error})"
    except OSError as error:  # the dashboard busy or not answering: ask again
        return f"unknown ({error})"


def _wait_for(cluster: dict, job_id: str, statuses: tuple[str, ...], seconds: float = 120.0) -> str:
    deadline = time.time() + seconds
    while (status := _job_status(cluster, job_id)) not in statuses:
        assert time.time() < deadline, f"job {job_id} still {status or 'unknown'} after {seconds:.0f} s"
        time.sleep(1)
    return status


def test_ray_job_submit_runs_a_grid_into_object_storage_through_a_node_failure(loopback_cluster):
    cluster = loopback_cluster
    out = f"s3://cluster/results/quickstart?{cluster['store']['options']}"
    first = _submit(cluster, out, wait=False)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    job_id = re.search(r"raysubmit_\w+", first.stdout + first.stderr).group(0)
    # While the first job runs, a worker node dies (its raylet, and with it the actors it hosted);
    # the job ends as it may (its runs finished, redone by Ray's actor restarts, or failed).
    assert _wait_for(cluster, job_id, ("RUNNING",)) == "RUNNING"
    time.sleep(5)  # past start-up and planning: the runs are executing
    _kill_raylet(cluster["worker_ports"][0])
    _wait_for(cluster, job_id, ("SUCCEEDED", "FAILED", "STOPPED"))
    again = _submit(cluster, out)  # what the first job finished is skipped; the rest is redone
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    counts = re.search(r"2 runs: (\d+) finished, (\d+) skipped, 0 failed", again.stdout)
    assert counts and int(counts[1]) + int(counts[2]) == 2, again.stdout[-3000:]

    from pipeline import results

    from pipeline.tracking.location import open_location

    runs, rounds = results.load(out)
    assert len(runs) == 2 and runs["run_id"].is_unique and set(runs["status"]) == {"finished"}
    # The README's readers: its results.load line, then pandas and polars as its Python block reads.
    read = subprocess.run(["bash", "-c", _substituted(cluster["read"], {"s3://my-bucket/sco/quickstart": out})],
                          cwd=ROOT, env=cluster["env"], capture_output=True, text=True, timeout=300)
    assert read.returncode == 0 and all(run_id in read.stdout for run_id in runs["run_id"]), read.stderr[-3000:]
    endpoint = dict(part.split("=", 1) for part in cluster["store"]["options"].split("&"))["endpoint_override"]
    readers = {}
    exec(_substituted(cluster["python"], {  # noqa: S102 (the README's own block)
        'S3FileSystem(region="us-east-1")': f'S3FileSystem(region="us-east-1", endpoint_override="{endpoint}", scheme="http")',
        '"my-bucket/sco/quickstart/runs.parquet"': '"cluster/results/quickstart/runs.parquet"',
        '"s3://my-bucket/sco/quickstart/runs.parquet/*.parquet"': '"s3://cluster/results/quickstart/runs.parquet/*.parquet"',
        'storage_options={"aws_region": "us-east-1"}':
            f'storage_options={{"aws_region": "us-east-1", "aws_endpoint_url": "http://{endpoint}", "aws_allow_http": "true"}}'}),
         readers)
    for table in (readers["runs"], readers["runs_pl"].to_pandas()):  # every attempt: the finished one of each run
        finished = table[table["status"] == "finished"]
        assert sorted(finished["run_id"]) == sorted(runs["run_id"])
    assert set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])
    store = open_location(out)
    for run_id in runs["run_id"]:
        assert {path.rsplit("/", 1)[1] for path in store.files(store.path("artifacts", run_id))} == {
            "ledger.json", "config.yaml"}

    # Everything a user sees in the UI, through the server's REST API: each run once, the dataset's attempt.
    api = cluster["mlflow"] + "/api/2.0/mlflow"
    experiment = _get(api + "/experiments/get-by-name?experiment_name=quickstart")["experiment"]
    found = _post(api + "/runs/search", {"experiment_ids": [experiment["experiment_id"]], "max_results": 100,
                                         "filter": "attributes.status = 'FINISHED'"})
    mlflow_runs = found["runs"]
    assert len(mlflow_runs) == 2
    assert {r["info"]["run_id"] for r in mlflow_runs} == set(runs["mlflow_run_id"])
    sgd = next(r for r in mlflow_runs
               if any(p["key"] == "optimizer.name" and p["value"] == "seq_sgd" for p in r["data"]["params"]))
    history = _get(f"{api}/metrics/get-history?run_id={sgd['info']['run_id']}&metric_key=excess_loss")["metrics"]
    assert len(history) > 100 and [m["step"] for m in history] == sorted(m["step"] for m in history)
    listed = _get(f"{cluster['mlflow']}/api/2.0/mlflow/artifacts/list?run_id={sgd['info']['run_id']}")
    assert {f["path"] for f in listed["files"]} == {"ledger.json", "config.yaml", "rounds.parquet",
                                                    "excess_loss_and_epsilon.png"}
