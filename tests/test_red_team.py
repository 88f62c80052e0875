"""What a red team broke (issue 17): every hostile input is refused with one
line `config error: FIELD = VALUE: RULE` and exit status 2 before any work,
with nothing written; a results folder and its MLflow runs agree after a
crash, a kill, a full disk or a concurrent start; a damaged Parquet file is
reported with what to do, never skipped or extended."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from pipeline import cli, config, engine, memory
from pipeline.tracking import location, parquet_store

SMALL = """
experiment: redteam
problem: {name: quadratic, dim: 3, radius: 1.0}
n_users: 40
optimizer: {name: mean_estimation}
privacy: {epsilon: 15.0, delta: 0.4}
seeds: [5]
execution: {backend: local, shards: 1, block_size: 8}
"""
# Seeds above 2⁵³ that a float64 column would merge: kept exact as int64.
BIG_SEEDS = [2**53 + 1, 2**63 - 1]


def _alias_bomb() -> str:
    """An experiment name whose YAML expands to 9⁹ leaves (a billion-laughs document)."""
    levels = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    for previous, name in zip("abcdefgh", "bcdefghi"):
        levels.append(f"&{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    return "experiment: [" + ", ".join(levels) + "]\n"


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """One MLflow store for the module: created once, as its migrations take seconds."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def finished(tmp_path_factory, uri) -> Path:
    """A results folder with two finished runs, written under umask 022."""
    folder = tmp_path_factory.mktemp("finished")
    path = folder / "c.yaml"
    path.write_text(textwrap.dedent(SMALL))
    previous = os.umask(0o022)
    try:
        assert cli.main(["run", str(path), "--out", str(folder / "out"), "--set", f"tracking.mlflow_uri={uri}",
                         "--set", f"seeds={BIG_SEEDS}"]) == 0
    finally:
        os.umask(previous)
    return folder / "out"


def _config(tmp_path, text=SMALL) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text) if isinstance(text, str) else "")
    if isinstance(text, bytes):
        path.write_bytes(text)
    return path


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under a folder: its content's hash and its mode."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
                                         p.stat().st_mode) for p in sorted(folder.rglob("*"))}


def _one_line(capsys, status: int, field: str, *rules: str) -> str:
    """Asserts exit 2 and a single `config error: FIELD = ...` line holding each rule fragment."""
    captured = capsys.readouterr()
    assert status == 2, captured
    err = captured.err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"config error: {field} = "), err
    for rule in rules:
        assert rule in err, err
    return err


def _mlflow_runs(uri: str, experiment: str, run_id: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], filter_string=f"tags.run_id = '{run_id}'")


