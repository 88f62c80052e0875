"""Plans a run before any work: its optimizer, problem and protocol built from the config,
every cross-field rule checked, each round's protocol call calibrated, and its ledger composed
and held to the target (the budget guard). Bad input is one ConfigError naming the field."""
from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Callable, Iterable

from pipeline import engine, plugins, work
from pipeline.accounting.ledger import LedgerError, PrivacyLedger, UnsupportedEventError
from pipeline.config import MAX_ROUNDS, PLUGIN_MAX_ROUNDS, PLUGIN_SECTIONS, RECORD, ROUNDS_REASON, RunConfig
from pipeline.errors import ConfigError
from pipeline.memory import check_memory
from pipeline.optimizers import theory
from pipeline.optimizers.base import DATA, OVERRIDES
from pipeline.problems.base import check_constants
from pipeline.problems.records import ONE_EACH, parse_records_per_user
from pipeline.progress import noted
from pipeline.protocols import PROTOCOLS
from pipeline.protocols.base import BINARY, REAL, PlanError


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """A validated run: its config, the job the engine runs, its planned ledger and
    its theoretical and reference rates (runs.parquet's rate columns)."""

    config: RunConfig
    job: engine.RunJob
    ledger: PrivacyLedger
    rates: dict[str, float]
    estimate_s: float | None = None  # an upper estimate of its compute on one core (pipeline/work.py)


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


PLUGIN_FIELDS = {"optimizer": "optimizer.name", "problem": "problem.name", "protocol": "privacy.protocol"}


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
    check_memory(run)  # before the problem, whose fixed points alone can be O(d)
    problem = plugins.resolve("problem", run["problem.name"])(
        dim=run["problem.dim"], radius=run["problem.radius"], **_options(run, "problem"))
    problem = problem.for_run(run)
    check_constants(problem, run["problem.name"])  # a plug-in's constant left out is one line, not a traceback
    protocol = plugins.resolve("protocol", run["privacy.protocol"])(run["privacy.accounting"],
                                                                    **_options(run, "privacy"))
    _check_pairing(run, cls, protocol, problem)
    records = _records(run, cls, protocol, problem)
    optimizer = _optimizer(run, cls, problem, protocol, records)
    # Smoothed optimizers run on their problem's Moreau envelope (optimizer.problem).
    job = engine.RunJob(optimizer.problem, optimizer, protocol, run.seed, run["n_users"],
                        run["execution.block_size"], run["execution.simulation"], run["privacy.honest_fraction"] or 1.0,
                        **records, **_records_per_round(run, optimizer, records))
    per_group = protocol.plans_per_budget()
    cap = MAX_ROUNDS if per_group else PLUGIN_MAX_ROUNDS
    if job.schedule.rounds > cap:  # a plug-in's planning below visits every round: refuse before it starts
        field = next((f for f in ("optimizer.rounds", "optimizer.batch_size") if run[f] is not None), "n_users")
        raise ConfigError(field, run[field], f"plans {job.schedule.rounds} rounds, above the cap of {cap} "
                                             f"({ROUNDS_REASON})")
    check_memory(run, job)
    ledger = _guarded_ledger(run, job, _planned_calls(run, job, per_group))
    try:  # the rates are recorded with the run: a combination whose rate cannot be planned is refused now
        rates = theory_rates(run, job)
    except ValueError as error:  # a PlanError names its field; a calibration that fails is the budget's
        field = error.field if isinstance(error, PlanError) else "privacy.epsilon"
        raise ConfigError(field, run[field], f"the theoretical rate: {error}") from None
    return PlannedRun(run, job, ledger, rates, work.estimate(run, job))  # its calls planned: the path is known


