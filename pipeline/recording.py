"""Records a run in both sinks (MLflow and the Parquet results folder): opened with its
parameters, checked against its plan (the ledger re-derived in a separate process), then its
rounds, ledger and row written; or marked failed in both, with why."""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import warnings
from typing import TYPE_CHECKING, Iterator

import numpy as np
import yaml

from pipeline import engine, plugins
from pipeline.accounting import ACCOUNTING_VERSION
from pipeline.accounting.ledger import LedgerError, PrivacyLedger
from pipeline.config import FIELDS, RunConfig
from pipeline.optimizers import theory
from pipeline.planning import PLUGIN_FIELDS, PlannedRun, ledger_of_groups
from pipeline.run_plot import run_figure

if TYPE_CHECKING:  # the sinks (pandas, mlflow) load where a run is recorded, so `ledger` starts fast
    from pipeline.tracking import MlflowTracker, ParquetStore


METRIC_COLUMNS = ("excess_loss", "epsilon_spent")
RUN_FIGURE = "excess_loss_and_epsilon.png"  # each finished run's figure, an MLflow artifact (pipeline/run_plot.py)


HELDOUT_COLUMNS = ("test_loss", "test_accuracy")  # a dataset's, where it has held-out records


# The attempt id of a run whose MLflow run could not be created (runs.parquet's mlflow_run_id).
NOT_STARTED = "mlflow-not-started"


def _final_only(planned: PlannedRun) -> bool:
    """Whether only the final round's metrics may be logged (tracking.round_metrics)."""
    wanted = planned.config["tracking.round_metrics"]
    return wanted == "final" or (wanted is None and planned.job.optimizer.final_iterate_only)


def _resolved(planned: PlannedRun) -> dict:
    """The run's resolved hyperparameters (resolved.*) and its problem's constants (problem.*)."""
    job = planned.job
    return {**{f"resolved.{k}": v for k, v in job.optimizer.hyperparameters().items()},
            **{f"problem.{k}": v for k, v in job.problem.constants().items()}}


# A run estimated below this many seconds (pipeline/work.py) is created in MLflow with its metrics.
TINY_S = 1.0


def start_run(planned: PlannedRun, tracker: MlflowTracker, folder: str) -> str:
    """Opens a run's MLflow run with its parameters, display name and tags (a tiny run's, TINY_S,
    with its metrics: MlflowTracker.start).

    Args:
      planned: the run.
      tracker: the MLflow sink.
      folder: the results folder (absolute path or URI) it is recorded in.

    Returns:
      The MLflow run id.
    """
    run = planned.config
    tags = {"optimizer": run["optimizer.name"], "protocol": run["privacy.protocol"],
            "accounting": run["privacy.accounting"], "privacy_model": run["privacy.model"],
            "plugins": _plugin_files(run)}
    return tracker.start(run.run_id, run.display_name(),
                         {**run.flat(), **_resolved(planned), "config_hash": run.config_hash}, folder,
                         {key: str(value) for key, value in tags.items() if value is not None},
                         tiny=planned.estimate_s is not None and planned.estimate_s < TINY_S)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _row(planned: PlannedRun, mlflow_run_id: str, started_at: datetime.datetime) -> dict:
    """The runs row's columns that every attempt has, finished or failed: every config
    field (null where unset), the resolved hyperparameters, constants and provenance."""
    from pipeline import results

    run = planned.config
    return {**dict.fromkeys(results.RUN_KINDS), "run_id": run.run_id, "mlflow_run_id": mlflow_run_id,
            "config_hash": run.config_hash, **{field: run[field] for field in FIELDS}, **run.flat(),
            **_resolved(planned), "started_at": started_at, "ended_at": now(), **results.provenance(),
            "accounting_version": ACCOUNTING_VERSION, "plugins": _plugin_files(run)}


def _plugin_files(run: RunConfig) -> str | None:
    """The run's plug-ins as JSON (field → name, file, SHA-256), or None with built-ins only:
    a plug-in is code the run executed, recorded like the package's own commit."""
    found = plugins.source_files({field: (kind, run[field]) for kind, field in PLUGIN_FIELDS.items()})
    return json.dumps(found, sort_keys=True) if found else None


def _call_runs(records: engine.RoundRecords) -> Iterator[tuple[int, int, int, int, int, object]]:
    """The executed calls as ledger_of_groups takes them: runs of consecutive rounds with one
    parameters object, one batch size and one stride between their first users (found with
    numpy: a 10⁸-user seq_sgd is one run of 2·10⁶ rounds, not 2·10⁶ calls)."""
    rounds, first = records.column("round"), records.column("first_user")
    users = records.column("stop_user") - first
    position = 0
    for params, count in records.params_runs():
        span = slice(position, position + count)
        r, f, u = rounds[span], first[span], users[span]
        stride = np.diff(f)
        starts = np.flatnonzero((np.diff(r) != 1) | (np.diff(u) != 0)) + 1
        # A stride change starts a run at the later record (a split too many is harmless).
        starts = np.union1d(np.union1d(starts, np.flatnonzero(np.diff(stride) != 0) + 2), [0])
        for begin, end in zip(starts, [*starts[1:], count]):
            step = int(stride[begin]) if end - begin > 1 else int(u[begin])
            yield int(r[begin]), int(end - begin), int(f[begin]), step, int(u[begin]), params
        position += count


