"""Results that leave the machine (issue 25): a results folder on an S3-compatible
object store (moto's server on loopback), one dataset across folders with a stable
schema and a unique run identity, the loader, and the layout before 0.2 migrated."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import cli, config, results

GRID = {
    "experiment": "dataset",
    "problem": {"name": "quadratic", "dim": 3, "radius": 1.0},
    "n_users": 300,
    "optimizer": {"name": "seq_sgd"},
    "privacy": {"epsilon": 4.0, "delta": 1e-6, "accounting": "tight"},
    "seeds": [0, 1],
    "grid": {"optimizer.name": ["seq_sgd", "mean_estimation"]},
    "execution": {"backend": "local", "shards": 2, "block_size": 64},
}
RUNS_IN_GRID = 4


@pytest.fixture(scope="module")
def s3(s3_server):
    """The loopback S3 server (conftest) with this module's bucket `dataset`."""
    s3_server["filesystem"].create_dir("dataset")
    return s3_server


def _config(folder: Path, uri: str, **changes) -> Path:
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump({**GRID, **changes, "tracking": {"mlflow_uri": uri}}, sort_keys=False))
    return path


def _run(config_path: Path, out: str, *sets: str) -> int:
    return cli.main(["run", str(config_path), "--out", out, *[arg for item in sets for arg in ("--set", item)]])


def test_a_grid_records_into_s3_resumes_there_and_loads_back(tmp_path, s3, new_mlflow_store, capsys, monkeypatch):
    """`--out s3://...` writes the dataset to the object store (no local folder named after the
    scheme), a rerun skips every finished run, and pipeline.results.load reads it, also by glob."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = f"s3://dataset/team/quick?{s3['options']}"
    monkeypatch.chdir(tmp_path)
    assert _run(_config(tmp_path, uri), out) == 0
    assert not (tmp_path / "s3:").exists()
    written = [info.path for info in s3["filesystem"].get_file_info(pafs.FileSelector("dataset", recursive=True))]
    parts = [path for path in written if "/runs.parquet/part-" in path]
    assert len(parts) == RUNS_IN_GRID and any(path.endswith("/ledger.json") for path in written)
    assert _run(_config(tmp_path, uri), out) == 0
    assert f"{RUNS_IN_GRID} runs: 0 finished, {RUNS_IN_GRID} skipped, 0 failed" in capsys.readouterr().out
    runs, rounds = results.load(out)
    assert len(runs) == RUNS_IN_GRID and set(runs["status"]) == {"finished"}
    assert set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])
    final = rounds.sort_values("round").groupby("mlflow_run_id")["excess_loss"].last()
    assert (final.loc[runs["mlflow_run_id"]].to_numpy() == runs["final_excess_loss"].to_numpy()).all()
    by_glob, _ = results.load(f"s3://dataset/team/*?{s3['options']}")
    assert sorted(by_glob["mlflow_run_id"]) == sorted(runs["mlflow_run_id"])
    # Plain pandas reads a table off the store too, through a pyarrow filesystem, as README's "Results" shows
    # (the keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
    endpoint = dict(option.split("=") for option in s3["options"].split("&"))["endpoint_override"]
    store = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1")
    plain = pd.read_parquet("dataset/team/quick/runs.parquet", filesystem=store)
    assert sorted(plain["mlflow_run_id"]) == sorted(runs["mlflow_run_id"])
    # The report reads the object store too, and draws its figures locally, into ./report/.
    capsys.readouterr()
    assert cli.main(["report", out]) == 0
    printed = capsys.readouterr()
    assert str(tmp_path / "report" / "excess_vs_round.png") in printed.out and not (tmp_path / "s3:").exists()
    # One n in this grid: the loss-against-n figure and its slopes are left out, and the report says why.
    assert printed.err.startswith("skipped excess_vs_n.png: every series has one n")
    assert not (tmp_path / "report" / "excess_vs_n.png").exists() and not (tmp_path / "report" / "slopes.csv").exists()


@pytest.mark.parametrize("out, rule", [
    ("foo://bucket/x", "has an unknown scheme foo://"),
    ("s3://", "must name a bucket and a folder in it"),
    ("s3://no-such-bucket/x?{options}", "is not writable"),
])
def test_an_output_that_cannot_be_written_is_one_config_error_line_and_nothing_is_written(
        tmp_path, s3, out, rule, capsys, monkeypatch):
    """An unknown scheme, no bucket, or a bucket that does not exist: one line, exit 2, before any work."""
    database = tmp_path / "mlflow.db"
    monkeypatch.chdir(tmp_path)
    assert _run(_config(tmp_path, f"sqlite:///{database}"), out.format(options=s3["options"])) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: tracking.out = ") and rule in lines[0], lines
    assert sorted(path.name for path in tmp_path.iterdir()) == ["grid.yaml"]  # no MLflow store, no folder


def test_folders_of_one_grid_load_as_one_dataset_with_a_run_identity_unique_across_them(
        tmp_path, new_mlflow_store):
    """The same grid in two folders: the same run_ids, distinct MLflow run ids; joined on the
    MLflow run id, every round is counted once (a join on run_id would double them)."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    for name in ("a", "b"):
        assert _run(_config(tmp_path, uri), str(tmp_path / "results" / name)) == 0
    runs, rounds = results.load(tmp_path / "results")
    assert len(runs) == 2 * RUNS_IN_GRID and runs["mlflow_run_id"].is_unique
    assert runs["run_id"].nunique() == RUNS_IN_GRID and runs["results_folder"].nunique() == 2
    per_folder = [pd.read_parquet(tmp_path / "results" / name / "rounds.parquet") for name in ("a", "b")]
    assert len(rounds) == sum(len(table) for table in per_folder)
    assert len(rounds.merge(runs[["mlflow_run_id", "results_folder"]], on="mlflow_run_id")) == len(rounds)


