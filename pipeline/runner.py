"""Runs a config: skip the runs the results folder holds as finished, plan the rest
(refusing bad input before any work), execute them, and record each in MLflow and Parquet."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import time
import uuid
from typing import TYPE_CHECKING, Callable

from pipeline import engine
from pipeline.accounting.rederive import rederive
from pipeline.config import RunConfig
from pipeline.errors import LeaseLost
from pipeline.interrupts import Interrupts, bounded
from pipeline.progress import RunProgress, noted_if_long, progress_bar
from pipeline.run_plot import draws_plots
from pipeline.work import duration

if TYPE_CHECKING:  # planning and recording (the accountants, 0.7 s of imports) load when a run needs them:
    # a rerun of a finished grid plans and records nothing
    from pipeline.planning import PlannedRun
    from pipeline.tracking import MlflowTracker, ParquetStore


@dataclasses.dataclass
class GridSummary:
    """What a grid run did."""

    finished: list[dict] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    folder: str = ""  # the results folder: an absolute path or a URI
    tables: tuple[str, ...] = ()  # where its runs and rounds tables are
    experiment_id: str = ""  # the MLflow experiment


def execute_run(planned: PlannedRun, tracker: MlflowTracker, store: ParquetStore) -> dict:
    """Executes one planned run in this process and records it.

    Returns:
      The run's runs.parquet row.

    Raises:
      Whatever the run raised, after marking it failed in both sinks.
    """
    from pipeline import recording

    began, started_at = time.perf_counter(), recording.now()
    mlflow_run_id = recording.start_run(planned, tracker, store.shown)
    try:
        run = planned.config
        _, records = engine.execute(planned.job, run["execution.backend"], run["execution.shards"])
        return recording.record_run(planned, records, time.perf_counter() - began, mlflow_run_id, started_at, tracker,
                                    store)
    except BaseException as error:
        recording.fail_run(planned, time.perf_counter() - began, mlflow_run_id, started_at, tracker, store, error)
        raise
    finally:
        tracker.flush()


def run_grid(runs: list[RunConfig], say: Callable[[str], None] = print) -> GridSummary:
    """Plans every run not yet finished, then executes them.

    On the Ray backend the grid's runs execute concurrently on the cluster
    (each reserves its shards' CPUs); the driver alone records them. An
    interrupt marks the runs in flight failed, so a rerun redoes them.

    Args:
      runs: the expanded config.
      say: where progress lines go.

    Returns:
      The summary.

    Raises:
      ConfigError: bad input, a damaged results folder, or a folder another
        run holds, before any run starts or anything is written.
      KeyboardInterrupt: after marking the runs in flight failed (Terminated
        for SIGTERM).
    """
    from pipeline.tracking import ParquetStore

    store = ParquetStore(runs[0]["tracking.out"])
    if store.held_elsewhere():  # a folder another run may hold: refuse at once, before planning
        store.lock()
    try:
        return _run_grid(runs, store, say)
    finally:
        store.unlock()


def _run_grid(runs: list[RunConfig], store: ParquetStore, say: Callable[[str], None]) -> GridSummary:
    """run_grid's work, with the folder's lock released by the caller."""
    from pipeline.tracking import MlflowTracker

    first = runs[0]
    store.check_writable()
    store.check_readable()
    # A rerun skips before it plans: runs the folder holds as finished are not planned again (the
    # folder is read again under the lock, where no other driver writes, for what to skip).
    finished = set(store.finished_runs())
    if any(run.run_id not in finished for run in runs):
        rederive.start()  # the ledgers' checking process imports while the grid plans
    planned = _planned(runs, finished, say)
    executor = None
    if planned:
        executor = engine.executor(first["execution.backend"], RunProgress(say))
        # Which Ray (a cluster only if RAY_ADDRESS names it), started before anything is written: one
        # that cannot start or be reached is one line (ray_pool.ensure_ray).
        say(engine.describe_backend(first["execution.backend"]))
    tracker = MlflowTracker(first["tracking.mlflow_uri"], first["experiment"])
    store.lock()  # creates the folder: the first write
    finished = store.finished_runs()  # under the lock: no other run writes it now
    tracker.reconcile(store.shown, finished)  # MLflow runs a killed process left RUNNING
    summary = GridSummary(folder=store.shown, tables=store.table_addresses(), experiment_id=tracker.experiment_id)
    missing = [run for run in runs if run.run_id not in finished and run.run_id not in planned]
    planned.update(_planned(missing, set(), say))  # finished when first read, and no longer (moved aside)
    done, todo = set(finished), []
    for run in runs:
        if run.run_id in done:
            summary.skipped.append(run.run_id)
        else:
            todo.append(planned[run.run_id])
            done.add(run.run_id)  # a repeated run in the grid runs once
    if summary.skipped:
        say(f"{len(summary.skipped)} runs already finished, skipped")
    if todo:
        executor = executor or engine.executor(first["execution.backend"], RunProgress(say))
        _announce_work(todo, first["execution.backend"], say)
        _compile_first(todo, say)
        _Grid(tracker, store, executor, summary, say).run(todo)
    elif executor is not None:
        bounded(executor.close)
    return summary


def _planned(runs: list[RunConfig], finished: set[str], say: Callable[[str], None]) -> dict[str, PlannedRun]:
    """The runs not in `finished`, planned (each distinct run once), by run id.

    Raises:
      ConfigError: the first rule a run breaks.
    """
    pending = list({run.run_id: run for run in runs if run.run_id not in finished}.values())
    if not pending:
        return {}
    from pipeline.planning import plan_all  # here: a rerun of a finished grid loads no accountant

    # Planning calibrates every protocol (a numerical search per round shape): say so.
    say(f"planning {len(pending)} runs (protocol calibration and ledgers)")
    return {item.config.run_id: item for item in plan_all(pending, say)}


# A grid whose estimated compute reaches this many seconds says so before it starts.
ANNOUNCE_S = 10.0


def _announce_work(todo: list[PlannedRun], backend: str, say: Callable[[str], None]) -> None:
    """Says the grid's estimated compute (pipeline/work.py) when it is long: a run of one round
    over 10⁹ users shows no rounds' progress for a minute or more; and on Ray, which runs are so
    small that they run in the driver (engine.driver_runs)."""
    tiny = engine.driver_runs([item.job for item in todo], backend)
    if tiny:
        say(f"{tiny} of {len(todo)} runs are tiny and run in this process, not in Ray tasks: a task costs more "
            "than their compute (SHUFFLE_SCO_DRIVER_WORK=0 sends every run to Ray)")
    known = [item.estimate_s for item in todo if item.estimate_s is not None]
    if sum(known) >= ANNOUNCE_S:
        unknown = len(todo) - len(known)
        say(f"estimated compute: up to {duration(sum(known))} on one core for {len(known)} runs, the longest "
            f"{duration(max(known))} (counted from their schedules at this machine's speed; execution.max_minutes "
            "caps a run)" + (f"; {unknown} literal runs not estimated" if unknown else ""))


# Users of the small runs that compile the kernels before a grid (_compile_first).
WARM_USERS = 600


def _compile_first(todo: list[PlannedRun], say: Callable[[str], None]) -> None:
    """Compiles the fused rounds' kernels that the runs call, here and before them, when numba's
    cache lacks one (a fresh install, an edit, an optimizer's first run with its protocol's kernel:
    engine.kernels_cached): said first, then a small
    run of each distinct (problem, optimizer, protocol, accounting) on the local backend, about
    15 s, after which the shard processes load the cache instead of each compiling while its
    run's progress counts rounds. A small run that cannot be planned is left out (its run
    compiles as before), as is a kernel the warm cache lacks (compiled in its run)."""
    from pipeline import planning

    needing = {tuple(item.config[field] for field in ("problem.name", "optimizer.name", "privacy.protocol",
                                                      "privacy.accounting")): item
               for item in todo if engine.compiles(item.job)}
    if not needing or engine.kernels_cached(tuple(item.job for item in needing.values())):
        return
    say("compiling the fused rounds' kernels: once per install and optimizer (numba caches them), about 15 s "
        "on 2 cores")
    began = time.perf_counter()
    for config in (item.config for item in needing.values()):
        # As many shards as the run, up to two (blocks of half the users): a fully interactive run on one
        # shard carries its rounds in the round kernel, on several it sends blocks' partials (block kernels).
        shards = 1 if config.values["execution.shards"] == 1 else 2
        block_size = config.values["execution.block_size"] if shards == 1 else WARM_USERS // shards
        small = RunConfig({**config.values, "n_users": WARM_USERS, "execution.backend": "local",
                           "execution.shards": shards, "execution.block_size": block_size}, config.seed)
        with contextlib.suppress(Exception):
            engine.execute(planning.plan_run(small).job, "local", shards)
    say(f"kernels compiled in {time.perf_counter() - began:.0f} s")


class _Grid:
    """The runs of a grid in flight: started in MLflow and submitted while the executor has room,
    recorded as they finish, and failed together if the grid stops.

    Args:
      tracker, store: the sinks.
      executor: the engine's executor of the grid's backend.
      summary: what the grid did, filled in.
      say: where progress lines go.
    """

    def __init__(self, tracker: MlflowTracker, store: ParquetStore, executor, summary: GridSummary,
                 say: Callable[[str], None]):
        self.tracker, self.store, self.executor, self.summary, self.say = tracker, store, executor, summary, say
        self.started: dict[str, tuple[PlannedRun, str, float, datetime.datetime]] = {}
        self.total, self.began, self.plots = 0, time.perf_counter(), True

    def run(self, todo: list[PlannedRun]) -> None:
        """Executes the runs, recording each as it finishes.

        Raises:
          KeyboardInterrupt: after marking the runs in flight failed (Terminated for SIGTERM).
          LeaseLost: the folder was taken over; the runs in flight are listed on it.
        """
        queue, self.total = list(todo), len(todo)
        self.plots = draws_plots(todo[0].config["tracking.run_plots"], self.total)
        with Interrupts(self.fail_in_flight) as interrupts:
            try:
                while queue or self.executor.in_flight():
                    while queue and self.executor.in_flight() < self.executor.capacity():
                        self._start(queue.pop(0))
                        # Before the next call to Ray: one on a Ray that the signal ended blocks in native code.
                        interrupts.check()
                    if not self.executor.in_flight():  # every run left failed to start
                        continue
                    with interrupts.raising():
                        run_id, outcome = self.executor.next_done()
                    self._record(run_id, outcome, interrupts)
                    interrupts.check()  # a Ctrl-C or SIGTERM while this run was recorded stops the grid here
                self.tracker.flush()  # the last runs' ends
            except BaseException as stop:  # an interrupt (or the driver's own failure): the runs in flight stop with it
                if isinstance(stop, LeaseLost):
                    stop.in_flight = sorted(self.started)  # the CLI lists them
                # The sinks first: a SIGTERM to the process group (Slurm) killed a local Ray with the driver,
                # and cancelling on a dead Ray blocks for its 60 s GCS timeout, then ends the process.
                self.fail_in_flight(stop)  # further signals wait for this
                with contextlib.suppress(Exception):  # finished runs' held ends; else the next start ends them
                    self.tracker.flush()
                bounded(self.executor.cancel)
                raise
            finally:
                bounded(self.executor.close)

    def _progress(self, note: str) -> None:
        completed = len(self.summary.finished) + len(self.summary.failed)
        self.say(f"{progress_bar(completed, self.total, len(self.summary.failed), time.perf_counter() - self.began)}"
                 f"  {note}")

    def fail_in_flight(self, stop: BaseException) -> None:
        """Marks every run in flight failed (also the signal watchdog's, if the main thread is blocked)."""
        from pipeline.recording import fail_run

        for item, mlflow_run_id, run_began, started_at in list(self.started.values()):
            fail_run(item, time.perf_counter() - run_began, mlflow_run_id, started_at, self.tracker, self.store, stop)

    def _start(self, item: PlannedRun) -> None:
        """Opens a run's MLflow run and submits it; a run the store refuses fails alone."""
        from pipeline.recording import NOT_STARTED, error_line, fail_run, now, start_run

        self.store.check_held()  # a driver that lost the folder starts no MLflow run in it (LeaseLost)
        try:
            mlflow_run_id = start_run(item, self.tracker, self.store.shown)
        except Exception as err:  # the store refused it (full, read-only, unreachable)
            # An attempt id of its own: the row's part file must not collide with another's.
            fail_run(item, 0.0, f"{NOT_STARTED}-{uuid.uuid4().hex}", now(), self.tracker, self.store, err)
            self.summary.failed.append((item.config.run_id, error_line(err)))
            self._progress(f"{item.config.run_id} FAILED to start its MLflow run: {error_line(err)}")
            return
        self.started[item.config.run_id] = (item, mlflow_run_id, time.perf_counter(), now())
        self.executor.submit(item.config.run_id, item.job, item.config["execution.shards"])

    def _record(self, run_id: str, outcome, interrupts: Interrupts) -> None:
        """Records a finished run, or marks it failed: one failing run does not stop the grid."""
        from pipeline.recording import fail_run, record_run

        item, mlflow_run_id, run_began, started_at = self.started[run_id]  # in flight until recorded or failed
        wall_s = time.perf_counter() - run_began
        try:
            if isinstance(outcome, BaseException):
                raise outcome
            _, records, wall_s = outcome
            with noted_if_long(f"  {run_id}: rounds done; recording it (its ledger re-derived in a separate process, "
                               "then MLflow and Parquet)", self.say):
                row = record_run(item, records, wall_s, mlflow_run_id, started_at, self.tracker, self.store,
                                 interrupts.raising_new, self.plots)
            del self.started[run_id]
            self.summary.finished.append(row)
            config = item.config
            note = f"{run_id} {config['optimizer.name']} n={config['n_users']} eps={config['privacy.epsilon']:g} " \
                   f"{config['privacy.accounting']}: excess loss {row['final_excess_loss']:.4g}"
        except Exception as err:
            if isinstance(err, LeaseLost):  # the folder is lost: nothing more is written, the grid stops
                raise
            del self.started[run_id]
            fail_run(item, wall_s, mlflow_run_id, started_at, self.tracker, self.store, err)
            self.summary.failed.append((run_id, f"{type(err).__name__}: {err}"))
            note = f"{run_id} FAILED: {type(err).__name__}: {err}"
        self._progress(note)
