"""Runs a config: plan every run (refusing bad input before any work), skip
completed ones, execute the rest, and record them in MLflow and Parquet."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from pipeline import engine
from pipeline.accounting.ledger import PrivacyLedger
from pipeline.config import RunConfig
from pipeline.errors import ConfigError
from pipeline.optimizers import OPTIMIZERS, theory
from pipeline.problems import build_problem
from pipeline.protocols import build_protocol
from pipeline.protocols.cjmp import LITERAL_MAX_MESSAGES, MAX_PRECISION, PvecParams, literal_messages
from pipeline.tracking import FAILED, FINISHED, MlflowTracker, ParquetStore

METRIC_COLUMNS = ("excess_loss", "epsilon_spent")
# Overrides that mean nothing to an optimizer are refused rather than ignored.
_NOT_APPLICABLE = {
    "mean_estimation": ("optimizer.rounds", "optimizer.batch_size", "optimizer.step_size"),
    "full_gd": ("optimizer.batch_size",),
    "full_gd_smoothed": ("optimizer.batch_size",),
}


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """A validated run: its config, the job the engine runs, and its planned ledger."""

    config: RunConfig
    job: engine.RunJob
    ledger: PrivacyLedger


def _ledger(job: engine.RunJob, records: list[tuple[int, int, int, object]]) -> PrivacyLedger:
    """A ledger of (round, first user, stop user, protocol params) calls."""
    optimizer, schedule = job.optimizer, job.schedule
    ledger = PrivacyLedger(schedule.composition, optimizer.epsilon, optimizer.delta, schedule.slack,
                           job.protocol.accounting, schedule.release, schedule.rounds - 1)
    for round_index, first, stop, params in records:
        ledger.record(round_index, first, stop, job.protocol.event(params, job.block_size))
    return ledger


def plan_run(run: RunConfig) -> PlannedRun:
    """Builds a run's job and planned ledger, checking every cross-field rule.

    Args:
      run: the run's config.

    Returns:
      The planned run.

    Raises:
      ConfigError: a rule the run breaks, including a planned ledger above
        the target (the budget guard).
    """
    name = run["optimizer.name"]
    for field in _NOT_APPLICABLE.get(name, ()):
        if run[field] is not None:
            raise ConfigError(field, run[field], f"does not apply to optimizer {name}")
    problem = build_problem(run["problem.name"], run["problem.dim"], run["problem.radius"])
    protocol = _protocol(run)
    cls = OPTIMIZERS[name]
    _check_pairing(run, cls, protocol, problem)
    options = {"sampling": run["optimizer.sampling"]} if run["optimizer.sampling"] is not None else {}
    optimizer = cls.from_config(
        problem, run["n_users"], run["privacy.epsilon"], run["privacy.delta"],
        rounds=run["optimizer.rounds"], batch_size=run["optimizer.batch_size"], step_size=run["optimizer.step_size"],
        accounting=run["privacy.accounting"], parameters=run["optimizer.parameters"], protocol=protocol, **options,
    )
    # Smoothed optimizers run on their problem's Moreau envelope (optimizer.problem).
    job = engine.RunJob(optimizer.problem, optimizer, protocol, run.seed, run["n_users"],
                        run["execution.block_size"], run["execution.simulation"], run["privacy.honest_fraction"] or 1.0)
    schedule = job.schedule
    planned = []
    for round_index in range(schedule.rounds):
        plan = schedule.plan(round_index)
        try:
            params = protocol.plan(plan, problem.dim)
        except ValueError as error:
            # Seed 001's randomizers name their own bad option (levels, messages) first.
            field = next((f"privacy.{key}" for key in ("levels", "messages") if str(error).startswith(key)),
                         "privacy.accounting")
            raise ConfigError(field, run[field], f"round {round_index}: {error}") from None
        if isinstance(params, PvecParams) and params.g > MAX_PRECISION:
            raise ConfigError(
                "problem.radius", run["problem.radius"],
                f"round {round_index} needs P_vec precision g = ⌈2Δ₂√n⌉ = {params.g} above {MAX_PRECISION} "
                "(the exact sampler's limit); lower the radius or the users per round",
            )
        if (job.simulation == engine.LITERAL and isinstance(params, PvecParams)
                and literal_messages(params) > LITERAL_MAX_MESSAGES):
            raise ConfigError(
                "execution.simulation", "literal",
                f"round {round_index} would materialize {literal_messages(params):.3g} messages "
                f"(limit {LITERAL_MAX_MESSAGES:.0e}); use exact, or fewer users, smaller dim or larger epsilon",
            )
        planned.append((round_index, plan.first_user, plan.stop_user, params))
    ledger = _ledger(job, planned)
    if protocol.model != "none" and not ledger.within_target():  # a non-private run spends ε = ∞ by design
        epsilon, delta = ledger.total()
        # Lemma B.6 sizes ε0 with ln(1/δ) but composes with ln((T+1)/δ): at large δ the split overspends.
        advice = "use a smaller delta" if run["privacy.accounting"] == "paper" else "the calibration could not meet it"
        raise ConfigError("privacy.delta", run["privacy.delta"],
                          f"the planned ledger spends (ε, δ) = ({epsilon:.4g}, {delta:.3g}), above the target "
                          f"({run['privacy.epsilon']:g}, {run['privacy.delta']:g}); {advice}")
    return PlannedRun(run, job, ledger)


def _protocol(run: RunConfig):
    """The run's protocol, with its options (seed 001's randomizers take m and s).

    Raises:
      ConfigError: an option the protocol does not take.
    """
    name = run["privacy.protocol"]
    options = {key: run[f"privacy.{key}"] for key in ("levels", "messages") if run[f"privacy.{key}"] is not None}
    try:
        return build_protocol(name, run["privacy.accounting"], **options)
    except TypeError as error:  # the protocol names the option it does not take, if it knows it
        key = error.args[0] if error.args and error.args[0] in options else next(iter(options))
        field = f"privacy.{key}"
        raise ConfigError(field, run[field], f"does not apply to privacy.protocol {name}") from None


def _check_pairing(run: RunConfig, cls, protocol, problem) -> None:
    """Refuses optimizer, protocol and execution choices that do not go together.

    Raises:
      ConfigError: the first rule the run breaks.
    """
    name = cls.name
    if protocol.name == "girgis_binary" and not (name == "mean_estimation" and getattr(problem, "binary_data", False)):
        raise ConfigError("privacy.protocol", protocol.name,
                          "encodes binary vectors: it runs with optimizer mean_estimation on problem bernoulli")
    required = getattr(cls, "protocols", None)
    if required is not None and protocol.name not in required:
        raise ConfigError("privacy.protocol", protocol.name, f"optimizer {name} runs with {', '.join(required)}")
    if getattr(cls, "samples_users", False) and not getattr(protocol, "supports_sampling", False):
        raise ConfigError("privacy.protocol", protocol.name,
                          f"optimizer {name} samples users each round, and {protocol.name} has no accountant for "
                          "sampled rounds; use girgis_*, shuffle_gaussian, central_gaussian or none")
    if run["optimizer.sampling"] is not None and "sampling" not in getattr(cls, "options", ()):
        raise ConfigError("optimizer.sampling", run["optimizer.sampling"], f"does not apply to optimizer {name}")
    if run["execution.simulation"] == engine.LITERAL and not protocol.supports_literal:
        raise ConfigError("execution.simulation", "literal",
                          f"only cjmp_vec materializes its messages; {protocol.name} runs exact")
    if run["privacy.honest_fraction"] is not None:
        if protocol.name != "cjmp_vec":
            raise ConfigError("privacy.honest_fraction", run["privacy.honest_fraction"],
                              f"robust mode is P_vec's (Appendix A.3): privacy.protocol must be cjmp_vec, not {protocol.name}")
        if run["privacy.epsilon"] > 1.0:
            raise ConfigError("privacy.epsilon", run["privacy.epsilon"],
                              "must be ≤ 1 in robust mode (seed 000, Corollary A.9)")
        if run["execution.simulation"] == engine.LITERAL:
            raise ConfigError("execution.simulation", "literal", "robust mode runs exact")
    if run["tracking.round_metrics"] == "all" and getattr(cls, "final_iterate_only", False):
        raise ConfigError("tracking.round_metrics", "all",
                          f"{name} releases only its final iterate: logging the others voids its ledger (seed 002)")


def _final_only(planned: PlannedRun) -> bool:
    """Whether only the final round's metrics may be logged (tracking.round_metrics)."""
    wanted = planned.config["tracking.round_metrics"]
    return wanted == "final" or (wanted is None and getattr(planned.job.optimizer, "final_iterate_only", False))