def test_every_file_of_a_table_has_one_schema_whatever_its_run_sets(tmp_path, new_mlflow_store):
    """Optional fields left unset are null columns, not missing ones: a run with
    optimizer.step_size and tracking.round_metrics set, and runs without, write one schema;
    the runs rows carry the resolved hyperparameters, constants, times and provenance."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    assert _run(_config(tmp_path, uri, grid={}, seeds=[7]), str(out), "optimizer.step_size=0.05",
                "tracking.round_metrics=final") == 0
    for table in ("runs.parquet", "rounds.parquet"):
        # The schema without pandas' per-file metadata (its column statistics differ by file).
        schemas = {str(pq.read_schema(part).remove_metadata()) for part in (out / table).glob("part-*.parquet")}
        assert len(schemas) == 1, table
    runs = pd.read_parquet(out / "runs.parquet")
    assert set(results.RUN_KINDS) <= set(runs.columns)
    chosen = runs[runs["seed"] == 7].iloc[0]
    assert chosen["optimizer.step_size"] == 0.05 == chosen["resolved.step_size"]
    assert runs[runs["seed"] == 0]["optimizer.step_size"].isna().all()
    assert (runs["problem.L"] == 2.0).all() and (runs["ended_at"] >= runs["started_at"]).all()
    assert runs["package_version"].notna().all() and runs["git_commit"].str.len().gt(0).all()


def test_a_rerun_after_a_failure_keeps_both_attempts_and_the_loader_the_finished_one(tmp_path, new_mlflow_store):
    """A failed attempt stays in runs.parquet (why it failed is kept); the rerun appends the
    finished attempt; the loader returns each run once, its latest finished attempt."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    victim = sorted((out / "runs.parquet").glob("part-*.parquet"))[0]
    row = pd.read_parquet(victim).assign(status="failed", error="RuntimeError: on purpose")
    failed = victim.with_name(victim.name.replace(row["mlflow_run_id"].iloc[0], "0" * 32))
    row.assign(mlflow_run_id="0" * 32).to_parquet(failed)
    victim.unlink()  # the run now has a failed attempt only: it is redone
    assert _run(_config(tmp_path, uri), str(out)) == 0
    every = pd.read_parquet(out / "runs.parquet")
    assert len(every) == RUNS_IN_GRID + 1 and (every["status"] == "failed").sum() == 1
    runs, rounds = results.load(out)
    assert len(runs) == RUNS_IN_GRID and set(runs["status"]) == {"finished"} and "0" * 32 not in set(runs["mlflow_run_id"])
    assert set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])


