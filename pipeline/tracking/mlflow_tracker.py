"""MLflow: one run per (grid point, seed), params, batched metrics, artifacts."""
from __future__ import annotations

import glob
import json
import logging
import os
import secrets
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from pipeline.errors import ConfigError
from pipeline.uris import first_line, redact
from pipeline.tracking.column_table import ColumnTable
from pipeline.tracking.mlflow_rows import RunRows, sql_store
from pipeline.tracking.parquet_store import write_frame

# MLflow accepts at most 1000 metrics and 100 params per log_batch call.
METRICS_PER_BATCH = 1000
PARAMS_PER_BATCH = 100
# Steps logged per metric; rounds.parquet keeps every round.
MAX_METRIC_STEPS = 500
SEARCH_PAGE = 10_000  # runs a search returns a page (SQL stores take up to 50,000)
# Seconds to wait for a tracking server's /health before refusing to start
# (MLflow's own client retries for minutes).
SERVER_PROBE_TIMEOUT_S = 5
RUN_ID_TAG = "run_id"
FOLDER_TAG = "results_folder"
REPORT_TAG = "pipeline_report"
# MLflow 3's experiment kind: model training (runs table), not GenAI (traces).
# The 3.17 UI routes by its sidebar switch instead (README, MLflow).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
# Kinds the UI guesses or leaves unset; a user's explicit choice is kept.
_UNCHOSEN_KINDS = ("", "no_inferred_type", "genai_development_inferred", "custom_model_development_inferred")
# A new SQLite store is built as `NAME.creating-RANDOM` beside it, then linked into place:
# such a file left behind was a creation killed midway, never a store.
PARTIAL_INFIX = ".creating-"
# Seconds after which a partial store's creator is taken for dead (creation takes 2-4 s).
STALE_PARTIAL_S = 600


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (its SQLAlchemy options, `?timeout=30`, aside), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?", 1)[0]).resolve()


def _local_folder(location: str) -> Path | None:
    """The folder of an artifact location on this machine's file system (file:///…), else None."""
    parsed = urlparse(location)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return Path(urllib.request.url2pathname(parsed.path))


def ui_command(uri: str) -> str:
    """The shell command that opens the MLflow UI on this store."""
    database = sqlite_path(uri)
    if database is not None:
        return f"mlflow ui --backend-store-uri sqlite:///{database}"
    return f"open {uri} in a browser" if urlparse(uri).scheme in ("http", "https") else f"mlflow ui --backend-store-uri {uri}"


def _remove_stale_partials(database: Path) -> None:
    """Deletes the partial stores (and their SQLite journals) that killed creations
    of `database` left: those older than STALE_PARTIAL_S, and any already linked
    into place (a kill between the link and the clean-up)."""
    try:
        partials = list(database.parent.glob(f"{glob.escape(database.name)}{PARTIAL_INFIX}*"))
    except OSError:
        return  # an unreadable folder: MLflow reports it on opening the store
    for partial in partials:
        try:
            linked = database.exists() and os.path.samefile(partial, database)
            if linked or time.time() - partial.lstat().st_mtime > STALE_PARTIAL_S:
                partial.unlink()
        except OSError:
            pass  # gone meanwhile (another process cleaned it), or not ours to delete: debris only


def create_sqlite_store(database: Path) -> None:
    """Creates a new MLflow SQLite store at `database`, atomically: a killed
    process leaves either no store or a whole one, never a half-migrated file
    that every later open refuses ("table ... already exists").

    MLflow creates the schema with Alembic migrations (2-4 s) that SQLite
    commits one by one, so they are run on a partial file beside the target,
    which is then hard-linked into place: a link never replaces a file, so a
    store another process created meanwhile is kept (theirs is as new as ours).

    Args:
      database: the store's file; its folder exists.

    Raises:
      Exception: whatever MLflow or the file system raise (the caller reports it).
    """
    _remove_stale_partials(database)
    partial = database.with_name(f"{database.name}{PARTIAL_INFIX}{secrets.token_hex(6)}")
    try:
        MlflowClient(tracking_uri=f"sqlite:///{partial}").search_experiments(max_results=1)  # migrates it
        try:
            os.link(partial, database)
        except FileExistsError:
            pass  # another process's store came first: keep it
        except OSError:
            # A file system without hard links: a rename, which replaces another process's
            # store only if one appears in the instant between the check and the rename.
            if not database.exists():
                os.replace(partial, database)
    finally:
        for leftover in (partial, partial.with_name(partial.name + "-journal")):
            leftover.unlink(missing_ok=True)