def _measured_columns(job: engine.RunJob, records: list) -> tuple[str, ...]:
    """The extra metric columns a run has: a dataset's held-out metrics (where it has
    held-out records; accuracy for classifiers) and its optimum's Frank–Wolfe gap."""
    if job.problem.exact_loss:
        return ()
    final = records[-1]
    return tuple(column for column in (*HELDOUT_COLUMNS, "optimum_gap") if math.isfinite(getattr(final, column)))


def _rounds_table(planned: PlannedRun, records, ledger: PrivacyLedger, mlflow_run_id: str,
                  measured: tuple[str, ...]):
    """The run's rounds as its rounds table holds them: the rounds measured (a dataset's at its
    evaluation rounds; only the final one where the other iterates are secret), with the
    ledger's spend so far.

    Raises:
      FloatingPointError: a NaN or infinity in the metrics.
    """
    from pipeline import results
    from pipeline.tracking.column_table import ColumnTable

    run, job = planned.config, planned.job
    columns = {name: records.column(name) for name in engine.ROUND_COLUMNS}
    epsilon_spent, delta_spent = ledger.spent_columns()
    # Columns and constants, not a DataFrame: the records' own arrays, and no per-row strings.
    rounds = ColumnTable({
        "run_id": run.run_id,
        "mlflow_run_id": mlflow_run_id,
        "experiment": run["experiment"],
        "round": columns["round"],
        "users_in_round": columns["users"],
        "excess_loss": columns["excess_loss"],
        "population_loss": columns["population_loss"],
        "epsilon_spent": epsilon_spent,
        "delta_spent": delta_spent,
        "wall_s": np.cumsum(columns["seconds"]),
        # every file has every column: NaN where a run does not measure it
        **{column: columns[column] if column in measured else math.nan for column in results.MEASURED},
    })
    if not job.problem.exact_loss:  # a dataset's rounds are measured at job.evaluation_rounds only
        rounds = rounds.take(np.flatnonzero(np.isin(columns["round"], list(job.evaluation_rounds))))
    if _final_only(planned):  # the other iterates are secret: not one of them is logged
        rounds = rounds.take(np.arange(len(rounds))[-1:])
    if not all(np.isfinite(rounds.column(column)).all() for column in ("excess_loss", "population_loss", *measured)):
        raise FloatingPointError("a NaN or infinity reached the round metrics")
    return rounds


def record_run(planned: PlannedRun, records: list, wall_s: float, mlflow_run_id: str, started_at: datetime.datetime,
               tracker: MlflowTracker, store: ParquetStore, waiting=contextlib.nullcontext, plot: bool = True) -> dict:
    """Checks an executed run against its plan and records it in both sinks.

    The MLflow run gets its metrics and artifacts but stays RUNNING until the
    runs.parquet row, which marks the run done, is written; only then is it
    ended FINISHED. So a failure anywhere (a full disk, an unreachable store)
    leaves no FINISHED MLflow run without its row: the caller's `fail_run`
    marks both failed, and a kill in between is settled by
    `MlflowTracker.reconcile` on the next start.

    Args:
      planned: the run.
      records: its round records, from the engine.
      wall_s: how long it ran.
      mlflow_run_id: its MLflow run.
      started_at: when its MLflow run was started (UTC).
      tracker: the MLflow sink.
      store: the Parquet sink.
      waiting: a context in which the wait for the separate re-derivation may be interrupted
        (the grid's `Interrupts.raising_new`: nothing is written before it).

    Returns:
      The run's runs.parquet row.

    Raises:
      RuntimeError: the executed rounds differ from the planned ledger, or the separate
        re-derivation gave no answer in its time (pipeline.accounting.rederive.TIMEOUT_S).
      LedgerError: the ledger, re-derived in a separate process, differs or misses the target.
      FloatingPointError: a NaN or infinity in the results.
    """
    from pipeline.tracking import FINISHED

    run, job = planned.config, planned.job
    ledger = ledger_of_groups(job, _call_runs(records))
    if not ledger.same_calls(planned.ledger):  # the events compared: the ledger is composed once, below
        raise RuntimeError("the executed rounds differ from the planned ledger")
    ledger_json = ledger.to_dict()
    with waiting():
        _check_rederived(planned, ledger, ledger_json)
    measured = _measured_columns(job, records)
    rounds = _rounds_table(planned, records, ledger, mlflow_run_id, measured)
    epsilon, delta = ledger.total()
    row = {**_row(planned, mlflow_run_id, started_at), "final_excess_loss": records[-1].excess_loss,
           "epsilon": epsilon, "delta": delta, **planned.rates, "status": FINISHED, "wall_s": wall_s,
           **{f"final_{column}": getattr(records[-1], column) for column in measured}}
    _write(run, row, rounds, ledger_json, measured, mlflow_run_id, tracker, store, plot)
    return row


