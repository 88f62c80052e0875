"""Shared fixtures: one Ray session for the whole test run (DESIGN §6), new MLflow SQLite
stores copied from one migrated once per run, and the commands that some tests only read
(the experiment scripts' quick runs, the benchmarks' smoke run) started in the background."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import pytest
import ray


ROOT = Path(__file__).resolve().parents[1]

# The tests' Ray grids run on Ray as they say: their runs are tiny, and a tiny run on the ray backend
# otherwise executes in the driver (ray_pool.DRIVER_WORK), a placement test_grid.py checks on its own.
# Set before any test imports the package, and inherited by the commands and clusters tests start.
os.environ.setdefault("SHUFFLE_SCO_DRIVER_WORK", "0")

# The test files that take longest (seconds of one process, measured on a 2-core VM), handed to
# the two test processes first and in this order (pyproject's addopts: --no-loadscope-reorder;
# the others follow in name order). pytest-xdist otherwise sends the files with most tests first,
# so the one-test files came last, and a process sat idle for the last 160 s while the other ran
# the cluster test. test_cluster_submit comes after four files, so that it starts about when
# test_engine ends: beside each other, their dozens of Ray processes slowed the cluster test from
# 100 to 150 s and test_engine from 180 to 220 s.
SLOW_FIRST = ("test_engine.py",           # 180: Ray actors for the bit-identity cases
              "test_golden.py",           # 60: 190 command-line runs in one child
              "test_datasets.py",         # 50
              "test_accountant_properties.py",  # 50
              "test_grid.py",             # 48
              "test_cluster_submit.py",   # 100: a three-node Ray cluster, a job through a node's loss
              "test_quickstart.py",       # 43
              "test_bench_smoke.py",      # 39
              "test_hard_instances.py",   # 39
              "test_minimax_bound.py",    # 36
              "test_records.py",          # 35
              "test_fused.py",            # 30
              "test_audit.py",            # 29
              "test_accounting_figures.py")  # 27


def pytest_collection_modifyitems(session, config, items):
    """Puts the files of SLOW_FIRST first, in its order (a stable sort: each file's tests keep theirs)."""
    rank = {name: position for position, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))


def pytest_sessionstart(session):
    """Compiles the fused rounds' numba kernels once, in two processes, before the tests start
    (tests/warm_kernels.py) when their cache is missing or older than compiled.py, as on a
    fresh checkout or after an edit: else every test process, Ray actor and command-line child
    reaching a kernel first would compile it itself.
    Under pytest-xdist only the controlling process does."""
    if hasattr(session.config, "workerinput"):
        return
    from warm_kernels import cached  # tests/ is on sys.path (pytest's rootdir-relative conftest import)

    if cached():
        return
    warming = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "warm_kernels.py"), str(part), "2"], cwd=ROOT)
               for part in range(2)]
    for child in warming:
        child.wait()


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance the pipeline's engine reuses: the process's own ("local": never a
    cluster that another test process started with `ray start`, as the cluster test does)."""
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 object_store_memory=200 * 1024**2)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def _empty_mlflow_db(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, created (Alembic migrations: 2-4 s) once per test run."""
    from mlflow.tracking import MlflowClient

    logging.getLogger("alembic").setLevel(logging.ERROR)
    path = tmp_path_factory.mktemp("mlflow_template") / "empty.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()  # creates and migrates it
    return path


