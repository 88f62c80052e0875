"""`python -m pipeline audit CONFIG`: an empirical lower bound on the ε of one call
of the run's own protocol, from a distinguishing attack on worst-case neighbours.

The attack runs the protocol object the run uses (a plug-in included) exactly as
the engine does: `plan` → `encode_block` per block of the run's block size, on
the users the round's sampling picks → `merge` → `finish` (or, in literal mode,
`encode_messages` → shuffle → `count_messages`), then `audit_statistic`. The
neighbours are the protocol's `audit_pair`. Trials run in batches with their own
generators keyed by (seed, neighbour, first trial), so the bound is the same in
process or on Ray, on any number of workers.

For any (ε, δ)-DP mechanism and any test, TPR ≤ e^ε·FPR + δ, so
ε ≥ ln((TPR − δ)/FPR). With Clopper–Pearson bounds (TPR from below, FPR from
above, each at confidence 1 − α/2; a union bound, so the two need not be
independent), this is a lower bound on ε that holds with confidence 1 − α.
The threshold is chosen on one half of the trials and evaluated on the other,
so choosing it does not bias the bound.

At record level (`privacy.unit: record`, users holding m records, each answering
user sending s of them) the neighbours are records: every user holds m records at the
protocol's base input, except user 0, whose other m − 1 records stand out at the moved
input, and whose record 0 moves. The trial samples users as the round does and each
answering user's s records as the shards do (`problems.records.choose_records`), so an
accountant that lets client sampling hide a record whose client stands out is caught
(issue 41: the withdrawn nested route).

A run whose rounds are compiled (`fused_interactive.encodes_compiled`: its protocol's
`fused_encoding`) sends its users' messages with the compiled encoding, not with encode_block:
the audit attacks that code.
Where the call is every user of the population sending once (no sampling, user level, exact
mode) and the encoding gives block partials (`counts`), each trial's blocks are encoded by the
kernel a fully interactive round runs (`fused_interactive.encoded_blocks`: the kernel's norms,
clip and randomizer, from Philox streams keyed by (seed, neighbour) and the trial), then merged
and finished by the protocol as the engine does (its analyzer's noise, where it adds one, drawn
in Python as a fully interactive round's); other calls, which no compiled run makes, and
encodings without block partials run encode_block. The report names which (`call.code`).

The claimed ε is what the ledger reports for that one call: a PrivacyLedger
holding the call's event alone, in the run's accounting mode and unit.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np
from scipy import special, stats

from pipeline import engine
from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.accounting.ledger import PrivacyLedger
from pipeline.engine.fused_interactive import block_encoding, encoded_blocks, encodes_compiled
from pipeline.engine.tasks import map_tasks
from pipeline.errors import ConfigError
from pipeline.problems.records import choose_records
from pipeline.protocols.base import PlanError, Protocol, RoundPlan

BATCH = 25_000  # trials per task: fixed, so that results do not depend on the workers
_THRESHOLDS = 200  # candidate thresholds, from the median to the last few trials of the tail
_PROBE = 2**40  # the generator key of the two trials that check the hooks in the driver (no batch starts there)


@dataclasses.dataclass(frozen=True)
class AuditedCall:
    """One protocol call as the audit runs it.

    Attributes:
      protocol: the run's protocol object.
      round_plan: the round (population, sampling, budget).
      dim: d.
      params: the call's parameters (`protocol.plan`).
      block_size: users per engine block.
      literal: materialize messages (supports_literal) instead of block totals.
      pair: the neighbouring inputs, each (d, population) (`protocol.audit_pair`), or at record
        level (d, population·m), user u's records in columns u·m … u·m + m − 1.
      records: (m, s) at record level: the records each user holds and sends; None at user level.
      encoding: the protocol's fused encoding, which encodes the call's blocks as a compiled run's
        do (encoded_blocks); None: the protocol's encode_block.
    """

    protocol: Protocol
    round_plan: RoundPlan
    dim: int
    params: Any
    block_size: int
    literal: bool
    pair: tuple[np.ndarray, np.ndarray]
    records: tuple[int, int] | None = None
    encoding: Any = None

    @property
    def code(self) -> str:
        """The code that encodes the users' messages, in words."""
        if self.encoding is not None:
            return f"compiled: {type(self.encoding).__module__}.{type(self.encoding).__qualname__}"
        return f"numpy: {type(self.protocol).__name__}.{'encode_messages' if self.literal else 'encode_block'}"

    @property
    def neighbours(self) -> str:
        """What the pair is, in words."""
        if self.records is None:
            return f"{type(self.protocol).__name__}.audit_pair: users 1…n−1 alike, user 0 moved"
        return (f"record level: {type(self.protocol).__name__}.audit_pair's base input in every record of users "
                f"1…n−1, its moved input in user 0's other {self.records[0] - 1} records, user 0's record 0 moved")