# The runs table's columns as a view shared through the experiment (the UI's "share view": an
# experiment tag it reads when the address names its key): the results, then the grid's axes.
# Without it the 3.17 table shows no metric or parameter column until the user picks them.
SHARED_VIEW_KEY = "shuffle-sco-runs"
SHARED_VIEW_TAG = "mlflow.sharedViewState." + SHARED_VIEW_KEY
SHARED_VIEW = json.dumps({"selectedColumns": [
    *(f"metrics.`{name}`" for name in ("final_excess_loss", "epsilon", "theory_rate")),
    *(f"params.`{name}`" for name in ("optimizer.name", "n_users", "privacy.epsilon", "privacy.accounting",
                                      "privacy.protocol", "problem.name"))], "runsHiddenMode": "SHOW_ALL"})


def experiment_address(uri: str, experiment_id: str) -> str:
    """The experiment's runs table in the MLflow UI, with the shared view's columns (the 3.17 UI
    opens GenAI traces unless the address asks for `workflowType=machine_learning`)."""
    server = redact(uri.rstrip("/")) if urlparse(uri).scheme in ("http", "https") else "http://127.0.0.1:5000"
    return (f"{server}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={SHARED_VIEW_KEY}")


def _tag_filter(key: str, value: str) -> str | None:
    """An MLflow search filter for runs whose tag `key` equals `value`, or None where MLflow's
    filter grammar cannot quote the value (it holds both quote marks; the caller then filters)."""
    for quote in ("'", '"'):
        if quote not in value:
            return f"tags.`{key}` = {quote}{value}{quote}"
    return None


def metric_steps(rounds: int) -> np.ndarray:
    """Every round if there are few; else log-spaced rounds and the last."""
    if rounds <= MAX_METRIC_STEPS:
        return np.arange(rounds)
    spaced = np.unique(np.round(np.geomspace(1, rounds, MAX_METRIC_STEPS)).astype(int) - 1)
    return np.union1d(spaced, [rounds - 1])


