"""Red team, round two (issue #29 item 9): each probe's reproducer, once a traceback, a silent
merge or a broken JSON, is one config-error line (exit 2, nothing written) or a clean result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline import cli

BASE = {"experiment": "redteam2", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 2000,
        "optimizer": {"name": "mean_estimation"}, "privacy": {"epsilon": 4.0, "delta": 1e-6},
        "execution": {"backend": "local", "shards": 2}}
PLUGINS = {
    "prints.py": "print('hello from a plug-in')\n"
                 "from pipeline.problems.quadratic import Quadratic as Prints\n",
    "exits.py": "import sys\nsys.exit(0)\n",
    "raises.py": "import dataclasses\nfrom typing import ClassVar\nfrom pipeline.optimizers.seq_sgd import SeqSGD\n\n\n"
                 "@dataclasses.dataclass(frozen=True)\nclass Raises(SeqSGD):\n    name: ClassVar[str] = 'raises'\n\n"
                 "    @classmethod\n    def from_config(cls, *args, **kwargs):\n"
                 "        print('planning, said the plug-in')\n        raise RuntimeError('a bug of its own')\n",
    "exits_planning.py": "import dataclasses, sys\nfrom typing import ClassVar\nfrom pipeline.optimizers.seq_sgd import SeqSGD\n"
                         "\n\n@dataclasses.dataclass(frozen=True)\nclass ExitsPlanning(SeqSGD):\n"
                         "    name: ClassVar[str] = 'exits_planning'\n\n    @classmethod\n"
                         "    def from_config(cls, *args, **kwargs):\n        sys.exit(0)\n",
    "exits_running.py": "import sys\nfrom pipeline.problems.quadratic import Quadratic\n\n\nclass ExitsRunning(Quadratic):\n"
                        "    def gradients(self, theta, data, out=None):\n        sys.exit(0)\n",
}


def _config(tmp_path: Path, **changes) -> Path:
    tree = json.loads(json.dumps(BASE))
    for dotted, value in changes.items():
        section, _, key = dotted.rpartition(".")
        (tree[section] if section else tree)[key] = value
    tree["tracking"] = {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "out": str(tmp_path / "out")}
    for name, text in PLUGINS.items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _refused(tmp_path, capsys, field: str, words: list[str], command: str = "run", **changes) -> None:
    assert cli.main([command, str(_config(tmp_path, **changes))]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: {field} = "), lines
    assert all(word in lines[0] for word in words), lines[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_plugin_that_calls_sys_exit_at_import_is_refused_not_a_silent_success(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(tmp_path, capsys, "problem.name", ["does not import", "SystemExit"],
             **{"problem.name": "exits.py:X"})


@pytest.mark.parametrize("command", ["run", "ledger", "audit"])
def test_a_plugin_that_calls_sys_exit_while_planning_is_one_line_exit_2(tmp_path, capsys, monkeypatch, command):
    """Issue 46: a from_config that calls sys.exit(0) made run, ledger and audit exit 0."""
    monkeypatch.chdir(tmp_path)
    _refused(tmp_path, capsys, "optimizer.name", ["the plug-in raised SystemExit: 0"], command,
             **{"optimizer.name": "exits_planning.py:ExitsPlanning"})


def test_a_plugin_that_exits_inside_a_run_fails_it_and_run_exits_1(tmp_path, capsys, monkeypatch):
    """Issue 46: a problem whose gradients call sys.exit(0) failed its run, but `run` exited 0."""
    monkeypatch.chdir(tmp_path)
    path = _config(tmp_path, **{"problem.name": "exits_running.py:ExitsRunning",
                                "optimizer.name": "seq_sgd"})
    assert cli.main(["run", str(path)]) == 1
    assert "plug-in code ended `run` with sys.exit(0)" in capsys.readouterr().err
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "failed" and "SystemExit" in row["error"]


def test_a_plugins_own_exception_while_planning_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(tmp_path, capsys, "optimizer.name", ["the plug-in raised RuntimeError: a bug of its own"],
             **{"optimizer.name": "raises.py:Raises"})


@pytest.mark.parametrize("command", ["ledger", "audit"])
def test_what_a_plugin_prints_leaves_the_json_on_stdout_intact(tmp_path, command):
    """A plug-in printing at import (stdout) broke `ledger`'s and `audit`'s JSON: it goes to stderr."""
    config = _config(tmp_path, **{"problem.name": "prints.py:Prints", "optimizer.name": "seq_sgd",
                                  "privacy.epsilon": 8.0, "privacy.delta": 0.01, "n_users": 64})
    args = [command, str(config)] + (["--trials", "100"] if command == "audit" else [])
    done = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # nothing else on stdout
    assert "hello from a plug-in" in done.stderr


def test_report_noisy_max_with_another_optimizer_names_the_protocol(tmp_path, capsys):
    _refused(tmp_path, capsys, "privacy.protocol", ["runs with frank_wolfe_l1 only"], command="ledger",
             **{"optimizer.name": "seq_sgd", "privacy.protocol": "report_noisy_max"})


def test_an_out_folder_name_above_255_bytes_is_one_line(tmp_path, capsys):
    path = _config(tmp_path)
    assert cli.main(["run", str(path), "--out", str(tmp_path / ("x" * 300))]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "has a folder name of 300 bytes" in lines[0], lines


def _dataset(tmp_path: Path, name: str, features: np.ndarray, labels: np.ndarray) -> dict:
    source = tmp_path / name
    pd.DataFrame({**{f"x{k}": features[:, k] for k in range(3)}, "label": labels}).to_parquet(source)
    return {"problem.name": "dataset", "problem.source": str(source), "problem.loss": "logistic",
            "optimizer.name": "seq_sgd", "n_users": len(labels)}


def test_labels_zero_and_minus_one_in_one_file_are_refused_not_merged(tmp_path, capsys):
    rng = np.random.default_rng(0)
    labels = rng.choice([0, 1, -1], 600)
    _refused(tmp_path, capsys, "problem.label", ["both 0 and −1"],
             **_dataset(tmp_path, "t.parquet", rng.uniform(-1, 1, (600, 3)), labels))


def test_finite_values_above_1e154_run_instead_of_a_false_non_finite_error(tmp_path):
    """‖x‖² overflowed to inf for values above ~1e154: the rows are clipped to the bound like any other."""
    rng = np.random.default_rng(1)
    features = rng.uniform(-1, 1, (600, 3)) * 1e200
    config = _config(tmp_path, **_dataset(tmp_path, "big.parquet", features, rng.integers(0, 2, 600)))
    assert cli.main(["run", str(config)]) == 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "finished" and np.isfinite(row["final_excess_loss"])


@pytest.mark.parametrize("content", [b"not a zip at all", b"PK\x03\x04 truncated"], ids=["text", "truncated-zip"])
def test_an_npz_that_is_not_a_zip_is_one_line(tmp_path, capsys, content):
    source = tmp_path / "t.npz"
    source.write_bytes(content)
    _refused(tmp_path, capsys, "problem.source", ["is not a readable .npz file"],
             **{"problem.name": "dataset", "problem.source": str(source), "optimizer.name": "seq_sgd"})


def test_a_plugin_module_runs_only_once_the_rest_of_the_config_is_valid(tmp_path, capsys, monkeypatch):
    """Naming a plug-in runs its module's code: not for a config refused on another field."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "marks.py").write_text("open('imported', 'w').close()\n"
                                       "from pipeline.problems.quadratic import Quadratic as Marks\n")
    _refused(tmp_path, capsys, "n_users", ["must be an integer ≥ 1"],
             **{"problem.name": "marks.py:Marks", "n_users": -5})
    assert not (tmp_path / "imported").exists()
    assert cli.main(["ledger", str(_config(tmp_path, **{"problem.name": "marks.py:Marks"}))]) == 0
    assert (tmp_path / "imported").exists()  # the same plug-in, in a valid config, is imported