def theory_rates(planned: PlannedRun) -> dict[str, float]:
    """The run's theoretical rate and the reference rates at its (n, d, ε, δ)."""
    run, problem = planned.config, planned.job.problem.unsmoothed
    n, epsilon = run["n_users"], run["privacy.epsilon"]
    return {
        "theory_rate": planned.job.optimizer.theory_rate(),
        "central_rate": theory.central_rate(problem, n, epsilon),
        "local_rate": theory.local_rate(problem, n, epsilon),
        "nonprivate_rate": theory.nonprivate_rate(problem, n),
    }


def _finite(table: pd.DataFrame, what: str) -> None:
    numbers = table.select_dtypes("number")
    if not numbers.empty and not bool(numbers.apply(lambda c: c.map(math.isfinite)).all().all()):
        raise FloatingPointError(f"a NaN or infinity reached the {what}")


@dataclasses.dataclass
class GridSummary:
    """What a grid run did."""

    finished: list[dict] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def start_run(planned: PlannedRun, tracker: MlflowTracker) -> str:
    """Opens a run's MLflow run with its parameters.

    Returns:
      The MLflow run id.
    """
    run, job = planned.config, planned.job
    hyper = {f"resolved.{k}": v for k, v in job.optimizer.hyperparameters().items()}
    constants = {f"problem.{k}": v for k, v in job.problem.constants().items()}
    name = f"{run['optimizer.name']}-n{run['n_users']}-eps{run['privacy.epsilon']:g}-s{run.seed}"
    return tracker.start(run.run_id, name, {**run.flat(), **hyper, **constants, "config_hash": run.config_hash},
                         str(Path(run["tracking.out"]).resolve()))