def _legacy_layout(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rewrites a results folder into the layout before 0.2 (as that version wrote it)."""
    runs, rounds = (pd.read_parquet(out / name) for name in ("runs.parquet", "rounds.parquet"))
    old_runs = runs[["run_id", "mlflow_run_id", "config_hash", "seed", "experiment", "problem.name", "n_users",
                     "optimizer.name", "privacy.epsilon", "privacy.delta", "tracking.out", "tracking.mlflow_uri",
                     "final_excess_loss", "epsilon", "delta", "status", "wall_s"]]
    old_rounds = rounds.drop(columns=["mlflow_run_id", "experiment", "test_loss", "test_accuracy", "optimum_gap"])
    for name in ("runs.parquet", "rounds.parquet"):
        shutil.rmtree(out / name)
    old_runs.to_parquet(out / "runs.parquet", index=False)
    old_rounds.to_parquet(out / "rounds.parquet", index=False)
    (out / "artifacts").rename(out / "runs")  # per-run folders, each with a copy of its rounds
    for run_id in old_runs["run_id"]:
        old_rounds[old_rounds["run_id"] == run_id].to_parquet(out / "runs" / run_id / "rounds.parquet", index=False)
    return old_runs, old_rounds


def test_the_layout_before_0_2_is_read_refused_by_run_and_migrated_by_one_command(
        tmp_path, new_mlflow_store, capsys):
    """A folder whose tables are single files: the loader reads it, `run` refuses it naming the
    migrate command, `migrate` converts it keeping every row, and `run` then resumes it."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    old_runs, old_rounds = _legacy_layout(out)
    runs, rounds = results.load(out)
    assert sorted(runs["mlflow_run_id"]) == sorted(old_runs["mlflow_run_id"]) and len(rounds) == len(old_rounds)
    capsys.readouterr()
    assert _run(_config(tmp_path, uri), str(out)) == 2
    assert f"python -m pipeline migrate {out}" in capsys.readouterr().err
    assert cli.main(["migrate", str(out)]) == 0
    assert sorted(path.name for path in out.iterdir() if not path.name.startswith(".")) == [
        "artifacts", "rounds.parquet", "runs.parquet"]
    assert {path.name for path in (out / "artifacts" / old_runs["run_id"].iloc[0]).iterdir()} == {
        "ledger.json", "config.yaml"}
    migrated, migrated_rounds = results.load(out)
    assert sorted(migrated["mlflow_run_id"]) == sorted(old_runs["mlflow_run_id"])
    assert len(migrated_rounds) == len(old_rounds)
    capsys.readouterr()
    assert _run(_config(tmp_path, uri), str(out)) == 0
    assert f"{RUNS_IN_GRID} skipped" in capsys.readouterr().out


def test_the_mlflow_store_comes_from_the_config_else_mlflow_tracking_uri(monkeypatch):
    """tracking.mlflow_uri, else MLflow's own MLFLOW_TRACKING_URI, else the embedded SQLite file."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert config.expand(dict(GRID))[0]["tracking.mlflow_uri"] == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert config.expand(dict(GRID))[0]["tracking.mlflow_uri"] == "http://127.0.0.1:5999"
    chosen = {**GRID, "tracking": {"mlflow_uri": "sqlite:///chosen.db"}}
    assert config.expand(chosen)[0]["tracking.mlflow_uri"] == "sqlite:///chosen.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///:memory:")
    with pytest.raises(config.ConfigError, match="MLFLOW_TRACKING_URI"):
        config.expand(dict(GRID))


def test_the_summary_prints_the_experiments_runs_table_address(tmp_path, new_mlflow_store, capsys):
    """The MLflow 3.17 UI opens GenAI traces unless the address asks for the runs table."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    assert _run(_config(tmp_path, uri, grid={}, seeds=[0]), str(tmp_path / "out")) == 0
    printed = capsys.readouterr().out
    assert ("http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning"
            "&viewStateShareKey=shuffle-sco-runs") in printed
    # The key names the experiment's shared view, whose every column is one each run has (issue 44 item 4).
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    view = json.loads(client.get_experiment("1").tags["mlflow.sharedViewState.shuffle-sco-runs"])
    (run,) = client.search_runs(["1"])
    have = {f"metrics.`{key}`" for key in run.data.metrics} | {f"params.`{key}`" for key in run.data.params}
    assert len(view["selectedColumns"]) == 9 and set(view["selectedColumns"]) <= have
    assert f"pipeline.results.load({str(tmp_path / 'out')!r}) reads both" in printed


@pytest.mark.parametrize("damage, rule", [
    (lambda part: part.write_bytes(part.read_bytes()[:100]), "is damaged and cannot be read"),
    (lambda part: pd.DataFrame({"x": [1]}).to_parquet(part), "lacks the column(s) run_id, mlflow_run_id, status"),
])
def test_the_loader_names_a_damaged_or_foreign_file_and_what_to_do(tmp_path, new_mlflow_store, damage, rule):
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri, grid={}, seeds=[0]), str(out)) == 0
    part = next((out / "runs.parquet").glob("part-*.parquet"))
    damage(part)
    with pytest.raises(config.ConfigError) as refused:
        results.load(out)
    assert str(part) in str(refused.value) and rule in str(refused.value) and "move it aside" in str(refused.value)