class MlflowTracker:
    """One MLflow experiment in one tracking store.

    Args:
      uri: the tracking URI (sqlite:///..., file:///..., http://...).
      experiment: the experiment name.

    Raises:
      ConfigError: the store cannot be opened.
    """

    def __init__(self, uri: str, experiment: str):
        logging.getLogger("mlflow").setLevel(logging.ERROR)
        logging.getLogger("alembic").setLevel(logging.ERROR)
        # MLflow prints "View run … / View experiment …" links for every run ended on a tracking
        # server, which open its GenAI view: the grid prints one address, of the classic runs
        # table, at its end (tracking.experiment_address). A user who wants the links sets it false.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        self.uri = uri
        self._attempts_by_folder: dict[str, dict[str, list[str]]] = {}  # _attempts
        database = sqlite_path(uri)
        if urlparse(uri).scheme in ("http", "https"):
            try:
                urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=SERVER_PROBE_TIMEOUT_S).close()
            except (urllib.error.URLError, OSError) as err:
                reason = getattr(err, "reason", err)
                raise ConfigError("tracking.mlflow_uri", uri, f"MLflow server not reachable ({reason})") from None
        try:
            if database is not None:
                database.parent.mkdir(parents=True, exist_ok=True)
                if database.exists():
                    _remove_stale_partials(database)
                else:
                    create_sqlite_store(database)
            self.client = MlflowClient(tracking_uri=uri)
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                # Artifacts beside a SQLite file, not in the working directory.
                location = (database.parent / "mlartifacts").as_uri() if database is not None else None
                self.experiment_id = self.client.create_experiment(
                    experiment, artifact_location=location,
                    tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING, SHARED_VIEW_TAG: SHARED_VIEW})
                found = self.client.get_experiment(self.experiment_id)
            else:
                self.experiment_id = found.experiment_id
                if found.tags.get(EXPERIMENT_KIND_TAG, "") in _UNCHOSEN_KINDS:
                    self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
                if found.tags.get(SHARED_VIEW_TAG) != SHARED_VIEW:
                    self.client.set_experiment_tag(self.experiment_id, SHARED_VIEW_TAG, SHARED_VIEW)
            self._artifact_root = _local_folder(found.artifact_location)
            # An SQL store's runs are written as rows, 2 ms a run instead of the client's 25 (mlflow_rows).
            store = sql_store(self.client)
            self._rows = RunRows(store, self.experiment_id, found.artifact_location) if store is not None else None
        except Exception as err:  # MLflow raises many types; report them as one line
            raise ConfigError("tracking.mlflow_uri", uri, f"cannot open the MLflow store ({first_line(err)})") from None

    def start(self, run_id: str, name: str, params: dict[str, object], folder: str,
              tags: dict[str, str] | None = None, tiny: bool = False) -> str:
        """Starts the MLflow run of a pipeline run, deleting stale attempts.

        The caller starts only runs that the Parquet store does not hold as
        finished, so any MLflow run tagged with `run_id` and the same results
        folder is an interrupted attempt: it is deleted, keeping one MLflow
        run per (grid point, seed) and folder. Runs recorded for other folders
        are left alone.

        Args:
          run_id: the pipeline run id (tagged, for resume).
          name: the run's display name.
          params: flattened parameters.
          folder: the resolved results folder the run is recorded in.
          tags: further run tags (for the UI's group-by and filters).
          tiny: a run of moments: in an SQL store it is created with its metrics, one transaction
            (mlflow_rows.RunRows), not before its compute.

        Returns:
          The MLflow run id.
        """
        for stale in self._attempts(folder).pop(run_id, []):
            self.client.delete_run(stale)
        run_tags = {**(tags or {}), RUN_ID_TAG: run_id, FOLDER_TAG: folder}
        values = {key: str(value) for key, value in params.items() if value is not None}
        if self._rows is not None:
            return self._rows.create(name, run_tags, values, hold=tiny)
        mlflow_run_id = self.client.create_run(self.experiment_id, run_name=name, tags=run_tags).info.run_id
        items = [Param(key, value) for key, value in values.items()]
        for at in range(0, len(items), PARAMS_PER_BATCH):
            self.client.log_batch(mlflow_run_id, params=items[at:at + PARAMS_PER_BATCH])
        return mlflow_run_id

    def _attempts(self, folder: str) -> dict[str, list[str]]:
        """run_id → the MLflow runs recorded for `folder` before this tracker started any: read in
        one paged search the first time, not one search a run (5 ms each, of runs costing as little),
        and of that folder's runs alone (the whole experiment's took 0.1 s per 100 runs in the store).
        The caller holds the folder's lock, so no other process adds attempts meanwhile."""
        if folder not in self._attempts_by_folder:
            found: dict[str, list[str]] = {}
            token, in_folder = None, _tag_filter(FOLDER_TAG, folder) or ""
            while True:
                page = self.client.search_runs([self.experiment_id], filter_string=in_folder, max_results=SEARCH_PAGE,
                                               page_token=token)
                for run in page:
                    if run.data.tags.get(FOLDER_TAG) == folder and RUN_ID_TAG in run.data.tags:
                        found.setdefault(run.data.tags[RUN_ID_TAG], []).append(run.info.run_id)
                token = page.token
                if not token:
                    break
            self._attempts_by_folder[folder] = found
        return self._attempts_by_folder[folder]

    def log_metrics(self, mlflow_run_id: str, logged: ColumnTable, columns: tuple[str, ...],
                    summary: dict[str, float]) -> None:
        """Logs per-round metrics with step = round and the final metrics at step 0, once per run: in
        one transaction into an SQL store, else in as few batches as MLflow takes (METRICS_PER_BATCH each).

        Args:
          mlflow_run_id: the MLflow run.
          logged: the rounds to log (`metric_steps` of the run's rounds table).
          columns: the metric columns to log.
          summary: final metrics.
        """
        timestamp = int(time.time() * 1000)
        steps = logged.column("round").tolist()
        metrics = [Metric(key, float(value), timestamp, 0) for key, value in summary.items()] + [
            Metric(column, float(value), timestamp, int(step))
            for column in columns
            for step, value in zip(steps, logged.column(column).tolist())
        ]
        if self._rows is not None:
            self._rows.log_metrics(mlflow_run_id, metrics)
            return
        for at in range(0, len(metrics), METRICS_PER_BATCH):
            self.client.log_batch(mlflow_run_id, metrics=metrics[at:at + METRICS_PER_BATCH])

    def finish(self, mlflow_run_id: str, files: dict[str, bytes], rounds: ColumnTable | None,
               status: str | None) -> None:
        """Logs artifacts, then ends the run (unless status is None).

        Args:
          mlflow_run_id: the MLflow run.
          files: artifacts, name → content.
          rounds: the run's rounds, logged as rounds.parquet (None: none).
          status: "FINISHED" or "FAILED"; None leaves the run RUNNING, for the
            caller to `end` once the results folder records it.
        """
        self._log_files(mlflow_run_id, files, rounds)
        if status is not None:
            self.end(mlflow_run_id, status)

    def _log_files(self, mlflow_run_id: str, files: dict[str, bytes], rounds: ColumnTable | None = None) -> None:
        """Writes a run's artifacts: into its artifact folder where the experiment keeps artifacts in a
        local folder (as MLflow's local artifact repository would, without copying a temporary folder:
        about 5 of a tiny run's 45 ms), else uploaded from a temporary local folder (MLflow logs files)."""
        if not files and rounds is None:
            return
        if self._artifact_root is not None:
            # MLflow's layout of a run's artifacts: <the experiment's artifact location>/<run id>/artifacts.
            folder = self._artifact_root / mlflow_run_id / "artifacts"
            folder.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                (folder / name).write_bytes(content)
            if rounds is not None:
                write_frame(rounds, str(folder / "rounds.parquet"))
            return
        with tempfile.TemporaryDirectory(prefix="shuffle-sco-artifacts-") as folder:
            for name, content in files.items():
                (Path(folder) / name).write_bytes(content)
            if rounds is not None:
                write_frame(rounds, str(Path(folder) / "rounds.parquet"))
            self.client.log_artifacts(mlflow_run_id, folder)

    def end(self, mlflow_run_id: str, status: str, hold: bool = False) -> None:
        """Ends a run with a status ("FINISHED" or "FAILED"); with `hold`, an SQL store writes it with
        the next transaction or `flush` (mlflow_rows.RunRows)."""
        if self._rows is not None:
            self._rows.end(mlflow_run_id, status, hold)
        else:
            self.client.set_terminated(mlflow_run_id, status=status)

    def flush(self) -> None:
        """Writes what the SQL store's writer holds (mlflow_rows.RunRows): the grid calls it when it stops."""
        if self._rows is not None:
            self._rows.flush()

    def reconcile(self, folder: str, finished: dict[str, str]) -> int:
        """Ends the runs a killed process left RUNNING for a results folder, as the folder says.

        Call it while holding the folder's lock: no live process is then
        recording into it, so every RUNNING run of the folder is an orphan.
        One whose Parquet row says finished (a kill between the row and the
        end of the MLflow run) becomes FINISHED; any other, FAILED (its run
        is redone and the attempt deleted on the next start).

        Args:
          folder: the resolved results folder.
          finished: run_id → mlflow_run_id of the runs finished in Parquet.

        Returns:
          How many runs were ended.
        """
        orphans = self.client.search_runs([self.experiment_id], filter_string="attributes.status = 'RUNNING'",
                                          max_results=10_000)
        ended = 0
        for run in orphans:
            if run.data.tags.get(FOLDER_TAG) != folder:
                continue
            done = finished.get(run.data.tags.get(RUN_ID_TAG)) == run.info.run_id
            self.end(run.info.run_id, "FINISHED" if done else "FAILED")
            ended += 1
        return ended

    def log_report(self, folder: Path) -> str:
        """Logs a report's files as the experiment's one "report" run,
        replacing an earlier report.

        Args:
          folder: the report's folder.

        Returns:
          The report's MLflow run id.
        """
        for old in self.client.search_runs([self.experiment_id], filter_string=f"tags.{REPORT_TAG} = 'true'"):
            self.client.delete_run(old.info.run_id)
        run = self.client.create_run(self.experiment_id, run_name="report", tags={REPORT_TAG: "true"})
        self.client.log_artifacts(run.info.run_id, str(folder))
        self.client.set_terminated(run.info.run_id, status="FINISHED")
        return run.info.run_id

    def fail(self, mlflow_run_id: str, files: dict[str, bytes] | None = None) -> None:
        """Ends a run as FAILED, with `files` (its traceback) logged first.

        Args:
          mlflow_run_id: the MLflow run.
          files: artifacts, name → content.
        """
        try:  # the status matters more than the artifact: set it even if the upload fails
            self._log_files(mlflow_run_id, files or {})
        finally:
            self.end(mlflow_run_id, "FAILED")