def _row(planned: PlannedRun, mlflow_run_id: str) -> dict:
    run = planned.config
    return {"run_id": run.run_id, "mlflow_run_id": mlflow_run_id, "config_hash": run.config_hash, **run.flat()}


def record_run(planned: PlannedRun, records: list, wall_s: float, mlflow_run_id: str,
               tracker: MlflowTracker, store: ParquetStore) -> dict:
    """Checks an executed run against its plan and records it in both sinks.

    MLflow is finished first; the runs.parquet row, written last, marks the
    run done.

    Args:
      planned: the run.
      records: its round records, from the engine.
      wall_s: how long it ran.
      mlflow_run_id: its MLflow run.
      tracker: the MLflow sink.
      store: the Parquet sink.

    Returns:
      The run's runs.parquet row.

    Raises:
      RuntimeError: the executed rounds differ from the planned ledger.
      FloatingPointError: a NaN or infinity in the results.
    """
    run, job = planned.config, planned.job
    ledger = _ledger(job, [(r.plan.round, r.plan.first_user, r.plan.stop_user, r.params) for r in records])
    if ledger.to_dict() != planned.ledger.to_dict():
        raise RuntimeError("the executed rounds differ from the planned ledger")
    spent = ledger.spent_series()
    rounds = pd.DataFrame({
        "run_id": run.run_id,
        "round": [r.plan.round for r in records],
        "users_in_round": [r.users for r in records],
        "excess_loss": [r.excess_loss for r in records],
        "population_loss": [r.population_loss for r in records],
        "epsilon_spent": [s[0] for s in spent],
        "delta_spent": [s[1] for s in spent],
        "wall_s": pd.Series([r.seconds for r in records]).cumsum(),
    })
    if _final_only(planned):  # the other iterates are secret: not one of them is logged
        rounds = rounds.tail(1).reset_index(drop=True)
    _finite(rounds[["excess_loss", "population_loss"]], "round metrics")
    epsilon, delta = ledger.total()
    row = {**_row(planned, mlflow_run_id), "final_excess_loss": records[-1].excess_loss, "epsilon": epsilon,
           "delta": delta, **theory_rates(planned), "status": FINISHED, "wall_s": wall_s}
    files = {
        "ledger.json": json.dumps(ledger.to_dict(), indent=2).encode(),
        "config.yaml": yaml.safe_dump(run.nested(), sort_keys=False).encode(),
    }
    folder = store.stage(run.run_id, rounds, files)
    tracker.log_rounds(mlflow_run_id, rounds, METRIC_COLUMNS)
    summary = {key: row[key] for key in ("final_excess_loss", "epsilon", "delta", "wall_s", *theory.THEORY_COLUMNS)}
    tracker.finish(mlflow_run_id, summary, folder, "FINISHED")
    store.commit(row, rounds)  # last: this row marks the run done
    return row


