"""Red team, round three (issue 46): hostile configs, each once a traceback or a command that did
not end, are one config-error line naming the field and the numbers, exit 2, before any work."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.uris import redact

ROOT = Path(__file__).resolve().parents[1]
BASE = ("n_users: 1000\nproblem: {name: quadratic, dim: 2}\noptimizer: {name: mean_estimation}\n"
        "execution: {backend: local}\n")


def _deep() -> str:
    return "problem: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n"


def _alias_bomb() -> str:
    """A plug-in option's grid value that expands to 10⁹ numbers (ten lists of ten, nine levels deep)."""
    levels = ["&l0 [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"]
    levels += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    return (BASE.replace("mean_estimation", f"'{ROOT}/experiments/plugins/momentum_sgd.py:MomentumSGD'")
            + f"grid:\n  optimizer.momentum: [[{', '.join(levels)}]]\n")


def _big_grid() -> str:
    values = ", ".join(str(1 + i / 1000) for i in range(1000))
    return (BASE + f"grid:\n  privacy.epsilon: [{values}]\n  n_users: [{', '.join(str(1000 + i) for i in range(1000))}]\n"
            f"  problem.dim: [{', '.join(str(1 + i) for i in range(1000))}]\n")


CASES = {
    # a 2,989-line RecursionError traceback
    "nesting 100,000 deep": (_deep, "config", "nests mappings or lists more than 32 deep"),
    # ZeroDivisionError in P_vec's calibration
    "subnormal δ": (lambda: BASE + "privacy: {epsilon: 1.0, delta: 5.0e-324}\n", "privacy.delta",
                    "must be a number in [1e-100, 0.5)"),
    # `ledger` ran until killed
    "a grid of 10⁹ points": (_big_grid, "grid", "expands to 1,000,000,000 runs (1000 × 1000 × 1000"),
    # no answer in 150 s
    "an alias bomb in a plug-in option's grid": (_alias_bomb, "grid.optimizer.momentum", "holds more than 10,000 values"),
    # 89 lines: libhdfs lists every path where it looked for a JVM
    "an hdfs table source without a JVM": (
        lambda: BASE.replace("problem: {name: quadratic, dim: 2}", 'problem: {name: dataset, dim: 2, loss: logistic, '
                                                                   'source: "hdfs://127.0.0.1:9/users.parquet"}'),
        "problem.source", "cannot be opened"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["ledger", "run"])
def test_a_hostile_config_is_one_line_exit_2_at_once(tmp_path, capsys, monkeypatch, case, command):
    make, field, words = CASES[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostile.yaml").write_text(make())
    began = time.monotonic()
    assert cli.main([command, "hostile.yaml"]) == 2
    assert time.monotonic() - began < 30  # refused before any work, not after it
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: {field} = "), lines
    assert words in lines[0], lines[0]
    assert not (tmp_path / "results").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("written,recorded", [
    ("s3://AKID:wJalrSECRET@bucket/x?endpoint_override=h:9000", "s3://AKID:REDACTED@bucket/x?endpoint_override=h:9000"),
    ("s3://bucket?secret_key=S&access_key=A&scheme=http", "s3://bucket?secret_key=REDACTED&access_key=REDACTED&scheme=http"),
    ("postgresql://mlflow:pw@db:5432/mlflow", "postgresql://mlflow:REDACTED@db:5432/mlflow"),
    ("abfs://c@acct.dfs.core.windows.net/p?sv=1&sig=abc&se=2", "abfs://c@acct.dfs.core.windows.net/p?sv=1&sig=REDACTED&se=2"),
    ("gs://b/p?retry_limit_seconds=8", "gs://b/p?retry_limit_seconds=8"),
    ("sqlite:////tmp/a/mlflow.db", "sqlite:////tmp/a/mlflow.db"),  # written back as is, or MLflow cannot open it
    ("hdfs://user@namenode:8020/p", "hdfs://user@namenode:8020/p"),
    ("results/quickstart", "results/quickstart"),
    ("error: 's3://A:B@b/x' cannot be opened", "error: 's3://A:REDACTED@b/x' cannot be opened"),
])
def test_a_uri_is_recorded_without_its_credentials_and_otherwise_as_written(written, recorded):
    assert redact(written) == recorded


def test_an_sqlite_store_with_sqlalchemy_options_opens(tmp_path, monkeypatch):
    """Issue 46: `sqlite:///new.db?timeout=30` (SQLAlchemy's busy timeout) was refused with a false
    reason (the options were read as part of the file's name)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store.yaml").write_text(BASE + 'tracking: {mlflow_uri: "sqlite:///new.db?timeout=30", out: res}\n')
    assert cli.main(["run", "store.yaml"]) == 0
    assert (tmp_path / "new.db").is_file() and not list(tmp_path.glob("new.db?*"))


def test_sigterm_to_a_ray_grids_process_group_exits_143_with_no_run_left_running(tmp_path):
    """Issue 46: SIGTERM to the process group of a Ray grid (as Slurm sends it: the driver and its
    local Ray together) ended in exit 1 after a 60 s GCS timeout with MLflow runs left RUNNING."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys

    (tmp_path / "grid.yaml").write_text(
        "experiment: pg\nn_users: 200000\nproblem: {name: quadratic, dim: 5}\noptimizer: {name: seq_sgd}\n"
        "privacy: {epsilon: 1.0, delta: 1.0e-6, accounting: tight}\nseeds: [0, 1, 2, 3]\n"
        "execution: {backend: ray, shards: 2}\ntracking: {out: res}\n")
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}  # its own local Ray
    env["SHUFFLE_SCO_TASK_WORK"] = "0"  # shard actors, as large runs have: small runs end before the signal
    driver = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "grid.yaml"], cwd=tmp_path, env=env,
                              start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in driver.stdout:  # the first run recorded: the others are in flight on Ray
            if "1/4" in line:
                break
        os.killpg(driver.pid, signal.SIGTERM)
        began = time.monotonic()
        said = driver.communicate(timeout=90)[0]
        assert driver.returncode == 143 and time.monotonic() - began < 45, said[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    with sqlite3.connect(tmp_path / "mlflow.db") as store:
        statuses = dict(store.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
    assert "RUNNING" not in statuses and statuses.get("FINISHED", 0) >= 1, statuses


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT", None])
def test_rays_plain_keyboardinterrupt_is_the_signal_that_arrived(signum):
    """CI: a SIGTERM'd Ray grid exited 130, not 143. Ray's wait checks signals itself and
    raises a plain KeyboardInterrupt for the Terminated the handler raised."""
    import signal

    from pipeline import interrupts

    with interrupts.Interrupts() as watching, pytest.raises(KeyboardInterrupt) as stopped:
        with watching.raising():
            try:
                if signum is not None:
                    signal.raise_signal(getattr(signal, signum))
                raise KeyboardInterrupt  # no signal: a KeyboardInterrupt of Ray's own
            except KeyboardInterrupt:
                raise KeyboardInterrupt from None  # as Ray's check_signals does
    assert isinstance(stopped.value, interrupts.Terminated) == (signum == "SIGTERM")