def _write(run: RunConfig, row: dict, rounds, ledger_json: dict, measured: tuple[str, ...], mlflow_run_id: str,
           tracker: MlflowTracker, store: ParquetStore, plot: bool) -> None:
    """Writes a checked run to both sinks: its files staged, MLflow's metrics and artifacts (with
    its figure if `plot`), then the row that marks it done, and only then the MLflow run ended
    FINISHED (record_run)."""
    from pipeline import results
    from pipeline.tracking.mlflow_tracker import metric_steps

    files = {
        "ledger.json": json.dumps(ledger_json, indent=2).encode(),
        "config.yaml": yaml.safe_dump(run.nested(), sort_keys=False).encode(),
    }
    store.stage(run.run_id, files)
    logged = rounds.take(metric_steps(len(rounds)))  # the rounds MLflow gets as metrics, and the figure draws
    if plot:  # MLflow's alone: the results folder keeps the data it is drawn from
        try:
            files = {**files, RUN_FIGURE: run_figure(run.display_name(), *(logged.column(name) for name in (
                "round", "excess_loss", "epsilon_spent")), row, run["privacy.epsilon"])}
        except Exception as error:  # a view of data recorded below: it never fails the run, and says why
            warnings.warn(f"run {run.run_id}: its figure was not drawn ({type(error).__name__}: {error})")
    summary = {key: row[key] for key in ("final_excess_loss", "epsilon", "delta", "wall_s", *theory.THEORY_COLUMNS,
                                         *(f"final_{column}" for column in measured))}
    tracker.log_metrics(mlflow_run_id, logged, METRIC_COLUMNS + tuple(c for c in HELDOUT_COLUMNS if c in measured),
                        summary)
    # MLflow gets the run's rounds as an artifact too; the results folder holds them once, in its rounds table.
    tracker.finish(mlflow_run_id, files, rounds, None)  # still RUNNING: not done until the row is written
    store.commit(row, rounds, results.KINDS)  # this row marks the run done
    tracker.end(mlflow_run_id, "FINISHED", hold=True)  # written with the next run's transaction, or at the grid's end


def _check_rederived(planned: PlannedRun, ledger: PrivacyLedger, ledger_json: dict) -> None:
    """Checks a run's ledger where no plug-in reaches: rebuilt from its JSON's events and composed
    again in a separate process (pipeline.accounting.rederive), it must write the same JSON and,
    for a private run, meet the target. A ledger of a plug-in's own events is composed by that
    plug-in's accountant, which runs in this process only: it is checked here alone.

    Raises:
      LedgerError: the ledger written here is not what its events compose to, or misses the target.
    """
    from pipeline.accounting.rederive import rederive

    if not ledger.rebuildable():
        return
    verdict = rederive(ledger_json)
    target = ledger_json["target"]
    if "error" in verdict:
        raise LedgerError(f"the ledger could not be re-derived in a separate process: {verdict['error']}")
    if not verdict["same"]:
        raise LedgerError("the ledger written by this process differs from what its events compose to in a "
                          "separate process (a plug-in patched the ledger or an accountant?): re-derived "
                          f"(ε, δ) = ({verdict['epsilon']:.6g}, {verdict['delta']:.3g})")
    if planned.job.protocol.model != "none" and not verdict["within_target"]:
        raise LedgerError(f"the ledger re-derived in a separate process spends (ε, δ) = ({verdict['epsilon']:.6g}, "
                          f"{verdict['delta']:.3g}), above the target ({target['epsilon']:g}, {target['delta']:g})")


def error_line(error: BaseException) -> str:
    """A run's error in one line: its type and the first line of its message (runs.parquet's `error`)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def fail_run(planned: PlannedRun, wall_s: float, mlflow_run_id: str, started_at: datetime.datetime,
             tracker: MlflowTracker, store: ParquetStore, error: BaseException) -> None:
    """Marks a run failed in both sinks, keeping why; a rerun redoes it.

    The whole traceback goes to the run's folder (OUT/artifacts/<run_id>/traceback.txt)
    and to its MLflow run as an artifact; its one line to runs.parquet's `error`.
    Neither sink's own failure is raised (a full disk, an unreachable
    server): it would hide the run's error behind a second traceback. A run
    without a finished row is redone anyway, and a RUNNING MLflow run left
    behind is ended on the next start.
    """
    import traceback

    import pandas as pd

    from pipeline import results
    from pipeline.tracking import FAILED

    files = {"traceback.txt": "".join(traceback.format_exception(error)).encode()}
    try:
        store.stage(planned.config.run_id, files)
    except Exception:
        pass
    try:  # replaces a finished row written before the MLflow run could be ended
        store.commit({**_row(planned, mlflow_run_id, started_at), "status": FAILED, "wall_s": wall_s,
                      "error": error_line(error)}, pd.DataFrame(), results.KINDS)
    except Exception:
        pass
    try:
        tracker.fail(mlflow_run_id, files)
    except Exception:
        pass