def test_a_finished_attempt_whose_rounds_were_moved_aside_is_redone(tmp_path, new_mlflow_store, capsys):
    """What the damaged-rounds advice says holds: without its rounds part, a run is not finished."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    moved = next((out / "rounds.parquet").glob("part-*.parquet"))
    moved.rename(tmp_path / moved.name)
    capsys.readouterr()
    assert _run(_config(tmp_path, uri), str(out)) == 0
    assert f"{RUNS_IN_GRID} runs: 1 finished, {RUNS_IN_GRID - 1} skipped, 0 failed" in capsys.readouterr().out
    runs, rounds = results.load(out)
    assert len(runs) == RUNS_IN_GRID and set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])


def test_one_driver_at_a_time_on_an_object_store_prefix(tmp_path, s3, new_mlflow_store, capsys, monkeypatch):
    """A second driver on a prefix whose lease is live is refused in one line before any work
    (so two drivers cannot both run a run, nor end each other's MLflow runs); the lease goes
    with its driver, and a lease left unrenewed by a dead driver is taken over."""
    from pipeline.tracking import lease as leases
    from pipeline.tracking.parquet_store import ParquetStore

    out = f"s3://dataset/leased/folder?{s3['options']}"
    first = ParquetStore(out)
    first.lock()
    try:
        assert ParquetStore(out).held_elsewhere()
        monkeypatch.chdir(tmp_path)
        status = _run(_config(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}"), out)
        lines = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and "another driver holds this results folder" in lines[0], lines
        assert sorted(path.name for path in tmp_path.iterdir()) == ["grid.yaml"]  # no MLflow store made
        with pytest.raises(config.ConfigError, match="another driver holds"):
            ParquetStore(out).lock()
    finally:
        first.unlock()
    assert not ParquetStore(out).held_elsewhere()
    # A dead driver's lease: renewed longer ago than TTL_S. It is taken over, then released.
    location = ParquetStore(out).location
    location.write(location.path(leases.LEASE_NAME), b'{"holder": "dead", "host": "h", "pid": 1, "renewed": 0}')
    assert not ParquetStore(out).held_elsewhere()
    uri = new_mlflow_store(tmp_path / "mlflow2.db")
    assert _run(_config(tmp_path, uri, grid={}, seeds=[0]), out) == 0
    assert not ParquetStore(out).held_elsewhere()


def test_a_held_lease_is_renewed_and_two_writers_agree_on_one_holder(s3):
    """The holder rewrites its lease while it runs; of two drivers that both find no lease and
    write theirs, the store keeps one, and after the settle only its writer goes on."""
    import threading
    import time

    from pipeline.tracking.lease import Lease
    from pipeline.tracking.location import open_location

    location = open_location(f"s3://dataset/renewed?{s3['options']}")
    held = Lease(location, renew_s=0.05, settle_s=0.0)
    held.acquire()
    try:
        first = held.live()["renewed"]
        time.sleep(0.3)
        assert held.live()["renewed"] > first and held.live()["holder"] == held.holder
    finally:
        held.release()
    assert held.live() is None
    # Two drivers starting together on a free prefix: exactly one holds it, every time.
    for attempt in range(5):
        rivals = [Lease(location, settle_s=0.3) for _ in range(2)]
        start, won = threading.Barrier(2), []

        def take(lease):
            start.wait()
            try:
                lease.acquire()
                won.append(lease)
            except config.ConfigError:
                pass

        threads = [threading.Thread(target=take, args=(lease,)) for lease in rivals]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1, attempt
        won[0].release()


def test_a_gcs_output_retries_for_seconds_then_is_one_line(tmp_path, capsys, monkeypatch):
    """gs:// retries for 15 minutes by default (pyarrow's retry_time_limit None), so a machine without
    a network hung (issue #29 item 6): the pipeline bounds it, keeps a user's own limit, and refuses an
    unreachable store in one line, exit 2, before any work (here a closed port, limit 1 s)."""
    import datetime

    import pyarrow.fs as pafs

    from pipeline import uris

    def limit(uri):
        return pafs.FileSystem.from_uri(uri)[0].__reduce__()[1][0]["retry_time_limit"]

    assert limit("gs://bucket/x") is None  # pyarrow's own default: minutes of retries
    assert limit(uris.with_retry_limit("gs://bucket/x")) == datetime.timedelta(seconds=uris.GCS_RETRY_LIMIT_S)
    assert limit(uris.with_retry_limit("gs://bucket/x?retry_limit_seconds=60")) == datetime.timedelta(seconds=60)
    assert uris.with_retry_limit("s3://bucket/x?scheme=http") == "s3://bucket/x?scheme=http"
    monkeypatch.setattr(uris, "GCS_RETRY_LIMIT_S", 1)
    monkeypatch.chdir(tmp_path)
    out = "gs://bucket/results?endpoint_override=127.0.0.1:9&scheme=http"
    assert _run(_config(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}"), out) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: tracking.out = '{out}': cannot be opened"), lines
    assert sorted(path.name for path in tmp_path.iterdir()) == ["grid.yaml"]


class _TornStore:
    """A location whose lease reads return the given bodies in turn (a store without atomic
    overwrites serves a renewal half-written)."""

    shown = "torn://"

    def __init__(self, bodies: list[bytes]):
        self.filesystem = self
        self._bodies = bodies

    def path(self, name: str) -> str:
        return name

    def open_input_stream(self, path: str):
        import io

        return io.BytesIO(self._bodies.pop(0))


def test_a_lease_read_half_written_is_read_again():
    import json
    import time

    from pipeline.tracking.lease import Lease

    whole = json.dumps({"holder": "h", "renewed": time.time()}).encode()
    torn = whole[:-7]
    assert Lease(_TornStore([torn, torn, whole])).live()["holder"] == "h"
    assert Lease(_TornStore([torn] * 5)).live() is None  # never whole: not a lease


def test_a_run_an_older_accountant_recorded_is_flagged_when_loaded(tmp_path, new_mlflow_store):
    """Issue 41: runs record the accountants' version; a record-level tight run recorded before
    version 2 (no column) loads with budget_unproven and a warning; a current one loads clean."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    records = {**GRID, "problem": {"name": "quadratic", "dim": 3, "radius": 1.0, "records_per_user": 4},
               "optimizer": {"name": "cldp_sgd", "records_per_round": 2, "rounds": 3, "batch_size": 30},
               "privacy": {"protocol": "girgis_l1", "unit": "record", "epsilon": 4.0, "delta": 1e-6,
                           "accounting": "tight"}, "grid": {}, "seeds": [0]}
    path = tmp_path / "records.yaml"
    path.write_text(yaml.safe_dump({**records, "tracking": {"mlflow_uri": uri}}, sort_keys=False))
    assert _run(path, str(out)) == 0
    runs, _ = results.load(out)
    assert runs["accounting_version"].tolist() == [2]
    assert not runs["accounting_outdated"].any() and not runs["budget_unproven"].any()
    (part,) = (out / "runs.parquet").glob("part-*.parquet")
    pq.write_table(pq.read_table(part).drop_columns(["accounting_version"]), part)  # as version 1 wrote it
    with pytest.warns(UserWarning, match=r"1 run\(s\) recorded before accounting version 2: record-level tight"):
        runs, _ = results.load(out)
    assert runs["accounting_outdated"].tolist() == [True] and runs["budget_unproven"].tolist() == [True]


def test_credentials_in_the_results_uri_are_recorded_nowhere(tmp_path, s3, new_mlflow_store, capsys, monkeypatch):
    """Issue 46: an S3 secret key given in the results URI (pyarrow's `s3://KEY:SECRET@bucket/…`) was
    written in clear into MLflow, the config.yaml artifact, the runs part on S3 and the console. It is
    used to open the store and redacted everywhere it is recorded or printed."""
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYSECRET"
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = f"s3://AKIDTESTING:{secret}@dataset/secret/run?{s3['options']}"
    monkeypatch.chdir(tmp_path)
    assert _run(_config(tmp_path, uri, seeds=[0], grid={}), out) == 0
    printed = capsys.readouterr()
    assert secret not in printed.out + printed.err and "AKIDTESTING:REDACTED@" in printed.out
    runs, _ = results.load(out)  # the URI as written still opens the store
    assert len(runs) == 1 and "AKIDTESTING:REDACTED@" in runs["results_folder"].iloc[0]
    assert (runs["tracking.out"].str.contains("AKIDTESTING:REDACTED@")).all()
    stored = [info.path for info in s3["filesystem"].get_file_info(pafs.FileSelector("dataset/secret", recursive=True))
              if info.type == pafs.FileType.File]
    assert stored and not any(secret.encode() in s3["filesystem"].open_input_stream(path).read() for path in stored)
    local = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.name == "config.yaml" for path in local)  # MLflow's artifact copy is among them
    assert not any(secret.encode() in path.read_bytes() for path in local)
    with pytest.raises(config.ConfigError) as refused:  # an error line that quotes the URI redacts it too
        results.load(f"s3://dataset/nowhere/run?{s3['options']}&secret_key={secret}")  # an option pyarrow refuses
    assert secret not in str(refused.value) and "REDACTED" in str(refused.value)