def fail_run(planned: PlannedRun, wall_s: float, mlflow_run_id: str, tracker: MlflowTracker,
             store: ParquetStore) -> None:
    """Marks a run failed in both sinks; a rerun redoes it."""
    store.commit({**_row(planned, mlflow_run_id), "status": FAILED, "wall_s": wall_s}, pd.DataFrame())
    try:
        tracker.fail(mlflow_run_id)
    except Exception:  # an unreachable store must not hide the run's own error
        pass


def execute_run(planned: PlannedRun, tracker: MlflowTracker, store: ParquetStore) -> dict:
    """Executes one planned run in this process and records it.

    Returns:
      The run's runs.parquet row.

    Raises:
      Whatever the run raised, after marking it failed in both sinks.
    """
    began = time.perf_counter()
    mlflow_run_id = start_run(planned, tracker)
    try:
        run = planned.config
        _, records = engine.execute(planned.job, run["execution.backend"], run["execution.shards"])
        return record_run(planned, records, time.perf_counter() - began, mlflow_run_id, tracker, store)
    except BaseException:
        fail_run(planned, time.perf_counter() - began, mlflow_run_id, tracker, store)
        raise


def _progress(done: int, total: int, failed: int, elapsed: float) -> str:
    """A text progress bar with an ETA from the mean time per run so far."""
    width = 24
    filled = width * done // max(total, 1)
    eta = elapsed / done * (total - done) if done else float("nan")
    clock = lambda s: "--:--" if s != s else f"{int(s // 60):02d}:{int(s % 60):02d}"  # noqa: E731
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} ({failed} failed) elapsed {clock(elapsed)} ETA {clock(eta)}"


