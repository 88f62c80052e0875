"""Runs a config: plan every run (refusing bad input before any work), skip
completed ones, execute the rest, and record them in MLflow and Parquet."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import inspect
import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np
import yaml

from pipeline import engine, plugins
from pipeline.accounting import ACCOUNTING_VERSION
from pipeline.accounting.ledger import LedgerError, PrivacyLedger, UnsupportedEventError
from pipeline.config import FIELDS, MAX_ROUNDS, PLUGIN_MAX_ROUNDS, PLUGIN_SECTIONS, RECORD, ROUNDS_REASON, RunConfig
from pipeline.errors import ConfigError, LeaseLost
from pipeline.optimizers import theory
from pipeline.optimizers.base import DATA, OVERRIDES
from pipeline.problems.base import check_constants
from pipeline.problems.records import ONE_EACH, parse_records_per_user
from pipeline.protocols import PROTOCOLS
from pipeline.protocols.base import BINARY, REAL, PlanError

if TYPE_CHECKING:  # the sinks (pandas, mlflow) load where a run is recorded, so `ledger` starts fast
    from pipeline.tracking import MlflowTracker, ParquetStore

METRIC_COLUMNS = ("excess_loss", "epsilon_spent")
HELDOUT_COLUMNS = ("test_loss", "test_accuracy")  # a dataset's, where it has held-out records


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """A validated run: its config, the job the engine runs, its planned ledger and
    its theoretical and reference rates (runs.parquet's rate columns)."""

    config: RunConfig
    job: engine.RunJob
    ledger: PrivacyLedger
    rates: dict[str, float]


def ledger_of(job: engine.RunJob, records: Iterable[tuple[int, int, int, object]]) -> PrivacyLedger:
    """A ledger of (round, first user, stop user, protocol params) calls."""
    return ledger_of_groups(job, ((round_index, 1, first, 0, stop - first, params)
                                  for round_index, first, stop, params in records))


def ledger_of_groups(job: engine.RunJob, calls: Iterable[tuple[int, int, int, int, int, object]]) -> PrivacyLedger:
    """A ledger of (first round, rounds, first user, user stride, users, protocol params) runs of
    calls with the same parameters: round first + k asks [first user + k·stride, … + users)."""
    optimizer, schedule = job.optimizer, job.schedule
    ledger = PrivacyLedger(schedule.composition, optimizer.epsilon, optimizer.delta, schedule.slack,
                           job.protocol.accounting, schedule.release, schedule.rounds - 1, job.unit)
    events: dict = {}  # a call's event depends on its parameters only: one per distinct call, not per round
    for first_round, rounds, first_user, stride, users, params in calls:
        try:
            if params not in events:
                events[params] = job.protocol.event(params, job.block_size)
            event = events[params]
        except TypeError:  # a plug-in's unhashable parameters
            event = job.protocol.event(params, job.block_size)
        ledger.record_rounds(first_round, rounds, first_user, stride, users, event)
    return ledger


def _plans_per_budget(protocol) -> bool:
    """Whether a protocol's plan is known to depend on the round's budget alone (Protocol.planned's
    key), so that one round plans a whole group of equal rounds: the built-in protocols. A
    plug-in is planned round by round, as it may read the round or its users."""
    return type(protocol).__module__.split(".")[:2] == ["pipeline", "protocols"]


PLUGIN_FIELDS = {"optimizer": "optimizer.name", "problem": "problem.name", "protocol": "privacy.protocol"}
# Seconds of a run before its first note of progress, and between two notes.
RUN_NOTE_S = 5.0
# Seconds between two notes of planning's progress.
PLANNING_NOTE_S = 5.0
# The attempt id of a run whose MLflow run could not be created (runs.parquet's mlflow_run_id).
NOT_STARTED = "mlflow-not-started"


def plan_run(run: RunConfig) -> PlannedRun:
    """Builds a run's job and planned ledger, checking every cross-field rule.

    Args:
      run: the run's config.

    Returns:
      The planned run.

    Raises:
      ConfigError: a rule the run breaks, including a planned ledger above
        the target (the budget guard), or any error a plug-in's code raised
        while planning (named by the field that names the plug-in).
    """
    try:
        return _plan_run(run)
    except ConfigError:
        raise
    except (Exception, SystemExit) as error:  # sys.exit in a plug-in's planning never ends a command with 0
        field = _raising_plugin(run, error)
        if field is None:  # the package's own code: its traceback is the bug report
            raise
        lines = str(error).strip().splitlines()
        raise ConfigError(field, run[field], f"the plug-in raised {type(error).__name__}"
                                             + (f": {lines[0]}" if lines else "")) from None


def _raising_plugin(run: RunConfig, error: BaseException) -> str | None:
    """The field naming the plug-in (not a built-in class) whose code raised `error`, if one did."""
    files = {}
    for kind, field in PLUGIN_FIELDS.items():
        if run[field] in plugins.kinds()[kind].builtins:
            continue
        try:
            files[os.path.realpath(inspect.getfile(plugins.resolve(kind, run[field])))] = field
        except (TypeError, OSError, plugins.PluginError):
            continue
    traceback, raised_in = error.__traceback__, None
    while traceback is not None:  # the innermost frame in a plug-in's file
        raised_in = files.get(os.path.realpath(traceback.tb_frame.f_code.co_filename), raised_in)
        traceback = traceback.tb_next
    return raised_in


def _plan_run(run: RunConfig) -> PlannedRun:
    """plan_run's work."""
    cls = plugins.resolve("optimizer", run["optimizer.name"])
    for key in OVERRIDES:  # an override that means nothing to the optimizer is refused, not ignored
        if run[f"optimizer.{key}"] is not None and key not in cls.overrides:
            raise ConfigError(f"optimizer.{key}", run[f"optimizer.{key}"], f"does not apply to optimizer {cls.name}")
    _check_memory(run)  # before the problem, whose fixed points alone can be O(d)
    problem = plugins.resolve("problem", run["problem.name"])(
        dim=run["problem.dim"], radius=run["problem.radius"], **_options(run, "problem"))
    problem = problem.for_run(run)
    check_constants(problem, run["problem.name"])  # a plug-in's constant left out is one line, not a traceback
    protocol = plugins.resolve("protocol", run["privacy.protocol"])(run["privacy.accounting"],
                                                                    **_options(run, "privacy"))
    _check_pairing(run, cls, protocol, problem)
    records = _records(run, cls, protocol, problem)
    try:
        optimizer = cls.from_config(
            problem, run["n_users"], run["privacy.epsilon"], run["privacy.delta"],
            **{key: run[f"optimizer.{key}"] for key in OVERRIDES if key in cls.overrides},
            accounting=run["privacy.accounting"], parameters=run["optimizer.parameters"], protocol=protocol,
            **_options(run, "optimizer"),
        )
        if records["per_record"]:
            optimizer = optimizer.at_record_level(protocol, records["records_min"])
    except ConfigError:
        raise
    except PlanError as error:
        raise ConfigError(error.field, run[error.field], str(error)) from None
    except (ValueError, ArithmeticError) as error:  # no noise level meets the budget, or its formulas overflow
        raise ConfigError("privacy.epsilon", run["privacy.epsilon"],
                          f"optimizer {cls.name} cannot be calibrated at (ε, δ) = ({run['privacy.epsilon']:g}, "
                          f"{run['privacy.delta']:g}) with n = {run['n_users']}: {error}; raise privacy.epsilon "
                          "or privacy.delta, or use more users") from None
    # Smoothed optimizers run on their problem's Moreau envelope (optimizer.problem).
    job = engine.RunJob(optimizer.problem, optimizer, protocol, run.seed, run["n_users"],
                        run["execution.block_size"], run["execution.simulation"], run["privacy.honest_fraction"] or 1.0,
                        **records, **_records_per_round(run, optimizer, records))
    schedule = job.schedule
    per_group = _plans_per_budget(protocol)
    cap = MAX_ROUNDS if per_group else PLUGIN_MAX_ROUNDS
    if schedule.rounds > cap:  # a plug-in's planning below visits every round: refuse before it starts
        field = next((f for f in ("optimizer.rounds", "optimizer.batch_size") if run[f] is not None), "n_users")
        raise ConfigError(field, run[field], f"plans {schedule.rounds} rounds, above the cap of {cap} "
                                             f"({ROUNDS_REASON})")
    _check_memory(run, job)
    calls, first_round = [], 0  # (first round, rounds, first user, stride, users, params)
    for group in schedule.groups:  # a group's rounds share one budget: planned once where that is known
        for round_index in ([first_round] if per_group else range(first_round, first_round + group.rounds)):
            plan = schedule.plan(round_index)
            try:
                params = protocol.plan(plan, problem.dim)
                protocol.check_call(params, job.simulation == engine.LITERAL)
                protocol.remember(plan, problem.dim, params)  # shards reuse it (Protocol.planned)
            except ValueError as error:  # a PlanError names its field; an unmet budget is the accounting's
                field = error.field if isinstance(error, PlanError) else "privacy.accounting"
                raise ConfigError(field, run[field], f"round {round_index}: {error}") from None
            calls.append((round_index, group.rounds if per_group else 1, plan.first_user, group.user_stride,
                          group.users, params))
        first_round += group.rounds
    try:
        ledger = ledger_of_groups(job, calls)
    except LedgerError as error:  # the protocol's events, or the optimizer's schedule, break the ledger's rules
        field = "privacy.protocol" if isinstance(error, UnsupportedEventError) else "optimizer.name"
        raise ConfigError(field, run[field], str(error)) from None
    if protocol.model != "none" and not ledger.within_target():  # a non-private run spends ε = ∞ by design
        epsilon, delta = ledger.total()
        # Lemma B.6 sizes ε0 with ln(1/δ) but composes with ln((T+1)/δ): at large δ the split overspends.
        advice = "use a smaller delta" if run["privacy.accounting"] == "paper" else "the calibration could not meet it"
        raise ConfigError("privacy.delta", run["privacy.delta"],
                          f"the planned ledger spends (ε, δ) = ({epsilon:.4g}, {delta:.3g}), above the target "
                          f"({run['privacy.epsilon']:g}, {run['privacy.delta']:g}); {advice}")
    try:  # the rates are recorded with the run: a combination whose rate cannot be planned is refused now
        rates = theory_rates(run, job)
    except ValueError as error:  # a PlanError names its field; a calibration that fails is the budget's
        field = error.field if isinstance(error, PlanError) else "privacy.epsilon"
        raise ConfigError(field, run[field], f"the theoretical rate: {error}") from None
    return PlannedRun(run, job, ledger, rates)


def _records(run: RunConfig, cls, protocol, problem) -> dict:
    """The RunJob's record fields (records, records_min, per_record): how many records users hold
    and whether each record sends its own message (record level), after the unit's rules.

    Raises:
      ConfigError: records_per_user on a dataset, or record level where the optimizer or the
        protocol cannot account several records per user.
    """
    spec = parse_records_per_user(run["problem.records_per_user"])
    user_column = getattr(problem, "user_column", None)
    if problem.reads_rows and not spec.one_each:
        raise ConfigError("problem.records_per_user", run["problem.records_per_user"],
                          "is for synthetic problems: a dataset's users hold the rows its problem.user_column groups")
    several = not spec.one_each or user_column is not None
    if run["privacy.unit"] == RECORD and several:
        if not cls.record_level:
            fits = ", ".join(name for name, c in plugins.kinds()["optimizer"].builtins.items() if c.record_level)
            raise ConfigError("privacy.unit", RECORD, f"optimizer {cls.name} has no accountant for several records per "
                              f"user at record level (only {fits} do: seed 001's two-level sampling); use "
                              "privacy.unit: user, which protects each user's whole dataset and so every record")
        if not protocol.supports_records:
            raise ConfigError("privacy.unit", RECORD, f"protocol {protocol.name} accounts one message per user: "
                              f"record level with several records per user runs with "
                              f"{_providers(lambda p: p.supports_records)}; or use privacy.unit: user")
    minimum = getattr(problem, "min_records", 1) if problem.reads_rows else spec.minimum
    return {"records": ONE_EACH if problem.reads_rows else spec, "records_min": minimum,
            "per_record": run["privacy.unit"] == RECORD and several, "unit": run["privacy.unit"]}


def _records_per_round(run: RunConfig, optimizer, records: dict) -> dict:
    """The RunJob's records_per_round: s of the optimizer at record level; at user level each
    user sends the mean over all its records.

    Raises:
      ConfigError: optimizer.records_per_round set at user level.
    """
    if records["per_record"]:
        return {"records_per_round": optimizer.records_per_round}
    if run["optimizer.records_per_round"] is not None:
        raise ConfigError("optimizer.records_per_round", run["optimizer.records_per_round"],
                          "applies at privacy.unit: record with several records per user (at user level each "
                          "user sends the mean over all its records)")
    return {}


# The share of the memory limit a run's users' data may take: the rest is for Python, pyarrow,
# Ray's object store and the system. And what each process holds besides its users' data: a
# shard process measured 114 MB of resident memory after its imports; Ray's worker adds about as much.
MEMORY_MARGIN = 0.8
PROCESS_BYTES = 256 * 2**20
# What each round costs the process that records the run, whatever n: its record (RoundRecords'
# columns, 80 bytes), its ledger spend and cumulative time (24), and the ledger check's and
# the join's transients. Measured: 149 bytes a round, the slope of the peak resident memory of
# local seq_sgd runs of 3.9·10⁶ and 1.96·10⁷ rounds (d = 10; 1.14 and 3.48 GB), rounded up.
# On Ray the run's task holds the records too, before they travel.
RECORD_BYTES = 256


def _cgroup_limits(root: Path) -> list[int]:
    """The memory limits of this process's cgroups and of the root, v2 (memory.max) and v1
    (memory.limit_in_bytes); unlimited ones ("max", or v1's near-2⁶³ sentinel) are left out."""
    files = [root / "sys/fs/cgroup/memory.max", root / "sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:  # "hierarchy:controllers:path"; v2's unified hierarchy has no controllers
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            files.append(root / "sys/fs/cgroup" / path.lstrip("/") / "memory.max")
        elif "memory" in controllers.split(","):
            files.append(root / "sys/fs/cgroup/memory" / path.lstrip("/") / "memory.limit_in_bytes")
    limits = []
    for file in files:
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**62:
            limits.append(int(text))
    return limits


def memory_bytes(root: Path = Path("/")) -> int | None:
    """The memory a run may use here: the least of the physical memory, the limits of this
    process's cgroups (v1 and v2) and RLIMIT_AS; None if the physical memory is unknown.

    Args:
      root: where /proc and /sys are (tests give a fake tree).
    """
    import resource

    try:
        limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    except (AttributeError, ValueError, OSError):
        return None
    limits += _cgroup_limits(root)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    return min(limits)


def _check_memory(run: RunConfig, job: engine.RunJob | None = None) -> None:
    """Refuses a run whose users' data or round records cannot fit in memory (DESIGN: users
    live in their shard).

    A shard holds its users' data as float64 (d, records): 8·d bytes per record; the process
    that records the run holds RECORD_BYTES per round. Within MEMORY_MARGIN of the limit, with
    PROCESS_BYTES for each process: one block must fit, and so must every user and round one
    process holds (all of them on the local backend; on Ray one shard's users, and the rounds
    in the driver), and on a Ray instance this machine starts every shard, the run's task and
    the driver together, the records twice (on a cluster, RAY_ADDRESS, the shards are spread
    over nodes: one shard and the driver are checked). A run whose shards draw each block's
    users when asked (engine.drawn_per_block) holds one block a process.

    Args:
      run: the run.
      job: its job, once built (None: only the block is checked, before any work).

    Raises:
      ConfigError: naming problem.dim (one block does not fit) or n_users, with the bytes
        needed and the memory there is.
    """
    memory = memory_bytes()
    if memory is None:
        return
    d, n, shards = run["problem.dim"], run["n_users"], run["execution.shards"]
    d *= parse_records_per_user(run["problem.records_per_user"]).mean  # bytes per user: d floats per record
    local = run["execution.backend"] == "local"
    block = min(run["execution.block_size"], n)
    # (field, users whose data are held, rounds whose records are held, processes, what holds them)
    checks = [("problem.dim", block, 0, 1, "one block of")]
    if job is not None:
        rounds = job.schedule.rounds
        drawn = engine.drawn_per_block(job)
        if local:
            checks.append(("n_users", block if drawn else n, rounds, 1, "one process holding"))
        else:
            checks.append(("n_users", block if drawn else -(-n // shards), 0, 1, "one shard process holding"))
            if os.environ.get("RAY_ADDRESS"):  # a cluster: shards on their nodes, the records in the driver
                checks.append(("n_users", 0, rounds, 1, "the driver holding"))
            else:  # every shard here, and the records twice: in the run's task, then in the driver
                checks.append(("n_users", min(n, shards * block) if drawn else n, 2 * rounds, shards + 2,
                               f"this machine's {shards} shard processes, the run's task and the driver holding"))
    budget = MEMORY_MARGIN * memory
    # One block too large is the dimension's fault; too many users or rounds held at once, n's.
    for field, users, rounds, processes, what in checks:
        needed = int(8 * d * users) + RECORD_BYTES * rounds + processes * PROCESS_BYTES
        if needed > budget:
            held = " and ".join(part for part in (f"{users} users" if users else "",
                                                  f"{rounds} round records" if rounds else "") if part)
            raise ConfigError(field, run[field],
                              f"{what} {held}: their data (d × users × 8 bytes), {RECORD_BYTES} bytes a round record "
                              f"and {PROCESS_BYTES / 2**20:.0f} MiB per process take {needed / 2**30:.3g} GiB, more "
                              f"than {MEMORY_MARGIN:.0%} of the {memory / 2**30:.3g} GiB this machine allows (the "
                              "least of its memory, its cgroup's limit and RLIMIT_AS): lower problem.dim, n_users or "
                              "execution.block_size, or raise optimizer.batch_size"
                              + ("" if local else ", or run on a cluster (RAY_ADDRESS) with more shards"))


def _options(run: RunConfig, section: str) -> dict:
    """The values of the declared options of a section's plug-in (passed to its constructor)."""
    kind, name_field = PLUGIN_SECTIONS[section]
    declared = plugins.resolve(kind, run[name_field]).options
    return {option.name: run[f"{section}.{option.name}"] for option in declared
            if run[f"{section}.{option.name}"] is not None}


def _providers(test) -> str:
    """The built-in protocols that pass `test`, for error messages."""
    return ", ".join(name for name, cls in PROTOCOLS.items() if test(cls))


def _check_pairing(run: RunConfig, cls, protocol, problem) -> None:
    """Refuses optimizer, protocol and execution choices that do not go together,
    from the capabilities each class declares.

    Raises:
      ConfigError: the first rule the run breaks.
    """
    name, chosen = cls.name, protocol.name
    kinds = {REAL, BINARY} if cls.sends == DATA and problem.data_kind == BINARY else {REAL}
    if not kinds & protocol.data_kinds:
        raise ConfigError("privacy.protocol", chosen,
                          f"encodes {', '.join(sorted(protocol.data_kinds))} vectors: it runs with an optimizer "
                          f"that sends data ({DATA}) on a problem whose data are {BINARY}, such as mean_estimation "
                          "on bernoulli")
    if protocol.model not in cls.privacy_models or not cls.requires <= protocol.capabilities:
        needs = sorted(cls.requires)
        fits = _providers(lambda p: p.model in cls.privacy_models and cls.requires <= p.capabilities)
        raise ConfigError("privacy.protocol", chosen, f"optimizer {name} runs with {fits}"
                          + (f" (it needs a protocol with {', '.join(needs)})" if needs else ""))
    if cls.samples_users and not protocol.supports_sampling:
        raise ConfigError("privacy.protocol", chosen,
                          f"optimizer {name} samples users each round, and {chosen} has no accountant for "
                          f"sampled rounds; use {_providers(lambda p: p.supports_sampling)}")
    if run["execution.simulation"] == engine.LITERAL and not protocol.supports_literal:
        raise ConfigError("execution.simulation", "literal",
                          f"only {_providers(lambda p: p.supports_literal)} materializes its messages; {chosen} runs exact")
    if run["privacy.honest_fraction"] is not None:
        if not protocol.supports_robust:
            raise ConfigError("privacy.honest_fraction", run["privacy.honest_fraction"],
                              f"robust mode is P_vec's (Appendix A.3): privacy.protocol must be "
                              f"{_providers(lambda p: p.supports_robust)}, not {chosen}")
        if run["privacy.epsilon"] > 1.0:
            raise ConfigError("privacy.epsilon", run["privacy.epsilon"],
                              "must be ≤ 1 in robust mode (seed 000, Corollary A.9)")
        if run["execution.simulation"] == engine.LITERAL:
            raise ConfigError("execution.simulation", "literal", "robust mode runs exact")
    if run["tracking.round_metrics"] == "all" and cls.final_iterate_only:
        raise ConfigError("tracking.round_metrics", "all",
                          f"{name} releases only its final iterate: logging the others voids its ledger (seed 002)")


def _final_only(planned: PlannedRun) -> bool:
    """Whether only the final round's metrics may be logged (tracking.round_metrics)."""
    wanted = planned.config["tracking.round_metrics"]
    return wanted == "final" or (wanted is None and planned.job.optimizer.final_iterate_only)


def theory_rates(run: RunConfig, job: engine.RunJob) -> dict[str, float]:
    """The run's theoretical rate and the reference rates at its (n, d, ε, δ)."""
    problem = job.problem.unsmoothed
    n, epsilon = run["n_users"], run["privacy.epsilon"]
    return {
        "theory_rate": job.optimizer.theory_rate(),
        "central_rate": theory.central_rate(problem, n, epsilon),
        "local_rate": theory.local_rate(problem, n, epsilon),
        "nonprivate_rate": theory.nonprivate_rate(problem, n),
    }


@dataclasses.dataclass
class GridSummary:
    """What a grid run did."""

    finished: list[dict] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    folder: str = ""  # the results folder: an absolute path or a URI
    tables: tuple[str, ...] = ()  # where its runs and rounds tables are
    experiment_id: str = ""  # the MLflow experiment


def _resolved(planned: PlannedRun) -> dict:
    """The run's resolved hyperparameters (resolved.*) and its problem's constants (problem.*)."""
    job = planned.job
    return {**{f"resolved.{k}": v for k, v in job.optimizer.hyperparameters().items()},
            **{f"problem.{k}": v for k, v in job.problem.constants().items()}}


def start_run(planned: PlannedRun, tracker: MlflowTracker, folder: str) -> str:
    """Opens a run's MLflow run with its parameters, display name and tags.

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
                         {key: str(value) for key, value in tags.items() if value is not None})


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _row(planned: PlannedRun, mlflow_run_id: str, started_at: datetime.datetime) -> dict:
    """The runs row's columns that every attempt has, finished or failed: every config
    field (null where unset), the resolved hyperparameters, constants and provenance."""
    from pipeline import results

    run = planned.config
    return {**dict.fromkeys(results.RUN_KINDS), "run_id": run.run_id, "mlflow_run_id": mlflow_run_id,
            "config_hash": run.config_hash, **{field: run[field] for field in FIELDS}, **run.flat(),
            **_resolved(planned), "started_at": started_at, "ended_at": _now(), **results.provenance(),
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


def record_run(planned: PlannedRun, records: list, wall_s: float, mlflow_run_id: str, started_at: datetime.datetime,
               tracker: MlflowTracker, store: ParquetStore, waiting=contextlib.nullcontext) -> dict:
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
        (the grid's `_Interrupts.raising_new`: nothing is written before it).

    Returns:
      The run's runs.parquet row.

    Raises:
      RuntimeError: the executed rounds differ from the planned ledger, or the separate
        re-derivation gave no answer in its time (pipeline.accounting.rederive.TIMEOUT_S).
      LedgerError: the ledger, re-derived in a separate process, differs or misses the target.
      FloatingPointError: a NaN or infinity in the results.
    """
    from pipeline import results
    from pipeline.tracking import FINISHED
    from pipeline.tracking.column_table import ColumnTable

    run, job = planned.config, planned.job
    columns = {name: records.column(name) for name in engine.ROUND_COLUMNS}
    ledger = ledger_of_groups(job, _call_runs(records))
    ledger_json = ledger.to_dict()
    if ledger_json != planned.ledger.to_dict():
        raise RuntimeError("the executed rounds differ from the planned ledger")
    with waiting():
        _check_rederived(planned, ledger, ledger_json)
    epsilon_spent, delta_spent = ledger.spent_columns()
    measured = _measured_columns(job, records)
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
    epsilon, delta = ledger.total()
    row = {**_row(planned, mlflow_run_id, started_at), "final_excess_loss": records[-1].excess_loss,
           "epsilon": epsilon, "delta": delta, **planned.rates, "status": FINISHED, "wall_s": wall_s,
           **{f"final_{column}": getattr(records[-1], column) for column in measured}}
    files = {
        "ledger.json": json.dumps(ledger_json, indent=2).encode(),
        "config.yaml": yaml.safe_dump(run.nested(), sort_keys=False).encode(),
    }
    store.stage(run.run_id, files)
    tracker.log_rounds(mlflow_run_id, rounds, METRIC_COLUMNS + tuple(c for c in HELDOUT_COLUMNS if c in measured))
    summary = {key: row[key] for key in ("final_excess_loss", "epsilon", "delta", "wall_s", *theory.THEORY_COLUMNS,
                                         *(f"final_{column}" for column in measured))}
    # MLflow gets the run's rounds as an artifact too; the results folder holds them once, in its rounds table.
    tracker.finish(mlflow_run_id, summary, files, rounds, None)  # still RUNNING: not done until the row is written
    store.commit(row, rounds, results.KINDS)  # this row marks the run done
    tracker.end(mlflow_run_id, "FINISHED")
    return row


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


def execute_run(planned: PlannedRun, tracker: MlflowTracker, store: ParquetStore) -> dict:
    """Executes one planned run in this process and records it.

    Returns:
      The run's runs.parquet row.

    Raises:
      Whatever the run raised, after marking it failed in both sinks.
    """
    began, started_at = time.perf_counter(), _now()
    mlflow_run_id = start_run(planned, tracker, store.shown)
    try:
        run = planned.config
        _, records = engine.execute(planned.job, run["execution.backend"], run["execution.shards"])
        return record_run(planned, records, time.perf_counter() - began, mlflow_run_id, started_at, tracker, store)
    except BaseException as error:
        fail_run(planned, time.perf_counter() - began, mlflow_run_id, started_at, tracker, store, error)
        raise


def _clock(seconds: float) -> str:
    """mm:ss, or --:-- for an unknown time."""
    return "--:--" if seconds != seconds else f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def _progress(done: int, total: int, failed: int, elapsed: float) -> str:
    """A text progress bar with an ETA from the mean time per run so far."""
    width = 24
    filled = width * done // max(total, 1)
    eta = elapsed / done * (total - done) if done else float("nan")
    return (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} ({failed} failed) elapsed {_clock(elapsed)} "
            f"ETA {_clock(eta)}")


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm, Kubernetes, `ray job stop`): handled as Ctrl-C is, so the
    runs in flight are marked failed; the CLI exits 143 (128 + 15) instead of 130."""


def _interrupt(signum: int) -> KeyboardInterrupt:
    """The exception a signal stops the grid with."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class _Interrupts:
    """Ctrl-C and SIGTERM during a grid: raised at once only while the driver waits for a run
    (`raising`), where nothing is half-written; anywhere else (starting a run, recording one
    in MLflow and Parquet, marking runs failed) remembered and raised at the next run
    boundary by `check`. A KeyboardInterrupt inside MLflow's log_batch left SQLite's write
    transaction open, so marking the runs failed met "database is locked" and they stayed
    RUNNING. A signal raised where Python swallows it (a finalizer: "Exception ignored in …")
    is remembered too.

    Used as a context manager: the handlers are installed inside it (on the main thread only,
    and not for a signal the caller ignores, as SIGINT in a background job).

    A Python handler runs only when the main thread runs Python: one blocked in native code
    (a Ray call on a Ray the signal killed with the driver, as Slurm's SIGTERM to the process
    group does: Ray's client waits 60 s for its GCS, then ends the process, exit 1) never sees
    it. So the signal also wakes a watchdog thread (`signal.set_wakeup_fd`), which, if the grid
    has not stopped STUCK_S seconds later, calls `on_stuck` (the runs in flight marked failed)
    and ends the process with the signal's status.

    Args:
      on_stuck: called from the watchdog with the signal's exception, before the process ends.
    """

    STUCK_S = 30.0

    def __init__(self, on_stuck: Callable[[BaseException], None] = lambda stop: None):
        self.arrived: list[int] = []
        self._raising = False
        self._previous: dict = {}
        self._on_stuck = on_stuck
        self._stopped = threading.Event()
        self._wakeup: tuple[int, int] | None = None  # (our write end, the wakeup fd it replaced)

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handler)
            if self._previous:
                read_end, write_end = os.pipe()
                os.set_blocking(write_end, False)
                self._wakeup = (write_end, signal.set_wakeup_fd(write_end, warn_on_full_buffer=False))
                threading.Thread(target=self._watch, args=(read_end,), name="signal-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        for signum, action in self._previous.items():
            signal.signal(signum, action)
        if self._wakeup is not None:
            write_end, replaced = self._wakeup
            signal.set_wakeup_fd(replaced)
            os.close(write_end)  # the watchdog's read ends

    def _watch(self, read_end: int) -> None:
        """Waits for a signal; ends the process if the grid has not stopped STUCK_S seconds after it."""
        try:
            while True:
                data = os.read(read_end, 1)
                if not data:
                    return  # the grid ended
                if data[0] in (signal.SIGINT, signal.SIGTERM):
                    break
            if self._stopped.wait(self.STUCK_S):
                return
            stop = _interrupt(data[0])
            with contextlib.suppress(BaseException):
                self._on_stuck(stop)
            sys.stderr.write(f"{'terminated (SIGTERM)' if isinstance(stop, Terminated) else 'interrupted'}: the driver "
                             f"was blocked {self.STUCK_S:.0f} s in native code (a Ray the signal ended): the runs in "
                             "flight are marked failed; rerun the same command to resume\n")
            sys.stderr.flush()
            os._exit(128 + data[0])
        finally:
            os.close(read_end)

    def _handler(self, signum, frame) -> None:
        self.arrived.append(signum)
        if self._raising:
            raise _interrupt(signum)

    @contextlib.contextmanager
    def raising(self):
        """A block in which a signal raises at once (the driver waiting for its runs)."""
        self.check()
        with self.raising_new():
            yield

    @contextlib.contextmanager
    def raising_new(self):
        """A block in which a new signal raises at once, one that came before still waiting for the
        next run boundary (the wait for a run's separate ledger check, before it is recorded)."""
        self._raising = True
        try:
            yield
        finally:
            self._raising = False

    def check(self) -> None:
        """Raises the first signal that arrived, if any."""
        if self.arrived:
            raise _interrupt(self.arrived[0])


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

    # Planning calibrates every protocol (a numerical search per round shape): say so.
    say(f"planning {len(runs)} runs (protocol calibration and ledgers)")
    planned = plan_all(runs, say)
    first = runs[0]
    store.check_writable()
    store.check_readable()
    tracker = MlflowTracker(first["tracking.mlflow_uri"], first["experiment"])
    store.lock()  # creates the folder: the first write
    finished = store.finished_runs()  # under the lock: no other run writes it now
    tracker.reconcile(store.shown, finished)  # MLflow runs a killed process left RUNNING
    done = set(finished)
    summary = GridSummary(folder=store.shown, tables=store.table_addresses(), experiment_id=tracker.experiment_id)
    todo = []
    for item in planned:
        if item.config.run_id in done:
            summary.skipped.append(item.config.run_id)
        else:
            todo.append(item)
            done.add(item.config.run_id)  # a repeated run in the grid runs once
    if summary.skipped:
        say(f"{len(summary.skipped)} runs already finished, skipped")
    executor = engine.executor(first["execution.backend"], _RunProgress(say))
    say(engine.describe_backend(first["execution.backend"]))  # which Ray: a cluster only if RAY_ADDRESS names it
    started: dict[str, tuple[PlannedRun, str, float, datetime.datetime]] = {}
    began = time.perf_counter()
    queue = list(todo)

    def progress(note: str) -> None:
        completed = len(summary.finished) + len(summary.failed)
        say(f"{_progress(completed, len(todo), len(summary.failed), time.perf_counter() - began)}  {note}")

    def fail_in_flight(stop: BaseException) -> None:  # also the watchdog's, if the main thread is blocked
        for item, mlflow_run_id, run_began, started_at in list(started.values()):
            fail_run(item, time.perf_counter() - run_began, mlflow_run_id, started_at, tracker, store, stop)

    with _Interrupts(fail_in_flight) as interrupts:
        try:
            while queue or executor.in_flight():
                while queue and executor.in_flight() < executor.capacity():
                    item = queue.pop(0)
                    store.check_held()  # a driver that lost the folder starts no MLflow run in it (LeaseLost)
                    try:
                        mlflow_run_id = start_run(item, tracker, store.shown)
                    except Exception as err:  # the store refused it (full, read-only, unreachable): it fails alone
                        # An attempt id of its own: the row's part file must not collide with another's.
                        fail_run(item, 0.0, f"{NOT_STARTED}-{uuid.uuid4().hex}", _now(), tracker, store, err)
                        summary.failed.append((item.config.run_id, error_line(err)))
                        progress(f"{item.config.run_id} FAILED to start its MLflow run: {error_line(err)}")
                        continue
                    started[item.config.run_id] = (item, mlflow_run_id, time.perf_counter(), _now())
                    executor.submit(item.config.run_id, item.job, item.config["execution.shards"])
                if not executor.in_flight():  # every run left failed to start
                    continue
                with interrupts.raising():
                    run_id, outcome = executor.next_done()
                item, mlflow_run_id, run_began, started_at = started[run_id]  # in flight until recorded or failed
                wall_s = time.perf_counter() - run_began
                try:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    _, records, wall_s = outcome
                    row = record_run(item, records, wall_s, mlflow_run_id, started_at, tracker, store,
                                     interrupts.raising_new)
                    del started[run_id]
                    summary.finished.append(row)
                    note = f"{run_id} {item.config['optimizer.name']} n={item.config['n_users']} " \
                           f"eps={item.config['privacy.epsilon']:g} {item.config['privacy.accounting']}: " \
                           f"excess loss {row['final_excess_loss']:.4g}"
                except Exception as err:  # one failing run does not stop the grid
                    if isinstance(err, LeaseLost):  # the folder is lost: nothing more is written, the grid stops
                        raise
                    del started[run_id]
                    fail_run(item, wall_s, mlflow_run_id, started_at, tracker, store, err)
                    summary.failed.append((run_id, f"{type(err).__name__}: {err}"))
                    note = f"{run_id} FAILED: {type(err).__name__}: {err}"
                progress(note)
                interrupts.check()  # a Ctrl-C or SIGTERM while this run was recorded stops the grid here
        except BaseException as stop:  # an interrupt (or the driver's own failure): the runs in flight stop with it
            if isinstance(stop, LeaseLost):
                stop.in_flight = sorted(started)  # the CLI lists them
            # The sinks first: a SIGTERM to the process group (Slurm) killed a local Ray with the driver,
            # and cancelling on a dead Ray blocks for its 60 s GCS timeout, then ends the process.
            fail_in_flight(stop)  # further signals wait for this
            _bounded(executor.cancel)
            raise
        finally:
            _bounded(executor.close)
    return summary


def _bounded(call: Callable[[], None], seconds: float = 5.0) -> None:
    """call(), given `seconds` to return (in a daemon thread): the executor's clean-up talks to Ray,
    which may be gone, and nothing the grid recorded depends on it."""
    def quietly() -> None:
        with contextlib.suppress(Exception):  # a Ray already gone: there is nothing left to clean
            call()

    worker = threading.Thread(target=quietly, name="executor-clean-up", daemon=True)
    worker.start()
    worker.join(seconds)


class _RunProgress:
    """Says how far a long run got (rounds done, rate, ETA): first after RUN_NOTE_S seconds of
    the run, then every RUN_NOTE_S seconds, so that short runs stay one line each.

    Args:
      say: where the lines go.
    """

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self._noted: dict = {}  # run id → the run's seconds at its last line

    def __call__(self, run_id: str, done: int, total: int, seconds: float) -> None:
        if seconds - self._noted.get(run_id, 0.0) < RUN_NOTE_S or done >= total:
            return
        self._noted[run_id] = seconds
        rate = done / seconds
        eta = (total - done) / rate if rate > 0 else float("nan")
        self.say(f"  {run_id}: round {done:,} of {total:,} ({done / total:.0%}), {rate:,.0f} rounds/s, "
                 f"ETA {_clock(eta)}")


def plan_all(runs: list[RunConfig], say: Callable[[str], None]) -> list[PlannedRun]:
    """Plans runs in order, saying how far it got every PLANNING_NOTE_S seconds (a grid of
    thousands of points calibrates for minutes).

    Raises:
      ConfigError: the first rule a run breaks.
    """
    return _noted(runs, plan_run, "planning", say)


def _noted(items: list, work: Callable, what: str, say: Callable[[str], None]) -> list:
    """[work(item) for item in items], saying how far it got every PLANNING_NOTE_S seconds."""
    done, began = [], time.perf_counter()
    noted = began
    for item in items:
        done.append(work(item))
        if time.perf_counter() - noted >= PLANNING_NOTE_S and len(done) < len(items):
            noted = time.perf_counter()
            say(f"{what}: {_progress(len(done), len(items), 0, noted - began).replace(' (0 failed)', '')}")
    return done


def planned_ledgers(runs: list[RunConfig], say: Callable[[str], None] = lambda line: None) -> dict:
    """The planned ledger of every grid point, without running anything.

    Args:
      runs: the expanded config.
      say: where planning's progress goes (the `ledger` command: stderr).

    Returns:
      {"runs": [{config_hash, seeds, config, hyperparameters, ledger}, ...]}.
    """
    points: dict[str, dict] = {}
    distinct = list({run.config_hash: run for run in runs}.values())
    planned_points = {planned.config.config_hash: planned for planned in plan_all(distinct, say)}
    # Both modes' totals of each point: seconds a point for tight curves, so it says how far it got too.
    ledgers = dict(zip(planned_points, _noted(list(planned_points.values()), lambda p: p.ledger.to_dict(),
                                              "ledgers", say)))
    for run in runs:
        if run.config_hash in points:
            points[run.config_hash]["seeds"].append(run.seed)
            continue
        planned = planned_points[run.config_hash]
        points[run.config_hash] = {
            "config_hash": run.config_hash,
            "seeds": [run.seed],
            "config": {k: v for k, v in run.values.items() if not k.startswith(("tracking.", "execution."))},
            "hyperparameters": planned.job.optimizer.hyperparameters(),
            "ledger": ledgers[run.config_hash],
        }
    return {"runs": list(points.values())}


