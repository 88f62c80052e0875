"""A run's MLflow records written as rows of an SQL tracking store, a tiny run's in one transaction.

MLflow's client spends about 25 ms of CPU a run in its ORM (a session, a `SELECT` of the run and a
commit for each call, an ORM object per metric): more than a small run's compute, so a grid of
thousands of them costs its tracking (issue 43). This module writes the same rows with
SQLAlchemy Core into MLflow's own tables (`mlflow.store.tracking.dbmodels.models`, the schema
the store's migrations built), after MLflow's own validation, and holds the steps that can wait
for the next transaction: about 2 ms a run, one transaction for a tiny one.

It writes only what the client's `create_run`, `log_batch` and `set_terminated` would write for
a new run (tests/test_mlflow_rows.py reads both back through the client and compares), and only
where the store is MLflow's `SqlAlchemyStore`; other stores (a tracking server, files) take the
client (`MlflowTracker`).
"""
from __future__ import annotations

import time
import uuid

from mlflow.entities import LifecycleStage, Metric, Param, RunStatus, SourceType
from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME
from mlflow.utils.uri import append_to_uri_path
from mlflow.utils.validation import _validate_batch_log_data
from sqlalchemy import bindparam, insert, update


def sql_store(client) -> SqlAlchemyStore | None:
    """The SQL store behind an MlflowClient, or None for any other store (or an MLflow whose
    client no longer exposes it: the caller keeps the client's calls)."""
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return store if isinstance(store, SqlAlchemyStore) else None


class RunRows:
    """Writes runs into one experiment of an SQL tracking store, with as few transactions as their
    order allows: the rows of a step that can wait (a tiny run's creation, any run's end as
    FINISHED: `create`, `end` with `hold`) are held and written with the next transaction, or by `flush`.

    A held end leaves a finished run RUNNING for a moment; a kill meanwhile leaves it RUNNING with
    its Parquet row written, which the next start ends FINISHED (MlflowTracker.reconcile), as
    after any kill between the row and the end.

    Args:
      store: the store (`sql_store`).
      experiment_id: the experiment, active.
      artifact_location: the experiment's artifact location (a run's artifacts go under
        <location>/<run id>/artifacts, as MLflow places them).
    """

    def __init__(self, store: SqlAlchemyStore, experiment_id: str, artifact_location: str):
        self.store, self.experiment_id, self.artifact_location = store, int(experiment_id), artifact_location
        self._held: list[tuple[object, list[dict]]] = []  # (statement, rows) for the next transaction, in order

    def create(self, name: str, tags: dict[str, str], params: dict[str, str], hold: bool = False) -> str:
        """Creates a RUNNING run with its tags (and the run-name tag) and parameters.

        Args:
          name, tags, params: the run's.
          hold: write it with the run's metrics (or its end), not now: a tiny run's one transaction.

        Returns:
          The new run's id.

        Raises:
          MlflowException: a key or value MLflow refuses (its own validation).
        """
        # The parameters pass log_batch's validation, which cuts a value past its length limit; the
        # client's create_run takes tags as they are.
        _, checked, _ = _validate_batch_log_data([], [Param(key, value) for key, value in params.items()], [])
        run_id = uuid.uuid4().hex
        self._held.append((insert(SqlRun.__table__), [{
            "run_uuid": run_id, "name": name, "source_type": SourceType.to_string(SourceType.UNKNOWN),
            "source_name": "", "entry_point_name": "", "user_id": "unknown",
            "status": RunStatus.to_string(RunStatus.RUNNING), "start_time": _now_ms(), "end_time": None,
            "deleted_time": None, "source_version": "", "lifecycle_stage": LifecycleStage.ACTIVE,
            "artifact_uri": append_to_uri_path(self.artifact_location, run_id, SqlAlchemyStore.ARTIFACTS_FOLDER_NAME),
            "experiment_id": self.experiment_id}]))
        self._held.append((insert(SqlTag.__table__), [
            {"key": key, "value": value, "run_uuid": run_id} for key, value in {**tags, MLFLOW_RUN_NAME: name}.items()]))
        if checked:
            self._held.append((insert(SqlParam.__table__), [
                {"key": param.key, "value": param.value, "run_uuid": run_id} for param in checked]))
        if not hold:
            self.flush()
        return run_id

    def log_metrics(self, run_id: str, metrics: list[Metric]) -> None:
        """Logs a new run's metrics, and each key's latest value (the greatest (step, timestamp,
        value), MLflow's rule), with the rows held: one transaction. A run's metrics are logged by
        one call: the latest values are inserted, not merged with earlier ones.

        Raises:
          MlflowException: a key or value MLflow refuses (its own validation).
        """
        _validate_batch_log_data(metrics, [], [])
        rows = {}
        for metric in metrics:  # MLflow keeps one of identical metrics
            is_nan, value = self.store.sanitize_metric_value(metric.value)
            row = {"key": metric.key, "value": value, "timestamp": metric.timestamp, "step": metric.step,
                   "is_nan": is_nan, "run_uuid": run_id}
            rows[(metric.key, value, metric.timestamp, metric.step, is_nan)] = row
        latest = {}
        for row in rows.values():
            held = latest.get(row["key"])
            if held is None or (row["step"], row["timestamp"], row["value"]) > (held["step"], held["timestamp"],
                                                                               held["value"]):
                latest[row["key"]] = row
        if rows:
            self._held += [(insert(SqlMetric.__table__), list(rows.values())),
                           (insert(SqlLatestMetric.__table__), list(latest.values()))]
        self.flush()

    def end(self, run_id: str, status: str, hold: bool = False) -> None:
        """Ends a run with a status and the end time, now or, with `hold`, with the next transaction
        (or `flush`)."""
        runs = SqlRun.__table__
        self._held.append((update(runs).where(runs.c.run_uuid == bindparam("ended")).values(
            status=bindparam("new_status"), end_time=bindparam("ended_ms")),
            [{"ended": run_id, "new_status": RunStatus.to_string(RunStatus.from_string(status)), "ended_ms": _now_ms()}]))
        if not hold:
            self.flush()

    def flush(self) -> None:
        """Writes the rows held, in one transaction. Rows a failed transaction held are dropped:
        its runs' failure is recorded by the caller, a finished run left RUNNING is ended by
        the next start (MlflowTracker.reconcile)."""
        held, self._held = self._held, []
        if held:
            with self.store.engine.begin() as connection:
                for statement, rows in held:
                    connection.execute(statement, rows)


def _now_ms() -> int:
    return int(time.time() * 1000)