def _migrated_with_leftovers(tmp_path, new_mlflow_store) -> tuple[Path, str, pd.DataFrame, pd.DataFrame]:
    """A folder migrated, then the old tables planted back as an interrupted cleanup leaves them."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    old_runs, old_rounds = _legacy_layout(out)
    saved = {name: (out / name).read_bytes() for name in ("runs.parquet", "rounds.parquet")}
    assert cli.main(["migrate", str(out)]) == 0
    for name, data in saved.items():  # killed after the swap, before the old tables were removed
        (out / f".{name}.before-0.2").write_bytes(data)
    return out, uri, old_runs, old_rounds


def test_an_interrupted_migrate_is_finished_by_a_second_and_run_refuses_the_folder_between(
        tmp_path, new_mlflow_store, capsys):
    """Issue 46: `run` did not notice an unfinished migration, and migrate run again (as advised)
    deleted every run recorded since (6 runs before, 3 after, exit 0)."""
    out, uri, old_runs, _ = _migrated_with_leftovers(tmp_path, new_mlflow_store)
    capsys.readouterr()
    assert _run(_config(tmp_path, uri, seeds=[0, 1, 2]), str(out)) == 2
    assert f"an interrupted `migrate` left it half converted: run `python -m pipeline migrate {out}`" in \
        capsys.readouterr().err
    assert cli.main(["migrate", str(out)]) == 0
    assert not any(path.name.startswith(".") and "0.2" in path.name for path in out.iterdir())
    assert _run(_config(tmp_path, uri, seeds=[0, 1, 2]), str(out)) == 0
    runs, rounds = results.load(out)
    assert len(runs) == RUNS_IN_GRID + 2 and set(old_runs["mlflow_run_id"]) <= set(runs["mlflow_run_id"])


def test_migrate_again_keeps_every_run_recorded_since(tmp_path, new_mlflow_store):
    """Even with `run`'s refusal bypassed (runs recorded, then the old tables back), a second migrate
    adds the old rows' parts to the dataset folders and removes nothing."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri, grid={}, seeds=[0]), str(out)) == 0
    _legacy_layout(out)
    saved = {name: (out / name).read_bytes() for name in ("runs.parquet", "rounds.parquet")}
    assert cli.main(["migrate", str(out)]) == 0
    assert _run(_config(tmp_path, uri, grid={}, seeds=[0, 1, 2]), str(out)) == 0  # two runs recorded since
    for name, data in saved.items():
        (out / f".{name}.before-0.2").write_bytes(data)
    assert cli.main(["migrate", str(out)]) == 0
    runs, rounds = results.load(out)
    assert sorted(runs["seed"]) == [0, 1, 2] and set(rounds["mlflow_run_id"]) == set(runs["mlflow_run_id"])