def _optimizer(run: RunConfig, cls, problem, protocol, records: dict):
    """The optimizer class's instance for the run (`from_config`), at record level where the run asks.

    Raises:
      ConfigError: a field the optimizer refuses, or a budget no noise level meets.
    """
    try:
        optimizer = cls.from_config(
            problem, run["n_users"], run["privacy.epsilon"], run["privacy.delta"],
            **{key: run[f"optimizer.{key}"] for key in OVERRIDES if key in cls.overrides},
            accounting=run["privacy.accounting"], parameters=run["optimizer.parameters"], protocol=protocol,
            **_options(run, "optimizer"),
        )
        return optimizer.at_record_level(protocol, records["records_min"]) if records["per_record"] else optimizer
    except ConfigError:
        raise
    except PlanError as error:
        raise ConfigError(error.field, run[error.field], str(error)) from None
    except (ValueError, ArithmeticError) as error:  # no noise level meets the budget, or its formulas overflow
        raise ConfigError("privacy.epsilon", run["privacy.epsilon"],
                          f"optimizer {cls.name} cannot be calibrated at (ε, δ) = ({run['privacy.epsilon']:g}, "
                          f"{run['privacy.delta']:g}) with n = {run['n_users']}: {error}; raise privacy.epsilon "
                          "or privacy.delta, or use more users") from None


def _planned_calls(run: RunConfig, job: engine.RunJob, per_group: bool) -> list:
    """Every round's protocol call, planned (and remembered for the shards: Protocol.planned) as
    ledger_of_groups takes them: once per group where the plan depends on its budget alone.

    Raises:
      ConfigError: a call the protocol cannot make (PlanError's field) or a budget it cannot meet.
    """
    protocol, schedule, dim = job.protocol, job.schedule, job.problem.dim
    calls, first_round = [], 0  # (first round, rounds, first user, stride, users, params)
    for group in schedule.groups:  # a group's rounds share one budget: planned once where that is known
        for round_index in ([first_round] if per_group else range(first_round, first_round + group.rounds)):
            plan = schedule.plan(round_index)
            try:
                params = protocol.plan(plan, dim)
                protocol.check_call(params, job.simulation == engine.LITERAL)
                protocol.remember(plan, dim, params)  # shards reuse it (Protocol.planned)
            except ValueError as error:  # a PlanError names its field; an unmet budget is the accounting's
                field = error.field if isinstance(error, PlanError) else "privacy.accounting"
                raise ConfigError(field, run[field], f"round {round_index}: {error}") from None
            calls.append((round_index, group.rounds if per_group else 1, plan.first_user, group.user_stride,
                          group.users, params))
        first_round += group.rounds
    return calls


def _guarded_ledger(run: RunConfig, job: engine.RunJob, calls: list) -> PrivacyLedger:
    """The planned ledger of the calls, held to the run's target (the budget guard).

    Raises:
      ConfigError: events the ledger cannot compose, or a private run's ledger above its target.
    """
    try:
        ledger = ledger_of_groups(job, calls)
    except LedgerError as error:  # the protocol's events, or the optimizer's schedule, break the ledger's rules
        field = "privacy.protocol" if isinstance(error, UnsupportedEventError) else "optimizer.name"
        raise ConfigError(field, run[field], str(error)) from None
    if job.protocol.model != "none" and not ledger.within_target():  # a non-private run spends ε = ∞ by design
        epsilon, delta = ledger.total()
        # Lemma B.6 sizes ε0 with ln(1/δ) but composes with ln((T+1)/δ): at large δ the split overspends.
        advice = "use a smaller delta" if run["privacy.accounting"] == "paper" else "the calibration could not meet it"
        raise ConfigError("privacy.delta", run["privacy.delta"],
                          f"the planned ledger spends (ε, δ) = ({epsilon:.4g}, {delta:.3g}), above the target "
                          f"({run['privacy.epsilon']:g}, {run['privacy.delta']:g}); {advice}")
    return ledger


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


def plan_all(runs: list[RunConfig], say: Callable[[str], None]) -> list[PlannedRun]:
    """Plans runs in order, saying how far it got every PLANNING_NOTE_S seconds (a grid of
    thousands of points calibrates for minutes).

    Raises:
      ConfigError: the first rule a run breaks.
    """
    return noted(runs, plan_run, "planning", say)


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
    ledgers = dict(zip(planned_points, noted(list(planned_points.values()), lambda p: p.ledger.to_dict(),
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