def test_each_run_records_its_plugin_files_and_their_sha256(tmp_path, monkeypatch):
    import hashlib

    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, **{"problem.name": "prints.py:Prints"})
    assert cli.main(["run", str(config)]) == 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    expected = {"problem.name": {"name": "prints.py:Prints", "file": str((tmp_path / "prints.py").resolve()),
                                 "sha256": hashlib.sha256((tmp_path / "prints.py").read_bytes()).hexdigest()}}
    assert json.loads(row["plugins"]) == expected
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(row["mlflow_run_id"])
    assert json.loads(run.data.tags["plugins"]) == expected


def test_the_recorded_sha256_is_that_of_the_code_the_run_executed(tmp_path, monkeypatch):
    """Issue 46: a plug-in file edited while its grid ran made later runs record the new file's
    SHA-256 while executing the module imported before the edit."""
    import hashlib

    monkeypatch.chdir(tmp_path)
    plugin = tmp_path / "edits.py"
    plugin.write_text("from pathlib import Path\nfrom pipeline.problems.quadratic import Quadratic\n\n\n"
                      "class Edits(Quadratic):\n    def gradients(self, theta, data, out=None):\n"
                      "        with open(__file__, 'a') as own:  # the user saves an edit while the grid runs\n"
                      "            own.write('# edited\\n')\n"
                      "        return super().gradients(theta, data, out)\n")
    executed = hashlib.sha256(plugin.read_bytes()).hexdigest()
    config = _config(tmp_path, **{"problem.name": "edits.py:Edits", "optimizer.name": "seq_sgd"})
    assert cli.main(["run", str(config), "--set", "seeds=[0, 1, 2]"]) == 0
    assert plugin.read_bytes().count(b"# edited") > 0  # the file did change under the grid
    rows = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert [json.loads(p)["problem.name"]["sha256"] for p in rows["plugins"]] == [executed] * 3