@pytest.fixture(scope="session")
def new_mlflow_store(_empty_mlflow_db):
    """new_mlflow_store(path) puts a new, empty MLflow store at path and returns its
    sqlite:/// URI. It is a byte copy of a store MLflow has just created (schema at the
    newest revision, the Default experiment, nothing else): what MLflow itself would make
    at that path, without the migrations."""

    def make(path: Path) -> str:
        assert not path.exists(), path
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_empty_mlflow_db, path)
        return f"sqlite:///{path}"

    return make


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server on loopback (moto's), once per test run: (URI options, a pyarrow
    S3FileSystem on it that may create buckets). moto keeps buckets per process, so each test
    module creates and uses a bucket of its own. The AWS keys it accepts are set for the run."""
    import os

    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    keys = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    previous = {key: os.environ.get(key) for key in keys}
    os.environ.update(keys)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    filesystem = pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                                   allow_bucket_creation=True)
    yield {"options": f"endpoint_override={host}:{port}&scheme=http&region=us-east-1", "filesystem": filesystem,
           "keys": keys}
    server.stop()
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# Commands whose output some tests only read, and which depend on nothing else: the
# experiment scripts' --quick runs (tests/test_accounting_figures.py, test_randomizer_figures.py:
# ~25 s and ~50 s of one core), the benchmarks' smoke run (tests/test_bench_smoke.py, ~20 s), the
# golden runs in their numeric environment (tests/golden/make_golden.py --check for test_golden.py,
# ~35 s) and a grid interrupted by Ctrl-C, then resumed (tests/interrupted_grid.py for test_grid.py, ~18 s).
# When those tests are selected, the commands run in child processes, one after the other, from
# the start of the test run: on a 2-core machine they use the core the single-threaded tests
# before them leave idle. Each test waits for its command. "{out}" is the command's own folder.
# Under pytest-xdist (pyproject's addopts: two test processes, which keep both cores busy) a
# process runs a command when a test first asks for it: each process collects every test, and
# started eagerly, each would run every command.
BACKGROUND = {  # the test module that reads it → (name, arguments of python)
    "test_accounting_figures.py": ("accounting_figures",
                                   ["experiments/accounting_figures.py", "--quick", "--out", "{out}"]),
    "test_randomizer_figures.py": ("randomizer_figures",
                                   ["experiments/randomizer_figures.py", "--quick", "--out", "{out}"]),
    "test_bench_smoke.py": ("bench_smoke", ["-m", "bench", "--smoke"]),
    "test_golden.py": ("golden", ["tests/golden/make_golden.py", "--check", "{out}"]),
    "test_grid.py": ("interrupted_grid", ["tests/interrupted_grid.py", "{out}"]),
}


class Finished(NamedTuple):
    """A background command that exited with status 0: its folder and its standard output."""

    out: Path
    stdout: str


class _Background:
    """`python ARGS` for each named command, in turn, in a thread (see BACKGROUND); or, not
    `eager`, each when a test first asks for its result."""

    def __init__(self, commands: dict[str, list[str]], root: Path, eager: bool = True):
        self._outs = {name: root / name for name in commands}
        self._argv = {name: [sys.executable, *[arg.format(out=self._outs[name]) for arg in args]]
                      for name, args in commands.items()}
        self._done = {name: threading.Event() for name in commands}
        self._results: dict[str, subprocess.CompletedProcess | BaseException] = {}
        self._child: subprocess.Popen | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._eager = eager
        self._thread = threading.Thread(target=self._run_all, name="background-commands", daemon=True)
        if eager:
            self._thread.start()

    def _run_all(self) -> None:
        for name in self._argv:
            self._run(name)

    def _run(self, name: str) -> None:
        argv = self._argv[name]
        try:
            with self._lock:
                if self._stopped:
                    raise RuntimeError("the test run ended first")
                self._outs[name].mkdir(parents=True, exist_ok=True)
                self._child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               text=True)
            stdout, stderr = self._child.communicate()
            self._results[name] = subprocess.CompletedProcess(argv, self._child.returncode, stdout, stderr)
        except BaseException as error:  # reported by result()
            self._results[name] = error
        self._done[name].set()

    def result(self, name: str, timeout: float = 1800.0) -> Finished:
        """Waits for the command (runs it now if it was not started eagerly); returns its folder
        and output (it exited with status 0)."""
        if not self._eager and not self._done[name].is_set():
            self._run(name)
        assert self._done[name].wait(timeout), f"{name} did not finish within {timeout:.0f} s"
        done = self._results[name]
        if isinstance(done, BaseException):
            raise done
        assert done.returncode == 0, f"{' '.join(done.args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return Finished(self._outs[name], done.stdout)

    def stop(self) -> None:
        """Kills a command still running (its tests were not reached) and starts no other."""
        with self._lock:
            self._stopped = True
            if self._child is not None and self._child.poll() is None:
                self._child.kill()
        if self._eager:
            self._thread.join()


@pytest.fixture(scope="session", autouse=True)
def background(request, tmp_path_factory):
    """background(name) -> Finished, of a BACKGROUND command (see above)."""
    selected = {item.path.name for item in request.session.items}
    commands = dict(command for test, command in BACKGROUND.items() if test in selected)
    eager = not hasattr(request.config, "workerinput")  # pytest-xdist's test processes have workerinput
    runner = _Background(commands, tmp_path_factory.mktemp("background"), eager) if commands else None
    yield runner.result if runner else None
    if runner:
        runner.stop()
