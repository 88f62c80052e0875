"""Shared fixtures: one Ray session for the whole test run (DESIGN §6), new MLflow SQLite
stores copied from one migrated once per run, and the experiment scripts' quick runs started
in the background."""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import ray


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance the pipeline's engine reuses."""
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
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


# The experiment scripts' --quick runs that tests/test_accounting_figures.py and
# tests/test_randomizer_figures.py check take ~25 s and ~50 s of one core and depend on
# nothing else. When those tests are selected, their scripts run in child processes, one after
# the other, from the start of the test run: on a 2-core machine they use the core the
# single-threaded tests before them leave idle. Each module fixture waits for its script.
FIGURE_SCRIPTS = {"test_accounting_figures.py": "accounting_figures.py",
                  "test_randomizer_figures.py": "randomizer_figures.py"}
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


class _QuickFigures:
    """`python experiments/<script> --quick --out DIR`, for each script, in turn, in a thread."""

    def __init__(self, scripts: list[str], root: Path):
        self._outs = {script: root / Path(script).stem for script in scripts}
        self._done = {script: threading.Event() for script in scripts}
        self._results: dict[str, subprocess.CompletedProcess | BaseException] = {}
        self._child: subprocess.Popen | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run_all, name="quick-figures", daemon=True)
        self._thread.start()

    def _run_all(self) -> None:
        for script, out in self._outs.items():
            try:
                with self._lock:
                    if self._stopped:
                        raise RuntimeError("the test run ended first")
                    self._child = subprocess.Popen(
                        [sys.executable, str(EXPERIMENTS / script), "--quick", "--out", str(out)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                stdout, stderr = self._child.communicate()
                self._results[script] = subprocess.CompletedProcess(self._child.args, self._child.returncode,
                                                                    stdout, stderr)
            except BaseException as error:  # reported by result()
                self._results[script] = error
            self._done[script].set()

    def result(self, script: str, timeout: float = 1800.0) -> Path:
        """Waits for the script's run; returns its output folder (it exited with status 0)."""
        assert self._done[script].wait(timeout), f"{script} --quick did not finish within {timeout:.0f} s"
        done = self._results[script]
        if isinstance(done, BaseException):
            raise done
        assert done.returncode == 0, f"{script} --quick exited {done.returncode}:\n{done.stderr[-3000:]}"
        return self._outs[script]

    def stop(self) -> None:
        """Kills a script still running (its tests were not reached) and starts no other."""
        with self._lock:
            self._stopped = True
            if self._child is not None and self._child.poll() is None:
                self._child.kill()
        self._thread.join()


@pytest.fixture(scope="session", autouse=True)
def quick_figures(request, tmp_path_factory):
    """quick_figures(script) -> the output folder of `experiments/<script> --quick` (see above)."""
    selected = {item.path.name for item in request.session.items}
    scripts = [script for test, script in FIGURE_SCRIPTS.items() if test in selected]
    runner = _QuickFigures(scripts, tmp_path_factory.mktemp("quick_figures")) if scripts else None
    yield runner.result if runner else None
    if runner:
        runner.stop()