@contextlib.contextmanager
def _remembered_interrupt():
    """Ctrl-C that is raised where Python swallows it (a finalizer or weakref
    callback: "Exception ignored in …") still stops the grid: the handler also
    remembers it, and the grid loop re-raises it at the next run boundary.

    Yields:
      A function that says whether an interrupt arrived (always False off the
      main thread, where no handler can be installed, and where SIGINT is
      ignored, as in a background job: that choice is kept).
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        yield lambda: False
        return
    arrived = threading.Event()

    def handler(signum, frame):
        arrived.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield arrived.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def run_grid(runs: list[RunConfig], say: Callable[[str], None] = print) -> GridSummary:
    """Plans every run, then executes those not yet finished.

    On the Ray backend the grid's runs execute concurrently on the cluster
    (each reserves its shards' CPUs); the driver alone records them. An
    interrupt marks the runs in flight failed, so a rerun redoes them.

    Args:
      runs: the expanded config.
      say: where progress lines go.

    Returns:
      The summary.

    Raises:
      ConfigError: bad input, before any run starts or anything is written.
      KeyboardInterrupt: after marking the runs in flight failed.
    """
    # Planning calibrates every protocol (a numerical search per round shape): say so.
    say(f"planning {len(runs)} runs (protocol calibration and ledgers)")
    planned = [plan_run(run) for run in runs]
    first = runs[0]
    store = ParquetStore(first["tracking.out"])
    store.check_writable()
    done = store.completed()
    tracker = MlflowTracker(first["tracking.mlflow_uri"], first["experiment"])
    summary = GridSummary()
    todo = []
    for item in planned:
        if item.config.run_id in done:
            summary.skipped.append(item.config.run_id)
        else:
            todo.append(item)
            done.add(item.config.run_id)  # a repeated run in the grid runs once
    if summary.skipped:
        say(f"{len(summary.skipped)} runs already finished, skipped")
    executor = engine.executor(first["execution.backend"])
    started: dict[str, tuple[PlannedRun, str, float]] = {}
    began = time.perf_counter()
    queue = list(todo)
    try:
        with _remembered_interrupt() as interrupted:
            while queue or executor.in_flight():
                while queue and executor.in_flight() < executor.capacity():
                    item = queue.pop(0)
                    started[item.config.run_id] = (item, start_run(item, tracker), time.perf_counter())
                    executor.submit(item.config.run_id, item.job, item.config["execution.shards"])
                run_id, outcome = executor.next_done()
                item, mlflow_run_id, run_began = started[run_id]  # in flight until recorded or failed
                wall_s = time.perf_counter() - run_began
                try:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    _, records, wall_s = outcome
                    row = record_run(item, records, wall_s, mlflow_run_id, tracker, store)
                    del started[run_id]
                    summary.finished.append(row)
                    note = f"{run_id} {item.config['optimizer.name']} n={item.config['n_users']} " \
                           f"eps={item.config['privacy.epsilon']:g} {item.config['privacy.accounting']}: " \
                           f"excess loss {row['final_excess_loss']:.4g}"
                except Exception as err:  # one failing run does not stop the grid
                    del started[run_id]
                    fail_run(item, wall_s, mlflow_run_id, tracker, store)
                    summary.failed.append((run_id, f"{type(err).__name__}: {err}"))
                    note = f"{run_id} FAILED: {type(err).__name__}: {err}"
                completed = len(summary.finished) + len(summary.failed)
                say(f"{_progress(completed, len(todo), len(summary.failed), time.perf_counter() - began)}  {note}")
                if interrupted():  # a Ctrl-C swallowed during the run stops the grid here
                    raise KeyboardInterrupt
    except BaseException:
        executor.cancel()
        for item, mlflow_run_id, run_began in started.values():
            fail_run(item, time.perf_counter() - run_began, mlflow_run_id, tracker, store)
        raise
    return summary


def planned_ledgers(runs: list[RunConfig]) -> dict:
    """The planned ledger of every grid point, without running anything.

    Args:
      runs: the expanded config.

    Returns:
      {"runs": [{config_hash, seeds, config, hyperparameters, ledger}, ...]}.
    """
    points: dict[str, dict] = {}
    for run in runs:
        if run.config_hash in points:
            points[run.config_hash]["seeds"].append(run.seed)
            continue
        planned = plan_run(run)
        points[run.config_hash] = {
            "config_hash": run.config_hash,
            "seeds": [run.seed],
            "config": {k: v for k, v in run.values.items() if not k.startswith(("tracking.", "execution."))},
            "hyperparameters": planned.job.optimizer.hyperparameters(),
            "ledger": planned.ledger.to_dict(),
        }
    return {"runs": list(points.values())}