UNDER_NOISED_PVEC = f"{Path(__file__).resolve().parents[1] / 'experiments/plugins/under_noised.py'}:UnderNoisedPvec"
# A plug-in protocol with a plan of its own: planned round by round, so capped at 10⁷ rounds.
SKELLAM_SUM = f"{Path(__file__).resolve().parents[1] / 'experiments/plugins/skellam_sum.py'}:SkellamSum"
# (id, config text or bytes, --set overrides, field, rule fragments). Each is refused by `run`.
REFUSED = [
    ("full_gd-1e9-rounds", SMALL, ["optimizer.name=full_gd", "optimizer.rounds=1e9"], "optimizer.rounds",
     ["≤ 100000000", "at most 10⁸ rounds"]),
    ("seq_sgd-1e15-users", SMALL, ["optimizer.name=seq_sgd", "n_users=1e15"], "n_users", ["≤ 10000000000"]),
    ("planned-rounds-cap", SMALL, ["optimizer.name=seq_sgd", "optimizer.batch_size=1", "n_users=2e8"],
     "optimizer.batch_size", ["plans 200000000 rounds", "cap of 100000000"]),
    ("plugin-planned-rounds-cap", SMALL, ["optimizer.name=seq_sgd", "optimizer.batch_size=1", "n_users=2e7",
                                          f"privacy.protocol={SKELLAM_SUM}"],
     "optimizer.batch_size", ["plans 20000000 rounds", "cap of 10000000", "10⁷ with a plug-in protocol"]),
    ("seed-above-int64", SMALL, [f"seeds=[{2**63}]"], "seeds[0]", ["≤ 9223372036854775807", "int64"]),
    ("seed-1e20", SMALL, ["seeds=[1.0e+20]"], "seeds[0]", ["≤ 9223372036854775807"]),
    ("duplicate-key", SMALL + "privacy: {epsilon: 1.0}\n", [], "privacy", ["given twice", "lines 6 and 9"]),
    ("duplicate-nested-key", SMALL.replace("epsilon: 15.0,", "epsilon: 15.0, epsilon: 2.0,"), [],
     "privacy.epsilon", ["given twice"]),
    ("binary-config", bytes(range(128, 256)) * 4, [], "config", ["not UTF-8"]),
    ("experiment-300-chars", SMALL, ["experiment=" + "x" * 300], "experiment", ["one folder name", "…"]),
    ("experiment-nul", SMALL.replace("experiment: redteam", 'experiment: "red\\0team"'), [], "experiment",
     ["'red\\x00team'", "NUL"]),
    ("experiment-dotdot", SMALL, ["experiment=.."], "experiment", ["not '.' or '..'"]),
    ("experiment-slash", SMALL, ["experiment=../../escape"], "experiment", ["without '/'"]),
    ("dp_sgd-noise-search", SMALL, ["optimizer.name=dp_sgd", "privacy.protocol=central_gaussian",
                                    "privacy.epsilon=1e-6", "privacy.delta=1e-10"], "privacy.epsilon",
     ["no noise level up to", "raise privacy.epsilon"]),
    ("sqlite-in-memory", SMALL + 'tracking: {mlflow_uri: "sqlite:///:memory:"}\n', [], "tracking.mlflow_uri",
     ["in-memory"]),
    ("sqlite-uri-filename-in-memory",  # issue #29 item 7: SQLite's URI filenames open memory with mode=memory
     SMALL + 'tracking: {mlflow_uri: "sqlite:///file:memdb1?mode=memory&cache=shared&uri=true"}\n', [],
     "tracking.mlflow_uri", ["in-memory"]),
    ("alias-bomb", SMALL.replace("experiment: redteam\n", _alias_bomb()), [], "experiment", ["…"]),
    # Issue #29 item 9: extreme budgets and radii were a ZeroDivisionError, an OverflowError or a
    # hang (P_1D's noise bits beyond 2⁵³ looped forever; ε = 1e-100 now runs, on the normal approximation).
    ("epsilon-1e-300", SMALL, ["privacy.epsilon=1e-300"], "privacy.epsilon", ["noise bits", "raise privacy.epsilon"]),
    ("epsilon-denormal", SMALL, ["optimizer.name=seq_sgd", "privacy.epsilon=5e-324"], "privacy.epsilon",
     ["cannot be calibrated", "raise privacy.epsilon or privacy.delta"]),
    ("delta-denormal", SMALL, ["optimizer.name=seq_sgd", "privacy.delta=5e-324"], "privacy.delta",
     ["must be a number in [1e-100, 0.5)", "1/δ leave floating point"]),
    ("radius-1e300", SMALL, ["problem.radius=1e300"], "privacy.epsilon", ["or lower problem.radius"]),
    ("radius-1e12-hung", SMALL, ["problem.radius=1e12"], "problem.radius", ["precision g", "lower the radius"]),
    ("dim-1e7-memory", SMALL, ["problem.dim=1e7", "n_users=10000", "execution.block_size=4096"], "problem.dim",
     ["d × users × 8 bytes", "memory"]),
]