def _record_pair(base: np.ndarray, moved: np.ndarray, held: int) -> tuple[np.ndarray, np.ndarray]:
    """The record-level neighbours from a user-level pair: user 0's other records stand out.

    Args:
      base, moved: (d, population), differing in column 0 only.
      held: m, the records each user holds.

    Returns:
      (base, moved), each (d, population·m), differing in column 0 only.
    """
    records = np.repeat(base, held, axis=1)
    records[:, 1:held] = moved[:, [0]]
    changed = records.copy()
    changed[:, 0] = moved[:, 0]
    return records, changed


def audited_call(protocol: Protocol, round_plan: RoundPlan, dim: int, block_size: int = 4096,
                 literal: bool = False, params: Any = None, compiled: bool = False) -> AuditedCall:
    """The call the audit attacks, with the refusals checked before any trial.

    Args:
      protocol: the protocol object.
      round_plan: the round.
      dim: d.
      block_size: users per engine block.
      literal: the run's simulation is literal.
      params: the call's parameters (default: protocol.planned(round_plan, dim)).
      compiled: the run sends this call's messages with the protocol's fused encoding
        (fused_interactive.encodes_compiled): the audit does too where it gives block partials
        (see the module docstring).

    Returns:
      The call.

    Raises:
      ConfigError: the protocol cannot be audited, or refuses the pair; robust rounds
        (dropouts are not simulated).
    """
    if not protocol.supports_audit:
        raise ConfigError("privacy.protocol", protocol.name, f"cannot be audited: {protocol.audit_refusal}")
    if round_plan.honest_fraction < 1.0:
        raise ConfigError("privacy.honest_fraction", round_plan.honest_fraction,
                          "the audit does not simulate robust-mode dropouts")
    params = protocol.planned(round_plan, dim) if params is None else params
    try:
        base, moved = protocol.audit_pair(round_plan, dim)
    except (PlanError, ValueError) as err:
        hint = f" (it names {err.field})" if isinstance(err, PlanError) else ""
        raise ConfigError("privacy.protocol", protocol.name,
                          f"refuses the audit's neighbouring pair: {err}{hint}") from None
    expected = (dim, round_plan.population)
    if base.shape != expected or moved.shape != expected or not (base[:, 1:] == moved[:, 1:]).all():
        raise ConfigError("privacy.protocol", protocol.name, f"audit_pair must return two {expected} arrays "
                          "that differ in column 0 only")
    if not (np.isfinite(base).all() and np.isfinite(moved).all()):
        raise ConfigError("privacy.protocol", protocol.name, "audit_pair returned a NaN or infinite input")
    if np.array_equal(base, moved):
        raise ConfigError("privacy.protocol", protocol.name, "audit_pair returned the same inputs twice: an attack "
                          "on identical neighbours bounds nothing")
    records = None
    if round_plan.per_record:
        records = (round_plan.records_min, round_plan.records_per_round or round_plan.records_min)
        base, moved = _record_pair(base, moved, records[0])
    encoding = None
    if compiled and not literal and records is None and round_plan.sampling == "all":
        encoding = block_encoding(protocol, params)
    return AuditedCall(protocol, round_plan, dim, params, block_size, literal,
                       (np.ascontiguousarray(base, dtype=np.float64), np.ascontiguousarray(moved, dtype=np.float64)),
                       records, encoding)


def _answering(plan: RoundPlan, rng: np.random.Generator) -> np.ndarray | None:
    """The users of the population who answer one trial of the round, by its sampling law
    (None: all of them)."""
    if plan.sampling == "uniform":
        return np.sort(rng.choice(plan.population, plan.sample_size, replace=False))
    if plan.sampling == "poisson":
        return np.flatnonzero(rng.random(plan.population) < plan.rate)
    return None


