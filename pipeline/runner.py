"""Runs a config: plan every run (refusing bad input before any work), skip
completed ones, execute the rest, and record them in MLflow and Parquet."""
from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Callable

import pandas as pd
import yaml

from pipeline import engine
from pipeline.accounting.ledger import PrivacyLedger
from pipeline.config import RunConfig
from pipeline.errors import ConfigError
from pipeline.optimizers import OPTIMIZERS, theory
from pipeline.problems import build_problem
from pipeline.protocols import PROTOCOLS
from pipeline.protocols.cjmp import LITERAL_MAX_MESSAGES, MAX_PRECISION, literal_messages
from pipeline.tracking import FAILED, FINISHED, MlflowTracker, ParquetStore

METRIC_COLUMNS = ("excess_loss", "epsilon_spent")
# Overrides that mean nothing to an optimizer are refused rather than ignored.
_NOT_APPLICABLE = {
    "mean_estimation": ("optimizer.rounds", "optimizer.batch_size", "optimizer.step_size"),
    "full_gd": ("optimizer.batch_size",),
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
    ledger = PrivacyLedger(schedule.composition, optimizer.epsilon, optimizer.delta, schedule.slack)
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
    optimizer = OPTIMIZERS[name].from_config(
        problem, run["n_users"], run["privacy.epsilon"], run["privacy.delta"],
        rounds=run["optimizer.rounds"], batch_size=run["optimizer.batch_size"], step_size=run["optimizer.step_size"],
    )
    protocol = PROTOCOLS[run["privacy.protocol"]]()
    job = engine.RunJob(problem, optimizer, protocol, run.seed, run["n_users"],
                        run["execution.block_size"], run["execution.simulation"])
    schedule = job.schedule
    planned = []
    for round_index in range(schedule.rounds):
        plan = schedule.plan(round_index)
        params = protocol.plan(plan.users, problem.dim, plan.epsilon, plan.delta, plan.norm_bound)
        if params.g > MAX_PRECISION:
            raise ConfigError(
                "problem.radius", run["problem.radius"],
                f"round {round_index} needs P_vec precision g = ⌈2Δ₂√n⌉ = {params.g} above {MAX_PRECISION} "
                "(the exact sampler's limit); lower the radius or the users per round",
            )
        if job.simulation == engine.LITERAL and literal_messages(params) > LITERAL_MAX_MESSAGES:
            raise ConfigError(
                "execution.simulation", "literal",
                f"round {round_index} would materialize {literal_messages(params):.3g} messages "
                f"(limit {LITERAL_MAX_MESSAGES:.0e}); use exact, or fewer users, smaller dim or larger epsilon",
            )
        planned.append((round_index, plan.first_user, plan.stop_user, params))
    ledger = _ledger(job, planned)
    if not ledger.within_target():
        epsilon, delta = ledger.total()
        # Lemma B.6 sizes ε0 with ln(1/δ) but composes with ln((T+1)/δ): at large δ the split overspends.
        raise ConfigError("privacy.delta", run["privacy.delta"],
                          f"the planned ledger spends (ε, δ) = ({epsilon:.4g}, {delta:.3g}), above the target "
                          f"({run['privacy.epsilon']:g}, {run['privacy.delta']:g}); use a smaller delta")
    return PlannedRun(run, job, ledger)


THEORY_COLUMNS = ("theory_rate", "central_rate", "local_rate", "nonprivate_rate")


def theory_rates(planned: PlannedRun) -> dict[str, float]:
    """The run's theoretical rate and the reference rates at its (n, d, ε, δ)."""
    run, problem = planned.config, planned.job.problem
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


def execute_run(planned: PlannedRun, tracker: MlflowTracker, store: ParquetStore) -> dict:
    """Executes one planned run and records it.

    Args:
      planned: the run.
      tracker: the MLflow sink.
      store: the Parquet sink.

    Returns:
      The run's runs.parquet row.

    Raises:
      Whatever the run raised, after marking it failed in both sinks.
    """
    run, job = planned.config, planned.job
    began = time.perf_counter()
    hyper = {f"resolved.{k}": v for k, v in job.optimizer.hyperparameters().items()}
    constants = {f"problem.{k}": v for k, v in job.problem.constants().items()}
    name = f"{run['optimizer.name']}-n{run['n_users']}-eps{run['privacy.epsilon']:g}-s{run.seed}"
    mlflow_run_id = tracker.start(run.run_id, name, {**run.flat(), **hyper, **constants,
                                                     "config_hash": run.config_hash})
    row = {"run_id": run.run_id, "mlflow_run_id": mlflow_run_id, "config_hash": run.config_hash, **run.flat()}
    try:
        _, records = engine.execute(job, run["execution.backend"], run["execution.shards"])
        ledger = _ledger(job, [(r.plan.round, r.plan.first_user, r.plan.stop_user, r.params) for r in records])
        if ledger.to_dict() != planned.ledger.to_dict():
            raise RuntimeError("the executed rounds differ from the planned ledger")
        spent = [ledger.spent_after(r.plan.round) for r in records]
        rounds = pd.DataFrame({
            "run_id": run.run_id,
            "round": [r.plan.round for r in records],
            "users_in_round": [r.plan.users for r in records],
            "excess_loss": [r.excess_loss for r in records],
            "population_loss": [r.population_loss for r in records],
            "epsilon_spent": [s[0] for s in spent],
            "delta_spent": [s[1] for s in spent],
            "wall_s": pd.Series([r.seconds for r in records]).cumsum(),
        })
        _finite(rounds, "round metrics")
        epsilon, delta = ledger.total()
        row.update(final_excess_loss=records[-1].excess_loss, epsilon=epsilon, delta=delta,
                   **theory_rates(planned), status=FINISHED, wall_s=time.perf_counter() - began)
        files = {
            "ledger.json": json.dumps(ledger.to_dict(), indent=2).encode(),
            "config.yaml": yaml.safe_dump(run.nested(), sort_keys=False).encode(),
        }
        folder = store.stage(run.run_id, rounds, files)
        tracker.log_rounds(mlflow_run_id, rounds, METRIC_COLUMNS)
        summary = {key: row[key] for key in ("final_excess_loss", "epsilon", "delta", "wall_s", *THEORY_COLUMNS)}
        tracker.finish(mlflow_run_id, summary, folder, "FINISHED")
        # Last: the runs.parquet row is what marks the run done.
        store.commit(row, rounds)
        return row
    except BaseException:
        row.update(status=FAILED, wall_s=time.perf_counter() - began)
        store.commit(row, pd.DataFrame())
        try:
            tracker.fail(mlflow_run_id)
        except Exception:  # an unreachable store must not hide the run's own error
            pass
        raise


def run_grid(runs: list[RunConfig], say: Callable[[str], None] = print) -> GridSummary:
    """Plans every run, then executes those not yet finished.

    Args:
      runs: the expanded config.
      say: where progress lines go.

    Returns:
      The summary.

    Raises:
      ConfigError: bad input, before any run starts or anything is written.
    """
    planned = [plan_run(run) for run in runs]
    first = runs[0]
    store = ParquetStore(first["tracking.out"])
    store.check_writable()
    done = store.completed()
    tracker = MlflowTracker(first["tracking.mlflow_uri"], first["experiment"])
    summary = GridSummary()
    for index, item in enumerate(planned, 1):
        run_id = item.config.run_id
        if run_id in done:
            summary.skipped.append(run_id)
            say(f"[{index}/{len(planned)}] {run_id} already finished, skipped")
            continue
        try:
            row = execute_run(item, tracker, store)
        except Exception as err:  # one failing run does not stop the grid
            summary.failed.append((run_id, f"{type(err).__name__}: {err}"))
            say(f"[{index}/{len(planned)}] {run_id} FAILED: {type(err).__name__}: {err}")
            continue
        summary.finished.append(row)
        done.add(run_id)
        say(f"[{index}/{len(planned)}] {run_id} {item.config['optimizer.name']} n={item.config['n_users']} "
            f"eps={item.config['privacy.epsilon']:g}: excess loss {row['final_excess_loss']:.4g} "
            f"in {row['wall_s']:.1f}s")
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