@pytest.mark.parametrize("text,overrides,field,rules", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_in_one_line_before_any_work(tmp_path, monkeypatch, capsys, uri, text, overrides, field, rules):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(memory, "memory_bytes", lambda: 64 * 2**30)  # the same verdict on any machine
    path = _config(tmp_path, text)
    args = ["run", str(path), "--out", str(tmp_path / "out")]
    for item in [f"tracking.mlflow_uri={uri}"] * ("mlflow_uri" not in str(text)) + overrides:
        args += ["--set", item]
    err = _one_line(capsys, cli.main(args), field, *rules)
    assert len(err) < 1000  # bounded, even for a value that expands to gigabytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]  # nothing written


# (id, argv after the config, field, rule fragments): the other commands' refusals.
REFUSED_COMMANDS = [
    ("audit-trials-1e12", ["audit", "{config}", "--trials", "1e12"], "--trials", ["≤ 10000000"]),
    ("epsilon-gaussian-rounds-1e30", ["epsilon", "gaussian", "--sigma", "1", "--rounds", "1e30", "--delta", "1e-5"],
     "--rounds", ["[1, 10000000]"]),
    ("epsilon-cjmp-vec-n-1e30", ["epsilon", "cjmp-vec", "--n", "1e30", "--d", "10", "--epsilon", "1",
                                 "--delta", "1e-6"], "--n", ["[1, 1000000000000]"]),
    ("out-under-proc", ["run", "{config}", "--out", "/proc/red-team"], "tracking.out", ["not writable"]),
]


@pytest.mark.parametrize("argv,field,rules", [r[1:] for r in REFUSED_COMMANDS], ids=[r[0] for r in REFUSED_COMMANDS])
def test_commands_refuse_absurd_sizes_in_one_line(tmp_path, monkeypatch, capsys, uri, argv, field, rules):
    if "/proc/red-team" in argv and not Path("/proc/self").exists():
        pytest.skip("no /proc on this system")
    monkeypatch.chdir(tmp_path)
    path = _config(tmp_path)
    argv = [str(path) if item == "{config}" else item for item in argv]
    if argv[0] == "run":
        argv += ["--set", f"tracking.mlflow_uri={uri}"]
    _one_line(capsys, cli.main(argv), field, *rules)


def _first_part(out: Path, table: str) -> Path:
    """The first part file of a table (a folder of part files, one per attempt)."""
    parts = sorted((out / table).glob("part-*.parquet"))
    assert parts, out / table
    return parts[0]


@pytest.mark.parametrize("name", ["runs.parquet", "rounds.parquet"])
def test_a_truncated_part_is_refused_with_what_to_do_and_nothing_changes(tmp_path, capsys, uri, finished, name):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    damaged = _first_part(out, name)
    with open(damaged, "r+b") as handle:
        handle.truncate(damaged.stat().st_size // 2)
    before = _snapshot(out)
    # `run` reads every runs part (which runs are done) and every rounds part's footer: it names the damaged one.
    status = cli.main(["run", str(_config(tmp_path)), "--out", str(out), "--set", f"tracking.mlflow_uri={uri}",
                       "--set", f"seeds={BIG_SEEDS}"])
    _one_line(capsys, status, "tracking.out", f"{name}/{damaged.name} is damaged and cannot be read",
              "move it aside", "(the run" if name == "rounds.parquet" else "(the runs it recorded are then redone)")
    assert _snapshot(out) == before
    # Reading the folder's results (report, results.load) refuses a damaged part of either table, naming it.
    _one_line(capsys, cli.main(["report", str(out)]), "DIR", "is damaged and cannot be read",
              f"{name}/{damaged.name}", "move it aside")
    assert _snapshot(out) == before


@pytest.mark.parametrize("name,kind", [("runs.parquet", "file"), ("rounds.parquet", "file"),
                                       ("runs.parquet", "fifo")])
def test_something_else_where_a_table_folder_should_be(tmp_path, capsys, uri, name, kind):
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this system")
    (tmp_path / "out").mkdir()
    if kind == "file":  # a single file: the layout before results became a dataset
        (tmp_path / "out" / name).write_bytes(b"PAR1 not a table folder")
    else:
        os.mkfifo(tmp_path / "out" / name)
    before = _snapshot(tmp_path / "out")
    status = cli.main(["run", str(_config(tmp_path)), "--out", str(tmp_path / "out"),
                       "--set", f"tracking.mlflow_uri={uri}"])
    if kind == "file":
        _one_line(capsys, status, "tracking.out", f"{name} is one file, the layout before results became a dataset",
                  f"python -m pipeline migrate {tmp_path / 'out'}")
    else:
        _one_line(capsys, status, "tracking.out", f"{name} is not a folder", "move it aside")
    assert _snapshot(tmp_path / "out") == before


def test_a_part_without_status_is_refused(tmp_path, capsys, uri, finished):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    part = _first_part(out, "runs.parquet")
    pd.read_parquet(part).drop(columns="status").to_parquet(part)
    before = _snapshot(out)
    status = cli.main(["run", str(_config(tmp_path)), "--out", str(out), "--set", f"tracking.mlflow_uri={uri}",
                       "--set", f"seeds={BIG_SEEDS}"])
    _one_line(capsys, status, "tracking.out", f"runs.parquet/{part.name} lacks the column(s) status", "move it aside")
    assert _snapshot(out) == before
    _one_line(capsys, cli.main(["report", str(out)]), "DIR", "lacks the column(s) status")
    assert _snapshot(out) == before


def test_seeds_stay_exact_int64_and_files_are_readable_by_the_group(finished):
    runs = pd.read_parquet(finished / "runs.parquet")
    assert str(runs["seed"].dtype) == "int64" and sorted(runs["seed"]) == BIG_SEEDS
    # Created under umask 022: readable by group and others (a teammate's notebook), not 0600.
    files = [path for folder in ("runs.parquet", "rounds.parquet", "artifacts") for path in
             [finished / folder, *(finished / folder).rglob("*")]]
    assert len([path for path in files if path.is_file()]) == 2 + 2 + 2 * 2  # 2 runs: 2 parts each, 2 artifacts
    for path in files:
        assert path.stat().st_mode & 0o044 == 0o044, (path, oct(path.stat().st_mode))
        if path.is_dir():  # and the folders can be entered
            assert path.stat().st_mode & 0o011 == 0o011, (path, oct(path.stat().st_mode))


def test_a_second_process_on_the_folder_is_refused_at_once(tmp_path, capsys, uri):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, filelock; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
         "print('held', flush=True); sys.stdin.read()", str(out / parquet_store.LOCK_NAME)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        args = ["run", str(_config(tmp_path)), "--out", str(out), "--set", f"tracking.mlflow_uri={uri}"]
        _one_line(capsys, cli.main(args), "tracking.out", "another run holds this results folder")
        assert sorted(p.name for p in out.iterdir()) == [parquet_store.LOCK_NAME]
    finally:
        holder.communicate("")  # the holder ends, releasing the lock
    assert cli.main(args) == 0  # and then the folder is free


def test_a_full_disk_marks_the_run_failed_in_both_sinks_and_a_rerun_redoes_it(tmp_path, monkeypatch, capsys, uri):
    path = _config(tmp_path, SMALL.replace("redteam", "redteam_enospc"))
    args = ["run", str(path), "--out", str(tmp_path / "out"), "--set", f"tracking.mlflow_uri={uri}"]
    (run,) = config.expand(config.read_config(path, [f"tracking.out={tmp_path / 'out'}"]))

    def full(self, path, data):  # every file of the results folder is written by Location.write
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(location.Location, "write", full)
    assert cli.main(args) == 1  # the run failed; the failure handler's own write failed too, silently
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out and "No space left on device" in captured.out
    assert not (tmp_path / "out" / "runs.parquet").exists() and not (tmp_path / "out" / "rounds.parquet").exists()
    assert [r.info.status for r in _mlflow_runs(uri, "redteam_enospc", run.run_id)] == ["FAILED"]

    monkeypatch.undo()
    assert cli.main(args) == 0
    assert list(pd.read_parquet(tmp_path / "out" / "runs.parquet")["status"]) == ["finished"]
    assert [r.info.status for r in _mlflow_runs(uri, "redteam_enospc", run.run_id)] == ["FINISHED"]


def test_a_kill_between_the_row_and_the_end_of_the_mlflow_run_is_settled_on_restart(tmp_path, capsys, uri):
    path = _config(tmp_path, SMALL.replace("redteam", "redteam_kill"))
    args = ["run", str(path), "--out", str(tmp_path / "out"), "--set", f"tracking.mlflow_uri={uri}"]
    assert cli.main(args) == 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").itertuples()
    MlflowClient(tracking_uri=uri).update_run(row.mlflow_run_id, status="RUNNING")  # as a kill there leaves it
    assert cli.main(args) == 0
    assert "1 skipped" in capsys.readouterr().out
    assert [r.info.status for r in _mlflow_runs(uri, "redteam_kill", row.run_id)] == ["FINISHED"]


@pytest.mark.parametrize("swallowed", [False, True], ids=["raised", "swallowed"])
def test_sigterm_is_handled_like_ctrl_c_and_exits_143(tmp_path, monkeypatch, capsys, uri, swallowed):
    experiment = f"redteam_term_{swallowed}"
    path = _config(tmp_path, SMALL.replace("redteam", experiment).replace("seeds: [5]", "seeds: [5, 6]"))
    execute = engine.execute

    def terminated(job, backend, shards, progress=None):  # Slurm, Kubernetes or `ray job stop` during the first run
        try:
            signal.raise_signal(signal.SIGTERM)
        except KeyboardInterrupt:
            if not swallowed:
                raise
        return execute(job, backend, shards, progress)

    monkeypatch.setattr(engine, "execute", terminated)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        status = cli.main(["run", str(path), "--out", str(tmp_path / "out"), "--set", f"tracking.mlflow_uri={uri}"])
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert status == 143 and "terminated (SIGTERM)" in capsys.readouterr().err
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    # Raised: the run in flight is failed. Swallowed: it finishes, and the grid stops at the next run.
    assert list(runs["status"]) == (["finished"] if swallowed else ["failed"])
    statuses = [r.info.status for r in _mlflow_runs(uri, experiment, runs["run_id"][0])]
    assert statuses == (["FINISHED"] if swallowed else ["FAILED"])