def test_migrate_keeps_rows_it_cannot_place_refuses_a_read_only_folder_and_reads_the_oldest_tables(
        tmp_path, new_mlflow_store, capsys, monkeypatch):
    """Issue 46: rounds rows of no finished run were dropped silently; a read-only folder and a table
    without mlflow_run_id ended in tracebacks."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    old_runs, old_rounds = _legacy_layout(out)
    stray = old_rounds.iloc[:3].assign(run_id="no-such-run")
    pd.concat([old_rounds, stray]).to_parquet(out / "rounds.parquet", index=False)
    old_runs.drop(columns=["mlflow_run_id"]).to_parquet(out / "runs.parquet", index=False)
    from pipeline.tracking import parquet_store

    def read_only(*args, **kwargs):  # a read-only mount (chmod does not stop root)
        raise PermissionError(30, "Read-only file system")

    with monkeypatch.context() as patched:
        patched.setattr(parquet_store.pq, "write_table", read_only)
        assert cli.main(["migrate", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"config error: DIR = '{out}': cannot be converted in place (Read-only file system): no row was "
                    "lost; make it writable (or migrate a copy) and run migrate again")
    assert (out / "runs.parquet").is_file() and (out / "rounds.parquet").is_file()
    assert cli.main(["migrate", str(out)]) == 0
    assert "3 rounds rows of no finished run kept in artifacts/unplaced-rounds.parquet" in capsys.readouterr().out
    assert len(pd.read_parquet(out / "artifacts" / "unplaced-rounds.parquet")) == 3
    runs, rounds = results.load(out)
    assert len(runs) == RUNS_IN_GRID and len(rounds) == len(old_rounds)
    assert runs["mlflow_run_id"].str.startswith("migrated-").all()


_STALLED_DRIVER = """
import sys
from pipeline.tracking import lease
lease.TTL_S, lease.RENEW_S, lease.SETTLE_S = 4.0, 0.2, 0.2
from pipeline import cli
sys.exit(cli.main(["run", sys.argv[1], "--out", sys.argv[2]]))
"""


def test_a_driver_that_lost_its_lease_writes_nothing_more(tmp_path, s3, new_mlflow_store, monkeypatch):
    """Issue 46: a driver SIGSTOPped past its lease was taken over as designed, but when it woke it
    went on recording (4 runs finished twice). It now checks its lease before every write and before
    starting a run: it stops, exit 1, and every run is recorded once, by its successor."""
    import signal
    import subprocess
    import sys
    import time

    from pipeline.tracking import lease as leases

    out = f"s3://dataset/stalled/run?{s3['options']}"
    (tmp_path / "a").mkdir()
    first = _config(tmp_path / "a", new_mlflow_store(tmp_path / "a" / "mlflow.db"), seeds=[0, 1, 2])
    lease_path = "dataset/stalled/run/" + leases.LEASE_NAME
    driver = subprocess.Popen([sys.executable, "-c", _STALLED_DRIVER, str(first), out], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, renewals = time.monotonic() + 60, set()
        while len(renewals) < 2:  # renewed once: the lease is the first driver's, past its settle
            assert time.monotonic() < deadline and driver.poll() is None, "the first driver never held the lease"
            try:
                renewals.add(json.loads(s3["filesystem"].open_input_stream(lease_path).read())["renewed"])
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.02)
        driver.send_signal(signal.SIGSTOP)  # stalled holding the lease, its runs not yet recorded
        time.sleep(4.5)  # past its TTL_S
        monkeypatch.setattr(leases, "TTL_S", 4.0)
        monkeypatch.setattr(leases, "SETTLE_S", 0.2)
        (tmp_path / "b").mkdir()
        second = _config(tmp_path / "b", new_mlflow_store(tmp_path / "b" / "mlflow.db"), seeds=[0, 1, 2])
        assert _run(second, out) == 0  # takes the folder over and records every run
        driver.send_signal(signal.SIGCONT)
        assert driver.wait(timeout=120) == 1
        said = driver.stderr.read()
        assert "this driver lost its lease" in said and "in flight when the folder was lost" in said, said
    finally:
        if driver.poll() is None:
            driver.kill()
    parts = [info.path for info in s3["filesystem"].get_file_info(
        pafs.FileSelector("dataset/stalled/run/runs.parquet", recursive=True)) if info.type == pafs.FileType.File]
    rows = [pd.read_parquet(s3["filesystem"].open_input_file(path)).iloc[0] for path in parts]
    assert len(rows) == 2 * 3 and all(row["status"] == "finished" for row in rows)  # 6 runs, each once
    assert len({row["run_id"] for row in rows}) == len(rows)


@pytest.mark.parametrize("renewed", ['"yesterday"', "null"])
def test_a_malformed_lease_is_one_line(tmp_path, s3, capsys, monkeypatch, renewed):
    """Issue 46: a lease whose `renewed` is a string or null was a 22-line TypeError traceback."""
    from pipeline.tracking import lease as leases
    from pipeline.tracking.parquet_store import ParquetStore

    out = f"s3://dataset/malformed/{len(renewed)}?{s3['options']}"
    location = ParquetStore(out).location
    location.write(location.path(leases.LEASE_NAME), f'{{"holder": "x", "renewed": {renewed}}}'.encode())
    monkeypatch.chdir(tmp_path)
    assert _run(_config(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}"), out) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "its lease .lease.json is not one this pipeline writes" in line and "delete it and rerun" in line


def test_a_store_that_dies_under_a_held_lease_stops_the_writes_in_one_line(s3):
    """Issue 46: the store dying mid-grid was an OSError traceback from the lease thread."""
    from pipeline.errors import LeaseLost
    from pipeline.tracking.lease import Lease
    from pipeline.tracking.location import open_location

    held = Lease(open_location(f"s3://dataset/dying?{s3['options']}"), renew_s=0.05, settle_s=0.0)
    held.acquire()
    held.held()  # still ours

    def unreachable(*args, **kwargs):
        raise OSError("When reading information for key 'x': AWS Error NETWORK_CONNECTION")

    held._read = unreachable
    with pytest.raises(LeaseLost, match="its store cannot be reached to confirm this driver's lease"):
        held.held()
    held.release()  # no traceback from the renewer or the release either


def test_foreign_copies_and_gaps_load_in_one_line_or_flagged(tmp_path, s3, new_mlflow_store, capsys, monkeypatch):
    """Issue 46: a part whose `seed` is text ended results.load and run in a pyarrow traceback; a
    parent folder holding a backup copy, or a link back up the tree, gave every run twice (41 times);
    a finished run whose rounds part is gone loaded silently; a glob on an object store was refused."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    parent = tmp_path / "team"
    out = parent / "quick"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    shutil.copytree(out, parent / "quick.backup")
    (parent / "quick" / "loop").symlink_to(parent, target_is_directory=True)
    runs, rounds = results.load(parent)
    assert len(runs) == RUNS_IN_GRID and not runs["mlflow_run_id"].duplicated().any()
    assert not rounds.duplicated(["mlflow_run_id", "round"]).any()
    assert set(runs["results_folder"]) == {str(out)}
    (out / "loop").unlink()
    # a finished run whose rounds part was moved aside: flagged, with a warning
    gone = sorted((out / "rounds.parquet").glob("part-*.parquet"))[0]
    gone.rename(tmp_path / gone.name)
    with pytest.warns(UserWarning, match=r"1 finished run\(s\) have no rounds"):
        runs, _ = results.load(out)
    assert runs["rounds_missing"].sum() == 1
    # a foreign part: `seed` as text
    part = sorted((out / "runs.parquet").glob("part-*.parquet"))[0]
    table = pq.read_table(part)
    foreign = out / "runs.parquet" / "part-foreign.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("seed"), "seed",
                                    pa.array([str(v) for v in table.column("seed").to_pylist()])), foreign)
    with pytest.raises(config.ConfigError) as refused:
        results.load(out)
    assert str(refused.value) == (f"config error: source = '{foreign}': holds seed as string where the other parts "
                                  "hold int64, so it is not this pipeline's runs.parquet (a foreign or older writer's): "
                                  "move it aside")
    capsys.readouterr()
    assert _run(_config(tmp_path, uri), str(out)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "runs.parquet/part-foreign.parquet holds seed as string" in line
    foreign.unlink()
    # globs on an object store, down to a whole bucket
    s3_out = f"s3://dataset/globbed/quick?{s3['options']}"
    assert _run(_config(tmp_path, uri, grid={}, seeds=[0]), s3_out) == 0
    for pattern in ("s3://dataset/globbed/*", "s3://dataset/glob*/quick", "s3://dataset/*"):
        runs, _ = results.load(f"{pattern}?{s3['options']}")
        found = runs["results_folder"].str.contains("dataset/globbed/quick")
        assert found.sum() == 1 and (found.all() or pattern == "s3://dataset/*"), pattern  # the bucket: others too


def test_the_loader_re_derives_every_ledger_where_no_plugin_runs(tmp_path, new_mlflow_store):
    """Issue 46: whatever the driver accepted (a hostile plug-in can disable its check), a reader
    re-derives each run's ledger.json in an isolated process of its own: `ledger_check` says
    "verified", or what is wrong, with a warning."""

    uri = new_mlflow_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    assert _run(_config(tmp_path, uri), str(out)) == 0
    runs, _ = results.load(out)
    assert set(runs["ledger_check"]) == {"verified"}
    ids = sorted(runs["run_id"])
    ledgers = {run_id: out / "artifacts" / run_id / "ledger.json" for run_id in ids}
    lowered = json.loads(ledgers[ids[0]].read_text())
    lowered["accounting"][lowered["accounting_mode"]]["epsilon"] *= 0.5  # a patched ledger, as written
    ledgers[ids[0]].write_text(json.dumps(lowered))
    over = json.loads(ledgers[ids[1]].read_text())
    over["target"]["epsilon"] = 0.01  # a run over its target, recorded finished (the driver's guard patched away)
    for mode in over["accounting"].values():
        mode["checks"]["within_target"] = False
    ledgers[ids[1]].write_text(json.dumps(over))
    ledgers[ids[2]].unlink()
    with pytest.warns(UserWarning, match=r"3 finished run\(s\) whose ledger is not verified"):
        runs, _ = results.load(out)
    check = dict(zip(runs["run_id"], runs["ledger_check"]))
    assert check[ids[0]] == "differs from what its events compose to"
    assert check[ids[1]].startswith("spends ε = ") and check[ids[1]].endswith("above its target")
    assert check[ids[2]] == "no readable ledger.json" and check[ids[3]] == "verified"
    assert "ledger_check" not in results.load(out, verify=False)[0]


def test_a_grid_start_reads_the_runs_parts_again_only_when_they_changed(tmp_path, monkeypatch):
    """check_readable, then finished_runs before and under the lock: one read of a folder's runs
    parts (1.5 s for 1,000 of them), and a fresh one after a part is added or rewritten."""
    from pipeline.tracking import ParquetStore, parquet_store

    reads = []
    real = parquet_store.read_table
    monkeypatch.setattr(parquet_store, "read_table", lambda *args: reads.append(args[2]) or real(*args))
    store = ParquetStore(tmp_path)

    def commit(run_id: str, status: str) -> None:
        row = {"run_id": run_id, "mlflow_run_id": f"m-{run_id}", "experiment": "e", "status": status}
        rounds = pd.DataFrame([{"run_id": run_id, "mlflow_run_id": f"m-{run_id}", "experiment": "e", "round": 0}])
        store.commit(row, rounds, results.KINDS)

    commit("a", "finished")
    store.check_readable()
    assert store.finished_runs() == store.finished_runs() == {"a": "m-a"}
    assert reads == ["runs.parquet"]
    commit("b", "finished")
    assert store.finished_runs() == {"a": "m-a", "b": "m-b"} and reads == ["runs.parquet"] * 2
    commit("b", "failed")  # the same part rewritten (fail_run after a finished row)
    assert store.finished_runs() == {"a": "m-a"} and reads == ["runs.parquet"] * 3