def test_a_store_that_refuses_a_run_fails_that_run_and_the_grid_goes_on(tmp_path, capsys, monkeypatch):
    """MlflowTracker.start was outside the per-run `try`: a full or read-only store aborted the whole
    grid with pages of traceback (issue #29 item 7). Here it refuses the second of three runs."""
    import sqlite3

    from pipeline.tracking import MlflowTracker

    start, calls = MlflowTracker.start, []

    def refuse_the_second(self, *args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return start(self, *args, **kwargs)

    monkeypatch.setattr(MlflowTracker, "start", refuse_the_second)
    config = _config(tmp_path, **{"seeds": [0, 1, 2]})
    assert cli.main(["run", str(config)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet").sort_values("seed")
    assert list(runs["status"]) == ["finished", "failed", "finished"]
    assert runs["error"].iloc[1] == "OperationalError: attempt to write a readonly database"
    assert cli.main(["run", str(config)]) == 0  # the rerun redoes the failed run only
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert sorted(runs.loc[runs["status"] == "finished", "seed"]) == [0, 1, 2]


LINE = "root:x:0:0:root:/root:/bin/bash"


@pytest.mark.parametrize("last_row, words", [
    (LINE, ["Expected 4 columns, got 1"]),  # a bad row past pyarrow's first 1 MB block: a traceback before
    ("0.1,s3cr3t,0.3,1", ["conversion error to double"]),
], ids=["short-row", "text-value"])
def test_a_bad_csv_row_anywhere_is_one_line_that_quotes_no_data(tmp_path, capsys, last_row, words):
    source = tmp_path / "late.csv"
    source.write_text("x0,x1,x2,label\n" + "0.1,0.2,0.3,1\n" * 300_000 + last_row + "\n")  # 4.2 MB
    _refused(tmp_path, capsys, "problem.source", words, command="ledger",
             **{"problem.name": "dataset", "problem.source": str(source), "optimizer.name": "seq_sgd"})
    assert LINE not in capsys.readouterr().err


def test_a_source_that_is_not_a_table_quotes_none_of_its_lines(tmp_path, capsys):
    """A source symlinked to a passwd-like file quoted its first line (as column names)."""
    (tmp_path / "passwd").write_text(LINE + "\nbin:x:1:1:bin:/bin:/sbin/nologin\n")
    (tmp_path / "t.csv").symlink_to(tmp_path / "passwd")
    assert cli.main(["ledger", str(_config(tmp_path, **{"problem.name": "dataset", "optimizer.name": "seq_sgd",
                                                        "problem.source": str(tmp_path / "t.csv")}))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and LINE not in err and "/bin/" not in err and "x:0:0" not in err, err


@pytest.mark.parametrize("compression", ["stored", "deflated"])
def test_an_npz_whose_headers_promise_more_rows_than_it_holds_is_one_line(tmp_path, capsys, compression):
    """Every member's header says 100,000 rows, the data hold 1,000: a traceback from numpy before."""
    import zipfile

    np.savez(tmp_path / "honest.npz", X=np.random.default_rng(0).uniform(-1, 1, (1000, 3)), label=np.ones(1000))
    with zipfile.ZipFile(tmp_path / "honest.npz") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["X.npy"] = members["X.npy"].replace(b"(1000, 3)", b"(100000, 3)")
    members["label.npy"] = members["label.npy"].replace(b"(1000,)", b"(100000,)")
    method = zipfile.ZIP_STORED if compression == "stored" else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(tmp_path / "liar.npz", "w", method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    _refused(tmp_path, capsys, "problem.source", ["member X.npy does not hold what its header says"],
             command="ledger", **{"problem.name": "dataset", "problem.source": str(tmp_path / "liar.npz"),
                                  "problem.features": "X*", "optimizer.name": "seq_sgd", "n_users": 500})


def test_ledger_says_how_far_planning_got_on_stderr(tmp_path, capsys, monkeypatch):
    """A 3,000-point `ledger` was silent for 240 s, and (issue 46) for about 3 hours after planning,
    while it composed each point's ledger: planning and the ledgers note their progress on stderr every
    PLANNING_NOTE_S seconds (here after every point), and stdout stays the JSON alone."""
    from pipeline import progress

    monkeypatch.setattr(progress, "PLANNING_NOTE_S", 0.0)
    config = _config(tmp_path, **{"grid": {"privacy.epsilon": [1.0, 2.0, 3.0]}})
    assert cli.main(["ledger", str(config)]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["runs"]) == 3
    lines = captured.err.strip().splitlines()  # quiet unless planning takes PLANNING_NOTE_S (here 0)
    assert [(line.split(":")[0], line.split("] ")[1].split(" ")[0]) for line in lines] == [
        ("planning", "1/3"), ("planning", "2/3"), ("ledgers", "1/3"), ("ledgers", "2/3")], lines


class _ChattyHdfs:
    """An HDFS client as libhdfs is one: its JVM writes its log and stack traces straight to
    file descriptor 2 (88 lines in the red team's probe), then the open fails."""

    @staticmethod
    def from_uri(uri):
        for line in range(88):
            os.write(2, f"WARN ipc.Client: Retrying connect to server: localhost/127.0.0.1:9 ({line})\n".encode())
        raise OSError("HDFS connection to localhost:9 failed: errno 111 (Connection refused)")


@pytest.mark.parametrize("field", ["tracking.out", "problem.source"])
def test_an_hdfs_store_that_cannot_be_reached_is_one_line_with_the_jvm_output_kept_aside(
        tmp_path, capfd, monkeypatch, field):
    import pyarrow.fs

    monkeypatch.setattr(pyarrow.fs, "FileSystem", _ChattyHdfs)
    changes = ({"tracking.out": "hdfs://localhost:9/results"} if field == "tracking.out" else
               {"problem.name": "dataset", "problem.source": "hdfs://localhost:9/data/rows.csv",
                "problem.loss": "least_squares", "optimizer.name": "seq_sgd"})
    config = _config(tmp_path)
    tree = yaml.safe_load(config.read_text())
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        tree[section][key] = value
    config.write_text(yaml.safe_dump(tree))
    assert cli.main(["run", str(config)]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: {field} = 'hdfs://localhost:9/"), lines
    assert "Connection refused" in lines[0] and "the client's own output (88 lines) is in " in lines[0], lines[0]
    held = Path(lines[0].rsplit(" is in ", 1)[1].rstrip(")"))
    assert held.read_text().count("Retrying connect") == 88
    held.unlink()