def _sent_records(call: AuditedCall, users: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """The record columns answering users send (record level): s of each one's m, as the shards choose them."""
    held, sent = call.records
    users = np.arange(call.round_plan.population) if users is None else users
    within, owner = choose_records(rng, np.full(users.size, held), sent)
    return users[owner] * held + within


def _release(call: AuditedCall, inputs: np.ndarray, chosen: np.ndarray | None, rng: np.random.Generator,
             work: Any, trial: int) -> Any:
    """One run of the call, as the engine makes it: the analyzer's statistic.

    Args:
      call: the call.
      inputs: one neighbour's inputs, (d, population).
      chosen: the sorted positions of the users who answer (None: all of them).
      rng: the trial's generator (the analyzer's noise; and the messages' unless compiled).
      work: the protocol's workspace; compiled, the Philox key of the neighbour's streams.
      trial: the trial's index (compiled: its streams' round word).

    Raises:
      ValueError: the compiled encoding cannot finish a block.
    """
    protocol, params = call.protocol, call.params
    if call.encoding is not None:
        partials = encoded_blocks(call.encoding, inputs, call.block_size, work, trial)
        if partials is None:
            raise ValueError("the compiled encoding could not finish a block (a value not finite or a fixed-point "
                             "overflow)")
        return protocol.finish(params, protocol.merge(partials), rng)
    if call.literal:
        labels, bits = protocol.encode_messages(params, (inputs if chosen is None else inputs[:, chosen]).copy(), rng)
        order = rng.permutation(labels.size)  # the shuffler
        return protocol.count_messages(params, labels[order], bits[order])
    partials = []
    block = call.block_size * (call.records[0] if call.records else 1)  # a block's users' records
    for first in range(0, inputs.shape[1], block):  # every block of the population, as the engine
        stop = first + block
        if chosen is None:
            chunk = inputs[:, first:stop].copy()  # the randomizer may overwrite its chunk
        else:  # a sampled round: the block's sampled users, possibly none
            low, high = np.searchsorted(chosen, (first, stop))
            chunk = inputs[:, chosen[low:high]]
        partials.append(protocol.encode_block(params, [chunk] if chunk.shape[1] else [], rng, work))
    return protocol.finish(params, protocol.merge(partials), rng)


def _trial_statistics(call: AuditedCall, neighbour: int, first_trial: int, trials: int, seed: int) -> np.ndarray:
    """`audit_statistic` of `trials` independent runs of the call on one neighbour (a task).

    Args:
      call: the call.
      neighbour: 0 (base) or 1 (moved).
      first_trial: the batch's first trial (keys its generator).
      trials: how many.
      seed: the audit's seed.

    Returns:
      float64 array of length `trials`.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, neighbour, first_trial]))
    inputs = call.pair[neighbour]
    per_user = call.records[0] if call.records else 1
    if call.encoding is not None:  # the neighbour's streams, one round word a trial
        work = np.random.SeedSequence([seed, neighbour]).generate_state(2, np.uint64)
    else:
        work = call.protocol.workspace(min(call.block_size * per_user, inputs.shape[1]), call.dim)
    out = np.empty(trials)
    for trial in range(trials):
        chosen = _answering(call.round_plan, rng)
        if call.records is not None:
            chosen = _sent_records(call, chosen, rng)
        out[trial] = _statistic(call, inputs, chosen, rng, work, first_trial + trial)
    return out


def _statistic(call: AuditedCall, inputs: np.ndarray, chosen: np.ndarray | None, rng: np.random.Generator,
               work: Any, trial: int) -> float:
    """`audit_statistic` of one release: a finite real number.

    Raises:
      ConfigError: the protocol's hooks exited the process or raised, or the statistic is not a
        finite real number (a NaN threshold passes every test; the audit would bound nothing).
    """
    name = call.protocol.name
    try:
        value = call.protocol.audit_statistic(call.params, _release(call, inputs, chosen, rng, work, trial))
    except (Exception, SystemExit) as error:  # plug-in code: its failure is the config's to fix, in one line
        raise ConfigError("privacy.protocol", name, f"its encoding or audit_statistic stopped the audit: "
                          f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise ConfigError("privacy.protocol", name, f"audit_statistic must return a real number, got a "
                          f"{type(value).__name__}")
    if not math.isfinite(value):
        raise ConfigError("privacy.protocol", name, f"audit_statistic returned {value}: it must be finite")
    return float(value)


def _epsilon_lower_bound(positive_sorted: np.ndarray, negative_sorted: np.ndarray, threshold: float, upward: bool,
                         delta: float, alpha: float) -> float:
    """ln((TPR_low − δ)/FPR_high) of the test "statistic ≥ threshold" (upward) or "statistic <
    threshold" (not upward), where TPR is its rate on `positive_sorted` and FPR on `negative_sorted`
    (0 where it says nothing)."""
    trials = positive_sorted.size

    def hits(values: np.ndarray) -> int:
        below = int(np.searchsorted(values, threshold, "left"))
        return trials - below if upward else below

    false_positives, true_positives = hits(negative_sorted), hits(positive_sorted)
    fpr_high = 1.0 if false_positives == trials else stats.beta.ppf(1 - alpha / 2, false_positives + 1,
                                                                     trials - false_positives)
    tpr_low = 0.0 if true_positives == 0 else stats.beta.ppf(alpha / 2, true_positives, trials - true_positives + 1)
    if tpr_low - delta <= 0.0 or fpr_high <= 0.0:
        return 0.0
    return max(0.0, math.log((tpr_low - delta) / fpr_high))


def split_audit(null: np.ndarray, alternative: np.ndarray, delta: float, alpha: float) -> dict:
    """The bound of one threshold test on the statistic, chosen on the first half of the trials
    and measured on the second.

    DP bounds both directions, so both are tried: "statistic ≥ t" for the alternative (the
    moved neighbour) against the null, and "statistic < t" for the null against the alternative;
    a release whose likelihood ratio is unbounded on one side shows only there.

    Args:
      null, alternative: the statistic's values under the two neighbours (larger under the alternative).
      delta: the δ at which ε is bounded.
      alpha: 1 − confidence.

    Returns:
      {epsilon_lower_bound, threshold, test, trials_per_neighbour, confidence}.
    """
    half = len(null) // 2
    first_null, first_alternative = np.sort(null[:half]), np.sort(alternative[:half])
    # Tail probabilities from 1/2 to a few trials, in both tails: a large ε shows only far in a tail.
    tails = np.geomspace(0.5, min(0.5, 3.0 / max(half, 1)), _THRESHOLDS)
    pooled = np.concatenate([first_null, first_alternative])
    tests = [(float(t), True) for t in np.unique(np.quantile(pooled, 1.0 - tails))] + \
            [(float(t), False) for t in np.unique(np.quantile(pooled, tails))]

    def bound(test: tuple[float, bool], nulls: np.ndarray, alternatives: np.ndarray) -> float:
        threshold, upward = test
        positive, negative = (alternatives, nulls) if upward else (nulls, alternatives)
        return _epsilon_lower_bound(positive, negative, threshold, upward, delta, alpha)

    chosen = max(tests, key=lambda test: bound(test, first_null, first_alternative))
    return {
        "epsilon_lower_bound": bound(chosen, np.sort(null[half:]), np.sort(alternative[half:])),
        "threshold": chosen[0],
        "test": "moved if statistic >= threshold" if chosen[1] else "base if statistic < threshold",
        "trials_per_neighbour": len(null) - half,
        "confidence": 1 - alpha,
    }


def attack(call: AuditedCall, delta: float, trials: int = 20_000, alpha: float = 0.05, seed: int = 0,
           backend: str = "local") -> dict:
    """Runs the distinguishing attack on one call.

    Args:
      call: the call (`audited_call`).
      delta: the δ at which ε is bounded (the ledger's).
      trials: runs per neighbour (half choose the threshold, half measure).
      alpha: 1 − confidence of the bound.
      seed: the attack's randomness.
      backend: "local" or "ray" (the same bound).

    Returns:
      {epsilon_lower_bound, threshold, trials_per_neighbour, confidence, neighbours}.
    """
    for neighbour in (0, 1):  # a hook that fails, exits or returns no number fails here, in one line
        _trial_statistics(call, neighbour, _PROBE, 2, seed)
    batches = [(call, neighbour, first, min(BATCH, trials - first), seed)
               for neighbour in (0, 1) for first in range(0, trials, BATCH)]
    values = map_tasks(_trial_statistics, batches, backend, travellers=(call.protocol,))
    half = len(values) // 2
    null, alternative = np.concatenate(values[:half]), np.concatenate(values[half:])
    return {**split_audit(null, alternative, delta, alpha), "neighbours": call.neighbours}


def claimed_budget(protocol: Protocol, params: Any, round_plan: RoundPlan, block_size: int, accounting: str,
                   unit: str = "user") -> tuple[float, float]:
    """What the ledger reports for this one call: a ledger holding its event alone.

    Returns:
      (ε, δ).
    """
    ledger = PrivacyLedger(SEQUENTIAL, round_plan.epsilon, round_plan.delta, accounting=accounting, unit=unit)
    ledger.record(0, round_plan.first_user, round_plan.stop_user, protocol.event(params, block_size))
    return ledger.total()


def audit_run(planned, trials: int, seed: int = 0, alpha: float = 0.05) -> dict:
    """Audits a planned run's first call (the run's protocol, sampling, blocks, simulation and backend).

    Args:
      planned: planning.PlannedRun.
      trials: runs per neighbour.
      seed: the attack's randomness.
      alpha: 1 − confidence.

    Returns:
      {protocol, call, ledger, audit, passed}: passed when the lower bound is at most the ledger's ε.

    Raises:
      ConfigError: the call cannot be audited, or the run has no private call; before any trial.
    """
    job, config = planned.job, planned.config
    round_plan = job.schedule.plan(0)
    params = job.protocol.planned(round_plan, job.problem.dim)
    call = audited_call(job.protocol, round_plan, job.problem.dim, job.block_size, job.simulation == engine.LITERAL,
                        params, encodes_compiled(job, round_plan, params))
    mode = job.protocol.accounting
    epsilon, delta = claimed_budget(job.protocol, call.params, round_plan, job.block_size, mode, job.unit)
    if not math.isfinite(epsilon):
        raise ConfigError("privacy.protocol", job.protocol.name,
                          "the config has no private call to audit (its first call's ledger ε is ∞)")
    found = attack(call, delta, trials, alpha, seed, config["execution.backend"])
    return {
        "protocol": job.protocol.name,
        "call": {"round": round_plan.round, "users": round_plan.users, "population": round_plan.population,
                 "sampling": round_plan.sampling, "dim": call.dim, "simulation": job.simulation,
                 "code": call.code, "parameters": _plain(call.params)},
        "ledger": {"accounting": mode, "unit": job.unit, "epsilon": epsilon, "delta": delta},
        "audit": found,
        "passed": found["epsilon_lower_bound"] <= epsilon,
    }


def _plain(value: Any) -> Any:
    """A call's parameters as JSON-ready values (dataclasses as dicts, arrays as lists)."""
    if dataclasses.is_dataclass(value):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def audit_shuffle_gaussian(users: int, sigma: float, delta: float, trials: int = 20_000, alpha: float = 0.05,
                           seed: int = 0) -> dict:
    """Attacks the shuffle Gaussian mechanism's multiset release (seed 004, Def. 4), which the
    engine's protocol sums before the analyzer sees it: a check of the accountant, not of a run.

    Every user releases x_i + N(0, σ²) and the analyzer sees the shuffled multiset.
    Neighbours: all x_i = 0, against x_1 = 1 (sensitivity 1, Theorem 1's convention).
    The statistic is the likelihood ratio of the two, Σ_i exp(y_i/σ²) (a symmetric
    function of the multiset, so the shuffle hides nothing it uses).

    Args:
      users: n.
      sigma: σ.
      delta: the δ at which ε is bounded.
      trials: runs per neighbour.
      alpha: 1 − confidence of the bound.
      seed: the attack's randomness.

    Returns:
      {epsilon_lower_bound, threshold, trials_per_neighbour, confidence, neighbours}.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, users]))
    outputs = rng.normal(0.0, sigma, size=(2, trials, users))
    outputs[1, :, 0] += 1.0
    statistic = special.logsumexp(outputs / sigma**2, axis=2)
    return {**split_audit(statistic[0], statistic[1], delta, alpha), "neighbours": "all users at 0 vs one user at 1"}
